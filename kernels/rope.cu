// rope.cu — rotary position embedding, in place, for `ntok` tokens of `nheads` heads.
//
// x is [ntok][nheads][head_dim] f32; the first n_rot dims of each head are rotated, the
// rest pass through. tab holds 2*(n_rot/2) doubles: inv[i] = base^(-2i/n_rot) (computed on
// the host) then fac[i] (frequency factors, 1 when absent). Pair i at position p turns by
// theta = p * freq_scale * inv[i] / fac[i], evaluated in f64 in exactly that order (as the
// CPU reference does); cos and sin are taken in f64 and rounded to f32; the rotation
// (x0 c - x1 s, x0 s + x1 c) is done in f32 without fused multiply-adds. Normal (GPT-J)
// style rotates dims (2i, 2i+1), NeoX style dims (i, i + n_rot/2).
#include "common/common.cuh"

extern "C" __global__ void rope(float* __restrict__ x, const int* __restrict__ pos,
                                const double* __restrict__ tab, double freq_scale, int nheads,
                                int head_dim, int n_rot, int neox) {
    pdl_wait();
    pdl_trigger();
    const int t = blockIdx.x;
    const double p = (double)pos[t];
    const int half = n_rot >> 1;
    float* xt = x + (u64)t * nheads * head_dim;
    for (int idx = threadIdx.x; idx < nheads * half; idx += blockDim.x) {
        const int h = idx / half, i = idx - h * half;
        const double theta = p * freq_scale * tab[i] / tab[half + i];
        double sd, cd;
        sincos(theta, &sd, &cd);
        const float s = (float)sd, c = (float)cd;
        float* xh = xt + (u64)h * head_dim;
        const int i0 = neox ? i : 2 * i;
        const int i1 = neox ? i + half : 2 * i + 1;
        const float a = xh[i0], b = xh[i1];
        xh[i0] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
        xh[i1] = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
    }
}

// rope_kv: the RoPE of q (nh heads) and of k (nkv heads) of `ntok` tokens, in place, with
// the very arithmetic of `rope` above (one table for both), then k (rotated) and v stored
// into a layer's f16 KV caches like attention.cu's kv_store (round to nearest even; a
// position outside the cache stores nothing, the rotations still happen). One launch for
// what takes rope(q), rope(k) and kv_store; every value gets the bits of those three.
// q is [ntok][nh][hd], k and v are [ntok][nkv][hd] f32; the caches paged pools read through
// the block table bt (common.cuh kv_off), covering cap positions.
// Grid (ntok, ceil(items / blockDim.x)); items per token, in this order: the nh*half pairs
// of q, the nkv*half pairs of k, the nkv*(hd - n_rot) dims of k past n_rot, the nkv*hd
// values of v.
// Item idx of token t (position pi) of rope_kv, into caches kc / vc of `cap` positions: the
// body of rope_kv, rope_kv_rows and rope_kv_pass. sc / cs: the token's sin and cos of pair
// i (as f32, from the f64 angle below) when a block computed them once for all heads
// (rope_kv_pass), else null (computed here): the same bits either way.
__device__ __forceinline__ void rope_kv_item(float* __restrict__ q, float* __restrict__ k,
                                             const float* __restrict__ v, u16* __restrict__ kc,
                                             u16* __restrict__ vc, const int* __restrict__ bt,
                                             int t, int pi, int idx,
                                             const double* __restrict__ tab, double freq_scale,
                                             int nh, int nkv, int hd, int n_rot, int neox,
                                             int cap, const float* sn, const float* cs) {
    const int half = n_rot >> 1;
    const int nq = nh * half, nk = nkv * half, nrest = nkv * (hd - n_rot), nv = nkv * hd;
    const bool store = pi >= 0 && pi < cap;
    if (idx < nq + nk) {
        const bool is_k = idx >= nq;
        if (is_k) idx -= nq;
        const int h = idx / half, i = idx - h * half;
        float s, c;
        if (sn != 0) {
            s = sn[i];
            c = cs[i];
        } else {
            const double theta = (double)pi * freq_scale * tab[i] / tab[half + i];
            double sd, cd;
            sincos(theta, &sd, &cd);
            s = (float)sd;
            c = (float)cd;
        }
        float* xh = (is_k ? k + ((u64)t * nkv + h) * hd : q + ((u64)t * nh + h) * hd);
        const int i0 = neox ? i : 2 * i;
        const int i1 = neox ? i + half : 2 * i + 1;
        const float a = xh[i0], b = xh[i1];
        const float r0 = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
        const float r1 = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
        xh[i0] = r0;
        xh[i1] = r1;
        if (is_k && store) {
            u16* dst = kc + kv_off(bt, h, pi, nkv, hd);
            dst[i0] = f32_to_f16(r0);
            dst[i1] = f32_to_f16(r1);
        }
        return;
    }
    idx -= nq + nk;
    if (!store) return;
    if (idx < nrest) {
        const int r = hd - n_rot;
        const int h = idx / r, d = n_rot + (idx - h * r);
        kc[kv_off(bt, h, pi, nkv, hd) + d] = f32_to_f16(k[((u64)t * nkv + h) * hd + d]);
        return;
    }
    idx -= nrest;
    if (idx < nv) {
        const int h = idx / hd, d = idx - h * hd;
        vc[kv_off(bt, h, pi, nkv, hd) + d] = f32_to_f16(v[((u64)t * nkv + h) * hd + d]);
    }
}

