// matvec.cu — y[t] = W x[t] (+ bias) for a weight matrix in any supported format.
//
// W is `rows` rows of `k` values in the format's device layout (common/formats.cuh: planar
// for Q4_0 / Q8_0 / Q6_K, GGUF block layout otherwise). x holds `ntok` f32 vectors of
// length k (ntok <= MV_MAX_TOK), y holds `ntok` f32 vectors of length `rows`.
//
// Entry points matvec_<fmt>_r<R> (R = 1, 2, 4; optional residual added in the epilogue),
// matvec_<fmt>_glu_r<R> (R = 1, 2; gate and up rows in one pass, gated activation in
// the epilogue) and matvec_<fmt>_pair_r1 (two matrices of one shape on one x, one launch), both with an optional RMSNorm of x folded into the staging: MV_WARPS
// warps per block, each warp owns R consecutive rows. For each token the block stages x in
// shared memory, chunk by chunk (element 32c + i at c*MV_XCS + i for a tile of
// T <= MV_TILE chunks: a lane's 32 reads of its chunk are at immediate offsets and 32
// lanes reading 32 consecutive chunks hit 32 banks); a warp then reads each x value once
// for its R rows, and its loads of W are 16 bytes wide and contiguous across the lanes
// (each warp first asks L2 for its rows' first tile, so that the DRAM reads overlap the
// staging of x). The weight loop goes in rounds of U chunks per lane: every load of a
// round (U x R chunks, both matrices of a GLU pair) is issued before its first dot product.
// Batched entry points matvec_<fmt>_tb_r2 and matvec_<fmt>_glu_tb_r1 (prompts, verification
// rows): the same, but up to MV_BATCH_TOK tokens per pass over W: the block stages x of
// all of them side by side (tiles of at most mv_tile_max<NT>() chunks, a multiple of 32),
// and each chunk of W is loaded and unpacked once to exact floats (`F::ldf`), then dotted
// token by token with each token's x (`F::dotf`: `F::dotc`'s fma chains on those floats),
// every row of the warp per staged x value read.
// Arithmetic of one row (the exactness contract): lane l takes the chunks l, l+32, l+64,
// ... in order (tiles are multiples of 32 chunks or the whole row, so the tiling changes
// nothing), adds each chunk's `F::dotc` (a fixed order inside the chunk) to its
// accumulator, and the 32 lane sums are reduced by a fixed butterfly. Nothing depends on
// R, on `ntok`, on the tokens per pass, on which rows share the launch or on the grid, so
// a row's result is the same bits in every launch (batch invariance; kernel-check compares
// 1 vs N tokens per launch for every entry point).
// Streamed entry points matvec_<fmt>_wr_r<R>_d<D> and matvec_<fmt>_glu_wr_r<R>_d<D> (Q4_0,
// Q8_0 and BF16, one token, k a multiple of 1024; chosen by select.rs on sm_90): the same
// arithmetic per row, with the weights streamed into shared memory by cp.async through a
// ring of D slots per thread in a persistent grid (the last section of this file), and
// matvec_<fmt>_seg3_wr_r<R>_d<D>: three matrices of one format and k on one x (q, k and v)
// in one streamed launch, each row with the bits of its matrix's own launch, and
// matvec_<fmt>_seg3rope_wr_r<R>_d<D>: that launch with rope.cu's rope_kv (RoPE of q and k,
// k and v into the KV cache) in its epilogue, with rope_kv's bits (ASSAY_ROPE_FUSE=1).
// Multi-token streamed entry points matvec_q4_0_wrt<NT>_r<R>_d<D> and
// matvec_q4_0_glu_wrt<NT>_r<R>_d<D> (NT = 4, 8; 1 .. NT tokens, k a multiple of 1024; sm_90,
// chosen only when asked, ASSAY_MV_WRT=1): the streamed kernel reading each weight byte once
// per launch for all the tokens, each (token, row) with the one-token bits.
#include "common/common.cuh"
#include "common/formats.cuh"
#include "common/tc.cuh"

