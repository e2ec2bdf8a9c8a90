// dp4a_core.h — the per-block integer arithmetic of the dp4a matvec, shared by the device
// kernels (dp4a.cuh, compiled by nvcc) and the host (ref.h / cpu_check.cpp, g++): the same
// source decides the nibble / byte order on both sides.
//
// A weight block (32 values) of Q4_0 is 16 quant bytes, byte j holding element j in its low
// nibble and element j + 16 in its high nibble (value d (q - 8)); of Q8_0, 32 int8 quants,
// byte j = element j (value d q). Both as little-endian 32-bit words: Q4_0 word i = bytes
// 4i .. 4i + 3 (elements 4i .. 4i + 3 low, 4i + 16 .. 4i + 19 high), Q8_0 word i = elements
// 4i .. 4i + 3. A quantised activation block is 32 int8 (element j = byte j) as 8 words xw,
// its f32 scale dx and the sum of its 32 quants sx (dp4a_quant.h / the quant kernel).
//
// idot: the exact integer dot of one weight block with one activation block,
//   Q4_0: sum_j (qw_j - 8) xq_j = sum_j qw_j xq_j - 8 sx,   Q8_0: sum_j qw_j xq_j,
// as a chain of dp4a (4 byte products + an int32 addend). Integer sums are exact, so the
// value is the same whatever the order of the 32 products: only its definition matters.
// |idot| <= 32 * 128 * 127 < 2^24: converting it to f32 is exact.
// dp_acc: the block's float step, acc' = fma((f32) isum, dw * dx, acc), the product dw * dx
// rounded to f32 first (one FMUL), then one FMA: the only rounding steps of a block.
#pragma once

#if !defined(__CUDACC_RTC__)
#include <cmath>
#endif
#if defined(__CUDACC__)
#define DP_HD __host__ __device__ __forceinline__
#else
#define DP_HD inline
#endif

typedef unsigned int dp_u32;

// __dp4a(a, b, c): c + sum over the 4 bytes of a_i * b_i, bytes as signed int8.
DP_HD int dp_dp4a(int a, int b, int c) {
#if defined(__CUDA_ARCH__)
    return __dp4a(a, b, c);
#else
    int s = c;
    for (int i = 0; i < 4; i++) {
        const int ai = (int)(signed char)(unsigned char)(((unsigned)a >> (8 * i)) & 0xffu);
        const int bi = (int)(signed char)(unsigned char)(((unsigned)b >> (8 * i)) & 0xffu);
        s += ai * bi;
    }
    return s;
#endif
}

// One weight block's float step (see the header).
DP_HD float dp_acc(float acc, int isum, float dw, float dx) {
#if defined(__CUDA_ARCH__)
    return __fmaf_rn(__int2float_rn(isum), __fmul_rn(dw, dx), acc);
#else
    const float dd = dw * dx;  // rounded to f32 (compile with -ffp-contract=off)
    return std::fma((float)isum, dd, acc);
#endif
}

struct DpQ4_0 {
    static constexpr int QB = 16;  // quant bytes per block (plane 0)
    static constexpr int QW = 4;   // ... as 32-bit words
    // sum_j (q_j - 8) x_j: low nibbles of word i against x word i, high against x word 4 + i.
    static DP_HD int idot(const dp_u32* q, const int* xw, int sx) {
        int s = -8 * sx;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            s = dp_dp4a((int)(q[i] & 0x0F0F0F0Fu), xw[i], s);
            s = dp_dp4a((int)((q[i] >> 4) & 0x0F0F0F0Fu), xw[4 + i], s);
        }
        return s;
    }
};

struct DpQ8_0 {
    static constexpr int QB = 32;
    static constexpr int QW = 8;
    // sum_j q_j x_j (sx unused).
    static DP_HD int idot(const dp_u32* q, const int* xw, int) {
        int s = 0;
#pragma unroll
        for (int i = 0; i < 8; i++) s = dp_dp4a((int)q[i], xw[i], s);
        return s;
    }
};
