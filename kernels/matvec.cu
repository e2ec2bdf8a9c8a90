// matvec.cu — y[t] = W x[t] (+ bias) for a weight matrix in any supported format.
//
// W is `rows` rows of `k` values in the format's device layout (common/formats.cuh: planar
// for Q4_0 / Q8_0 / Q6_K, GGUF block layout otherwise). x holds `ntok` f32 vectors of
// length k (ntok <= MV_MAX_TOK), y holds `ntok` f32 vectors of length `rows`.
//
// Entry points matvec_<fmt>_r<R> (R = 1, 2, 4; optional residual added in the epilogue)
// and matvec_<fmt>_glu_r<R> (R = 1, 2; gate and up rows in one pass, gated activation in
// the epilogue), both with an optional RMSNorm of x folded into the staging: MV_WARPS warps per block, each warp owns R
// consecutive rows. For each token the block stages x in shared memory, transposed by
// chunk (element 32c + i at i*(T+1) + c for a tile of T <= MV_TILE chunks, so that the 32
// lanes reading element i of 32 consecutive chunks hit 32 banks); a warp then reads each
// x value once for its R rows, and its loads of W are 16 bytes wide and contiguous across
// the lanes (each warp first asks L2 for its rows' first tile, so that the DRAM reads
// overlap the staging of x). Arithmetic of one row (the exactness contract): lane l takes the chunks
// l, l+32, l+64, ... of each tile in order (the tiling depends on k only), adds each
// chunk's `F::dot` (a fixed order inside the chunk) to its accumulator, and the 32 lane sums
// are reduced by a fixed butterfly. Nothing depends on R, on `ntok`, on which rows share
// the launch or on the grid, so a row's result is the same bits in every launch
// (batch invariance; kernel-check compares 1 vs N tokens per launch).
#include "common/common.cuh"
#include "common/formats.cuh"

#ifndef MV_WARPS
#define MV_WARPS 8
#endif
#ifndef MV_MAX_TOK
#define MV_MAX_TOK 8
#endif
#ifndef MV_TILE
#define MV_TILE 640
#endif

