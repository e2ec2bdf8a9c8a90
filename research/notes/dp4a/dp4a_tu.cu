// dp4a_tu.cu — the dp4a configurations timed, one unit per (format, design) so that the four
// compile in parallel: DPART 1 = Q4_0 wa (+ the quantisation kernel), 2 = Q4_0 wr,
// 3 = Q8_0 wa, 4 = Q8_0 wr. Each configuration is compiled for NT = 1, 2, 4, 8 (the most
// tokens per launch; an instance takes 1 .. NT): the bench times T tokens with the NT = T
// instance and checks that every instance gives each (token, row) the same bits.
#include "bench.h"
#include "dp4a.cuh"
#include "ref.h"

namespace {

template <class K>
cudaError_t prep(K kern, size_t sm, int* bps, int* regs, int* lmem) {
    if (sm > 48 * 1024) {
        cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
        if (e != cudaSuccess) return e;
    }
    cudaFuncAttributes at;
    cudaError_t e = cudaFuncGetAttributes(&at, kern);
    if (e != cudaSuccess) return e;
    *regs = at.numRegs;
    *lmem = (int)at.localSizeBytes;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(bps, kern, DP_WARPS * 32, sm);
}

// Design wa: no shared memory; default grid one warp per row group (as the engine's
// multi-row entries); any grid works (grid-stride).
template <class Q, int R, bool GLU, int U, int NT, int MINB = 2>
struct WaK {
    static size_t smem(int, int) { return 0; }
    static cudaError_t prepare(int, int, int* bps, int* regs, int* lmem) {
        return prep(dp_wa_kernel<Q, R, NT, GLU, U, MINB>, 0, bps, regs, lmem);
    }
    static int grid(int rows, int, int, int) {
        const int groups = (rows + R - 1) / R;
        return (groups + DP_WARPS - 1) / DP_WARPS;
    }
    static cudaError_t launch(const DpArgs& a, int grid, cudaStream_t s) {
        dp_wa_kernel<Q, R, NT, GLU, U, MINB><<<grid, DP_WARPS * 32, 0, s>>>(a);
        return cudaGetLastError();
    }
};

// Design wr: the ring in dynamic shared memory; persistent grid (at most SMs x resident
// blocks per SM).
template <class Q, int R, bool GLU, int D, int NT>
struct WrK {
    static size_t smem(int, int) { return dp_wr_smem<Q, R, GLU, D>(); }
    static cudaError_t prepare(int, int, int* bps, int* regs, int* lmem) {
        return prep(dp_wr_kernel<Q, R, NT, GLU, D>, dp_wr_smem<Q, R, GLU, D>(), bps, regs, lmem);
    }
    static int grid(int rows, int, int sms, int bps) {
        const int groups = (rows + R - 1) / R;
        const int need = (groups + DP_WARPS - 1) / DP_WARPS;
        return need < sms * bps ? need : sms * bps;
    }
    static cudaError_t launch(const DpArgs& a, int grid, cudaStream_t s) {
        dp_wr_kernel<Q, R, NT, GLU, D><<<grid, DP_WARPS * 32, dp_wr_smem<Q, R, GLU, D>(), s>>>(a);
        return cudaGetLastError();
    }
};

}  // namespace

#define WA_ROW(NAME, Q, FMT, R, GLU, U, NT, MINB)                                            \
    {NAME, "wa", FMT, GLU ? DP_GLU : DP_LIN, NT, false, R, &WaK<Q, R, GLU, U, NT, MINB>::smem, \
     &WaK<Q, R, GLU, U, NT, MINB>::prepare, &WaK<Q, R, GLU, U, NT, MINB>::grid,               \
     &WaK<Q, R, GLU, U, NT, MINB>::launch}
#define WR_ROW(NAME, Q, FMT, R, GLU, D, NT)                                                  \
    {NAME, "wr", FMT, GLU ? DP_GLU : DP_LIN, NT, false, R, &WrK<Q, R, GLU, D, NT>::smem,      \
     &WrK<Q, R, GLU, D, NT>::prepare, &WrK<Q, R, GLU, D, NT>::grid, &WrK<Q, R, GLU, D, NT>::launch}
#define WA_CFG(NAME, Q, FMT, R, GLU, U, MINB)                                               \
    WA_ROW(NAME, Q, FMT, R, GLU, U, 1, MINB), WA_ROW(NAME, Q, FMT, R, GLU, U, 2, MINB),     \
    WA_ROW(NAME, Q, FMT, R, GLU, U, 4, MINB), WA_ROW(NAME, Q, FMT, R, GLU, U, 8, MINB)
