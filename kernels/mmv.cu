// mmv.cu — the decode products on tensor cores: y[t] = W x[t] for n = 1..MMV_N (64) token
// vectors (one-token decode, verification rows, the batched step), with the MMA of gemm.cu
// (`mma.sync.aligned.m16n8k16`, f16 x f16 -> f32, sm_80+) and its exact quant-to-f16
// integers (common/mma.cuh), x staged by gemm.cu's `gemm_stage_x` as f16 hi + lo halves.
// gemm.cu is shaped for prompt throughput (a warp owns 32-64 rows, 16 warps per block, 64
// tokens always computed); mmv is shaped for decode bandwidth:
// - a block owns ONE 16-row tile; its MMV_WARPS warps split the block's chunk range into
//   contiguous shares (per = ceil(len / MMV_WARPS)); rows are never few per SM: a
//   4096-row product has 256 blocks;
// - where the tiles are few (k / v products: 1024 rows = 64 tiles) the chunk range of a
//   tile is also split across `ks` blocks (gridDim.y; `ks` from engine/src/cuda/select.rs
//   `mmv_splits(rows, k)`): each block writes its sum to `part`, and the last block of the
//   tile to arrive (a counter per tile, reset by that block) adds the ks partial sums in
//   split order 0, 1, .., ks - 1 (a fixed order, whoever arrives last) and runs the epilogue;
// - MMV_U chunks of weights are loaded before their MMAs (loads in flight per lane), and
//   before its pdl_wait each warp asks L2 for all its weight bytes (W is written by no
//   kernel; launched with programmatic dependent launch like the matvecs, `mmv_*`);
// - entry points per live n-tile count NT = 1, 2, 4, 8 (`mmv_<fmt>[_glu]_nt<NT>`): the
//   accumulators and the B loads cover the NT * 8 token slots only (n = 1 pays one n-tile,
//   and the tiles past ceil(n / 8) of an NT launch are skipped).
// Per chunk and tile: A fragments made once (gm_pair: ~1 instruction per 2 weights), then
// per live n-tile: hi and lo MMAs of both k16 steps into a zeroed partial p, then acc =
// fmaf(d, p, acc) (d: the block scale) in chunk order. A warp's sums are added in warp
// order in shared memory (warp 0 stores, warp 1 adds, ...), then x's power-of-two scale
// is multiplied back, then + bias, + residual (res may be y), or act(gate) * up.
// Invariance: an MMA output element (row m, token t) depends only on row m of A and column
// t of B (the property gemm.cu's invariance rests on too); the chunk split (ks, MMV_WARPS)
// and every reduction order depend only on (rows, k, format), never on n or NT; so a
// token's output is the same bits for n = 1 and n = 64 BY CONSTRUCTION (kernel-check `mmv`
// cases check it). The bits are not those of matvec.cu nor of gemm.cu (another k split).
// BF16 weights (`MmvBF16`, `mmv_bf16_*`): the weights are the bf16 A fragments as they lie
// (no scale, no conversion), multiplied on the bf16 MMA (`gm_mma_bf16`) with x in THREE
// bf16 parts hi + mid + lo (gemm.cu's `gemm_stage_x_bf16`, or the same statements in the
// `_x1` staging: `gm_bf16_parts`): the parts sum to x exactly (bf16 has f32's exponent
// range: no power-of-two scale, xsc = 1), so the only error left is the MMA's f32
// accumulation, as for Q4_0 / Q8_0 with x as f16 hi + lo (within ~2^-22): kernel-check's
// `gemm` tolerance (2e-5 of sum |w x|) holds for both with the same margin. Two parts (x
// within 2^-17 = 7.6e-6) would spend a third of that budget to save one MMA in three;
// decode reads 2 bytes a weight, so for up to 16 tokens (NT <= 2: 6 or 12 MMAs per 1 KiB
// tile chunk) the MMAs stay far under the bytes' time; at NT = 8 (33..64 tokens, 48 MMAs
// per KiB) they may come near it (out-engine23/README.md: measure before cutting a part).
// Per chunk and live n-tile: the 3 parts' MMAs (hi, mid, lo) of step 0 then step 1 into
// a zeroed partial p, then acc += p (f32, chunk order); the same k split, warp order and
// split order as the other formats, so the invariance argument above holds unchanged.
// Q4_K weights (`MmvQ4_K`, `mmv_q4_k_*`; KIND 3, GGUF block layout): a 32-value chunk is
// one sub-block, whose weights are d sc q - dmin m (q = 0..15, one (sc, m) per sub-block,
// formats.cuh `FmtQ4_K`). x is staged as for Q4_0 / Q8_0 (f16 hi + lo, `gemm_stage_x`).
// Per chunk and live n-tile: S = the sub-block's sum of x per token, by the hi and lo MMAs
// of both k16 steps with an all-ones A (f16 1.0: each product exact, S depends only on the
// token's column of x, computed once for gate and up), then per matrix P = sum q x (the
// same four MMAs as Q4_0, q as exact f16 integers) and acc = fma(-dmin m, S, fma(d sc, P,
// acc)) in chunk order: every order still depends on (rows, k, format) only, never on n.
#include "common/common.cuh"
#include "common/formats.cuh"
#include "common/mma.cuh"

