// cpu_check.cpp — checks, on the CPU (no GPU or nvcc needed), the host references and the
// layout / arithmetic helpers that bench.cu and the kernels share, and the loop bookkeeping
// of the two kernel designs transcribed to plain C++:
//   g++ -std=c++17 -O2 -ffp-contract=off -Wno-unknown-pragmas -pthread
//       research/notes/dp4a/cpu_check.cpp -o /tmp/dp4a_cpu_check && /tmp/dp4a_cpu_check
// 1. half_to_float on every f16 against ldexp; the host dp4a emulation on known values.
// 2. The quantisation rule: |q| <= 127, the block's amax maps to +-127, |x - q d| <= d / 2,
//    zero blocks, ties to even, the sums.
// 3. dp4a_core.h's word-level idot (the code the kernels run) against the element-wise
//    definition from the planar layout (ref.h wint), both formats, random and extreme bytes;
//    row_sum with either is bit-identical; a deliberately wrong idot (nibbles swapped) is
//    caught.
// 4. row_sum against f64 sums of the same quantised products (scales used right), and the
//    quantisation error against the f64 product with the unquantised x (informative).
// 5. The loops of dp_wa (rounds of U blocks, clamped loads, guarded arithmetic) and dp_wr
//    (the cp.async ring: issue cursor D - 1 steps ahead across groups, slot arithmetic,
//    nsteps) transcribed: every lane adds exactly blocks l, l + 32, ... in order, and the
//    ring slot read at each step holds the block issued for it, for several nb, R, D, grids.
#include <cstdio>
#include <cstdlib>
#include <set>
#include <vector>

#include "ref.h"

using namespace dpref;

static int g_fail = 0;
#define CHECK(cond, ...)                    \
    do {                                    \
        if (!(cond)) {                      \
            printf("FAIL: " __VA_ARGS__);   \
            printf("\n");                   \
            g_fail++;                       \
        }                                   \
    } while (0)

static void check_half() {
    int bad = 0;
    for (int h = 0; h < 65536; h++) {
        const int e = (h >> 10) & 31, m = h & 1023;
        if (e == 31) continue;
        double v = e ? std::ldexp(1.0 + m / 1024.0, e - 15) : std::ldexp(m / 1024.0, -14);
        if (h & 0x8000) v = -v;
        const float f = half_to_float((uint16_t)h);
        if ((double)f != v || std::signbit(f) != (bool)(h & 0x8000)) bad++;
    }
    CHECK(bad == 0, "half_to_float: %d values wrong", bad);
    CHECK(dp_dp4a(0x7F7F7F7F, (int)0x81818181u, 0) == 4 * 127 * -127, "dp4a 127 x -127");
    CHECK(dp_dp4a((int)0x80808080u, (int)0x80808080u, 5) == 4 * 16384 + 5, "dp4a -128 x -128");
    CHECK(dp_dp4a(0x04030201, 0x01010101, -10) == 0, "dp4a bytes 1..4");
    CHECK(dp_dp4a(0x000000FF, 0x00000002, 0) == -2, "dp4a byte 0xFF is -1");
    printf("half / dp4a emulation: done\n");
}

static void check_quant() {
    Rng g;
    const int k = 4096;
    std::vector<float> x = make_x(2, k, g);
    for (int j = 0; j < 32; j++) x[64 + j] = 0.f;                       // a zero block
    for (int j = 0; j < 32; j++) x[96 + j] = (j == 0) ? 127.f : 0.f;      // d = 1 exactly
    x[97] = 2.5f;                                                          // tie -> 2
    x[98] = 3.5f;                                                          // tie -> 4
    x[99] = -2.5f;                                                         // tie -> -2
    const XQ q = quantize(x, 2, k);
    long bad_range = 0, bad_amax = 0, bad_err = 0, bad_sum = 0;
    for (int b = 0; b < 2 * q.nb; b++) {
        int qmax = 0, s = 0;
        float amax = 0.f;
        for (int j = 0; j < 32; j++) {
            const int v = q.q[32 * b + j];
            if (v < -127 || v > 127) bad_range++;
            qmax = std::max(qmax, std::abs(v));
            s += v;
            amax = std::max(amax, std::fabs(x[32 * b + j]));
            const double err = std::fabs((double)x[32 * b + j] - (double)v * q.d[b]);
            if (err > 0.5 * q.d[b] * (1 + 1e-6)) bad_err++;
        }
        if (amax > 0 && qmax != 127) bad_amax++;
        if (s != q.s[b]) bad_sum++;
    }
    CHECK(bad_range == 0 && bad_amax == 0 && bad_err == 0 && bad_sum == 0,
          "quantisation: range %ld, amax %ld, error %ld, sum %ld", bad_range, bad_amax, bad_err, bad_sum);
    bool zero = q.d[2] == 0.f && q.s[2] == 0;
    for (int j = 0; j < 32; j++) zero = zero && q.q[64 + j] == 0;
    CHECK(zero, "zero block");
    CHECK(q.d[3] == 1.f && q.q[96] == 127 && q.q[97] == 2 && q.q[98] == 4 && q.q[99] == -2,
          "ties to even: d %g q %d %d %d %d", q.d[3], q.q[96], q.q[97], q.q[98], q.q[99]);
    printf("quantisation rule: done (%d blocks)\n", 2 * q.nb);
}

