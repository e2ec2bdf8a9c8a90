// formats.cuh — weight formats as stored in GGUF, decoded 32 values ("one chunk") at a time.
//
// Owns: for each supported format a struct with BYTES (bytes per block), ELEMS (values per
// block), `chunkm(m, row, c, v)`, which writes values 32c .. 32c+31 of a row of the matrix
// `m` into v[0..32] in element order (embed), and for matvec the pair `ldc(m, row, c, L)`,
// which loads chunk c of a row once into registers (`F::Ld`: its quants and scales as
// loaded), and `dotc(L, xs, xst)`, the dot product of those 32 values with xs[0], xs[xst],
// ..., xs[31 xst] in a fixed order; one `ldc` serves the dots with several token vectors,
// each with the same bits as a lone token's.
//
// Device layouts (engine/src/cuda/ops/mod.rs repacks at upload, `repack`): Q4_0, Q8_0 and
// Q6_K, whose GGUF blocks are only 2-byte aligned, are stored *planar*: for the whole matrix,
// plane 0 holds the quants of every block (row-major, block after block: 16 / 32 / 192
// bytes), then plane 1 the per-block scales (f16 d / f16 d / 16 i8 sub-scales), then (Q6_K)
// plane 2 the f16 d; so every quant load is 16 bytes wide and 16-byte aligned and a warp's
// loads are contiguous. Every other format keeps GGML's block layout as stored in the file
// (rows start 16-byte aligned); the byte offsets are those of engine/src/quant/*.rs. Loads
// use the widest width the alignment allows.
//
// Quants become floats without int->float conversions: a byte b placed under the exponent
// of 2^23 (prmt) is the float 2^23 + b exactly, and one subtraction gives b - offset exactly.
#pragma once
#include "common/common.cuh"

// A weight matrix as the kernels see it: base address, bytes per row (block layouts),
// rows, and blocks per row (planar layouts).
struct WMat {
    const u8* w;
    u64 row_bytes;
    u64 rows;
    u64 nb;
};

// 2^23 + byte j of w, as a float (exact).
__device__ __forceinline__ float mag_byte(u32 w, int j) {
    u32 r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(w), "r"(0x4B000000u), "r"(0x7440u | (u32)j));
    return __uint_as_float(r);
}
#define ASSAY_MAG 8388608.f
// mag_byte with the exponent word `mg` (== 0x4B000000, from mag_word) in a register: ptxas
// then encodes the byte selector as the immediate of the PRMT, where with two constant
// operands it moved the selector into a register before every PRMT (a third of the
// instructions of the Q4_0 one-token loop besides the PRMT / FADD / FFMA per value).
__device__ __forceinline__ float mag_byte_r(u32 w, u32 mg, int j) {
    u32 r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(w), "r"(mg), "r"(0x7440u | (u32)j));
    return __uint_as_float(r);
}
// 0x4B000000 whatever w is ((w & M) | M, then & M), as a value ptxas does not fold into
// the PRMTs that use it.
__device__ __forceinline__ u32 mag_word(u32 w) {
    u32 r;
    asm("lop3.b32 %0, %1, 0x4B000000, 0x4B000000, 0xEA;" : "=r"(r) : "r"(w));
    return r & 0x4B000000u;
}

__device__ __forceinline__ void u4w(const uint4 a, u32* w) {
    w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w;
}