#ifndef MV_WARPS
#define MV_WARPS 8
#endif
#ifndef MV_MAX_TOK
#define MV_MAX_TOK 8
#endif
#ifndef MV_TILE
#define MV_TILE 640
#endif
#ifndef MV_BATCH_TOK
#define MV_BATCH_TOK 8
#endif
#ifndef MV_PART
#define MV_PART 0
#endif
// Resident blocks per SM the batched entry points are compiled for (at most 128 registers
// at 2: the batched body then keeps every value in registers; without the bound ptxas
// took 150-172 registers for the quantized formats, one block per SM).
#ifndef MV_TB_MINB
#define MV_TB_MINB 2
#endif
// Floats per staged x chunk in the one-token body's shared memory (32 values and a pad
// word): chunk c of the tile at xs_sh + c * MV_XCS, its values at stride 1, so that a
// lane's 32 x reads of a chunk are shared loads at immediate offsets and the 32 lanes
// (chunks c..c+31) hit 32 banks. select.rs: mv_shared_bytes.
#define MV_XCS 33
#ifndef MV_LD_REGS
#define MV_LD_REGS 64
#endif
// Floats per staged x chunk in the streamed kernel's shared memory (32 values and 4 pad
// words: every chunk 16-byte aligned, see matvec_wr_body). select.rs: mv_wr_shared_bytes.
#define MV_WR_XS 36
// Resident blocks per SM the streamed entry points are compiled for (at most 128 registers)
// and launched with: a persistent grid of at most MV_WR_MINB x SMs blocks, each with
// shared memory for that many per SM (select.rs: MV_WR_BLOCKS_PER_SM).
#define MV_WR_MINB 2

// Most chunks per x tile for NT tokens staged at once: MV_TILE / NT rounded down to a
// multiple of 32 (so that a lane's chunks stay l, l+32, ... across tiles), at least 32.
template <int NT>
__host__ __device__ constexpr int mv_tile_max() {
    return MV_TILE / NT >= 32 ? (MV_TILE / NT) / 32 * 32 : 32;
}

// Chunks per lane per round of the one-token weight loop: the most of 4, 2, 1 whose loaded
// chunks (`F::Ld`, U x R, twice for GLU) fit in MV_LD_REGS registers, so that every load of
// a round is issued before the first dot product without spilling.
template <class F, int R, bool GLU>
__host__ __device__ constexpr int mv_unroll() {
    constexpr int regs = (int)(sizeof(typename F::Ld) / 4) * R * (GLU ? 2 : 1);
    return 4 * regs <= MV_LD_REGS ? 4 : (2 * regs <= MV_LD_REGS ? 2 : 1);
}