#ifndef MMV_WARPS
#define MMV_WARPS 8
#endif
#ifndef MMV_N
#define MMV_N 64
#endif
#ifndef MMV_U
#define MMV_U 4
#endif
#ifndef MMV_U_GLU
#define MMV_U_GLU 2
#endif
// Tuning arms (engine `sources::mmv_tuning_defines`, `ASSAY_MMV_DEFS`): MMV_MINB blocks per
// SM in the launch bounds (0: the default bounds), MMV_PIPE the next round's weight loads
// issued before this round's MMAs (and the first round before the wait; one n-tile entry
// points only: `_x1`, `_nt1`), MMV_Q4MAP the
// Q4_0 k map of `MmvQ4_0m`, MMV_XSTAGE the `_x1` staging in two passes (`mmv_stage_one`).
// Only MMV_Q4MAP changes a row's arithmetic (for every n alike).
#ifdef MMV_BAD_DEFS
#error "ASSAY_MMV_DEFS: bad value (see engine sources::mmv_tuning_defines)"
#endif
#ifndef MMV_MINB
#define MMV_MINB 0
#endif
#ifndef MMV_PIPE
#define MMV_PIPE 0
#endif
#ifndef MMV_Q4MAP
#define MMV_Q4MAP 0
#endif
#ifndef MMV_XSTAGE
#define MMV_XSTAGE 0
#endif
// MMV_PERSIST > 0: a block of a one n-tile entry point (`_x1`, `_nt1`, `_pair_x1`) loops
// over the tiles blockIdx.x + i gridDim.x (the host launches min(tiles, MMV_PERSIST x SMs /
// splits) blocks: engine ops::mmv `grid_x`); 0 or more n-tiles: one tile per block.
#ifndef MMV_PERSIST
#define MMV_PERSIST 0
#endif
// MMV_SVEC: in rounds of a multiple of 4 chunks starting at a multiple of 4 (and k a
// multiple of 128), a row's 4 scales come in one 8-byte load (`MmvLdq`: the quants alone);
// the same values as G::load.
#ifndef MMV_SVEC
#define MMV_SVEC 0
#endif
#if MMV_MINB > 0
#define MMV_LB __launch_bounds__(MMV_WARPS * 32, MMV_MINB)
#define MMV_LB_GLU_X1 __launch_bounds__(MMV_WARPS * 32, MMV_MINB)
#else
#define MMV_LB __launch_bounds__(MMV_WARPS * 32)
#define MMV_LB_GLU_X1 __launch_bounds__(MMV_WARPS * 32, 2)
#endif

// Q4_0 with the k map of MMV_Q4MAP: lane t loads the 4 bytes 4t .. 4t + 3 of the chunk
// (no byte loaded by two lanes; gemm.cu's `GmQ4_0` loads 8 bytes of which it uses one
// nibble each, lanes t and t + 2 the same bytes): step 0 takes their low nibbles (values
// 4t .. 4t + 3), step 1 their high nibbles (values 16 + 4t .. 16 + 4t + 3); x follows the
// same map (`MmvXMap`). The same f16 integers and scales, another assignment of the
// chunk's values to the MMA's k positions.
struct MmvQ4_0m {
    static constexpr int KIND = 0;
    static constexpr bool SPLIT = false;
    static constexpr int ELEMS = 32;
    static constexpr u32 OFF = 0x64086408u;  // 1032: q - 8
    static constexpr int QBYTES = 16;
    static __device__ __forceinline__ GmA load(const WMat& m, u64 row, int c, int t) {
        const u64 bi = row * m.nb + (u64)c;
        const u32 q = *(const u32*)(m.w + bi * 16 + 4 * t);
        const float d = f16_to_f32(*(const u16*)(m.w + m.rows * m.nb * 16 + bi * 2));
        return {q & 0x0F0F0F0Fu, (q >> 4) & 0x0F0F0F0Fu, d, d};
    }
};
// The quant part of each load type's G::load (the scale loaded elsewhere: MMV_SVEC).
template <class G>
struct MmvLdq;
template <>
struct MmvLdq<MmvQ4_0m> {
    static __device__ __forceinline__ GmA ldq(const WMat& m, u64 row, int c, int t) {
        const u32 q = *(const u32*)(m.w + (row * m.nb + (u64)c) * 16 + 4 * t);
        return {q & 0x0F0F0F0Fu, (q >> 4) & 0x0F0F0F0Fu, 0.f, 0.f};
    }
};
template <>
struct MmvLdq<GmQ4_0> {
    static __device__ __forceinline__ GmA ldq(const WMat& m, u64 row, int c, int t) {
        const uint2 q = *(const uint2*)(m.w + (row * m.nb + (u64)c) * 16 + 8 * (t & 1));
        const int sh = 4 * (t >> 1);
        return {(q.x >> sh) & 0x0F0F0F0Fu, (q.y >> sh) & 0x0F0F0F0Fu, 0.f, 0.f};
    }
};
template <>
struct MmvLdq<GmQ8_0> {
    static __device__ __forceinline__ GmA ldq(const WMat& m, u64 row, int c, int t) {
        const uint2 q = *(const uint2*)(m.w + (row * m.nb + (u64)c) * 32 + 8 * t);
        return {q.x ^ 0x80808080u, q.y ^ 0x80808080u, 0.f, 0.f};
    }
};
#if MMV_Q4MAP
typedef MmvQ4_0m MmvQ4;
#else
typedef GmQ4_0 MmvQ4;
#endif
// x's k map of a load type: false = lane t's values 8t .. 8t + 7 (one 16-byte load of the
// staged x), true = 4t .. 4t + 3 then 16 + 4t .. 16 + 4t + 3 (`MmvQ4_0m`: two 8-byte loads
// of gemm_stage_x's x; the `_x1` staging stores each chunk permuted so that it is one).
template <class G>
struct MmvXMap {
    static constexpr bool SPLIT = false;
};
template <>
struct MmvXMap<MmvQ4_0m> {
    static constexpr bool SPLIT = true;
};
// BF16 (row-major, 64 bytes per 32-value chunk, no scale): lane t's 16-byte load holds
// values 8t .. 8t + 7 of its row's chunk (the contiguous map; gemm.cu's `GmFloat<2>`):
// w0, w1 the pairs of k16 step 0, w2, w3 those of step 1, the bf16 A fragments as they lie.
struct MmvAB {
    u32 w0, w1, w2, w3;
};
struct MmvBF16 {
    static constexpr int KIND = 2;
    static constexpr bool SPLIT = false;
    static constexpr int ELEMS = 32;
    static constexpr int QBYTES = 64;  // bytes of a row's chunk (the prefetch; no scales)
    static __device__ __forceinline__ MmvAB load(const WMat& m, u64 row, int c, int t) {
        const uint4 v = *(const uint4*)(m.w + (row * m.nb + (u64)c) * 64 + 16 * t);
        return {v.x, v.y, v.z, v.w};
    }
};
// The type of a load type's chunk share (GmA for the quants: words of quant bytes + the
// scales; MmvAB for BF16: the four words of bf16 pairs).
template <class G>
struct MmvA {
    typedef GmA T;
};
template <>
struct MmvA<MmvBF16> {
    typedef MmvAB T;
};
// Q4_K (GGUF block layout, 144-byte super-blocks of 256 values, rows 16-byte aligned:
// formats.cuh `FmtQ4_K`): chunk c is sub-block j = c % 8 of super-block c / 8, whose value
// 32 j + l sits in nibble j % 2 of qs[32 (j / 2) + l]; lane t takes the nibbles of its 8
// bytes 8t .. 8t + 7 (values 8t .. 8t + 7: the contiguous map, as GmQ8_0). The quants are
// the exact f16 integers 0..15 (OFF = 1024: q - 0); s0 = d * sc_j, s1 = dmin * m_j, with
// FmtQ4_K::load's statements (`kq_scale_min`, the same f32 products), so a weight is
// s0 q - s1. The super-block's 16-byte header (d, dmin, the 12 scale bytes) is loaded by
// the lane with its quants (the 4 lanes of a row: one address).
struct MmvQ4_K {
    static constexpr int KIND = 3;
    static constexpr bool SPLIT = false;
    static constexpr int ELEMS = 256;
    static constexpr u32 OFF = 0x64006400u;  // 1024: q
    static constexpr int BYTES = 144;        // a super-block (the prefetch)
    static __device__ __forceinline__ GmA load(const WMat& m, u64 row, int c, int t) {
        const u8* b = m.w + (row * m.nb + (u64)(c >> 3)) * BYTES;
        const int j = c & 7;
        const uint2 q = *(const uint2*)(b + 16 + 32 * (j >> 1) + 8 * t);
        const uint4 h = *(const uint4*)b;
        const float d = f16_to_f32((u16)(h.x & 0xffffu));
        const float dmin = f16_to_f32((u16)(h.x >> 16));
        float sc, mn;
        kq_scale_min(h.y, h.z, h.w, j, &sc, &mn);
        const int sh = 4 * (j & 1);
        return {(q.x >> sh) & 0x0F0F0F0Fu, (q.y >> sh) & 0x0F0F0F0Fu, d * sc, dmin * mn};
    }
};
// Where value i of a row is staged by `_x1` for the split map: within its chunk, value
// 16 h + 4 t + j at 8 t + 4 h + j.
__device__ __forceinline__ int mmv_xpos(int i, bool split) {
    return split ? (i & ~31) + 8 * ((i & 15) >> 2) + 4 * ((i >> 4) & 1) + (i & 3) : i;
}

