// bench.cu — batch-1 Q4_0 matvec micro-benchmark at Llama-3.1-8B shapes on the GPU machine
// (built and run by run.sh with nvcc; research only, not part of the engine or CI).
//
// usage: mvbench SHAPE FAMILY   SHAPE: gateup | down | q | k | kv   FAMILY: engine | wr | sk
// One process per (shape, family), so that a faulting variant cannot take the other rows
// with it (run.sh loops). For the shape it:
//  1. makes one random planar Q4_0 matrix per operand (random quant bytes, random f16
//     scales of magnitude 2^-9 .. 2^-4 with random sign), x and res uniform in [-1, 1);
//  2. computes the reference on the CPU in f64 from the exactly dequantized values;
//  3. runs the engine's kernel for the shape (the entry point the engine selects on an H200)
//     as the bits baseline, then each kernel of FAMILY: max |y - ref| / max |ref|, the
//     number of outputs whose bits differ from the engine's (and, for FAST kernels, from the
//     first FAST kernel of the shape), and invariance: the full matrix with another grid
//     (53 blocks) and a 203-row sub-matrix (rows 37..239, repacked as its own planar matrix)
//     with the default grid and with one block, each compared bit for bit with the full
//     launch's rows;
//  4. times it: a CUDA graph of M launches, each on the next of `copies` copies of the
//     weights (copies >= 3 and >= 3 x L2 / bytes per call, so that every call reads DRAM),
//     replayed 50 times after warm-up; per-call time = replay time / M, median and min over
//     the replays; GB/s = weight bytes per call / median time (the launch gap inside the
//     graph is included; the `nop` row is that floor).
// Prints a readable table and one machine-readable `ROW|...` line per kernel.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <cuda_runtime.h>
#include "bench.h"

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            printf("CUDA error %s at %s:%d: %s\n", #x, __FILE__, __LINE__, cudaGetErrorString(e_)); \
            fflush(stdout);                                                                    \
            exit(2);                                                                           \
        }                                                                                      \
    } while (0)

__global__ void nop_kernel() {}

// ------------------------------------------------------------------------- random data

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static inline uint64_t rnd() {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}
static inline float urand_pm1() { return (float)((double)(rnd() >> 11) * (2.0 / 9007199254740992.0) - 1.0); }

// f16 bits of +-(1 + m / 1024) * 2^(e - 15), e in 6..10: |d| in [2^-9, 2^-4).
static uint16_t rand_scale() {
    const uint64_t r = rnd();
    const uint16_t sign = (uint16_t)((r & 1) << 15);
    const uint16_t e = (uint16_t)(6 + (r >> 1) % 5);
    const uint16_t m = (uint16_t)((r >> 8) & 1023);
    return (uint16_t)(sign | (e << 10) | m);
}
static double half_to_double(uint16_t h) {
    const int e = (h >> 10) & 31, m = h & 1023;
    const double v = e ? std::ldexp(1.0 + m / 1024.0, e - 15) : std::ldexp(m / 1024.0, -14);
    return (h & 0x8000) ? -v : v;
}

// A matrix in the engine's planar Q4_0 device layout (formats.cuh, ops::repack): plane 0 =
// the 16 quant bytes of every block, row-major; plane 1 = the f16 scale of every block.
struct HostMat {
    int rows = 0, k = 0, nb = 0;
    std::vector<uint8_t> bytes;  // rows * nb * 18
    size_t quant_bytes() const { return (size_t)rows * nb * 16; }
    const uint8_t* quants(int r, int b) const { return &bytes[((size_t)r * nb + b) * 16]; }
    uint16_t scale(int r, int b) const {
        const size_t o = quant_bytes() + ((size_t)r * nb + b) * 2;
        return (uint16_t)(bytes[o] | (bytes[o + 1] << 8));  // little-endian f16
    }
};

