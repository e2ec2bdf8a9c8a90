// engine_tu.cu — the engine's own matvec entry points for the bench's shapes, compiled from
// kernels/matvec.cu itself (built with -Ikernels), launched as engine/src/cuda/ops/linear.rs
// launches them (matvec_cfg: MV_WARPS x 32 threads, select.rs's grid and shared memory, no
// bias, no folded norm (the prenorm arm: x normalised once before the launch), no PDL).
//
// Which entry the engine picks on an H200 (132 SMs, compute capability 9.0;
// select/matvec.rs choose_matvec_tok):
//  * one token: the streamed matvec_<fmt>[_glu]_wr_* only when k % 1024 == 0 and the format
//    is in MV_WR_DEFAULT_FORMATS (Q4_0): Llama-8B gate+up Q4_0 (k = 4096) takes
//    matvec_q4_0_glu_wr_r1_d6 (grid min(rows / 8, 2 x SMs), shared mv_wr_shared_bytes).
//    Qwen2.5-7B's k = 3584 and 18944 are not multiples of 1024, so every Qwen2.5 shape and
//    every Q8_0 shape takes the multi-row body: gate+up glu_r2 (matvec_rows_per_warp for
//    2 x rows rows, capped at 2), down and q/o r2 (3584 rows: 224 blocks of 16 rows >= 1.5
//    x 132 SMs, 112 blocks of 32 < that), one block per 8 R rows.
//  * 2..8 tokens: the batched body, one pass over W for up to MV_BATCH_TOK = 8 tokens:
//    matvec_<fmt>_glu_tb_r1 (gate+up) and matvec_<fmt>_tb_r2, shared
//    mv_shared_bytes(8, k) = 8 x 32 x (mv_tile_max(8) + 1) x 4 = 66560 bytes.
//
// EPART 1: the one-token entries, EPART 2: the batched ones (two units, compiled in
// parallel). matvec.cu is included with its format list emptied and MV_PART 2, so that it
// instantiates nothing itself (its WR / WRT instantiations sit under MV_PART != 2, its TB
// list is empty); its entry-point macros stay defined, and the entries used here are
// instantiated with them: the engine's own code and launch bounds, nothing else compiled.
#include "common/formats.cuh"
#undef ASSAY_FOR_EACH_FORMAT
#define ASSAY_FOR_EACH_FORMAT(MACRO)
#define MV_PART 2
#include "matvec.cu"

#include "bench.h"
#include "ref.h"

namespace {

template <class F>
constexpr unsigned long long row_bytes_of(int k) {
    return (unsigned long long)(k / 32) * F::BYTES;
}

// select.rs mv_shared_bytes(1, k) / (8, k).
size_t smem_one(int, int k) {
    const int nb = k / 32;
    return (size_t)(nb < MV_TILE ? nb : MV_TILE) * MV_XCS * 4;
}
size_t smem_tb(int, int) { return (size_t)MV_BATCH_TOK * 32 * (mv_tile_max<MV_BATCH_TOK>() + 1) * 4; }
// select.rs mv_wr_shared_bytes(Q4_0, glu, 1, 6, k): x, then the ring (16 quant bytes + 4).
size_t smem_wr_glu_r1_d6(int, int k) { return (size_t)(k / 32) * MV_WR_XS * 4 + (size_t)MV_WARPS * 6 * 2 * 32 * 20; }

template <class K>
cudaError_t prep(K kern, size_t sm, int* bps, int* regs, int* lmem) {
    cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    if (e != cudaSuccess) return e;
    cudaFuncAttributes at;
    e = cudaFuncGetAttributes(&at, kern);
    if (e != cudaSuccess) return e;
    *regs = at.numRegs;
    *lmem = (int)at.localSizeBytes;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(bps, kern, MV_WARPS * 32, sm);
}

}  // namespace

// Plain entries (y = W x (+ res)) and GLU entries, by entry-point name; R rows per warp,
// SM: the shared-memory function.
#define ENG_LIN(NAME, F, R, SM)                                                                \
    static cudaError_t NAME##_prepare(int rows, int k, int* bps, int* regs, int* lmem) {       \
        return prep(NAME, SM(rows, k), bps, regs, lmem);                                       \
    }                                                                                          \
    static int NAME##_grid(int rows, int, int, int) { return (rows + 8 * R - 1) / (8 * R); }   \
    static cudaError_t NAME##_launch(const DpArgs& a, int, cudaStream_t s) {                   \
        NAME<<<NAME##_grid(a.rows, a.k, 0, 0), MV_WARPS * 32, SM(a.rows, a.k), s>>>(           \
            (const u8*)a.wa, row_bytes_of<F>(a.k), a.x, nullptr, a.res, a.y, a.rows, a.k,      \
            a.ntok, nullptr, 0.f, 0.f);                                                        \
        return cudaGetLastError();                                                             \
    }
#define ENG_GLU(NAME, F, R, SM)                                                                \
    static cudaError_t NAME##_prepare(int rows, int k, int* bps, int* regs, int* lmem) {       \
        return prep(NAME, SM(rows, k), bps, regs, lmem);                                       \
    }                                                                                          \
    static int NAME##_grid(int rows, int, int, int) { return (rows + 8 * R - 1) / (8 * R); }   \
    static cudaError_t NAME##_launch(const DpArgs& a, int, cudaStream_t s) {                   \
        NAME<<<NAME##_grid(a.rows, a.k, 0, 0), MV_WARPS * 32, SM(a.rows, a.k), s>>>(           \
            (const u8*)a.wa, (const u8*)a.wb, row_bytes_of<F>(a.k), a.x, a.y, a.rows, a.k,     \
            a.ntok, 0, nullptr, 0.f, 0.f);                                                     \
        return cudaGetLastError();                                                             \
    }
