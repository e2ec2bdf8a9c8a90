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

// ---------------------------------------------------------------------------------------
// 3. The same GEMM on sm_90a's warpgroup MMA (x in one f16 part): `gemmt_<kind>[_glu]_w<BN>`.
// A block of two warpgroups computes GW_BM = 128 tokens x BN (128 or 256) weight rows over
// the whole k, in steps of GW_BK = 64 values: x by cp.async, the weights by cp.async (f16
// in place) or decoded in the loop (Q4_0 / Q8_0 / BF16: the tile-loop values of section 2),
// into shared memory with the 128-byte swizzle (16-byte chunk c of row r at
// r * 128 + ((c ^ (r & 7)) * 16), stages on 1024-byte boundaries); each warpgroup then issues
// four wgmma.m64n<BN>k16 over its 64 tokens, both operands read through matrix descriptors.
// The global loads and decode of the stage GW_ST - 1 ahead run while those MMAs do.
// Invariance and bits: one f32 accumulator per output fed by the k16 steps in k order, the
// bits of section 2's mma.sync (measured equal on every 8B product shape,
// research/notes/wgmma/README.md; kernel-check compares the two kernels bit for bit).
#define GW_BM 128
#define GW_BK 64
#define GW_ST 4

// Matrix descriptor of a K-major tile of 128-byte rows with the 128-byte swizzle: start
// address, leading offset 16 bytes (unused by this swizzle), 1024 bytes between groups of
// 8 rows, swizzle mode 1 (bits 62-63).
__device__ __forceinline__ u64 gw_desc(u32 addr) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)(16 >> 4) << 16) | ((u64)(1024 >> 4) << 32) |
           (1ull << 62);
}

// The accumulators as asm operands: 4, 16 and 64 of them from d[i].
#define GW_F4(i) "+f"(d[i]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3])
#define GW_F16(i) GW_F4(i), GW_F4((i) + 4), GW_F4((i) + 8), GW_F4((i) + 12)
#define GW_F64(i) GW_F16(i), GW_F16((i) + 16), GW_F16((i) + 32), GW_F16((i) + 48)
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GW_WGMMA 1
#endif

// d (64 x BN f32, this thread's BN / 2) += A (64 x 16, descriptor da) * B (BN x 16, db)^T.
template <int BN>
__device__ __forceinline__ void gw_mma(float* d, u64 da, u64 db) {
#ifdef GW_WGMMA
    if constexpr (BN == 256) {
        asm volatile(
            "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, 1, 1, 1, 0, 0;"
            : GW_F64(0), GW_F64(64)
            : "l"(da), "l"(db));
    } else {
        asm volatile(
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, 1, 1, 1, 0, 0;"
            : GW_F64(0)
            : "l"(da), "l"(db));
    }
#else
    __trap();
#endif
}

