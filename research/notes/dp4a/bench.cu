// bench.cu — dp4a matvec research bench on the GPU machine (built and run by run.sh with
// nvcc; research only, not part of the engine or CI).
//
// usage: dpbench SHAPE FMT FAMILY
//   SHAPE: qgateup (Qwen2.5-7B gate+up 2 x 18944 x 3584, GLU) | qdown (3584 x 18944 + res)
//          | qo (3584 x 3584 + res) | lgateup (Llama-8B gate+up 2 x 14336 x 4096, GLU)
//   FMT: q4_0 | q8_0    FAMILY: engine | wa | wr
// One process per (shape, format, family): a faulting kernel loses only its own rows.
// For the shape it makes random planar weights (random quant bytes, f16 scales +-[2^-9,
// 2^-4)), 8 token vectors x (uniform [-1, 1), 1 in 128 values x10) and res; quantises x on
// the CPU (ref.h) and on the GPU (dp_quant_kernel) and compares them bit for bit; computes
// on the CPU, for sampled rows and every token, the dp4a arithmetic in its exact order
// (ref.h row_sum) and the f64 product of the dequantised weights with the unquantised x.
// Then per configuration of FAMILY and T = 1, 2, 4, 8 tokens per launch (the NT = T instance;
// the engine: its one-token entry at T = 1, its _tb entry at T = 1..8):
//   cpu    dp4a kernels: max |y - y_cpu| / max |y_cpu| and the bit-exact count (LIN: all
//          must be exact; GLU: the epilogue's expf is the GPU's, a few ulps may differ)
//   err64  max |y - ref64| / max |ref64| (the quantisation error of the arithmetic)
//   Tinv   outputs of token t in the T-token launch whose bits differ from a one-token
//          launch on token t alone (for dp4a: the NT = 1 instance; for the engine: its
//          one-token entry); at T = 8 also the NT = 8 instance run with 3 tokens
//   inv    the full matrix with a grid of 53 blocks, and rows 37..239 repacked as a
//          203-row matrix with the default grid and with 1 block, compared bit for bit with
//          the full launch (fixed-grid engine entries: the sub-matrix only)
//   time   a CUDA graph of M launches over `copies` copies of the weights (>= 3 and >= 3 x L2
//          per call, so every call reads DRAM), 3 warm-up and 50 timed replays, per-call
//          us = replay / M (median, min); GB/s of weight bytes; per-token = us(T) / us(1)
//          of the same configuration (the engine: over its one-token entry's us).
// Prints a table and one `ROW|...` line per (kernel, T).
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
#include "ref.h"

using namespace dpref;

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            printf("CUDA error %s at %s:%d: %s\n", #x, __FILE__, __LINE__, cudaGetErrorString(e_)); \
            fflush(stdout);                                                                     \
            exit(2);                                                                            \
        }                                                                                       \
    } while (0)

__global__ void nop_kernel() {}

struct Shape {
    const char* key;
    const char* label;
    int mode, rows, k, nmat;
    bool res;
};
static const Shape kShapes[] = {
    {"qgateup", "Qwen2.5-7B gate+up 2x18944x3584 (GLU)", DP_GLU, 18944, 3584, 2, false},
    {"qdown", "Qwen2.5-7B down 3584x18944 (+res)", DP_LIN, 3584, 18944, 1, true},
    {"qo", "Qwen2.5-7B q/o 3584x3584 (+res)", DP_LIN, 3584, 3584, 1, true},
    {"lgateup", "Llama-8B gate+up 2x14336x4096 (GLU)", DP_GLU, 14336, 4096, 2, false},
    // small shapes for the host-memory test run (cpu_shim/fake_runtime.cpp); k / 32 = 33
    // and 40 blocks: rows whose last lane round is partial
    {"tglu", "test gate+up 2x300x1056 (GLU)", DP_GLU, 300, 1056, 2, false},
    {"tlin", "test 260x1280 (+res)", DP_LIN, 260, 1280, 1, true},
};
static const int kTs[4] = {1, 2, 4, 8};
static const int kMaxT = 8;
static const int kSubR0 = 37, kSubN = 203;