// The inverse RMS of the k values of xt exactly as norm.cu's rmsnorm computes it with
// NORM_THREADS == MV_WARPS * 32 threads: thread i sums the f32 squares of xt[i],
// xt[i + MV_WARPS * 32], ... in f64 in order, each warp adds its threads' sums by a fixed
// butterfly, the warp sums are added in warp order (red: MV_WARPS doubles of shared
// memory), the mean is rounded to f32 and the result is 1 / sqrt in f32. Every thread of
// the block calls it (it holds two barriers) and gets the same value.
__device__ __forceinline__ float mv_inv_rms(const float* __restrict__ xt, int k, float eps,
                                            double* red) {
    double ss = 0.0;
    for (int i = threadIdx.x; i < k; i += MV_WARPS * 32) ss += (double)__fmul_rn(xt[i], xt[i]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
    __syncthreads();
    double tot = 0.0;
#pragma unroll
    for (int i = 0; i < MV_WARPS; i++) tot += red[i];
    const float mean = (float)(tot / (double)k);
    return 1.0f / sqrtf(mean + eps);
}

// The epilogue of output y[o] (row `row` of its token) from the row's sums s (of W) and s2
// (of W2): GLU: act(s) * s2 exactly like `gated_act`; else s (+ bias[row]) (+ res[o]), the
// residual added by the same single f32 addition as the `add` kernel (res may be y).
template <bool GLU>
__device__ __forceinline__ void mv_store(float* y, u64 o, int row, float s, float s2, int act,
                                         const float* __restrict__ bias, const float* res) {
    if (GLU) {
        y[o] = __fmul_rn(act == 0 ? silu(s) : gelu_tanh(s), s2);
    } else {
        float v = bias != 0 ? s + bias[row] : s;
        if (res != 0) v = v + res[o];
        y[o] = v;
    }
}

// GLU == false: y = W x (+ bias[row]) (+ res[row]); res may be y itself (the residual
// add fused into the epilogue: the same single f32 addition as the `add` kernel).
// GLU == true: W is the gate and W2 the up matrix (same format and shape): the warp
// computes row r of both and writes act(gate) * up exactly like `gated_act`.
// nw != 0: x is first RMS-normalised with weight nw, exactly as norm.cu's rmsnorm does it
// with NORM_THREADS == MV_WARPS * 32 threads (the same f64 sum order, the same f32
// multiplies), so that the fused launch gives the bits of rmsnorm followed by matvec.
// U: chunks per lane loaded per round of the weight loop (U x R (x 2 for GLU) loaded chunks
// in flight per lane; no effect on the arithmetic: each lane adds its chunks in order
// whatever U is); 0 = mv_unroll's choice.
template <class F, int R, bool GLU, int U = 0>
__device__ __forceinline__ void matvec_body(const u8* __restrict__ w, const u8* __restrict__ w2,
                                            u64 row_bytes, const float* __restrict__ x,
                                            const float* __restrict__ bias, const float* res,
                                            float* y, int rows, int k, int ntok, int act,
                                            const float* __restrict__ nw, float eps,
                                            float w_off, int blk) {
    constexpr int UU = U > 0 ? U : mv_unroll<F, R, GLU>();
    // The loads of a round are held apart from its dot products only where they fit in
    // MV_LD_REGS registers (not for the formats whose loaded chunk is 32 floats, R >= 2).
    constexpr bool SPLIT = (int)(sizeof(typename F::Ld) / 4) * UU * R * (GLU ? 2 : 1) <= MV_LD_REGS;
    __shared__ double red[MV_WARPS];
    extern __shared__ float xs_sh[];
    const int lane = threadIdx.x & 31;
    const int row0 = (blk * MV_WARPS + (threadIdx.x >> 5)) * R;
    const int nchunks = k >> 5;
    const int tile = nchunks < MV_TILE ? nchunks : MV_TILE;
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
    // Programmatic dependent launch (common.cuh): the prefetch above reads only W; x, res
    // and y are touched after the wait.
    pdl_wait();
    pdl_trigger();
    for (int t = 0; t < ntok; t++) {
        const float* xt = x + (u64)t * k;
        float acc[R], acc2[R];
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] = acc2[r] = 0.f;
        const float inv = nw != 0 ? mv_inv_rms(xt, k, eps, red) : 1.f;
        for (int c0 = 0; c0 < nchunks; c0 += tile) {
            const int tc = min(tile, nchunks - c0);
            __syncthreads();
            const float4* xp = (const float4*)(xt + ((u64)c0 << 5));
            const float4* gp = (const float4*)(nw + ((u64)c0 << 5));
            for (int e = threadIdx.x; e < tc * 8; e += MV_WARPS * 32) {
                float4 a = xp[e];
                if (nw != 0) a = norm4(a, inv, gp[e], w_off);
                float* xd = xs_sh + (e >> 3) * MV_XCS + (e & 7) * 4;
                xd[0] = a.x;
                xd[1] = a.y;
                xd[2] = a.z;
                xd[3] = a.w;
            }
            __syncthreads();
            // Rounds of UU chunks per lane (lane l: chunks b + l, b + l + 32, ...,
            // b + l + 32 (UU - 1) of round b): first every load of the round (all R rows,
            // both GLU matrices), the chunk index clamped to the tile so that no load sits
            // behind a guard; then the dot products, chunk by chunk in order and only for
            // chunks inside the tile. __syncwarp between the two keeps ptxas from sinking
            // loads into the arithmetic (without it the later rows' loads were issued after
            // the first row's FFMAs: 2-5 of 8 16-byte loads in flight per lane); the trip
            // count is warp-uniform, so every lane reaches it. Where the loaded chunks do not
            // fit (!SPLIT: 32 floats per loaded chunk), each chunk is loaded and dotted row
            // by row as before. Either way a lane adds its chunks l, l + 32, ... in order:
            // the arithmetic does not depend on UU.
#pragma unroll 1
            for (int b = 0; b < tc; b += 32 * UU) {
                if constexpr (SPLIT) {
                    typename F::Ld L[UU][R], L2[GLU ? UU : 1][R];
#pragma unroll
                    for (int u = 0; u < UU; u++) {
                        const int c = min(b + lane + 32 * u, tc - 1);
#pragma unroll
                        for (int r = 0; r < R; r++) {
                            F::ldc(m, rr[r], c0 + c, L[u][r]);
                            if (GLU) F::ldc(m2, rr[r], c0 + c, L2[GLU ? u : 0][r]);
                        }
                    }
                    __syncwarp();
#pragma unroll
                    for (int u = 0; u < UU; u++) {
                        const int c = b + lane + 32 * u;
                        if (c < tc) {
                            const float* xc = xs_sh + c * MV_XCS;
#pragma unroll
                            for (int r = 0; r < R; r++) {
                                acc[r] += F::dotc(L[u][r], xc, 1);
                                if (GLU) acc2[r] += F::dotc(L2[GLU ? u : 0][r], xc, 1);
                            }
                        }
                    }
                } else {
#pragma unroll
                    for (int u = 0; u < UU; u++) {
                        const int c = b + lane + 32 * u;
                        if (c < tc) {
                            const float* xc = xs_sh + c * MV_XCS;
#pragma unroll
                            for (int r = 0; r < R; r++) {
                                acc[r] += fmt_dot<F>(m, rr[r], c0 + c, xc, 1);
                                if (GLU) acc2[r] += fmt_dot<F>(m2, rr[r], c0 + c, xc, 1);
                            }
                        }
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float s = warp_sum(acc[r]);
            const float s2 = GLU ? warp_sum(acc2[r]) : 0.f;
            const int row = row0 + r;
            if (lane == 0 && row < rows)
                mv_store<GLU>(y, (u64)t * rows + row, row, s, s2, act, bias, res);
        }
    }
}

// The batched body: matvec_body's contract and arithmetic per row, NT tokens per weight
// pass. The tokens are taken NT at a time; for each group every chunk of W is loaded and
// unpacked once (`F::ldf`) and dotted with each token's x (`F::dotf`, the same bits as
// `F::dotc`), so a group costs one pass over W and one unpack per chunk, not one per token.
// x of the group's tokens is staged side by side in shared memory (token t at
// xs_sh + t * 32 * xst), in tiles of at most mv_tile_max<NT>() chunks.
template <class F, int R, int NT, bool GLU>
__device__ __forceinline__ void matvec_body_tb(const u8* __restrict__ w, const u8* __restrict__ w2,
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
    const int tmax = mv_tile_max<NT>();
    const int tile = nchunks < tmax ? nchunks : tmax;
    // The staging stride is that of a full tile whatever k (select.rs: mv_shared_bytes),
    // a compile-time constant: every x read in the dot products is one shared load at an
    // immediate offset, no address arithmetic per value. Layout only: the values and the
    // order they are added in do not depend on it.
    constexpr int xst = mv_tile_max<NT>() + 1;
    constexpr int tst = 32 * xst;  // floats per token in shared memory
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
    // Programmatic dependent launch (common.cuh): the prefetch above reads only W; x, res
    // and y are touched after the wait.
    pdl_wait();
    pdl_trigger();
    for (int tb = 0; tb < ntok; tb += NT) {
        const int nt = min(NT, ntok - tb);
        float acc[NT][R], acc2[NT][R];
#pragma unroll
        for (int t = 0; t < NT; t++)
#pragma unroll
            for (int r = 0; r < R; r++) acc[t][r] = acc2[t][r] = 0.f;
        // The inverse RMS of each token, one block reduction per token.
        float inv[NT];
#pragma unroll
        for (int t = 0; t < NT; t++) {
            inv[t] = 1.f;
            if (nw != 0 && t < nt) inv[t] = mv_inv_rms(x + (u64)(tb + t) * k, k, eps, red);
        }
        for (int c0 = 0; c0 < nchunks; c0 += tile) {
            const int tc = min(tile, nchunks - c0);
            __syncthreads();
            const float4* gp = (const float4*)(nw + ((u64)c0 << 5));
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t >= nt) break;
                const float4* xp = (const float4*)(x + (u64)(tb + t) * k + ((u64)c0 << 5));
                float* xs = xs_sh + t * tst;
                for (int e = threadIdx.x; e < tc * 8; e += MV_WARPS * 32) {
                    float4 a = xp[e];
                    if (nw != 0) a = norm4(a, inv[t], gp[e], w_off);
                    const int cc = e >> 3, i = (e & 7) * 4;
                    xs[i * xst + cc] = a.x;
                    xs[(i + 1) * xst + cc] = a.y;
                    xs[(i + 2) * xst + cc] = a.z;
                    xs[(i + 3) * xst + cc] = a.w;
                }
            }
            __syncthreads();
            // Each lane's chunk of the warp's R rows (and of the up matrix) is loaded and
            // unpacked once to exact floats (`F::ldf`); then token by token (only the nt live
            // slots: a block-uniform branch per slot), so that each staged x value read from
            // shared memory serves every row, and `F::dotf` (`F::dotc`'s fma chains on those
            // floats) gives each (token, row) the bits of the one-token kernel.
#pragma unroll 1
            for (int cc = lane; cc < tc; cc += 32) {
                typename F::Lf L[R], L2[GLU ? R : 1];
#pragma unroll
                for (int r = 0; r < R; r++) {
                    F::ldf(m, rr[r], c0 + cc, L[r]);
                    if (GLU) F::ldf(m2, rr[r], c0 + cc, L2[r]);
                }
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    if (t < nt) {
                        const float* xt = xs_sh + t * tst + cc;
#pragma unroll
                        for (int r = 0; r < R; r++) {
                            acc[t][r] += F::dotf(L[r], xt, xst);
                            if (GLU) acc2[t][r] += F::dotf(L2[r], xt, xst);
                        }
                    }
                }
            }
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= nt) break;
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float s = warp_sum(acc[t][r]);
                const float s2 = GLU ? warp_sum(acc2[t][r]) : 0.f;
                const int row = row0 + r;
                if (lane == 0 && row < rows)
                    mv_store<GLU>(y, (u64)(tb + t) * rows + row, row, s, s2, act, bias, res);
            }
        }
    }
}

