// gemmt.cu — the tiled prompt pass: y[t] = W x[t] for a whole prompt pass (hundreds of
// token rows) as a dense tensor-core GEMM over shared-memory tiles.
//
// Two kinds of launches per matrix product (plus gemm.cu's staging of x):
// 1. `gemmt_dq_<fmt>`: a quant weight matrix decoded into a scratch matrix of f16, row-major
//    `[rows][k]`, one thread per 32-value chunk (formats.cuh's `chunkm`, so every format the
//    engine reads has it). Each value d * (q - o) is exact in f32 and rounded once to f16's
//    11 bits (BF16: exact in f16's normal range). F16 weights, BF16 weights with x in two
//    parts (as bf16) and Q4_0 / Q8_0 / BF16 with x in one part (decoded to f16 in the tile
//    loop: the scratch decode's bits) skip it, unless the `prefill` gate's planted fault
//    asks for the decode (`bf` = 1 writes bf16).
// 2. `gemmt_<kind>[_glu]_m<BM>_p<P>`: a block of 8 warps computes a tile of BM (128 or
//    64) tokens x GT_BN = 128 weight rows over the whole k, in steps of GT_BK = 32 values
//    staged into shared memory by cp.async (GT_ST stages in flight), A = x (token rows,
//    ldmatrix), B = the 16-bit weights (ldmatrix), `mma.sync.m16n8k16` f32 accumulate.
//    x is multiplied as P parts (gemm_stage_x's hi and lo f16 halves, or the first two bf16
//    parts of gemm_stage_x_bf16): per k16 step the part-0 MMA then the part-1 MMA.
//    The plain kernel's weight rows are up to three segments, each a matrix of its own with
//    its own output and bias (q, k and v of an attention block in one launch); the gate +
//    up kernel's tile takes 64 rows of gate and the same 64 rows of up. Epilogues as
//    gemm.cu: x's power-of-two scale undone, + bias, + residual (res may be y; one segment
//    only), or act(gate) * up.
// 3. / 4. On sm_90a with x in one part, the same GEMM on the warpgroup MMA:
//    `gemmt_<kind>[_glu]_w<BN>` (section 3: two warpgroups, cp.async, any 16-bit or
//    loop-decoded kind) and `gemmt_<kind>[_glu]_tm<TN>` (section 4: warp-specialised, TMA
//    loads through host-encoded tensor maps, W x^T with the Q4_0 / Q8_0 decode and the BF16
//    conversion in registers; the host takes it where its shape rules hold,
//    select::gemmt_tm, else section 3).
// Invariance: each output (token t, row r) is one f32 accumulator fed by the MMAs of the
// k16 steps in k order (parts in order within a step): its bits depend only on x[t], W's
// row r and k; never on n, on the tile shape (BM), on the tile the token lands in, on the
// segments launched with it, or on the other tokens (an MMA output depends only on its row
// of A and its column of B). So a prompt chunked any way gives the same bits (the
// `chunking` gate). They are not the bits of gemm.cu's pass nor of the row path: the
// `prefill` gate and kernel-check's tolerance bound the difference.
// Sections 3 and 4 keep this argument: one accumulator per output, the same f16 values (x
// as staged; Q4_0 d * (q - 8) and Q8_0 d * q rounded once, BF16 rounded to f16), the k16
// steps in k order; section 4 multiplies W x^T, whose k16 step gives the bits of x W^T
// (products exact, the step's sum symmetric in A and B: measured on the H200,
// research/notes/wgmma2; kernel-check compares bit for bit).
#include "common/common.cuh"
#include "common/formats.cuh"
#include "common/mma.cuh"
#include "common/tc.cuh"

#define GT_BN 128
#define GT_BK 32
#define GT_ST 3
// Shared-memory row stride in 16-bit values: 32 + 8 of padding (80 bytes), so the 8 rows
// an ldmatrix phase reads start on 8 distinct 16-byte bank groups.
#define GT_LD 40
#define GT_GLU_G 64

