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
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
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