static HostMat make_mat(int rows, int k) {
    HostMat m;
    m.rows = rows;
    m.k = k;
    m.nb = k / 32;
    m.bytes.resize((size_t)rows * m.nb * 18);
    const size_t nq = m.quant_bytes();
    for (size_t i = 0; i < nq; i += 8) {
        const uint64_t r = rnd();
        memcpy(&m.bytes[i], &r, 8);  // nq is a multiple of 16
    }
    for (size_t b = 0; b < (size_t)rows * m.nb; b++) {
        const uint16_t s = rand_scale();
        m.bytes[nq + 2 * b] = (uint8_t)(s & 0xff);
        m.bytes[nq + 2 * b + 1] = (uint8_t)(s >> 8);
    }
    return m;
}

// Rows r0 .. r0 + n - 1 of m as a matrix of its own (its own planes).
static HostMat sub_mat(const HostMat& m, int r0, int n) {
    HostMat s;
    s.rows = n;
    s.k = m.k;
    s.nb = m.nb;
    s.bytes.resize((size_t)n * m.nb * 18);
    memcpy(&s.bytes[0], m.quants(r0, 0), (size_t)n * m.nb * 16);
    memcpy(&s.bytes[s.quant_bytes()], &m.bytes[m.quant_bytes() + (size_t)r0 * m.nb * 2],
           (size_t)n * m.nb * 2);
    return s;
}

// f64 reference: sum over blocks of d * sum_j (q_j - 8) x_j, exactly dequantized values.
static std::vector<double> ref_rows(const HostMat& m, const std::vector<float>& x) {
    std::vector<double> out(m.rows);
    for (int r = 0; r < m.rows; r++) {
        double acc = 0.0;
        for (int b = 0; b < m.nb; b++) {
            const uint8_t* q = m.quants(r, b);
            const float* xb = &x[(size_t)b * 32];
            double s = 0.0;
            for (int j = 0; j < 16; j++) {
                s += (double)((int)(q[j] & 15) - 8) * (double)xb[j];
                s += (double)((int)(q[j] >> 4) - 8) * (double)xb[j + 16];
            }
            acc += half_to_double(m.scale(r, b)) * s;
        }
        out[r] = acc;
    }
    return out;
}

// ------------------------------------------------------------------------- shapes

struct Shape {
    const char* key;
    const char* label;
    int mode, rows, k, nmat;
    const char* engine_choice;  // the entry point select.rs picks on an H200 (132 SMs)
};
static const Shape kShapes[] = {
    {"gateup", "gate+up 2x14336x4096 (GLU)", MV_GLU, 14336, 4096, 2, "engine glu_r2"},
    {"down", "down 4096x14336 (+res)", MV_RESID, 4096, 14336, 1, "engine r2"},
    {"q", "q 4096x4096", MV_PLAIN, 4096, 4096, 1, "engine r2"},
    {"k", "k 1024x4096", MV_PLAIN, 1024, 4096, 1, "engine r1"},
    {"kv", "k+v 2x1024x4096 (pair)", MV_PAIR, 1024, 4096, 2, "engine pair_r1"},
};

// ------------------------------------------------------------------------- device state

struct Dev {
    int sms = 0;
    size_t l2 = 0;
    cudaStream_t st = nullptr;
};

struct Operands {
    // copies[c][m]: copy c of matrix m
    std::vector<std::vector<void*>> copies;
    void* sub[2] = {nullptr, nullptr};  // the sub-matrix of each operand
    float* x = nullptr;
    float* res = nullptr;
    float* y = nullptr;
    float* y2 = nullptr;
    float* ys = nullptr;  // sub-matrix outputs
    float* ys2 = nullptr;
};

static MvArgs args_full(const Shape& s, const Operands& o, int copy) {
    MvArgs a;
    a.wa = o.copies[copy][0];
    a.wb = s.nmat > 1 ? o.copies[copy][1] : nullptr;
    a.x = o.x;
    a.res = s.mode == MV_RESID ? o.res : nullptr;
    a.y = o.y;
    a.y2 = s.mode == MV_PAIR ? o.y2 : nullptr;
    a.rows = s.rows;
    a.k = s.k;
    return a;
}