// NT == 1: matvec_body (one token per pass); otherwise matvec_body_tb.
template <class F, int R, int NT, bool GLU, int U = 0>
__device__ __forceinline__ void matvec_run(const u8* __restrict__ w, const u8* __restrict__ w2,
                                           u64 row_bytes, const float* __restrict__ x,
                                           const float* __restrict__ bias, const float* res,
                                           float* y, int rows, int k, int ntok, int act,
                                           const float* __restrict__ nw, float eps,
                                           float w_off) {
    if constexpr (NT == 1) {
        matvec_body<F, R, GLU, U>(w, w2, row_bytes, x, bias, res, y, rows, k, ntok, act, nw, eps,
                                  w_off, (int)blockIdx.x);
    } else {
        matvec_body_tb<F, R, NT, GLU>(w, w2, row_bytes, x, bias, res, y, rows, k, ntok, act, nw,
                                      eps, w_off);
    }
}

// Entry points: NT = 1 (matvec_<fmt>_r<R>, matvec_<fmt>_glu_r<R>: one token per weight
// pass, the decode step) and NT = MV_BATCH_TOK (matvec_<fmt>_t<NT>_r<R>, ..._glu_t<NT>_r<R>:
// up to NT tokens per weight pass, prompts and verification rows).
#define ASSAY_MATVEC_R(name, F, NT, sfx, R, LB)                                               \
    extern "C" __global__ void LB                                                           \
        matvec_##name##sfx##_r##R(const u8* __restrict__ w, u64 row_bytes,                  \
                                  const float* __restrict__ x, const float* __restrict__ bias, \
                                  const float* res, float* y, int rows, int k, int ntok,    \
                                  const float* __restrict__ nw, float eps, float w_off) {   \
        matvec_run<F, R, NT, false>(w, w, row_bytes, x, bias, res, y, rows, k, ntok, 0, nw,  \
                                     eps, w_off);                                           \
    }
