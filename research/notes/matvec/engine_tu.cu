// engine_tu.cu — the engine's one-token Q4_0 matvec entry points, compiled from
// kernels/matvec.cu itself (built with -Ikernels), and their launches as the engine makes
// them (engine/src/cuda/ops/linear.rs matvec_cfg / matvec_impl / matvec_glu / matvec_pair):
// MV_WARPS = 8 warps per block, one block per 8 R rows, dynamic shared memory
// select::mv_shared_bytes(1, k) = min(k / 32, MV_TILE) * MV_XCS * 4, no bias, no folded
// norm, ntok = 1, launched without the PDL attribute (griddepcontrol.wait is then a no-op).
//
// Only the Q4_0 one-token entries are compiled: formats.cuh's format list is narrowed to
// Q4_0 before matvec.cu is included (its #pragma once keeps this list), and MV_PART = 1
// drops the batched entries, so this unit builds in seconds instead of ~40 s.
#include "common/formats.cuh"
#undef ASSAY_FOR_EACH_FORMAT
#define ASSAY_FOR_EACH_FORMAT(MACRO) MACRO(q4_0, FmtQ4_0)
#define MV_PART 1
#include "matvec.cu"

#include "bench.h"

namespace {

size_t eng_smem(int, int k) {
    const int nb = k / 32;
    return (size_t)(nb < MV_TILE ? nb : MV_TILE) * MV_XCS * 4;
}

}  // namespace

// The engine's entry points are separate extern "C" kernels (one per R): written out per R.
#define ENG_PLAIN(R)                                                                                   \
    static cudaError_t eng_r##R##_prepare(int rows, int k, int* bps, int* regs, int* lmem) {           \
        const size_t sm = eng_smem(rows, k);                                                         \
        cudaError_t e = cudaFuncSetAttribute(matvec_q4_0_r##R, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm); \
        if (e != cudaSuccess) return e;                                                              \
        cudaFuncAttributes at;                                                                       \
        e = cudaFuncGetAttributes(&at, matvec_q4_0_r##R);                                            \
        if (e != cudaSuccess) return e;                                                              \
        *regs = at.numRegs;                                                                          \
        *lmem = (int)at.localSizeBytes;                                                              \
        return cudaOccupancyMaxActiveBlocksPerMultiprocessor(bps, matvec_q4_0_r##R, MV_WARPS * 32, sm); \
    }                                                                                                \
    static int eng_r##R##_grid(int rows, int, int, int) { return (rows + 8 * R - 1) / (8 * R); }     \
    static cudaError_t eng_r##R##_launch(const MvArgs& a, int, cudaStream_t s) {                     \
        const int grid = eng_r##R##_grid(a.rows, a.k, 0, 0);                                         \
        matvec_q4_0_r##R<<<grid, MV_WARPS * 32, eng_smem(a.rows, a.k), s>>>(                         \
            (const u8*)a.wa, (u64)(a.k / 32) * 18, a.x, nullptr, a.res, a.y, a.rows, a.k, 1, nullptr, \
            0.f, 0.f);                                                                               \
        return cudaGetLastError();                                                                   \
    }

#define ENG_GLU(R)                                                                                     \
    static cudaError_t eng_glu_r##R##_prepare(int rows, int k, int* bps, int* regs, int* lmem) {       \
        const size_t sm = eng_smem(rows, k);                                                         \
        cudaError_t e = cudaFuncSetAttribute(matvec_q4_0_glu_r##R, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm); \
        if (e != cudaSuccess) return e;                                                              \
        cudaFuncAttributes at;                                                                       \
        e = cudaFuncGetAttributes(&at, matvec_q4_0_glu_r##R);                                        \
        if (e != cudaSuccess) return e;                                                              \
        *regs = at.numRegs;                                                                          \
        *lmem = (int)at.localSizeBytes;                                                              \
        return cudaOccupancyMaxActiveBlocksPerMultiprocessor(bps, matvec_q4_0_glu_r##R, MV_WARPS * 32, sm); \
    }                                                                                                \
    static int eng_glu_r##R##_grid(int rows, int, int, int) { return (rows + 8 * R - 1) / (8 * R); } \
    static cudaError_t eng_glu_r##R##_launch(const MvArgs& a, int, cudaStream_t s) {                 \
        const int grid = eng_glu_r##R##_grid(a.rows, a.k, 0, 0);                                     \
        matvec_q4_0_glu_r##R<<<grid, MV_WARPS * 32, eng_smem(a.rows, a.k), s>>>(                     \
            (const u8*)a.wa, (const u8*)a.wb, (u64)(a.k / 32) * 18, a.x, a.y, a.rows, a.k, 1, 0,     \
            nullptr, 0.f, 0.f);                                                                      \
        return cudaGetLastError();                                                                   \
    }

