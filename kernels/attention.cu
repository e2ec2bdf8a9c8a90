// attention.cu — decode attention over an f16 KV cache (GQA, sliding window), split over
// the KV length (flash-decoding) with a fixed-order combine; and the KV-cache store.
//
// Layouts: q and out are [ntok][nh][hd] f32; a layer's K and V caches are each a pool of
// paged blocks ([block][nkv][KV_BLOCK][hd] f16, common.cuh), read through the sequence's
// block table bt (position p of KV head h at kv_off(bt, h, p)); cap (the positions the
// table covers) bounds the positions; hd a multiple of 8, <= ATT_MAX_HD; pos[t] is token t's position (it
// attends to positions max(0, pos-window+1) ..= pos, window == 0 meaning no window). Query
// head h reads KV head h / G, G = nh / nkv. score = (q . k) * scale, then
// softcap * tanh(score / softcap) when softcap > 0.
//
// attn_partial: grid (nkv, splits, ntok), blockDim.x = 32 * nw (nw <= ATT_WARPS warps,
// chosen by the host from G alone). Split s covers the absolute positions
// [s*ATT_SPLIT, (s+1)*ATT_SPLIT) — fixed boundaries, so a token's arithmetic depends only on
// its position, never on how many tokens share the launch. One block serves the G query
// heads of its KV head: the block stages the split's K and V rows in shared memory with
// 16-byte loads, all in flight at once (tiles of `tp` rows, tp = 64, or 32 when hd > 128),
// read once from memory for all G heads; warp w takes heads w, w + nw, ... For its head a
// lane scores the tile's rows lane, lane + 32 (q . k in dim order), the warp updates an
// online softmax per tile (max and sum by the fixed butterflies), and lane l accumulates
// dims l*hd/32 .. (l+1)*hd/32 - 1 (head sizes 64, 128, 256; else dims l, l + 32, ...) of
// sum p_j v_j in row order. The G heads' q are loaded while the first tile's loads are in
// flight (G * hd <= ATT_WARPS * ATT_MAX_HD). It writes the unnormalised output and
// (max, sum) per (token, head, split) of its token's window splits (below).
// Splits past pos write nothing. A token with a single split (pos < ATT_SPLIT) writes out
// directly (the same values as merging its one split).
// attn_combine: grid (nh, ntok), one warp per block; merges splits first(t) ..= last(t)
// in order.
// Window splits: token t's are first(t) ..= last(t) (first_split, last_split; first 0
// without a window), and block y serves the absolute split first(t) + y, so the host's grid
// needs only the most splits a window can touch (ops::window_splits; max_splits without a
// window), whatever the position. A split before first(t), wholly outside the window, is
// not run (it would write (-inf, 0), which a merge skips). The scratch is indexed by
// absolute split (max_splits per token and head).
// With `count` non-null, attn_partial also does the combine: each block that wrote its
// split bumps count[t*nh + kvh*G] (after a fence); the block that brings it to the number of
// window splits of its token merges them for its G heads (the same function as attn_combine, so
// the same bits, whichever block comes last) and resets the counter to 0 for the next
// launch. count must start at 0 (the scratch is zeroed once at allocation). One launch
// instead of two.
#include "common/common.cuh"
#include "common/mma.cuh"
#include "common/tc.cuh"
#if ATT_SPLIT != KV_BLOCK
#error "a split must be one KV block"
#endif

#ifndef ATT_SPLIT
#define ATT_SPLIT 64
#endif
#ifndef ATT_WARPS
#define ATT_WARPS 8
#endif
#ifndef ATT_MAX_HD
#define ATT_MAX_HD 256
#endif
#define ATT_DPL (ATT_MAX_HD / 32)
// Heads per warp at most (G <= ATT_WARPS * ATT_HPW; the host checks).
#define ATT_HPW 2
// Rows of a K (or V) tile at most, and the shared staging of both tiles in halves (rows
// padded by 8 halves: conflict-free 16-byte reads of 8 consecutive rows).
#define ATT_TP 64
#define ATT_KV_SMEM 17408
// 16-byte loads per thread per staging round, for K and for V each.
#define ATT_LDN 8