#define ASSAY_MATVEC_GLU_R(name, F, NT, sfx, R, LB)                                           \
    extern "C" __global__ void LB                                                           \
        matvec_##name##_glu##sfx##_r##R(const u8* __restrict__ wg, const u8* __restrict__ wu, \
                                        u64 row_bytes, const float* __restrict__ x, float* y, \
                                        int rows, int k, int ntok, int act,                 \
                                        const float* __restrict__ nw, float eps,            \
                                        float w_off) {                                      \
        matvec_run<F, R, NT, true>(wg, wu, row_bytes, x, 0, 0, y, rows, k, ntok, act, nw,    \
                                    eps, w_off);                                            \
    }
// Two matrices of one shape and format on the same x in one launch (k and v of an
// attention block): blocks [0, nblk) compute matrix a, the rest matrix b, each block exactly
// as in its own launch (the one-token body with its block index), so the same bits.
#define ASSAY_MATVEC_PAIR_R(name, F, R, LB)                                                   \
    extern "C" __global__ void LB                                                           \
        matvec_##name##_pair_r##R(const u8* __restrict__ wa, const u8* __restrict__ wb,     \
                                  u64 row_bytes, const float* __restrict__ x,               \
                                  const float* __restrict__ bias_a,                         \
                                  const float* __restrict__ bias_b, float* ya, float* yb,   \
                                  int rows, int k, int ntok, const float* __restrict__ nw,  \
                                  float eps, float w_off, int nblk) {                       \
        const bool second = (int)blockIdx.x >= nblk;                                       \
        const u8* w = second ? wb : wa;                                                     \
        matvec_body<F, R, false>(w, w, row_bytes, x, second ? bias_b : bias_a, 0,           \
                                 second ? yb : ya, rows, k, ntok, 0, nw, eps, w_off,        \
                                 second ? (int)blockIdx.x - nblk : (int)blockIdx.x);        \
    }
