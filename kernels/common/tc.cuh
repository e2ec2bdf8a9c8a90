// tc.cuh — the shared-memory tile helpers of the tensor-core kernels (gemmt.cu's tiled GEMM
// and attention.cu's prompt-pass attention) and of matvec.cu's streamed kernel: a shared
// address, cp.async of 16 bytes (zero-fill when not ok) and of 4 bytes with their commit /
// wait, and ldmatrix x4 (plain and transposed).
#pragma once
#include "common/common.cuh"

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

// 16 bytes global -> shared (both 16-byte aligned), bypassing L1.
__device__ __forceinline__ void gt_cp16(u32 dst, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
#else
    __trap();
#endif
}

// 4 bytes global -> shared (both 4-byte aligned).
__device__ __forceinline__ void gt_cp4(u32 dst, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
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

// ldmatrix x4: four 8 x 8 matrices of 16-bit values (TRANS: each transposed).
template <bool TRANS>
__device__ __forceinline__ void gt_ldm4x(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                     : "r"(addr)
                     : "memory");
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
                     : "r"(addr)
                     : "memory");
#else
    r0 = r1 = r2 = r3 = 0u;
    __trap();
#endif
}
__device__ __forceinline__ void gt_ldm4(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    gt_ldm4x<false>(addr, r0, r1, r2, r3);
}
__device__ __forceinline__ void gt_ldm4t(u32 addr, u32& r0, u32& r1, u32& r2, u32& r3) {
    gt_ldm4x<true>(addr, r0, r1, r2, r3);
}

// Two f16 products, each rounded once (round to nearest even, subnormals kept).
__device__ __forceinline__ u32 gt_hmul2(u32 a, u32 b) {
    u32 r;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
