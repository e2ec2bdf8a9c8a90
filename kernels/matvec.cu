// matvec.cu — y[t] = W x[t] (+ bias) for a weight matrix in any supported format.
//
// W is `rows` rows of `k` values in the format's device layout (common/formats.cuh: planar
// for Q4_0 / Q8_0 / Q6_K, GGUF block layout otherwise). x holds `ntok` f32 vectors of
// length k (ntok <= MV_MAX_TOK), y holds `ntok` f32 vectors of length `rows`.
//
// Entry points matvec_<fmt>_r<R> (R = 1, 2, 4): MV_WARPS warps per block, each warp owns R
// consecutive rows. For each token the block stages x in shared memory, transposed by
// chunk (element 32c + i at i*(T+1) + c for a tile of T <= MV_TILE chunks, so that the 32
// lanes reading element i of 32 consecutive chunks hit 32 banks); a warp then reads each
// x value once for its R rows, and its loads of W are 16 bytes wide and contiguous across
// the lanes. Arithmetic of one row (the exactness contract): lane l takes the chunks
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

template <class F, int R>
__device__ __forceinline__ void matvec_body(const u8* __restrict__ w, u64 row_bytes,
                                            const float* __restrict__ x,
                                            const float* __restrict__ bias,
                                            float* __restrict__ y, int rows, int k, int ntok) {
    extern __shared__ float xs_sh[];
    const int lane = threadIdx.x & 31;
    const int row0 = (blockIdx.x * MV_WARPS + (threadIdx.x >> 5)) * R;
    const int nchunks = k >> 5;
    const int tile = nchunks < MV_TILE ? nchunks : MV_TILE;
    const int xst = tile + 1;
    const WMat m = {w, row_bytes, (u64)rows, (u64)(k / F::ELEMS)};
    // Rows past the end compute row rows-1 again (no guard between the loads) and write
    // nothing.
    u64 rr[R];
#pragma unroll
    for (int r = 0; r < R; r++) rr[r] = (u64)min(row0 + r, rows - 1);
    for (int t = 0; t < ntok; t++) {
        const float* xt = x + (u64)t * k;
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; r++) acc[r] = 0.f;
        for (int c0 = 0; c0 < nchunks; c0 += tile) {
            const int tc = min(tile, nchunks - c0);
            __syncthreads();
            const float4* xp = (const float4*)(xt + ((u64)c0 << 5));
            for (int e = threadIdx.x; e < tc * 8; e += MV_WARPS * 32) {
                const float4 a = xp[e];
                const int cc = e >> 3, i = (e & 7) * 4;
                xs_sh[i * xst + cc] = a.x;
                xs_sh[(i + 1) * xst + cc] = a.y;
                xs_sh[(i + 2) * xst + cc] = a.z;
                xs_sh[(i + 3) * xst + cc] = a.w;
            }
            __syncthreads();
#pragma unroll 2
            for (int cc = lane; cc < tc; cc += 32) {
#pragma unroll
                for (int r = 0; r < R; r++)
                    acc[r] += F::dot(m, rr[r], c0 + cc, xs_sh + cc, xst);
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float s = warp_sum(acc[r]);
            const int row = row0 + r;
            if (lane == 0 && row < rows)
                y[(u64)t * rows + row] = bias != 0 ? s + bias[row] : s;
        }
    }
}

#define ASSAY_MATVEC_R(name, F, R)                                                          \
    extern "C" __global__ void __launch_bounds__(MV_WARPS * 32)                           \
        matvec_##name##_r##R(const u8* __restrict__ w, u64 row_bytes,                     \
                             const float* __restrict__ x, const float* __restrict__ bias, \
                             float* __restrict__ y, int rows, int k, int ntok) {          \
        matvec_body<F, R>(w, row_bytes, x, bias, y, rows, k, ntok);                       \
    }
#define ASSAY_MATVEC(name, F)   \
    ASSAY_MATVEC_R(name, F, 1) \
    ASSAY_MATVEC_R(name, F, 2) \
    ASSAY_MATVEC_R(name, F, 4)

ASSAY_FOR_EACH_FORMAT(ASSAY_MATVEC)