#define MV_LB_ONE __launch_bounds__(MV_WARPS * 32)
#define MV_LB_TB __launch_bounds__(MV_WARPS * 32, MV_TB_MINB)
#define ASSAY_MATVEC_ONE(name, F)                  \
    ASSAY_MATVEC_R(name, F, 1, , 1, MV_LB_ONE)     \
    ASSAY_MATVEC_R(name, F, 1, , 2, MV_LB_ONE)     \
    ASSAY_MATVEC_R(name, F, 1, , 4, MV_LB_ONE)     \
    ASSAY_MATVEC_GLU_R(name, F, 1, , 1, MV_LB_ONE) \
    ASSAY_MATVEC_GLU_R(name, F, 1, , 2, MV_LB_ONE) \
    ASSAY_MATVEC_PAIR_R(name, F, 1, MV_LB_ONE)
#define ASSAY_MATVEC_TB(name, F)                                \
    ASSAY_MATVEC_R(name, F, MV_BATCH_TOK, _tb, 2, MV_LB_TB)     \
    ASSAY_MATVEC_GLU_R(name, F, MV_BATCH_TOK, _tb, 1, MV_LB_TB)

// MV_PART 1: the one-token entry points only, 2: the batched ones only, 0: both. The
// engine compiles this file twice (families Matvec and MatvecBatch), so that the two
// halves compile in parallel.
#if MV_PART != 2
ASSAY_FOR_EACH_FORMAT(ASSAY_MATVEC_ONE)
#endif
#if MV_PART != 1
ASSAY_FOR_EACH_FORMAT(ASSAY_MATVEC_TB)
#endif

#include "matvec/streamed.cuh"

