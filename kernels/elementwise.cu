// elementwise.cu — gated MLP activations, residual add, scaling.
//
// gated_act: out[i] = act(gate[i]) * up[i] with act = SiLU (act == 0) or GeLU-tanh
// (act == 1). add_inplace: y[i] += x[i]. scale_inplace: y[i] *= s. One thread per element.
#include "common/common.cuh"

__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }
__device__ __forceinline__ float gelu_tanh(float g) {
    const float k0 = 0.7978845608028654f;  // sqrt(2/pi)
    return 0.5f * g * (1.0f + tanhf(k0 * (g + 0.044715f * g * g * g)));
}

extern "C" __global__ void gated_act(const float* __restrict__ gate, const float* __restrict__ up,
                                     float* __restrict__ out, int n, int act) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = gate[i];
    out[i] = (act == 0 ? silu(g) : gelu_tanh(g)) * up[i];
}

extern "C" __global__ void add_inplace(float* __restrict__ y, const float* __restrict__ x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}

extern "C" __global__ void scale_inplace(float* __restrict__ y, float s, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] *= s;
}