__device__ __forceinline__ float h_lo(u32 x) { return f16_to_f32((u16)(x & 0xffffu)); }
__device__ __forceinline__ float h_hi(u32 x) { return f16_to_f32((u16)(x >> 16)); }

// The first split of position p's window (the split of max(0, p - window + 1); 0 without a
// window) and its last split (p's, within a layout of max_splits splits).
__device__ __forceinline__ int first_split(int p, int window) {
    return window > 0 ? max(0, p - window + 1) / ATT_SPLIT : 0;
}
__device__ __forceinline__ int last_split(int p, int max_splits) {
    return min(p / ATT_SPLIT, max_splits - 1);
}

// Merge splits s0 .. s0+ns-1 of (token t, head h) into out, by one warp. Lane l owns dims
// l, l + 32, ...; the splits' (max, sum) pairs are loaded 32 at a time (one per lane) and
// broadcast; L = sum l_s e_s and acc = sum o_s e_s run as fmaf chains in split order (empty
// splits, l_s = 0, skipped), e_s = exp(m_s - M), out = acc / L. Loads bypass L1 (the
// partials may come from other blocks of the same launch) and do not depend on each other,
// so they are in flight together.
// The callers pass s0 = first(t), ns = last(t) - first(t) + 1: the same bits as merging
// splits 0 ..= last(t). The splits before first(t) lie wholly before the window (split s <
// first(t) ends at (s + 1) * ATT_SPLIT <= p - window + 1), so they had l_s = 0: they took no
// part in M (a max over the splits with l_s > 0, order-free), and the L and acc chains
// skipped them; the chains over the remaining splits run in the same increasing order from
// the same 0, and e_s is the same function of (m_s, M). The 32-split chunks start at s0
// rather than 0, which moves no term of either chain.
__device__ __forceinline__ void combine_head_warp(const float* __restrict__ part_o,
                                                  const float* __restrict__ part_ml,
                                                  float* __restrict__ out, int t, int h,
                                                  int nh, int hd, int max_splits, int s0,
                                                  int ns) {
    const int lane = threadIdx.x & 31;
    const u64 base = ((u64)t * nh + h) * max_splits + s0;
    float M = ASSAY_NEG_INF;
    for (int s = lane; s < ns; s += 32) {
        const float2 ml = __ldcg(reinterpret_cast<const float2*>(part_ml + 2 * (base + s)));
        if (ml.y > 0.f) M = fmaxf(M, ml.x);
    }
    M = warp_max(M);
    float L = 0.f;
    float acc[ATT_DPL];
#pragma unroll
    for (int j = 0; j < ATT_DPL; j++) acc[j] = 0.f;
    for (int s0 = 0; s0 < ns; s0 += 32) {
        const int cn = min(32, ns - s0);
        float2 ml = make_float2(ASSAY_NEG_INF, 0.f);
        if (lane < cn) ml = __ldcg(reinterpret_cast<const float2*>(part_ml + 2 * (base + s0 + lane)));
        const float e = ml.y > 0.f ? expf(ml.x - M) : 0.f;
        const float* po = part_o + (base + s0) * hd;
#pragma unroll 8
        for (int i = 0; i < cn; i++) {
            const float ls = __shfl_sync(0xffffffffu, ml.y, i);
            const float es = __shfl_sync(0xffffffffu, e, i);
            float ov[ATT_DPL];
#pragma unroll
            for (int j = 0; j < ATT_DPL; j++) {
                const int d = lane + 32 * j;
                ov[j] = d < hd ? __ldcg(po + (u64)i * hd + d) : 0.f;
            }
            if (ls > 0.f) {
                L = fmaf(ls, es, L);
#pragma unroll
                for (int j = 0; j < ATT_DPL; j++) acc[j] = fmaf(ov[j], es, acc[j]);
            }
        }
    }
#pragma unroll
    for (int j = 0; j < ATT_DPL; j++) {
        const int d = lane + 32 * j;
        if (d < hd) out[((u64)t * nh + h) * hd + d] = acc[j] / L;
    }
}