// Ask L2 for the line holding p (no register, no wait).
__device__ __forceinline__ void pf_l2(const void* p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// Formats in GGUF block layout: chunkm / ldc / dotc from the row decoder
// `F::chunk(row, c, v)`.
template <class F>
struct RowFmt {
    // Prefetch the start of chunk c's bytes.
    static __device__ __forceinline__ void prefetch(const WMat& m, u64 row, int c) {
        pf_l2(m.w + row * m.row_bytes + (u64)(c * 32 / F::ELEMS) * F::BYTES);
    }
    static __device__ __forceinline__ void chunkm(const WMat& m, u64 row, int c, float* v) {
        F::chunk(m.w + row * m.row_bytes, c, v);
    }
    // A loaded chunk: its 32 values.
    struct Ld {
        float v[32];
    };
    static __device__ __forceinline__ void ldc(const WMat& m, u64 row, int c, Ld& L) {
        F::chunk(m.w + row * m.row_bytes, c, L.v);
    }
    static __device__ __forceinline__ float dotc(const Ld& L, const float* xs, int xst) {
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < 32; i++) s = fmaf(L.v[i], xs[i * xst], s);
        return s;
    }
    // Batched matvec: the chunk is already floats.
    using Lf = Ld;
    static __device__ __forceinline__ void ldf(const WMat& m, u64 row, int c, Lf& L) {
        ldc(m, row, c, L);
    }
    static __device__ __forceinline__ float dotf(const Lf& L, const float* xs, int xst) {
        return dotc(L, xs, xst);
    }
};

// 16 bytes at a 2-aligned address as four little-endian words.
__device__ __forceinline__ void ld16_a2(const u8* p, u32* w) {
#pragma unroll
    for (int i = 0; i < 4; i++) w[i] = ld_u32_a2(p + 4 * i);
}
// 32 bytes at a 16-aligned address as eight little-endian words.
__device__ __forceinline__ void ld32_a16(const u8* p, u32* w) {
    const uint4 a = ((const uint4*)p)[0];
    const uint4 b = ((const uint4*)p)[1];
    w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w;
    w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
}
// Byte j of a little-endian word array (j must be a compile-time constant after unrolling).
__device__ __forceinline__ u32 byte_of(const u32* w, int j) {
    return (w[j >> 2] >> (8 * (j & 3))) & 0xffu;
}

struct FmtF32 : RowFmt<FmtF32> {
    static constexpr int BYTES = 4, ELEMS = 1;
    static __device__ __forceinline__ void chunk(const u8* row, int c, float* v) {
        const float4* p = (const float4*)(row + (u64)c * 128);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float4 a = p[i];
            v[4 * i] = a.x; v[4 * i + 1] = a.y; v[4 * i + 2] = a.z; v[4 * i + 3] = a.w;
        }
    }
};

// F16 / BF16 rows: a loaded chunk is its 16 raw words (64 bytes: half the registers of
// RowFmt's 32 floats, so the one-token matvec can hold a round of loads apart from its dot
// products), each value converted in the dot product. Value 2j is word j's low half, 2j + 1
// its high half (as F::chunk orders them); the fma chain is RowFmt::dotc's, value 0 to 31:
// the same bits.
template <class F>
struct HalfFmt : RowFmt<F> {
    // matvec.cu's streamed kernel (matvec/streamed.cuh): a chunk is 64 bytes of its row
    // (rows are k / 32 chunks of 64 bytes back to back: row_bytes == 2 k, so chunk c of
    // row r starts at byte (r k / 32 + c) 64, the planar formats' quant offset with
    // QBYTES = 64), streamed as 4 16-byte pieces, and no scale plane (WR_SCALE).
    static constexpr int QBYTES = 64;
    static constexpr bool WR_SCALE = false;
    struct Ld {
        u32 w[16];
    };
    static __device__ __forceinline__ void ldc(const WMat& m, u64 row, int c, Ld& L) {
        const uint4* p = (const uint4*)(m.w + row * m.row_bytes + (u64)c * 64);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint4 a = p[i];
            L.w[4 * i] = a.x; L.w[4 * i + 1] = a.y; L.w[4 * i + 2] = a.z; L.w[4 * i + 3] = a.w;
        }
    }
    static __device__ __forceinline__ float dotc(const Ld& L, const float* xs, int xst) {
        float s = 0.f;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            s = fmaf(F::lo(L.w[j]), xs[(2 * j) * xst], s);
            s = fmaf(F::hi(L.w[j]), xs[(2 * j + 1) * xst], s);
        }
        return s;
    }
    using Lf = Ld;
    static __device__ __forceinline__ void ldf(const WMat& m, u64 row, int c, Lf& L) {
        ldc(m, row, c, L);
    }
    static __device__ __forceinline__ float dotf(const Lf& L, const float* xs, int xst) {
        return dotc(L, xs, xst);
    }
};