// Chunks whose weights a lane loads before their MMAs (fewer for gate + up: two matrices,
// and for NT = 8: 32-64 accumulators; gate + up at NT = 4 takes 1: with 2 it spilled 8-16
// bytes at 128 registers).
template <bool GLU, int NT>
struct MmvU {
    static constexpr int U = NT >= 8 ? 2 : (GLU ? (NT >= 4 ? 1 : MMV_U_GLU) : MMV_U);
};

// gemm_stage_x (gemm.cu) for one token, by a block of 256 threads, into hi[k] / lo[k] and
// *scale: the same code, reduction orders and thread count, hence the same bits.
// `split`: values stored at mmv_xpos (MmvXMap), not at their index.
// MMV_XSTAGE (the same bits, fewer passes): the first pass also takes mq = max |x (nw +
// w_off)| (normed) or max |x|; without a norm mq IS the max of the staged values; with one,
// b = fl(mq inv) < 32760 proves every |v| < 32768 (|v| <= b (1 + 4u)^2 / ..., u = 2^-24: two
// roundings of v, one of each of mq and b), so e = 0 without the max pass, which runs only
// when the bound fails (a row near or past f16's range). Then only values [i0, i1) (the
// block's chunks) are written.
__device__ __forceinline__ void mmv_stage_one(const float* __restrict__ xt, int k,
                                              const float* __restrict__ nw, float eps,
                                              float w_off, u16* oh, u16* ol, float* scale,
                                              bool split, int i0, int i1) {
    __shared__ double red[8];
    __shared__ float redm[8];
    __shared__ float redq[8];
    const int lane = threadIdx.x & 31;
    float inv = 1.f;
    float mq = 0.f;
    if (nw != 0) {
        double ss = 0.0;
        for (int i = threadIdx.x; i < k; i += 256) {
            const float xv = xt[i];
            ss += (double)__fmul_rn(xv, xv);
            if (MMV_XSTAGE) mq = fmaxf(mq, fabsf(__fmul_rn(xv, nw[i] + w_off)));
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (MMV_XSTAGE) {
#pragma unroll
            for (int o = 16; o > 0; o >>= 1)
                mq = fmaxf(mq, __shfl_xor_sync(0xffffffffu, mq, o));
            if (lane == 0) redq[threadIdx.x >> 5] = mq;
        }
        if (lane == 0) red[threadIdx.x >> 5] = ss;
        __syncthreads();
        double tot = 0.0;
#pragma unroll
        for (int i = 0; i < 8; i++) tot += red[i];
        const float mean = (float)(tot / (double)k);
        inv = 1.0f / sqrtf(mean + eps);
    } else if (MMV_XSTAGE) {
        for (int i = threadIdx.x; i < k; i += 256) mq = fmaxf(mq, fabsf(xt[i]));
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) mq = fmaxf(mq, __shfl_xor_sync(0xffffffffu, mq, o));
        if (lane == 0) redq[threadIdx.x >> 5] = mq;
        __syncthreads();
    }
    float mx = 0.f;
    bool exact = true;  // block-uniform: mq and inv are
    if (MMV_XSTAGE) {
        mq = redq[0];
#pragma unroll
        for (int i = 1; i < 8; i++) mq = fmaxf(mq, redq[i]);
        if (nw == 0) {
            mx = mq;
            exact = false;
        } else if (__fmul_rn(mq, inv) < 32760.f) {
            exact = false;  // mx < 32768: e = 0 below, as the max pass would find
        }
    } else {
        i0 = 0;
        i1 = k;
    }
    if (exact) {
        for (int i = threadIdx.x; i < k; i += 256) {
            float v = xt[i];
            if (nw != 0) v = __fmul_rn(__fmul_rn(v, inv), nw[i] + w_off);
            mx = fmaxf(mx, fabsf(v));
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        if (lane == 0) redm[threadIdx.x >> 5] = mx;
        __syncthreads();
        mx = redm[0];
#pragma unroll
        for (int i = 1; i < 8; i++) mx = fmaxf(mx, redm[i]);
    }
    int e = 0;
    if (mx >= 32768.f && mx <= 3.0e38f) {
        int ex;
        frexpf(mx, &ex);  // mx < 2^ex
        e = ex - 15;
    }
    const float down = ldexpf(1.f, -e);
    if (threadIdx.x == 0) *scale = ldexpf(1.f, e);
    for (int i = i0 + threadIdx.x; i < i1; i += 256) {
        float v = xt[i];
        if (nw != 0) v = __fmul_rn(__fmul_rn(v, inv), nw[i] + w_off);
        if (e != 0) v = __fmul_rn(v, down);
        const u16 h = f32_to_f16(v);
        const int p = mmv_xpos(i, split);
        oh[p] = h;
        ol[p] = f32_to_f16(v - f16_to_f32(h));
    }
    __syncthreads();
}

// gemm_stage_x_bf16 (gemm.cu) for one token, by a block of 256 threads, into the three
// bf16 parts oh / om / ol (hi, mid, lo) of values [i0, i1) (the block's chunks): the same
// 1 / rms (`gm_stage_inv`: same code, thread count and orders) and the same statements per
// value (`gm_bf16_parts`), hence the same bits; no max pass (bf16 keeps f32's range:
// *scale = 1).
__device__ __forceinline__ void mmv_stage_one_bf16(const float* __restrict__ xt, int k,
                                                   const float* __restrict__ nw, float eps,
                                                   float w_off, u16* oh, u16* om, u16* ol,
                                                   float* scale, int i0, int i1) {
    __shared__ double red[8];
    const float inv = gm_stage_inv(xt, k, nw, eps, red);
    if (threadIdx.x == 0) *scale = 1.f;
    for (int i = i0 + threadIdx.x; i < i1; i += 256) {
        float v = xt[i];
        if (nw != 0) v = __fmul_rn(__fmul_rn(v, inv), nw[i] + w_off);
        gm_bf16_parts(v, oh[i], om[i], ol[i]);
    }
    __syncthreads();
}

// See the file comment. part: [ks][NM][MMV_N][rows] partial sums (ks > 1); cnt: one
// counter per tile, zero between launches.
// X1 (the `_x1` entry points: one token, NT = 1): x is staged by the block itself into
// shared memory (`mmv_stage_one`: gemm_stage_x's code for token 0, the same bits), so a
// one-token product is one launch; lanes of tokens 1..7 feed zeros, as the staged slots.
// BF16 (G::KIND == 2): xh / xl / xm the three bf16 parts hi / mid / lo (`gemm_stage_x_bf16`:
// its xh, xl, xm), X1 stages them into 6 k bytes of shared memory (`mmv_stage_one_bf16`).
template <class G, bool GLU, int NT, bool X1 = false>
__device__ __forceinline__ void mmv_body(const u8* __restrict__ w, const u8* __restrict__ w2,
                                         const u16* __restrict__ xh,
                                         const u16* __restrict__ xl,
                                         const float* __restrict__ xsc,
                                         const float* __restrict__ bias, const float* res,
                                         float* y, float* part, u32* cnt, int rows, int k,
                                         int n, int act, int ks,
                                         const float* __restrict__ x1 = 0,
                                         const float* __restrict__ nw = 0, float eps = 0.f,
                                         float w_off = 0.f, float* y2 = 0,
                                         const float* __restrict__ bias2 = 0,
                                         const u16* __restrict__ xm = 0) {
    constexpr int NM = GLU ? 2 : 1;
    constexpr bool BF = G::KIND == 2;  // BF16: bf16 A as it lies, x in three bf16 parts
    constexpr bool K4 = G::KIND == 3;  // Q4_K: s0 P - s1 S (S: x's chunk sum, ones MMA)
    typedef typename MmvA<G>::T A;
    // Row stride of the reduction: = 8 (mod 32) floats, so the 8 rows g of a fragment
    // store land 8 banks apart.
    constexpr int LD = ((NT * 8 + 31) / 32) * 32 + 8;
    // Q4_K at NT = 8: one chunk a round (with 2, ptxas held 80 registers and spilled 328
    // bytes in the plain product); the chunk order, hence the bits, are the same for any U.
    constexpr int U = K4 && NT >= 8 ? 1 : MmvU<GLU, NT>::U;
    constexpr bool XS = MmvXMap<G>::SPLIT;
    __shared__ float red[NM][16][LD];
    __shared__ int last;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    // MMV_PERSIST: the block takes tiles blockIdx.x, + gridDim.x, ... (the `_x1` staging
    // then serves all of them); each tile is computed exactly as alone.
    const int tiles_all = (rows + 15) >> 4;
    int tile = blockIdx.x;
    const int split = blockIdx.y;
    int row0 = tile * 16;
    const int nchunks = k >> 5;
    const int ntiles = (n + 7) >> 3;  // live n-tiles (<= NT; warp-uniform)
    const WMat m = {w, 0, (u64)rows, (u64)(k / G::ELEMS)};
    const WMat m2 = {w2, 0, (u64)rows, (u64)(k / G::ELEMS)};
    // Rows past the end compute row rows-1 again and write nothing.
    u64 rr0 = (u64)min(row0 + g, rows - 1);
    u64 rr1 = (u64)min(row0 + g + 8, rows - 1);
    // The block's chunk range (split `split` of ks), then the warp's share of it.
    const int per_s = (nchunks + ks - 1) / ks;
    const int cs0 = min(nchunks, split * per_s), cs1 = min(nchunks, cs0 + per_s);
    const int per_w = (cs1 - cs0 + MMV_WARPS - 1) / MMV_WARPS;
    const int c0 = min(cs1, cs0 + warp * per_w), c1 = min(cs1, c0 + per_w);
    // One round of U chunks of W (both matrices of a GLU pair): the loads of the round are
    // all issued before the first MMA that uses them.
    const bool svec = MMV_SVEC && U % 4 == 0 && (m.nb & 3) == 0 && (c0 & 3) == 0;
    auto load_round = [&](A(&a)[U][NM][2], int cc) {
        if constexpr (G::KIND == 0) {
        if (MMV_SVEC && U % 4 == 0 && svec) {
#pragma unroll
            for (int u4 = 0; u4 < U; u4 += 4)
#pragma unroll
                for (int q = 0; q < NM; q++)
#pragma unroll
                    for (int r = 0; r < 2; r++) {
                        const WMat& mm = q == 0 ? m : m2;
                        const u64 row = r == 0 ? rr0 : rr1;
                        const uint2 sv = *(const uint2*)(mm.w + mm.rows * mm.nb * G::QBYTES +
                                                         (row * mm.nb + (u64)(cc + u4)) * 2);
#pragma unroll
                        for (int j = 0; j < 4; j++) {
                            const u32 w2 = j < 2 ? sv.x : sv.y;
                            const float d = f16_to_f32((u16)((j & 1) ? (w2 >> 16) : w2));
                            GmA ga = MmvLdq<G>::ldq(mm, row, cc + u4 + j, t);
                            ga.s0 = d;
                            ga.s1 = d;
                            a[u4 + j][q][r] = ga;
                        }
                    }
            return;
        }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            a[u][0][0] = G::load(m, rr0, cc + u, t);
            a[u][0][1] = G::load(m, rr1, cc + u, t);
            if (GLU) {
                a[u][NM - 1][0] = G::load(m2, rr0, cc + u, t);
                a[u][NM - 1][1] = G::load(m2, rr1, cc + u, t);
            }
        }
    };
    // MMV_PIPE: the first round is loaded before the wait (W is written by no kernel), so
    // that its latency overlaps the wait and the `_x1` staging.
    A pa[U][NM][2];
    constexpr bool PIPE = MMV_PIPE && NT == 1;  // one n-tile: registers to spare
    constexpr bool PERSIST = MMV_PERSIST && NT == 1;  // the same (ops::mmv: grid_x)
    const bool pipe = PIPE && c0 + U <= c1;
    if (pipe) load_round(pa, c0);
    // Ask L2 for this warp's weight bytes of tile tl (its chunks of the tile's 16 rows:
    // quants, then the scales).
    auto prefetch = [&](int tl) {
        const int r0 = tl * 16;
        if constexpr (K4) {
            // Q4_K (block layout): the row's super-blocks that hold chunks c0 .. c1 - 1.
            const u64 rb = m.nb * G::BYTES;
            const int b0 = c0 >> 3;
            const int span = c1 > c0 ? (((c1 + 7) >> 3) - b0) * G::BYTES : 0;
            const int sect = (span + 31) >> 5;
            for (int i = lane; i < 16 * sect; i += 32) {
                const u64 o = (u64)min(r0 + i / sect, rows - 1) * rb + (u64)b0 * G::BYTES +
                              32 * (i % sect);
                pf_l2(m.w + o);
                if (GLU) pf_l2(m2.w + o);
            }
        } else {
        constexpr int QB = G::QBYTES;
        const int span = (c1 - c0) * QB;  // quant bytes of a row in the range
        const int sect = (span + 31) >> 5;
        for (int i = lane; i < 16 * sect; i += 32) {
            const u64 row = (u64)min(r0 + i / sect, rows - 1);
            const u64 bi = row * m.nb + (u64)c0;
            pf_l2(m.w + bi * QB + 32 * (i % sect));
            if (GLU) pf_l2(m2.w + bi * QB + 32 * (i % sect));
        }
        if (!BF && lane < 16 && c1 > c0) {
            const u64 bi = (u64)min(r0 + lane, rows - 1) * m.nb + (u64)c0;
            pf_l2(m.w + m.rows * m.nb * QB + bi * 2);
            if (GLU) pf_l2(m2.w + m.rows * m.nb * QB + bi * 2);
        }
        }
    };
    // Start the first tile's weight reads before the wait: W is written by no kernel.
    prefetch(tile);
    // Programmatic dependent launch (common.cuh): the prefetch above reads only W; x, its
    // scale, res, y and the split scratch are touched after the wait.
    pdl_wait();
    pdl_trigger();
    extern __shared__ __align__(16) u16 mmv_xs[];  // X1: hi[k] then lo[k] (BF16: + lo2[k])
    __shared__ float x1_scale;
    if constexpr (BF) {
        if (X1)
            mmv_stage_one_bf16(x1, k, nw, eps, w_off, mmv_xs, mmv_xs + k, mmv_xs + 2 * k,
                               &x1_scale, cs0 * 32, cs1 * 32);
    } else {
    if (X1)
        mmv_stage_one(x1, k, nw, eps, w_off, mmv_xs, mmv_xs + k, &x1_scale, XS, cs0 * 32,
                      cs1 * 32);
    }
    float acc[NM][NT][4];
    // Token g of n-tile j is staged row 8 j + g.
    const u16* xht = xh + (u64)g * k;
    const u16* xlt = xl + (u64)g * k;
    const u16* xmt = BF && !X1 ? xm + (u64)g * k : xm;
    auto chunk = [&](int c, const A (&a)[NM][2]) {
        if constexpr (BF) {
            // The weights are the A fragments; per live n-tile the three parts' MMAs of
            // step 0 then of step 1 into a zeroed p, then acc += p (one f32 add).
            u32 af[NM][2][4];
#pragma unroll
            for (int q = 0; q < NM; q++) {
                const A& r0 = a[q][0];
                const A& r1 = a[q][1];
                af[q][0][0] = r0.w0;
                af[q][0][1] = r1.w0;
                af[q][0][2] = r0.w1;
                af[q][0][3] = r1.w1;
                af[q][1][0] = r0.w2;
                af[q][1][1] = r1.w2;
                af[q][1][2] = r0.w3;
                af[q][1][3] = r1.w3;
            }
#pragma unroll
            for (int j = 0; j < NT; j++) {
                if (j >= ntiles) continue;
                uint4 h, md, l;
                if (X1) {
                    // Token 0 from shared memory; the other lanes' tokens are zeros.
                    const uint4 z = make_uint4(0u, 0u, 0u, 0u);
                    h = g == 0 ? *(const uint4*)(mmv_xs + c * 32 + 8 * t) : z;
                    md = g == 0 ? *(const uint4*)(mmv_xs + k + c * 32 + 8 * t) : z;
                    l = g == 0 ? *(const uint4*)(mmv_xs + 2 * k + c * 32 + 8 * t) : z;
                } else {
                    const u64 o = (u64)(8 * j) * k + c * 32 + 8 * t;
                    h = *(const uint4*)(xht + o);
                    md = *(const uint4*)(xlt + o);
                    l = *(const uint4*)(xmt + o);
                }
#pragma unroll
                for (int q = 0; q < NM; q++) {
                    const u32* f0 = af[q][0];
                    const u32* f1 = af[q][1];
                    float p[4] = {0.f, 0.f, 0.f, 0.f};
                    gm_mma_bf16(p, f0[0], f0[1], f0[2], f0[3], h.x, h.y);
                    gm_mma_bf16(p, f0[0], f0[1], f0[2], f0[3], md.x, md.y);
                    gm_mma_bf16(p, f0[0], f0[1], f0[2], f0[3], l.x, l.y);
                    gm_mma_bf16(p, f1[0], f1[1], f1[2], f1[3], h.z, h.w);
                    gm_mma_bf16(p, f1[0], f1[1], f1[2], f1[3], md.z, md.w);
                    gm_mma_bf16(p, f1[0], f1[1], f1[2], f1[3], l.z, l.w);
                    float* ac = acc[q][j];
                    ac[0] = __fadd_rn(ac[0], p[0]);
                    ac[1] = __fadd_rn(ac[1], p[1]);
                    ac[2] = __fadd_rn(ac[2], p[2]);
                    ac[3] = __fadd_rn(ac[3], p[3]);
                }
            }
        } else if constexpr (K4) {
            // Q4_K: per live n-tile S = the chunk's sum of x (an all-ones A: the same hi
            // and lo MMAs on the same x words, so S depends on the token's x alone), then per
            // matrix P = sum q x as for Q4_0, and acc = fma(-s1, S, fma(s0, P, acc)).
            u32 af[NM][2][4];
#pragma unroll
            for (int q = 0; q < NM; q++) {
                const GmA& r0 = a[q][0];
                const GmA& r1 = a[q][1];
                af[q][0][0] = gm_pair(r0.w0, 0x4140u, G::OFF);
                af[q][0][1] = gm_pair(r1.w0, 0x4140u, G::OFF);
                af[q][0][2] = gm_pair(r0.w0, 0x4342u, G::OFF);
                af[q][0][3] = gm_pair(r1.w0, 0x4342u, G::OFF);
                af[q][1][0] = gm_pair(r0.w1, 0x4140u, G::OFF);
                af[q][1][1] = gm_pair(r1.w1, 0x4140u, G::OFF);
                af[q][1][2] = gm_pair(r0.w1, 0x4342u, G::OFF);
                af[q][1][3] = gm_pair(r1.w1, 0x4342u, G::OFF);
            }
            constexpr u32 ONE = 0x3C003C00u;  // f16x2 (1, 1)
#pragma unroll
            for (int j = 0; j < NT; j++) {
                if (j >= ntiles) continue;
                uint4 h, l;
                if (X1) {
                    const uint4 z = make_uint4(0u, 0u, 0u, 0u);
                    h = g == 0 ? *(const uint4*)(mmv_xs + c * 32 + 8 * t) : z;
                    l = g == 0 ? *(const uint4*)(mmv_xs + k + c * 32 + 8 * t) : z;
                } else {
                    h = *(const uint4*)(xht + (u64)(8 * j) * k + c * 32 + 8 * t);
                    l = *(const uint4*)(xlt + (u64)(8 * j) * k + c * 32 + 8 * t);
                }
                float sx[4] = {0.f, 0.f, 0.f, 0.f};
                gm_mma(sx, ONE, ONE, ONE, ONE, h.x, h.y);
                gm_mma(sx, ONE, ONE, ONE, ONE, l.x, l.y);
                gm_mma(sx, ONE, ONE, ONE, ONE, h.z, h.w);
                gm_mma(sx, ONE, ONE, ONE, ONE, l.z, l.w);
#pragma unroll
                for (int q = 0; q < NM; q++) {
                    const u32* f0 = af[q][0];
                    const u32* f1 = af[q][1];
                    float p[4] = {0.f, 0.f, 0.f, 0.f};
                    gm_mma(p, f0[0], f0[1], f0[2], f0[3], h.x, h.y);
                    gm_mma(p, f0[0], f0[1], f0[2], f0[3], l.x, l.y);
                    gm_mma(p, f1[0], f1[1], f1[2], f1[3], h.z, h.w);
                    gm_mma(p, f1[0], f1[1], f1[2], f1[3], l.z, l.w);
                    float* ac = acc[q][j];
                    const GmA& r0 = a[q][0];
                    const GmA& r1 = a[q][1];
                    ac[0] = fmaf(-r0.s1, sx[0], fmaf(r0.s0, p[0], ac[0]));
                    ac[1] = fmaf(-r0.s1, sx[1], fmaf(r0.s0, p[1], ac[1]));
                    ac[2] = fmaf(-r1.s1, sx[2], fmaf(r1.s0, p[2], ac[2]));
                    ac[3] = fmaf(-r1.s1, sx[3], fmaf(r1.s0, p[3], ac[3]));
                }
            }
        } else {
        u32 af[NM][2][4];
#pragma unroll
        for (int q = 0; q < NM; q++) {
            const GmA& r0 = a[q][0];
            const GmA& r1 = a[q][1];
            af[q][0][0] = gm_pair(r0.w0, 0x4140u, G::OFF);
            af[q][0][1] = gm_pair(r1.w0, 0x4140u, G::OFF);
            af[q][0][2] = gm_pair(r0.w0, 0x4342u, G::OFF);
            af[q][0][3] = gm_pair(r1.w0, 0x4342u, G::OFF);
            af[q][1][0] = gm_pair(r0.w1, 0x4140u, G::OFF);
            af[q][1][1] = gm_pair(r1.w1, 0x4140u, G::OFF);
            af[q][1][2] = gm_pair(r0.w1, 0x4342u, G::OFF);
            af[q][1][3] = gm_pair(r1.w1, 0x4342u, G::OFF);
        }
#pragma unroll
        for (int j = 0; j < NT; j++) {
            if (j >= ntiles) continue;
            uint4 h, l;
            if (X1) {
                // Token 0 from shared memory; the other lanes' tokens are zeros.
                const uint4 z = make_uint4(0u, 0u, 0u, 0u);
                h = g == 0 ? *(const uint4*)(mmv_xs + c * 32 + 8 * t) : z;
                l = g == 0 ? *(const uint4*)(mmv_xs + k + c * 32 + 8 * t) : z;
            } else if (XS) {
                const u16* ph = xht + (u64)(8 * j) * k + c * 32 + 4 * t;
                const u16* pl = xlt + (u64)(8 * j) * k + c * 32 + 4 * t;
                const uint2 h0 = *(const uint2*)ph, h1 = *(const uint2*)(ph + 16);
                const uint2 l0 = *(const uint2*)pl, l1 = *(const uint2*)(pl + 16);
                h = make_uint4(h0.x, h0.y, h1.x, h1.y);
                l = make_uint4(l0.x, l0.y, l1.x, l1.y);
            } else {
                h = *(const uint4*)(xht + (u64)(8 * j) * k + c * 32 + 8 * t);
                l = *(const uint4*)(xlt + (u64)(8 * j) * k + c * 32 + 8 * t);
            }
#pragma unroll
            for (int q = 0; q < NM; q++) {
                const u32* f0 = af[q][0];
                const u32* f1 = af[q][1];
                float p[4] = {0.f, 0.f, 0.f, 0.f};
                gm_mma(p, f0[0], f0[1], f0[2], f0[3], h.x, h.y);
                gm_mma(p, f0[0], f0[1], f0[2], f0[3], l.x, l.y);
                gm_mma(p, f1[0], f1[1], f1[2], f1[3], h.z, h.w);
                gm_mma(p, f1[0], f1[1], f1[2], f1[3], l.z, l.w);
                float* ac = acc[q][j];
                ac[0] = fmaf(a[q][0].s1, p[0], ac[0]);
                ac[1] = fmaf(a[q][0].s1, p[1], ac[1]);
                ac[2] = fmaf(a[q][1].s1, p[2], ac[2]);
                ac[3] = fmaf(a[q][1].s1, p[3], ac[3]);
            }
        }
        }
    };
    for (;;) {
        if (PERSIST && tile + (int)gridDim.x < tiles_all) prefetch(tile + gridDim.x);
#pragma unroll
        for (int q = 0; q < NM; q++)
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[q][j][e] = 0.f;
        int c = c0;
        if (PIPE) {
            // Round r + 1's loads are issued before round r's MMAs (the same chunks in the
            // same order as below: the same bits).
            for (; pipe && c + U <= c1; c += U) {
                A nb[U][NM][2];
                const bool more = c + 2 * U <= c1;
                if (more) load_round(nb, c + U);
#pragma unroll
                for (int u = 0; u < U; u++) chunk(c + u, pa[u]);
                if (more) {
#pragma unroll
                    for (int u = 0; u < U; u++)
#pragma unroll
                        for (int q = 0; q < NM; q++) {
                            pa[u][q][0] = nb[u][q][0];
                            pa[u][q][1] = nb[u][q][1];
                        }
                }
            }
        } else {
            for (; c + U <= c1; c += U) {
                A a[U][NM][2];
                load_round(a, c);
#pragma unroll
                for (int u = 0; u < U; u++) chunk(c + u, a[u]);
            }
        }
        for (; c < c1; c++) {
            A a[NM][2];
            a[0][0] = G::load(m, rr0, c, t);
            a[0][1] = G::load(m, rr1, c, t);
            if (GLU) {
                a[NM - 1][0] = G::load(m2, rr0, c, t);
                a[NM - 1][1] = G::load(m2, rr1, c, t);
            }
            chunk(c, a);
        }
        // The warps' sums in warp order. C fragment: acc[q][j][0..1] = row g, tokens 8j + 2t,
        // 8j + 2t + 1; [2..3] = row g + 8.
        for (int v = 0; v < MMV_WARPS; v++) {
            if (warp == v) {
#pragma unroll
                for (int q = 0; q < NM; q++)
#pragma unroll
                    for (int j = 0; j < NT; j++) {
                        if (j >= ntiles) continue;
                        float* d0 = &red[q][g][8 * j + 2 * t];
                        float* d1 = &red[q][g + 8][8 * j + 2 * t];
                        const float* s = acc[q][j];
                        if (v == 0) {
                            d0[0] = s[0]; d0[1] = s[1]; d1[0] = s[2]; d1[1] = s[3];
                        } else {
                            d0[0] += s[0]; d0[1] += s[1]; d1[0] += s[2]; d1[1] += s[3];
                        }
                    }
            }
            __syncthreads();
        }
        bool fin = true;  // this block runs the tile's epilogue (block-uniform)
        if (ks > 1) {
            // This split's sums to `part`; the tile's last block adds them in split order.
            for (int o = threadIdx.x; o < 16 * n; o += MMV_WARPS * 32) {
                const int tok = o >> 4, r = o & 15;
                const int row = row0 + r;
                if (row >= rows) continue;
#pragma unroll
                for (int q = 0; q < NM; q++)
                    part[(((u64)split * NM + q) * MMV_N + tok) * rows + row] = red[q][r][tok];
            }
            __threadfence();
            __syncthreads();
            if (threadIdx.x == 0) last = atomicAdd(&cnt[tile], 1u) == (u32)(ks - 1);
            __syncthreads();
            fin = last;
            if (fin) __threadfence();
        }
        if (fin) {
            for (int o = threadIdx.x; o < 16 * n; o += MMV_WARPS * 32) {
                const int tok = o >> 4, r = o & 15;
                const int row = row0 + r;
                if (row >= rows) continue;
                float sum[NM];
#pragma unroll
                for (int q = 0; q < NM; q++) {
                    if (ks > 1) {
                        float tot = __ldcg(&part[((u64)q * MMV_N + tok) * rows + row]);
                        for (int s = 1; s < ks; s++)
                            tot += __ldcg(&part[(((u64)s * NM + q) * MMV_N + tok) * rows + row]);
                        sum[q] = tot;
                    } else {
                        sum[q] = red[q][r][tok];
                    }
                }
                // x's power-of-two scale undone (1 unless the row reached 2^15: gemm_stage_x).
                const float u = X1 ? x1_scale : xsc[tok];
                const float s = __fmul_rn(sum[0], u);
                const u64 oi = (u64)tok * rows + row;
                if (GLU && y2 != 0) {
                    // A pair (`_pair_x1`): each matrix's product as the plain epilogue.
                    const float s2 = __fmul_rn(sum[NM - 1], u);
                    y[oi] = bias != 0 ? s + bias[row] : s;
                    y2[oi] = bias2 != 0 ? s2 + bias2[row] : s2;
                } else if (GLU) {
                    const float s2 = __fmul_rn(sum[NM - 1], u);
                    y[oi] = __fmul_rn(act == 0 ? silu(s) : gelu_tanh(s), s2);
                } else {
                    float v = bias != 0 ? s + bias[row] : s;
                    if (res != 0) v = v + res[oi];
                    y[oi] = v;
                }
            }
            if (ks > 1 && threadIdx.x == 0) cnt[tile] = 0u;
        }
        if (!PERSIST) break;
        tile += gridDim.x;
        if (tile >= tiles_all) break;
        __syncthreads();  // red and last are rewritten by the next tile
        row0 = tile * 16;
        rr0 = (u64)min(row0 + g, rows - 1);
        rr1 = (u64)min(row0 + g + 8, rows - 1);
        if (pipe) load_round(pa, c0);
    }
}

// Entry points: mmv_<fmt>_nt<NT> (+ bias, + residual; res may be y) and
// mmv_<fmt>_glu_nt<NT>, for n <= 8 NT tokens (engine/src/cuda/select.rs: `MmvKernel`).
#define MMV_PLAIN(fmt, G, NT)                                                                \
    extern "C" __global__ void MMV_LB mmv_##fmt##_nt##NT(                                    \
        const u8* __restrict__ w, const u16* __restrict__ xh, const u16* __restrict__ xl,    \
        const float* __restrict__ xsc, const float* __restrict__ bias, const float* res,     \
        float* y, float* part, u32* cnt, int rows, int k, int n, int ks) {                   \
        mmv_body<G, false, NT>(w, w, xh, xl, xsc, bias, res, y, part, cnt, rows, k, n, 0,    \
                               ks);                                                          \
    }