// The engine's entries on an H200 (engine_tu.cu's header): one token, 2..8 tokens.
static const char* engine_one(const Shape& s, int fmt) {
    if (s.mode == DP_GLU) return (fmt == FMT_Q4_0 && s.k % 1024 == 0) ? "engine glu_wr_r1_d6" : "engine glu_r2";
    return "engine r2";
}
static const char* engine_tb(const Shape& s) { return s.mode == DP_GLU ? "engine glu_tb_r1" : "engine tb_r2"; }

static long bits_diff(const float* a, const float* b, size_t n) {
    long d = 0;
    for (size_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], 4) != 0;
    return d;
}

// Times launch_i(i) (i = 0 .. M-1) as a CUDA graph (see the header).
template <class L>
static bool time_graph(cudaStream_t st, int M, L launch_i, double* us_med, double* us_min, std::string* why) {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t ge = nullptr;
    if (cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        *why = "capture failed";
        return false;
    }
    cudaError_t le = cudaSuccess;
    for (int i = 0; i < M; i++) {
        const cudaError_t e = launch_i(i);
        if (e != cudaSuccess && le == cudaSuccess) le = e;
    }
    const cudaError_t ce = cudaStreamEndCapture(st, &g);
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
    for (int w = 0; w < 3; w++) CK(cudaGraphLaunch(ge, st));
    CK(cudaStreamSynchronize(st));
    const int reps = 50;
    std::vector<double> t(reps);
    for (int r = 0; r < reps; r++) {
        CK(cudaEventRecord(e0, st));
        CK(cudaGraphLaunch(ge, st));
        CK(cudaEventRecord(e1, st));
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

template <class T>
static T* dalloc(size_t n) {
    T* p = nullptr;
    CK(cudaMalloc(&p, n * sizeof(T)));
    return p;
}
template <class T>
static T* dupload(const T* h, size_t n) {
    T* p = dalloc<T>(n);
    CK(cudaMemcpy(p, h, n * sizeof(T), cudaMemcpyHostToDevice));
    return p;
}
static std::vector<float> dread(const float* p, size_t n) {
    std::vector<float> h(n);
    CK(cudaMemcpy(h.data(), p, n * 4, cudaMemcpyDeviceToHost));
    return h;
}

int main(int argc, char** argv) {
    if (argc < 4) {
        printf("usage: %s qgateup|qdown|qo|lgateup|tglu|tlin q4_0|q8_0 engine|wa|wr\n", argv[0]);
        return 1;
    }
    const Shape* sp = nullptr;
    for (const Shape& s : kShapes)
        if (strcmp(s.key, argv[1]) == 0) sp = &s;
    const int fmt = strcmp(argv[2], "q4_0") == 0 ? FMT_Q4_0 : (strcmp(argv[2], "q8_0") == 0 ? FMT_Q8_0 : -1);
    if (!sp || fmt < 0) {
        printf("unknown shape %s or format %s\n", argv[1], argv[2]);
        return 1;
    }
    const Shape& S = *sp;
    const std::string family = argv[3];
    const bool is_engine = family == "engine";

    CK(cudaSetDevice(0));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    const int sms = prop.multiProcessorCount;
    const size_t l2 = (size_t)prop.l2CacheSize;
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

    // ---- kernels of the family for this shape and format
    std::vector<const DpKernel*> all;
    {
        int (*lists[])(const DpKernel**) = {engine_kernels_1, engine_kernels_2, dp4a_kernels_1,
                                            dp4a_kernels_2, dp4a_kernels_3, dp4a_kernels_4};
        for (auto f : lists) {
            const DpKernel* t;
            const int n = f(&t);
            for (int i = 0; i < n; i++) all.push_back(&t[i]);
        }
    }
    const DpKernel* eng1 = nullptr;  // the engine's one-token choice
    std::vector<std::string> configs;
    std::vector<const DpKernel*> mine;
    for (const DpKernel* kk : all) {
        if (kk->fmt != fmt || kk->mode != S.mode) continue;
        if (is_engine && strcmp(kk->config, engine_one(S, fmt)) == 0) eng1 = kk;
        if (family != kk->family) continue;
        if (is_engine && strcmp(kk->config, engine_one(S, fmt)) != 0 && strcmp(kk->config, engine_tb(S)) != 0) continue;
        mine.push_back(kk);
        if (std::find(configs.begin(), configs.end(), kk->config) == configs.end()) configs.push_back(kk->config);
    }
    if (is_engine) {  // the one-token choice first (its time is the per-token base)
        std::stable_sort(configs.begin(), configs.end(), [&](const std::string& a, const std::string& b) {
            return (a == engine_one(S, fmt)) > (b == engine_one(S, fmt));
        });
        if (!eng1) {
            printf("no engine one-token entry for %s %s\n", S.key, fmt_name(fmt));
            return 1;
        }
    }

    // ---- data and CPU references
    Rng rng;
    rng.s ^= (uint64_t)(S.rows * 131 + S.k) * 0x100000001B3ull + (uint64_t)fmt * 977;
    const int nmat = S.nmat, nb = S.k / 32;
    std::vector<HostMat> mats;
    for (int m = 0; m < nmat; m++) mats.push_back(make_mat(fmt, S.rows, S.k, rng));
    const std::vector<float> x = make_x(kMaxT, S.k, rng);
    std::vector<float> res((size_t)kMaxT * S.rows);
    for (float& v : res) v = rng.pm1();
    const XQ xq = quantize(x, kMaxT, S.k);
    const std::vector<int> srows = sample_rows(S.rows, std::max(1, S.rows / 2048));
    const int ns = (int)srows.size();
    std::vector<float> want_cpu((size_t)kMaxT * ns);   // the dp4a arithmetic, exact order
    std::vector<double> want64((size_t)kMaxT * ns);    // f64, unquantised x
    parallel_for(ns, [&](int i) {
        const int r = srows[i];
        for (int t = 0; t < kMaxT; t++) {
            const float a = row_sum(mats[0], r, xq, t);
            const double a64 = row_f64(mats[0], r, &x[(size_t)t * S.k]);
            float v;
            double v64;
            if (S.mode == DP_GLU) {
                const float b = row_sum(mats[1], r, xq, t);
                const double b64 = row_f64(mats[1], r, &x[(size_t)t * S.k]);
                v = epi_glu(a, b);
                v64 = epi_glu64(a64, b64);
            } else {
                const float rv = res[(size_t)t * S.rows + r];
                v = S.res ? a + rv : a;
                v64 = S.res ? a64 + (double)rv : a64;
            }
            want_cpu[(size_t)t * ns + i] = v;
            want64[(size_t)t * ns + i] = v64;
        }
    });

    // ---- device buffers
    const size_t mat_bytes = mats[0].bytes.size();
    const size_t call_bytes = mat_bytes * nmat;
    int copies = (int)((3 * l2 + call_bytes - 1) / call_bytes);
    if (copies < 3) copies = 3;
    std::vector<std::vector<void*>> dw(copies);
    for (int c = 0; c < copies; c++)
        for (int m = 0; m < nmat; m++) dw[c].push_back(dupload(mats[m].bytes.data(), mat_bytes));
    void* dsub[2] = {nullptr, nullptr};
    for (int m = 0; m < nmat; m++) {
        const HostMat sm = sub_mat(mats[m], kSubR0, kSubN);
        dsub[m] = dupload(sm.bytes.data(), sm.bytes.size());
    }
    std::vector<float> res_sub((size_t)kMaxT * kSubN);
    for (int t = 0; t < kMaxT; t++)
        for (int i = 0; i < kSubN; i++) res_sub[(size_t)t * kSubN + i] = res[(size_t)t * S.rows + kSubR0 + i];
    float* dx = dupload(x.data(), x.size());
    float* dres = dupload(res.data(), res.size());
    float* dres_sub = dupload(res_sub.data(), res_sub.size());
    signed char* dxq = dalloc<signed char>((size_t)kMaxT * S.k);
    int2* dxds = dalloc<int2>((size_t)kMaxT * nb);
    float* dy = dalloc<float>((size_t)kMaxT * S.rows);
    float* dy1 = dalloc<float>((size_t)kMaxT * S.rows);
    float* dys = dalloc<float>((size_t)kMaxT * kSubN);

    printf("== %s | %s | family %s | %s, %d SMs, L2 %.0f MB | weights %.2f MB per call, %d copies "
           "(%.0f MB) | engine: T=1 %s, T>1 %s | CPU rows checked %d\n",
           S.label, fmt_name(fmt), family.c_str(), prop.name, sms, l2 / 1048576.0, call_bytes / 1e6,
           copies, copies * call_bytes / 1e6, engine_one(S, fmt), engine_tb(S), ns);

    // ---- the GPU quantisation against the CPU's, bit for bit
    const int M = copies * ((20 + copies - 1) / copies);  // launches per graph replay
    {
        CK(cudaMemset(dxq, 0x55, (size_t)kMaxT * S.k));
        CK(dp_quant_launch(dx, kMaxT, S.k, dxq, dxds, st));
        CK(cudaStreamSynchronize(st));
        std::vector<signed char> hq((size_t)kMaxT * S.k);
        std::vector<int2> hds((size_t)kMaxT * nb);
        CK(cudaMemcpy(hq.data(), dxq, hq.size(), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hds.data(), dxds, hds.size() * sizeof(int2), cudaMemcpyDeviceToHost));
        long dq = 0, dd = 0, ds = 0;
        for (size_t i = 0; i < hq.size(); i++) dq += hq[i] != (signed char)xq.q[i];
        for (size_t b = 0; b < hds.size(); b++) {
            dd += memcmp(&hds[b].x, &xq.d[b], 4) != 0;
            ds += hds[b].y != xq.s[b];
        }
        printf("  quantised x, GPU vs CPU: %ld quants, %ld scales, %ld sums differ (of %zu / %zu)%s\n", dq, dd,
               ds, hq.size(), hds.size(), dq + dd + ds ? "  !! MISMATCH" : "");
        printf("ROW|%s|%s|%s|quant check|q!=cpu=%ld|d!=cpu=%ld|s!=cpu=%ld\n", S.key, fmt_name(fmt),
               family.c_str(), dq, dd, ds);
        if (!is_engine) {
            for (int T : kTs) {
                double med = 0, mn = 0;
                std::string why;
                if (time_graph(st, M, [&](int) { return dp_quant_launch(dx, T, S.k, dxq, dxds, st); }, &med, &mn, &why))
                    printf("ROW|%s|%s|%s|quant x|T=%d|us=%.3f|usmin=%.3f\n", S.key, fmt_name(fmt), family.c_str(), T, med, mn);
            }
            // leave the 8 tokens' quantisation in place for the products
            CK(dp_quant_launch(dx, kMaxT, S.k, dxq, dxds, st));
            CK(cudaStreamSynchronize(st));
        }
    }
    if (is_engine) {
        double med = 0, mn = 0;
        std::string why;
        if (time_graph(st, M, [&](int) { return cudaLaunchKernel((const void*)nop_kernel, dim3(1), dim3(32), nullptr, 0, st); },
                       &med, &mn, &why))
            printf("  nop launch floor in a graph of %d launches: %.2f us per launch (min %.2f)\n", M, med, mn);
    }

    // Arguments: the full matrix (copy c) or the sub-matrix, T tokens from token t0.
    auto args = [&](int copy, bool sub, int T, int t0, float* y) {
        DpArgs a;
        a.wa = sub ? dsub[0] : dw[copy][0];
        a.wb = nmat > 1 ? (sub ? dsub[1] : dw[copy][1]) : nullptr;
        const int rows = sub ? kSubN : S.rows;
        a.x = dx + (size_t)t0 * S.k;
        a.xq = dxq + (size_t)t0 * S.k;
        a.xds = dxds + (size_t)t0 * nb;
        a.res = S.res ? (sub ? dres_sub : dres) + (size_t)t0 * rows : nullptr;
        a.y = y;
        a.rows = rows;
        a.k = S.k;
        a.ntok = T;
        return a;
    };
    auto run_sync = [&](const DpKernel* kk, const DpArgs& a, int grid, size_t nout) -> bool {
        CK(cudaMemset(a.y, 0xff, nout * 4));  // NaN
        cudaError_t e = kk->launch(a, grid, st);
        if (e == cudaSuccess) e = cudaStreamSynchronize(st);
        if (e != cudaSuccess) {
            printf("  %s launch failed: %s\n", kk->config, cudaGetErrorString(e));
            printf("ROW|%s|%s|%s|%s|FAILED %s\n", S.key, fmt_name(fmt), family.c_str(), kk->config, cudaGetErrorString(e));
            fflush(stdout);
            exit(3);  // the context may be unusable: run.sh goes on with the next process
        }
        return true;
    };
    auto prepare = [&](const DpKernel* kk, int* bps, int* regs, int* lmem) -> bool {
        const cudaError_t e = kk->prepare(S.rows, S.k, bps, regs, lmem);
        if (e != cudaSuccess || *bps <= 0) {
            printf("  %s (nt %d): %s\n", kk->config, kk->nt, e != cudaSuccess ? cudaGetErrorString(e) : "does not fit on an SM");
            cudaGetLastError();
            return false;
        }
        return true;
    };

    // One-token outputs of every token: the reference of the T-invariance check.
    auto one_token_all = [&](const DpKernel* k1) {
        int bps = 0, regs = 0, lmem = 0;
        if (!prepare(k1, &bps, &regs, &lmem)) return false;
        const int g = k1->grid(S.rows, S.k, sms, bps);
        for (int t = 0; t < kMaxT; t++)
            run_sync(k1, args(0, false, 1, t, dy1 + (size_t)t * S.rows), g, S.rows);
        return true;
    };
    std::vector<float> y1;
    if (is_engine) {
        if (one_token_all(eng1)) y1 = dread(dy1, (size_t)kMaxT * S.rows);
    }

    printf("  %-22s %2s %6s %4s %5s %5s %7s %9s %9s %7s %5s %7s %9s %15s %9s %s\n", "kernel", "T", "grid", "b/SM",
           "regs", "lmem", "smemKB", "us(med)", "us(min)", "GB/s", "%4TB", "perTok", "err64", "cpu(maxrel,bits)",
           "Tinv", "inv");
    fflush(stdout);
    double eng_us1 = 0;
    for (const std::string& cfg : configs) {
        std::vector<const DpKernel*> inst;
        for (const DpKernel* kk : mine)
            if (cfg == kk->config) inst.push_back(kk);
        if (!is_engine) {
            const DpKernel* k1 = nullptr;
            for (const DpKernel* kk : inst)
                if (kk->nt == 1) k1 = kk;
            y1.clear();
            if (k1 && one_token_all(k1)) y1 = dread(dy1, (size_t)kMaxT * S.rows);
        }
        double us1 = 0;
        for (int T : kTs) {
            const DpKernel* kk = nullptr;
            for (const DpKernel* c : inst)
                if (c->nt >= T && (!kk || c->nt < kk->nt)) kk = c;
            if (!kk) continue;
            int bps = 0, regs = 0, lmem = 0;
            if (!prepare(kk, &bps, &regs, &lmem)) continue;
            const int grid = kk->grid(S.rows, S.k, sms, bps);
            const size_t nout = (size_t)T * S.rows;
            run_sync(kk, args(0, false, T, 0, dy), grid, nout);
            const std::vector<float> yf = dread(dy, nout);
            // cpu / err64 on the sampled rows
            double cmax = 0, cref = 0, emax = 0, eref = 0;
            long cbits = 0, ccount = 0;
            bool finite = true;
            for (int t = 0; t < T; t++)
                for (int i = 0; i < ns; i++) {
                    const float v = yf[(size_t)t * S.rows + srows[i]];
                    if (!std::isfinite(v)) finite = false;
                    const float wc = want_cpu[(size_t)t * ns + i];
                    const double w64 = want64[(size_t)t * ns + i];
                    cmax = std::max(cmax, std::fabs((double)v - (double)wc));
                    cref = std::max(cref, std::fabs((double)wc));
                    emax = std::max(emax, std::fabs((double)v - w64));
                    eref = std::max(eref, std::fabs(w64));
                    cbits += memcmp(&v, &wc, 4) == 0;
                    ccount++;
                }
            const double err64 = finite ? emax / eref : INFINITY;
            char cpu[64];
            if (is_engine) snprintf(cpu, sizeof cpu, "-");
            else snprintf(cpu, sizeof cpu, "%.1e,%ld/%ld", finite ? cmax / cref : INFINITY, cbits, ccount);
            // T-invariance against the one-token launches
            long tinv = -1;
            const bool one_is_self = T == 1 && (kk->nt == 1 || (is_engine && kk == eng1));
            if (!y1.empty() && !one_is_self) {
                tinv = bits_diff(yf.data(), y1.data(), nout);
                if (T == kMaxT && !is_engine) {  // the NT = 8 instance with 3 tokens
                    run_sync(kk, args(0, false, 3, 0, dy), grid, (size_t)3 * S.rows);
                    const std::vector<float> y3 = dread(dy, (size_t)3 * S.rows);
                    tinv += bits_diff(y3.data(), y1.data(), y3.size());
                }
            }
            // grid / sub-matrix invariance
            long inv = 0;
            if (!kk->fixed_grid) {
                run_sync(kk, args(0, false, T, 0, dy), 53, nout);
                const std::vector<float> yg = dread(dy, nout);
                inv += bits_diff(yg.data(), yf.data(), nout);
            }
            std::vector<int> sgrids = {kk->grid(kSubN, S.k, sms, bps)};
            if (!kk->fixed_grid) sgrids.push_back(1);
            for (int g : sgrids) {
                run_sync(kk, args(0, true, T, 0, dys), g, (size_t)T * kSubN);
                const std::vector<float> ys = dread(dys, (size_t)T * kSubN);
                for (int t = 0; t < T; t++)
                    inv += bits_diff(&ys[(size_t)t * kSubN], &yf[(size_t)t * S.rows + kSubR0], kSubN);
            }
            // timing
            double med = 0, mn = 0;
            std::string why;
            const bool ok = time_graph(
                st, M, [&](int i) { return kk->launch(args(i % copies, false, T, 0, dy), grid, st); }, &med, &mn, &why);
            if (T == 1) us1 = med;
            if (is_engine && kk == eng1) eng_us1 = med;
            const double base = is_engine ? eng_us1 : us1;
            const double pertok = ok && base > 0 ? med / base : 0;
            const double gbs = ok ? call_bytes / (med * 1e-6) / 1e9 : 0;
            const bool choice = is_engine && ((T == 1 && kk == eng1) || (T > 1 && cfg == engine_tb(S)));
            const std::string name = cfg + (choice ? " *" : "");
            char ti[32], iv[32];
            snprintf(ti, sizeof ti, "%s", tinv < 0 ? "-" : (tinv == 0 ? "ok" : (std::to_string(tinv) + " DIFF").c_str()));
            snprintf(iv, sizeof iv, "%s", inv == 0 ? "ok" : (std::to_string(inv) + " DIFF").c_str());
            if (ok)
                printf("  %-22s %2d %6d %4d %5d %5d %7.1f %9.2f %9.2f %7.0f %4.0f%% %7.2f %9.2e %15s %9s %s\n",
                       name.c_str(), T, grid, bps, regs, lmem, kk->smem(S.rows, S.k) / 1024.0, med, mn, gbs,
                       100.0 * gbs / 4000.0, pertok, err64, cpu, ti, iv);
            else
                printf("  %-22s %2d -- %s\n", name.c_str(), T, why.c_str());
            printf("ROW|%s|%s|%s|%s|T=%d|nt=%d|grid=%d|bps=%d|regs=%d|lmem=%d|smemKB=%.1f|us=%.3f|usmin=%.3f|"
                   "GBs=%.0f|pertok=%.3f|err64=%.2e|cpu=%s|tinv=%s|inv=%s|%s\n",
                   S.key, fmt_name(fmt), family.c_str(), name.c_str(), T, kk->nt, grid, bps, regs, lmem,
                   kk->smem(S.rows, S.k) / 1024.0, med, mn, gbs, pertok, err64, cpu, ti, iv, why.c_str());
            fflush(stdout);
        }
    }
    return 0;
}