// ---------------------------------------------------------------------------------------
// 1. Decoding: thread i takes chunk i % (k / 32) of row i / (k / 32).
template <class F>
__device__ __forceinline__ void gemmt_dq_body(const u8* __restrict__ w, u64 row_bytes, int rows,
                                              int k, u16* __restrict__ out, int fault, int bf) {
    const int cpr = k >> 5;
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (u64)rows * cpr) return;
    const int row = (int)(i / cpr), c = (int)(i % cpr);
    const WMat m = {w, row_bytes, (u64)rows, (u64)(k / F::ELEMS)};
    float v[32];
    F::chunkm(m, (u64)row, c, v);
    // The `prefill` gate's planted fault: every row's chunk 0 contributes nothing.
    if (fault != 0 && c == 0) {
#pragma unroll
        for (int j = 0; j < 32; j++) v[j] = 0.f;
    }
    uint4* o = (uint4*)(out + (u64)row * k + ((u64)c << 5));
#pragma unroll
    for (int q = 0; q < 4; q++) {
        u32 p[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const float a = v[8 * q + 2 * j], b = v[8 * q + 2 * j + 1];
            const u32 lo = bf ? f32_to_bf16(a) : f32_to_f16(a);
            const u32 hi = bf ? f32_to_bf16(b) : f32_to_f16(b);
            p[j] = lo | (hi << 16);
        }
        o[q] = make_uint4(p[0], p[1], p[2], p[3]);
    }
}

#define GEMMT_DQ(name, F)                                                                   \
    extern "C" __global__ void __launch_bounds__(256)                                       \
        gemmt_dq_##name(const u8* __restrict__ w, u64 row_bytes, int rows, int k,           \
                        u16* __restrict__ out, int fault, int bf) {                         \
        gemmt_dq_body<F>(w, row_bytes, rows, k, out, fault, bf);                            \
    }
ASSAY_FOR_EACH_FORMAT(GEMMT_DQ)

// Eight f16 values d * (q - o), in order, from two words of four byte-sized quants each
// (bytes under 0x64; `off` the f16x2 of 1024 + o, as gm_pair takes it): q - o exact in
// f16, then one f16 multiply by the scale pair dd (round to nearest).
__device__ __forceinline__ uint4 gt_dq8(u32 w0, u32 w1, u32 off, u32 dd) {
    return make_uint4(gt_hmul2(gm_pair(w0, 0x4140u, off), dd),
                      gt_hmul2(gm_pair(w0, 0x4342u, off), dd),
                      gt_hmul2(gm_pair(w1, 0x4140u, off), dd),
                      gt_hmul2(gm_pair(w1, 0x4342u, off), dd));
}

// Two bf16 values (a word, low value first) as two f16 values, each rounded to nearest even.
__device__ __forceinline__ u32 gt_bf2h(u32 w) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;"
        : "=r"(r)
        : "f"(__uint_as_float(w & 0xFFFF0000u)), "f"(__uint_as_float(w << 16)));
    return r;
}

// ---------------------------------------------------------------------------------------
// 2. The GEMM.
template <int KIND>
__device__ __forceinline__ void gt_mma(float* c, const u32* a, u32 b0, u32 b1) {
    if (KIND == 2) {
        gm_mma_bf16(c, a[0], a[1], a[2], a[3], b0, b1);
    } else {
        gm_mma(c, a[0], a[1], a[2], a[3], b0, b1);
    }
}

// The plain kernel's segments: weight rows [0, r0) are w0's (output y0, bias b0), the next
// r1 are w1's, the next r2 are w2's; each w a row-major [rows][k] matrix of 16-bit floats
// (WF = 0) or a planar Q4_0 (WF = 1) / Q8_0 (WF = 2) matrix of r rows, each y a
// token-major [n][r] matrix.
struct GtSegs {
    const void* w[3];
    float* y[3];
    const float* b[3];
    int r[3];
};

