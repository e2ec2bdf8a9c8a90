// gemmt.cu — the tiled prompt pass: y[t] = W x[t] for a whole prompt pass (hundreds of
// token rows) as a dense tensor-core GEMM over shared-memory tiles.
//
// Two kinds of launches per matrix product (plus gemm.cu's staging of x):
// 1. `gemmt_dq_<fmt>`: the weight matrix decoded into a scratch matrix of 16-bit floats
//    (f16, or bf16 when `bf` is set: BF16 weights), row-major `[rows][k]`, one thread per
//    32-value chunk (formats.cuh's `chunkm`, so every format the engine reads has it). For
//    a gate + up product the two matrices are interleaved in groups of GT_GLU_G rows (gate
//    rows 64 i .. 64 i + 63, then the same rows of up), so that one block's 128 columns hold
//    the matching gate and up rows. Each value is rounded once, to f16 (quants: d * (q - o)
//    is exact in f32 and rounded to f16's 11 bits; F16: exact) or bf16 (BF16: exact).
// 2. `gemmt_<f16|bf16>[_glu]_p<P>`: a block of 8 warps computes a tile of GT_BM = 128
//    tokens x GT_BN = 128 weight rows over the whole k, in steps of GT_BK = 32 values
//    staged into shared memory by cp.async (GT_ST stages in flight), A = x (token rows,
//    ldmatrix), B = the decoded weights (ldmatrix), `mma.sync.m16n8k16` f32 accumulate.
//    x is multiplied as P parts (gemm_stage_x's hi and lo f16 halves, or the first two bf16
//    parts of gemm_stage_x_bf16): per k16 step the part-0 MMA then the part-1 MMA.
//    Epilogues as gemm.cu: x's power-of-two scale undone, + bias, + residual (res may be
//    y), or act(gate) * up.
// Invariance: each output (token t, row r) is one f32 accumulator fed by the MMAs of the
// k16 steps in k order (parts in order within a step): its bits depend only on x[t], W's
// row r and k; never on n, on the tile the token lands in, or on the other tokens (an MMA
// output depends only on its row of A and its column of B). So a prompt chunked any way
// gives the same bits (the `chunking` gate). They are not the bits of gemm.cu's pass nor of
// the row path: the `prefill` gate and kernel-check's tolerance bound the difference.
#include "common/common.cuh"
#include "common/formats.cuh"
#include "common/mma.cuh"

#define GT_BM 128
#define GT_BN 128
#define GT_BK 32
#define GT_ST 3
// Shared-memory row stride in 16-bit values: 32 + 8 of padding (80 bytes), so the 8 rows
// an ldmatrix phase reads start on 8 distinct 16-byte bank groups.
#define GT_LD 40
#define GT_GLU_G 64

// ---------------------------------------------------------------------------------------
// 1. Decoding: thread i takes chunk i % (k / 32) of row i / (k / 32).
template <class F>
__device__ __forceinline__ void gemmt_dq_body(const u8* __restrict__ w, u64 row_bytes, int rows,
                                              int k, u16* __restrict__ out, int group,
                                              int half, int fault, int bf) {
    const int cpr = k >> 5;
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (u64)rows * cpr) return;
    const int row = (int)(i / cpr), c = (int)(i % cpr);
    const WMat m = {w, row_bytes, (u64)rows, (u64)(k / F::ELEMS)};
    float v[32];
    F::chunkm(m, (u64)row, c, v);
    // The `prefill` gate's planted fault: every row's chunk 0 contributes nothing.
    if (fault != 0 && c == 0) {
#pragma unroll
        for (int j = 0; j < 32; j++) v[j] = 0.f;
    }
    const int orow = group == 0 ? row : (row / group) * 2 * group + half * group + row % group;
    uint4* o = (uint4*)(out + (u64)orow * k + ((u64)c << 5));
#pragma unroll
    for (int q = 0; q < 4; q++) {
        u32 p[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float a = v[8 * q + 2 * j], b = v[8 * q + 2 * j + 1];
            const u32 lo = bf ? f32_to_bf16(a) : f32_to_f16(a);
            const u32 hi = bf ? f32_to_bf16(b) : f32_to_f16(b);
            p[j] = lo | (hi << 16);
        }
        o[q] = make_uint4(p[0], p[1], p[2], p[3]);
    }
}

#define GEMMT_DQ(name, F)                                                                   \
    extern "C" __global__ void __launch_bounds__(256)                                       \
        gemmt_dq_##name(const u8* __restrict__ w, u64 row_bytes, int rows, int k,           \
                        u16* __restrict__ out, int group, int half, int fault, int bf) {    \
        gemmt_dq_body<F>(w, row_bytes, rows, k, out, group, half, fault, bf);               \
    }