__device__ __forceinline__ void gw_fence() {
#ifdef GW_WGMMA
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void gw_commit() {
#ifdef GW_WGMMA
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void gw_wait0() {
#ifdef GW_WGMMA
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#endif
}
// Shared-memory writes of the generic proxy (stores, cp.async) made visible to the MMAs,
// which read through the async proxy.
__device__ __forceinline__ void gw_proxy_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// Swizzled byte offset of 16-byte chunk c (of 8) of tile row r.
__device__ __forceinline__ u32 gw_sw(int r, int c) { return (u32)(r * 128 + ((c ^ (r & 7)) << 4)); }

// Shared memory: GW_ST stages of [GW_BM] x rows then [BN] weight rows, 128 bytes each; the
// gate + up epilogue reuses it as [GW_BM][BN + 4] floats.
template <int WF, int BN, bool GLU>
__device__ __forceinline__ void gemmw_body(const u16* __restrict__ xh, const float* __restrict__ xsc,
                                           const GtSegs& sg, const float* res, int k, int n,
                                           int act) {
    extern __shared__ uint4 gt_raw[];
    constexpr int XB = GW_BM * GW_BK * 2, STB = XB + BN * GW_BK * 2;
    constexpr int G = BN / 2;  // gate + up: rows of gate, then the same rows of up, per tile
    constexpr int UNITS = BN * 2 / 256;  // (row, block of 32 values) per thread per stage
    const u32 raw0 = gt_smem(gt_raw);
    const u32 base0 = (raw0 + 1023u) & ~1023u;
    u8* const sbase = (u8*)gt_raw + (base0 - raw0);
    const int tid = threadIdx.x, wg = tid >> 7;
    const int tok0 = blockIdx.x * GW_BM, col0 = blockIdx.y * BN;
    const int kt_n = k / GW_BK;
    const int rtot = sg.r[0] + sg.r[1] + sg.r[2];
    auto wrow = [&](int r, const u8*& base, int& row, int& mrows) -> bool {
        return gt_wrow<GLU>(sg, G, blockIdx.y, col0, r, base, row, mrows);
    };
    // x and in-place f16 weights: chunk (r, c) of stage s by cp.async.
    auto load = [&](int s, int kt) {
        const u32 st = base0 + s * STB;
        const int kk = kt * GW_BK;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int q = tid + 256 * i, r = q >> 3, c = q & 7;
            const int tok = tok0 + r;
            gt_cp16(st + gw_sw(r, c), xh + (tok < n ? (u64)tok * k + kk + 8 * c : 0), tok < n);
        }
        if (WF == 0) {
#pragma unroll
            for (int i = 0; i < BN / 32; i++) {
                const int q = tid + 256 * i, r = q >> 3, c = q & 7;
                const u8* base;
                int row, mrows;
                const bool ok = wrow(r, base, row, mrows);
                const u16* src = ok ? (const u16*)base + (u64)row * k + kk + 8 * c : (const u16*)sg.w[0];
                gt_cp16(st + XB + gw_sw(r, c), src, ok);
            }
        }
    };
    // Weights decoded in the loop: unit u = (tile row u / 2, block u % 2 of the stage's 64
    // values). `fetch` loads a stage's raw blocks into registers one step before `put`
    // decodes them into shared memory as f16 (section 2's pattern: the loads' latency runs
    // under a whole step of MMAs).
    uint4 raw[UNITS][4];
    u32 rsc[UNITS];
    auto fetch = [&](int kt) {
        if (WF == 0) return;
        const u64 nb = (u64)(k >> 5);
#pragma unroll
        for (int i = 0; i < UNITS; i++) {
            const int u = tid + 256 * i, r = u >> 1, b = u & 1;
            const u8* base;
            int row, mrows;
            const bool ok = wrow(r, base, row, mrows);
            const u64 blk = (u64)kt * 2 + b;  // block index along the row
#pragma unroll
            for (int c = 0; c < 4; c++) raw[i][c] = make_uint4(0u, 0u, 0u, 0u);
            rsc[i] = 0u;
            if (!ok) continue;
            if (WF == 3) {
                const uint4* p = (const uint4*)(base + ((u64)row * k + blk * 32) * 2);
#pragma unroll
                for (int c = 0; c < 4; c++) raw[i][c] = p[c];
            } else {
                constexpr int QB = WF == 2 ? 32 : 16;
                const uint4* q = (const uint4*)(base + ((u64)row * nb + blk) * QB);
                raw[i][0] = q[0];
                if (WF == 2) raw[i][1] = q[1];
                rsc[i] = *(const u16*)(base + (u64)mrows * nb * QB + ((u64)row * nb + blk) * 2);
            }
        }
    };
    auto put = [&](int s) {
        if (WF == 0) return;
        u8* const st = sbase + s * STB + XB;
#pragma unroll
        for (int i = 0; i < UNITS; i++) {
            const int u = tid + 256 * i, r = u >> 1, b = u & 1;
            const u32 dd = rsc[i] | (rsc[i] << 16);
            uint4 v[4];
            if (WF == 3) {
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const uint4 w = raw[i][c];
                    v[c] = make_uint4(gt_bf2h(w.x), gt_bf2h(w.y), gt_bf2h(w.z), gt_bf2h(w.w));
                }
            } else if (WF == 2) {
                const uint4 a = raw[i][0], c2 = raw[i][1];
                v[0] = gt_dq8(a.x ^ 0x80808080u, a.y ^ 0x80808080u, 0x64806480u, dd);
                v[1] = gt_dq8(a.z ^ 0x80808080u, a.w ^ 0x80808080u, 0x64806480u, dd);
                v[2] = gt_dq8(c2.x ^ 0x80808080u, c2.y ^ 0x80808080u, 0x64806480u, dd);
                v[3] = gt_dq8(c2.z ^ 0x80808080u, c2.w ^ 0x80808080u, 0x64806480u, dd);
            } else {
                // Byte j: low nibble value j, high nibble value 16 + j.
                const uint4 a = raw[i][0];
                v[0] = gt_dq8(a.x & 0x0F0F0F0Fu, a.y & 0x0F0F0F0Fu, 0x64086408u, dd);
                v[1] = gt_dq8(a.z & 0x0F0F0F0Fu, a.w & 0x0F0F0F0Fu, 0x64086408u, dd);
                v[2] = gt_dq8((a.x >> 4) & 0x0F0F0F0Fu, (a.y >> 4) & 0x0F0F0F0Fu, 0x64086408u, dd);
                v[3] = gt_dq8((a.z >> 4) & 0x0F0F0F0Fu, (a.w >> 4) & 0x0F0F0F0Fu, 0x64086408u, dd);
            }
            // A row outside the matrix (zero registers) gives zeros of either sign: its
            // columns are never stored.
#pragma unroll
            for (int c = 0; c < 4; c++) *(uint4*)(st + gw_sw(r, 4 * b + c)) = v[c];
        }
    };

    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; i++) d[i] = 0.f;