// Weight row of tile row r of a block (column block `by`, first row col0): its matrix, its
// row there, the matrix's rows; false outside. Gate + up: tile rows 0..g-1 are gate rows
// by * g + r, g..2g-1 the same rows of up.
template <bool GLU>
__device__ __forceinline__ bool gt_wrow(const GtSegs& sg, int g, int by, int col0, int r,
                                        const u8*& base, int& row, int& mrows) {
    if (GLU) {
        row = by * g + (r % g);
        base = (const u8*)(r < g ? sg.w[0] : sg.w[1]);
        mrows = sg.r[0];
        return row < sg.r[0];
    }
    row = col0 + r;
    const bool ok = row < sg.r[0] + sg.r[1] + sg.r[2];
    if (row < sg.r[0]) {
        base = (const u8*)sg.w[0];
        mrows = sg.r[0];
    } else if (row < sg.r[0] + sg.r[1]) {
        base = (const u8*)sg.w[1];
        row -= sg.r[0];
        mrows = sg.r[1];
    } else {
        base = (const u8*)sg.w[2];
        row -= sg.r[0] + sg.r[1];
        mrows = sg.r[2];
    }
    return ok;
}

// Output row `row` (< the segments' rows in all) of a plain launch: its segment's output,
// bias and row count, the row within the segment.
struct GtOut {
    float* y;
    const float* bias;
    float bv;
    int rows;
    int row;
};
__device__ __forceinline__ GtOut gt_out(const GtSegs& sg, int row) {
    int si = 0;
    if (row >= sg.r[0]) {
        row -= sg.r[0];
        si = 1;
        if (row >= sg.r[1]) {
            row -= sg.r[1];
            si = 2;
        }
    }
    const float* bias = sg.b[si];
    return {sg.y[si], bias, bias != 0 ? bias[row] : 0.f, sg.r[si], row};
}
// One output of token tok: x's power-of-two scale undone (1 unless the row reached 2^15),
// + bias, + residual.
__device__ __forceinline__ void gt_store(const GtOut& o, int tok, float acc,
                                         const float* __restrict__ xsc, const float* res) {
    const u64 oi = (u64)tok * o.rows + o.row;
    const float s = __fmul_rn(acc, xsc[tok]);
    float v = o.bias != 0 ? s + o.bv : s;
    if (res != 0) v = v + res[oi];
    o.y[oi] = v;
}
// Gate + up: the block's tile outputs in shared memory (cs, [bm][cld] floats: columns
// 0..g-1 gate rows by * g + c, g..2g-1 the same rows of up), paired into act(gate) * up.
__device__ __forceinline__ void gt_glu_store(const float* cs, int cld, int g, int bm, int tok0,
                                             int by, const GtSegs& sg,
                                             const float* __restrict__ xsc, int n, int act) {
    const int rows = sg.r[0];
    float* y = sg.y[0];
    for (int o = threadIdx.x; o < bm * g; o += blockDim.x) {
        const int r = o / g, c = o % g;
        const int tok = tok0 + r, row = by * g + c;
        if (tok >= n || row >= rows) continue;
        const float u = xsc[tok];
        const float s = __fmul_rn(cs[r * cld + c], u);
        const float s2 = __fmul_rn(cs[r * cld + g + c], u);
        y[(u64)tok * rows + row] = __fmul_rn(act == 0 ? silu(s) : gelu_tanh(s), s2);
    }
}