#define MV_LB_WR __launch_bounds__(MV_WARPS * 32, MV_WR_MINB)
#define ASSAY_MATVEC_WR_R(name, F, R, D)                                                      \
    extern "C" __global__ void MV_LB_WR matvec_##name##_wr_r##R##_d##D(                      \
        const u8* __restrict__ w, u64 row_bytes, const float* __restrict__ x,                 \
        const float* __restrict__ bias, const float* res, float* y, int rows, int k, int ntok, \
        const float* __restrict__ nw, float eps, float w_off) {                               \
        matvec_wr_body<F, R, D, false>(w, w, x, bias, res, y, rows, k, 0, nw, eps, w_off,     \
                                       MvWrSegs<1>{});                                        \
    }
#define ASSAY_MATVEC_GLU_WR_R(name, F, R, D)                                                  \
    extern "C" __global__ void MV_LB_WR matvec_##name##_glu_wr_r##R##_d##D(                  \
        const u8* __restrict__ wg, const u8* __restrict__ wu, u64 row_bytes,                  \
        const float* __restrict__ x, float* y, int rows, int k, int ntok, int act,            \
        const float* __restrict__ nw, float eps, float w_off) {                               \
        matvec_wr_body<F, R, D, true>(wg, wu, x, 0, 0, y, rows, k, act, nw, eps, w_off,       \
                                      MvWrSegs<1>{});                                         \
    }
// The parameters the segmented entry points start with (both macros below), and the
// segments they make.
#define MV_SEG3_PARAMS                                                                        \
        const u8* __restrict__ w0, const u8* __restrict__ w1, const u8* __restrict__ w2,      \
        const float* __restrict__ x, const float* __restrict__ b0,                            \
        const float* __restrict__ b1, const float* __restrict__ b2, float* y0, float* y1,     \
        float* y2, int rows0, int rows1, int rows2, int k, const float* __restrict__ nw,      \
        float eps, float w_off
#define MV_SEG3_SEGS                                                                          \
    const MvWrSegs<3> sg = {{w0, w1, w2}, {b0, b1, b2}, {y0, y1, y2}, {rows0, rows1, rows2}}
// Three matrices of one format and k on the same x in one streamed launch (q, k and v of an
// attention block; select.rs: MatvecKernel::WrSegs): matrix s is rows_s x k at w_s, its
// output y_s, its bias b_s (or null); the optional folded norm applies to all three.
// Row groups of R rows of one matrix each (matvec_wr_body's S > 1): every row gets the
// bits of its matrix's own streamed launch.
#define ASSAY_MATVEC_SEG3_WR_R(name, F, R, D)                                                 \
    extern "C" __global__ void MV_LB_WR matvec_##name##_seg3_wr_r##R##_d##D(                 \
        MV_SEG3_PARAMS) {                                                                     \
        MV_SEG3_SEGS;                                                                         \
        matvec_wr_body<F, R, D, false, 3>(w0, w0, x, b0, 0, y0, rows0, k, 0, nw, eps, w_off,  \
                                          sg);                                                \
    }
// The segmented launch with rope_kv in its epilogue (ASSAY_ROPE_FUSE=1; select.rs
// choose_rope_fuse; matvec/rope_epi.cuh): the parameters of the segmented entry points, then
// the token's position (pos[0]), the layer's K and V pools and block table, rope.cu's table
// and frequency scale, the head size, n_rot, the KV heads and the cache's capacity. q (y0)
// and k (y1) come out rotated, k and v are stored into the caches: rope_kv's bits.
#define ASSAY_MATVEC_SEG3ROPE_WR_R(name, F, R, D)                                             \
    extern "C" __global__ void MV_LB_WR matvec_##name##_seg3rope_wr_r##R##_d##D(             \
        MV_SEG3_PARAMS, const int* __restrict__ pos, u16* kc, u16* vc,                        \
        const int* __restrict__ bt, const double* __restrict__ tab, double freq_scale,        \
        int hd, int n_rot, int nkv, int cap) {                                                \
        MV_SEG3_SEGS;                                                                         \
        const MvRope rp = {pos, kc, vc, bt, tab, freq_scale, hd, n_rot, nkv, cap};            \
        matvec_wr_body<F, R, D, false, 3, 1, true>(w0, w0, x, b0, 0, y0, rows0, k, 0, nw, eps, \
                                                   w_off, sg, 1, &rp);                        \
    }
