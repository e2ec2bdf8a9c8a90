// elementwise.cu — gated MLP activations, adds, scaling, soft-capping.
//
// gated_act: out[i] = act(gate[i]) * up[i] with act = SiLU (act == 0) or GeLU-tanh
// (act == 1); out may be gate or up. add: out[i] = a[i] + b[i]; out may be a or b.
// scale_inplace: y[i] *= s. softcap_inplace: y[i] = cap * tanh(y[i] / cap).
// One thread per element; each reads its inputs before writing, so aliasing is safe.
#include "common/common.cuh"

// silu / gelu_tanh live in common/common.cuh (matvec's fused gate/up epilogue uses them).

extern "C" __global__ void gated_act(const float* gate, const float* up, float* out, int n,
                                     int act) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = gate[i], u = up[i];
    out[i] = __fmul_rn(act == 0 ? silu(g) : gelu_tanh(g), u);
}

extern "C" __global__ void add(const float* a, const float* b, float* out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}

extern "C" __global__ void scale_inplace(float* __restrict__ y, float s, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] *= s;
}

extern "C" __global__ void softcap_inplace(float* __restrict__ y, float cap, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = cap * tanhf(y[i] / cap);
}
