// ---------------------------------------------------------------- the streamed kernel
//
// matvec_<fmt>_wr_r<R>_d<D> (y = W norm(x) (+ bias) (+ res)) and matvec_<fmt>_glu_wr_r<R>_d<D>
// (act(Wg norm(x)) * (Wu norm(x))), with the parameters of matvec_<fmt>_r<R> and
// matvec_<fmt>_glu_r<R> (row_bytes: unused by the planar layout; ntok: 1), for the planar
// formats with one f16 scale per block of 32 (F::QBYTES quant bytes per block: Q4_0, Q8_0;
// F::WR_SCALE) and for BF16 (HalfFmt: a chunk is 64 bytes of its row, rows back to back,
// so chunk c of row r is at (r k / 32 + c) 64, the quant-plane offset with QBYTES = 64; no
// scale plane, !F::WR_SCALE; row_bytes == 2 k is implied), k a multiple of 1024. Blocks of
// MV_WARPS warps, a persistent grid (select.rs: at most MV_WR_MINB x SMs blocks).
//  * Work: row groups of R consecutive rows (of both matrices for GLU: NU = R or 2R units,
//    a unit = one row of one matrix), dealt to the warps of the grid round-robin (group g to
//    warp g mod (MV_WARPS x gridDim.x), warp w of block b being warp b MV_WARPS + w). Step u
//    of a group (u = 0 .. k/1024 - 1) is, for lane l, chunk 32 u + l of each unit.
//  * Arithmetic of a row: lane l adds `F::dotc` of its chunks l, l + 32, ... in order to
//    the unit's accumulator (`acc += F::dotc(...)`, the statement of matvec_body), the 32
//    lane sums go through warp_sum, the epilogue is mv_store, and x is staged as
//    matvec_body stages it (normalised with mv_inv_rms's inv and norm4 when nw != 0):
//    matvec_body's contract and bits, whatever R, D, the grid, or the rows sharing the
//    launch (kernel-check compares these entry points with matvec_<fmt>_r<R> bit for bit,
//    on several grids and sub-matrices).
//  * Stream: a warp's steps over all its groups form one sequence; step t's loads (per unit
//    and lane: the chunk's F::QBYTES quant bytes and, WR_SCALE, the 4-byte word holding its
//    f16 scale)
//    go global -> shared memory by cp.async into slot t mod D of the warp's ring, issued
//    D - 1 steps ahead and running on across group boundaries. Each lane copies exactly
//    the bytes it later reads, so cp.async.wait_group is the only synchronisation in the
//    loop (warps may have different numbers of steps); a slot is refilled in the step
//    after the one that read it (whose FMAs consumed the values read). The first D - 1
//    steps are issued before pdl_wait: W is written by no kernel.
//  * x is staged once per block, chunk c at xs + c MV_WR_XS: 16-byte aligned chunks, a
//    lane reading its chunk as 8 16-byte loads, 8 lanes of consecutive chunks on 8
//    different 16-byte bank groups (9 c mod 8 = c mod 8).
// Shared memory (select.rs: mv_wr_shared_bytes): x (k / 32 chunks of MV_WR_XS floats),
// then the quant ring [warp][D][NU][F::QBYTES / 16][32] x 16 bytes, then (WR_SCALE) the
// scale ring [warp][D][NU][32] x 4 bytes.
// BF16 (the same statements; why its bits are matvec_bf16_r<R>'s): the row kernel's lane l
// loads chunk c = l, l + 32, ... of a row with HalfFmt::ldc (4 16-byte loads: words 4v ..
// 4v + 3 of L.w from bytes 16v .. 16v + 15 of the chunk), adds `acc += HalfFmt::dotc(L, xc,
// 1)` (one fresh fma chain over values 0 .. 31: lo then hi half of each word) with xc the
// staged, normalised x of the chunk, then warp_sum and mv_store. Here lane l copies the
// same 64 bytes of chunk 32 u + l into its ring slot (piece v at (unit QV + v) 32 + l),
// mv_wr_ld puts piece v into L.w[4v .. 4v + 3] as ldc does, x comes from the same staging
// statements (mv_inv_rms, norm4, the values exact copies), and the accumulation,
// reduction and epilogue are the same statements in the same order: the same operands in
// the same order through the same f32 operations, so the same bits.
// S > 1 (the segmented entry points, plain products only): the rows are those of S
// matrices `sg` of one format and k (own weights, rows, bias and y each; no residual) on the
// same x, and the row groups of the grid are the concatenation of the segments' groups:
// segment s's ceil(rows_s / R) groups, then the next segment's (each segment's row count
// padded to a multiple of R, so that a group never holds rows of two matrices). A group's
// rows are streamed, summed and stored exactly as in a launch of its matrix alone (the same
// statements; rows past the end of their segment load its last row again and store
// nothing), so every row gets the bits of its own launch. S == 1 ignores `sg`: w, rows,
// bias and y are the matrix, as before.
// ROPE (S == 3, one token: matvec_<fmt>_seg3rope_wr_r<R>_d<D>): the segmented launch on q,
// k and v whose epilogue is rope_epi.cuh's mv_rope_store (rope_kv's RoPE of q and k and
// the KV-cache store of k and v, with its bits) instead of mv_store; `rp` its arguments.
#pragma once
#include "matvec/rope_epi.cuh"
// Unit u's chunk of this lane from its ring (the bytes this lane copied there): the QV
// 16-byte pieces in order into the words of `F::Ld` as F::ldc loads them (piece v: words
// 4v .. 4v + 3), and WR_SCALE the f16 scale, the half of its 4-byte word that the parity of
// chunk c selects.
template <class F>
__device__ __forceinline__ void mv_wr_ld(typename F::Ld& L, const uint4* ringq, const u32* rings,
                                         int u, int lane, int c) {
    constexpr int QV = F::QBYTES / 16;
    if constexpr (F::WR_SCALE) {
#pragma unroll
        for (int v = 0; v < QV; v++) u4w(ringq[(u * QV + v) * 32 + lane], L.q + 4 * v);
        L.d = f16_to_f32((u16)(rings[u * 32 + lane] >> (16 * (c & 1))));
    } else {
#pragma unroll
        for (int v = 0; v < QV; v++) u4w(ringq[(u * QV + v) * 32 + lane], L.w + 4 * v);
    }
}
template <int S>
struct MvWrSegs {
    const u8* w[S];
    const float* bias[S];
    float* y[S];
    int rows[S];
};
// The compute loop of matvec_wr_body for NT > 1 tokens (its comment), after the prologue
// (the first D - 1 steps issued, pdl_wait): `issue(slot)` issues the next step's loads into
// a slot of this warp's ring (ringq / rings: the warp's quant and scale rings). Per step:
// the units' chunks from the ring once (as the one-token loop reads them), then token by
// token (live tokens only: a block-uniform branch) the chunk's 32 x values, 16-byte loads
// from global memory, normalised as the staging normalises them, and the one-token
// statement `acc[t][n] += F::dotc(L[n], xr, 1)` per unit.
template <class F, int R, int D, bool GLU, int NT, class Issue>
__device__ __forceinline__ void matvec_wrt_steps(const float* __restrict__ x,
                                                 const float* __restrict__ bias, const float* res,
                                                 float* y, int rows, int k, int act,
                                                 const float* __restrict__ nw, float eps,
                                                 float w_off, int ntok, int nsteps, int spg,
                                                 int gw, int gstride, const uint4* ringq,
                                                 const u32* rings, double* red, Issue& issue) {
    constexpr int NU = GLU ? 2 * R : R;
    const int lane = threadIdx.x & 31;
    // The inverse RMS of each live token, one block reduction each (block-uniform: every
    // thread calls it, as matvec_body_tb does).
    float inv[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) {
        inv[t] = 1.f;
        if (nw != 0 && t < ntok) inv[t] = mv_inv_rms(x + (u64)t * k, k, eps, red);
    }
    float acc[NT][NU];
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int n = 0; n < NU; n++) acc[t][n] = 0.f;
    int cu = 0, cg = gw, slot = 0;  // the step computed: chunk round cu of group cg, its slot
    for (int st = 0; st < nsteps; st++) {
        if (st + D - 1 < nsteps) issue(slot == 0 ? D - 1 : slot - 1);
        gt_commit();
        gt_wait<D - 1>();  // step st's loads have landed
        const int c = 32 * cu + lane;
        typename F::Ld L[NU];
#pragma unroll
        for (int n = 0; n < NU; n++) mv_wr_ld<F>(L[n], ringq, rings, slot * NU + n, lane, c);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t < ntok) {
                const float4* xc = (const float4*)(x + (u64)t * k + ((u64)c << 5));
                const float4* gc = (const float4*)(nw + ((u64)c << 5));
                float xr[32];
#pragma unroll
                for (int v = 0; v < 8; v++) {
                    float4 a = __ldg(xc + v);
                    if (nw != 0) a = norm4(a, inv[t], __ldg(gc + v), w_off);
                    xr[4 * v] = a.x;
                    xr[4 * v + 1] = a.y;
                    xr[4 * v + 2] = a.z;
                    xr[4 * v + 3] = a.w;
                }
#pragma unroll
                for (int n = 0; n < NU; n++) acc[t][n] += F::dotc(L[n], xr, 1);
            }
        }
        slot = slot == D - 1 ? 0 : slot + 1;
        if (++cu == spg) {  // the group's rows are complete
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t < ntok) {
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        const float s = warp_sum(acc[t][r]);
                        const float s2 = GLU ? warp_sum(acc[t][GLU ? R + r : r]) : 0.f;
                        const int row = cg * R + r;
                        if (lane == 0 && row < rows)
                            mv_store<GLU>(y, (u64)t * rows + row, row, s, s2, act, bias, res);
                    }
                }