// The multi-token streamed entry points (matvec_wr_body's NT > 1): the parameters of the
// one-token ones, ntok (1 .. NT) token vectors.
#define ASSAY_MATVEC_WRT_R(name, F, NT, R, D)                                                 \
    extern "C" __global__ void MV_LB_WR matvec_##name##_wrt##NT##_r##R##_d##D(               \
        const u8* __restrict__ w, u64 row_bytes, const float* __restrict__ x,                 \
        const float* __restrict__ bias, const float* res, float* y, int rows, int k, int ntok, \
        const float* __restrict__ nw, float eps, float w_off) {                               \
        matvec_wr_body<F, R, D, false, 1, NT>(w, w, x, bias, res, y, rows, k, 0, nw, eps,     \
                                              w_off, MvWrSegs<1>{}, ntok);                    \
    }
#define ASSAY_MATVEC_GLU_WRT_R(name, F, NT, R, D)                                             \
    extern "C" __global__ void MV_LB_WR matvec_##name##_glu_wrt##NT##_r##R##_d##D(           \
        const u8* __restrict__ wg, const u8* __restrict__ wu, u64 row_bytes,                  \
        const float* __restrict__ x, float* y, int rows, int k, int ntok, int act,            \
        const float* __restrict__ nw, float eps, float w_off) {                               \
        matvec_wr_body<F, R, D, true, 1, NT>(wg, wu, x, 0, 0, y, rows, k, act, nw, eps, w_off, \
                                             MvWrSegs<1>{}, ntok);                            \
    }
// (NT, R, D) of each: sources.rs MV_WRT_TRD / MV_WRT_GLU_TRD.
#define ASSAY_MATVEC_WRT(name, F)               \
    ASSAY_MATVEC_WRT_R(name, F, 4, 2, 4)        \
    ASSAY_MATVEC_WRT_R(name, F, 8, 2, 4)        \
    ASSAY_MATVEC_GLU_WRT_R(name, F, 4, 1, 4)    \
    ASSAY_MATVEC_GLU_WRT_R(name, F, 8, 1, 4)
// (R, D) of each: sources.rs MV_WR_RD (plain and segmented) / MV_WR_GLU_RD.
#define ASSAY_MATVEC_WR(name, F)            \
    ASSAY_MATVEC_WR_R(name, F, 4, 3)        \
    ASSAY_MATVEC_WR_R(name, F, 4, 2)        \
    ASSAY_MATVEC_GLU_WR_R(name, F, 1, 6)   \
    ASSAY_MATVEC_GLU_WR_R(name, F, 1, 4)   \
    ASSAY_MATVEC_SEG3_WR_R(name, F, 4, 3)  \
    ASSAY_MATVEC_SEG3_WR_R(name, F, 4, 2)  \
    ASSAY_MATVEC_SEG3ROPE_WR_R(name, F, 4, 3)  \
    ASSAY_MATVEC_SEG3ROPE_WR_R(name, F, 4, 2)
// (R, D) of each for BF16 (64-byte chunks, 4x Q4_0's ring per unit): sources.rs
// MV_WR_HALF_RD (plain and segmented) / MV_WR_HALF_GLU_RD.
#define ASSAY_MATVEC_WR_HALF(name, F)       \
    ASSAY_MATVEC_WR_R(name, F, 2, 2)        \
    ASSAY_MATVEC_WR_R(name, F, 1, 3)        \
    ASSAY_MATVEC_GLU_WR_R(name, F, 1, 2)   \
    ASSAY_MATVEC_SEG3_WR_R(name, F, 2, 2)  \
    ASSAY_MATVEC_SEG3_WR_R(name, F, 1, 3)
#if MV_PART != 2
ASSAY_MATVEC_WR(q4_0, FmtQ4_0)
ASSAY_MATVEC_WR(q8_0, FmtQ8_0)
ASSAY_MATVEC_WR_HALF(bf16, FmtBF16)
ASSAY_MATVEC_WRT(q4_0, FmtQ4_0)
#endif