// Query values staged per thread at the block's start: G * hd <= ATT_WARPS * ATT_MAX_HD, and
// 4 warps only for G <= 4 (so G * hd <= 4 * ATT_MAX_HD): the host's rules
// (select::choose_attention, select::attention_warps).
#define ATT_QPT (ATT_WARPS * ATT_MAX_HD / (ATT_WARPS * 32))

// Lane l's DPL dims of a V row: dims l*DPL .. l*DPL+DPL-1 (DPL > 0; one 4/8/16-byte shared
// load), or l, l+32, ... (DPL == 0: any head size).
template <int DPL>
__device__ __forceinline__ void v_accum(const u16* __restrict__ vr, int lane, int hd, float pj,
                                        float* o) {
    if constexpr (DPL == 2) {
        const u32 v = *reinterpret_cast<const u32*>(vr + lane * 2);
        o[0] = fmaf(pj, h_lo(v), o[0]);
        o[1] = fmaf(pj, h_hi(v), o[1]);
    } else if constexpr (DPL == 4) {
        const uint2 v = *reinterpret_cast<const uint2*>(vr + lane * 4);
        o[0] = fmaf(pj, h_lo(v.x), o[0]);
        o[1] = fmaf(pj, h_hi(v.x), o[1]);
        o[2] = fmaf(pj, h_lo(v.y), o[2]);
        o[3] = fmaf(pj, h_hi(v.y), o[3]);
    } else if constexpr (DPL == 8) {
        const uint4 v = *reinterpret_cast<const uint4*>(vr + lane * 8);
        o[0] = fmaf(pj, h_lo(v.x), o[0]);
        o[1] = fmaf(pj, h_hi(v.x), o[1]);
        o[2] = fmaf(pj, h_lo(v.y), o[2]);
        o[3] = fmaf(pj, h_hi(v.y), o[3]);
        o[4] = fmaf(pj, h_lo(v.z), o[4]);
        o[5] = fmaf(pj, h_hi(v.z), o[5]);
        o[6] = fmaf(pj, h_lo(v.w), o[6]);
        o[7] = fmaf(pj, h_hi(v.w), o[7]);
    } else {
#pragma unroll
        for (int jj = 0; jj < ATT_DPL; jj++) {
            const int d = lane + 32 * jj;
            if (d < hd) o[jj] = fmaf(pj, f16_to_f32(vr[d]), o[jj]);
        }
    }
}

// The dim of lane `lane`'s j-th output value.
template <int DPL>
__device__ __forceinline__ int v_dim(int lane, int j) {
    return DPL > 0 ? lane * DPL + j : lane + 32 * j;
}

