// matvec.cu — y[t] = W x[t] (+ bias) for a weight matrix in any supported format.
//
// W is `rows` rows of `k` values, each row `row_bytes` bytes in the format's block layout
// (common/formats.cuh), starting 16-byte aligned. x holds `ntok` f32 vectors of length k
// (ntok <= MV_MAX_TOK), y holds `ntok` f32 vectors of length `rows`.
//
// One warp per output row, MV_WARPS rows per block. Lane l takes the 32-value chunks
// l, l+32, l+64, ... in that order; each chunk's 32 products are summed in element order
// with fmaf, the chunk sums are added to the lane's accumulator, and the 32 lane sums are
// reduced by a fixed butterfly. Each token has its own accumulator and identical
// arithmetic, so a row's result does not depend on `ntok` or on which rows share the
// launch (batch invariance, the exactness contract).
#include "common/common.cuh"
#include "common/formats.cuh"

#ifndef MV_WARPS
#define MV_WARPS 4
#endif
#ifndef MV_MAX_TOK
#define MV_MAX_TOK 8
#endif

template <class F>
__device__ __forceinline__ void matvec_body(const u8* __restrict__ w, u64 row_bytes,
                                            const float* __restrict__ x,
                                            const float* __restrict__ bias,
                                            float* __restrict__ y, int rows, int k, int ntok) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    if (row >= rows) return;
    const u8* wr = w + (u64)row * row_bytes;
    const int nchunks = k >> 5;
    float acc[MV_MAX_TOK];
#pragma unroll
    for (int t = 0; t < MV_MAX_TOK; t++) acc[t] = 0.f;
    for (int c = lane; c < nchunks; c += 32) {
        float v[32];
        F::chunk(wr, c, v);
#pragma unroll
        for (int t = 0; t < MV_MAX_TOK; t++) {
            if (t < ntok) {
                const float4* xp = (const float4*)(x + (u64)t * k + ((u64)c << 5));
                float s = 0.f;
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    const float4 a = xp[i];
                    s = fmaf(v[4 * i], a.x, s);
                    s = fmaf(v[4 * i + 1], a.y, s);
                    s = fmaf(v[4 * i + 2], a.z, s);
                    s = fmaf(v[4 * i + 3], a.w, s);
                }
                acc[t] += s;
            }
        }
    }
#pragma unroll
    for (int t = 0; t < MV_MAX_TOK; t++) {
        if (t < ntok) {
            const float s = warp_sum(acc[t]);
            if (lane == 0) y[(u64)t * rows + row] = bias != 0 ? s + bias[row] : s;
        }
    }
}

#define ASSAY_MATVEC(name, F)                                                              \
    extern "C" __global__ void __launch_bounds__(MV_WARPS * 32)                          \
        matvec_##name(const u8* __restrict__ w, u64 row_bytes, const float* __restrict__ x, \
                      const float* __restrict__ bias, float* __restrict__ y, int rows, int k, \
                      int ntok) {                                                          \
        matvec_body<F>(w, row_bytes, x, bias, y, rows, k, ntok);                           \
    }

ASSAY_FOR_EACH_FORMAT(ASSAY_MATVEC)
