// norm.cu — RMSNorm over rows: y = (x * (1 / sqrt(mean(x^2) + eps))) * (w + w_offset).
//
// Serves the model norms (one row per token, dim = hidden size) and QK-norm (one row per
// token and head, dim = head size, the same weight for every head). `w_offset` is 0 for the
// plain form and 1 for a checkpoint that stores Gemma's `1 + w` weights as `w`.
// Arithmetic follows the CPU reference: each square is rounded to f32, the squares are
// summed in f64, the mean is rounded to f32, the scale is 1/sqrt in f32, and the output is
// two unfused f32 multiplies. The f64 sum's order (thread i sums x[i], x[i+NORM_THREADS],
// ... in order; warps reduce by a fixed butterfly; warp sums added in warp order) depends
// only on dim, and its rounding to f32 almost never depends on the order at all.
// One block of NORM_THREADS threads per row. x and y may be the same buffer (each thread
// rewrites only the elements it read).
#include "common/common.cuh"

#ifndef NORM_THREADS
#define NORM_THREADS 256
#endif

extern "C" __global__ void __launch_bounds__(NORM_THREADS)
    rmsnorm(const float* x, const float* __restrict__ w, float* y, int dim, float eps,
            float w_offset) {
    pdl_wait();
    pdl_trigger();
    const float* xr = x + (u64)blockIdx.x * dim;
    float* yr = y + (u64)blockIdx.x * dim;
    double ss = 0.0;
    for (int i = threadIdx.x; i < dim; i += NORM_THREADS) ss += (double)__fmul_rn(xr[i], xr[i]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    __shared__ double red[NORM_THREADS / 32];
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
    __syncthreads();
    double tot = 0.0;
#pragma unroll
    for (int i = 0; i < NORM_THREADS / 32; i++) tot += red[i];
    const float mean = (float)(tot / (double)dim);
    const float inv = 1.0f / sqrtf(mean + eps);
    for (int i = threadIdx.x; i < dim; i += NORM_THREADS)
        yr[i] = __fmul_rn(__fmul_rn(xr[i], inv), w[i] + w_offset);
}