// GLU == false: y = W x (+ bias[row]) (+ res[row]); res may be y itself (the residual
// add fused into the epilogue: the same single f32 addition as the `add` kernel).
// GLU == true: W is the gate and W2 the up matrix (same format and shape): the warp
// computes row r of both and writes act(gate) * up exactly like `gated_act`.
// nw != 0: x is first RMS-normalised with weight nw, exactly as norm.cu's rmsnorm does it
// with NORM_THREADS == MV_WARPS * 32 threads (the same f64 sum order, the same f32
// multiplies), so that the fused launch gives the bits of rmsnorm followed by matvec.
template <class F, int R, bool GLU>
__device__ __forceinline__ void matvec_body(const u8* __restrict__ w, const u8* __restrict__ w2,
                                            u64 row_bytes, const float* __restrict__ x,
                                            const float* __restrict__ bias, const float* res,
                                            float* y, int rows, int k, int ntok, int act,
                                            const float* __restrict__ nw, float eps,
                                            float w_off) {
    __shared__ double red[MV_WARPS];
    extern __shared__ float xs_sh[];
    const int lane = threadIdx.x & 31;
    const int row0 = (blockIdx.x * MV_WARPS + (threadIdx.x >> 5)) * R;
    const int nchunks = k >> 5;
    const int tile = nchunks < MV_TILE ? nchunks : MV_TILE;
    const int xst = tile + 1;
    const WMat m = {w, row_bytes, (u64)rows, (u64)(k / F::ELEMS)};
    const WMat m2 = {w2, row_bytes, (u64)rows, (u64)(k / F::ELEMS)};
    // Rows past the end compute row rows-1 again (no guard between the loads) and write
    // nothing.
    u64 rr[R];
#pragma unroll
    for (int r = 0; r < R; r++) rr[r] = (u64)min(row0 + r, rows - 1);
    // Start this warp's weight reads (first tile) before x is staged.
    {
        const int pc = nchunks < MV_TILE ? nchunks : MV_TILE;
        for (int cc = lane; cc < pc; cc += 32) {
#pragma unroll
            for (int r = 0; r < R; r++) {
                F::prefetch(m, rr[r], cc);
                if (GLU) F::prefetch(m2, rr[r], cc);
            }
        }
    }
    for (int t = 0; t < ntok; t++) {
        const float* xt = x + (u64)t * k;
        float acc[R], acc2[R];
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] = acc2[r] = 0.f;
        float inv = 1.f;
        if (nw != 0) {
            double ss = 0.0;
            for (int i = threadIdx.x; i < k; i += MV_WARPS * 32)
                ss += (double)__fmul_rn(xt[i], xt[i]);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
            __syncthreads();
            if (lane == 0) red[threadIdx.x >> 5] = ss;
            __syncthreads();
            double tot = 0.0;
#pragma unroll
            for (int i = 0; i < MV_WARPS; i++) tot += red[i];
            const float mean = (float)(tot / (double)k);
            inv = 1.0f / sqrtf(mean + eps);
        }
        for (int c0 = 0; c0 < nchunks; c0 += tile) {
            const int tc = min(tile, nchunks - c0);
            __syncthreads();
            const float4* xp = (const float4*)(xt + ((u64)c0 << 5));
            const float4* gp = (const float4*)(nw + ((u64)c0 << 5));
            for (int e = threadIdx.x; e < tc * 8; e += MV_WARPS * 32) {
                float4 a = xp[e];
                if (nw != 0) {
                    const float4 g = gp[e];
                    a.x = __fmul_rn(__fmul_rn(a.x, inv), g.x + w_off);
                    a.y = __fmul_rn(__fmul_rn(a.y, inv), g.y + w_off);
                    a.z = __fmul_rn(__fmul_rn(a.z, inv), g.z + w_off);
                    a.w = __fmul_rn(__fmul_rn(a.w, inv), g.w + w_off);
                }
                const int cc = e >> 3, i = (e & 7) * 4;
                xs_sh[i * xst + cc] = a.x;
                xs_sh[(i + 1) * xst + cc] = a.y;
                xs_sh[(i + 2) * xst + cc] = a.z;
                xs_sh[(i + 3) * xst + cc] = a.w;
            }
            __syncthreads();
#pragma unroll 4
            for (int cc = lane; cc < tc; cc += 32) {
#pragma unroll
                for (int r = 0; r < R; r++) {
                    acc[r] += F::dot(m, rr[r], c0 + cc, xs_sh + cc, xst);
                    if (GLU) acc2[r] += F::dot(m2, rr[r], c0 + cc, xs_sh + cc, xst);
                }
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float s = warp_sum(acc[r]);
            const float s2 = GLU ? warp_sum(acc2[r]) : 0.f;
            const int row = row0 + r;
            if (lane == 0 && row < rows) {
                const u64 o = (u64)t * rows + row;
                if (GLU) {
                    y[o] = __fmul_rn(act == 0 ? silu(s) : gelu_tanh(s), s2);
                } else {
                    float v = bias != 0 ? s + bias[row] : s;
                    if (res != 0) v = v + res[o];
                    y[o] = v;
                }
            }
        }
    }
}

#define ASSAY_MATVEC_R(name, F, R)                                                          \
    extern "C" __global__ void __launch_bounds__(MV_WARPS * 32)                           \
        matvec_##name##_r##R(const u8* __restrict__ w, u64 row_bytes,                     \
                             const float* __restrict__ x, const float* __restrict__ bias, \
                             const float* res, float* y, int rows, int k, int ntok,       \
                             const float* __restrict__ nw, float eps, float w_off) {      \
        matvec_body<F, R, false>(w, w, row_bytes, x, bias, res, y, rows, k, ntok, 0, nw, eps, \
                                 w_off);                                                  \
    }
#define ASSAY_MATVEC_GLU_R(name, F, R)                                                     \
    extern "C" __global__ void __launch_bounds__(MV_WARPS * 32)                           \
        matvec_##name##_glu_r##R(const u8* __restrict__ wg, const u8* __restrict__ wu,    \
                                 u64 row_bytes, const float* __restrict__ x, float* y,    \
                                 int rows, int k, int ntok, int act,                      \
                                 const float* __restrict__ nw, float eps, float w_off) {  \
        matvec_body<F, R, true>(wg, wu, row_bytes, x, 0, 0, y, rows, k, ntok, act, nw, eps, \
                                w_off);                                                   \
    }
#define ASSAY_MATVEC(name, F)       \
    ASSAY_MATVEC_R(name, F, 1)     \
    ASSAY_MATVEC_R(name, F, 2)     \
    ASSAY_MATVEC_R(name, F, 4)     \
    ASSAY_MATVEC_GLU_R(name, F, 1) \
    ASSAY_MATVEC_GLU_R(name, F, 2)

ASSAY_FOR_EACH_FORMAT(ASSAY_MATVEC)
