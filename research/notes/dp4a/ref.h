// ref.h — host side of the dp4a bench (no CUDA): random data in the engine's planar Q4_0 /
// Q8_0 layouts, the activation quantisation, and the CPU references: the new integer
// arithmetic in the kernels' exact per-row order (bit-exact expectation) and the f64 product
// of the dequantised weights with the unquantised x. Included by bench.cu (nvcc host code)
// and cpu_check.cpp (g++ here). Compile the host code with -ffp-contract=off.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "dp4a_core.h"

namespace dpref {

// ------------------------------------------------------------------------- random data

struct Rng {
    uint64_t s = 0x9E3779B97F4A7C15ull;
    uint64_t next() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return s;
    }
    float pm1() { return (float)((double)(next() >> 11) * (2.0 / 9007199254740992.0) - 1.0); }
};

// f16 bits of +-(1 + m / 1024) * 2^(e - 15), e in 6..10: |d| in [2^-9, 2^-4) (the matvec
// bench's scales).
inline uint16_t rand_scale(Rng& g) {
    const uint64_t r = g.next();
    const uint16_t sign = (uint16_t)((r & 1) << 15);
    const uint16_t e = (uint16_t)(6 + (r >> 1) % 5);
    const uint16_t m = (uint16_t)((r >> 8) & 1023);
    return (uint16_t)(sign | (e << 10) | m);
}