// A wrong idot for the negative test: high and low nibbles swapped.
static int idot_q4_swapped(const dp_u32* q, const int* xw, int sx) {
    int s = -8 * sx;
    for (int i = 0; i < 4; i++) {
        s = dp_dp4a((int)((q[i] >> 4) & 0x0F0F0F0Fu), xw[i], s);
        s = dp_dp4a((int)(q[i] & 0x0F0F0F0Fu), xw[4 + i], s);
    }
    return s;
}

static void check_idot() {
    Rng g;
    for (int fmt : {FMT_Q4_0, FMT_Q8_0}) {
        const int rows = 37, k = 3584;
        HostMat m = make_mat(fmt, rows, k, g);
        // extremes in row 0: all quant bytes 0x80 (Q8_0: -128; Q4_0: 0 and 8) / 0xFF
        for (int c = 0; c < m.nb; c++)
            for (int j = 0; j < m.qb(); j++) m.bytes[((size_t)0 * m.nb + c) * m.qb() + j] = (c & 1) ? 0x80 : 0xFF;
        std::vector<float> x = make_x(3, k, g);
        for (int j = 0; j < 32; j++) x[j] = (j & 1) ? 1.f : -1.f;  // token 0 block 0: +-127
        const XQ q = quantize(x, 3, k);
        long bad = 0, swapped_differs = 0, n = 0;
        for (int r = 0; r < rows; r++)
            for (int t = 0; t < 3; t++)
                for (int c = 0; c < m.nb; c++) {
                    dp_u32 w[8];
                    int xw[8];
                    m.words(r, c, w);
                    xwords(q, t, c, xw);
                    const int sx = q.s[(size_t)t * q.nb + c];
                    const int a = fmt == FMT_Q4_0 ? DpQ4_0::idot(w, xw, sx) : DpQ8_0::idot(w, xw, sx);
                    const int b = idot_elem(m, r, c, q, t);
                    bad += a != b;
                    if (fmt == FMT_Q4_0) swapped_differs += idot_q4_swapped(w, xw, sx) != b;
                    n++;
                }
        CHECK(bad == 0, "%s idot words vs elements: %ld of %ld differ", fmt_name(fmt), bad, n);
        if (fmt == FMT_Q4_0) CHECK(swapped_differs > n / 2, "negative test: swapped nibbles caught in %ld of %ld", swapped_differs, n);
        long rb = 0;
        for (int r = 0; r < rows; r++)
            for (int t = 0; t < 3; t++) {
                const float a = row_sum(m, r, q, t, true), b = row_sum(m, r, q, t, false);
                rb += memcmp(&a, &b, 4) != 0;
            }
        CHECK(rb == 0, "%s row_sum words vs elements: %ld rows differ", fmt_name(fmt), rb);
        // sub_mat keeps every value and scale
        const HostMat s = sub_mat(m, 5, 20);
        long sb = 0;
        for (int r = 0; r < 20; r++)
            for (int c = 0; c < m.nb; c++) {
                sb += s.scale_bits(r, c) != m.scale_bits(r + 5, c);
                for (int j = 0; j < 32; j++) sb += s.wint(r, c, j) != m.wint(r + 5, c, j);
            }
        CHECK(sb == 0, "%s sub_mat: %ld differ", fmt_name(fmt), sb);
        // 4. against f64 sums of the same quantised products, and the quantisation error
        double dmax = 0, dref = 0, qmax = 0, qref = 0;
        for (int r = 0; r < rows; r++)
            for (int t = 0; t < 3; t++) {
                double s64 = 0;
                for (int c = 0; c < m.nb; c++)
                    s64 += (double)m.scale(r, c) * (double)q.d[(size_t)t * q.nb + c] * idot_elem(m, r, c, q, t);
                const double f = row_sum(m, r, q, t);
                const double u = row_f64(m, r, &x[(size_t)t * k]);
                dmax = std::max(dmax, std::fabs(f - s64));
                dref = std::max(dref, std::fabs(s64));
                qmax = std::max(qmax, std::fabs(f - u));
                qref = std::max(qref, std::fabs(u));
            }
        CHECK(dmax / dref < 1e-5, "%s row_sum vs f64 of the same products: %.2e", fmt_name(fmt), dmax / dref);
        CHECK(qmax / qref < 5e-2, "%s quantisation error too large: %.2e", fmt_name(fmt), qmax / qref);
        printf("%s: idot words == elements (%ld blocks), row_sum f32 vs f64 same products %.2e, "
               "vs f64 unquantised x %.2e (quantisation error)\n",
               fmt_name(fmt), n, dmax / dref, qmax / qref);
    }
}

