// variants_tu.cu — instantiations and launches of variants.cuh's kernels for bench.cu.
// Built three times by run.sh (-DVPART=1: gate+up, k = 4096; 2: q / k / k+v, k = 4096;
// 3: down, k = 14336) so that the three parts compile in parallel.
//
// Grids: both families are persistent (a grid-stride walk over the rows), so the default
// grid is min(SMs x resident blocks per SM, work items); any grid gives the same bits.
#include "variants.cuh"
#include "bench.h"

#ifndef VPART
#define VPART 1
#endif

static_assert(mvx::PLAIN == MV_PLAIN && mvx::RESID == MV_RESID && mvx::GLU == MV_GLU &&
                  mvx::PAIR == MV_PAIR,
              "one numbering of the modes");

namespace {

template <class F>
cudaError_t prepare_fn(F f, int threads, size_t smem, int* bps, int* regs, int* lmem) {
    cudaError_t e = cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e != cudaSuccess) return e;
    cudaFuncAttributes at;
    e = cudaFuncGetAttributes(&at, f);
    if (e != cudaSuccess) return e;
    *regs = at.numRegs;
    *lmem = (int)at.localSizeBytes;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(bps, f, threads, smem);
}

// wr: 8 warps per block, R rows per warp-level group, ring depth D.
template <int R, int D, int MODE, bool FAST, int MINB>
struct Wr {
    static size_t smem(int, int k) { return (size_t)mvx::wr_smem_bytes<R, D, MODE>(k); }
    static cudaError_t prepare(int rows, int k, int* bps, int* regs, int* lmem) {
        return prepare_fn(mvx::mvx_wr<R, D, MODE, FAST, MINB>, mvx::WR_WARPS * 32, smem(rows, k), bps,
                          regs, lmem);
    }
    static int grid(int rows, int, int sms, int bps) {
        const int groups = (rows + R - 1) / R;
        const int need = (groups + mvx::WR_WARPS - 1) / mvx::WR_WARPS;
        const int g = sms * (bps > 0 ? bps : 1);
        return g < need ? g : need;
    }
    static cudaError_t launch(const MvArgs& a, int grid, cudaStream_t s) {
        mvx::mvx_wr<R, D, MODE, FAST, MINB><<<grid, mvx::WR_WARPS * 32, smem(a.rows, a.k), s>>>(
            (const u8*)a.wa, (const u8*)a.wb, a.x, a.res, a.y, a.y2, a.rows, a.k);
        return cudaGetLastError();
    }
};

// sk: RPS groups of TR threads, CPT chunks per thread (k = 32 CPT TR), R rows per group
// and step, ring depth D, B steps per reduction batch.
template <int CPT, int TR, int RPS, int R, int D, int B, int MODE, bool FAST, int MINB>
struct Sk {
    static size_t smem(int, int) { return (size_t)mvx::sk_smem_bytes<CPT, TR, RPS, R, D, B, MODE>(); }
    static cudaError_t prepare(int rows, int k, int* bps, int* regs, int* lmem) {
        return prepare_fn(mvx::mvx_sk<CPT, TR, RPS, R, D, B, MODE, FAST, MINB>, RPS * TR,
                          smem(rows, k), bps, regs, lmem);
    }
    static int grid(int rows, int, int sms, int bps) {
        const int need = (rows + RPS * R - 1) / (RPS * R);
        const int g = sms * (bps > 0 ? bps : 1);
        return g < need ? g : need;
    }
    static cudaError_t launch(const MvArgs& a, int grid, cudaStream_t s) {
        mvx::mvx_sk<CPT, TR, RPS, R, D, B, MODE, FAST, MINB><<<grid, RPS * TR, smem(a.rows, a.k), s>>>(
            (const u8*)a.wa, (const u8*)a.wb, a.x, a.res, a.y, a.y2, a.rows, a.k);
        return cudaGetLastError();
    }
};

}  // namespace

// Table rows: name, family, mode, k_only, fast, fixed_grid, threads, rows per item, functions.
#define WR_ROW(NAME, R, D, M, F, MB)                                                         \
    {NAME, "wr", M, 0, F, false, mvx::WR_WARPS * 32, R, Wr<R, D, M, F, MB>::smem,              \
     Wr<R, D, M, F, MB>::prepare, Wr<R, D, M, F, MB>::grid, Wr<R, D, M, F, MB>::launch}
#define SK_ROW(NAME, CPT, TR, RPS, R, D, B, M, F, MB)                                        \
    {NAME, "sk", M, 32 * CPT * TR, F, false, RPS * TR, RPS * R,                                \
     Sk<CPT, TR, RPS, R, D, B, M, F, MB>::smem, Sk<CPT, TR, RPS, R, D, B, M, F, MB>::prepare,  \
     Sk<CPT, TR, RPS, R, D, B, M, F, MB>::grid, Sk<CPT, TR, RPS, R, D, B, M, F, MB>::launch}

