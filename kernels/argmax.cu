// argmax.cu — greedy token choice on the device: out[r] = argmax of row r of x.
//
// Ties go to the smallest index; NaN is never chosen; a row with no non-NaN value gives 0.
// The rule is a total order on (value, index), so the result does not depend on the order
// in which threads meet the elements. One block of 1024 threads per row.
#include "common/common.cuh"

__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

extern "C" __global__ void __launch_bounds__(1024)
    argmax_rows(const float* __restrict__ x, int n, int* __restrict__ out) {
    pdl_wait();
    pdl_trigger();
    const float* xr = x + (u64)blockIdx.x * n;
    float bv = ASSAY_NEG_INF;
    int bi = 0x7fffffff;
    // Four float4 loads in flight per thread when the row is 16-byte aligned (the one block
    // is bound by loads in flight, not by bandwidth), then the scalar tail; the result is
    // the same whatever the visiting order.
    int i0 = 0;
    if ((((u64)xr) & 15u) == 0) {
        const float4* x4 = (const float4*)xr;
        const int n4 = n >> 2;
        const int step = blockDim.x * 4;
        int c = threadIdx.x;
        for (; c + 3 * (int)blockDim.x < n4; c += step) {
            float4 a[4];
#pragma unroll
            for (int u = 0; u < 4; u++) a[u] = x4[c + u * blockDim.x];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const int e = 4 * (c + u * blockDim.x);
                if (better(a[u].x, e, bv, bi)) { bv = a[u].x; bi = e; }
                if (better(a[u].y, e + 1, bv, bi)) { bv = a[u].y; bi = e + 1; }
                if (better(a[u].z, e + 2, bv, bi)) { bv = a[u].z; bi = e + 2; }
                if (better(a[u].w, e + 3, bv, bi)) { bv = a[u].w; bi = e + 3; }
            }
        }
        for (; c < n4; c += blockDim.x) {
            const float4 a = x4[c];
            const int e = 4 * c;
            if (better(a.x, e, bv, bi)) { bv = a.x; bi = e; }
            if (better(a.y, e + 1, bv, bi)) { bv = a.y; bi = e + 1; }
            if (better(a.z, e + 2, bv, bi)) { bv = a.z; bi = e + 2; }
            if (better(a.w, e + 3, bv, bi)) { bv = a.w; bi = e + 3; }
        }
        i0 = n4 * 4;
    }
    for (int i = i0 + threadIdx.x; i < n; i += blockDim.x) {
        const float v = xr[i];
        if (better(v, i, bv, bi)) { bv = v; bi = i; }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
    }
    __shared__ float sv[32];
    __shared__ int si[32];
    const int warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    if ((threadIdx.x & 31) == 0) { sv[warp] = bv; si[warp] = bi; }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 0; w < nwarps; w++)
            if (better(sv[w], si[w], bv, bi)) { bv = sv[w]; bi = si[w]; }
        out[blockIdx.x] = bi == 0x7fffffff ? 0 : bi;
    }
}
