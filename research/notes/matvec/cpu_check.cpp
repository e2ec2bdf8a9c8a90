// cpu_check.cpp — runs variants.cuh's kernels on the CPU (cpu_shim: one std::thread per CUDA
// thread, barriers for __syncthreads / shuffles, cp.async landing early or as late as
// allowed) on small matrices and checks every output bit for bit against a plain C++
// re-derivation of the per-row arithmetic (the engine's order for the exact form, the FAST
// order otherwise), for several grids and both cp.async timings. No GPU needed:
//   g++ -std=c++20 -O1 -ffp-contract=off -pthread -DMVX_SIM \
//       -I research/notes/matvec/cpu_shim -I research/notes/matvec \
//       research/notes/matvec/cpu_check.cpp -o /tmp/mvx_cpu_check && /tmp/mvx_cpu_check
#include <cstdio>
#include <functional>
#include <thread>
#include <vector>

#include "common/common.cuh"

namespace sim {
thread_local SimDim t_idx, b_idx;
SimDim g_dim, b_dim;
std::barrier<>* block_bar = nullptr;
std::barrier<>* warp_bar[32];
float xchg[32][32];
unsigned char* smem_base = nullptr;
bool g_late = false;
thread_local std::vector<Copy> cur_group;
thread_local std::vector<std::vector<Copy>> pending;
}  // namespace sim

namespace mvx {
alignas(16) unsigned char mvx_smem[232448];
}

#include "variants.cuh"

// Runs kernel(args...) as `grid` blocks of `threads` threads, one block after the other.
template <class... A>
static void sim_launch(void (*kern)(A...), int grid, int threads, size_t smem, A... args) {
    if (smem > sizeof(mvx::mvx_smem)) {
        printf("smem %zu too large\n", smem);
        exit(1);
    }
    sim::smem_base = mvx::mvx_smem;
    sim::g_dim.x = grid;
    sim::b_dim.x = threads;
    for (int b = 0; b < grid; b++) {
        memset(mvx::mvx_smem, 0xA5, smem);  // garbage, as on the GPU
        std::barrier<> bb(threads);
        std::vector<std::barrier<>*> wb;
        for (int w = 0; w < threads / 32; w++) wb.push_back(new std::barrier<>(32));
        sim::block_bar = &bb;
        for (int w = 0; w < threads / 32; w++) sim::warp_bar[w] = wb[w];
        std::vector<std::thread> th;
        for (int t = 0; t < threads; t++)
            th.emplace_back([=]() {
                sim::t_idx.x = t;
                sim::b_idx.x = b;
                sim::cur_group.clear();
                sim::pending.clear();
                kern(args...);
            });
        for (auto& x : th) x.join();
        for (auto* p : wb) delete p;
    }
}

// ---------------------------------------------------------------- data and reference

