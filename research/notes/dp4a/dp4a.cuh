// dp4a.cuh — the dp4a matvec kernels and the activation quantisation (device code only;
// research, not engine code). Built by nvcc with -Ikernels (common/common.cuh: warp_sum,
// warp_max, silu, f16_to_f32).
//
// Arithmetic (dp4a_core.h, ref.h row_sum: the CPU reference follows it bit for bit):
//  * x is quantised per block of 32 values (dp_quant_kernel; ref.h quantize): 32 int8,
//    an f32 scale dx, the sum sx of the quants.
//  * weight block c of a row against token t's activation block c: isum = DpQ::idot(...)
//    (an exact int32 dp4a chain), then acc = fma((f32) isum, dw * dx, acc) (dp_acc).
//  * per row: lane l of the row's warp takes blocks c = l, l + 32, ... < k / 32 in
//    increasing order (acc from 0), the 32 lane sums go through warp_sum (a fixed
//    butterfly); epilogue: GLU __fmul_rn(silu(gate), up), LIN s (+ res).
// Nothing depends on the number of tokens in the launch (each (token, row) has its own
// accumulator and the same statements), on R, on the unroll U or ring depth D, on the grid
// (a warp computes whole rows; work items are dealt grid-stride), or on which rows share
// the launch: batch and grid invariant by construction, and both designs give the same
// bits.
//
// Layouts: weights as formats.cuh's planar Q4_0 / Q8_0 (plane 0: QB quant bytes per block,
// row-major; plane 1: the f16 scales); xq: token t's block c at xq + t k + 32 c (32 int8,
// element order); xds[t nb + c] = {f32 bits of dx, sx}.
#pragma once
#include "common/common.cuh"
#include "dp4a_core.h"
#include "dp_args.h"

#ifndef DP_WARPS
#define DP_WARPS 8
#endif

// ------------------------------------------------------------------------- quantisation

// One warp per activation block (token t, block c = b mod nb, b = t nb + c), lane j takes
// element j: amax by warp_max (exact), d = amax / 127, q = rint(x / d) clamped to +-127
// (0 when d == 0), the sum by an integer butterfly (exact). Grid-stride over the blocks.
// (A template only so that several units can include this header: instantiated once.)
template <int WARPS>
__global__ void __launch_bounds__(WARPS * 32)
    dp_quant_kernel(const float* __restrict__ x, int nblocks, signed char* __restrict__ xq,
                    int2* __restrict__ xds) {
    const int lane = threadIdx.x & 31;
    for (int b = (int)blockIdx.x * WARPS + (int)(threadIdx.x >> 5); b < nblocks;
         b += (int)gridDim.x * WARPS) {
        const float v = x[(u64)b * 32 + lane];
        const float amax = warp_max(fabsf(v));
        const float d = __fdiv_rn(amax, 127.f);
        int q = d == 0.f ? 0 : __float2int_rn(__fdiv_rn(v, d));
        q = max(-127, min(127, q));
        int s = q;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        xq[(u64)b * 32 + lane] = (signed char)q;
        if (lane == 0) xds[b] = make_int2(__float_as_int(d), s);
    }
}

// ------------------------------------------------------------------------- shared pieces

// The activation block c of token t as 8 words, its scale and sum (global memory through
// L1: every warp of a block reads the same x).
struct DpXb {
    int w[8];
    float d;
    int s;
};
__device__ __forceinline__ void dp_ldx(const signed char* __restrict__ xq,
                                       const int2* __restrict__ xds, int k, int nb, int t, int c,
                                       DpXb& X) {
    const int4* p = (const int4*)(xq + (u64)t * k + ((u64)c << 5));
    const int4 a = __ldg(p), b = __ldg(p + 1);
    X.w[0] = a.x; X.w[1] = a.y; X.w[2] = a.z; X.w[3] = a.w;
    X.w[4] = b.x; X.w[5] = b.y; X.w[6] = b.z; X.w[7] = b.w;
    const int2 ds = __ldg(xds + (u64)t * nb + c);
    X.d = __int_as_float(ds.x);
    X.s = ds.y;
}

// A loaded weight block: its quant words and f32 scale.
template <class Q>
struct DpWb {
    u32 q[Q::QW];
    float d;
};

// The epilogue of token t, row `row` (the engine's mv_store without bias).
template <bool GLU>
__device__ __forceinline__ void dp_store(float* y, const float* res, int rows, int t, int row,
                                         float s, float s2) {
    const u64 o = (u64)t * rows + row;
    if (GLU) {
        y[o] = __fmul_rn(silu(s), s2);
    } else {
        y[o] = res != nullptr ? s + res[o] : s;
    }
}

// The end of a row group: the fixed butterfly of every (token, unit) sum and the stores.
template <int R, int NT, bool GLU>
__device__ __forceinline__ void dp_finish(float (&acc)[NT][GLU ? 2 * R : R], int g, int rows,
                                          int ntok, float* y, const float* res, int lane) {
#pragma unroll
    for (int t = 0; t < NT; t++) {
        if (t < ntok) {
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float s = warp_sum(acc[t][r]);
                const float s2 = GLU ? warp_sum(acc[t][GLU ? R + r : r]) : 0.f;
                const int row = g * R + r;
                if (lane == 0 && row < rows) dp_store<GLU>(y, res, rows, t, row, s, s2);
            }
        }
    }
}