ASSAY_FOR_EACH_FORMAT(GEMMT_DQ)

// ---------------------------------------------------------------------------------------
// 2. The GEMM.
__device__ __forceinline__ u32 gt_smem(const void* p) {
    return (u32)__cvta_generic_to_shared(p);
}

// 16 bytes global -> shared, zero-filled when !ok (src must still be a valid address).
__device__ __forceinline__ void gt_cp16(u32 dst, const void* src, bool ok) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const int n = ok ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(n)
                 : "memory");
#else
    __trap();
#endif
}

__device__ __forceinline__ void gt_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void gt_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

__device__ __forceinline__ void gt_ldm4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                 : "r"(addr)
                 : "memory");
#else
    r0 = r1 = r2 = r3 = 0u;
    __trap();
#endif
}

template <int KIND>
__device__ __forceinline__ void gt_mma(float* c, const u32* a, u32 b0, u32 b1) {
    if (KIND == 2) {
        gm_mma_bf16(c, a[0], a[1], a[2], a[3], b0, b1);
    } else {
        gm_mma(c, a[0], a[1], a[2], a[3], b0, b1);
    }
}

// Shared memory: GT_ST stages of [P][GT_BM][GT_LD] x parts then [GT_BN][GT_LD] weights;
// the gate + up epilogue reuses it as [GT_BM][GT_BN + 4] floats.
template <int KIND, int P, bool GLU>
__device__ __forceinline__ void gemmt_body(const u16* __restrict__ xh, const u16* __restrict__ xl,
                                           const float* __restrict__ xsc,
                                           const u16* __restrict__ wq, int wrows,
                                           const float* __restrict__ bias, const float* res,
                                           float* y, int rows, int k, int n, int act) {
    extern __shared__ uint4 gt_raw[];
    u16* sm = (u16*)gt_raw;
    constexpr int XS = GT_BM * GT_LD;
    constexpr int STAGE = (P * GT_BM + GT_BN) * GT_LD;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 2, wn = warp & 3;  // warp tile: 64 tokens x 32 weight rows
    const int g = lane >> 2, t = lane & 3;
    const int tok0 = blockIdx.x * GT_BM, col0 = blockIdx.y * GT_BN;
    const int kt_n = k / GT_BK;

    // Loads of k step kt into stage s: P x 128 token rows and 128 weight rows, 4 pieces
    // of 16 bytes each.
    auto load = [&](int s, int kt) {
        u16* st = sm + s * STAGE;
        const int kk = kt * GT_BK;
#pragma unroll
        for (int i = 0; i < (P * GT_BM * 4) / 256; i++) {
            const int q = tid + 256 * i;
            const int p = q / (GT_BM * 4), r = (q / 4) % GT_BM, seg = q & 3;
            const int tok = tok0 + r;
            const bool ok = tok < n;
            const u16* src = (p == 0 ? xh : xl) + (ok ? (u64)tok * k + kk + 8 * seg : 0);
            gt_cp16(gt_smem(st + p * XS + r * GT_LD + 8 * seg), src, ok);
        }
#pragma unroll
        for (int i = 0; i < (GT_BN * 4) / 256; i++) {
            const int q = tid + 256 * i;
            const int r = q >> 2, seg = q & 3;
            const int row = col0 + r;
            const bool ok = row < wrows;
            const u16* src = wq + (ok ? (u64)row * k + kk + 8 * seg : 0);
            gt_cp16(gt_smem(st + P * XS + r * GT_LD + 8 * seg), src, ok);
        }
    };

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;

#pragma unroll
    for (int s = 0; s < GT_ST - 1; s++) {
        if (s < kt_n) load(s, s);
        gt_commit();
    }
    // ldmatrix lane addresses (in 16-bit values, relative to a stage's x part / weights):
    // A (x, m16 x k16): matrix j = lane / 8 holds rows (j & 1) * 8 .. + 7, k (j >> 1) * 8;
    // B (weights, two n8 x k16 tiles): matrix j holds rows (j >> 1) * 8 .. + 7, k (j & 1) * 8.
    const int a_off = (wm * 64 + (lane & 7) + ((lane >> 3) & 1) * 8) * GT_LD + (lane >> 4) * 8;
    const int b_off = (wn * 32 + (lane & 7) + (lane >> 4) * 8) * GT_LD + ((lane >> 3) & 1) * 8;
#pragma unroll 1
    for (int kt = 0; kt < kt_n; kt++) {
        gt_wait<GT_ST - 2>();
        __syncthreads();
        if (kt + GT_ST - 1 < kt_n) load((kt + GT_ST - 1) % GT_ST, kt + GT_ST - 1);
        gt_commit();
        const u16* st = sm + (kt % GT_ST) * STAGE;
        const u32 xa = gt_smem(st) + 2 * a_off;
        const u32 wa = gt_smem(st + P * XS) + 2 * b_off;
#pragma unroll
        for (int ks = 0; ks < GT_BK / 16; ks++) {
            u32 b[4][2];
#pragma unroll
            for (int np = 0; np < 2; np++)
                gt_ldm4(wa + 2 * (np * 16 * GT_LD + ks * 16), b[2 * np][0], b[2 * np][1],
                        b[2 * np + 1][0], b[2 * np + 1][1]);
#pragma unroll
            for (int mt = 0; mt < 4; mt++) {
                u32 a[P][4];
#pragma unroll
                for (int p = 0; p < P; p++)
                    gt_ldm4(xa + 2 * (p * XS + mt * 16 * GT_LD + ks * 16), a[p][0], a[p][1],
                            a[p][2], a[p][3]);
#pragma unroll
                for (int nt = 0; nt < 4; nt++)
#pragma unroll
                    for (int p = 0; p < P; p++) gt_mma<KIND>(acc[mt][nt], a[p], b[nt][0], b[nt][1]);
            }
        }
    }
    gt_wait<0>();
    // C fragment of (mt, nt): [0..1] token wm*64 + 16 mt + g, rows wn*32 + 8 nt + 2t, +1;
    // [2..3] the token 8 further.
    if (!GLU) {
#pragma unroll
        for (int mt = 0; mt < 4; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int tok = tok0 + wm * 64 + 16 * mt + g + 8 * h;
                if (tok >= n) continue;
                // x's power-of-two scale undone (1 unless the row reached 2^15).
                const float u = xsc[tok];
#pragma unroll
                for (int nt = 0; nt < 4; nt++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int row = col0 + wn * 32 + 8 * nt + 2 * t + e;
                        if (row >= rows) continue;
                        const u64 oi = (u64)tok * rows + row;
                        const float s = __fmul_rn(acc[mt][nt][2 * h + e], u);
                        float v = bias != 0 ? s + bias[row] : s;
                        if (res != 0) v = v + res[oi];
                        y[oi] = v;
                    }
            }
        return;
    }
    // Gate + up: columns 0..63 of the tile are gate rows blockIdx.y * 64 + c, 64..127 the
    // same rows of up; pair them through shared memory.
    __syncthreads();
    float* cs = (float*)gt_raw;
    constexpr int CLD = GT_BN + 4;
#pragma unroll
    for (int mt = 0; mt < 4; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float* d = cs + (wm * 64 + 16 * mt + g + 8 * h) * CLD + wn * 32 + 8 * nt + 2 * t;
                d[0] = acc[mt][nt][2 * h];
                d[1] = acc[mt][nt][2 * h + 1];
            }
    __syncthreads();
    for (int o = tid; o < GT_BM * GT_GLU_G; o += 256) {
        const int r = o / GT_GLU_G, c = o % GT_GLU_G;
        const int tok = tok0 + r, row = blockIdx.y * GT_GLU_G + c;
        if (tok >= n || row >= rows) continue;
        const float u = xsc[tok];
        const float s = __fmul_rn(cs[r * CLD + c], u);
        const float s2 = __fmul_rn(cs[r * CLD + GT_GLU_G + c], u);
        y[(u64)tok * rows + row] = __fmul_rn(act == 0 ? silu(s) : gelu_tanh(s), s2);
    }
}

