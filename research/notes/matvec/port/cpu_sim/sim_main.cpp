// sim_main.cpp — runs matvec.cu's streamed entry points (matvec_<fmt>[_glu]_wr_r<R>_d<D>) and
// today's one-token entry points on the CPU (shim_pre.h / shim_post.h, the sources made one
// C++ file by gen.py; run.sh builds and runs it) and compares every output bit for bit: Q4_0
// and Q8_0, every epilogue, odd row counts, several grids, cp.async copies landing at issue
// or as late as wait_group allows. `sim quick` skips some shapes and grids. `sim seg [quick]`:
// the segmented entry points (matvec_<fmt>_seg3_wr_r4_d<D>, q / k / v in one launch) only.
#include GEN
#include <cstdio>
#include <thread>

namespace sim {
thread_local SimDim t_idx, b_idx;
SimDim g_dim, b_dim;
std::barrier<>* block_bar = nullptr;
std::barrier<>* warp_bar[32];
float xf[32][32];
double xd[32][32];
alignas(128) unsigned char smem[232448];
bool late = false;
thread_local std::vector<Copy> cur;
thread_local std::vector<std::vector<Copy>> pend;
}  // namespace sim

template <class... P, class... A>
static void launch(void (*k)(P...), int grid, size_t smem, A... args) {
    if (smem > sizeof(sim::smem)) { printf("smem %zu\n", smem); exit(1); }
    const int threads = MV_WARPS * 32;
    sim::g_dim.x = grid;
    sim::b_dim.x = threads;
    for (int b = 0; b < grid; b++) {
        memset(sim::smem, 0xA5, smem);  // garbage, as on the GPU
        std::barrier<> bb(threads);
        std::vector<std::barrier<>*> wb;
        for (int w = 0; w < MV_WARPS; w++) wb.push_back(new std::barrier<>(32));
        sim::block_bar = &bb;
        for (int w = 0; w < MV_WARPS; w++) sim::warp_bar[w] = wb[w];
        std::vector<std::thread> th;
        for (int t = 0; t < threads; t++)
            th.emplace_back([=]() {
                sim::t_idx.x = t;
                sim::b_idx.x = b;
                sim::cur.clear();
                sim::pend.clear();
                k(args...);
            });
        for (auto& x : th) x.join();
        for (auto* p : wb) delete p;
    }
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd() { g_rng ^= g_rng << 13; g_rng ^= g_rng >> 7; g_rng ^= g_rng << 17; return g_rng; }
static float unif() { return (float)((double)(rnd() >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

// A planar matrix (formats.cuh): qb quant bytes per block for every block, then an f16 scale
// per block.
static std::vector<u8> make_mat(int rows, int k, int qb) {
    const size_t nblk = (size_t)rows * (k / 32);
    std::vector<u8> m(nblk * (qb + 2));
    for (size_t i = 0; i < nblk * qb; i++) m[i] = (u8)rnd();
    for (size_t i = 0; i < nblk; i++) {
        const uint64_t r = rnd();
        const u16 s = (u16)(((r & 1) << 15) | ((6 + (r >> 1) % 5) << 10) | ((r >> 8) & 1023));
        memcpy(&m[nblk * qb + 2 * i], &s, 2);
    }
    return m;
}

typedef void (*PlainFn)(const u8*, u64, const float*, const float*, const float*, float*, int,
                        int, int, const float*, float, float);
typedef void (*GluFn)(const u8*, const u8*, u64, const float*, float*, int, int, int, int,
                      const float*, float, float);

struct Fmt {
    const char* name;
    int qb;
    PlainFn today[3];  // r1, r2, r4
    GluFn today_glu;
    PlainFn wr[2];     // r4 d3, r4 d2
    GluFn wr_glu[2];   // r1 d6, r1 d4
};

static const int WR_R[2] = {4, 4}, WR_D[2] = {3, 2}, GLU_R[2] = {1, 1}, GLU_D[2] = {6, 4};

static size_t wr_smem(int qb, int units, int d, int k) {
    return (size_t)(k / 32) * MV_WR_XS * 4 + (size_t)MV_WARPS * d * units * 32 * (qb + 4);
}
static size_t today_smem(int k) { return (size_t)std::min(k / 32, MV_TILE) * MV_XCS * 4; }

static int g_runs = 0, g_fail = 0;
static void check(const char* what, const std::vector<float>& got, const std::vector<float>& want) {
    long bad = 0, first = -1;
    for (size_t i = 0; i < want.size(); i++)
        if (memcmp(&got[i], &want[i], 4) != 0) { bad++; if (first < 0) first = (long)i; }
    g_runs++;
    if (bad) {
        g_fail++;
        if (g_fail <= 20)
            printf("FAIL %s: %ld of %zu differ (first %ld: got %.9g want %.9g)\n", what, bad,
                   want.size(), first, got[first], want[first]);
    }
}

// The epilogues: (bias, norm, w_off, residual) for the plain product; (act, norm) for GLU.
struct PlainEpi { const char* name; bool bias, norm; float w_off; bool res; };
static const PlainEpi PLAIN[5] = {{"plain", false, false, 0, false}, {"+bias", true, false, 0, false},
                                  {"residual", false, false, 0, true}, {"rmsnorm +bias", true, true, 0, false},
                                  {"rmsnorm w_off=1 +residual", false, true, 1, true}};
struct GluEpi { const char* name; int act; bool norm; };
static const GluEpi GLUE[2] = {{"glu silu", 0, false}, {"rmsnorm+glu gelu", 1, true}};

static void run_shape(const Fmt& F, int rows, int k, bool quick) {
    const std::vector<u8> w = make_mat(rows, k, F.qb), wu = make_mat(rows, k, F.qb);
    std::vector<float> x(k), bias(rows), res(rows), nw(k);
    for (float& v : x) v = unif();
    for (float& v : bias) v = unif();
    for (float& v : res) v = unif();
    for (float& v : nw) v = 1.f + 0.1f * unif();
    const u64 rb = (u64)(k / 32) * (F.qb + 2);
    for (const PlainEpi& e : PLAIN) {
        // today's r1 (its bits: every R gives them), then r4 for good measure
        std::vector<float> want(rows, NAN), want4(rows, NAN);
        if (e.res) { want = res; want4 = res; }
        launch(F.today[0], (rows + MV_WARPS - 1) / MV_WARPS, today_smem(k), w.data(), rb,
               (const float*)x.data(), e.bias ? (const float*)bias.data() : nullptr,
               e.res ? (const float*)want.data() : nullptr, want.data(), rows, k, 1,
               e.norm ? (const float*)nw.data() : nullptr, 1e-5f, e.w_off);
        launch(F.today[2], (rows + 4 * MV_WARPS - 1) / (4 * MV_WARPS), today_smem(k), w.data(), rb,
               (const float*)x.data(), e.bias ? (const float*)bias.data() : nullptr,
               e.res ? (const float*)want4.data() : nullptr, want4.data(), rows, k, 1,
               e.norm ? (const float*)nw.data() : nullptr, 1e-5f, e.w_off);
        char what[256];
        snprintf(what, sizeof what, "%s rows %d k %d %s: today r4 vs r1", F.name, rows, k, e.name);
        check(what, want4, want);
        for (int c = 0; c < 2; c++) {
            const int groups = (rows + WR_R[c] - 1) / WR_R[c];
            const int dflt = std::min((groups + MV_WARPS - 1) / MV_WARPS, 8);
            for (int late = 0; late < 2; late++)
                for (int g : {1, 3, dflt}) {
                    if (quick && g == 3) continue;
                    sim::late = late;
                    std::vector<float> y(rows, NAN);
                    if (e.res) y = res;
                    launch(F.wr[c], g, wr_smem(F.qb, WR_R[c], WR_D[c], k), w.data(), rb,
                           (const float*)x.data(), e.bias ? (const float*)bias.data() : nullptr,
                           e.res ? (const float*)y.data() : nullptr, y.data(), rows, k, 1,
                           e.norm ? (const float*)nw.data() : nullptr, 1e-5f, e.w_off);
                    snprintf(what, sizeof what, "%s rows %d k %d %s: wr r%d d%d grid %d late %d", F.name,
                             rows, k, e.name, WR_R[c], WR_D[c], g, late);
                    check(what, y, want);
                }
        }
    }
    for (const GluEpi& e : GLUE) {
        std::vector<float> want(rows, NAN);
        launch(F.today_glu, (rows + MV_WARPS - 1) / MV_WARPS, today_smem(k), w.data(), wu.data(), rb,
               (const float*)x.data(), want.data(), rows, k, 1, e.act,
               e.norm ? (const float*)nw.data() : nullptr, 1e-5f, 0.f);
        for (int c = 0; c < 2; c++) {
            const int dflt = std::min((rows + MV_WARPS - 1) / MV_WARPS, 8);
            for (int late = 0; late < 2; late++)
                for (int g : {1, 3, dflt}) {
                    if (quick && g == 3) continue;
                    sim::late = late;
                    std::vector<float> y(rows, NAN);
                    launch(F.wr_glu[c], g, wr_smem(F.qb, 2 * GLU_R[c], GLU_D[c], k), w.data(), wu.data(),
                           rb, (const float*)x.data(), y.data(), rows, k, 1, e.act,
                           e.norm ? (const float*)nw.data() : nullptr, 1e-5f, 0.f);
                    char what[256];
                    snprintf(what, sizeof what, "%s rows %d k %d %s: wr glu r%d d%d grid %d late %d",
                             F.name, rows, k, e.name, GLU_R[c], GLU_D[c], g, late);
                    check(what, y, want);
                }
        }
    }
}

// The segmented entry points (matvec_<fmt>_seg3_wr_r4_d<D>: q, k and v in one streamed
// launch): each matrix's rows against that matrix alone in today's r1 entry point, bit for
// bit, for every grid from 1 block to one warp per row group, copies landing at issue or late.
typedef void (*SegFn)(const u8*, const u8*, const u8*, const float*, const float*, const float*,
                      const float*, float*, float*, float*, int, int, int, int, const float*,
                      float, float);

static void run_seg(const Fmt& F, const SegFn seg[2], const int rows[3], int k, bool quick) {
    std::vector<u8> w[3];
    std::vector<float> bias[3];
    for (int s = 0; s < 3; s++) {
        w[s] = make_mat(rows[s], k, F.qb);
        bias[s].resize(rows[s]);
        for (float& v : bias[s]) v = unif();
    }
    std::vector<float> x(k), nw(k);
    for (float& v : x) v = unif();
    for (float& v : nw) v = 1.f + 0.1f * unif();
    const u64 rb = (u64)(k / 32) * (F.qb + 2);
    for (const PlainEpi& e : PLAIN) {
        if (e.res) continue;  // no residual in the segmented launch
        std::vector<float> want[3];
        for (int s = 0; s < 3; s++) {
            want[s].assign(rows[s], NAN);
            launch(F.today[0], (rows[s] + MV_WARPS - 1) / MV_WARPS, today_smem(k), w[s].data(), rb,
                   (const float*)x.data(), e.bias ? (const float*)bias[s].data() : nullptr,
                   (const float*)nullptr, want[s].data(), rows[s], k, 1,
                   e.norm ? (const float*)nw.data() : nullptr, 1e-5f, e.w_off);
        }
        for (int c = 0; c < 2; c++) {
            int groups = 0;
            for (int s = 0; s < 3; s++) groups += (rows[s] + WR_R[c] - 1) / WR_R[c];
            const int dflt = std::min((groups + MV_WARPS - 1) / MV_WARPS, 8);
            for (int late = 0; late < 2; late++)
                for (int g : {1, 2, 3, dflt}) {
                    if (quick && (g == 2 || g == 3)) continue;
                    sim::late = late;
                    std::vector<float> y[3];
                    for (int s = 0; s < 3; s++) y[s].assign(rows[s], NAN);
                    const float* b[3];
                    for (int s = 0; s < 3; s++) b[s] = e.bias ? bias[s].data() : nullptr;
                    launch(seg[c], g, wr_smem(F.qb, WR_R[c], WR_D[c], k), (const u8*)w[0].data(),
                           (const u8*)w[1].data(), (const u8*)w[2].data(), (const float*)x.data(),
                           b[0], b[1], b[2], y[0].data(), y[1].data(), y[2].data(), rows[0], rows[1],
                           rows[2], k, e.norm ? (const float*)nw.data() : nullptr, 1e-5f, e.w_off);
                    for (int s = 0; s < 3; s++) {
                        char what[256];
                        snprintf(what, sizeof what,
                                 "%s rows %d+%d+%d k %d %s: seg3 r%d d%d grid %d late %d, matrix %d",
                                 F.name, rows[0], rows[1], rows[2], k, e.name, WR_R[c], WR_D[c], g,
                                 late, s);
                        check(what, y[s], want[s]);
                    }
                }
        }
    }
}

int main(int argc, char** argv) {
    // `sim seg [quick]`: the segmented entry points only.
    if (argc > 1 && strcmp(argv[1], "seg") == 0) {
        const bool quick = argc > 2;
        const Fmt fmts[2] = {
            {"q4_0", 16, {matvec_q4_0_r1, matvec_q4_0_r2, matvec_q4_0_r4}, matvec_q4_0_glu_r1,
             {matvec_q4_0_wr_r4_d3, matvec_q4_0_wr_r4_d2}, {matvec_q4_0_glu_wr_r1_d6, matvec_q4_0_glu_wr_r1_d4}},
            {"q8_0", 32, {matvec_q8_0_r1, matvec_q8_0_r2, matvec_q8_0_r4}, matvec_q8_0_glu_r1,
             {matvec_q8_0_wr_r4_d3, matvec_q8_0_wr_r4_d2}, {matvec_q8_0_glu_wr_r1_d6, matvec_q8_0_glu_wr_r1_d4}},
        };
        const SegFn segs[2][2] = {{matvec_q4_0_seg3_wr_r4_d3, matvec_q4_0_seg3_wr_r4_d2},
                                  {matvec_q8_0_seg3_wr_r4_d3, matvec_q8_0_seg3_wr_r4_d2}};
        // Rows not multiples of 4 (groups padded per matrix), a one-row matrix, a matrix of
        // fewer rows than a group; more groups than a small grid's warps.
        const int shapes[3][4] = {{13, 5, 3, 1024}, {37, 9, 1, 2048}, {64, 16, 16, 1024}};
        for (int f = 0; f < 2; f++)
            for (int i = 0; i < (quick ? 2 : 3); i++)
                run_seg(fmts[f], segs[f], shapes[i], shapes[i][3], quick);
        printf("%d passed, %d failed\n", g_runs - g_fail, g_fail);
        return g_fail != 0;
    }
    const bool quick = argc > 1;
    const Fmt fmts[2] = {
        {"q4_0", 16, {matvec_q4_0_r1, matvec_q4_0_r2, matvec_q4_0_r4}, matvec_q4_0_glu_r1,
         {matvec_q4_0_wr_r4_d3, matvec_q4_0_wr_r4_d2}, {matvec_q4_0_glu_wr_r1_d6, matvec_q4_0_glu_wr_r1_d4}},
        {"q8_0", 32, {matvec_q8_0_r1, matvec_q8_0_r2, matvec_q8_0_r4}, matvec_q8_0_glu_r1,
         {matvec_q8_0_wr_r4_d3, matvec_q8_0_wr_r4_d2}, {matvec_q8_0_glu_wr_r1_d6, matvec_q8_0_glu_wr_r1_d4}},
    };
    for (const Fmt& F : fmts) {
        // k = 1024 (one step per row group), 2048, 3072; rows: fewer than a group, partial
        // last groups, more groups than a small grid's warps.
        run_shape(F, 5, 1024, quick);
        run_shape(F, 37, 2048, quick);
        if (!quick) {
            run_shape(F, 67, 1024, quick);
            run_shape(F, 13, 3072, quick);
        }
    }
    printf("%d passed, %d failed\n", g_runs - g_fail, g_fail);
    return g_fail != 0;
}