// Shared memory: GT_ST stages of [P][BM][GT_LD] x parts then [GT_BN][GT_LD] weights; the
// gate + up epilogue reuses it as [BM][GT_BN + 4] floats.
template <int KIND, int WF, int P, int BM, bool GLU>
__device__ __forceinline__ void gemmt_body(const u16* __restrict__ xh, const u16* __restrict__ xl,
                                           const float* __restrict__ xsc, const GtSegs& sg,
                                           const float* res, int k, int n, int act) {
    extern __shared__ uint4 gt_raw[];
    u16* sm = (u16*)gt_raw;
    constexpr int MT = BM / 32;  // m16 tiles per warp: the warp tile is BM / 2 tokens x 32 rows
    constexpr int XS = BM * GT_LD;
    constexpr int STAGE = (P * BM + GT_BN) * GT_LD;
    constexpr int XL = (P * BM * 4) / 256;  // 16-byte x pieces per thread per stage
    constexpr int WL = (GT_BN * 4) / 256;   // 16-byte weight pieces per thread per stage
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 2, wn = warp & 3;
    const int g = lane >> 2, t = lane & 3;
    const int tok0 = blockIdx.x * BM, col0 = blockIdx.y * GT_BN;
    const int kt_n = k / GT_BK;
    const int rtot = sg.r[0] + sg.r[1] + sg.r[2];

    // Each thread's global sources (k offset 0) and shared destinations, fixed over k.
    const u16* xsrc[XL];
    bool xok[XL];
    int xdst[XL];
#pragma unroll
    for (int i = 0; i < XL; i++) {
        const int q = tid + 256 * i;
        const int p = q / (BM * 4), r = (q / 4) % BM, seg = q & 3;
        const int tok = tok0 + r;
        xok[i] = tok < n;
        xsrc[i] = (p == 0 ? xh : xl) + (xok[i] ? (u64)tok * k + 8 * seg : 0);
        xdst[i] = p * XS + r * GT_LD + 8 * seg;
    }
    // Weight row of tile row r: its matrix, its row there, the matrix's rows; ok = inside.
    auto wrow = [&](int r, const u8*& base, int& row, int& mrows) -> bool {
        return gt_wrow<GLU>(sg, GT_GLU_G, blockIdx.y, col0, r, base, row, mrows);
    };
    const u16* wsrc[WL];
    bool wok[WL];
    int wdst[WL];
    if (WF == 0) {
#pragma unroll
        for (int i = 0; i < WL; i++) {
            const int q = tid + 256 * i;
            const int r = q >> 2, seg = q & 3;
            const u8* base;
            int row, mrows;
            wok[i] = wrow(r, base, row, mrows);
            wsrc[i] = wok[i] ? (const u16*)base + (u64)row * k + 8 * seg : (const u16*)sg.w[0];
            wdst[i] = P * XS + r * GT_LD + 8 * seg;
        }
    }
    // Weights decoded in the loop (WF = 1 Q4_0, 2 Q8_0, 3 BF16): thread (r = tid / 2,
    // hf = tid % 2) takes half of row r's 32 values per k step (BK = 32: one quant block),
    // loaded into registers one stage ahead of its use and stored to shared memory as f16.
    constexpr int QB = WF == 3 ? 64 : WF == 2 ? 32 : 16;  // bytes of a row per k step
    const u8* fq = 0;
    const u8* fs = 0;
    bool fok = false;
    int fdst = 0;
    if (WF != 0) {
        const int r = tid >> 1, hf = tid & 1;
        const u8* base;
        int row, mrows;
        fok = wrow(r, base, row, mrows);
        const u64 nb = (u64)(k >> 5);
        if (fok) {
            fq = base + (u64)row * nb * QB + hf * (QB / 2);
            fs = base + (u64)mrows * nb * QB + (u64)row * nb * 2;
        }
        fdst = P * XS + r * GT_LD + (WF == 1 ? 8 : 16) * hf;
    }
    uint4 fqv = make_uint4(0u, 0u, 0u, 0u), fqw = fqv;
    u32 fsv = 0u;
    auto fetch = [&](int kt) {
        if (!fok) return;
        if (WF == 3) {
            fqv = *(const uint4*)(fq + (u64)kt * QB);
            fqw = *(const uint4*)(fq + (u64)kt * QB + 16);
            return;
        }
        if (WF == 2) {
            fqv = *(const uint4*)(fq + (u64)kt * QB);
        } else {
            const uint2 v = *(const uint2*)(fq + (u64)kt * QB);
            fqv.x = v.x;
            fqv.y = v.y;
        }
        fsv = *(const u16*)(fs + (u64)kt * 2);
    };
    // Quants: d * (q - o) per value, q - o exact in f16 (gm_pair), times d rounded once
    // (f16 multiply, round to nearest: the bits of gemmt_dq's f32 product rounded to f16).
    // BF16: each value rounded to f16 (round to nearest even: gemmt_dq's bits; exact in
    // f16's normal range).
    auto put = [&](int s) {
        u16* dst = sm + s * STAGE + fdst;
        uint4 a = make_uint4(0u, 0u, 0u, 0u), b = a;
        if (fok) {
            const u32 dd = fsv | (fsv << 16);
            if (WF == 3) {
                a = make_uint4(gt_bf2h(fqv.x), gt_bf2h(fqv.y), gt_bf2h(fqv.z), gt_bf2h(fqv.w));
                b = make_uint4(gt_bf2h(fqw.x), gt_bf2h(fqw.y), gt_bf2h(fqw.z), gt_bf2h(fqw.w));
            } else if (WF == 2) {
                a = gt_dq8(fqv.x ^ 0x80808080u, fqv.y ^ 0x80808080u, 0x64806480u, dd);
                b = gt_dq8(fqv.z ^ 0x80808080u, fqv.w ^ 0x80808080u, 0x64806480u, dd);
            } else {
                // Bytes 8 hf .. 8 hf + 7: low nibbles values 8 hf + j, high ones 16 + 8 hf + j.
                a = gt_dq8(fqv.x & 0x0F0F0F0Fu, fqv.y & 0x0F0F0F0Fu, 0x64086408u, dd);
                b = gt_dq8((fqv.x >> 4) & 0x0F0F0F0Fu, (fqv.y >> 4) & 0x0F0F0F0Fu, 0x64086408u, dd);
            }
        }
        *(uint4*)dst = a;
        *(uint4*)(dst + (WF == 1 ? 16 : 8)) = b;
    };

    // Loads of k step kt into stage s.
    auto load = [&](int s, int kt) {
        const u32 st = gt_smem(sm + s * STAGE);
        const int kk = kt * GT_BK;
#pragma unroll
        for (int i = 0; i < XL; i++)
            gt_cp16(st + 2 * xdst[i], xsrc[i] + (xok[i] ? kk : 0), xok[i]);
        if (WF == 0) {
#pragma unroll
            for (int i = 0; i < WL; i++)
                gt_cp16(st + 2 * wdst[i], wsrc[i] + (wok[i] ? kk : 0), wok[i]);
        }
    };

    float acc[MT][4][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;

#pragma unroll
    for (int s = 0; s < GT_ST - 1; s++) {
        if (s < kt_n) {
            load(s, s);
            if (WF != 0) {
                fetch(s);
                put(s);
            }
        }
        gt_commit();
    }
    // ldmatrix lane addresses (in 16-bit values, relative to a stage's x part / weights):
    // A (x, m16 x k16): matrix j = lane / 8 holds rows (j & 1) * 8 .. + 7, k (j >> 1) * 8;
    // B (weights, two n8 x k16 tiles): matrix j holds rows (j >> 1) * 8 .. + 7, k (j & 1) * 8.
    const int a_off =
        (wm * (BM / 2) + (lane & 7) + ((lane >> 3) & 1) * 8) * GT_LD + (lane >> 4) * 8;
    const int b_off = (wn * 32 + (lane & 7) + (lane >> 4) * 8) * GT_LD + ((lane >> 3) & 1) * 8;
#pragma unroll 1
    for (int kt = 0; kt < kt_n; kt++) {
        gt_wait<GT_ST - 2>();
        __syncthreads();
        const bool ahead = kt + GT_ST - 1 < kt_n;
        if (ahead) {
            load((kt + GT_ST - 1) % GT_ST, kt + GT_ST - 1);
            if (WF != 0) fetch(kt + GT_ST - 1);
        }
        gt_commit();
        const u16* st = sm + (kt % GT_ST) * STAGE;
        const u32 xa = gt_smem(st) + 2 * a_off;
        const u32 wa = gt_smem(st + P * XS) + 2 * b_off;
#pragma unroll
        for (int ks = 0; ks < GT_BK / 16; ks++) {
            u32 b[4][2];
#pragma unroll
            for (int np = 0; np < 2; np++)
                gt_ldm4(wa + 2 * (np * 16 * GT_LD + ks * 16), b[2 * np][0], b[2 * np][1],
                        b[2 * np + 1][0], b[2 * np + 1][1]);
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                u32 a[P][4];
#pragma unroll
                for (int p = 0; p < P; p++)
                    gt_ldm4(xa + 2 * (p * XS + mt * 16 * GT_LD + ks * 16), a[p][0], a[p][1],
                            a[p][2], a[p][3]);
#pragma unroll
                for (int nt = 0; nt < 4; nt++)
#pragma unroll
                    for (int p = 0; p < P; p++) gt_mma<KIND>(acc[mt][nt], a[p], b[nt][0], b[nt][1]);
            }
        }
        // The stage read in the previous step (every warp is past the barrier above).
        if (WF != 0 && ahead) put((kt + GT_ST - 1) % GT_ST);
    }
    gt_wait<0>();
    // C fragment of (mt, nt): [0..1] token wm * BM / 2 + 16 mt + g, rows wn * 32 + 8 nt + 2t,
    // +1; [2..3] the token 8 further.
    if (!GLU) {
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int row = col0 + wn * 32 + 8 * nt + 2 * t + e;
                if (row >= rtot) continue;
                const GtOut o = gt_out(sg, row);
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int tok = tok0 + wm * (BM / 2) + 16 * mt + g + 8 * h;
                        if (tok < n) gt_store(o, tok, acc[mt][nt][2 * h + e], xsc, res);
                    }
            }
        return;
    }
    // Gate + up: columns 0..63 of the tile are gate rows blockIdx.y * 64 + c, 64..127 the
    // same rows of up; pair them through shared memory.
    __syncthreads();
    float* cs = (float*)gt_raw;
    constexpr int CLD = GT_BN + 4;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < 4; nt++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                float* d =
                    cs + (wm * (BM / 2) + 16 * mt + g + 8 * h) * CLD + wn * 32 + 8 * nt + 2 * t;
                d[0] = acc[mt][nt][2 * h];
                d[1] = acc[mt][nt][2 * h + 1];
            }
    __syncthreads();
    gt_glu_store(cs, CLD, GT_GLU_G, BM, tok0, blockIdx.y, sg, xsc, n, act);
}