#define GEMMT_ENTRY(name, KIND, P)                                                            \
    extern "C" __global__ void __launch_bounds__(256, 2)                                      \
        gemmt_##name##_p##P(const u16* __restrict__ xh, const u16* __restrict__ xl,           \
                            const float* __restrict__ xsc, const u16* __restrict__ wq,        \
                            int wrows, const float* __restrict__ bias, const float* res,      \
                            float* y, int rows, int k, int n) {                               \
        gemmt_body<KIND, P, false>(xh, xl, xsc, wq, wrows, bias, res, y, rows, k, n, 0);      \
    }                                                                                         \
    extern "C" __global__ void __launch_bounds__(256, 2)                                      \
        gemmt_##name##_glu_p##P(const u16* __restrict__ xh, const u16* __restrict__ xl,       \
                                const float* __restrict__ xsc, const u16* __restrict__ wq,    \
                                int wrows, float* y, int rows, int k, int n, int act) {       \
        gemmt_body<KIND, P, true>(xh, xl, xsc, wq, wrows, 0, 0, y, rows, k, n, act);          \
    }
GEMMT_ENTRY(f16, 1, 1)
GEMMT_ENTRY(f16, 1, 2)
GEMMT_ENTRY(bf16, 2, 1)
GEMMT_ENTRY(bf16, 2, 2)