#define ENG_ROW(CFG, NAME, FMT, MODE, NT, RPI, SM) \
    {CFG, "engine", FMT, MODE, NT, true, RPI, SM, NAME##_prepare, NAME##_grid, NAME##_launch}

#if EPART == 1
ASSAY_MATVEC_R(q4_0, FmtQ4_0, 1, , 2, MV_LB_ONE)
ASSAY_MATVEC_GLU_R(q4_0, FmtQ4_0, 1, , 2, MV_LB_ONE)
ASSAY_MATVEC_R(q8_0, FmtQ8_0, 1, , 2, MV_LB_ONE)
ASSAY_MATVEC_GLU_R(q8_0, FmtQ8_0, 1, , 2, MV_LB_ONE)
ASSAY_MATVEC_GLU_WR_R(q4_0, FmtQ4_0, 1, 6)

ENG_LIN(matvec_q4_0_r2, FmtQ4_0, 2, smem_one)
ENG_GLU(matvec_q4_0_glu_r2, FmtQ4_0, 2, smem_one)
ENG_LIN(matvec_q8_0_r2, FmtQ8_0, 2, smem_one)
ENG_GLU(matvec_q8_0_glu_r2, FmtQ8_0, 2, smem_one)

// The streamed gate+up entry (persistent grid: at most MV_WR_MINB blocks per SM).
static cudaError_t wr_prepare(int rows, int k, int* bps, int* regs, int* lmem) {
    return prep(matvec_q4_0_glu_wr_r1_d6, smem_wr_glu_r1_d6(rows, k), bps, regs, lmem);
}
static int wr_grid(int rows, int, int sms, int) {
    const int need = (rows + 7) / 8;
    return need < MV_WR_MINB * sms ? need : MV_WR_MINB * sms;
}
static cudaError_t wr_launch(const DpArgs& a, int grid, cudaStream_t s) {
    matvec_q4_0_glu_wr_r1_d6<<<grid, MV_WARPS * 32, smem_wr_glu_r1_d6(a.rows, a.k), s>>>(
        (const u8*)a.wa, (const u8*)a.wb, row_bytes_of<FmtQ4_0>(a.k), a.x, a.y, a.rows, a.k,
        a.ntok, 0, nullptr, 0.f, 0.f);
    return cudaGetLastError();
}

static const DpKernel kEng[] = {
    ENG_ROW("engine r2", matvec_q4_0_r2, dpref::FMT_Q4_0, DP_LIN, 1, 2, smem_one),
    ENG_ROW("engine glu_r2", matvec_q4_0_glu_r2, dpref::FMT_Q4_0, DP_GLU, 1, 2, smem_one),
    ENG_ROW("engine r2", matvec_q8_0_r2, dpref::FMT_Q8_0, DP_LIN, 1, 2, smem_one),
    ENG_ROW("engine glu_r2", matvec_q8_0_glu_r2, dpref::FMT_Q8_0, DP_GLU, 1, 2, smem_one),
    {"engine glu_wr_r1_d6", "engine", dpref::FMT_Q4_0, DP_GLU, 1, false, 1, smem_wr_glu_r1_d6,
     wr_prepare, wr_grid, wr_launch},
};
int engine_kernels_1(const DpKernel** out) {
    *out = kEng;
    return (int)(sizeof(kEng) / sizeof(kEng[0]));
}
#else
ASSAY_MATVEC_TB(q4_0, FmtQ4_0)
ASSAY_MATVEC_TB(q8_0, FmtQ8_0)

ENG_LIN(matvec_q4_0_tb_r2, FmtQ4_0, 2, smem_tb)
ENG_GLU(matvec_q4_0_glu_tb_r1, FmtQ4_0, 1, smem_tb)
ENG_LIN(matvec_q8_0_tb_r2, FmtQ8_0, 2, smem_tb)
ENG_GLU(matvec_q8_0_glu_tb_r1, FmtQ8_0, 1, smem_tb)

static const DpKernel kEng[] = {
    ENG_ROW("engine tb_r2", matvec_q4_0_tb_r2, dpref::FMT_Q4_0, DP_LIN, MV_BATCH_TOK, 2, smem_tb),
    ENG_ROW("engine glu_tb_r1", matvec_q4_0_glu_tb_r1, dpref::FMT_Q4_0, DP_GLU, MV_BATCH_TOK, 1, smem_tb),
    ENG_ROW("engine tb_r2", matvec_q8_0_tb_r2, dpref::FMT_Q8_0, DP_LIN, MV_BATCH_TOK, 2, smem_tb),
    ENG_ROW("engine glu_tb_r1", matvec_q8_0_glu_tb_r1, dpref::FMT_Q8_0, DP_GLU, MV_BATCH_TOK, 1, smem_tb),
};
int engine_kernels_2(const DpKernel** out) {
    *out = kEng;
    return (int)(sizeof(kEng) / sizeof(kEng[0]));
}
#endif