static const int kSubR0 = 37, kSubN = 203;

static MvArgs args_sub(const Shape& s, const Operands& o) {
    MvArgs a;
    a.wa = o.sub[0];
    a.wb = s.nmat > 1 ? o.sub[1] : nullptr;
    a.x = o.x;
    a.res = s.mode == MV_RESID ? o.res + kSubR0 : nullptr;
    a.y = o.ys;
    a.y2 = s.mode == MV_PAIR ? o.ys2 : nullptr;
    a.rows = kSubN;
    a.k = s.k;
    return a;
}

// Outputs of one launch: y (and y2 for PAIR) concatenated.
static std::vector<float> read_out(const Shape& s, const float* y, const float* y2, int rows) {
    std::vector<float> h((size_t)rows * (s.mode == MV_PAIR ? 2 : 1));
    CK(cudaMemcpy(h.data(), y, (size_t)rows * 4, cudaMemcpyDeviceToHost));
    if (s.mode == MV_PAIR) CK(cudaMemcpy(h.data() + rows, y2, (size_t)rows * 4, cudaMemcpyDeviceToHost));
    return h;
}

static void poison_out(const Shape& s, float* y, float* y2, int rows) {
    CK(cudaMemset(y, 0xff, (size_t)rows * 4));  // NaN
    if (s.mode == MV_PAIR) CK(cudaMemset(y2, 0xff, (size_t)rows * 4));
}

// Number of positions (of n) where the bits of a and b differ.
static long bits_diff(const float* a, const float* b, size_t n) {
    long d = 0;
    for (size_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], 4) != 0;
    return d;
}

struct Result {
    bool ok = false;
    std::string note;
    int grid = 0, bps = 0, regs = 0, lmem = 0;
    double smem_kb = 0;
    double us_med = 0, us_min = 0, gbs = 0;
    double err = 0;
    long diff_engine = -1, diff_fast = -1, inv = -1;
};

