// bench.h — what bench.cu (host) and the kernel translation units (engine_tu.cu,
// variants_tu.cu) share: the launch arguments and one table row per kernel.
#pragma once
#include <cstddef>
#include <cuda_runtime.h>

// What a kernel computes (one token): y = W x (PLAIN), y = W x + res (RESID, the engine's
// o / down projections), y = silu(Wg x) * (Wu x) (GLU, gate + up), y = Wa x and y2 = Wb x
// (PAIR, k + v). W in the engine's planar Q4_0 device layout.
enum MvMode { MV_PLAIN = 0, MV_RESID = 1, MV_GLU = 2, MV_PAIR = 3 };

struct MvArgs {
    const void* wa;  // matrix a (gate for GLU)
    const void* wb;  // matrix b (up / the pair's second), else nullptr
    const float* x;  // k floats
    const float* res;  // rows floats (RESID), else nullptr
    float* y;        // rows floats
    float* y2;       // rows floats (PAIR), else nullptr
    int rows, k;
};

struct MvKernel {
    const char* name;    // short name for the table
    const char* family;  // "engine", "wr", "sk"
    int mode;            // MvMode
    int k_only;          // 0: any k (wr: k % 1024 == 0; engine: k % 32 == 0); else the only k
    bool fast;           // FAST arithmetic (not the engine's bits)
    bool fixed_grid;     // the grid is part of the kernel (engine: one block per 8 R rows)
    int threads;         // threads per block
    int rows_per_item;   // rows of one work item (a warp's group / a block's step / a block)
    size_t (*smem)(int rows, int k);  // dynamic shared memory of a launch
    // Sets the function's attributes; returns resident blocks per SM at smem(rows, k) and
    // the compiled registers / local memory per thread.
    cudaError_t (*prepare)(int rows, int k, int* blocks_per_sm, int* regs, int* local_bytes);
    // The grid this kernel uses by default on `sms` SMs with `bps` resident blocks per SM.
    int (*grid)(int rows, int k, int sms, int bps);
    // Launch with `grid` blocks (ignored when fixed_grid); returns cudaGetLastError().
    cudaError_t (*launch)(const MvArgs& a, int grid, cudaStream_t s);
};

// Each kernel translation unit lists its kernels.
int engine_kernels(const MvKernel** out);
int variant_kernels_1(const MvKernel** out);
int variant_kernels_2(const MvKernel** out);
int variant_kernels_3(const MvKernel** out);