#define MMV_GLU(fmt, G, NT)                                                                  \
    extern "C" __global__ void MMV_LB mmv_##fmt##_glu_nt##NT(                                \
        const u8* __restrict__ wg, const u8* __restrict__ wu, const u16* __restrict__ xh,    \
        const u16* __restrict__ xl, const float* __restrict__ xsc, float* y, float* part,    \
        u32* cnt, int rows, int k, int n, int act, int ks) {                                 \
        mmv_body<G, true, NT>(wg, wu, xh, xl, xsc, 0, 0, y, part, cnt, rows, k, n, act, ks); \
    }
// One token, x staged in the block (dynamic shared memory: 4 k bytes): plain, gate + up, and
// a pair of products of one shape on one x (k + v: one staging, the bits of two `_x1`).
#define MMV_X1(fmt, G)                                                                      \
    extern "C" __global__ void MMV_LB mmv_##fmt##_x1(                                        \
        const u8* __restrict__ w, const float* __restrict__ x, const float* __restrict__ nw, \
        float eps, float w_off, const float* __restrict__ bias, const float* res, float* y,  \
        float* part, u32* cnt, int rows, int k, int ks) {                                    \
        mmv_body<G, false, 1, true>(w, w, 0, 0, 0, bias, res, y, part, cnt, rows, k, 1, 0,   \
                                    ks, x, nw, eps, w_off);                                  \
    }                                                                                        \
    extern "C" __global__ void MMV_LB_GLU_X1 mmv_##fmt##_glu_x1(                             \
        const u8* __restrict__ wg, const u8* __restrict__ wu, const float* __restrict__ x,   \
        const float* __restrict__ nw, float eps, float w_off, float* y, float* part,         \
        u32* cnt, int rows, int k, int act, int ks) {                                        \
        mmv_body<G, true, 1, true>(wg, wu, 0, 0, 0, 0, 0, y, part, cnt, rows, k, 1, act, ks, \
                                   x, nw, eps, w_off);                                       \
    }                                                                                        \
    extern "C" __global__ void MMV_LB_GLU_X1 mmv_##fmt##_pair_x1(                            \
        const u8* __restrict__ wa, const u8* __restrict__ wb, const float* __restrict__ x,   \
        const float* __restrict__ nw, float eps, float w_off, const float* __restrict__ ba,  \
        const float* __restrict__ bb, float* ya, float* yb, float* part, u32* cnt, int rows, \
        int k, int ks) {                                                                     \
        mmv_body<G, true, 1, true>(wa, wb, 0, 0, 0, ba, 0, ya, part, cnt, rows, k, 1, 0, ks, \
                                   x, nw, eps, w_off, yb, bb);                               \
    }