ENG_PLAIN(1)
ENG_PLAIN(2)
ENG_PLAIN(4)
ENG_GLU(1)
ENG_GLU(2)

static cudaError_t eng_pair_prepare(int rows, int k, int* bps, int* regs, int* lmem) {
    const size_t sm = eng_smem(rows, k);
    cudaError_t e = cudaFuncSetAttribute(matvec_q4_0_pair_r1, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (e != cudaSuccess) return e;
    cudaFuncAttributes at;
    e = cudaFuncGetAttributes(&at, matvec_q4_0_pair_r1);
    if (e != cudaSuccess) return e;
    *regs = at.numRegs;
    *lmem = (int)at.localSizeBytes;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(bps, matvec_q4_0_pair_r1, MV_WARPS * 32, sm);
}
// linear.rs matvec_pair: nblk = the single matrix's grid, the launch has 2 nblk blocks.
static int eng_pair_grid(int rows, int, int, int) { return 2 * ((rows + 7) / 8); }
static cudaError_t eng_pair_launch(const MvArgs& a, int, cudaStream_t s) {
    const int nblk = (a.rows + 7) / 8;
    matvec_q4_0_pair_r1<<<2 * nblk, MV_WARPS * 32, eng_smem(a.rows, a.k), s>>>(
        (const u8*)a.wa, (const u8*)a.wb, (u64)(a.k / 32) * 18, a.x, nullptr, nullptr, a.y, a.y2,
        a.rows, a.k, 1, nullptr, 0.f, 0.f, nblk);
    return cudaGetLastError();
}

static const MvKernel kEngine[] = {
    // name, family, mode, k_only, fast, fixed_grid, threads, rows_per_item, smem, prepare, grid, launch
    {"engine r1", "engine", MV_PLAIN, 0, false, true, 256, 8, eng_smem, eng_r1_prepare, eng_r1_grid, eng_r1_launch},
    {"engine r2", "engine", MV_PLAIN, 0, false, true, 256, 16, eng_smem, eng_r2_prepare, eng_r2_grid, eng_r2_launch},
    {"engine r4", "engine", MV_PLAIN, 0, false, true, 256, 32, eng_smem, eng_r4_prepare, eng_r4_grid, eng_r4_launch},
    {"engine r1", "engine", MV_RESID, 0, false, true, 256, 8, eng_smem, eng_r1_prepare, eng_r1_grid, eng_r1_launch},
    {"engine r2", "engine", MV_RESID, 0, false, true, 256, 16, eng_smem, eng_r2_prepare, eng_r2_grid, eng_r2_launch},
    {"engine r4", "engine", MV_RESID, 0, false, true, 256, 32, eng_smem, eng_r4_prepare, eng_r4_grid, eng_r4_launch},
    {"engine glu_r1", "engine", MV_GLU, 0, false, true, 256, 8, eng_smem, eng_glu_r1_prepare, eng_glu_r1_grid, eng_glu_r1_launch},
    {"engine glu_r2", "engine", MV_GLU, 0, false, true, 256, 16, eng_smem, eng_glu_r2_prepare, eng_glu_r2_grid, eng_glu_r2_launch},
    {"engine pair_r1", "engine", MV_PAIR, 0, false, true, 256, 8, eng_smem, eng_pair_prepare, eng_pair_grid, eng_pair_launch},
};

int engine_kernels(const MvKernel** out) {
    *out = kEngine;
    return (int)(sizeof(kEngine) / sizeof(kEngine[0]));
}