// f16 -> f32, exact (every f16 is an f32); as cvt.f32.f16 on the GPU.
inline float half_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const int e = (h >> 10) & 31;
    uint32_t m = h & 1023u, bits;
    if (e == 31) {
        bits = sign | 0x7f800000u | (m << 13);
    } else if (e != 0) {
        bits = sign | ((uint32_t)(e - 15 + 127) << 23) | (m << 13);
    } else if (m == 0) {
        bits = sign;
    } else {  // subnormal: normalise
        int ee = -14;
        while (!(m & 1024u)) {
            m <<= 1;
            ee--;
        }
        bits = sign | ((uint32_t)(ee + 127) << 23) | ((m & 1023u) << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

enum Fmt { FMT_Q4_0 = 0, FMT_Q8_0 = 1 };
inline const char* fmt_name(int f) { return f == FMT_Q4_0 ? "q4_0" : "q8_0"; }
inline int fmt_qb(int f) { return f == FMT_Q4_0 ? 16 : 32; }

// A matrix in the engine's planar device layout (formats.cuh, ops::repack): plane 0 = the
// quant bytes of every block (QB per block, row-major, block after block), plane 1 = the
// little-endian f16 scale of every block, in the same order.
struct HostMat {
    int fmt = FMT_Q4_0, rows = 0, k = 0, nb = 0;
    std::vector<uint8_t> bytes;
    int qb() const { return fmt_qb(fmt); }
    size_t quant_bytes() const { return (size_t)rows * nb * qb(); }
    const uint8_t* quants(int r, int c) const { return &bytes[((size_t)r * nb + c) * qb()]; }
    uint16_t scale_bits(int r, int c) const {
        const size_t o = quant_bytes() + ((size_t)r * nb + c) * 2;
        return (uint16_t)(bytes[o] | (bytes[o + 1] << 8));
    }
    float scale(int r, int c) const { return half_to_float(scale_bits(r, c)); }
    // The integer value of element j (0..31) of block c of row r: q - 8 (Q4_0: j < 16 the
    // low nibble of byte j, else the high nibble of byte j - 16) or the int8 q (Q8_0).
    int wint(int r, int c, int j) const {
        const uint8_t* q = quants(r, c);
        if (fmt == FMT_Q4_0) return (j < 16 ? (q[j] & 15) : (q[j - 16] >> 4)) - 8;
        return (int)(int8_t)q[j];
    }
    // Block c of row r as the little-endian words the kernels load.
    void words(int r, int c, dp_u32* w) const {
        const uint8_t* q = quants(r, c);
        for (int i = 0; i < qb() / 4; i++)
            w[i] = (dp_u32)q[4 * i] | ((dp_u32)q[4 * i + 1] << 8) | ((dp_u32)q[4 * i + 2] << 16) |
                   ((dp_u32)q[4 * i + 3] << 24);
    }
};

inline HostMat make_mat(int fmt, int rows, int k, Rng& g) {
    HostMat m;
    m.fmt = fmt;
    m.rows = rows;
    m.k = k;
    m.nb = k / 32;
    m.bytes.resize((size_t)rows * m.nb * (m.qb() + 2));
    const size_t nq = m.quant_bytes();
    for (size_t i = 0; i < nq; i += 8) {
        const uint64_t r = g.next();
        memcpy(&m.bytes[i], &r, 8);  // nq is a multiple of 16
    }
    for (size_t b = 0; b < (size_t)rows * m.nb; b++) {
        const uint16_t s = rand_scale(g);
        m.bytes[nq + 2 * b] = (uint8_t)(s & 0xff);
        m.bytes[nq + 2 * b + 1] = (uint8_t)(s >> 8);
    }
    return m;
}

// Rows r0 .. r0 + n - 1 of m as a matrix of its own (its own planes).
inline HostMat sub_mat(const HostMat& m, int r0, int n) {
    HostMat s;
    s.fmt = m.fmt;
    s.rows = n;
    s.k = m.k;
    s.nb = m.nb;
    const size_t qb = m.qb();
    s.bytes.resize((size_t)n * s.nb * (qb + 2));
    const size_t rq = (size_t)m.nb * qb, rs = (size_t)m.nb * 2;
    memcpy(&s.bytes[0], &m.bytes[(size_t)r0 * rq], (size_t)n * rq);
    memcpy(&s.bytes[s.quant_bytes()], &m.bytes[m.quant_bytes() + (size_t)r0 * rs], (size_t)n * rs);
    return s;
}

// ------------------------------------------------------------------------- activations

// Activations: uniform in [-1, 1), one value in 128 (on average) times 10 (outliers, so
// that some blocks have a large scale, as after a real RMSNorm).
inline std::vector<float> make_x(int ntok, int k, Rng& g) {
    std::vector<float> x((size_t)ntok * k);
    for (float& v : x) {
        v = g.pm1();
        if ((g.next() & 127) == 0) v *= 10.f;
    }
    return x;
}

// Quantised activations of ntok vectors of k values: per block b of 32 values of token t
// (b = t * nb + c), 32 int8 q (element j at q[32 b + j]), the f32 scale d[b] and the sum
// s[b] of the 32 q. The rule (the quant kernel implements the same):
//   amax = max_j |x_j|;  d = amax / 127 (f32 division, round to nearest even);
//   q_j = 0 if d == 0, else rint(x_j / d) (f32 division, then round half to even),
//   clamped to [-127, 127] (never active: |x_j / d| <= 127 (1 + 2^-23) rounds to <= 127);
//   s = sum_j q_j (exact integer).
struct XQ {
    int ntok = 0, k = 0, nb = 0;
    std::vector<int8_t> q;
    std::vector<float> d;
    std::vector<int> s;
};

inline void quant_block(const float* x, int8_t* q, float* d, int* s) {
    float amax = 0.f;
    for (int j = 0; j < 32; j++) amax = std::max(amax, std::fabs(x[j]));
    const float dd = amax / 127.f;
    int sum = 0;
    for (int j = 0; j < 32; j++) {
        int v = 0;
        if (dd != 0.f) v = (int)std::nearbyint(x[j] / dd);  // FE_TONEAREST (the default)
        v = std::min(127, std::max(-127, v));
        q[j] = (int8_t)v;
        sum += v;
    }
    *d = dd;
    *s = sum;
}

inline XQ quantize(const std::vector<float>& x, int ntok, int k) {
    XQ r;
    r.ntok = ntok;
    r.k = k;
    r.nb = k / 32;
    r.q.resize((size_t)ntok * k);
    r.d.resize((size_t)ntok * r.nb);
    r.s.resize((size_t)ntok * r.nb);
    for (size_t b = 0; b < (size_t)ntok * r.nb; b++)
        quant_block(&x[32 * b], &r.q[32 * b], &r.d[b], &r.s[b]);
    return r;
}

// Block c of token t's quants as 8 little-endian words.
inline void xwords(const XQ& xq, int t, int c, int* w) {
    const int8_t* p = &xq.q[(size_t)t * xq.k + (size_t)c * 32];
    for (int i = 0; i < 8; i++) {
        const uint32_t u = (uint32_t)(uint8_t)p[4 * i] | ((uint32_t)(uint8_t)p[4 * i + 1] << 8) |
                           ((uint32_t)(uint8_t)p[4 * i + 2] << 16) |
                           ((uint32_t)(uint8_t)p[4 * i + 3] << 24);
        memcpy(&w[i], &u, 4);
    }
}

// ------------------------------------------------------------------------- references

// The integer dot of weight block (r, c) with activation block (t, c), element by element
// from the definitions (independent of the word packing of dp4a_core.h).
inline int idot_elem(const HostMat& m, int r, int c, const XQ& xq, int t) {
    const int8_t* p = &xq.q[(size_t)t * xq.k + (size_t)c * 32];
    int s = 0;
    for (int j = 0; j < 32; j++) s += m.wint(r, c, j) * (int)p[j];
    return s;
}

// The butterfly of common.cuh's warp_sum on 32 lane values (lane l adds lane l ^ o's value,
// o = 16, 8, 4, 2, 1); every lane ends with the same bits: lane 0's.
inline float butterfly(const float* lanes) {
    float v[32], n[32];
    for (int l = 0; l < 32; l++) v[l] = lanes[l];
    for (int o = 16; o > 0; o >>= 1) {
        for (int l = 0; l < 32; l++) n[l] = v[l] + v[l ^ o];
        for (int l = 0; l < 32; l++) v[l] = n[l];
    }
    return v[0];
}

// THE per-row order of the dp4a arithmetic (every kernel of the bench, any T, grid, R):
// lane l (0..31) runs acc_l = dp_acc(acc_l, idot(block c), dw_c, dx_c) over c = l, l + 32,
// l + 64, ... < nb in increasing order from acc_l = 0; the row's sum is the butterfly of
// the 32 acc_l. `idot_words`: use dp4a_core.h's word-level idot (else idot_elem).
inline float row_sum(const HostMat& m, int r, const XQ& xq, int t, bool idot_words = true) {
    float acc[32];
    for (int l = 0; l < 32; l++) {
        float a = 0.f;
        for (int c = l; c < m.nb; c += 32) {
            int is;
            if (idot_words) {
                dp_u32 w[8];
                int xw[8];
                m.words(r, c, w);
                xwords(xq, t, c, xw);
                const int sx = xq.s[(size_t)t * xq.nb + c];
                is = m.fmt == FMT_Q4_0 ? DpQ4_0::idot(w, xw, sx) : DpQ8_0::idot(w, xw, sx);
            } else {
                is = idot_elem(m, r, c, xq, t);
            }
            a = dp_acc(a, is, m.scale(r, c), xq.d[(size_t)t * xq.nb + c]);
        }
        acc[l] = a;
    }
    return butterfly(acc);
}

// f64 dot of dequantised row r with token t's unquantised x.
inline double row_f64(const HostMat& m, int r, const float* xt) {
    double s = 0.0;
    for (int c = 0; c < m.nb; c++) {
        double b = 0.0;
        for (int j = 0; j < 32; j++) b += (double)m.wint(r, c, j) * (double)xt[32 * c + j];
        s += (double)m.scale(r, c) * b;
    }
    return s;
}

// The epilogues (matvec.cu's mv_store): GLU silu(g) * u (f32; silu = g / (1 + exp(-g)),
// the GPU's expf is not correctly rounded, so GLU outputs may differ by an ulp or two from
// this host value), else s (+ res).
inline float epi_glu(float g, float u) { return (g / (1.0f + std::exp(-g))) * u; }
inline double epi_glu64(double g, double u) { return g / (1.0 + std::exp(-g)) * u; }

// Rows checked against the CPU references: every `stride`-th row, and rows 37 .. 239 (the
// bench's sub-matrix).
inline std::vector<int> sample_rows(int rows, int stride) {
    std::vector<int> v;
    for (int r = 0; r < rows; r++)
        if (r % stride == 0 || (r >= 37 && r < 240) || r == rows - 1) v.push_back(r);
    return v;
}

// f(i) for i in [0, n) on the machine's threads.
template <class F>
inline void parallel_for(int n, F f) {
    unsigned nt = std::thread::hardware_concurrency();
    if (nt == 0) nt = 1;
    if (nt > 32) nt = 32;
    std::vector<std::thread> th;
    for (unsigned w = 0; w < nt; w++)
        th.emplace_back([&, w]() {
            for (int i = (int)w; i < n; i += (int)nt) f(i);
        });
    for (auto& t : th) t.join();
}

}  // namespace dpref
