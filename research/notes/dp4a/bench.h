// bench.h — what bench.cu (host) and the kernel translation units (engine_tu.cu, dp4a_tu.cu)
// share: the launch arguments and one entry per compiled kernel instance.
#pragma once
#include <cstddef>
#include <cuda_runtime.h>

#include "dp_args.h"

struct DpKernel {
    const char* config;  // the configuration (one per design / R / depth), e.g. "wa R1 U2"
    const char* family;  // "engine", "wa", "wr"
    int fmt;             // ref.h Fmt
    int mode;            // DpMode
    int nt;              // most tokens per launch of this instance (it takes 1 .. nt)
    bool fixed_grid;     // the grid is part of the kernel (engine's multi-row entries)
    int rows_per_item;   // rows of one work item (a warp's group)
    size_t (*smem)(int rows, int k);
    // Sets the function's attributes; resident blocks per SM at smem(rows, k), registers and
    // local memory per thread.
    cudaError_t (*prepare)(int rows, int k, int* blocks_per_sm, int* regs, int* local_bytes);
    // The default grid on `sms` SMs with `bps` resident blocks per SM.
    int (*grid)(int rows, int k, int sms, int bps);
    // Launch with `grid` blocks (ignored when fixed_grid); returns cudaGetLastError().
    cudaError_t (*launch)(const DpArgs& a, int grid, cudaStream_t s);
};

// Each kernel translation unit lists its kernels.
int engine_kernels_1(const DpKernel** out);  // the one-token entries the engine picks
int engine_kernels_2(const DpKernel** out);  // the batched _tb entries
int dp4a_kernels_1(const DpKernel** out);    // Q4_0, design wa
int dp4a_kernels_2(const DpKernel** out);    // Q4_0, design wr
int dp4a_kernels_3(const DpKernel** out);    // Q8_0, design wa
int dp4a_kernels_4(const DpKernel** out);    // Q8_0, design wr

// The activation quantisation kernel (dp4a_tu.cu, DPART 1): ntok x k floats -> xq, xds.
cudaError_t dp_quant_launch(const float* x, int ntok, int k, signed char* xq, int2* xds,
                            cudaStream_t s);
