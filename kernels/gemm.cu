// gemm.cu — the prompt pass on tensor cores: y[t] = W x[t] for up to GEMM_N = 64 rows of a
// prompt at once, with `mma.sync.aligned.m16n8k16` (f16 x f16 -> f32, sm_80+), the rows of
// the pass as the N dimension in GEMM_NT = GEMM_N / 8 n-tiles of 8.
//
// Two launches per matrix product:
// 1. `gemm_stage_x` (one block per token slot, 8 * ceil(n / 8) blocks): x of each live
//    token, optionally RMS-normalised exactly as matvec.cu folds the norm (same f64 sum
//    order with 256 threads, same f32 multiplies), split into two f16 halves hi = f16(v),
//    lo = f16(v - hi) (xh / xl, `[GEMM_N][k]`); the slots n..8 * ceil(n / 8) - 1 of the
//    last n-tile are written as zeros.
// 2. `gemm_<fmt>` / `gemm_<fmt>_glu`: GEMM_WARPS warps per block, in rg row groups (a
//    launch argument: 1, 2 or 4) of kg = GEMM_WARPS / rg warps; a row group owns MT * 16
//    rows (MT = GEMM_MT for a plain product, GEMM_MT_GLU for gate + up); its warp w takes
//    the contiguous chunk range [w * per, (w + 1) * per) of every row (per = ceil(chunks /
//    kg), a chunk = 32 values) and, per chunk and 16-row tile, turns the quants into f16 INTEGERS
//    (exact: Q4_0 q - 8, Q8_0 q, Q6_K q - 32) ONCE, then for each live n-tile of 8 tokens
//    runs the MMAs of the chunk into a zeroed partial accumulator (hi then lo for each k16
//    step) and adds scale * partial to the warp's accumulator of that (tile, n-tile) (fmaf,
//    in chunk order; the scale is the block's d, or for Q6_K the 16-value sub-block's
//    d * sc, applied after each k16 step). So each weight load and dequantisation serves
//    up to 64 tokens. A row group's warp sums are added in k order in shared memory (warp
//    0 stores, then warp 1 adds, ...: a fixed order), then the epilogue of matvec.cu
//    (after x's power-of-two scale, if any, is multiplied back): + bias, + residual (res
//    may be y), or act(gate) * up.
// Invariance: an MMA output element (row m, token n) depends only on row m of A and column
// n of B; the chunk split depends only on k and rg (fixed per product); so a token's outputs are the same bits
// whatever the other tokens of the pass are and whatever n is (kernel-check `gemm` cases).
// They are NOT the bits of the row path (matvec.cu: f32 x per value, another order); the
// `prefill` gate bounds the difference.
//
// Fragment mapping (PTX ISA, m16n8k16 .f16): lane = 4 g + t; A regs hold rows g and g + 8,
// logical k columns 2t, 2t+1, 2t+8, 2t+9; B regs hold token g, the same logical k. A
// logical k of a k16 step is mapped to a value of the chunk, the same map for A and B (a
// permutation of the dot product's terms):
// - "contiguous" formats (Q4_0, Q8_0): lane t holds values 8t .. 8t+7 of the chunk: step
//   0 takes 8t .. 8t+3, step 1 takes 8t+4 .. 8t+7 (B: one 16-byte load of 8 f16).
// - "split" formats (Q6_K, 16-value sub-blocks): step s holds values 16 s .. 16 s + 15,
//   lane t values 16 s + 4t .. 16 s + 4t + 3 (B: two 8-byte loads).
// Quants become f16 without conversions: a byte b under the f16 exponent of 1024
// (0x6400 | b) is 1024 + b exactly, and one f16x2 subtraction gives b - offset exactly.
// Float weights are the A fragments as they are (KIND 1: F16, KIND 2: BF16; scale 1): lane
// t's 16-byte load holds values 8t .. 8t + 7 of its row's chunk, the contiguous map above.
// BF16 multiplies on the bf16 MMA (`mma...bf16.bf16`), with x staged by
// `gemm_stage_x_bf16` as three bf16 parts hi + mid + lo (each the rounding of what the
// previous parts left: their sum is x exactly, bf16 keeping f32's exponent range, so no
// power-of-two scaling); `lo` = 0 drops the third part (x to 16 bits).
#include "common/common.cuh"
#include "common/formats.cuh"
#include "common/mma.cuh"

