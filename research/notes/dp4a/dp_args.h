// dp_args.h — the launch arguments of every kernel of the bench (no includes: int2 is CUDA's
// built-in vector type under nvcc and NVRTC alike).
#pragma once

// What a kernel computes, for ntok token vectors (token t's outputs at y + t rows):
// LIN: y = W x (+ res, when res != nullptr: the o / down projections),
// GLU: y = silu(Wg x) * (Wu x) (gate + up in one launch).
// W in the engine's planar Q4_0 / Q8_0 device layout (ref.h HostMat).
enum DpMode { DP_LIN = 0, DP_GLU = 1 };

struct DpArgs {
    const void* wa;         // matrix a (gate for GLU)
    const void* wb;         // up (GLU), else nullptr
    const float* x;         // engine kernels: ntok x k floats
    const signed char* xq;  // dp4a kernels: ntok x k int8 (quantised x)
    const int2* xds;        // dp4a kernels: ntok x k/32 {f32 bits of d, sum of q}
    const float* res;       // ntok x rows (LIN with residual), else nullptr
    float* y;               // ntok x rows
    int rows, k, ntok;
};