struct FmtF16 : HalfFmt<FmtF16> {
    static constexpr int BYTES = 2, ELEMS = 1;
    static __device__ __forceinline__ float lo(u32 w) { return f16_to_f32((u16)(w & 0xffffu)); }
    static __device__ __forceinline__ float hi(u32 w) { return f16_to_f32((u16)(w >> 16)); }
    static __device__ __forceinline__ void chunk(const u8* row, int c, float* v) {
        const uint4* p = (const uint4*)(row + (u64)c * 64);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint4 a = p[i];
            const u32 w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                v[8 * i + 2 * k] = lo(w[k]);
                v[8 * i + 2 * k + 1] = hi(w[k]);
            }
        }
    }
};

struct FmtBF16 : HalfFmt<FmtBF16> {
    static constexpr int BYTES = 2, ELEMS = 1;
    static __device__ __forceinline__ float lo(u32 w) { return __uint_as_float(w << 16); }
    static __device__ __forceinline__ float hi(u32 w) { return __uint_as_float(w & 0xffff0000u); }
    static __device__ __forceinline__ void chunk(const u8* row, int c, float* v) {
        const uint4* p = (const uint4*)(row + (u64)c * 64);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint4 a = p[i];
            const u32 w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                v[8 * i + 2 * k] = lo(w[k]);
                v[8 * i + 2 * k + 1] = hi(w[k]);
            }
        }
    }
};

// Q4_0 (planar): plane 0 qs[16] per block, plane 1 d f16 per block. Element j of a block
// is the low nibble of qs[j], element j+16 its high nibble; value d*(q-8).
struct FmtQ4_0 {
    static constexpr int BYTES = 18, ELEMS = 32;
    static constexpr int QBYTES = 16;  // plane 0 bytes per block (matvec.cu's streamed kernel)
    static constexpr bool WR_SCALE = true;  // plane 1: one f16 scale per block (streamed kernel)
    static __device__ __forceinline__ void prefetch(const WMat& m, u64 row, int c) {
        const u64 bi = row * m.nb + (u64)c;
        pf_l2(m.w + bi * 16);
        pf_l2(m.w + m.rows * m.nb * 16 + bi * 2);
    }
    static __device__ __forceinline__ void load(const WMat& m, u64 row, int c, u32* q, float* d) {
        const u64 bi = row * m.nb + (u64)c;
        u4w(*(const uint4*)(m.w + bi * 16), q);
        *d = f16_to_f32(*(const u16*)(m.w + m.rows * m.nb * 16 + bi * 2));
    }
    static __device__ __forceinline__ void chunkm(const WMat& m, u64 row, int c, float* v) {
        u32 q[4];
        float d;
        load(m, row, c, q, &d);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const u32 b = byte_of(q, j);
            v[j] = d * (float)((int)(b & 15u) - 8);
            v[j + 16] = d * (float)((int)(b >> 4) - 8);
        }
    }
    struct Ld {
        u32 q[4];
        float d;
    };
    static __device__ __forceinline__ void ldc(const WMat& m, u64 row, int c, Ld& L) {
        load(m, row, c, L.q, &L.d);
    }
    // d * (sum over j of (q_j - 8) x_j for the low nibbles + the same for the high ones).
    static __device__ __forceinline__ float dotc(const Ld& L, const float* xs, int xst) {
        const u32* q = L.q;
        const float d = L.d;
        const u32 mg = mag_word(q[0]);
        float s0 = 0.f, s1 = 0.f;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const u32 lo = q[i] & 0x0F0F0F0Fu, hi = (q[i] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
            for (int b = 0; b < 4; b++) {
                const int j = 4 * i + b;
                s0 = fmaf(mag_byte_r(lo, mg, b) - (ASSAY_MAG + 8.f), xs[j * xst], s0);
                s1 = fmaf(mag_byte_r(hi, mg, b) - (ASSAY_MAG + 8.f), xs[(j + 16) * xst], s1);
            }
        }
        return d * (s0 + s1);
    }
    // Batched matvec: the quants unpacked once to exact floats q - 8 (element order), so
    // that a chunk serving several tokens is unpacked once; dotf is dotc's fma chain.
    struct Lf {
        float v[32];
        float d;
    };
    static __device__ __forceinline__ void ldf(const WMat& m, u64 row, int c, Lf& L) {
        u32 q[4];
        load(m, row, c, q, &L.d);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const u32 lo = q[i] & 0x0F0F0F0Fu, hi = (q[i] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
            for (int b = 0; b < 4; b++) {
                L.v[4 * i + b] = mag_byte(lo, b) - (ASSAY_MAG + 8.f);
                L.v[4 * i + b + 16] = mag_byte(hi, b) - (ASSAY_MAG + 8.f);
            }
        }
    }
    static __device__ __forceinline__ float dotf(const Lf& L, const float* xs, int xst) {
        float s0 = 0.f, s1 = 0.f;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            s0 = fmaf(L.v[j], xs[j * xst], s0);
            s1 = fmaf(L.v[j + 16], xs[(j + 16) * xst], s1);
        }
        return L.d * (s0 + s1);
    }
};