// One (KV head, split, token) block of attn_partial for head size hd (DPL = hd / 32 when
// hd is 64, 128 or 256, else 0). skv, sq, sp: the kernel's shared staging.
template <int DPL>
__device__ __forceinline__ void attn_split(
    const float* __restrict__ q, const u16* __restrict__ kc, const u16* __restrict__ vc, int blk,
    float* __restrict__ part_o, float* __restrict__ part_ml, int nh, int nkv, int hd, int cap,
    float scale, float softcap, int max_splits, unsigned int* __restrict__ count,
    float* __restrict__ out, int kvh, int s, int first, int t, int p, int lo, int hi, u16* skv,
    float* sq, float (*sp)[ATT_TP], int* last) {
    constexpr int NO = DPL > 0 ? DPL : ATT_DPL;
    const int split_lo = s * ATT_SPLIT;
    const int G = nh / nkv;
    const int nw = blockDim.x >> 5;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int rs = hd + 8;
    const int tp = 2 * ATT_TP * rs <= ATT_KV_SMEM ? ATT_TP : 32;
    const int ch = hd >> 3;
    u16* sk = skv;
    u16* sv = skv + tp * rs;
    // The split's pool block blk: rows split_lo .. split_lo + ATT_SPLIT - 1 of KV head kvh.
    const u64 boff = ((u64)blk * nkv + kvh) * ATT_SPLIT * hd;
    const u16* kb = kc + boff;
    const u16* vb = vc + boff;

    // The G heads' q (contiguous), loaded now and stored once the first tile's loads are
    // in flight.
    const int nq = G * hd;
    const float* qg = q + ((u64)t * nh + (u64)kvh * G) * hd;
    float qv[ATT_QPT];
#pragma unroll
    for (int u = 0; u < ATT_QPT; u++) {
        const int idx = threadIdx.x + u * (int)blockDim.x;
        qv[u] = idx < nq ? qg[idx] : 0.f;
    }
    bool q_staged = false;

    float m[ATT_HPW], l[ATT_HPW], o[ATT_HPW][NO];
#pragma unroll
    for (int r = 0; r < ATT_HPW; r++) {
        m[r] = ASSAY_NEG_INF;
        l[r] = 0.f;
#pragma unroll
        for (int j = 0; j < NO; j++) o[r][j] = 0.f;
    }

    // The split's rows [lo, hi) in tiles of tp rows at fixed offsets from split_lo.
    for (int tile_lo = split_lo; tile_lo < split_lo + ATT_SPLIT; tile_lo += tp) {
        const int r0 = max(lo, tile_lo), r1 = min(hi, tile_lo + tp);
        if (r0 >= r1) continue;  // block-uniform
        const int nchunk = (r1 - r0) * ch;
        __syncthreads();  // the previous tile's readers are done
        for (int b0 = 0; b0 < nchunk; b0 += ATT_LDN * (int)blockDim.x) {
            uint4 rk[ATT_LDN], rv[ATT_LDN];
#pragma unroll
            for (int u = 0; u < ATT_LDN; u++) {
                const int idx = min(b0 + u * (int)blockDim.x + (int)threadIdx.x, nchunk - 1);
                const int row = idx / ch, c = idx - row * ch;
                const u64 off = (u64)(r0 - split_lo + row) * hd + c * 8;
                rk[u] = __ldg(reinterpret_cast<const uint4*>(kb + off));
                rv[u] = __ldg(reinterpret_cast<const uint4*>(vb + off));
            }
            if (!q_staged) {
                q_staged = true;
#pragma unroll
                for (int u = 0; u < ATT_QPT; u++) {
                    const int idx = threadIdx.x + u * (int)blockDim.x;
                    if (idx < nq) sq[idx] = qv[u];
                }
            }
#pragma unroll
            for (int u = 0; u < ATT_LDN; u++) {
                const int idx = b0 + u * (int)blockDim.x + (int)threadIdx.x;
                if (idx < nchunk) {
                    const int row = idx / ch, c = idx - row * ch;
                    const int so = (r0 - tile_lo + row) * rs + c * 8;
                    *reinterpret_cast<uint4*>(sk + so) = rk[u];
                    *reinterpret_cast<uint4*>(sv + so) = rv[u];
                }
            }
        }
        __syncthreads();
#pragma unroll
        for (int r = 0; r < ATT_HPW; r++) {
            const int hh = warp + r * nw;
            if (hh >= G) continue;  // warp-uniform
            const float* qs = sq + hh * hd;
            float sc[ATT_TP / 32];
            float mt = ASSAY_NEG_INF;
#pragma unroll
            for (int u = 0; u < ATT_TP / 32; u++) {
                const int jr = lane + 32 * u;  // row within the tile
                const int j = tile_lo + jr;
                sc[u] = ASSAY_NEG_INF;
                if (jr < tp && j >= r0 && j < r1) {
                    const u16* kr = sk + jr * rs;
                    float a = 0.f;
                    for (int c = 0; c < ch; c++) {
                        const uint4 kk = *reinterpret_cast<const uint4*>(kr + c * 8);
                        const float4 q0 = *reinterpret_cast<const float4*>(qs + c * 8);
                        const float4 q1 = *reinterpret_cast<const float4*>(qs + c * 8 + 4);
                        a = fmaf(q0.x, h_lo(kk.x), a);
                        a = fmaf(q0.y, h_hi(kk.x), a);
                        a = fmaf(q0.z, h_lo(kk.y), a);
                        a = fmaf(q0.w, h_hi(kk.y), a);
                        a = fmaf(q1.x, h_lo(kk.z), a);
                        a = fmaf(q1.y, h_hi(kk.z), a);
                        a = fmaf(q1.z, h_lo(kk.w), a);
                        a = fmaf(q1.w, h_hi(kk.w), a);
                    }
                    float sv_ = a * scale;
                    if (softcap > 0.f) sv_ = softcap * tanhf(sv_ / softcap);
                    sc[u] = sv_;
                    mt = fmaxf(mt, sv_);
                }
            }
            mt = warp_max(mt);
            const float mn = fmaxf(m[r], mt);
            const float corr = expf(m[r] - mn);
            float ps = 0.f;
#pragma unroll
            for (int u = 0; u < ATT_TP / 32; u++) {
                const int jr = lane + 32 * u;
                const float pj = sc[u] == ASSAY_NEG_INF ? 0.f : expf(sc[u] - mn);
                if (jr < tp) sp[warp][jr] = pj;
                ps += pj;
            }
            ps = warp_sum(ps);
            l[r] = fmaf(l[r], corr, ps);
            m[r] = mn;
            __syncwarp();
#pragma unroll
            for (int jj = 0; jj < NO; jj++) o[r][jj] *= corr;
            for (int jr = r0 - tile_lo; jr < r1 - tile_lo; jr++)
                v_accum<DPL>(sv + jr * rs, lane, hd, sp[warp][jr], o[r]);
            __syncwarp();
        }
    }

    // The token's last split, and its window splits first ..= ls: one block of this launch
    // writes each.
    const int ls = last_split(p, max_splits);
    const int ns = ls - first + 1;
#pragma unroll
    for (int r = 0; r < ATT_HPW; r++) {
        const int hh = warp + r * nw;
        if (hh >= G) continue;
        const int h = kvh * G + hh;
        if (count != nullptr && ls == 0) {
            // The token's only split: the same values as merging it (its weight is
            // exp(0) = 1 and fmaf(v, 1, 0) = v, up to the sign of a zero).
#pragma unroll
            for (int jj = 0; jj < NO; jj++) {
                const int d = v_dim<DPL>(lane, jj);
                if (DPL > 0 || d < hd) out[((u64)t * nh + h) * hd + d] = o[r][jj] / l[r];
            }
            continue;
        }
        const u64 slot = ((u64)t * nh + h) * max_splits + s;
#pragma unroll
        for (int jj = 0; jj < NO; jj++) {
            const int d = v_dim<DPL>(lane, jj);
            if (DPL > 0 || d < hd) part_o[slot * hd + d] = o[r][jj];
        }
        if (lane == 0) {
            part_ml[2 * slot] = m[r];
            part_ml[2 * slot + 1] = l[r];
        }
    }
    if (count == nullptr || ls == 0) return;
    __threadfence();
    __syncthreads();
    unsigned int* cnt = count + (u64)t * nh + (u64)kvh * G;
    if (threadIdx.x == 0) {
        const unsigned int done = atomicAdd(cnt, 1u);
        *last = done == (unsigned int)(ns - 1);
    }
    __syncthreads();
    if (!*last) return;
    __threadfence();
    for (int hh = warp; hh < G; hh += nw)
        combine_head_warp(part_o, part_ml, out, t, kvh * G + hh, nh, hd, max_splits, first, ns);
    if (threadIdx.x == 0) *cnt = 0u;
}

