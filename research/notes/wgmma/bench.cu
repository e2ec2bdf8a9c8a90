// bench.cu — host test of gemmt.cu's warpgroup-MMA entries (gemmt_f16_w128 / _w256; session
// 12's draft, wgmma_gemm.cuh, became gemmt.cu section 3) on the GPU machine, built there by
// run.sh with nvcc: correctness against a naive f32 reference, bits and time against gemmt.cu's
// mma.sync kernel (gemmt_f16_m128_p1) and time against cuBLAS (f16 in, f32 out) at
// Llama-3.1-8B product shapes. Not part of the engine or CI.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <random>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cublas_v2.h>
#include "gemmt.cu"
#define WITH_GEMMT 1
#define WG_SMEM 197632     // select::gemmw_shared_bytes(128 or 256, glu): the largest
#define WG_SMEM256 197632

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            printf("CUDA error %s at line %d: %s\n", #x, __LINE__, cudaGetErrorString(e_)); \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

__global__ void ref_gemm(const __half* x, const __half* w, float* y, int n, int rows, int k,
                         int cols) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
    if (r >= cols) return;
    float a = 0.f;
    for (int i = 0; i < k; i++) a += __half2float(x[(size_t)t * k + i]) * __half2float(w[(size_t)r * k + i]);
    y[(size_t)t * cols + r] = a;
}

template <class F>
static float time_ms(F f, int reps) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    f();
    CK(cudaDeviceSynchronize());
    CK(cudaEventRecord(a));
    for (int i = 0; i < reps; i++) f();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0.f;
    CK(cudaEventElapsedTime(&ms, a, b));
    CK(cudaGetLastError());
    return ms / reps;
}

// Max |got - want| over the first `cols` columns of every token, relative to max |want|.
static double rel_err(const std::vector<float>& got, int rows, const std::vector<float>& want,
                      int n, int cols) {
    double e = 0.0, m = 0.0;
    for (int t = 0; t < n; t++)
        for (int c = 0; c < cols; c++) {
            const double g = got[(size_t)t * rows + c], w = want[(size_t)t * cols + c];
            e = std::max(e, std::abs(g - w));
            m = std::max(m, std::abs(w));
        }
    return e / (m > 0 ? m : 1.0);
}

int main() {
    const int shapes[][3] = {{512, 6144, 4096},  {512, 4096, 4096},  {512, 28672, 4096},
                             {512, 4096, 14336}, {2048, 28672, 4096}, {2048, 4096, 14336},
                             {300, 200, 768}};
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) { printf("cublasCreate failed\n"); return 1; }
    CK(cudaFuncSetAttribute(gemmt_f16_w128, cudaFuncAttributeMaxDynamicSharedMemorySize, WG_SMEM));
    CK(cudaFuncSetAttribute(gemmt_f16_w256, cudaFuncAttributeMaxDynamicSharedMemorySize, WG_SMEM256));
#ifdef WITH_GEMMT
    const int gt_smem = 3 * (128 + 128) * 40 * 2;
    CK(cudaFuncSetAttribute(gemmt_f16_m128_p1, cudaFuncAttributeMaxDynamicSharedMemorySize, gt_smem));