// Q4_1: d f16 | m f16 | qs[16]; d*q + m.
struct FmtQ4_1 : RowFmt<FmtQ4_1> {
    static constexpr int BYTES = 20, ELEMS = 32;
    static __device__ __forceinline__ void chunk(const u8* row, int c, float* v) {
        const u8* b = row + (u64)c * BYTES;
        const float d = f16_to_f32((u16)ld_u16(b));
        const float m = f16_to_f32((u16)ld_u16(b + 2));
        u32 w[4];
#pragma unroll
        for (int i = 0; i < 4; i++) w[i] = ld_u32(b + 4 + 4 * i);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const u32 q = byte_of(w, j);
            v[j] = d * (float)(q & 15u) + m;
            v[j + 16] = d * (float)(q >> 4) + m;
        }
    }
};

// Q5_0: d f16 | qh u32 (bit i = bit 4 of element i) | qs[16]; d*(q-16).
struct FmtQ5_0 : RowFmt<FmtQ5_0> {
    static constexpr int BYTES = 22, ELEMS = 32;
    static __device__ __forceinline__ void chunk(const u8* row, int c, float* v) {
        const u8* b = row + (u64)c * BYTES;
        const float d = f16_to_f32((u16)ld_u16(b));
        const u32 qh = ld_u32_a2(b + 2);
        u32 w[4];
        ld16_a2(b + 6, w);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const u32 q = byte_of(w, j);
            const u32 lo = (q & 15u) | (((qh >> j) & 1u) << 4);
            const u32 hi = (q >> 4) | (((qh >> (j + 16)) & 1u) << 4);
            v[j] = d * (float)((int)lo - 16);
            v[j + 16] = d * (float)((int)hi - 16);
        }
    }
};

// Q5_1: d f16 | m f16 | qh u32 | qs[16]; d*q + m.
struct FmtQ5_1 : RowFmt<FmtQ5_1> {
    static constexpr int BYTES = 24, ELEMS = 32;
    static __device__ __forceinline__ void chunk(const u8* row, int c, float* v) {
        const u8* b = row + (u64)c * BYTES;
        const float d = f16_to_f32((u16)ld_u16(b));
        const float m = f16_to_f32((u16)ld_u16(b + 2));
        const u32 qh = ld_u32(b + 4);
        u32 w[4];
#pragma unroll
        for (int i = 0; i < 4; i++) w[i] = ld_u32(b + 8 + 4 * i);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const u32 q = byte_of(w, j);
            const u32 lo = (q & 15u) | (((qh >> j) & 1u) << 4);
            const u32 hi = (q >> 4) | (((qh >> (j + 16)) & 1u) << 4);
            v[j] = d * (float)lo + m;
            v[j + 16] = d * (float)hi + m;
        }
    }
};