// The pool block of split blockIdx.y in table bt of a cache of cap positions; 0 for a split
// past the table (the block then returns before reading). It is the block's split when the
// token's window starts in split 0 (always without a window); attn_entry reads the table
// again otherwise (the position is known only after the wait).
__device__ __forceinline__ int split_block(const int* __restrict__ bt, int cap) {
    const int s = blockIdx.y;
    return s * ATT_SPLIT < cap ? __ldg(bt + s) : 0;
}

// The kernel body after the PDL calls: the block's rows, the shared staging, the split.
template <int DPL>
__device__ __forceinline__ void attn_entry(const float* __restrict__ q, const u16* __restrict__ kc,
                                           const u16* __restrict__ vc,
                                           const int* __restrict__ bt, int blk,
                                           const int* __restrict__ pos,
                                           float* __restrict__ part_o, float* __restrict__ part_ml,
                                           int nh, int nkv, int hd, int cap, int window,
                                           float scale, float softcap, int max_splits,
                                           unsigned int* __restrict__ count,
                                           float* __restrict__ out) {
    const int kvh = blockIdx.x, t = blockIdx.z;
    const int p = pos[t];
    // Block y serves the token's window split first + y (y itself without a window).
    const int first = first_split(p, window);
    const int s = first + (int)blockIdx.y;
    const int split_lo = s * ATT_SPLIT;
    if (split_lo > p || p >= cap) return;
    if (first > 0) blk = __ldg(bt + s);  // s * ATT_SPLIT <= p < cap: inside the table
    int lo = split_lo;
    if (window > 0 && p - window + 1 > lo) lo = p - window + 1;
    const int hi = min(split_lo + ATT_SPLIT, p + 1);
    __shared__ __align__(16) u16 skv[ATT_KV_SMEM];
    __shared__ __align__(16) float sq[ATT_WARPS * ATT_MAX_HD];
    __shared__ float sp[ATT_WARPS][ATT_TP];
    __shared__ int last;
    attn_split<DPL>(q, kc, vc, blk, part_o, part_ml, nh, nkv, hd, cap, scale, softcap, max_splits,
                    count, out, kvh, s, first, t, p, lo, hi, skv, sq, sp, &last);
}