#ifndef GEMM_WARPS
#define GEMM_WARPS 16
#endif
#ifndef GEMM_MT
#define GEMM_MT 2
#endif
#ifndef GEMM_MT_GLU
#define GEMM_MT_GLU 1
#endif
#ifndef GEMM_N
#define GEMM_N 64
#endif
#ifndef GEMM_U
#define GEMM_U 1
#endif
#ifndef GEMM_MINB
#define GEMM_MINB 1
#endif
#define GEMM_NT (GEMM_N / 8)
#define GEMM_RG_MAX 4

// The format's MMA: bf16 for KIND 2, f16 otherwise.
template <int KIND>
__device__ __forceinline__ void gm_mma_k(float* c, const u32* a, u32 b0, u32 b1) {
    if (KIND == 2) {
        gm_mma_bf16(c, a[0], a[1], a[2], a[3], b0, b1);
    } else {
        gm_mma(c, a[0], a[1], a[2], a[3], b0, b1);
    }
}

// GmA (common/mma.cuh) widened for the float formats (KIND 1, 2): w0 .. w3 are the 8
// values' four pairs (w0, w1 step 0, w2, w3 step 1). `gm_af` widens a quant load's GmA.
struct GmAF {
    u32 w0, w1;
    float s0, s1;
    u32 w2 = 0u, w3 = 0u;
};
__device__ __forceinline__ GmAF gm_af(const GmA& a) { return {a.w0, a.w1, a.s0, a.s1}; }
__device__ __forceinline__ GmAF gm_af(const GmAF& a) { return a; }

// Q6_K (planar): chunk c = sub-blocks 2(c & 7) and 2(c & 7) + 1 of block c >> 3 (16 values
// each, scales d * sc); lane t takes values 4t .. 4t + 3 (word t) and 16 + 4t .. (word 4+t).
struct GmQ6_K {
    static constexpr int KIND = 0;
    static constexpr bool SPLIT = true;
    static constexpr int ELEMS = 256;
    static constexpr u32 OFF = 0x64206420u;  // 1056: q - 32
    static __device__ __forceinline__ GmAF load(const WMat& m, u64 row, int c, int t) {
        const u64 bi = row * m.nb + (u64)(c >> 3);
        const int j = c & 7;
        const int n = j >> 2, r = j & 3;
        const u8* b = m.w + bi * 192;
        const u32* pl = (const u32*)(b + 64 * n + 32 * (r & 1));
        const u32* ph = (const u32*)(b + 128 + 32 * n);
        const int shl = 4 * (r >> 1), shh = 2 * r;
        const u32 l0 = pl[t], l1 = pl[4 + t], h0 = ph[t], h1 = ph[4 + t];
        const u32 sc = *(const u16*)(m.w + m.rows * m.nb * 192 + bi * 16 + 8 * n + 2 * r);
        const float d = f16_to_f32(*(const u16*)(m.w + m.rows * m.nb * 208 + bi * 2));
        GmAF a;
        a.w0 = ((l0 >> shl) & 0x0F0F0F0Fu) | (((h0 >> shh) & 0x03030303u) << 4);
        a.w1 = ((l1 >> shl) & 0x0F0F0F0Fu) | (((h1 >> shh) & 0x03030303u) << 4);
        a.s0 = d * (float)(int)(i8)(sc & 0xffu);
        a.s1 = d * (float)(int)(i8)(sc >> 8);
        return a;
    }
};

// F16 / BF16 (row-major, 64 bytes per 32-value chunk): lane t takes values 8t .. 8t + 7.
template <int K>
struct GmFloat {
    static constexpr int KIND = K;
    static constexpr bool SPLIT = false;
    static constexpr int ELEMS = 32;
    static constexpr u32 OFF = 0u;
    static __device__ __forceinline__ GmAF load(const WMat& m, u64 row, int c, int t) {
        const uint4 v = *(const uint4*)(m.w + (row * m.nb + (u64)c) * 64 + 16 * t);
        GmAF a = {v.x, v.y, 1.f, 1.f};
        a.w2 = v.z;
        a.w3 = v.w;
        return a;
    }
};
typedef GmFloat<1> GmF16;
typedef GmFloat<2> GmBF16;