// Q8_0 (planar): plane 0 qs i8[32] per block, plane 1 d f16 per block; value d*q.
struct FmtQ8_0 {
    static constexpr int BYTES = 34, ELEMS = 32;
    static constexpr int QBYTES = 32;  // plane 0 bytes per block (matvec.cu's streamed kernel)
    static constexpr bool WR_SCALE = true;  // plane 1: one f16 scale per block (streamed kernel)
    static __device__ __forceinline__ void prefetch(const WMat& m, u64 row, int c) {
        const u64 bi = row * m.nb + (u64)c;
        pf_l2(m.w + bi * 32);
        pf_l2(m.w + m.rows * m.nb * 32 + bi * 2);
    }
    static __device__ __forceinline__ void load(const WMat& m, u64 row, int c, u32* q, float* d) {
        const u64 bi = row * m.nb + (u64)c;
        const uint4* p = (const uint4*)(m.w + bi * 32);
        u4w(p[0], q);
        u4w(p[1], q + 4);
        *d = f16_to_f32(*(const u16*)(m.w + m.rows * m.nb * 32 + bi * 2));
    }
    static __device__ __forceinline__ void chunkm(const WMat& m, u64 row, int c, float* v) {
        u32 q[8];
        float d;
        load(m, row, c, q, &d);
#pragma unroll
        for (int j = 0; j < 32; j++) v[j] = d * (float)(int)(i8)byte_of(q, j);
    }
    struct Ld {
        u32 q[8];
        float d;
    };
    static __device__ __forceinline__ void ldc(const WMat& m, u64 row, int c, Ld& L) {
        load(m, row, c, L.q, &L.d);
    }
    // d * sum of q_j x_j, two interleaved partial sums (even / odd words).
    static __device__ __forceinline__ float dotc(const Ld& L, const float* xs, int xst) {
        const u32* q = L.q;
        const float d = L.d;
        const u32 mg = mag_word(q[0]);
        float s0 = 0.f, s1 = 0.f;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const u32 u = q[i] ^ 0x80808080u;  // q + 128 per byte
#pragma unroll
            for (int b = 0; b < 4; b++) {
                const float v = mag_byte_r(u, mg, b) - (ASSAY_MAG + 128.f);
                if (i & 1) s1 = fmaf(v, xs[(4 * i + b) * xst], s1);
                else s0 = fmaf(v, xs[(4 * i + b) * xst], s0);
            }
        }
        return d * (s0 + s1);
    }
    // Batched matvec: the quants unpacked once to exact floats (element order).
    struct Lf {
        float v[32];
        float d;
    };
    static __device__ __forceinline__ void ldf(const WMat& m, u64 row, int c, Lf& L) {
        u32 q[8];
        load(m, row, c, q, &L.d);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const u32 u = q[i] ^ 0x80808080u;
#pragma unroll
            for (int b = 0; b < 4; b++) L.v[4 * i + b] = mag_byte(u, b) - (ASSAY_MAG + 128.f);
        }
    }
    static __device__ __forceinline__ float dotf(const Lf& L, const float* xs, int xst) {
        float s0 = 0.f, s1 = 0.f;
#pragma unroll
        for (int i = 0; i < 8; i++) {
#pragma unroll
            for (int b = 0; b < 4; b++) {
                if (i & 1) s1 = fmaf(L.v[4 * i + b], xs[(4 * i + b) * xst], s1);
                else s0 = fmaf(L.v[4 * i + b], xs[(4 * i + b) * xst], s0);
            }
        }
        return L.d * (s0 + s1);
    }
};

