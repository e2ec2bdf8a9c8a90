// wgmma_gemm.cuh — a DRAFT of the prompt pass's GEMM on sm_90a warpgroup MMA (session 12),
// not wired into the engine: y[t][r] = sum_k x[t][k] * w[r][k] for f16 x ([n][k]) and f16
// weights ([rows][k]), f32 out ([n][rows]). One block of two warpgroups computes 128 tokens
// x 128 weight rows; k in tiles of 64 staged by cp.async into 128-byte-swizzled shared memory
// (4 stages), each warpgroup issuing wgmma.m64n128k16 (or n256: 128 x 256 tiles) over its 64 tokens with both operands
// read from shared memory through matrix descriptors. Every output is one f32 accumulator
// fed by k16 steps in k order, as in gemmt.cu, so its bits do not depend on the tile it
// lands in. research/notes/wgmma/README.md says what it measured.
#pragma once
#include "common/common.cuh"
#include "common/tc.cuh"

#define WG_BM 128
#define WG_BN 128
#define WG_BK 64
#define WG_ST 4
#define WG_XB (WG_BM * WG_BK * 2)
#define WG_WB (WG_BN * WG_BK * 2)
#define WG_STB (WG_XB + WG_WB)
#define WG_SMEM (WG_ST * WG_STB + 1024)
#define WG_SMEM256 (WG_ST * (WG_XB + 256 * WG_BK * 2) + 1024)

// Matrix descriptor of a K-major tile of 128-byte rows, 128-byte swizzle: start address,
// leading-dimension offset 16 bytes (unused by this swizzle), 1024 bytes between groups of 8
// rows, swizzle mode 1 (bits 62-63).
__device__ __forceinline__ u64 wg_desc(u32 addr) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)(16 >> 4) << 16) | ((u64)(1024 >> 4) << 32) |
           (1ull << 62);
}

__device__ __forceinline__ void wg_m64n128k16(float* d, u64 da, u64 db) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, 1, 1, 1, 0, 0;"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]),
          "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
          "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
          "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]),
          "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
          "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db));
#else
    __trap();
#endif
}

__device__ __forceinline__ void wg_m64n256k16(float* d, u64 da, u64 db) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, 1, 1, 1, 0, 0;"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]),
          "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
          "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
          "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
          "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]),
          "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
          "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]),
          "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]),
          "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
          "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),
          "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]),
          "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]),
          "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
          "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]),
          "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db));
#else
    __trap();
#endif
}

__device__ __forceinline__ void wg_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void wg_wait0() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#endif
}
// Shared-memory writes of the generic proxy (cp.async) made visible to wgmma's async proxy.
__device__ __forceinline__ void wg_proxy_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

template <int BN>
__device__ __forceinline__ void wgmma_body(const u16* __restrict__ x, const u16* __restrict__ w,
                                           float* __restrict__ y, int n, int rows, int k) {
    constexpr int WB = BN * WG_BK * 2, STB = WG_XB + WB;
    extern __shared__ uint4 wg_raw[];
    // 128-byte swizzle works on address bits 4-9: stages start on 1024-byte boundaries.
    const u32 base0 = (gt_smem(wg_raw) + 1023u) & ~1023u;
    const int tid = threadIdx.x, wg = tid >> 7;
    const int tok0 = blockIdx.x * WG_BM, row0 = blockIdx.y * BN;
    const int kt_n = k / WG_BK;
    // Loads of k tile kt into stage s: 128 rows x 8 chunks of 16 bytes per operand, chunk c
    // of row r at r * 128 + ((c ^ (r & 7)) * 16).
    auto load = [&](int s, int kt) {
        const u32 st = base0 + s * STB;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int q = tid + 256 * i, r = q >> 3, c = q & 7;
            const int tok = tok0 + r;
            gt_cp16(st + r * 128 + ((c ^ (r & 7)) << 4),
                    x + (tok < n ? (u64)tok * k + kt * WG_BK + c * 8 : 0), tok < n);
        }
#pragma unroll
        for (int i = 0; i < BN / 32; i++) {
            const int q = tid + 256 * i, r = q >> 3, c = q & 7;
            const int row = row0 + r;
            gt_cp16(st + WG_XB + r * 128 + ((c ^ (r & 7)) << 4),
                    w + (row < rows ? (u64)row * k + kt * WG_BK + c * 8 : 0), row < rows);
        }
    };
    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; i++) d[i] = 0.f;
#pragma unroll
    for (int s = 0; s < WG_ST - 1; s++) {
        if (s < kt_n) load(s, s);
        gt_commit();
    }
#pragma unroll 1
    for (int kt = 0; kt < kt_n; kt++) {
        gt_wait<WG_ST - 2>();
        wg_proxy_fence();
        __syncthreads();
        if (kt + WG_ST - 1 < kt_n) load((kt + WG_ST - 1) % WG_ST, kt + WG_ST - 1);
        gt_commit();
        const u32 st = base0 + (kt % WG_ST) * STB;
        const u32 xa = st + wg * 64 * 128, wa = st + WG_XB;
        wg_fence();
#pragma unroll
        for (int ks = 0; ks < WG_BK / 16; ks++) {
            if (BN == 256)
                wg_m64n256k16(d, wg_desc(xa + ks * 32), wg_desc(wa + ks * 32));
            else
                wg_m64n128k16(d, wg_desc(xa + ks * 32), wg_desc(wa + ks * 32));
        }
        wg_commit();
        wg_wait0();
    }
    // D fragment: warp v of the warpgroup holds tokens 16 v + g and + 8; register 4 j + e
    // (e < 2) is column 8 j + 2 t + e of the first, 4 j + 2 + e of the second.
    const int lane = tid & 31, v = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < BN / 8; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int tok = tok0 + wg * 64 + 16 * v + g + 8 * h;
            const int col = row0 + 8 * j + 2 * t;
            if (tok >= n) continue;
            if (col < rows) y[(u64)tok * rows + col] = d[4 * j + 2 * h];
            if (col + 1 < rows) y[(u64)tok * rows + col + 1] = d[4 * j + 2 * h + 1];
        }
}

extern "C" __global__ void __launch_bounds__(256, 1)
    wgmma_f16_proto(const u16* __restrict__ x, const u16* __restrict__ w, float* __restrict__ y,
                    int n, int rows, int k) {
    wgmma_body<128>(x, w, y, n, rows, k);
}
extern "C" __global__ void __launch_bounds__(256, 1)
    wgmma_f16_proto_n256(const u16* __restrict__ x, const u16* __restrict__ w,
                         float* __restrict__ y, int n, int rows, int k) {
    wgmma_body<256>(x, w, y, n, rows, k);
}
