// mma.cuh — the tensor-core helpers shared by gemm.cu (the prompt pass) and mmv.cu (the
// decode products): quant bytes to exact f16 integers (`gm_pair`), the m16n8k16 f16 MMA
// (`gm_mma`), and the A-fragment loads of Q4_0 and Q8_0 (`GmQ4_0`, `GmQ8_0`; fragment map:
// gemm.cu's file comment). Both files include this one text, so the prompt pass and the
// decode products turn quants into the same f16 integers and multiply them with the same
// MMA. gemm.cu adds its Q6_K / F16 / BF16 loads; the bf16 MMA (`gm_mma_bf16`), the split of
// x into three bf16 parts (`gm_bf16_parts`) and the folded norm's 1 / rms (`gm_stage_inv`)
// are here for both files' BF16 products (mmv.cu's BF16 staging gives gemm.cu's bits).
#pragma once
#include "common/common.cuh"
#include "common/formats.cuh"

// (lo, hi) = bytes (0, 1) or (2, 3) of w, each under 0x64 (f16 1024 + byte), minus `off`
// (f16x2 of 1024 + offset): two exact f16 integers.
__device__ __forceinline__ u32 gm_pair(u32 w, u32 sel, u32 off) {
    u32 r, d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(w), "r"(0x64u), "r"(sel));
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(r), "r"(off));
    return d;
}

__device__ __forceinline__ void gm_mma(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0,
                                       u32 b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    __trap();
#endif
}

// The same MMA on bf16 operands (BF16 weights, x in bf16 parts).
__device__ __forceinline__ void gm_mma_bf16(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0,
                                            u32 b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    __trap();
#endif
}

// One row's share of a chunk for lane t: two words of four unsigned quant bytes (w0: the
// values of k16 step 0, w1: step 1) and the scales of step 0 and step 1 (gemm.cu widens it
// to `GmAF` for its float formats).
struct GmA {
    u32 w0, w1;
    float s0, s1;
};

// Q4_0 (planar, formats.cuh): lane t takes the low (t < 2) or high nibbles of
// qs[8 (t & 1) .. 8 (t & 1) + 7]: values 8t .. 8t + 7.
struct GmQ4_0 {
    static constexpr int KIND = 0;
    static constexpr bool SPLIT = false;
    static constexpr int ELEMS = 32;
    static constexpr u32 OFF = 0x64086408u;  // 1032: q - 8
    static constexpr int QBYTES = 16;  // quant bytes per block (mmv.cu's prefetch)
    static __device__ __forceinline__ GmA load(const WMat& m, u64 row, int c, int t) {
        const u64 bi = row * m.nb + (u64)c;
        const uint2 q = *(const uint2*)(m.w + bi * 16 + 8 * (t & 1));
        const int sh = 4 * (t >> 1);
        const float d = f16_to_f32(*(const u16*)(m.w + m.rows * m.nb * 16 + bi * 2));
        return {(q.x >> sh) & 0x0F0F0F0Fu, (q.y >> sh) & 0x0F0F0F0Fu, d, d};
    }
};

// Q8_0 (planar): lane t takes qs[8t .. 8t + 7] (as q + 128).
struct GmQ8_0 {
    static constexpr int KIND = 0;
    static constexpr bool SPLIT = false;
    static constexpr int ELEMS = 32;
    static constexpr u32 OFF = 0x64806480u;  // 1152: (q + 128) - 128
    static constexpr int QBYTES = 32;
    static __device__ __forceinline__ GmA load(const WMat& m, u64 row, int c, int t) {
        const u64 bi = row * m.nb + (u64)c;
        const uint2 q = *(const uint2*)(m.w + bi * 32 + 8 * t);
        const float d = f16_to_f32(*(const u16*)(m.w + m.rows * m.nb * 32 + bi * 2));
        return {q.x ^ 0x80808080u, q.y ^ 0x80808080u, d, d};
    }
};

// x as three bf16 parts for the BF16 products (gemm.cu's `gemm_stage_x_bf16`, mmv.cu's
// one-token staging: the same statements, hence the same bits): hi = bf16(v), mid =
// bf16(v - hi), lo = bf16(v - hi - mid), each difference exact in f32, so hi + mid + lo = v
// for every finite v whose parts stay normal.
__device__ __forceinline__ void gm_bf16_parts(float v, u16& hi, u16& mid, u16& lo) {
    const u16 h = f32_to_bf16(v);
    const float r1 = __fsub_rn(v, bf16_to_f32(h));
    const u16 m = f32_to_bf16(r1);
    hi = h;
    mid = m;
    lo = f32_to_bf16(__fsub_rn(r1, bf16_to_f32(m)));
}

// 1 / rms of token row xt for the folded norm (nw non-null; 1 otherwise), by the 256
// threads of the block: matvec.cu's order (f64 sum of f32 squares, fixed butterfly, then
// the 8 warps' sums in order). red: 8 doubles of shared memory.
__device__ __forceinline__ float gm_stage_inv(const float* __restrict__ xt, int k,
                                              const float* __restrict__ nw, float eps,
                                              double* red) {
    const int lane = threadIdx.x & 31;
    float inv = 1.f;
    if (nw != 0) {
        double ss = 0.0;
        for (int i = threadIdx.x; i < k; i += 256) ss += (double)__fmul_rn(xt[i], xt[i]);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (lane == 0) red[threadIdx.x >> 5] = ss;
        __syncthreads();
        double tot = 0.0;
#pragma unroll
        for (int i = 0; i < 8; i++) tot += red[i];
        const float mean = (float)(tot / (double)k);
        inv = 1.0f / sqrtf(mean + eps);
    }
    return inv;
}