// x of each live token as f16 hi / lo (see the file comment); the slots of the last n-tile
// past n become zeros. One block of 256 threads per slot (grid 8 * ceil(n / 8)). The norm is
// matvec.cu's, computed the same way (f64 sum of f32 squares, 256 threads, fixed butterfly
// and warp order). A row whose largest |v| reaches 2^15 is staged as v * 2^-e (e the
// smallest power keeping it under 2^15: exact, so f16(v) does not overflow to inf) and
// xsc[tok] = 2^e, which the GEMM's epilogue multiplies back (exact); other rows: xsc = 1
// and the bits of a plain staging.
// One staged value: v scaled down by 2^-e when e != 0, then f16 hi = f16(v) and lo =
// f16(v - hi).
__device__ __forceinline__ void gm_split(float v, int e, float down, unsigned short& h,
                                         unsigned short& l) {
    if (e != 0) v = __fmul_rn(v, down);
    h = f32_to_f16(v);
    l = f32_to_f16(v - f16_to_f32(h));
}

// gm_stage_inv (1 / rms of the folded norm): common/mma.cuh (mmv.cu's BF16 staging uses it).

extern "C" __global__ void __launch_bounds__(256)
    gemm_stage_x(const float* __restrict__ x, int n, int k, const float* __restrict__ nw,
                 float eps, float w_off, u16* __restrict__ xh, u16* __restrict__ xl,
                 float* __restrict__ xsc) {
    __shared__ double red[8];
    __shared__ float redm[8];
    const int tok = blockIdx.x;
    const int lane = threadIdx.x & 31;
    u16* oh = xh + (u64)tok * k;
    u16* ol = xl + (u64)tok * k;
    if (tok >= n) {
        for (int i = threadIdx.x; i < k; i += 256) {
            oh[i] = 0;
            ol[i] = 0;
        }
        if (threadIdx.x == 0) xsc[tok] = 1.f;
        return;
    }
    const float* xt = x + (u64)tok * k;
    const float inv = gm_stage_inv(xt, k, nw, eps, red);
    // Four values per thread per step where k and the pointers allow 16-byte loads and
    // 8-byte stores (block-uniform): each value gets the same statements either way, and
    // the largest |v| does not depend on the order it is taken in.
    const bool v4 = (k & 3) == 0 && ((u64)xt & 15) == 0 && ((u64)nw & 15) == 0 &&
                    ((u64)oh & 7) == 0 && ((u64)ol & 7) == 0;
    // The row's largest |v| (NaN ignored), then its exponent e.
    float mx = 0.f;
    if (v4) {
        for (int i = threadIdx.x; i < (k >> 2); i += 256) {
            float4 v = ((const float4*)xt)[i];
            if (nw != 0) v = norm4(v, inv, ((const float4*)nw)[i], w_off);
            mx = fmaxf(mx, fabsf(v.x));
            mx = fmaxf(mx, fabsf(v.y));
            mx = fmaxf(mx, fabsf(v.z));
            mx = fmaxf(mx, fabsf(v.w));
        }
    } else {
        for (int i = threadIdx.x; i < k; i += 256) {
            float v = xt[i];
            if (nw != 0) v = __fmul_rn(__fmul_rn(v, inv), nw[i] + w_off);
            mx = fmaxf(mx, fabsf(v));
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (lane == 0) redm[threadIdx.x >> 5] = mx;
    __syncthreads();
    mx = redm[0];
#pragma unroll
    for (int i = 1; i < 8; i++) mx = fmaxf(mx, redm[i]);
    int e = 0;
    if (mx >= 32768.f && mx <= 3.0e38f) {
        int ex;
        frexpf(mx, &ex);  // mx < 2^ex
        e = ex - 15;
    }
    const float down = ldexpf(1.f, -e);
    if (threadIdx.x == 0) xsc[tok] = ldexpf(1.f, e);
    if (v4) {
        for (int i = threadIdx.x; i < (k >> 2); i += 256) {
            float4 v = ((const float4*)xt)[i];
            if (nw != 0) v = norm4(v, inv, ((const float4*)nw)[i], w_off);
            ushort4 h, l;
            gm_split(v.x, e, down, h.x, l.x);
            gm_split(v.y, e, down, h.y, l.y);
            gm_split(v.z, e, down, h.z, l.z);
            gm_split(v.w, e, down, h.w, l.w);
            ((ushort4*)oh)[i] = h;
            ((ushort4*)ol)[i] = l;
        }
    } else {
        for (int i = threadIdx.x; i < k; i += 256) {
            float v = xt[i];
            if (nw != 0) v = __fmul_rn(__fmul_rn(v, inv), nw[i] + w_off);
            u16 h, l;
            gm_split(v, e, down, h, l);
            oh[i] = h;
            ol[i] = l;
        }
    }
}

// x of each live token as three bf16 parts for the BF16 GEMM: hi = bf16(v), mid =
// bf16(v - hi), lo = bf16(v - hi - mid) (each difference exact in f32: hi + mid + lo = v for
// every finite v whose parts stay normal), the norm folded as in gemm_stage_x (the same
// inv); bf16 has f32's exponent range, so xsc = 1. Slots past n as zeros.
extern "C" __global__ void __launch_bounds__(256)
    gemm_stage_x_bf16(const float* __restrict__ x, int n, int k, const float* __restrict__ nw,
                      float eps, float w_off, u16* __restrict__ xh, u16* __restrict__ xl,
                      u16* __restrict__ xm, float* __restrict__ xsc) {
    __shared__ double red[8];
    const int tok = blockIdx.x;
    u16* oh = xh + (u64)tok * k;
    u16* ol = xl + (u64)tok * k;
    u16* om = xm + (u64)tok * k;
    if (threadIdx.x == 0) xsc[tok] = 1.f;
    if (tok >= n) {
        for (int i = threadIdx.x; i < k; i += 256) {
            oh[i] = 0;
            ol[i] = 0;
            om[i] = 0;
        }
        return;
    }
    const float* xt = x + (u64)tok * k;
    const float inv = gm_stage_inv(xt, k, nw, eps, red);
    for (int i = threadIdx.x; i < k; i += 256) {
        float v = xt[i];
        if (nw != 0) v = __fmul_rn(__fmul_rn(v, inv), nw[i] + w_off);
        gm_bf16_parts(v, oh[i], ol[i], om[i]);
    }
}

// The body: see the file comment. lo == 0 skips the lo MMAs (x as f16 only). fault != 0
// (the `prefill` gate's planted fault) drops the scale of every row's chunk 0.
// MT: 16-row tiles per warp (GEMM_MT for the plain products, GEMM_MT_GLU for gate + up).
// rg (1, 2 or 4, dividing GEMM_WARPS): row groups per block; warp w is row group w / kg,
// k group w % kg (kg = GEMM_WARPS / rg): the block owns rg * MT * 16 rows and the warps of
// one k group read the same x chunks at about the same time (L1 hits after the first).
template <class G, bool GLU, int MT>
__device__ __forceinline__ void gemm_body(const u8* __restrict__ w, const u8* __restrict__ w2,
                                          const u16* __restrict__ xh,
                                          const u16* __restrict__ xl,
                                          const u16* __restrict__ xm,
                                          const float* __restrict__ xsc,
                                          const float* __restrict__ bias, const float* res,
                                          float* y, int rows, int k, int n, int act, int lo,
                                          int fault, int rg) {
    constexpr int ROWS = MT * 16;
    constexpr int NM = GLU ? 2 : 1;
    // Row stride GEMM_N + 8 floats: the 8 rows g of a fragment store land 8 banks apart.
    constexpr int LD = GEMM_N + 8;
    __shared__ float red[NM][GEMM_RG_MAX * ROWS][LD];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int kg = GEMM_WARPS / rg;
    const int wr = warp / kg, wk = warp % kg;
    const int brows = rg * ROWS;
    const int row0 = blockIdx.x * brows + wr * ROWS;
    const int nchunks = k >> 5;
    // n-tiles of 8 tokens holding live tokens (warp-uniform); the tiles past them are not
    // computed (a token's outputs never depend on them).
    const int ntiles = (n + 7) >> 3;
    const WMat m = {w, 0, (u64)rows, (u64)(k / G::ELEMS)};
    const WMat m2 = {w2, 0, (u64)rows, (u64)(k / G::ELEMS)};
    // Rows past the end compute row rows-1 again and write nothing.
    u64 rr[MT][2];
#pragma unroll
    for (int i = 0; i < MT; i++) {
        rr[i][0] = (u64)min(row0 + 16 * i + g, rows - 1);
        rr[i][1] = (u64)min(row0 + 16 * i + g + 8, rows - 1);
    }
    float acc[NM][MT][GEMM_NT][4];
#pragma unroll
    for (int q = 0; q < NM; q++)
#pragma unroll
        for (int i = 0; i < MT; i++)
#pragma unroll
            for (int j = 0; j < GEMM_NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[q][i][j][e] = 0.f;
    const int per = (nchunks + kg - 1) / kg;
    const int c0 = wk * per, c1 = min(nchunks, c0 + per);
    // Token g of n-tile j is x row 8 j + g.
    const u16* xht = xh + (u64)g * k;
    const u16* xlt = xl + (u64)g * k;
    const u16* xmt = xm + (u64)g * k;
    // The second x part is multiplied when lo is set, or always for BF16 (its lo drops
    // the third part).
    const bool two = lo != 0 || G::KIND == 2;
    const bool three = lo != 0 && G::KIND == 2;
    // One chunk: the A fragments of every (matrix, tile) made once, then per n-tile the B
    // fragments of token 8 j + g and the MMAs of every (matrix, tile) against them.
    auto chunk = [&](int c, const GmAF (&a)[NM][MT][2]) {
        u32 af[NM][MT][2][4];
        float sc[NM][MT][2][2];
#pragma unroll
        for (int q = 0; q < NM; q++)
#pragma unroll
            for (int i = 0; i < MT; i++) {
                const GmAF& r0 = a[q][i][0];
                const GmAF& r1 = a[q][i][1];
                // k16 step s: A regs {row g: pair 0, row g+8: pair 0, row g: pair 1, ...}.
                if (G::KIND == 0) {
                    af[q][i][0][0] = gm_pair(r0.w0, 0x4140u, G::OFF);
                    af[q][i][0][1] = gm_pair(r1.w0, 0x4140u, G::OFF);
                    af[q][i][0][2] = gm_pair(r0.w0, 0x4342u, G::OFF);
                    af[q][i][0][3] = gm_pair(r1.w0, 0x4342u, G::OFF);
                    af[q][i][1][0] = gm_pair(r0.w1, 0x4140u, G::OFF);
                    af[q][i][1][1] = gm_pair(r1.w1, 0x4140u, G::OFF);
                    af[q][i][1][2] = gm_pair(r0.w1, 0x4342u, G::OFF);
                    af[q][i][1][3] = gm_pair(r1.w1, 0x4342u, G::OFF);
                } else {
                    af[q][i][0][0] = r0.w0;
                    af[q][i][0][1] = r1.w0;
                    af[q][i][0][2] = r0.w1;
                    af[q][i][0][3] = r1.w1;
                    af[q][i][1][0] = r0.w2;
                    af[q][i][1][1] = r1.w2;
                    af[q][i][1][2] = r0.w3;
                    af[q][i][1][3] = r1.w3;
                }
                const bool drop = fault != 0 && c == 0;
                sc[q][i][0][0] = drop ? 0.f : r0.s0;
                sc[q][i][0][1] = drop ? 0.f : r1.s0;
                sc[q][i][1][0] = drop ? 0.f : r0.s1;
                sc[q][i][1][1] = drop ? 0.f : r1.s1;
            }
#pragma unroll
        for (int j = 0; j < GEMM_NT; j++) {
            if (j >= ntiles) continue;
            const u16* ph = xht + (u64)(8 * j) * k + c * 32;
            const u16* pl = xlt + (u64)(8 * j) * k + c * 32;
            u32 bh[4], bl[4] = {0u, 0u, 0u, 0u}, bm[4] = {0u, 0u, 0u, 0u};
            if (G::SPLIT) {
                const uint2 h0 = *(const uint2*)(ph + 4 * t);
                const uint2 h1 = *(const uint2*)(ph + 16 + 4 * t);
                bh[0] = h0.x; bh[1] = h0.y; bh[2] = h1.x; bh[3] = h1.y;
                if (lo) {
                    const uint2 l0 = *(const uint2*)(pl + 4 * t);
                    const uint2 l1 = *(const uint2*)(pl + 16 + 4 * t);
                    bl[0] = l0.x; bl[1] = l0.y; bl[2] = l1.x; bl[3] = l1.y;
                }
            } else {
                const uint4 h = *(const uint4*)(ph + 8 * t);
                bh[0] = h.x; bh[1] = h.y; bh[2] = h.z; bh[3] = h.w;
                if (two) {
                    const uint4 l = *(const uint4*)(pl + 8 * t);
                    bl[0] = l.x; bl[1] = l.y; bl[2] = l.z; bl[3] = l.w;
                }
                if (three) {
                    const uint4 l = *(const uint4*)(xmt + (u64)(8 * j) * k + c * 32 + 8 * t);
                    bm[0] = l.x; bm[1] = l.y; bm[2] = l.z; bm[3] = l.w;
                }
            }
#pragma unroll
            for (int q = 0; q < NM; q++)
#pragma unroll
                for (int i = 0; i < MT; i++) {
                    const u32* f0 = af[q][i][0];
                    const u32* f1 = af[q][i][1];
                    float* ac = acc[q][i][j];
                    float p[4] = {0.f, 0.f, 0.f, 0.f};
                    gm_mma_k<G::KIND>(p, f0, bh[0], bh[1]);
                    if (two) gm_mma_k<G::KIND>(p, f0, bl[0], bl[1]);
                    if (three) gm_mma_k<G::KIND>(p, f0, bm[0], bm[1]);
                    if (G::SPLIT) {
                        ac[0] = fmaf(sc[q][i][0][0], p[0], ac[0]);
                        ac[1] = fmaf(sc[q][i][0][0], p[1], ac[1]);
                        ac[2] = fmaf(sc[q][i][0][1], p[2], ac[2]);
                        ac[3] = fmaf(sc[q][i][0][1], p[3], ac[3]);
                        p[0] = p[1] = p[2] = p[3] = 0.f;
                    }
                    gm_mma_k<G::KIND>(p, f1, bh[2], bh[3]);
                    if (two) gm_mma_k<G::KIND>(p, f1, bl[2], bl[3]);
                    if (three) gm_mma_k<G::KIND>(p, f1, bm[2], bm[3]);
                    ac[0] = fmaf(sc[q][i][1][0], p[0], ac[0]);
                    ac[1] = fmaf(sc[q][i][1][0], p[1], ac[1]);
                    ac[2] = fmaf(sc[q][i][1][1], p[2], ac[2]);
                    ac[3] = fmaf(sc[q][i][1][1], p[3], ac[3]);
                }
        }
    };
    // GEMM_U chunks' weights loaded before their MMAs, then the rest one by one; the
    // arithmetic is per chunk in chunk order either way.
    constexpr int U = GEMM_U;
    int c = c0;
    for (; c + U <= c1; c += U) {
        GmAF a[U][NM][MT][2];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int i = 0; i < MT; i++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    a[u][0][i][h] = gm_af(G::load(m, rr[i][h], c + u, t));
                    if (GLU) a[u][NM - 1][i][h] = gm_af(G::load(m2, rr[i][h], c + u, t));
                }
#pragma unroll
        for (int u = 0; u < U; u++) chunk(c + u, a[u]);
    }
    for (; c < c1; c++) {
        GmAF a[NM][MT][2];
#pragma unroll
        for (int i = 0; i < MT; i++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                a[0][i][h] = gm_af(G::load(m, rr[i][h], c, t));
                if (GLU) a[NM - 1][i][h] = gm_af(G::load(m2, rr[i][h], c, t));
            }
        chunk(c, a);
    }
    // Each row group's sums in k-group order (k group 0 stores, k group v adds after v - 1:
    // a fixed order). C fragment: acc[..][i][j][0..1] = row 16i + g, tokens 8j + 2t,
    // 8j + 2t + 1; [2..3] = row 16i + g + 8 (of the warp's row group: + wr * ROWS).
    for (int v = 0; v < kg; v++) {
        if (wk == v) {
#pragma unroll
            for (int q = 0; q < NM; q++)
#pragma unroll
                for (int i = 0; i < MT; i++)
#pragma unroll
                    for (int j = 0; j < GEMM_NT; j++) {
                        if (j >= ntiles) continue;
                        float* d0 = &red[q][wr * ROWS + 16 * i + g][8 * j + 2 * t];
                        float* d1 = &red[q][wr * ROWS + 16 * i + g + 8][8 * j + 2 * t];
                        const float* s = acc[q][i][j];
                        if (v == 0) {
                            d0[0] = s[0]; d0[1] = s[1]; d1[0] = s[2]; d1[1] = s[3];
                        } else {
                            d0[0] += s[0]; d0[1] += s[1]; d1[0] += s[2]; d1[1] += s[3];
                        }
                    }
        }
        __syncthreads();
    }
    for (int o = threadIdx.x; o < brows * n; o += GEMM_WARPS * 32) {
        const int tok = o / brows, r = o % brows;
        const int row = blockIdx.x * brows + r;
        if (row >= rows) continue;
        // x's power-of-two scale undone (1 unless the row reached 2^15: see gemm_stage_x).
        const float u = xsc[tok];
        const float s = __fmul_rn(red[0][r][tok], u);
        const u64 oi = (u64)tok * rows + row;
        if (GLU) {
            const float s2 = __fmul_rn(red[NM - 1][r][tok], u);
            y[oi] = __fmul_rn(act == 0 ? silu(s) : gelu_tanh(s), s2);
        } else {
            float v = bias != 0 ? s + bias[row] : s;
            if (res != 0) v = v + res[oi];
            y[oi] = v;
        }
    }
}

// Entry points: gemm_<fmt> (+ bias, + residual; res may be y) and gemm_<fmt>_glu, for
// the formats with a tensor-core prompt pass (engine/src/cuda/select.rs: GEMM_FORMATS).
extern "C" __global__ void __launch_bounds__(GEMM_WARPS * 32, GEMM_MINB)
    gemm_q4_0(const u8* __restrict__ w, const u16* __restrict__ xh, const u16* __restrict__ xl,
              const float* __restrict__ xsc,
              const float* __restrict__ bias, const float* res, float* y, int rows, int k, int n,
              int lo, int fault, int rg) {
    gemm_body<GmQ4_0, false, GEMM_MT>(w, w, xh, xl, xl, xsc, bias, res, y, rows, k, n, 0, lo, fault, rg);
}
extern "C" __global__ void __launch_bounds__(GEMM_WARPS * 32, GEMM_MINB)
    gemm_q4_0_glu(const u8* __restrict__ wg, const u8* __restrict__ wu, const u16* __restrict__ xh,
                  const u16* __restrict__ xl, const float* __restrict__ xsc, float* y, int rows,
                  int k, int n, int act, int lo, int fault, int rg) {
    gemm_body<GmQ4_0, true, GEMM_MT_GLU>(wg, wu, xh, xl, xl, xsc, 0, 0, y, rows, k, n, act, lo, fault, rg);
}
extern "C" __global__ void __launch_bounds__(GEMM_WARPS * 32, GEMM_MINB)
    gemm_q8_0(const u8* __restrict__ w, const u16* __restrict__ xh, const u16* __restrict__ xl,
              const float* __restrict__ xsc,
              const float* __restrict__ bias, const float* res, float* y, int rows, int k, int n,
              int lo, int fault, int rg) {
    gemm_body<GmQ8_0, false, GEMM_MT>(w, w, xh, xl, xl, xsc, bias, res, y, rows, k, n, 0, lo, fault, rg);
}
extern "C" __global__ void __launch_bounds__(GEMM_WARPS * 32, GEMM_MINB)
    gemm_q8_0_glu(const u8* __restrict__ wg, const u8* __restrict__ wu, const u16* __restrict__ xh,
                  const u16* __restrict__ xl, const float* __restrict__ xsc, float* y, int rows,
                  int k, int n, int act, int lo, int fault, int rg) {
    gemm_body<GmQ8_0, true, GEMM_MT_GLU>(wg, wu, xh, xl, xl, xsc, 0, 0, y, rows, k, n, act, lo, fault, rg);
}
extern "C" __global__ void __launch_bounds__(GEMM_WARPS * 32, GEMM_MINB)
    gemm_q6_k(const u8* __restrict__ w, const u16* __restrict__ xh, const u16* __restrict__ xl,
              const float* __restrict__ xsc,
              const float* __restrict__ bias, const float* res, float* y, int rows, int k, int n,
              int lo, int fault, int rg) {
    gemm_body<GmQ6_K, false, GEMM_MT>(w, w, xh, xl, xl, xsc, bias, res, y, rows, k, n, 0, lo, fault, rg);
}
extern "C" __global__ void __launch_bounds__(GEMM_WARPS * 32, GEMM_MINB)
    gemm_q6_k_glu(const u8* __restrict__ wg, const u8* __restrict__ wu, const u16* __restrict__ xh,
                  const u16* __restrict__ xl, const float* __restrict__ xsc, float* y, int rows,
                  int k, int n, int act, int lo, int fault, int rg) {
    gemm_body<GmQ6_K, true, GEMM_MT_GLU>(wg, wu, xh, xl, xl, xsc, 0, 0, y, rows, k, n, act, lo, fault, rg);
}
// F16 weights: x as f16 hi / lo (gemm_stage_x), the A fragments the weights themselves.
extern "C" __global__ void __launch_bounds__(GEMM_WARPS * 32, GEMM_MINB)
    gemm_f16(const u8* __restrict__ w, const u16* __restrict__ xh, const u16* __restrict__ xl,
             const float* __restrict__ xsc,
             const float* __restrict__ bias, const float* res, float* y, int rows, int k, int n,
             int lo, int fault, int rg) {
    gemm_body<GmF16, false, GEMM_MT>(w, w, xh, xl, xl, xsc, bias, res, y, rows, k, n, 0, lo, fault, rg);
}
extern "C" __global__ void __launch_bounds__(GEMM_WARPS * 32, GEMM_MINB)
    gemm_f16_glu(const u8* __restrict__ wg, const u8* __restrict__ wu, const u16* __restrict__ xh,
                 const u16* __restrict__ xl, const float* __restrict__ xsc, float* y, int rows,
                 int k, int n, int act, int lo, int fault, int rg) {
    gemm_body<GmF16, true, GEMM_MT_GLU>(wg, wu, xh, xl, xl, xsc, 0, 0, y, rows, k, n, act, lo, fault, rg);
}
// BF16 weights: x as three bf16 parts (gemm_stage_x_bf16: xh, xl, xm), bf16 MMAs.
extern "C" __global__ void __launch_bounds__(GEMM_WARPS * 32, GEMM_MINB)
    gemm_bf16(const u8* __restrict__ w, const u16* __restrict__ xh, const u16* __restrict__ xl,
              const u16* __restrict__ xm, const float* __restrict__ xsc,
              const float* __restrict__ bias, const float* res, float* y, int rows, int k, int n,
              int lo, int fault, int rg) {
    gemm_body<GmBF16, false, GEMM_MT>(w, w, xh, xl, xm, xsc, bias, res, y, rows, k, n, 0, lo, fault, rg);
}
extern "C" __global__ void __launch_bounds__(GEMM_WARPS * 32, GEMM_MINB)
    gemm_bf16_glu(const u8* __restrict__ wg, const u8* __restrict__ wu, const u16* __restrict__ xh,
                  const u16* __restrict__ xl, const u16* __restrict__ xm,
                  const float* __restrict__ xsc, float* y, int rows,
                  int k, int n, int act, int lo, int fault, int rg) {
    gemm_body<GmBF16, true, GEMM_MT_GLU>(wg, wu, xh, xl, xm, xsc, 0, 0, y, rows, k, n, act, lo, fault, rg);
}