#pragma unroll
    for (int s = 0; s < GW_ST - 1; s++) {
        if (s < kt_n) {
            load(s, s);
            fetch(s);
            put(s);
        }
        gt_commit();
    }
    if (GW_ST - 1 < kt_n) fetch(GW_ST - 1);
#pragma unroll 1
    for (int kt = 0; kt < kt_n; kt++) {
        gt_wait<GW_ST - 2>();
        gw_proxy_fence();
        __syncthreads();
        const u32 st = base0 + (kt % GW_ST) * STB;
        const u32 xa = st + wg * 64 * 128, wa = st + XB;
        gw_fence();
#pragma unroll
        for (int ks = 0; ks < GW_BK / 16; ks++) {
            gw_mma<BN>(d, gw_desc(xa + ks * 32), gw_desc(wa + ks * 32));
        }
        gw_commit();
        // The stage GW_ST - 1 ahead (read by the MMAs of step kt - 1, which are done): x by
        // cp.async, the weights from the registers fetched one step ago; then the next
        // stage's raw weights into the registers.
        if (kt + GW_ST - 1 < kt_n) {
            load((kt + GW_ST - 1) % GW_ST, kt + GW_ST - 1);
            put((kt + GW_ST - 1) % GW_ST);
        }
        gt_commit();
        if (kt + GW_ST < kt_n) fetch(kt + GW_ST);
        gw_wait0();
    }
    gt_wait<0>();
    // D fragment: warp v of the warpgroup holds tokens 16 v + g and + 8; register 4 j + 2 h
    // + e is tile column 8 j + 2 t + e of token 16 v + g + 8 h.
    const int lane = tid & 31, v = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
    const int trow = wg * 64 + 16 * v + g;  // the token's row in the tile (h = 0)
    if (!GLU) {
#pragma unroll
        for (int j = 0; j < BN / 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int row = col0 + 8 * j + 2 * t + e;
                if (row >= rtot) continue;
                const GtOut o = gt_out(sg, row);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int tok = tok0 + trow + 8 * h;
                    if (tok < n) gt_store(o, tok, d[4 * j + 2 * h + e], xsc, res);
                }
            }
        return;
    }
    // Gate + up: tile columns 0..G-1 are gate rows blockIdx.y * G + c, G..BN-1 the same rows
    // of up; paired through shared memory.
    __syncthreads();
    float* cs = (float*)sbase;
    constexpr int CLD = BN + 4;
#pragma unroll
    for (int j = 0; j < BN / 8; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float* dst = cs + (trow + 8 * h) * CLD + 8 * j + 2 * t;
            dst[0] = d[4 * j + 2 * h];
            dst[1] = d[4 * j + 2 * h + 1];
        }
    __syncthreads();
    gt_glu_store(cs, CLD, G, GW_BM, tok0, blockIdx.y, sg, xsc, n, act);
}

#define GEMMW_ENTRY(name, WF, BN)                                                              \
    extern "C" __global__ void __launch_bounds__(256, 1) gemmt_##name##_w##BN(                 \
        const u16* __restrict__ xh, const u16* __restrict__ xl, const float* __restrict__ xsc, \
        const void* w0, const void* w1, const void* w2, float* y0, float* y1, float* y2,      \
        const float* b0, const float* b1, const float* b2, int r0, int r1, int r2,            \
        const float* res, int k, int n) {                                                     \
        const GtSegs sg = {{w0, w1, w2}, {y0, y1, y2}, {b0, b1, b2}, {r0, r1, r2}};           \
        gemmw_body<WF, BN, false>(xh, xsc, sg, res, k, n, 0);                                 \
    }                                                                                         \
    extern "C" __global__ void __launch_bounds__(256, 1) gemmt_##name##_glu_w##BN(             \
        const u16* __restrict__ xh, const u16* __restrict__ xl, const float* __restrict__ xsc, \
        const void* wg, const void* wu, float* y, int rows, int k, int n, int act) {          \
        const GtSegs sg = {{wg, wu, wg}, {y, y, y}, {0, 0, 0}, {rows, 0, 0}};                 \
        gemmw_body<WF, BN, true>(xh, xsc, sg, 0, k, n, act);                                  \
    }
GEMMW_ENTRY(f16, 0, 128)
GEMMW_ENTRY(f16, 0, 256)
GEMMW_ENTRY(q4_0, 1, 128)
GEMMW_ENTRY(q4_0, 1, 256)
GEMMW_ENTRY(q8_0, 2, 128)
GEMMW_ENTRY(q8_0, 2, 256)
GEMMW_ENTRY(bf16, 3, 128)
GEMMW_ENTRY(bf16, 3, 256)