// ------------------------------------------------------------------------- design wa

// dp_wa: warp rows, direct loads. A warp owns row groups of R rows (of both matrices for
// GLU: NU = 2R units), groups dealt grid-stride over all warps of the grid. Lane l: blocks
// l, l + 32, ...; rounds of U blocks per lane: first every load of the round (U x NU
// weight blocks, 16-byte loads contiguous across the lanes, the block index clamped to the
// row so that no load sits behind a guard), then block by block in order (guarded) and
// token by token: the activation block (2 x 16 bytes + 8 from L1), then per unit one idot
// (8 dp4a) and one dp_acc. The weights are read once per launch whatever ntok (<= NT); each
// activation block read serves the NU units of the group (x traffic ~ 1 / NU).
// MINB: resident blocks per SM the kernel is compiled for (2: at most 128 registers; 1: up to
// 255, for the many accumulators of R = 4 gate+up / R = 8 rows at 8 tokens).
template <class Q, int R, int NT, bool GLU, int U, int MINB = 2>
__global__ void __launch_bounds__(DP_WARPS * 32, MINB) dp_wa_kernel(DpArgs a) {
    constexpr int NU = GLU ? 2 * R : R;
    constexpr int QV = Q::QB / 16;
    const int lane = threadIdx.x & 31;
    const int nb = a.k >> 5;
    const int ngroups = (a.rows + R - 1) / R;
    const u64 plane1 = (u64)a.rows * nb * Q::QB;
    const u8* wa = (const u8*)a.wa;
    const u8* wb = GLU ? (const u8*)a.wb : wa;
    const int ntok = a.ntok;
    for (int g = (int)blockIdx.x * DP_WARPS + (int)(threadIdx.x >> 5); g < ngroups;
         g += (int)gridDim.x * DP_WARPS) {
        u64 rb[NU];  // first block index of each unit's row (rows past the end: the last row)
        const u8* base[NU];
#pragma unroll
        for (int n = 0; n < NU; n++) {
            rb[n] = (u64)min(g * R + n % R, a.rows - 1) * nb;
            base[n] = n < R ? wa : wb;
        }
        float acc[NT][NU];
#pragma unroll
        for (int t = 0; t < NT; t++)
#pragma unroll
            for (int n = 0; n < NU; n++) acc[t][n] = 0.f;
#pragma unroll 1
        for (int c0 = 0; c0 < nb; c0 += 32 * U) {
            DpWb<Q> W[U][NU];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = min(c0 + lane + 32 * u, nb - 1);
#pragma unroll
                for (int n = 0; n < NU; n++) {
                    const u64 bi = rb[n] + c;
                    const uint4* p = (const uint4*)(base[n] + bi * Q::QB);
#pragma unroll
                    for (int v = 0; v < QV; v++) {
                        const uint4 w4 = p[v];
                        W[u][n].q[4 * v] = w4.x;
                        W[u][n].q[4 * v + 1] = w4.y;
                        W[u][n].q[4 * v + 2] = w4.z;
                        W[u][n].q[4 * v + 3] = w4.w;
                    }
                    W[u][n].d = f16_to_f32(*(const u16*)(base[n] + plane1 + bi * 2));
                }
            }
            __syncwarp();  // keep the loads of the round ahead of its arithmetic
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int c = c0 + lane + 32 * u;
                if (c < nb) {
#pragma unroll
                    for (int t = 0; t < NT; t++) {
                        if (t < ntok) {
                            DpXb X;
                            dp_ldx(a.xq, a.xds, a.k, nb, t, c, X);
#pragma unroll
                            for (int n = 0; n < NU; n++)
                                acc[t][n] = dp_acc(acc[t][n], Q::idot(W[u][n].q, X.w, X.s),
                                                   W[u][n].d, X.d);
                        }
                    }
                }
            }
        }
        dp_finish<R, NT, GLU>(acc, g, a.rows, ntok, a.y, a.res, lane);
    }
}

// ------------------------------------------------------------------------- design wr