// ---- 5. loop transcriptions (index bookkeeping only; the arithmetic is checked above)

// dp_wa: for each warp (grid-stride over groups), lane l's sequence of (group, block).
static bool wa_order_ok(int nb, int rows, int R, int U, int grid, int warps) {
    const int ngroups = (rows + R - 1) / R;
    std::vector<int> seen(ngroups, 0);
    for (int wg = 0; wg < grid * warps; wg++)
        for (int g = wg; g < ngroups; g += grid * warps) {
            seen[g]++;
            for (int lane = 0; lane < 32; lane++) {
                std::vector<int> seq;
                for (int c0 = 0; c0 < nb; c0 += 32 * U) {
                    for (int u = 0; u < U; u++) {
                        const int cl = std::min(c0 + lane + 32 * u, nb - 1);  // the load
                        if (cl < 0 || cl >= nb) return false;
                    }
                    for (int u = 0; u < U; u++) {
                        const int c = c0 + lane + 32 * u;
                        if (c < nb) seq.push_back(c);
                    }
                }
                std::vector<int> want;
                for (int c = lane; c < nb; c += 32) want.push_back(c);
                if (seq != want) return false;
            }
        }
    for (int v : seen)
        if (v != 1) return false;
    return true;
}

// dp_wr: one warp's issue / compute cursors through the ring (lane-independent except the
// block index), as in dp_wr_kernel.
static bool wr_order_ok(int nb, int rows, int R, int D, int grid, int warps) {
    const int spg = (nb + 31) >> 5;
    const int ngroups = (rows + R - 1) / R;
    const int gstride = grid * warps;
    std::vector<int> seen(ngroups, 0);
    for (int gw = 0; gw < gstride; gw++) {
        const int nsteps = gw < ngroups ? ((ngroups - 1 - gw) / gstride + 1) * spg : 0;
        for (int lane = 0; lane < 32; lane += 7) {
            std::vector<std::pair<int, int>> ring(D, {-1, -1});  // (group, block) per slot
            int iu = 0, ig = gw;
            auto issue = [&](int slot) {
                const int c = std::min(32 * iu + lane, nb - 1);
                ring[slot] = {ig, c};
                if (++iu == spg) {
                    iu = 0;
                    ig += gstride;
                }
            };
            for (int p = 0; p < D - 1; p++)
                if (p < nsteps) issue(p);
            int cu = 0, cg = gw, slot = 0;
            std::vector<int> seq;
            for (int st = 0; st < nsteps; st++) {
                if (st + D - 1 < nsteps) {
                    const int s2 = slot == 0 ? D - 1 : slot - 1;
                    if (st > 0 && s2 != (st - 1) % D) return false;  // refills the slot read last step
                    issue(s2);
                }
                const int c = 32 * cu + lane;
                if (ring[slot].first != cg || ring[slot].second != std::min(c, nb - 1)) return false;
                if (c < nb) seq.push_back(c);
                slot = slot == D - 1 ? 0 : slot + 1;
                if (++cu == spg) {
                    std::vector<int> want;
                    for (int cc = lane; cc < nb; cc += 32) want.push_back(cc);
                    if (seq != want) return false;
                    if (lane == 0) seen[cg]++;
                    seq.clear();
                    cu = 0;
                    cg += gstride;
                }
            }
            if (cu != 0) return false;
        }
    }
    for (int v : seen)
        if (v != 1) return false;
    return true;
}

static void check_loops() {
    int n = 0;
    for (int nb : {1, 31, 32, 33, 112, 128, 592})
        for (int rows : {1, 7, 203, 3584})
            for (int R : {1, 2, 4})
                for (int grid : {1, 3, 53, 1000}) {
                    for (int U : {1, 2, 4}) {
                        CHECK(wa_order_ok(nb, rows, R, U, grid, 8), "wa order nb %d rows %d R %d U %d grid %d", nb, rows, R, U, grid);
                        n++;
                    }
                    for (int D : {2, 3, 4, 6}) {
                        CHECK(wr_order_ok(nb, rows, R, D, grid, 8), "wr ring nb %d rows %d R %d D %d grid %d", nb, rows, R, D, grid);
                        n++;
                    }
                }
    printf("loop bookkeeping (wa rounds, wr ring): %d cases done\n", n);
}

int main() {
    check_half();
    check_quant();
    check_idot();
    check_loops();
    if (g_fail) {
        printf("cpu_check: %d FAILED\n", g_fail);
        return 1;
    }
    printf("cpu_check: all passed\n");
    return 0;
}