// ---------------------------------------------------------------------------------------
// 4. The same GEMM, warp-specialised with TMA loads (sm_90a, x in one f16 part, F16 weights
// in place or decoded into the scratch, Q4_0 / Q8_0 / BF16 in place):
// `gemmt_<f16|q4_0|q8_0|bf16>[_glu]_tm<TN>`.
// A block of three warpgroups (384 threads) computes GTM_WR = 128 weight rows x TN (128 or
// 256) tokens over the whole k: the hardware multiplies W x^T (weights as A, 64 rows per
// consumer warpgroup; tokens as B), each output still one f32 accumulator of the same k16
// products in k order (the k16 step is symmetric in A and B: measured bit-identical to
// section 3 on every 8B shape, research/notes/wgmma2/README.md; kernel-check compares them).
// Warpgroup 0 is the producer: one thread issues the TMA copies (`cp.async.bulk.tensor`) of
// each stage of GTM_BK = 64 values (x: box 64 x TN tokens, 128-byte swizzle, rows past n
// zero-filled; F16 / BF16 weights: one box of 64 x 64 rows per 64-row half, 128-byte
// swizzle; Q4_0 / Q8_0: the raw planar quants, box 32 (Q4_0) or 64 (Q8_0, 64-byte swizzle)
// bytes x 64 rows, and the 16-byte group of 8 scales holding the stage's pair, box 8 x 64)
// into a ring of ST stages with a `full` mbarrier (expect_tx) and an `empty` one each.
// Warpgroups 1 and 2 consume: wait `full`, issue the stage's wgmmas (F16: A and B from
// shared memory; Q4_0 / Q8_0 / BF16: A built in registers, the register-A form: d * (q - 8)
// and d * q with gt_dq8's bits, bf16 converted by gt_bf2h, each value the one section 3
// stores), commit, `wgmma.wait_group 1`, then release the previous stage.
// No __syncthreads in the main loop; the epilogues are section 2's gt_store / gt_glu_store.
// The tensor maps (GtmMaps) are encoded on the host per launch and passed by value as the
// last, __grid_constant__ parameter. Shape limits (the host checks, else section 3 runs):
// every segment (gate + up: the rows) a multiple of 64 rows (a 64-row half lies in one
// segment), k a multiple of 64 (F16, BF16) or 256 (Q4_0, Q8_0: 16-byte scale-row strides);
// the TMA traps on a box whose innermost coordinate is not a multiple of 16 bytes, which
// every coordinate here is by construction (x, F16 and BF16 64 kt values, quants 32 kt or
// 64 kt bytes, scales 8 (kt / 4) values). No function calls in these kernels (every helper
// is inlined): a call
// anywhere in them makes ptxas serialize the wgmmas (C7510).
#define GTM_BK 64
#define GTM_WR 128
#define GTM_THREADS 384

// The host's CUtensorMap (128 bytes, 64-byte aligned), opaque here.
struct alignas(64) GtmMap {
    u64 v[16];
};
// x ([n][k] f16); per segment (plain: up to three; gate + up: gate, up): the F16 / BF16
// weights or the Q4_0 / Q8_0 quant plane, and the quants' scale plane (F16 / BF16: unused
// copies of w).
struct GtmMaps {
    GtmMap x, w[3], s[3];
};