#pragma unroll
                for (int n = 0; n < NU; n++) acc[t][n] = 0.f;
            }
            cu = 0;
            cg += gstride;
        }
    }
}

// NT > 1 (the multi-token entry points matvec_<fmt>[_glu]_wrt<NT>_r<R>_d<D>, plain and
// gate + up products, S == 1): `ntok` (1 .. NT) token vectors per launch, x[t] at x + t k,
// y[t] (and res[t]) at t rows, as matvec_body_tb indexes them. The weights are streamed
// exactly as for one token (each byte read once per launch); per step a lane takes its
// units' chunks from the ring once and, for each live token t < ntok, adds
// `F::dotc(L, xr_t, 1)` to acc[t][n], with xr_t token t's 32 values of the chunk: the
// statement of the one-token kernel per (token, unit), chunks in the same order, so each
// (token, row) gets the one-token bits. x is NOT staged in shared memory (NT k floats do
// not fit beside the ring: 64.5 KB per token at k = 14336 with the MV_WR_XS padding): a
// lane reads its chunk of each token from global memory (16-byte loads through L1, where
// the block's warps share it), normalised on the fly by norm4 with the token's
// mv_inv_rms (the same statements as the staging, so the same values); the shared memory
// is the ring alone (select.rs: mv_wrt_shared_bytes).
template <class F, int R, int D, bool GLU, int S = 1, int NT = 1, bool ROPE = false>
__device__ __forceinline__ void matvec_wr_body(const u8* __restrict__ w, const u8* __restrict__ w2,
                                               const float* __restrict__ x,
                                               const float* __restrict__ bias, const float* res,
                                               float* y, int rows, int k, int act,
                                               const float* __restrict__ nw, float eps,
                                               float w_off, const MvWrSegs<S>& sg,
                                               int ntok = 1, const MvRope* rp = 0) {
    constexpr int NU = GLU ? 2 * R : R;  // units per row group: R rows of w (then of w2)
    constexpr int QV = F::QBYTES / 16;   // 16-byte pieces of a chunk's quants
    static_assert(D >= 2 && F::QBYTES % 16 == 0 && MV_WR_XS % 4 == 0, "ring and layout");
    static_assert(S >= 1 && (S == 1 || !GLU), "segments: plain products only");
    static_assert(NT >= 1 && (NT == 1 || S == 1), "several tokens: one matrix (pair) only");
    static_assert(!ROPE || (S == 3 && NT == 1 && !GLU), "rope epilogue: q, k, v, one token");
    __shared__ double red[MV_WARPS];
    extern __shared__ uint4 mv_wr_sh[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nb = k >> 5;    // chunks per row
    const int spg = nb >> 5;  // steps per row group
    const u64 plane1 = (u64)rows * nb * F::QBYTES;  // byte offset of the scale plane
    float* xs = (float*)mv_wr_sh;
    // NT > 1: no staged x, the ring at the start of the shared memory.
    uint4* ringq = mv_wr_sh + (NT == 1 ? (u64)nb * (MV_WR_XS / 4) : 0);
    u32* rings = (u32*)(ringq + MV_WARPS * D * NU * QV * 32) + warp * (D * NU * 32);
    ringq += warp * (D * NU * QV * 32);
    const u32 sq = gt_smem(ringq) + lane * 16, ss = gt_smem(rings) + lane * 4;

    // S > 1: g0[s], the first group of segment s (the groups of the segments before it).
    int g0[S];
    int ngroups;
    if constexpr (S == 1) {
        g0[0] = 0;
        ngroups = (rows + R - 1) / R;
    } else {
        ngroups = 0;
#pragma unroll
        for (int s = 0; s < S; s++) {
            g0[s] = ngroups;
            ngroups += (sg.rows[s] + R - 1) / R;
        }
    }
    const int gw = (int)blockIdx.x * MV_WARPS + warp, gstride = (int)gridDim.x * MV_WARPS;
    const int nsteps = gw < ngroups ? ((ngroups - 1 - gw) / gstride + 1) * spg : 0;

    // The load cursor: the next step to issue is chunk round iu of row group ig. qa / sa
    // hold this lane's global addresses of chunk `lane` of each unit's row (its quants, the
    // word holding its scale), set per group; round iu is 32 iu chunks further.
    int iu = 0, ig = gw;
    const u8* qa[NU];
    const u8* sa[NU];
    auto seek = [&]() {
        if constexpr (S == 1) {
#pragma unroll
            for (int n = 0; n < NU; n++) {
                // Rows past the end load row rows - 1 again and store nothing.
                const u64 bi = (u64)min(ig * R + n % R, rows - 1) * nb + lane;  // nb is even
                const u8* base = n < R ? w : w2;
                qa[n] = base + bi * F::QBYTES;
                sa[n] = base + plane1 + (bi & ~1ull) * 2;
            }
        } else {
            // The segment of group ig (past the last group: the last segment), its group
            // index inside the segment, and its matrix.
            const u8* base = sg.w[0];
            int srows = sg.rows[0], lg = ig;
#pragma unroll
            for (int s = 1; s < S; s++)
                if (ig >= g0[s]) {
                    base = sg.w[s];
                    srows = sg.rows[s];
                    lg = ig - g0[s];
                }
            const u64 splane1 = (u64)srows * nb * F::QBYTES;
#pragma unroll
            for (int n = 0; n < NU; n++) {
                // Rows past the end of the segment load its row srows - 1 again and store
                // nothing.
                const u64 bi = (u64)min(lg * R + n, srows - 1) * nb + lane;  // nb is even
                qa[n] = base + bi * F::QBYTES;
                sa[n] = base + splane1 + (bi & ~1ull) * 2;
            }
        }
    };
    auto issue = [&](int slot) {
#pragma unroll
        for (int n = 0; n < NU; n++) {
            const u32 u = (u32)(slot * NU + n);
#pragma unroll
            for (int v = 0; v < QV; v++)
                gt_cp16(sq + (u * QV + v) * 32 * 16, qa[n] + (u64)iu * (32 * F::QBYTES) + 16 * v);
            if constexpr (F::WR_SCALE) gt_cp4(ss + u * 32 * 4, sa[n] + (u64)iu * 64);
        }
        if (++iu == spg) {
            iu = 0;
            ig += gstride;
            seek();
        }
    };
    seek();
#pragma unroll
    for (int p = 0; p < D - 1; p++) {
        if (p < nsteps) issue(p);
        gt_commit();
    }
    // Programmatic dependent launch (common.cuh): the loads above read only W; x, nw, bias,
    // res and y are touched after the wait.
    pdl_wait();
    pdl_trigger();
    if constexpr (NT > 1) {
        matvec_wrt_steps<F, R, D, GLU, NT>(x, bias, res, y, rows, k, act, nw, eps, w_off, ntok,
                                           nsteps, spg, gw, gstride, ringq, rings, red, issue);
        return;
    }
    // ROPE: the token's position (written by the kernels before: read after the wait).
    const int pi = ROPE ? rp->pos[0] : 0;
    const float inv = nw != 0 ? mv_inv_rms(x, k, eps, red) : 1.f;
    const float4* xv = (const float4*)x;
    for (int e = threadIdx.x; e < nb * 8; e += MV_WARPS * 32) {
        float4 a = xv[e];
        if (nw != 0) a = norm4(a, inv, ((const float4*)nw)[e], w_off);
        *(float4*)(xs + (e >> 3) * MV_WR_XS + (e & 7) * 4) = a;
    }
    __syncthreads();

    float acc[NU];
#pragma unroll
    for (int n = 0; n < NU; n++) acc[n] = 0.f;
    int cu = 0, cg = gw, slot = 0;  // the step computed: chunk round cu of group cg, its slot
    for (int t = 0; t < nsteps; t++) {
        if (t + D - 1 < nsteps) issue(slot == 0 ? D - 1 : slot - 1);
        gt_commit();
        gt_wait<D - 1>();  // step t's loads have landed
        const int c = 32 * cu + lane;
        float xr[32];
        const float4* xc = (const float4*)(xs + c * MV_WR_XS);
#pragma unroll
        for (int v = 0; v < 8; v++) {
            const float4 a = xc[v];
            xr[4 * v] = a.x;
            xr[4 * v + 1] = a.y;
            xr[4 * v + 2] = a.z;
            xr[4 * v + 3] = a.w;
        }
#pragma unroll
        for (int n = 0; n < NU; n++) {
            typename F::Ld L;
            mv_wr_ld<F>(L, ringq, rings, slot * NU + n, lane, c);
            acc[n] += F::dotc(L, xr, 1);
        }
        slot = slot == D - 1 ? 0 : slot + 1;
        if (++cu == spg) {  // the group's rows are complete
            if constexpr (S == 1) {
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const float s = warp_sum(acc[r]);
                    const float s2 = GLU ? warp_sum(acc[GLU ? R + r : r]) : 0.f;
                    const int row = cg * R + r;
                    if (lane == 0 && row < rows)
                        mv_store<GLU>(y, (u64)row, row, s, s2, act, bias, res);
                }
            } else {
                // Group cg's segment: its output, bias and rows; the row inside it.
                float* sy = sg.y[0];
                const float* sbias = sg.bias[0];
                int srows = sg.rows[0], lg = cg, seg = 0;
#pragma unroll
                for (int s = 1; s < S; s++)
                    if (cg >= g0[s]) {
                        sy = sg.y[s];
                        sbias = sg.bias[s];
                        srows = sg.rows[s];
                        lg = cg - g0[s];
                        seg = s;
                    }
                if constexpr (ROPE) {
                    float sum[R];
#pragma unroll
                    for (int r = 0; r < R; r++) sum[r] = warp_sum(acc[r]);
                    mv_rope_store<R>(*rp, pi, seg, sy, sbias, srows, lg, sum);
                } else {
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        const float s = warp_sum(acc[r]);
                        const int row = lg * R + r;
                        if (lane == 0 && row < srows)
                            mv_store<false>(sy, (u64)row, row, s, 0.f, 0, sbias, 0);
                    }
                }
            }
#pragma unroll
            for (int n = 0; n < NU; n++) acc[n] = 0.f;
            cu = 0;
            cg += gstride;
        }
    }
}