__device__ __forceinline__ u32 dp_smem(const void* p) { return (u32)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void dp_cp16(u32 dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void dp_cp4(u32 dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void dp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void dp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Shared memory of a dp_wr launch: per warp a ring of D slots x NU units x 32 lanes x
// (QB quant bytes + the 4-byte word holding the block's f16 scale).
template <class Q, int R, bool GLU, int D>
__host__ __device__ constexpr size_t dp_wr_smem() {
    return (size_t)DP_WARPS * D * (GLU ? 2 * R : R) * 32 * (Q::QB + 4);
}

// dp_wr: dp_wa's work split and arithmetic, the weights streamed global -> shared by
// cp.async through a ring of D slots per lane (the engine's streamed matvec,
// kernels/matvec/streamed.cuh), in a persistent grid. Step u of a group is block 32 u + l
// of each unit for lane l (spg = ceil(nb / 32) steps per group; past the row's end the copy
// repeats block nb - 1 and the step computes nothing); a warp's steps over all its groups
// form one stream, issued D - 1 steps ahead across group boundaries. Each lane copies
// exactly the bytes it later reads, so cp.async.wait_group is the only synchronisation; a
// slot is refilled in the step after the one that read it. x as in dp_wa (global, L1).
template <class Q, int R, int NT, bool GLU, int D>
__global__ void __launch_bounds__(DP_WARPS * 32, 2) dp_wr_kernel(DpArgs a) {
    constexpr int NU = GLU ? 2 * R : R;
    constexpr int QV = Q::QB / 16;
    static_assert(D >= 2, "ring depth");
    extern __shared__ uint4 dp_sh[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int nb = a.k >> 5;
    const int spg = (nb + 31) >> 5;
    const int ngroups = (a.rows + R - 1) / R;
    const u64 plane1 = (u64)a.rows * nb * Q::QB;
    const u8* wa = (const u8*)a.wa;
    const u8* wb = GLU ? (const u8*)a.wb : wa;
    const int ntok = a.ntok;
    uint4* ringq = dp_sh + warp * (D * NU * QV * 32);
    const u32* rings = (const u32*)(dp_sh + DP_WARPS * D * NU * QV * 32) + warp * (D * NU * 32);
    const u32 sq = dp_smem(ringq) + lane * 16, ss = dp_smem(rings) + lane * 4;
    const int gw = (int)blockIdx.x * DP_WARPS + warp, gstride = (int)gridDim.x * DP_WARPS;
    const int nsteps = gw < ngroups ? ((ngroups - 1 - gw) / gstride + 1) * spg : 0;

    // The issue cursor: step iu of group ig; rbi[n] = first block index of unit n's row.
    int iu = 0, ig = gw;
    u64 rbi[NU];
    auto seek = [&]() {
#pragma unroll
        for (int n = 0; n < NU; n++) rbi[n] = (u64)min(ig * R + n % R, a.rows - 1) * nb;
    };
    auto issue = [&](int slot) {
        const int c = min(32 * iu + lane, nb - 1);
#pragma unroll
        for (int n = 0; n < NU; n++) {
            const u8* base = n < R ? wa : wb;
            const u64 bi = rbi[n] + c;
            const u32 u = (u32)(slot * NU + n);
#pragma unroll
            for (int v = 0; v < QV; v++) dp_cp16(sq + (u * QV + v) * 32 * 16, base + bi * Q::QB + 16 * v);
            dp_cp4(ss + u * 32 * 4, base + plane1 + (bi & ~1ull) * 2);
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
        dp_commit();
    }

    float acc[NT][NU];
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int n = 0; n < NU; n++) acc[t][n] = 0.f;
    int cu = 0, cg = gw, slot = 0;  // the step computed: step cu of group cg, its ring slot
    u64 cbi[NU];                    // first block index of each unit's row in group cg
#pragma unroll
    for (int n = 0; n < NU; n++) cbi[n] = (u64)min(cg * R + n % R, a.rows - 1) * nb;
    for (int st = 0; st < nsteps; st++) {
        if (st + D - 1 < nsteps) issue(slot == 0 ? D - 1 : slot - 1);
        dp_commit();
        dp_wait<D - 1>();  // step st's copies have landed
        const int c = 32 * cu + lane;
        if (c < nb) {
            DpWb<Q> W[NU];
#pragma unroll
            for (int n = 0; n < NU; n++) {
                const int u = slot * NU + n;
#pragma unroll
                for (int v = 0; v < QV; v++) {
                    const uint4 w4 = ringq[(u * QV + v) * 32 + lane];
                    W[n].q[4 * v] = w4.x;
                    W[n].q[4 * v + 1] = w4.y;
                    W[n].q[4 * v + 2] = w4.z;
                    W[n].q[4 * v + 3] = w4.w;
                }
                const u64 bi = cbi[n] + c;
                W[n].d = f16_to_f32((u16)(rings[u * 32 + lane] >> (16 * (u32)(bi & 1))));
            }
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t < ntok) {
                    DpXb X;
                    dp_ldx(a.xq, a.xds, a.k, nb, t, c, X);
#pragma unroll
                    for (int n = 0; n < NU; n++)
                        acc[t][n] = dp_acc(acc[t][n], Q::idot(W[n].q, X.w, X.s), W[n].d, X.d);
                }
            }
        }
        slot = slot == D - 1 ? 0 : slot + 1;
        if (++cu == spg) {  // the group's rows are complete
            dp_finish<R, NT, GLU>(acc, cg, a.rows, ntok, a.y, a.res, lane);
#pragma unroll
            for (int t = 0; t < NT; t++)
#pragma unroll
                for (int n = 0; n < NU; n++) acc[t][n] = 0.f;
            cu = 0;
            cg += gstride;
#pragma unroll
            for (int n = 0; n < NU; n++) cbi[n] = (u64)min(cg * R + n % R, a.rows - 1) * nb;
        }
    }
}