#define MMV_FMT(fmt, G) \
    MMV_PLAIN(fmt, G, 1) MMV_PLAIN(fmt, G, 2) MMV_PLAIN(fmt, G, 4) MMV_PLAIN(fmt, G, 8) \
    MMV_GLU(fmt, G, 1) MMV_GLU(fmt, G, 2) MMV_GLU(fmt, G, 4) MMV_GLU(fmt, G, 8) \
    MMV_X1(fmt, G)
MMV_FMT(q4_0, MmvQ4)
MMV_FMT(q8_0, GmQ8_0)
MMV_FMT(q4_k, MmvQ4_K)

// BF16: x staged by gemm_stage_x_bf16 in three bf16 parts (xh = hi, xl = mid, xm = lo: its
// buffers in its order; xsc = 1), one more pointer than the quant formats' entry points;
// the `_x1` entry points take the quant formats' arguments (x as f32, staged in the kernel
// into 6 k bytes of dynamic shared memory: engine select::mmv_x1_shared_bytes).
#define MMV_PLAIN3(fmt, G, NT)                                                               \
    extern "C" __global__ void MMV_LB mmv_##fmt##_nt##NT(                                    \
        const u8* __restrict__ w, const u16* __restrict__ xh, const u16* __restrict__ xl,    \
        const u16* __restrict__ xm, const float* __restrict__ xsc,                           \
        const float* __restrict__ bias, const float* res, float* y, float* part, u32* cnt,   \
        int rows, int k, int n, int ks) {                                                    \
        mmv_body<G, false, NT>(w, w, xh, xl, xsc, bias, res, y, part, cnt, rows, k, n, 0,    \
                               ks, 0, 0, 0.f, 0.f, 0, 0, xm);                                \
    }
#define MMV_GLU3(fmt, G, NT)                                                                 \
    extern "C" __global__ void MMV_LB mmv_##fmt##_glu_nt##NT(                                \
        const u8* __restrict__ wg, const u8* __restrict__ wu, const u16* __restrict__ xh,    \
        const u16* __restrict__ xl, const u16* __restrict__ xm,                              \
        const float* __restrict__ xsc, float* y, float* part, u32* cnt, int rows, int k,     \
        int n, int act, int ks) {                                                            \
        mmv_body<G, true, NT>(wg, wu, xh, xl, xsc, 0, 0, y, part, cnt, rows, k, n, act, ks,  \
                              0, 0, 0.f, 0.f, 0, 0, xm);                                     \
    }
#define MMV_FMT3(fmt, G) \
    MMV_PLAIN3(fmt, G, 1) MMV_PLAIN3(fmt, G, 2) MMV_PLAIN3(fmt, G, 4) MMV_PLAIN3(fmt, G, 8) \
    MMV_GLU3(fmt, G, 1) MMV_GLU3(fmt, G, 2) MMV_GLU3(fmt, G, 4) MMV_GLU3(fmt, G, 8) \
    MMV_X1(fmt, G)
MMV_FMT3(bf16, MmvBF16)