#define WR_CFG(NAME, Q, FMT, R, GLU, D)                                                     \
    WR_ROW(NAME, Q, FMT, R, GLU, D, 1), WR_ROW(NAME, Q, FMT, R, GLU, D, 2),                 \
    WR_ROW(NAME, Q, FMT, R, GLU, D, 4), WR_ROW(NAME, Q, FMT, R, GLU, D, 8)

#if DPART == 1
static const DpKernel kDp[] = {
    WA_CFG("wa glu R1 U2", DpQ4_0, dpref::FMT_Q4_0, 1, true, 2, 2),
    WA_CFG("wa glu R2 U1", DpQ4_0, dpref::FMT_Q4_0, 2, true, 1, 2),
    // 4 rows of each matrix per warp: x read once per 8 units; up to 255 registers (1 block
    // per SM at 4 and 8 tokens: 147-189 registers under NVRTC)
    WA_CFG("wa glu R4 U1 b1", DpQ4_0, dpref::FMT_Q4_0, 4, true, 1, 1),
    WA_CFG("wa R2 U2", DpQ4_0, dpref::FMT_Q4_0, 2, false, 2, 2),
    WA_CFG("wa R4 U1", DpQ4_0, dpref::FMT_Q4_0, 4, false, 1, 2),
};
int dp4a_kernels_1(const DpKernel** out) {
    *out = kDp;
    return (int)(sizeof(kDp) / sizeof(kDp[0]));
}
// One warp per activation block of 32 values.
cudaError_t dp_quant_launch(const float* x, int ntok, int k, signed char* xq, int2* xds,
                            cudaStream_t s) {
    const int nblocks = ntok * (k / 32);
    dp_quant_kernel<DP_WARPS><<<(nblocks + DP_WARPS - 1) / DP_WARPS, DP_WARPS * 32, 0, s>>>(
        x, nblocks, xq, xds);
    return cudaGetLastError();
}
#elif DPART == 2
static const DpKernel kDp[] = {
    WR_CFG("wr glu R1 D6", DpQ4_0, dpref::FMT_Q4_0, 1, true, 6),
    WR_CFG("wr glu R2 D4", DpQ4_0, dpref::FMT_Q4_0, 2, true, 4),
    WR_CFG("wr R2 D4", DpQ4_0, dpref::FMT_Q4_0, 2, false, 4),
    WR_CFG("wr R4 D3", DpQ4_0, dpref::FMT_Q4_0, 4, false, 3),
};
int dp4a_kernels_2(const DpKernel** out) {
    *out = kDp;
    return (int)(sizeof(kDp) / sizeof(kDp[0]));
}
#elif DPART == 3
static const DpKernel kDp[] = {
    WA_CFG("wa glu R1 U2", DpQ8_0, dpref::FMT_Q8_0, 1, true, 2, 2),
    WA_CFG("wa glu R2 U1", DpQ8_0, dpref::FMT_Q8_0, 2, true, 1, 2),
    // 4 rows of each matrix per warp: x read once per 8 units; up to 255 registers (1 block
    // per SM at 4 and 8 tokens: 147-189 registers under NVRTC)
    WA_CFG("wa glu R4 U1 b1", DpQ8_0, dpref::FMT_Q8_0, 4, true, 1, 1),
    WA_CFG("wa R2 U2", DpQ8_0, dpref::FMT_Q8_0, 2, false, 2, 2),
    WA_CFG("wa R4 U1", DpQ8_0, dpref::FMT_Q8_0, 4, false, 1, 2),
};
int dp4a_kernels_3(const DpKernel** out) {
    *out = kDp;
    return (int)(sizeof(kDp) / sizeof(kDp[0]));
}
#else
// Q8_0's 36-byte slots: the depths that keep 2 blocks per SM (<= ~110 KB each).
static const DpKernel kDp[] = {
    WR_CFG("wr glu R1 D6", DpQ8_0, dpref::FMT_Q8_0, 1, true, 6),
    WR_CFG("wr glu R2 D3", DpQ8_0, dpref::FMT_Q8_0, 2, true, 3),
    WR_CFG("wr R2 D4", DpQ8_0, dpref::FMT_Q8_0, 2, false, 4),
    WR_CFG("wr R4 D3", DpQ8_0, dpref::FMT_Q8_0, 4, false, 3),
};
int dp4a_kernels_4(const DpKernel** out) {
    *out = kDp;
    return (int)(sizeof(kDp) / sizeof(kDp[0]));
}
#endif