#endif
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    printf("%-20s %10s %10s %10s %10s %11s %11s %9s %9s\n", "n x rows x k", "wgmma128", "wgmma256",
           "gemmt", "cublas", "err wg128", "err gemmt", "128!=gt", "256!=128");
    for (auto& s : shapes) {
        const int n = s[0], rows = s[1], k = s[2];
        std::vector<__half> hx((size_t)n * k), hw((size_t)rows * k);
        for (auto& v : hx) v = __float2half(u(rng));
        for (auto& v : hw) v = __float2half(u(rng) * 0.05f);
        __half *x, *w;
        float *y, *yr, *ones;
        CK(cudaMalloc(&x, hx.size() * 2));
        CK(cudaMalloc(&w, hw.size() * 2));
        CK(cudaMalloc(&y, (size_t)n * rows * 4));
        const int cols = std::min(rows, 512);
        CK(cudaMalloc(&yr, (size_t)n * cols * 4));
        CK(cudaMalloc(&ones, n * 4));
        std::vector<float> one(n, 1.f);
        CK(cudaMemcpy(ones, one.data(), n * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(w, hw.data(), hw.size() * 2, cudaMemcpyHostToDevice));
        ref_gemm<<<dim3((cols + 127) / 128, n), 128>>>(x, w, yr, n, rows, k, cols);
        CK(cudaDeviceSynchronize());
        std::vector<float> want((size_t)n * cols), got((size_t)n * rows);
        CK(cudaMemcpy(want.data(), yr, want.size() * 4, cudaMemcpyDeviceToHost));
        const double flop = 2.0 * n * rows * (double)k;
        const int reps = 20;
        const dim3 grid((n + 127) / 128, (rows + 127) / 128);
        auto wg = [&] {
            gemmt_f16_w128<<<grid, 256, WG_SMEM>>>((const u16*)x, (const u16*)x, ones, w, w, w, y, y, y,
                                                   nullptr, nullptr, nullptr, rows, 0, 0, nullptr,
                                                   k, n);
        };
        CK(cudaMemset(y, 0xff, (size_t)n * rows * 4));
        const float t_wg = time_ms(wg, reps);
        CK(cudaMemcpy(got.data(), y, got.size() * 4, cudaMemcpyDeviceToHost));
        const double e_wg = rel_err(got, rows, want, n, cols);
        const std::vector<float> y128 = got;
        const dim3 grid256((n + 127) / 128, (rows + 255) / 256);
        auto wg2 = [&] {
            gemmt_f16_w256<<<grid256, 256, WG_SMEM256>>>((const u16*)x, (const u16*)x, ones, w, w, w, y,
                                                         y, y, nullptr, nullptr, nullptr, rows, 0, 0,
                                                         nullptr, k, n);
        };
        CK(cudaMemset(y, 0xff, (size_t)n * rows * 4));
        const float t_wg2 = time_ms(wg2, reps);
        CK(cudaMemcpy(got.data(), y, got.size() * 4, cudaMemcpyDeviceToHost));
        // Bits that differ between two outputs (the invariance question: does the tile change
        // an output's bits; is wgmma's sum the bits of mma.sync's?).
        auto differ = [](const std::vector<float>& a, const std::vector<float>& b) {
            size_t c = 0;
            for (size_t i = 0; i < a.size(); i++) c += memcmp(&a[i], &b[i], 4) != 0;
            return c;
        };
        const size_t d256 = differ(got, y128);
        float t_gt = 0.f;
        double e_gt = -1.0;
        size_t dgt = (size_t)-1;
#ifdef WITH_GEMMT
        auto gt = [&] {
            gemmt_f16_m128_p1<<<grid, 256, gt_smem>>>((const u16*)x, (const u16*)x, ones, w, w, w, y, y,
                                                      y, nullptr, nullptr, nullptr, rows, 0, 0,
                                                      nullptr, k, n);
        };
        CK(cudaMemset(y, 0xff, (size_t)n * rows * 4));
        t_gt = time_ms(gt, reps);
        CK(cudaMemcpy(got.data(), y, got.size() * 4, cudaMemcpyDeviceToHost));
        e_gt = rel_err(got, rows, want, n, cols);
        dgt = differ(got, y128);
#endif
        const float alpha = 1.f, beta = 0.f;
        auto cb = [&] {
            cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, rows, n, k, &alpha, w, CUDA_R_16F, k, x,
                         CUDA_R_16F, k, &beta, y, CUDA_R_32F, rows, CUBLAS_COMPUTE_32F,
                         CUBLAS_GEMM_DEFAULT);
        };
        const float t_cb = time_ms(cb, reps);
        char name[64];
        snprintf(name, sizeof name, "%dx%dx%d", n, rows, k);
        printf("%-20s %8.1f T %8.1f T %8.1f T %8.1f T %11.3e %11.3e %9zu %9zu\n", name,
               flop / t_wg / 1e9, flop / t_wg2 / 1e9, t_gt > 0 ? flop / t_gt / 1e9 : 0.0,
               flop / t_cb / 1e9, e_wg, e_gt, dgt, d256);
        CK(cudaFree(x));
        CK(cudaFree(w));
        CK(cudaFree(y));
        CK(cudaFree(yr));
        CK(cudaFree(ones));
    }
    printf("(TFLOP/s: mean of %d launches after one warm-up; 128!=gt, 256!=128: outputs whose bits differ)\n", 20);
    return 0;
}