// Byte k (0..12) of the K-quant 12-byte scale field held in three words (k may vary at run
// time: selects, no local memory).
__device__ __forceinline__ u32 kq_scale_byte(u32 s0, u32 s1, u32 s2, int k) {
    const u32 w = k < 4 ? s0 : (k < 8 ? s1 : s2);
    return (w >> (8 * (k & 3))) & 0xffu;
}
// Sub-block j's 6-bit (scale, min) codes of Q4_K / Q5_K.
__device__ __forceinline__ void kq_scale_min(u32 s0, u32 s1, u32 s2, int j, float* sc, float* mn) {
    u32 a, b;
    if (j < 4) {
        a = kq_scale_byte(s0, s1, s2, j) & 63u;
        b = kq_scale_byte(s0, s1, s2, j + 4) & 63u;
    } else {
        const u32 x = kq_scale_byte(s0, s1, s2, j + 4);
        a = (x & 15u) | ((kq_scale_byte(s0, s1, s2, j - 4) >> 6) << 4);
        b = (x >> 4) | ((kq_scale_byte(s0, s1, s2, j) >> 6) << 4);
    }
    *sc = (float)a;
    *mn = (float)b;
}

// Q4_K: d f16 | dmin f16 | scales[12] | qs[128]; sub-block j = chunk; byte qs[32(j/2) + l]
// holds element 32j + l in nibble j%2; value d*sc_j*q - dmin*m_j. (Block layout: 144 bytes
// keep every block 16-byte aligned.)
struct FmtQ4_K {
    static constexpr int BYTES = 144, ELEMS = 256;
    static __device__ __forceinline__ void prefetch(const WMat& m, u64 row, int c) {
        pf_l2(m.w + row * m.row_bytes + (u64)(c >> 3) * BYTES + 16 + 32 * ((c & 7) >> 1));
    }
    static __device__ __forceinline__ void load(const WMat& m, u64 row, int c, u32* w, float* dl,
                                                float* ml) {
        const u8* b = m.w + row * m.row_bytes + (u64)(c >> 3) * BYTES;
        const int j = c & 7;
        const uint4 h = *(const uint4*)b;
        const float d = f16_to_f32((u16)(h.x & 0xffffu));
        const float dmin = f16_to_f32((u16)(h.x >> 16));
        float sc, mn;
        kq_scale_min(h.y, h.z, h.w, j, &sc, &mn);
        *dl = d * sc;
        *ml = dmin * mn;
        ld32_a16(b + 16 + 32 * (j >> 1), w);
    }
    static __device__ __forceinline__ void chunkm(const WMat& m, u64 row, int c, float* v) {
        u32 w[8];
        float dl, ml;
        load(m, row, c, w, &dl, &ml);
        const int sh = 4 * (c & 1);
#pragma unroll
        for (int l = 0; l < 32; l++) v[l] = dl * (float)((byte_of(w, l) >> sh) & 15u) - ml;
    }
    // The loaded chunk: its 32 quants (one per byte) and dl, ml.
    struct Ld {
        u32 u[8];
        float dl, ml;
    };
    static __device__ __forceinline__ void ldc(const WMat& m, u64 row, int c, Ld& L) {
        u32 w[8];
        load(m, row, c, w, &L.dl, &L.ml);
        const int sh = 4 * (c & 1);
#pragma unroll
        for (int i = 0; i < 8; i++) L.u[i] = (w[i] >> sh) & 0x0F0F0F0Fu;
    }
    // dl * sum q_l x_l - ml * sum x_l.
    static __device__ __forceinline__ float dotc(const Ld& L, const float* xs, int xst) {
        const float dl = L.dl, ml = L.ml;
        const u32 mg = mag_word(L.u[0]);
        float s = 0.f, sx = 0.f;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const u32 u = L.u[i];
#pragma unroll
            for (int b = 0; b < 4; b++) {
                const float x = xs[(4 * i + b) * xst];
                s = fmaf(mag_byte_r(u, mg, b) - ASSAY_MAG, x, s);
                sx += x;
            }
        }
        return fmaf(dl, s, -ml * sx);
    }
    // Batched matvec: the quants unpacked once to exact floats.
    struct Lf {
        float v[32];
        float dl, ml;
    };
    static __device__ __forceinline__ void ldf(const WMat& m, u64 row, int c, Lf& L) {
        Ld P;
        ldc(m, row, c, P);
        L.dl = P.dl;
        L.ml = P.ml;
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int b = 0; b < 4; b++) L.v[4 * i + b] = mag_byte(P.u[i], b) - ASSAY_MAG;
    }
    static __device__ __forceinline__ float dotf(const Lf& L, const float* xs, int xst) {
        float s = 0.f, sx = 0.f;
#pragma unroll
        for (int l = 0; l < 32; l++) {
            const float x = xs[l * xst];
            s = fmaf(L.v[l], x, s);
            sx += x;
        }
        return fmaf(L.dl, s, -L.ml * sx);
    }
};

