// attention.cu — decode attention over an f16 KV cache (GQA, sliding window), split over
// the KV length (flash-decoding) with a fixed-order combine; and the KV-cache store.
//
// Layouts: q and out are [ntok][nh][hd] f32; a layer's K and V caches are each
// [nkv][cap][hd] f16; pos[t] is token t's position (it attends to positions
// max(0, pos-window+1) ..= pos, window == 0 meaning no window). Query head h reads KV
// head h / (nh / nkv). score = (q . k) * scale, then softcap * tanh(score / softcap) when
// softcap > 0.
//
// attn_partial: grid (nh, max_splits, ntok). Split s covers the absolute positions
// [s*ATT_SPLIT, (s+1)*ATT_SPLIT) — fixed boundaries, so a token's arithmetic depends only on
// its position, never on how many tokens share the launch. Warp w takes positions
// lo+w, lo+w+ATT_WARPS, ... with an online softmax (ATT_UNROLL positions' loads in
// flight at once, updates in position order); the warps are then merged in warp
// order. It writes the unnormalised output and (max, sum) per split; a split wholly
// outside the window writes (-inf, 0). Splits past pos write nothing.
// attn_combine: grid (nh, ntok); merges splits 0 .. pos/ATT_SPLIT in order.
// With `count` non-null, attn_partial also does the combine: each block that wrote its
// split bumps count[t*nh + h] (after a fence); the block that brings it to the number of
// splits of its token merges them (the same function as attn_combine, so the same bits,
// whichever block comes last) and resets the counter to 0 for the next launch. count
// must start at 0 (the scratch is zeroed once at allocation). One launch instead of two.
#include "common/common.cuh"

#ifndef ATT_SPLIT
#define ATT_SPLIT 256
#endif
#ifndef ATT_WARPS
#define ATT_WARPS 4
#endif
#ifndef ATT_MAX_HD
#define ATT_MAX_HD 256
#endif
#define ATT_DPL (ATT_MAX_HD / 32)
#ifndef ATT_UNROLL
#define ATT_UNROLL 4
#endif

__device__ __forceinline__ float ld_cg(const float* p) {
    float v;
    asm volatile("ld.global.cg.f32 %0, [%1];" : "=f"(v) : "l"(p));
    return v;
}

// Merge splits 0 .. ns-1 of (token t, head h) into out; threads stride over the dims.
// Loads bypass L1 (the partials may come from other blocks of the same launch).
__device__ __forceinline__ void combine_splits(const float* __restrict__ part_o,
                                               const float* __restrict__ part_ml,
                                               float* __restrict__ out, int t, int h, int nh,
                                               int hd, int max_splits, int ns) {
    const u64 base = ((u64)t * nh + h) * max_splits;
    float M = ASSAY_NEG_INF;
    for (int s = 0; s < ns; s++)
        if (ld_cg(part_ml + 2 * (base + s) + 1) > 0.f) M = fmaxf(M, ld_cg(part_ml + 2 * (base + s)));
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float L = 0.f, acc = 0.f;
        for (int s = 0; s < ns; s++) {
            const float ls = ld_cg(part_ml + 2 * (base + s) + 1);
            if (ls > 0.f) {
                const float e = expf(ld_cg(part_ml + 2 * (base + s)) - M);
                L += ls * e;
                acc += ld_cg(part_o + (base + s) * hd + d) * e;
            }
        }
        out[((u64)t * nh + h) * hd + d] = acc / L;
    }
}

extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32)
    attn_partial(const float* __restrict__ q, const u16* __restrict__ kc,
                 const u16* __restrict__ vc, const int* __restrict__ pos,
                 float* __restrict__ part_o, float* __restrict__ part_ml, int nh, int nkv,
                 int hd, int cap, int window, float scale, float softcap, int max_splits,
                 unsigned int* __restrict__ count, float* __restrict__ out) {
    pdl_wait();
    pdl_trigger();
    const int h = blockIdx.x, s = blockIdx.y, t = blockIdx.z;
    const int p = pos[t];
    const int split_lo = s * ATT_SPLIT;
    if (split_lo > p || p >= cap) return;
    int lo = split_lo;
    if (window > 0 && p - window + 1 > lo) lo = p - window + 1;
    const int hi = min(split_lo + ATT_SPLIT, p + 1);
    const int kvh = h / (nh / nkv);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float* qh = q + ((u64)t * nh + h) * hd;
    const u16* kb = kc + (u64)kvh * cap * hd;
    const u16* vb = vc + (u64)kvh * cap * hd;

    float qr[ATT_DPL], o[ATT_DPL];
#pragma unroll
    for (int j = 0; j < ATT_DPL; j++) {
        const int d = lane + 32 * j;
        qr[j] = d < hd ? qh[d] : 0.f;
        o[j] = 0.f;
    }
    float m = ASSAY_NEG_INF, l = 0.f;
    // ATT_UNROLL positions per round: their K and V loads are issued together, then the
    // online-softmax updates run one position after the other in position order (the same
    // arithmetic as one position per round).
    for (int j0 = lo + warp; j0 < hi; j0 += ATT_WARPS * ATT_UNROLL) {
        float sc[ATT_UNROLL];
        u16 vv[ATT_UNROLL][ATT_DPL];
#pragma unroll
        for (int u = 0; u < ATT_UNROLL; u++) {
            const int j = min(j0 + u * ATT_WARPS, hi - 1);
            const u16* kr = kb + (u64)j * hd;
            const u16* vr = vb + (u64)j * hd;
            float part = 0.f;
#pragma unroll
            for (int jj = 0; jj < ATT_DPL; jj++) {
                const int d = lane + 32 * jj;
                if (d < hd) {
                    part = fmaf(qr[jj], f16_to_f32(kr[d]), part);
                    vv[u][jj] = vr[d];
                }
            }
            sc[u] = part;
        }
#pragma unroll
        for (int u = 0; u < ATT_UNROLL; u++) sc[u] = warp_sum(sc[u]) * scale;
#pragma unroll
        for (int u = 0; u < ATT_UNROLL; u++) {
            if (j0 + u * ATT_WARPS < hi) {
                float scu = sc[u];
                if (softcap > 0.f) scu = softcap * tanhf(scu / softcap);
                const float mn = fmaxf(m, scu);
                const float corr = expf(m - mn);
                const float pw = expf(scu - mn);
                l = l * corr + pw;
#pragma unroll
                for (int jj = 0; jj < ATT_DPL; jj++) {
                    const int d = lane + 32 * jj;
                    if (d < hd) o[jj] = o[jj] * corr + pw * f16_to_f32(vv[u][jj]);
                }
                m = mn;
            }
        }
    }

    __shared__ float sm_m[ATT_WARPS], sm_l[ATT_WARPS];
    __shared__ float sm_o[ATT_WARPS][ATT_MAX_HD];
    if (lane == 0) { sm_m[warp] = m; sm_l[warp] = l; }
#pragma unroll
    for (int jj = 0; jj < ATT_DPL; jj++) {
        const int d = lane + 32 * jj;
        if (d < hd) sm_o[warp][d] = o[jj];
    }
    __syncthreads();
    float M = ASSAY_NEG_INF;
#pragma unroll
    for (int w = 0; w < ATT_WARPS; w++)
        if (sm_l[w] > 0.f) M = fmaxf(M, sm_m[w]);
    float e[ATT_WARPS];
    float L = 0.f;
#pragma unroll
    for (int w = 0; w < ATT_WARPS; w++) {
        e[w] = sm_l[w] > 0.f ? expf(sm_m[w] - M) : 0.f;
        L += sm_l[w] * e[w];
    }
    const u64 slot = ((u64)t * nh + h) * max_splits + s;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.f;
#pragma unroll
        for (int w = 0; w < ATT_WARPS; w++) acc += sm_o[w][d] * e[w];
        part_o[slot * hd + d] = acc;
    }
    if (threadIdx.x == 0) {
        part_ml[2 * slot] = M;
        part_ml[2 * slot + 1] = L;
    }
    if (count == nullptr) return;
    int ns = p / ATT_SPLIT + 1;
    if (ns > max_splits) ns = max_splits;
    __shared__ int last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned int done = atomicAdd(count + (u64)t * nh + h, 1u);
        last = done == (unsigned int)(ns - 1);
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    combine_splits(part_o, part_ml, out, t, h, nh, hd, max_splits, ns);
    if (threadIdx.x == 0) count[(u64)t * nh + h] = 0u;
}

extern "C" __global__ void attn_combine(const float* __restrict__ part_o,
                                        const float* __restrict__ part_ml,
                                        const int* __restrict__ pos, float* __restrict__ out,
                                        int nh, int hd, int max_splits) {
    pdl_wait();
    pdl_trigger();
    const int h = blockIdx.x, t = blockIdx.y;
    int ns = pos[t] / ATT_SPLIT + 1;
    if (ns > max_splits) ns = max_splits;
    combine_splits(part_o, part_ml, out, t, h, nh, hd, max_splits, ns);
}

// kv_store: K and V of `ntok` tokens ([ntok][nkv][hd] f32) into a layer's f16 caches at
// their positions (round to nearest even). A position outside the cache writes nothing.
extern "C" __global__ void kv_store(const float* __restrict__ k, const float* __restrict__ v,
                                    u16* __restrict__ kc, u16* __restrict__ vc,
                                    const int* __restrict__ pos, int nkv, int hd, int cap) {
    pdl_wait();
    pdl_trigger();
    const int t = blockIdx.x;
    const int p = pos[t];
    if (p < 0 || p >= cap) return;
    const int n = nkv * hd;
    for (int idx = threadIdx.x; idx < n; idx += blockDim.x) {
        const int kvh = idx / hd, d = idx - kvh * hd;
        const u64 dst = ((u64)kvh * cap + p) * hd + d;
        kc[dst] = f32_to_f16(k[(u64)t * n + idx]);
        vc[dst] = f32_to_f16(v[(u64)t * n + idx]);
    }
}
