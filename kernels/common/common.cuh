// common.cuh — shared device helpers for every kernel family.
//
// Owns: the integer type names, f16/bf16 <-> f32 conversion without any CUDA header (inline
// PTX, so NVRTC needs no include path and the kernel identity covers every byte compiled),
// the fixed-order warp reduction, the gated-MLP activations, and the paged KV layout. The engine expands
// `#include "common/..."` lines itself before handing a family to NVRTC.
#pragma once

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned short u16;
typedef unsigned int u32;
typedef unsigned long long u64;

#define ASSAY_NEG_INF (__int_as_float(0xff800000))
#define ASSAY_NAN (__int_as_float(0x7fc00000))

// The paged KV cache: a layer's K (and V) cache is a pool of blocks of KV_BLOCK positions,
// each block [nkv][KV_BLOCK][hd] f16; a sequence's block table bt maps its block i
// (positions i*KV_BLOCK .. (i+1)*KV_BLOCK - 1) to a block of the pool. KV_BLOCK is one
// attention split (ATT_SPLIT), so a split reads one block. kv_off: the offset of (KV head h,
// position p, dim 0) in the pool.
#define KV_BLOCK 64
__device__ __forceinline__ u64 kv_off(const int* __restrict__ bt, int h, int p, int nkv, int hd) {
    return (((u64)bt[p / KV_BLOCK] * nkv + h) * KV_BLOCK + (p % KV_BLOCK)) * (u64)hd;
}

__device__ __forceinline__ float f16_to_f32(u16 h) {
    float f;
    asm("{ .reg .b16 t; mov.b16 t, %1; cvt.f32.f16 %0, t; }" : "=f"(f) : "h"(h));
    return f;
}

// Round to nearest even, like half::f16::from_f32 on the CPU side.
__device__ __forceinline__ u16 f32_to_f16(float f) {
    u16 h;
    asm("{ .reg .b16 t; cvt.rn.f16.f32 t, %1; mov.b16 %0, t; }" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float bf16_to_f32(u16 b) {
    return __uint_as_float(((u32)b) << 16);
}

// f32 -> bf16, round to nearest even (a NaN stays a quiet NaN).
__device__ __forceinline__ u16 f32_to_bf16(float f) {
    const u32 b = __float_as_uint(f);
    if ((b & 0x7fffffffu) > 0x7f800000u) return (u16)((b >> 16) | 0x40u);
    return (u16)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

// Butterfly sum over the 32 lanes of a warp. Every lane ends with the same bits (IEEE
// addition is commutative), and the order depends only on the lane values: a fixed tree.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Gated-MLP activations (elementwise.cu's gated_act and matvec's fused gate/up epilogue:
// one definition, so both give the same bits).
// Four values of x normalised as norm.cu does it: (x * inv) * (g + w_off), two unfused f32
// multiplies each (the folded RMSNorm of matvec.cu and of gemm.cu's staging).
__device__ __forceinline__ float4 norm4(float4 a, float inv, float4 g, float w_off) {
    a.x = __fmul_rn(__fmul_rn(a.x, inv), g.x + w_off);
    a.y = __fmul_rn(__fmul_rn(a.y, inv), g.y + w_off);
    a.z = __fmul_rn(__fmul_rn(a.z, inv), g.z + w_off);
    a.w = __fmul_rn(__fmul_rn(a.w, inv), g.w + w_off);
    return a;
}

__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }
__device__ __forceinline__ float gelu_tanh(float g) {
    const float k0 = 0.7978845608028654f;  // sqrt(2/pi)
    return 0.5f * g * (1.0f + tanhf(k0 * (g + 0.044715f * g * g * g)));
}

// Little-endian loads from a byte pointer with the alignment stated in the name.
__device__ __forceinline__ u32 ld_u16(const u8* p) { return *(const u16*)p; }
__device__ __forceinline__ u32 ld_u32_a2(const u8* p) {
    return ld_u16(p) | (ld_u16(p + 2) << 16);
}
__device__ __forceinline__ u32 ld_u32(const u8* p) { return *(const u32*)p; }

// Programmatic dependent launch (sm_90+; the engine's ops::PDL_KERNELS lists the kernels
// that use it). pdl_wait: wait until the grids this launch depends on have completed and
// their writes are visible; it must come before any read of their results (a no-op for a
// launch without a programmatic dependency). pdl_trigger: let the next launch (if it was
// launched programmatically) be scheduled now; it still waits for this grid to complete.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