// A stage: [TN x rows][weights], 128-byte rows of 64 f16 (BF16: bf16) in the 128-byte
// swizzle; Q4_0 / Q8_0 weights raw: 128 rows x QROW quant bytes (32 / 64; Q8_0's in the
// 64-byte swizzle: 16-byte chunk c of row r at r * 64 + ((c ^ ((r >> 1) & 3)) * 16)), then
// 128 rows x 16 bytes of scales (the 8 at 8 (kt / 4), the stage's pair at byte 4 (kt % 4)).
// Stages are multiples of 1024 bytes. The gate + up epilogue reuses the stages as [TN
// tokens][128 + 4] floats. SMEM: dynamic bytes to launch with (+1024 to align);
// select::gemmtm_shared_bytes mirrors it. WF: 0 F16, 1 Q4_0, 2 Q8_0, 3 BF16 (section 3's).
template <int WF, int TN>
struct GtmCfg {
    static constexpr bool QUANT = WF == 1 || WF == 2;
    // Bytes of one weight row per stage in the A plane, and the scales' offset after it.
    static constexpr int QROW = WF == 1 ? 32 : WF == 2 ? 64 : 128;
    static constexpr int SOFF = GTM_WR * QROW;
    static constexpr int XBYTES = TN * 128;
    static constexpr int WBYTES = SOFF + (QUANT ? GTM_WR * 16 : 0);
    static constexpr int STAGE = XBYTES + WBYTES;
    static constexpr int ST0 = 196608 / STAGE;
    static constexpr int ST = ST0 > 8 ? 8 : ST0;
    static constexpr int CLD = GTM_WR + 4;
    static constexpr int EPI = TN * CLD * 4;
    static constexpr int SMEM = (ST * STAGE > EPI ? ST * STAGE : EPI) + 1024;
    // Bytes one stage's TMA copies bring (x, then two 64-row halves of weights / scales).
    static constexpr int TX = XBYTES + WBYTES;
    static_assert(STAGE % 1024 == 0 && SOFF % 1024 == 0, "stages and planes on 1024 bytes");
    static_assert(ST >= 2, "a ring of at least two stages");
    static_assert(SMEM + 16 * 8 <= 227 * 1024, "dynamic + the barriers within the H200's 227 KiB");
    static_assert(TX < (1 << 20), "mbarrier tx-count range");
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GTM_SM90 1
#endif

__device__ __forceinline__ void gtm_bar_init(u32 a, u32 count) {
#ifdef GTM_SM90
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(a), "r"(count) : "memory");
#endif
}
__device__ __forceinline__ void gtm_bar_init_fence() {
#ifdef GTM_SM90
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
// Arrive (release, CTA scope).
__device__ __forceinline__ void gtm_arrive(u32 a) {
#ifdef GTM_SM90
    asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.shared::cta.b64 st, [%0];\n\t}" ::"r"(a)
                 : "memory");
#endif
}
// Arrive and expect `tx` bytes of TMA writes in this phase.
__device__ __forceinline__ void gtm_arrive_tx(u32 a, u32 tx) {
#ifdef GTM_SM90
    asm volatile(
        "{\n\t.reg .b64 st;\n\tmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n\t}" ::"r"(a),
        "r"(tx)
        : "memory");
#endif
}
// Wait (acquire) for the phase of parity `parity` to complete.
__device__ __forceinline__ void gtm_wait(u32 a, u32 parity) {
#ifdef GTM_SM90
    u32 ok = 0;
    while (!ok) {
        asm volatile(
            "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
            "selp.u32 %0, 1, 0, p;\n\t}"
            : "=r"(ok)
            : "r"(a), "r"(parity)
            : "memory");
    }
#endif
}
// A 2D box of a tensor map (innermost coordinate first) into shared memory at dst, its bytes
// completing on the mbarrier at bar. c0 must be a multiple of 16 bytes, dst of 1024.
__device__ __forceinline__ void gtm_tma2d(u32 dst, const GtmMap* map, int c0, int c1, u32 bar) {
#ifdef GTM_SM90
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, "
        "{%2, %3}], [%4];" ::"r"(dst),
        "l"((u64)map), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
#endif
}
__device__ __forceinline__ void gtm_wait1() {
#ifdef GW_WGMMA
    asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
#endif
}
__device__ __forceinline__ u32 gtm_lds32(u32 a) {
    u32 v;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(a));
    return v;
}
__device__ __forceinline__ u32 gtm_prmt(u32 a, u32 b, u32 sel) {
    u32 r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}
// Named barrier over all 384 threads, usable by diverged threads of a warp (barrier.sync
// without .aligned: the producer's thread 0 arrives after its lanes).
__device__ __forceinline__ void gtm_sync_all(int id) {
    asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(GTM_THREADS) : "memory");
}

// d (64 x TN f32) += A (64 x 16 in registers, the m16n8k16 A fragment of each warp's 16
// rows: a0 row g k 2t.., a1 row g + 8, a2 row g k 2t + 8.., a3 row g + 8 k 2t + 8..) * B
// (TN x 16, descriptor db)^T.
template <int TN>
__device__ __forceinline__ void gtm_mma_rs(float* d, u32 a0, u32 a1, u32 a2, u32 a3, u64 db) {
#ifdef GW_WGMMA
    if constexpr (TN == 256) {
        asm volatile(
            "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, 1, 1, 1, 0;"
            : GW_F64(0), GW_F64(64)
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db));
    } else {
        asm volatile(
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, 1, 1, 1, 0;"
            : GW_F64(0)
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db));
    }
#else
    __trap();
#endif
}

// Pins the accumulators (an empty asm reading and writing each): keeps the compiler from
// moving instructions that define them into a wgmma pipeline stage (ptxas would serialize
// the wgmmas, C7515).
template <int N>
__device__ __forceinline__ void gtm_pin(float* d) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}