using mvx::GLU;
using mvx::PAIR;
using mvx::PLAIN;
using mvx::RESID;

#if VPART == 1
// gate + up (GLU), k = 4096
static const MvKernel kTable[] = {
    WR_ROW("wr R1 D4", 1, 4, GLU, false, 3),
    WR_ROW("wr R1 D6", 1, 6, GLU, false, 2),
    WR_ROW("wr R2 D3", 2, 3, GLU, false, 2),
    WR_ROW("wr R2 D4", 2, 4, GLU, false, 2),
    WR_ROW("wr R4 D2", 4, 2, GLU, false, 2),
    WR_ROW("wr R1 D4 fast", 1, 4, GLU, true, 3),
    WR_ROW("wr R2 D4 fast", 2, 4, GLU, true, 2),
    WR_ROW("wr R4 D2 fast", 4, 2, GLU, true, 2),
    SK_ROW("sk c1 t128 g2 R1 D6 B4", 1, 128, 2, 1, 6, 4, GLU, false, 2),
    SK_ROW("sk c1 t128 g2 R1 D4 B4", 1, 128, 2, 1, 4, 4, GLU, false, 3),
    SK_ROW("sk c1 t128 g2 R2 D3 B2", 1, 128, 2, 2, 3, 2, GLU, false, 2),
    SK_ROW("sk c1 t128 g2 R1 D6 B4 fast", 1, 128, 2, 1, 6, 4, GLU, true, 2),
    SK_ROW("sk c1 t128 g2 R2 D3 B2 fast", 1, 128, 2, 2, 3, 2, GLU, true, 2),
};
int variant_kernels_1(const MvKernel** out) {
    *out = kTable;
    return (int)(sizeof(kTable) / sizeof(kTable[0]));
}
#elif VPART == 2
// q, k (PLAIN) and k + v (PAIR), k = 4096
static const MvKernel kTable[] = {
    WR_ROW("wr R1 D4", 1, 4, PLAIN, false, 3),
    WR_ROW("wr R2 D4", 2, 4, PLAIN, false, 3),
    WR_ROW("wr R4 D3", 4, 3, PLAIN, false, 2),
    WR_ROW("wr R2 D4 fast", 2, 4, PLAIN, true, 3),
    WR_ROW("wr R4 D3 fast", 4, 3, PLAIN, true, 2),
    WR_ROW("wr R1 D4", 1, 4, PAIR, false, 3),
    SK_ROW("sk c1 t128 g2 R1 D6 B4", 1, 128, 2, 1, 6, 4, PLAIN, false, 3),
    SK_ROW("sk c1 t128 g2 R2 D4 B4", 1, 128, 2, 2, 4, 4, PLAIN, false, 3),
    SK_ROW("sk c1 t128 g2 R1 D6 B4 fast", 1, 128, 2, 1, 6, 4, PLAIN, true, 3),
    SK_ROW("sk c1 t128 g2 R2 D4 B4 fast", 1, 128, 2, 2, 4, 4, PLAIN, true, 3),
    SK_ROW("sk c1 t128 g2 R1 D6 B4", 1, 128, 2, 1, 6, 4, PAIR, false, 2),
};
int variant_kernels_2(const MvKernel** out) {
    *out = kTable;
    return (int)(sizeof(kTable) / sizeof(kTable[0]));
}
#else
// down + residual (RESID), k = 14336
static const MvKernel kTable[] = {
    WR_ROW("wr R1 D4", 1, 4, RESID, false, 2),
    WR_ROW("wr R2 D3", 2, 3, RESID, false, 2),
    WR_ROW("wr R2 D4", 2, 4, RESID, false, 2),
    WR_ROW("wr R4 D2", 4, 2, RESID, false, 2),
    WR_ROW("wr R2 D3 fast", 2, 3, RESID, true, 2),
    WR_ROW("wr R4 D2 fast", 4, 2, RESID, true, 2),
    SK_ROW("sk c1 t448 g1 R1 D6 B4", 1, 448, 1, 1, 6, 4, RESID, false, 2),
    SK_ROW("sk c1 t448 g1 R2 D4 B2", 1, 448, 1, 2, 4, 2, RESID, false, 1),
    SK_ROW("sk c2 t224 g2 R1 D4 B4", 2, 224, 2, 1, 4, 4, RESID, false, 1),
    SK_ROW("sk c1 t448 g1 R1 D6 B4 fast", 1, 448, 1, 1, 6, 4, RESID, true, 2),
    SK_ROW("sk c1 t448 g1 R2 D4 B2 fast", 1, 448, 1, 2, 4, 2, RESID, true, 1),
};
int variant_kernels_3(const MvKernel** out) {
    *out = kTable;
    return (int)(sizeof(kTable) / sizeof(kTable[0]));
}
#endif