// Q5_K: d f16 | dmin f16 | scales[12] | qh[32] | qs[128]; bit j of qh[l] is bit 4 of
// element 32j + l.
struct FmtQ5_K : RowFmt<FmtQ5_K> {
    static constexpr int BYTES = 176, ELEMS = 256;
    static __device__ __forceinline__ void chunk(const u8* row, int c, float* v) {
        const u8* b = row + (u64)(c >> 3) * BYTES;
        const int j = c & 7;
        const float d = f16_to_f32((u16)ld_u16(b));
        const float dmin = f16_to_f32((u16)ld_u16(b + 2));
        float sc, mn;
        kq_scale_min(ld_u32(b + 4), ld_u32(b + 8), ld_u32(b + 12), j, &sc, &mn);
        const float dl = d * sc, ml = dmin * mn;
        u32 h[8], w[8];
        ld32_a16(b + 16, h);
        ld32_a16(b + 48 + 32 * (j >> 1), w);
        const int sh = 4 * (j & 1);
#pragma unroll
        for (int l = 0; l < 32; l++) {
            const u32 q = ((byte_of(w, l) >> sh) & 15u) | (((byte_of(h, l) >> j) & 1u) << 4);
            v[l] = dl * (float)q - ml;
        }
    }
};

// Q6_K (planar): plane 0 ql[128] qh[64] per block (192 bytes), plane 1 scales i8[16] per
// block, plane 2 d f16 per block. Element 128n + 32r + l (r = 0..3): low 4 bits from
// ql[64n + 32(r%2) + l] (nibble r/2), high 2 bits from qh[32n + l] bits 2r, scale
// scales[8n + 2r + l/16]; value d*sc*(q-32).
struct FmtQ6_K {
    static constexpr int BYTES = 210, ELEMS = 256;
    static __device__ __forceinline__ void prefetch(const WMat& m, u64 row, int c) {
        const u64 bi = row * m.nb + (u64)(c >> 3);
        const int j = c & 7;
        pf_l2(m.w + bi * 192 + 64 * (j >> 2) + 32 * (j & 1));
        pf_l2(m.w + bi * 192 + 128 + 32 * (j >> 2));
    }
    // The 32 six-bit quants of chunk c (one per byte of q) and the two scales d*sc.
    static __device__ __forceinline__ void load(const WMat& m, u64 row, int c, u32* q,
                                                float* ds0, float* ds1) {
        const u64 bi = row * m.nb + (u64)(c >> 3);
        const int j = c & 7;
        const int n = j >> 2, r = j & 3;
        const u8* b = m.w + bi * 192;
        const uint4* pl = (const uint4*)(b + 64 * n + 32 * (r & 1));
        const uint4* ph = (const uint4*)(b + 128 + 32 * n);
        u32 ql[8], qh[8];
        u4w(pl[0], ql);
        u4w(pl[1], ql + 4);
        u4w(ph[0], qh);
        u4w(ph[1], qh + 4);
        const u32 sc = *(const u16*)(m.w + m.rows * m.nb * 192 + bi * 16 + 8 * n + 2 * r);
        const float d = f16_to_f32(*(const u16*)(m.w + m.rows * m.nb * 208 + bi * 2));
        *ds0 = d * (float)(int)(i8)(sc & 0xffu);
        *ds1 = d * (float)(int)(i8)(sc >> 8);
        const int shl = 4 * (r >> 1), shh = 2 * r;
#pragma unroll
        for (int i = 0; i < 8; i++)
            q[i] = ((ql[i] >> shl) & 0x0F0F0F0Fu) | (((qh[i] >> shh) & 0x03030303u) << 4);
    }
    static __device__ __forceinline__ void chunkm(const WMat& m, u64 row, int c, float* v) {
        u32 q[8];
        float ds0, ds1;
        load(m, row, c, q, &ds0, &ds1);
#pragma unroll
        for (int l = 0; l < 32; l++) v[l] = (l < 16 ? ds0 : ds1) * (float)((int)byte_of(q, l) - 32);
    }
    struct Ld {
        u32 q[8];
        float ds0, ds1;
    };
    static __device__ __forceinline__ void ldc(const WMat& m, u64 row, int c, Ld& L) {
        load(m, row, c, L.q, &L.ds0, &L.ds1);
    }
    // ds0 * sum_{l<16} (q_l - 32) x_l + ds1 * sum_{l>=16} (q_l - 32) x_l.
    static __device__ __forceinline__ float dotc(const Ld& L, const float* xs, int xst) {
        const u32* q = L.q;
        const float ds0 = L.ds0, ds1 = L.ds1;
        const u32 mg = mag_word(q[0]);
        float s0 = 0.f, s1 = 0.f;
#pragma unroll
        for (int i = 0; i < 8; i++) {
#pragma unroll
            for (int b = 0; b < 4; b++) {
                const float v = mag_byte_r(q[i], mg, b) - (ASSAY_MAG + 32.f);
                if (i < 4) s0 = fmaf(v, xs[(4 * i + b) * xst], s0);
                else s1 = fmaf(v, xs[(4 * i + b) * xst], s1);
            }
        }
        return fmaf(ds1, s1, ds0 * s0);
    }
    // Batched matvec: the quants unpacked once to exact floats q - 32.
    struct Lf {
        float v[32];
        float ds0, ds1;
    };
    static __device__ __forceinline__ void ldf(const WMat& m, u64 row, int c, Lf& L) {
        u32 q[8];
        load(m, row, c, q, &L.ds0, &L.ds1);
#pragma unroll
        for (int i = 0; i < 8; i++)
#pragma unroll
            for (int b = 0; b < 4; b++) L.v[4 * i + b] = mag_byte(q[i], b) - (ASSAY_MAG + 32.f);
    }
    static __device__ __forceinline__ float dotf(const Lf& L, const float* xs, int xst) {
        float s0 = 0.f, s1 = 0.f;
#pragma unroll
        for (int l = 0; l < 16; l++) {
            s0 = fmaf(L.v[l], xs[l * xst], s0);
            s1 = fmaf(L.v[l + 16], xs[(l + 16) * xst], s1);
        }
        return fmaf(L.ds1, s1, L.ds0 * s0);
    }
};

// The dot product of chunk c of a row with xs[0], xs[xst], ..., xs[31 xst]: `ldc` then
// `dotc` (one token).
template <class F>
__device__ __forceinline__ float fmt_dot(const WMat& m, u64 row, int c, const float* xs,
                                         int xst) {
    typename F::Ld L;
    F::ldc(m, row, c, L);
    return F::dotc(L, xs, xst);
}

// Instantiate MACRO(name, Fmt) for every format: the entry-point names end in these
// suffixes (engine/src/cuda/select.rs maps QuantFormat to them).
#define ASSAY_FOR_EACH_FORMAT(MACRO) \
    MACRO(f32, FmtF32)               \
    MACRO(f16, FmtF16)               \
    MACRO(bf16, FmtBF16)             \
    MACRO(q4_0, FmtQ4_0)             \
    MACRO(q4_1, FmtQ4_1)             \
    MACRO(q5_0, FmtQ5_0)             \
    MACRO(q5_1, FmtQ5_1)             \
    MACRO(q8_0, FmtQ8_0)             \
    MACRO(q4_k, FmtQ4_K)             \
    MACRO(q5_k, FmtQ5_K)             \
    MACRO(q6_k, FmtQ6_K)