static uint64_t g_rng = 0x1234567887654321ull;
static uint64_t rnd() {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

struct Mat {
    int rows, k, nb;
    std::vector<u8> b;  // planar: quants, then f16 scales
};
static Mat make_mat(int rows, int k) {
    Mat m{rows, k, k / 32, {}};
    m.b.resize((size_t)rows * m.nb * 18);
    for (size_t i = 0; i < (size_t)rows * m.nb * 16; i++) m.b[i] = (u8)rnd();
    for (size_t i = 0; i < (size_t)rows * m.nb; i++) {
        const uint64_t r = rnd();
        const u16 s = (u16)(((r & 1) << 15) | ((6 + (r >> 1) % 5) << 10) | ((r >> 8) & 1023));
        memcpy(&m.b[(size_t)rows * m.nb * 16 + 2 * i], &s, 2);
    }
    return m;
}
static u16 scale_bits(const Mat& m, int r, int c) {
    u16 s;
    memcpy(&s, &m.b[(size_t)m.rows * m.nb * 16 + 2 * ((size_t)r * m.nb + c)], 2);
    return s;
}

// One row, written from the header's description (and matvec.cu's one-token body), not
// from variants.cuh's code.
static float ref_row(const Mat& m, int r, const std::vector<float>& x, bool fast) {
    float lane_acc[32];
    for (int l = 0; l < 32; l++) {
        float acc = 0.f;
        for (int c = l; c < m.nb; c += 32) {
            const u8* q = &m.b[((size_t)r * m.nb + c) * 16];
            const float* xc = &x[(size_t)c * 32];
            const float d = f16_to_f32(scale_bits(m, r, c));
            float s0 = 0.f, s1 = 0.f;
            for (int j = 0; j < 16; j++) {
                const int lo = q[j] & 15, hi = q[j] >> 4;
                if (fast) {
                    s0 = fmaf(0.5f + lo / 32.f, xc[j], s0);
                    s1 = fmaf(0.5f + hi / 32.f, xc[j + 16], s1);
                } else {
                    s0 = fmaf((float)(lo - 8), xc[j], s0);
                    s1 = fmaf((float)(hi - 8), xc[j + 16], s1);
                }
            }
            float S = s0 + s1;
            if (fast) {
                float X = 0.f;
                for (int j = 0; j < 32; j++) X = X + xc[j];
                S = S - 0.75f * X;
                acc = fmaf(32.f * d, S, acc);
            } else {
                acc = fmaf(d, S, acc);
            }
        }
        lane_acc[l] = acc;
    }
    for (int o = 16; o > 0; o >>= 1) {  // warp_sum's butterfly
        float n[32];
        for (int l = 0; l < 32; l++) n[l] = lane_acc[l] + lane_acc[l ^ o];
        memcpy(lane_acc, n, sizeof n);
    }
    return lane_acc[0];
}

struct Problem {
    int mode, rows, k;
    Mat a, b;
    std::vector<float> x, res;
    std::vector<float> want, want2;  // reference outputs
};
static Problem make_problem(int mode, int rows, int k, bool fast) {
    Problem p;
    p.mode = mode;
    p.rows = rows;
    p.k = k;
    p.a = make_mat(rows, k);
    if (mode == mvx::GLU || mode == mvx::PAIR) p.b = make_mat(rows, k);
    p.x.resize(k);
    for (float& v : p.x) v = (float)((double)(rnd() >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    p.res.resize(rows);
    for (float& v : p.res) v = (float)((double)(rnd() >> 11) / 9007199254740992.0 * 2.0 - 1.0);
    p.want.resize(rows);
    p.want2.resize(rows);
    for (int r = 0; r < rows; r++) {
        const float sa = ref_row(p.a, r, p.x, fast);
        const float sb = (mode == mvx::GLU || mode == mvx::PAIR) ? ref_row(p.b, r, p.x, fast) : 0.f;
        switch (mode) {
            case mvx::PLAIN: p.want[r] = sa; break;
            case mvx::RESID: p.want[r] = sa + p.res[r]; break;
            case mvx::GLU: p.want[r] = silu(sa) * sb; break;
            default: p.want[r] = sa; p.want2[r] = sb;
        }
    }
    return p;
}

static int g_fail = 0, g_runs = 0;

static void check(const char* what, const Problem& p, const std::vector<float>& y,
                  const std::vector<float>& y2) {
    long bad = 0;
    for (int r = 0; r < p.rows; r++) {
        bad += memcmp(&y[r], &p.want[r], 4) != 0;
        if (p.mode == mvx::PAIR) bad += memcmp(&y2[r], &p.want2[r], 4) != 0;
    }
    g_runs++;
    if (bad) {
        g_fail++;
        printf("FAIL %s: %ld of %d outputs differ (row 0: got %.9g want %.9g)\n", what, bad, p.rows,
               y[0], p.want[0]);
    }
}

template <int R, int D, int MODE, bool FAST>
static void test_wr(int rows, int k, std::initializer_list<int> grids) {
    const Problem p = make_problem(MODE, rows, k, FAST);
    const size_t smem = mvx::wr_smem_bytes<R, D, MODE>(k);
    for (int late = 0; late < 2; late++)
        for (int g : grids) {
            sim::g_late = late;
            std::vector<float> y(rows, NAN), y2(rows, NAN);
            sim_launch(&mvx::mvx_wr<R, D, MODE, FAST, 1>, g, mvx::WR_WARPS * 32, smem,
                       (const u8*)p.a.b.data(), (const u8*)(p.b.b.empty() ? nullptr : p.b.b.data()),
                       (const float*)p.x.data(), (const float*)p.res.data(), y.data(), y2.data(),
                       rows, k);
            char what[160];
            snprintf(what, sizeof what, "wr R%d D%d mode %d fast %d rows %d k %d grid %d late %d", R,
                     D, MODE, (int)FAST, rows, k, g, late);
            check(what, p, y, y2);
        }
}

template <int CPT, int TR, int RPS, int R, int D, int B, int MODE, bool FAST>
static void test_sk(int rows, std::initializer_list<int> grids) {
    const int k = 32 * CPT * TR;
    const Problem p = make_problem(MODE, rows, k, FAST);
    const size_t smem = mvx::sk_smem_bytes<CPT, TR, RPS, R, D, B, MODE>();
    for (int late = 0; late < 2; late++)
        for (int g : grids) {
            sim::g_late = late;
            std::vector<float> y(rows, NAN), y2(rows, NAN);
            sim_launch(&mvx::mvx_sk<CPT, TR, RPS, R, D, B, MODE, FAST, 1>, g, RPS * TR, smem,
                       (const u8*)p.a.b.data(), (const u8*)(p.b.b.empty() ? nullptr : p.b.b.data()),
                       (const float*)p.x.data(), (const float*)p.res.data(), y.data(), y2.data(),
                       rows, k);
            char what[200];
            snprintf(what, sizeof what,
                     "sk c%d t%d g%d R%d D%d B%d mode %d fast %d rows %d k %d grid %d late %d", CPT,
                     TR, RPS, R, D, B, MODE, (int)FAST, rows, k, g, late);
            check(what, p, y, y2);
        }
}

int main() {
    using namespace mvx;
    // wr: small k (1 and 2 steps per row group), rows not a multiple of R, grids that give
    // warps 0, 1 or several groups.
    test_wr<1, 2, PLAIN, false>(5, 1024, {1, 2});
    test_wr<1, 4, PLAIN, false>(37, 2048, {1, 3});
    test_wr<2, 3, RESID, false>(37, 2048, {1, 2});
    test_wr<2, 4, GLU, false>(21, 1024, {1, 2});
    test_wr<4, 2, GLU, false>(19, 2048, {1});
    test_wr<1, 6, GLU, false>(9, 3072, {1, 2});
    test_wr<1, 4, PAIR, false>(23, 1024, {1, 2});
    test_wr<2, 4, GLU, true>(21, 2048, {1, 2});
    test_wr<2, 3, RESID, true>(13, 1024, {1});
    test_wr<2, 4, PLAIN, true>(17, 1024, {2});
    test_wr<4, 2, GLU, true>(11, 2048, {1, 2});
    test_wr<4, 3, PLAIN, true>(9, 1024, {1});
    // the bench's k
    test_wr<2, 4, GLU, false>(18, 4096, {1, 2});
    test_wr<2, 3, RESID, false>(9, 14336, {1});
    // sk: k = 32 CPT TR; rows not a multiple of RPS R; partial batches; grids larger than
    // the steps (blocks with no work)
    test_sk<1, 32, 2, 1, 2, 1, PLAIN, false>(7, {1, 3, 5});
    test_sk<1, 32, 2, 1, 4, 2, PLAIN, false>(23, {1, 2});
    test_sk<2, 32, 2, 1, 3, 4, RESID, false>(17, {1, 2});
    test_sk<1, 64, 2, 2, 4, 2, GLU, false>(13, {1, 2});
    test_sk<1, 32, 2, 1, 6, 4, GLU, false>(29, {1, 3});
    test_sk<1, 32, 1, 2, 3, 3, PAIR, false>(11, {1, 2});
    test_sk<1, 32, 2, 1, 6, 4, GLU, true>(29, {1, 2});
    test_sk<1, 64, 1, 1, 4, 2, RESID, true>(15, {2});
    // the bench's configurations, few rows
    test_sk<1, 128, 2, 1, 6, 4, GLU, false>(23, {1, 4});
    test_sk<1, 128, 2, 2, 3, 2, GLU, false>(17, {2});
    test_sk<1, 448, 1, 1, 6, 4, RESID, false>(11, {1, 2});
    test_sk<2, 224, 2, 1, 4, 4, RESID, false>(9, {1});
    test_sk<1, 448, 1, 1, 6, 4, RESID, true>(7, {2});
    test_sk<1, 128, 2, 2, 3, 2, GLU, true>(9, {1, 2});
    test_sk<1, 448, 1, 2, 4, 2, RESID, true>(5, {1});
    printf("%d passed, %d failed\n", g_runs - g_fail, g_fail);
    return g_fail != 0;
}