#define GEMMT_ENTRY(name, KIND, WF, BM, P)                                                    \
    extern "C" __global__ void __launch_bounds__(256, 2) gemmt_##name##_m##BM##_p##P(        \
        const u16* __restrict__ xh, const u16* __restrict__ xl, const float* __restrict__ xsc, \
        const void* w0, const void* w1, const void* w2, float* y0, float* y1, float* y2,      \
        const float* b0, const float* b1, const float* b2, int r0, int r1, int r2,            \
        const float* res, int k, int n) {                                                     \
        const GtSegs sg = {{w0, w1, w2}, {y0, y1, y2}, {b0, b1, b2}, {r0, r1, r2}};           \
        gemmt_body<KIND, WF, P, BM, false>(xh, xl, xsc, sg, res, k, n, 0);                    \
    }                                                                                         \
    extern "C" __global__ void __launch_bounds__(256, 2) gemmt_##name##_glu_m##BM##_p##P(    \
        const u16* __restrict__ xh, const u16* __restrict__ xl, const float* __restrict__ xsc, \
        const void* wg, const void* wu, float* y, int rows, int k, int n, int act) {          \
        const GtSegs sg = {{wg, wu, wg}, {y, y, y}, {0, 0, 0}, {rows, 0, 0}};                 \
        gemmt_body<KIND, WF, P, BM, true>(xh, xl, xsc, sg, 0, k, n, act);                     \
    }
GEMMT_ENTRY(f16, 1, 0, 128, 1)
GEMMT_ENTRY(f16, 1, 0, 128, 2)
GEMMT_ENTRY(f16, 1, 0, 64, 1)
GEMMT_ENTRY(f16, 1, 0, 64, 2)
// BF16 in place, x in two bf16 parts (the bf16 MMA).
GEMMT_ENTRY(bf16, 2, 0, 128, 2)
GEMMT_ENTRY(bf16, 2, 0, 64, 2)
// Decoded to f16 in the tile loop, x in one f16 part: Q4_0, Q8_0, BF16.
GEMMT_ENTRY(q4_0, 1, 1, 128, 1)
GEMMT_ENTRY(q4_0, 1, 1, 64, 1)
GEMMT_ENTRY(q8_0, 1, 2, 128, 1)
GEMMT_ENTRY(q8_0, 1, 2, 64, 1)
GEMMT_ENTRY(bf16, 1, 3, 128, 1)
GEMMT_ENTRY(bf16, 1, 3, 64, 1)

#include "gemmt/wgmma.cuh"

#include "gemmt/tma.cuh"