// Entry points: attn_partial for any head size (a multiple of 8), attn_partial_d64 / _d128 /
// _d256 for those head sizes (each dim of V in one shared load per row; separate kernels so
// that each gets its own register allocation). The host picks by head size
// (select::attention_entry); the results are the same function of the inputs for a given
// head size whichever block computes them.
extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32)
    attn_partial(const float* __restrict__ q, const u16* __restrict__ kc,
                 const u16* __restrict__ vc, const int* __restrict__ bt, const int* __restrict__ pos,
                 float* __restrict__ part_o, float* __restrict__ part_ml, int nh, int nkv,
                 int hd, int cap, int window, float scale, float softcap, int max_splits,
                 unsigned int* __restrict__ count, float* __restrict__ out) {
    // The split's pool block (the table is written by the host, never by a kernel: read
    // before the wait).
    const int blk = split_block(bt, cap);
    pdl_wait();
    pdl_trigger();
    attn_entry<0>(q, kc, vc, bt, blk, pos, part_o, part_ml, nh, nkv, hd, cap, window, scale,
                  softcap, max_splits, count, out);
}

extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32)
    attn_partial_d64(const float* __restrict__ q, const u16* __restrict__ kc,
                     const u16* __restrict__ vc, const int* __restrict__ bt,
                     const int* __restrict__ pos,
                     float* __restrict__ part_o, float* __restrict__ part_ml, int nh, int nkv,
                     int hd, int cap, int window, float scale, float softcap, int max_splits,
                     unsigned int* __restrict__ count, float* __restrict__ out) {
    // The split's pool block (the table is written by the host, never by a kernel: read
    // before the wait).
    const int blk = split_block(bt, cap);
    pdl_wait();
    pdl_trigger();
    attn_entry<2>(q, kc, vc, bt, blk, pos, part_o, part_ml, nh, nkv, 64, cap, window, scale,
                  softcap, max_splits, count, out);
}

extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32)
    attn_partial_d128(const float* __restrict__ q, const u16* __restrict__ kc,
                      const u16* __restrict__ vc, const int* __restrict__ bt,
                     const int* __restrict__ pos,
                      float* __restrict__ part_o, float* __restrict__ part_ml, int nh, int nkv,
                      int hd, int cap, int window, float scale, float softcap, int max_splits,
                      unsigned int* __restrict__ count, float* __restrict__ out) {
    // The split's pool block (the table is written by the host, never by a kernel: read
    // before the wait).
    const int blk = split_block(bt, cap);
    pdl_wait();
    pdl_trigger();
    attn_entry<4>(q, kc, vc, bt, blk, pos, part_o, part_ml, nh, nkv, 128, cap, window, scale,
                  softcap, max_splits, count, out);
}

extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32)
    attn_partial_d256(const float* __restrict__ q, const u16* __restrict__ kc,
                      const u16* __restrict__ vc, const int* __restrict__ bt,
                     const int* __restrict__ pos,
                      float* __restrict__ part_o, float* __restrict__ part_ml, int nh, int nkv,
                      int hd, int cap, int window, float scale, float softcap, int max_splits,
                      unsigned int* __restrict__ count, float* __restrict__ out) {
    // The split's pool block (the table is written by the host, never by a kernel: read
    // before the wait).
    const int blk = split_block(bt, cap);
    pdl_wait();
    pdl_trigger();
    attn_entry<8>(q, kc, vc, bt, blk, pos, part_o, part_ml, nh, nkv, 256, cap, window, scale,
                  softcap, max_splits, count, out);
}

// attn_rows, attn_rows_d64 / _d128 / _d256: attn_partial (with the combine in the launch,
// `count` non-null) for `ntok` query rows of `ntok` different sequences, each over its own
// cache: row t's K and V pools at kvp[3t] and kvp[3t+1], its block table at kvp[3t+2],
// covering caps[t] positions.
// The block (kvh, y, t) runs attn_entry with row t's pointers and capacity, the very code
// of attn_partial: q, out, the scratch slots and the counters are indexed by t as there,
// and max_splits (the layout of the scratch) must be at least ceil(caps[t] / ATT_SPLIT)
// for every row, so that a row's splits, and so its bits, are those of its one-row launch.
template <int DPL>
__device__ __forceinline__ void attn_rows_entry(const float* __restrict__ q,
                                                const u64* __restrict__ kvp,
                                                const int* __restrict__ caps,
                                                const int* __restrict__ pos,
                                                float* __restrict__ part_o,
                                                float* __restrict__ part_ml, int nh, int nkv,
                                                int hd, int window, float scale, float softcap,
                                                int max_splits, unsigned int* __restrict__ count,
                                                float* __restrict__ out) {
    const int t = blockIdx.z;
    // Row t's pools, table and capacity come from host-written tables: read before the wait.
    const u16* kc = reinterpret_cast<const u16*>(kvp[3 * t]);
    const u16* vc = reinterpret_cast<const u16*>(kvp[3 * t + 1]);
    const int cap = caps[t];
    const int* bt = reinterpret_cast<const int*>(kvp[3 * t + 2]);
    const int blk = split_block(bt, cap);
    pdl_wait();
    pdl_trigger();
    attn_entry<DPL>(q, kc, vc, bt, blk, pos, part_o, part_ml, nh, nkv, hd, cap, window, scale,
                    softcap, max_splits, count, out);
}

extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32)
    attn_rows(const float* __restrict__ q, const u64* __restrict__ kvp,
        const int* __restrict__ caps, const int* __restrict__ pos, float* __restrict__ part_o,
        float* __restrict__ part_ml, int nh, int nkv, int hd, int window, float scale,
        float softcap, int max_splits, unsigned int* __restrict__ count,
        float* __restrict__ out) {
    attn_rows_entry<0>(q, kvp, caps, pos, part_o, part_ml, nh, nkv, hd, window, scale,
                        softcap, max_splits, count, out);
}

extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32)
    attn_rows_d64(const float* __restrict__ q, const u64* __restrict__ kvp,
        const int* __restrict__ caps, const int* __restrict__ pos, float* __restrict__ part_o,
        float* __restrict__ part_ml, int nh, int nkv, int hd, int window, float scale,
        float softcap, int max_splits, unsigned int* __restrict__ count,
        float* __restrict__ out) {
    attn_rows_entry<2>(q, kvp, caps, pos, part_o, part_ml, nh, nkv, 64, window, scale,
                        softcap, max_splits, count, out);
}

extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32)
    attn_rows_d128(const float* __restrict__ q, const u64* __restrict__ kvp,
        const int* __restrict__ caps, const int* __restrict__ pos, float* __restrict__ part_o,
        float* __restrict__ part_ml, int nh, int nkv, int hd, int window, float scale,
        float softcap, int max_splits, unsigned int* __restrict__ count,
        float* __restrict__ out) {
    attn_rows_entry<4>(q, kvp, caps, pos, part_o, part_ml, nh, nkv, 128, window, scale,
                        softcap, max_splits, count, out);
}

extern "C" __global__ void __launch_bounds__(ATT_WARPS * 32)
    attn_rows_d256(const float* __restrict__ q, const u64* __restrict__ kvp,
        const int* __restrict__ caps, const int* __restrict__ pos, float* __restrict__ part_o,
        float* __restrict__ part_ml, int nh, int nkv, int hd, int window, float scale,
        float softcap, int max_splits, unsigned int* __restrict__ count,
        float* __restrict__ out) {
    attn_rows_entry<8>(q, kvp, caps, pos, part_o, part_ml, nh, nkv, 256, window, scale,
                        softcap, max_splits, count, out);
}

extern "C" __global__ void attn_combine(const float* __restrict__ part_o,
                                        const float* __restrict__ part_ml,
                                        const int* __restrict__ pos, float* __restrict__ out,
                                        int nh, int hd, int window, int max_splits) {
    pdl_wait();
    pdl_trigger();
    const int h = blockIdx.x, t = blockIdx.y;
    const int p = pos[t];
    const int first = first_split(p, window);
    combine_head_warp(part_o, part_ml, out, t, h, nh, hd, max_splits, first,
                      last_split(p, max_splits) - first + 1);
}

// kv_store: K and V of `ntok` tokens ([ntok][nkv][hd] f32) into a layer's f16 caches at
// their positions (round to nearest even). A position outside the cache writes nothing.
extern "C" __global__ void kv_store(const float* __restrict__ k, const float* __restrict__ v,
                                    u16* __restrict__ kc, u16* __restrict__ vc,
                                    const int* __restrict__ bt, const int* __restrict__ pos,
                                    int nkv, int hd, int cap) {
    pdl_wait();
    pdl_trigger();
    const int t = blockIdx.x;
    const int p = pos[t];
    if (p < 0 || p >= cap) return;
    const int n = nkv * hd;
    for (int idx = threadIdx.x; idx < n; idx += blockDim.x) {
        const int kvh = idx / hd, d = idx - kvh * hd;
        const u64 dst = kv_off(bt, kvh, p, nkv, hd) + d;
        kc[dst] = f32_to_f16(k[(u64)t * n + idx]);
        vc[dst] = f32_to_f16(v[(u64)t * n + idx]);
    }
}

#include "attention/prefill.cuh"