// Times `launch_i(i)` (i = 0 .. M-1, the i-th launch of one replay) as a CUDA graph.
template <class L>
static bool time_graph(Dev& d, int M, L launch_i, double* us_med, double* us_min, std::string* why) {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    if (cudaStreamBeginCapture(d.st, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        *why = "capture failed";
        return false;
    }
    cudaError_t le = cudaSuccess;
    for (int i = 0; i < M; i++) {
        const cudaError_t e = launch_i(i);
        if (e != cudaSuccess && le == cudaSuccess) le = e;
    }
    const cudaError_t ce = cudaStreamEndCapture(d.st, &g);
    if (le != cudaSuccess || ce != cudaSuccess) {
        *why = std::string("capture: ") + cudaGetErrorString(le != cudaSuccess ? le : ce);
        if (g) cudaGraphDestroy(g);
        cudaGetLastError();
        return false;
    }
    CK(cudaGraphInstantiateWithFlags(&ge, g, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int w = 0; w < 3; w++) CK(cudaGraphLaunch(ge, d.st));
    CK(cudaStreamSynchronize(d.st));
    const int reps = 50;
    std::vector<double> t(reps);
    for (int r = 0; r < reps; r++) {
        CK(cudaEventRecord(e0, d.st));
        CK(cudaGraphLaunch(ge, d.st));
        CK(cudaEventRecord(e1, d.st));
        CK(cudaEventSynchronize(e1));
        float ms = 0.f;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t[r] = 1000.0 * ms / M;
    }
    std::sort(t.begin(), t.end());
    *us_med = t[reps / 2];
    *us_min = t[0];
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    return true;
}

int main(int argc, char** argv) {
    if (argc < 3) {
        printf("usage: %s gateup|down|q|k|kv engine|wr|sk\n", argv[0]);
        return 1;
    }
    const Shape* sp = nullptr;
    for (const Shape& s : kShapes)
        if (strcmp(s.key, argv[1]) == 0) sp = &s;
    if (!sp) {
        printf("unknown shape %s\n", argv[1]);
        return 1;
    }
    const Shape& S = *sp;
    const std::string family = argv[2];

    Dev d;
    CK(cudaSetDevice(0));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    d.sms = prop.multiProcessorCount;
    d.l2 = (size_t)prop.l2CacheSize;
    CK(cudaStreamCreateWithFlags(&d.st, cudaStreamNonBlocking));

    // All kernels, the family's selected.
    std::vector<const MvKernel*> all;
    {
        const MvKernel* t;
        int n = engine_kernels(&t);
        for (int i = 0; i < n; i++) all.push_back(&t[i]);
        n = variant_kernels_1(&t);
        for (int i = 0; i < n; i++) all.push_back(&t[i]);
        n = variant_kernels_2(&t);
        for (int i = 0; i < n; i++) all.push_back(&t[i]);
        n = variant_kernels_3(&t);
        for (int i = 0; i < n; i++) all.push_back(&t[i]);
    }
    const MvKernel* base = nullptr;
    std::vector<const MvKernel*> run;
    for (const MvKernel* kk : all) {
        if (kk->mode != S.mode) continue;
        if (kk->k_only != 0 && kk->k_only != S.k) continue;
        if (strcmp(kk->family, "wr") == 0 && S.k % 1024 != 0) continue;
        if (strcmp(kk->family, "engine") == 0 && strcmp(kk->name, S.engine_choice) == 0) base = kk;
        if (family == kk->family) run.push_back(kk);
    }
    if (!base) {
        printf("no engine baseline for %s\n", S.key);
        return 1;
    }

    // ---- data
    const int nmat = S.nmat;
    std::vector<HostMat> mats;
    for (int m = 0; m < nmat; m++) mats.push_back(make_mat(S.rows, S.k));
    std::vector<float> x(S.k), res(S.rows);
    for (float& v : x) v = urand_pm1();
    for (float& v : res) v = urand_pm1();
    std::vector<double> ra = ref_rows(mats[0], x), rb;
    if (nmat > 1) rb = ref_rows(mats[1], x);
    // The expected outputs (y, then y2 for PAIR).
    std::vector<double> want((size_t)S.rows * (S.mode == MV_PAIR ? 2 : 1));
    for (int r = 0; r < S.rows; r++) {
        switch (S.mode) {
            case MV_PLAIN: want[r] = ra[r]; break;
            case MV_RESID: want[r] = ra[r] + (double)res[r]; break;
            case MV_GLU: want[r] = ra[r] / (1.0 + std::exp(-ra[r])) * rb[r]; break;
            default:
                want[r] = ra[r];
                want[(size_t)S.rows + r] = rb[r];
        }
    }
    double want_max = 0.0;
    for (double v : want) want_max = std::max(want_max, std::fabs(v));

    const size_t mat_bytes = mats[0].bytes.size();
    const size_t call_bytes = mat_bytes * nmat;
    int copies = (int)((3 * d.l2 + call_bytes - 1) / call_bytes);
    if (copies < 3) copies = 3;
    Operands o;
    o.copies.resize(copies);
    for (int c = 0; c < copies; c++)
        for (int m = 0; m < nmat; m++) {
            void* p = nullptr;
            CK(cudaMalloc(&p, mat_bytes));
            CK(cudaMemcpy(p, mats[m].bytes.data(), mat_bytes, cudaMemcpyHostToDevice));
            o.copies[c].push_back(p);
        }
    for (int m = 0; m < nmat; m++) {
        const HostMat sm = sub_mat(mats[m], kSubR0, kSubN);
        CK(cudaMalloc(&o.sub[m], sm.bytes.size()));
        CK(cudaMemcpy(o.sub[m], sm.bytes.data(), sm.bytes.size(), cudaMemcpyHostToDevice));
    }
    CK(cudaMalloc(&o.x, (size_t)S.k * 4));
    CK(cudaMemcpy(o.x, x.data(), (size_t)S.k * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&o.res, (size_t)S.rows * 4));
    CK(cudaMemcpy(o.res, res.data(), (size_t)S.rows * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&o.y, (size_t)S.rows * 4));
    CK(cudaMalloc(&o.y2, (size_t)S.rows * 4));
    CK(cudaMalloc(&o.ys, (size_t)kSubN * 4));
    CK(cudaMalloc(&o.ys2, (size_t)kSubN * 4));

    printf("== %s | family %s | %s, %d SMs, L2 %.0f MB | weights %.2f MB per call, %d copies "
           "(%.0f MB) | engine's choice: %s\n",
           S.label, family.c_str(), prop.name, d.sms, d.l2 / 1048576.0, call_bytes / 1e6, copies,
           copies * call_bytes / 1e6, S.engine_choice);
    fflush(stdout);

    // ---- the engine's output (bits baseline)
    std::vector<float> y_engine;
    {
        int bps = 0, regs = 0, lmem = 0;
        CK(base->prepare(S.rows, S.k, &bps, &regs, &lmem));
        poison_out(S, o.y, o.y2, S.rows);
        CK(base->launch(args_full(S, o, 0), 0, d.st));
        CK(cudaStreamSynchronize(d.st));
        y_engine = read_out(S, o.y, o.y2, S.rows);
    }
    const size_t nout = y_engine.size();
    std::vector<float> y_fast0;  // the first FAST kernel's output

    const int M = copies * ((20 + copies - 1) / copies);  // launches per graph replay

    // The launch floor: M empty launches per replay.
    if (family == "engine") {
        double med = 0, mn = 0;
        std::string why;
        if (time_graph(d, M, [&](int) { nop_kernel<<<1, 32, 0, d.st>>>(); return cudaGetLastError(); },
                       &med, &mn, &why))
            printf("  nop launch floor in a graph of %d launches: %.2f us per launch (min %.2f)\n", M,
                   med, mn);
    }

    printf("  %-30s %6s %4s %5s %5s %7s %9s %9s %8s %6s %9s %11s %11s %s\n", "kernel", "grid", "b/SM",
           "regs", "lmem", "smemKB", "us(med)", "us(min)", "GB/s", "%4TB", "err", "bits!=eng",
           "!=fast0", "invariance");
    fflush(stdout);

    for (const MvKernel* kk : run) {
        Result R;
        const bool is_base = kk == base;
        cudaError_t e = kk->prepare(S.rows, S.k, &R.bps, &R.regs, &R.lmem);
        R.smem_kb = kk->smem(S.rows, S.k) / 1024.0;
        if (e != cudaSuccess) {
            R.note = std::string("prepare: ") + cudaGetErrorString(e);
        } else if (R.bps <= 0) {
            R.note = "does not fit on an SM";
        } else {
            R.grid = kk->grid(S.rows, S.k, d.sms, R.bps);
            // correctness on copy 0 with the default grid
            poison_out(S, o.y, o.y2, S.rows);
            e = kk->launch(args_full(S, o, 0), R.grid, d.st);
            if (e == cudaSuccess) e = cudaStreamSynchronize(d.st);
            if (e != cudaSuccess) {
                printf("  %-30s launch failed: %s\n", kk->name, cudaGetErrorString(e));
                printf("ROW|%s|%s|%s|FAILED %s\n", S.key, family.c_str(), kk->name, cudaGetErrorString(e));
                fflush(stdout);
                return 3;  // the context may be unusable: let run.sh go on with the next process
            }
            const std::vector<float> yf = read_out(S, o.y, o.y2, S.rows);
            bool finite = true;
            double err = 0.0;
            for (size_t i = 0; i < nout; i++) {
                if (!std::isfinite(yf[i])) finite = false;
                err = std::max(err, std::fabs((double)yf[i] - want[i]));
            }
            R.err = finite ? err / want_max : INFINITY;
            R.diff_engine = bits_diff(yf.data(), y_engine.data(), nout);
            if (kk->fast) {
                if (y_fast0.empty()) y_fast0 = yf;
                R.diff_fast = bits_diff(yf.data(), y_fast0.data(), nout);
            }
            // invariance: another grid over the whole matrix, the sub-matrix with the default
            // grid and with one block; every output compared with the full launch's
            long inv = 0;
            auto cmp_sub = [&]() {
                const std::vector<float> ys = read_out(S, o.ys, o.ys2, kSubN);
                for (int i = 0; i < kSubN; i++) {
                    inv += memcmp(&ys[i], &yf[kSubR0 + i], 4) != 0;
                    if (S.mode == MV_PAIR)
                        inv += memcmp(&ys[kSubN + i], &yf[(size_t)S.rows + kSubR0 + i], 4) != 0;
                }
            };
            std::vector<int> grids_full, grids_sub;
            grids_sub.push_back(kk->grid(kSubN, S.k, d.sms, R.bps));
            if (!kk->fixed_grid) {
                grids_full.push_back(53);
                grids_sub.push_back(1);
            }
            for (int g : grids_full) {
                poison_out(S, o.y, o.y2, S.rows);
                CK(kk->launch(args_full(S, o, 0), g, d.st));
                CK(cudaStreamSynchronize(d.st));
                const std::vector<float> yg = read_out(S, o.y, o.y2, S.rows);
                inv += bits_diff(yg.data(), yf.data(), nout);
            }
            for (int g : grids_sub) {
                poison_out(S, o.ys, o.ys2, kSubN);
                CK(kk->launch(args_sub(S, o), g, d.st));
                CK(cudaStreamSynchronize(d.st));
                cmp_sub();
            }
            R.inv = inv;
            // timing
            std::string why;
            const int grid = R.grid;
            if (time_graph(d, M,
                           [&](int i) { return kk->launch(args_full(S, o, i % copies), grid, d.st); },
                           &R.us_med, &R.us_min, &why)) {
                R.gbs = call_bytes / (R.us_med * 1e-6) / 1e9;
                R.ok = true;
            } else {
                R.note = why;
            }
        }
        char errs[32], de[32], df[32], inv[48];
        snprintf(errs, sizeof errs, "%.2e", R.err);
        snprintf(de, sizeof de, "%ld", R.diff_engine);
        snprintf(df, sizeof df, "%s", R.diff_fast < 0 ? "-" : std::to_string(R.diff_fast).c_str());
        snprintf(inv, sizeof inv, "%s", R.inv < 0 ? "-" : (R.inv == 0 ? "ok" : (std::to_string(R.inv) + " DIFF").c_str()));
        std::string name = std::string(kk->name) + (is_base ? " *" : "");
        if (R.ok) {
            printf("  %-30s %6d %4d %5d %5d %7.1f %9.2f %9.2f %8.0f %5.0f%% %9s %11s %11s %s\n",
                   name.c_str(), R.grid, R.bps, R.regs, R.lmem, R.smem_kb, R.us_med, R.us_min, R.gbs,
                   100.0 * R.gbs / 4000.0, errs, de, df, inv);
        } else {
            printf("  %-30s -- %s\n", name.c_str(), R.note.c_str());
        }
        printf("ROW|%s|%s|%s|fast=%d|grid=%d|bps=%d|regs=%d|lmem=%d|smemKB=%.1f|us=%.3f|usmin=%.3f|"
               "GBs=%.0f|err=%s|bits!=engine=%s|bits!=fast0=%s|inv=%s|%s\n",
               S.key, family.c_str(), name.c_str(), kk->fast ? 1 : 0, R.grid, R.bps, R.regs, R.lmem,
               R.smem_kb, R.us_med, R.us_min, R.gbs, errs, de, df, inv, R.note.c_str());
        fflush(stdout);
    }
    return 0;
}
