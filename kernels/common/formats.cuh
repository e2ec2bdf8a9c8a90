// formats.cuh — weight formats as stored in GGUF, decoded 32 values ("one chunk") at a time.
//
// Owns: for each supported format a struct with BYTES (bytes per block), ELEMS (values per
// block) and `chunk(row, c, v)`, which writes values 32c .. 32c+31 of a row into v[0..32]
// in element order. The weights keep GGML's block layout exactly as stored in the file (no
// repacking yet); the byte offsets are those of engine/src/quant/*.rs. Loads use the widest
// width the block alignment allows (rows start 16-byte aligned; a block of B bytes is then
// aligned to the largest power of two dividing B, at most 16).
#pragma once
#include "common/common.cuh"

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

struct FmtF32 {
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

struct FmtF16 {
    static constexpr int BYTES = 2, ELEMS = 1;
    static __device__ __forceinline__ void chunk(const u8* row, int c, float* v) {
        const uint4* p = (const uint4*)(row + (u64)c * 64);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint4 a = p[i];
            const u32 w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                v[8 * i + 2 * k] = f16_to_f32((u16)(w[k] & 0xffffu));
                v[8 * i + 2 * k + 1] = f16_to_f32((u16)(w[k] >> 16));
            }
        }
    }
};

struct FmtBF16 {
    static constexpr int BYTES = 2, ELEMS = 1;
    static __device__ __forceinline__ void chunk(const u8* row, int c, float* v) {
        const uint4* p = (const uint4*)(row + (u64)c * 64);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint4 a = p[i];
            const u32 w[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
            for (int k = 0; k < 4; k++) {
                v[8 * i + 2 * k] = bf16_to_f32((u16)(w[k] & 0xffffu));
                v[8 * i + 2 * k + 1] = bf16_to_f32((u16)(w[k] >> 16));
            }
        }
    }
};

// Q4_0: d f16 | qs[16]; element j in low nibble of qs[j], j+16 in its high nibble; d*(q-8).
struct FmtQ4_0 {
    static constexpr int BYTES = 18, ELEMS = 32;
    static __device__ __forceinline__ void chunk(const u8* row, int c, float* v) {
        const u8* b = row + (u64)c * BYTES;
        const float d = f16_to_f32((u16)ld_u16(b));
        u32 w[4];
        ld16_a2(b + 2, w);
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const u32 q = byte_of(w, j);
            v[j] = d * (float)((int)(q & 15u) - 8);
            v[j + 16] = d * (float)((int)(q >> 4) - 8);
        }
    }
};

// Q4_1: d f16 | m f16 | qs[16]; d*q + m.
struct FmtQ4_1 {
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
struct FmtQ5_0 {
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
struct FmtQ5_1 {
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

// Q8_0: d f16 | qs i8[32]; d*q.
struct FmtQ8_0 {
    static constexpr int BYTES = 34, ELEMS = 32;
    static __device__ __forceinline__ void chunk(const u8* row, int c, float* v) {
        const u8* b = row + (u64)c * BYTES;
        const float d = f16_to_f32((u16)ld_u16(b));
        u32 w[8];
#pragma unroll
        for (int i = 0; i < 8; i++) w[i] = ld_u32_a2(b + 2 + 4 * i);
#pragma unroll
        for (int j = 0; j < 32; j++) v[j] = d * (float)(int)(i8)byte_of(w, j);
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
// holds element 32j + l in nibble j%2; value d*sc_j*q - dmin*m_j.
struct FmtQ4_K {
    static constexpr int BYTES = 144, ELEMS = 256;
    static __device__ __forceinline__ void chunk(const u8* row, int c, float* v) {
        const u8* b = row + (u64)(c >> 3) * BYTES;
        const int j = c & 7;
        const float d = f16_to_f32((u16)ld_u16(b));
        const float dmin = f16_to_f32((u16)ld_u16(b + 2));
        float sc, mn;
        kq_scale_min(ld_u32(b + 4), ld_u32(b + 8), ld_u32(b + 12), j, &sc, &mn);
        const float dl = d * sc, ml = dmin * mn;
        u32 w[8];
        ld32_a16(b + 16 + 32 * (j >> 1), w);
        const int sh = 4 * (j & 1);
#pragma unroll
        for (int l = 0; l < 32; l++) v[l] = dl * (float)((byte_of(w, l) >> sh) & 15u) - ml;
    }
};

// Q5_K: d f16 | dmin f16 | scales[12] | qh[32] | qs[128]; bit j of qh[l] is bit 4 of
// element 32j + l.
struct FmtQ5_K {
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

// Q6_K: ql[128] | qh[64] | scales i8[16] | d f16. Element 128n + 32r + l (r = 0..3):
// low 4 bits from ql[64n + 32(r%2) + l] (nibble r/2), high 2 bits from qh[32n + l] bits 2r,
// scale scales[8n + 2r + l/16]; value d*sc*(q-32).
struct FmtQ6_K {
    static constexpr int BYTES = 210, ELEMS = 256;
    static __device__ __forceinline__ void chunk(const u8* row, int c, float* v) {
        const u8* b = row + (u64)(c >> 3) * BYTES;
        const int j = c & 7;
        const int n = j >> 2, r = j & 3;
        const float d = f16_to_f32((u16)ld_u16(b + 208));
        const float ds0 = d * (float)(int)(i8)b[192 + 8 * n + 2 * r];
        const float ds1 = d * (float)(int)(i8)b[192 + 8 * n + 2 * r + 1];
        u32 ql[8], qh[8];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            ql[i] = ld_u32_a2(b + 64 * n + 32 * (r & 1) + 4 * i);
            qh[i] = ld_u32_a2(b + 128 + 32 * n + 4 * i);
        }
        const int shl = 4 * (r >> 1), shh = 2 * r;
#pragma unroll
        for (int l = 0; l < 32; l++) {
            const u32 q = ((byte_of(ql, l) >> shl) & 15u) | (((byte_of(qh, l) >> shh) & 3u) << 4);
            v[l] = (l < 16 ? ds0 : ds1) * (float)((int)q - 32);
        }
    }
};

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