// Two Q4_0 values of one row as f16 (gt_dq8's bits): bytes 0, 1 (sel 0x4140) or 2, 3
// (0x4342) of w (nibbles isolated), q - 8 exact, times the scale pair dd.
__device__ __forceinline__ u32 gtm_q4pair(u32 w, u32 sel, u32 dd) {
    return gt_hmul2(gm_pair(w, sel, 0x64086408u), dd);
}
// Two Q8_0 values of one row as f16 (gt_dq8's bits with section 3's Q8_0 operands): bytes
// 0, 1 (sel 0x4140) or 2, 3 (0x4342) of w (each q ^ 0x80, i.e. q + 128), q exact, times
// the scale pair dd.
__device__ __forceinline__ u32 gtm_q8pair(u32 w, u32 sel, u32 dd) {
    return gt_hmul2(gm_pair(w, sel, 0x64806480u), dd);
}

template <int WF, int TN, bool GLU>
__device__ __forceinline__ void gemmtm_body(const float* __restrict__ xsc, const GtSegs& sg,
                                            const float* res, int k, int n, int act,
                                            const GtmMaps* maps) {
    using C = GtmCfg<WF, TN>;
    static_assert(WF >= 0 && WF <= 3, "F16, Q4_0, Q8_0 and BF16 weights");
    static_assert(TN == 128 || TN == 256, "tiles of 128 or 256 tokens");
    constexpr int ST = C::ST, STAGE = C::STAGE;
    constexpr bool RAW = C::QUANT;
    extern __shared__ uint4 gtm_dyn[];
    __shared__ u64 gtm_bars[16];
    const u32 raw0 = gt_smem(gtm_dyn);
    const u32 base0 = (raw0 + 1023u) & ~1023u;
    u8* const sbase = (u8*)gtm_dyn + (base0 - raw0);
    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31;
    const int tok0 = blockIdx.x * TN, col0 = blockIdx.y * GTM_WR;
    const int kt_n = k / GTM_BK;
    const int rtot = sg.r[0] + sg.r[1] + sg.r[2];
    const u32 bar0 = gt_smem(gtm_bars);
    auto full = [&](int s) -> u32 { return bar0 + 8u * (u32)s; };
    auto empty = [&](int s) -> u32 { return bar0 + 8u * (u32)(ST + s); };
    if (tid == 0) {
        for (int s = 0; s < ST; s++) {
            gtm_bar_init(full(s), 1u);
            gtm_bar_init(empty(s), 8u);
        }
        gtm_bar_init_fence();
    }
    __syncthreads();

    if (wg == 0) {
        // ------------------------------------------------------------------ producer
        if (tid == 0) {
            // Each 64-row half of the weight tile: its tensor map and first row. Gate + up:
            // gate then up, rows blockIdx.y * 64. Plain: the segment of the half's first row
            // (segments are multiples of 64 rows); a half past every segment loads row 0 of
            // segment 0 (never stored).
            int mi[2], r0[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                if (GLU) {
                    mi[h] = h;
                    r0[h] = blockIdx.y * 64;
                } else {
                    int row = col0 + 64 * h;
                    int m = 0;
                    if (row >= rtot) {
                        row = 0;
                    } else if (row >= sg.r[0]) {
                        row -= sg.r[0];
                        m = 1;
                        if (row >= sg.r[1]) {
                            row -= sg.r[1];
                            m = 2;
                        }
                    }
                    mi[h] = m;
                    r0[h] = row;
                }
            }
            int s = 0;
            u32 ph = 0;
#pragma unroll 1
            for (int kt = 0; kt < kt_n; kt++) {
                if (kt >= ST) gtm_wait(empty(s), ph ^ 1u);
                const u32 st = base0 + (u32)(s * STAGE), fb = full(s);
                gtm_arrive_tx(fb, (u32)C::TX);
                gtm_tma2d(st, &maps->x, kt * GTM_BK, tok0, fb);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    if (RAW) {
                        gtm_tma2d(st + C::XBYTES + h * 64 * C::QROW, &maps->w[mi[h]], kt * C::QROW,
                                  r0[h], fb);
                        gtm_tma2d(st + C::XBYTES + C::SOFF + h * 1024, &maps->s[mi[h]],
                                  (kt >> 2) * 8, r0[h], fb);
                    } else {
                        gtm_tma2d(st + C::XBYTES + h * 8192, &maps->w[mi[h]], kt * GTM_BK, r0[h], fb);
                    }
                }
                if (++s == ST) {
                    s = 0;
                    ph ^= 1u;
                }
            }
        }
        if (GLU) {
            gtm_sync_all(1);
            gtm_sync_all(2);
        }
    } else {
        // ------------------------------------------------------------------ consumers
        const int c = wg - 1, v = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
        float d[TN / 2];
#pragma unroll
        for (int i = 0; i < TN / 2; i++) d[i] = 0.f;
        gtm_pin<TN / 2>(d);
        // Q4_0: this thread's rows of the weight tile, 64 c + 16 v + g and + 8; bytes 2t,
        // 2t + 1, 2t + 8, 2t + 9 of a block (k columns 2t.., 2t + 8.. of both k16 steps: low
        // nibbles the first, high nibbles the second). Q8_0: bytes 2t, 2t + 1, 2t + 8, 2t + 9
        // of the k16 step's 16 (k columns 2t.., 2t + 8..). BF16: values 2t, 2t + 1 (a word) and
        // 2t + 8, 2t + 9 of the step.
        const int ar = c * 64 + 16 * v + g;
        const u32 psel = (t & 1) ? 0x7632u : 0x5410u;
        int s = 0, sp = 0;
        u32 ph = 0;
#pragma unroll 1
        for (int kt = 0; kt < kt_n; kt++) {
            gtm_wait(full(s), ph);  // TMA writes are async-proxy: no proxy fence needed
            const u32 st = base0 + (u32)(s * STAGE);
            if (WF == 1) {
                const u32 qa = st + C::XBYTES, sa = qa + C::SOFF + 4u * (u32)(kt & 3);
                u32 wq[2][2], sc[2];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const u32 rq = qa + (u32)(ar + 8 * h) * 32u + 4u * (u32)(t >> 1);
#pragma unroll
                    for (int b = 0; b < 2; b++)
                        wq[h][b] = gtm_prmt(gtm_lds32(rq + 16 * b), gtm_lds32(rq + 16 * b + 8), psel);
                    sc[h] = gtm_lds32(sa + (u32)(ar + 8 * h) * 16u);
                }
#pragma unroll
                for (int ks = 0; ks < 4; ks++) {
                    const int b = ks >> 1;
                    u32 w[2], dd[2];
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        w[h] = ((ks & 1) ? (wq[h][b] >> 4) : wq[h][b]) & 0x0F0F0F0Fu;
                        dd[h] = gtm_prmt(sc[h], sc[h], b ? 0x3232u : 0x1010u);
                    }
                    const u32 a0 = gtm_q4pair(w[0], 0x4140u, dd[0]);
                    const u32 a1 = gtm_q4pair(w[1], 0x4140u, dd[1]);
                    const u32 a2 = gtm_q4pair(w[0], 0x4342u, dd[0]);
                    const u32 a3 = gtm_q4pair(w[1], 0x4342u, dd[1]);
                    gw_fence();
                    gtm_mma_rs<TN>(d, a0, a1, a2, a3, gw_desc(st + 32 * ks));
                    gw_commit();
                    gtm_wait1();
                    if (ks == 0 && kt > 0 && lane == 0) gtm_arrive(empty(sp));
                }
            } else if (WF == 2 || WF == 3) {
                // Rows ar and ar + 8 (h) of the tile: ar % 8 == g, so the swizzles' row terms
                // are g (128-byte: r & 7) and g >> 1 (64-byte: (r >> 1) & 3) for both.
                const u32 wa = st + C::XBYTES;
                u32 sc[2] = {0u, 0u};
                if (WF == 2) {
#pragma unroll
                    for (int h = 0; h < 2; h++)
                        sc[h] = gtm_lds32(wa + C::SOFF + 4u * (u32)(kt & 3) + (u32)(ar + 8 * h) * 16u);
                }
#pragma unroll
                for (int ks = 0; ks < 4; ks++) {
                    u32 lo[2], hi[2];  // a0 / a1 (k 2t..), a2 / a3 (k 2t + 8..) of rows h
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        if (WF == 2) {
                            // Chunk ks of the row (values 16 ks..), its words t / 2 and t / 2
                            // + 2, then bytes 2t, 2t + 1, 2t + 8, 2t + 9 (psel) as unsigned
                            // q + 128 (section 3's ^ 0x80 per byte).
                            const u32 rq = wa + (u32)(ar + 8 * h) * 64u +
                                           ((u32)(ks ^ (g >> 1)) << 4) + 4u * (u32)(t >> 1);
                            const u32 w = gtm_prmt(gtm_lds32(rq), gtm_lds32(rq + 8), psel) ^
                                          0x80808080u;
                            const u32 dd = gtm_prmt(sc[h], sc[h], (ks >> 1) ? 0x3232u : 0x1010u);
                            lo[h] = gtm_q8pair(w, 0x4140u, dd);
                            hi[h] = gtm_q8pair(w, 0x4342u, dd);
                        } else {
                            // 16-byte chunks 2 ks (values 16 ks..) and 2 ks + 1 of the row,
                            // word t of each.
                            const u32 rb = wa + (u32)(ar + 8 * h) * 128u + 4u * (u32)t;
                            lo[h] = gt_bf2h(gtm_lds32(rb + ((u32)((2 * ks) ^ g) << 4)));
                            hi[h] = gt_bf2h(gtm_lds32(rb + ((u32)((2 * ks + 1) ^ g) << 4)));
                        }
                    }
                    gw_fence();
                    gtm_mma_rs<TN>(d, lo[0], lo[1], hi[0], hi[1], gw_desc(st + 32 * ks));
                    gw_commit();
                    gtm_wait1();
                    if (ks == 0 && kt > 0 && lane == 0) gtm_arrive(empty(sp));
                }
            } else {
                const u32 aa = st + C::XBYTES + c * 8192, bb = st;
                gw_fence();
#pragma unroll
                for (int ks = 0; ks < GTM_BK / 16; ks++)
                    gw_mma<TN>(d, gw_desc(aa + 32 * ks), gw_desc(bb + 32 * ks));
                gw_commit();
                gtm_wait1();
                if (kt > 0 && lane == 0) gtm_arrive(empty(sp));
            }
            sp = s;
            if (++s == ST) {
                s = 0;
                ph ^= 1u;
            }
        }
        gw_wait0();
        gtm_pin<TN / 2>(d);
        // D fragment: warp v holds A (weight) rows 16 v + g (+ 8 h); register 4 j + 2 h + e
        // is B column (token) 8 j + 2 t + e.
        if (!GLU) {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int row = col0 + ar + 8 * h;
                if (row >= rtot) continue;
                const GtOut o = gt_out(sg, row);
#pragma unroll
                for (int j = 0; j < TN / 8; j++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int tok = tok0 + 8 * j + 2 * t + e;
                        if (tok < n) gt_store(o, tok, d[4 * j + 2 * h + e], xsc, res);
                    }
            }
        } else {
            // Gate + up through shared memory: a [TN tokens][CLD] float tile, columns 0..63
            // gate rows blockIdx.y * 64 + col, 64..127 the same rows of up (consumer 1).
            gtm_sync_all(1);  // every consumer's MMAs (which read the stages) are done
            float* cs = (float*)sbase;
            constexpr int CLD = C::CLD;
#pragma unroll
            for (int j = 0; j < TN / 8; j++)
#pragma unroll
                for (int h = 0; h < 2; h++)
#pragma unroll
                    for (int e = 0; e < 2; e++)
                        cs[(8 * j + 2 * t + e) * CLD + ar + 8 * h] = d[4 * j + 2 * h + e];
            gtm_sync_all(2);
        }
    }
    if (GLU) gt_glu_store((const float*)sbase, C::CLD, 64, TN, tok0, blockIdx.y, sg, xsc, n, act);
}

