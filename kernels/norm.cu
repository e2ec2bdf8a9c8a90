// norm.cu — RMSNorm over rows: y = x / sqrt(mean(x^2) + eps) * (w + w_offset).
//
// Serves the model norms (one row per token, dim = hidden size) and QK-norm (one row per
// token and head, dim = head size, the same weight for every head). `w_offset` is 0 for the
// plain form and 1 for a checkpoint that stores Gemma's `1 + w` weights as `w`.
// One block of NORM_THREADS threads per row. Thread i sums x[i], x[i+NORM_THREADS], ... in
// order, warps reduce by a fixed butterfly, and every thread adds the warp sums in warp
// order: the reduction order depends only on dim. x and y may be the same buffer (each
// thread rewrites only the elements it read).
#include "common/common.cuh"

#ifndef NORM_THREADS
#define NORM_THREADS 256
#endif

extern "C" __global__ void __launch_bounds__(NORM_THREADS)
    rmsnorm(const float* x, const float* __restrict__ w, float* y, int dim, float eps,
            float w_offset) {
    const float* xr = x + (u64)blockIdx.x * dim;
    float* yr = y + (u64)blockIdx.x * dim;
    float ss = 0.f;
    for (int i = threadIdx.x; i < dim; i += NORM_THREADS) ss = fmaf(xr[i], xr[i], ss);
    ss = warp_sum(ss);
    __shared__ float red[NORM_THREADS / 32];
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
    __syncthreads();
    float tot = 0.f;
#pragma unroll
    for (int i = 0; i < NORM_THREADS / 32; i++) tot += red[i];
    const float inv = 1.0f / sqrtf(tot / (float)dim + eps);
    for (int i = threadIdx.x; i < dim; i += NORM_THREADS) yr[i] = (xr[i] * inv) * (w[i] + w_offset);
}