// The block's item of token t of rope_kv and rope_kv_rows (grid (ntok, ceil(items /
// blockDim.x))), each thread one item, angles computed per item.
__device__ __forceinline__ void rope_kv_tok(float* __restrict__ q, float* __restrict__ k,
                                            const float* __restrict__ v, u16* __restrict__ kc,
                                            u16* __restrict__ vc, const int* __restrict__ bt,
                                            int t, int pi,
                                            const double* __restrict__ tab, double freq_scale,
                                            int nh, int nkv, int hd, int n_rot, int neox,
                                            int cap) {
    rope_kv_item(q, k, v, kc, vc, bt, t, pi, blockIdx.y * blockDim.x + threadIdx.x, tab,
                 freq_scale, nh, nkv, hd, n_rot, neox, cap, 0, 0);
}

extern "C" __global__ void rope_kv(float* __restrict__ q, float* __restrict__ k,
                                   const float* __restrict__ v, u16* __restrict__ kc,
                                   u16* __restrict__ vc, const int* __restrict__ bt,
                                   const int* __restrict__ pos,
                                   const double* __restrict__ tab, double freq_scale, int nh,
                                   int nkv, int hd, int n_rot, int neox, int cap) {
    pdl_wait();
    pdl_trigger();
    const int t = blockIdx.x;
    rope_kv_tok(q, k, v, kc, vc, bt, t, pos[t], tab, freq_scale, nh, nkv, hd, n_rot, neox, cap);
}

// rope_kv_rows: rope_kv for `ntok` rows of `ntok` different sequences, row t into its own
// caches (kvp[3t] K, kvp[3t+1] V pools, kvp[3t+2] its block table, caps[t] positions) at its position pos[t]: the
// same items and arithmetic as a one-token rope_kv launch on that row.
extern "C" __global__ void rope_kv_rows(float* __restrict__ q, float* __restrict__ k,
                                        const float* __restrict__ v, const u64* __restrict__ kvp,
                                        const int* __restrict__ caps, const int* __restrict__ pos,
                                        const double* __restrict__ tab, double freq_scale,
                                        int nh, int nkv, int hd, int n_rot, int neox) {
    pdl_wait();
    pdl_trigger();
    const int t = blockIdx.x;
    u16* kc = reinterpret_cast<u16*>(kvp[3 * t]);
    u16* vc = reinterpret_cast<u16*>(kvp[3 * t + 1]);
    const int* bt = reinterpret_cast<const int*>(kvp[3 * t + 2]);
    rope_kv_tok(q, k, v, kc, vc, bt, t, pos[t], tab, freq_scale, nh, nkv, hd, n_rot, neox, caps[t]);
}

// rope_kv_pass: rope_kv for a prompt pass (many tokens): one block per token (grid (ntok),
// ROPE_PASS_THREADS threads looping over the token's items), the token's n_rot / 2 angles'
// sin and cos computed once in shared memory for all its heads (by the same f64 expression
// and f32 rounding as rope_kv), so every value gets rope_kv's bits with n_rot / 2 instead
// of (nh + nkv) n_rot / 2 f64 sincos per token. n_rot <= 2 ROPE_PASS_MAX_HALF.
#ifndef ROPE_PASS_THREADS
#define ROPE_PASS_THREADS 256
#endif
#ifndef ROPE_PASS_MAX_HALF
#define ROPE_PASS_MAX_HALF 256
#endif
extern "C" __global__ void __launch_bounds__(ROPE_PASS_THREADS)
    rope_kv_pass(float* __restrict__ q, float* __restrict__ k, const float* __restrict__ v,
                 u16* __restrict__ kc, u16* __restrict__ vc, const int* __restrict__ bt,
                 const int* __restrict__ pos, const double* __restrict__ tab,
                 double freq_scale, int nh, int nkv, int hd, int n_rot, int neox, int cap) {
    pdl_wait();
    pdl_trigger();
    __shared__ float sn[ROPE_PASS_MAX_HALF], cs[ROPE_PASS_MAX_HALF];
    const int t = blockIdx.x, pi = pos[t], half = n_rot >> 1;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        const double theta = (double)pi * freq_scale * tab[i] / tab[half + i];
        double sd, cd;
        sincos(theta, &sd, &cd);
        sn[i] = (float)sd;
        cs[i] = (float)cd;
    }
    __syncthreads();
    const int items = (nh + nkv) * half + nkv * (hd - n_rot) + nkv * hd;
    for (int idx = threadIdx.x; idx < items; idx += blockDim.x)
        rope_kv_item(q, k, v, kc, vc, bt, t, pi, idx, tab, freq_scale, nh, nkv, hd, n_rot, neox,
                     cap, sn, cs);
}