// Grid: (ceil(n / TN), ceil(tile rows / 128)) (gate + up: tile rows = 2 rows), 384 threads,
// GtmCfg::SMEM dynamic bytes. Section 3's arguments (xh, xl unused: x comes through the
// map), then the tensor maps by value.
#define GEMMTM_ENTRY(name, WF, TN)                                                              \
    extern "C" __global__ void __launch_bounds__(GTM_THREADS, 1) gemmt_##name##_tm##TN(         \
        const u16* __restrict__ xh, const u16* __restrict__ xl, const float* __restrict__ xsc, \
        const void* w0, const void* w1, const void* w2, float* y0, float* y1, float* y2,      \
        const float* b0, const float* b1, const float* b2, int r0, int r1, int r2,            \
        const float* res, int k, int n, const __grid_constant__ GtmMaps maps) {               \
        const GtSegs sg = {{w0, w1, w2}, {y0, y1, y2}, {b0, b1, b2}, {r0, r1, r2}};           \
        gemmtm_body<WF, TN, false>(xsc, sg, res, k, n, 0, &maps);                             \
    }                                                                                         \
    extern "C" __global__ void __launch_bounds__(GTM_THREADS, 1) gemmt_##name##_glu_tm##TN(     \
        const u16* __restrict__ xh, const u16* __restrict__ xl, const float* __restrict__ xsc, \
        const void* wg, const void* wu, float* y, int rows, int k, int n, int act,            \
        const __grid_constant__ GtmMaps maps) {                                               \
        const GtSegs sg = {{wg, wu, wg}, {y, y, y}, {0, 0, 0}, {rows, 0, 0}};                 \
        gemmtm_body<WF, TN, true>(xsc, sg, 0, k, n, act, &maps);                              \
    }
GEMMTM_ENTRY(f16, 0, 128)
GEMMTM_ENTRY(f16, 0, 256)
GEMMTM_ENTRY(q4_0, 1, 128)
GEMMTM_ENTRY(q4_0, 1, 256)
GEMMTM_ENTRY(q8_0, 2, 128)
GEMMTM_ENTRY(q8_0, 2, 256)
GEMMTM_ENTRY(bf16, 3, 128)
GEMMTM_ENTRY(bf16, 3, 256)
