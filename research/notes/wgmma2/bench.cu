// bench.cu — host bench of the gemmw2.cuh draft against gemmt.cu's warpgroup-MMA entries
// (gemmt_<f16|q4_0>[_glu]_w<128|256>) and cuBLAS, at Llama-3.1-8B product shapes. Built by
// run.sh with nvcc (one binary per kernel family: -DGW2_ONLY=0 the engine + cuBLAS, 1 ws,
// 2 sw, 3 tm) and run one process per (family, format, tile), so that a faulting or hanging
// kernel loses only its own rows. Not part of the engine or CI.
//
//   bench <ref|ws|sw|tm> <f16|q4_0> [128|256]
//
// Per case (n tokens x product): deterministic data made on the device; the engine's
// gemmt_<fmt>[_glu]_w128 gives the reference bits; each kernel's outputs are compared with
// them word for word (diff = outputs whose bits differ, 0 expected; unw = outputs left
// unwritten, from a NaN fill); time = median of REPS launches after WARM warm-ups, each
// launch timed alone with events, L2 flushed before each (GW2_NOFLUSH=1: not flushed).
// Output: one `ROW|...` line per (case, kernel), each kernel's first launch announced by a
// `-- <kernel> ...` line; a CUDA error names the last launch and (GW2_WATCHDOG builds) prints
// the draft's failure record (a timed-out mbarrier wait or a misaligned TMA box; see g2_fail).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <algorithm>
#include <cuda.h>
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include "gemmt.cu"
#include "gemmw2.cuh"

#ifndef GW2_ONLY
#define GW2_ONLY 0
#endif

// What the process is doing (the kernel launched last), for error messages.
static char g_what[160] = "setup";
static void wd_dump();
#define CK(x)                                                                               \
    do {                                                                                    \
        cudaError_t e_ = (x);                                                               \
        if (e_ != cudaSuccess) {                                                            \
            printf("!! CUDA error %s at line %d: %s (last launch: %s)\n", #x, __LINE__,      \
                   cudaGetErrorString(e_), g_what);                                         \
            wd_dump();                                                                      \
            fflush(stdout);                                                                 \
            exit(1);                                                                        \
        }                                                                                   \
    } while (0)

// GW2_WATCHDOG builds: gemmw2.cuh's failure records (g2_fail) land in host-mapped memory,
// readable after the trap has killed the context; printed by CK on an error.
static unsigned long long* g_mail = 0;
static void wd_init() {
#ifdef GW2_WATCHDOG
    if (cudaHostAlloc((void**)&g_mail, 64, cudaHostAllocMapped) != cudaSuccess) {
        printf("!! watchdog mailbox: cudaHostAlloc failed (failures will trap without a report)\n");
        g_mail = 0;
        return;
    }
    memset(g_mail, 0, 64);
    unsigned long long* dp = 0;
    if (cudaHostGetDevicePointer((void**)&dp, g_mail, 0) != cudaSuccess ||
        cudaMemcpyToSymbol(g2_wd_mail, &dp, sizeof dp) != cudaSuccess) {
        printf("!! watchdog mailbox: no device pointer (failures will trap without a report)\n");
        cudaFreeHost(g_mail);
        g_mail = 0;
    }
#endif
}
static void wd_dump() {
    if (!g_mail) return;
    static const char* what[3] = {"consumer wait on full", "producer wait on empty", "TMA check"};
    bool any = false;
    for (int i = 0; i < 3; i++) {
        const unsigned long long w0 = ((volatile unsigned long long*)g_mail)[2 * i];
        const unsigned long long w1 = ((volatile unsigned long long*)g_mail)[2 * i + 1];
        if (!(w0 >> 63)) continue;
        any = true;
        const int s = (int)((w0 >> 56) & 15), kt = (int)((w0 >> 40) & 0xFFFF);
        const int bx = (int)((w0 >> 28) & 0xFFF), by = (int)((w0 >> 12) & 0xFFFF), th = (int)(w0 & 0xFFF);
        if (i < 2)
            printf("!! watchdog: %s[%d] parity %d timed out at k step %d, block (%d,%d) thread %d; "
                   "mbarrier word 0x%016llx\n",
                   what[i], s, (int)((w0 >> 60) & 1), kt, bx, by, th, w1);
        else
            printf("!! watchdog: TMA box coordinate %d (innermost) or smem dst 0x%x misaligned at k step "
                   "%d, block (%d,%d) thread %d\n",
                   (int)(unsigned)(w1 & 0xFFFFFFFFu), (unsigned)(w1 >> 32), kt, bx, by, th);
    }
    if (!any)
        printf("!! watchdog: no record (not a barrier timeout nor a failed TMA check: e.g. another "
               "TMA fault, a bad wgmma operand, a memory fault)\n");
}

static_assert(sizeof(G2Map) == sizeof(CUtensorMap), "tensor map size");
static const int WARM = 3, REPS = 25;

// ---------------------------------------------------------------------------------------
// Device-side data.
__device__ __forceinline__ u32 bh(u64 i, u32 seed) {
    u64 z = i * 0x9E3779B97F4A7C15ull + (u64)seed * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull;
    z ^= z >> 31;
    z *= 0xBF58476D1CE4E5B9ull;
    z ^= z >> 29;
    z *= 0x94D049BB133111EBull;
    z ^= z >> 32;
    return (u32)z;
}
__device__ __forceinline__ float bu(u64 i, u32 seed) {  // uniform in [-1, 1)
    return (float)(bh(i, seed) >> 8) * (2.f / 16777216.f) - 1.f;
}
__global__ void bk_f16(u16* p, u64 cnt, u32 seed, float scale) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < cnt; i += (u64)gridDim.x * blockDim.x)
        p[i] = f32_to_f16(bu(i, seed) * scale);
}
__global__ void bk_f32(float* p, u64 cnt, u32 seed, float scale) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < cnt; i += (u64)gridDim.x * blockDim.x)
        p[i] = bu(i, seed) * scale;
}
// Q4_0 planar: rows * nb blocks of 16 quant bytes, then rows * nb f16 scales.
__global__ void bk_q4(u8* p, u64 qbytes, u64 nscales, u32 seed) {
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < qbytes + nscales;
         i += (u64)gridDim.x * blockDim.x) {
        if (i < qbytes) {
            p[i] = (u8)bh(i, seed);
        } else {
            const u64 j = i - qbytes;
            const float u = bu(j, seed ^ 0x5555u);
            ((u16*)(p + qbytes))[j] = f32_to_f16((u < 0.f ? -1.f : 1.f) * (0.002f + 0.006f * fabsf(u)));
        }
    }
}
// x's per-token power-of-two scale: 0.5, 1 or 2.
__global__ void bk_xsc(float* p, int n, u32 seed) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < n) p[t] = 0.5f * (float)(1u << (bh(t, seed) % 3u));
}
__global__ void bk_diff(const u32* a, const u32* b, u64 cnt, unsigned long long* out) {
    unsigned long long c = 0;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < cnt; i += (u64)gridDim.x * blockDim.x)
        c += a[i] != b[i];
    for (int o = 16; o > 0; o >>= 1) c += __shfl_down_sync(0xffffffffu, c, o);
    if ((threadIdx.x & 31) == 0 && c) atomicAdd(out, c);
}
__global__ void bk_count(const u32* a, u64 cnt, u32 pat, unsigned long long* out) {
    unsigned long long c = 0;
    for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < cnt; i += (u64)gridDim.x * blockDim.x)
        c += a[i] == pat;
    for (int o = 16; o > 0; o >>= 1) c += __shfl_down_sync(0xffffffffu, c, o);
    if ((threadIdx.x & 31) == 0 && c) atomicAdd(out, c);
}

// ---------------------------------------------------------------------------------------
typedef void (*PlainFn)(const u16*, const u16*, const float*, const void*, const void*, const void*,
                        float*, float*, float*, const float*, const float*, const float*, int, int,
                        int, const float*, int, int);
typedef void (*GluFn)(const u16*, const u16*, const float*, const void*, const void*, float*, int,
                      int, int, int);
typedef void (*PlainTmaFn)(const u16*, const u16*, const float*, const void*, const void*,
                           const void*, float*, float*, float*, const float*, const float*,
                           const float*, int, int, int, const float*, int, int, G2Maps);
typedef void (*GluTmaFn)(const u16*, const u16*, const float*, const void*, const void*, float*,
                         int, int, int, int, G2Maps);

// One kernel to run: its pointers (one of the four), block size, shared memory, tiles.
struct Kern {
    const char* name = "";
    PlainFn plain = 0;
    GluFn glu = 0;
    PlainTmaFn plain_t = 0;
    GluTmaFn glu_t = 0;
    int threads = 256;
    int smem = 0;
    int tok_tile = 128;  // tokens per block (grid x)
    int row_tile = 128;  // tile rows per block (grid y)
    int tma_tn = 0;      // TMA: x box rows
};

// A product: weights of `segs` matrices (rows r[i], k) or gate + up.
struct Prod {
    const char* name;
    int k;
    int segs;
    int r[3];
    bool glu, res, bias;
};
static const Prod PRODS[] = {
    {"qkv", 4096, 3, {4096, 1024, 1024}, false, false, true},
    {"o", 4096, 1, {4096, 0, 0}, false, true, false},
    {"gateup", 4096, 2, {14336, 14336, 0}, true, false, false},
    {"down", 14336, 1, {4096, 0, 0}, false, true, false},
};
static const int NS[] = {512, 2048};

struct Data {
    int n = 0, k = 0, q4 = 0;
    const Prod* p = 0;
    u16* x = 0;
    float* xsc = 0;
    void* w[3] = {0, 0, 0};  // per matrix (f16: into wall)
    u16* wall = 0;           // f16: every matrix, contiguous (cuBLAS)
    float* b[3] = {0, 0, 0};
    float* y = 0;      // outputs: segment i at y + n * (r0 + .. + r(i-1))
    float* yref = 0;   // reference bits
    float* yinit = 0;  // residual's initial y
    u64 ycnt = 0;
    int out_rows = 0;  // columns of y per token, all segments (gate + up: the gate's rows)
    int tile_rows = 0; // rows of the tiled launch (gate + up: twice)
    double flop = 0;
};

static void* dmalloc(size_t b) {
    void* p = 0;
    CK(cudaMalloc(&p, b));
    return p;
}
static void fill_f16(u16* p, u64 cnt, u32 seed, float scale) {
    bk_f16<<<2048, 256>>>(p, cnt, seed, scale);
    CK(cudaGetLastError());
}
static void fill_f32(float* p, u64 cnt, u32 seed, float scale) {
    bk_f32<<<1024, 256>>>(p, cnt, seed, scale);
    CK(cudaGetLastError());
}

static Data make(const Prod& p, int n, bool q4) {
    Data d;
    d.n = n;
    d.k = p.k;
    d.q4 = q4;
    d.p = &p;
    const int k = p.k;
    const u64 nb = k / 32;
    d.x = (u16*)dmalloc((size_t)n * k * 2);
    fill_f16(d.x, (u64)n * k, 11u + k, 1.f);
    d.xsc = (float*)dmalloc((size_t)n * 4);
    bk_xsc<<<(n + 255) / 256, 256>>>(d.xsc, n, 5u);
    int tot = 0;
    for (int i = 0; i < p.segs; i++) tot += p.r[i];
    if (!q4) {
        d.wall = (u16*)dmalloc((size_t)tot * k * 2);
        fill_f16(d.wall, (u64)tot * k, 23u + k, 0.05f);
        int off = 0;
        for (int i = 0; i < p.segs; i++) {
            d.w[i] = d.wall + (size_t)off * k;
            off += p.r[i];
        }
    } else {
        for (int i = 0; i < p.segs; i++) {
            const u64 qb = (u64)p.r[i] * nb * 16, sc = (u64)p.r[i] * nb;
            d.w[i] = dmalloc(qb + sc * 2);
            bk_q4<<<2048, 256>>>((u8*)d.w[i], qb, sc, 37u + 7u * i + k);
            CK(cudaGetLastError());
        }
    }
    if (p.bias)
        for (int i = 0; i < p.segs; i++) {
            d.b[i] = (float*)dmalloc((size_t)p.r[i] * 4);
            fill_f32(d.b[i], p.r[i], 41u + i, 0.5f);
        }
    d.out_rows = p.glu ? p.r[0] : tot;
    d.tile_rows = tot;
    d.ycnt = (u64)n * d.out_rows;
    d.y = (float*)dmalloc(d.ycnt * 4);
    d.yref = (float*)dmalloc(d.ycnt * 4);
    if (p.res) {
        d.yinit = (float*)dmalloc(d.ycnt * 4);
        fill_f32(d.yinit, d.ycnt, 53u, 1.f);
    }
    d.flop = 2.0 * n * (double)tot * k;
    CK(cudaDeviceSynchronize());
    return d;
}
static void release(Data& d) {
    cudaFree(d.x);
    cudaFree(d.xsc);
    if (d.wall)
        cudaFree(d.wall);
    else
        for (int i = 0; i < 3; i++)
            if (d.w[i]) cudaFree(d.w[i]);
    for (int i = 0; i < 3; i++)
        if (d.b[i]) cudaFree(d.b[i]);
    cudaFree(d.y);
    cudaFree(d.yref);
    if (d.yinit) cudaFree(d.yinit);
}

// ---------------------------------------------------------------------------------------
// TMA tensor maps (cuTensorMapEncodeTiled through the runtime's driver entry point).
typedef CUresult (*EncodeFn)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                             const cuuint64_t*, const cuuint32_t*, const cuuint32_t*,
                             CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                             CUtensorMapFloatOOBfill);
static EncodeFn g_encode = 0;
static bool tma_init() {
    void* fp = 0;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fp, 12000, cudaEnableDefault, &q) !=
            cudaSuccess ||
        fp == 0 || q != cudaDriverEntryPointSuccess) {
        printf("!! cuTensorMapEncodeTiled: no driver entry point\n");
        return false;
    }
    g_encode = (EncodeFn)fp;
    return true;
}
static G2Map encode2d(CUtensorMapDataType ty, const void* base, u64 dim0, u64 dim1, u64 stride1,
                      u32 box0, u32 box1, CUtensorMapSwizzle sw) {
    CUtensorMap m;
    memset(&m, 0, sizeof m);
    const cuuint64_t dims[2] = {dim0, dim1};
    const cuuint64_t strides[1] = {stride1};
    const cuuint32_t box[2] = {box0, box1};
    const cuuint32_t es[2] = {1, 1};
    const CUresult r = g_encode(&m, ty, 2, (void*)base, dims, strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                sw, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        printf("!! cuTensorMapEncodeTiled failed (%d): dims %llu x %llu stride %llu box %u x %u\n", (int)r,
               (unsigned long long)dim0, (unsigned long long)dim1, (unsigned long long)stride1, box0, box1);
        fflush(stdout);
        exit(1);
    }
    G2Map g;
    memcpy(&g, &m, sizeof g);
    return g;
}
// x: [n][k] f16, box 64 x tn rows; per segment: f16 [r][k] (box 64 x 64, 128-byte swizzle) or
// Q4_0 quants [r][nb * 16] bytes (box 32 x 64) and scales [r][nb] f16 (box 8 x 64).
static G2Maps make_maps(const Data& d, int tn) {
    G2Maps m;
    const int k = d.k;
    const u64 nb = k / 32;
    m.x = encode2d(CU_TENSOR_MAP_DATA_TYPE_FLOAT16, d.x, k, d.n, (u64)k * 2, 64, tn, CU_TENSOR_MAP_SWIZZLE_128B);
    for (int i = 0; i < 3; i++) {
        const int si = i < d.p->segs ? i : 0;
        const int r = d.p->r[si];
        if (!d.q4) {
            m.w[i] = encode2d(CU_TENSOR_MAP_DATA_TYPE_FLOAT16, d.w[si], k, r, (u64)k * 2, 64, 64,
                              CU_TENSOR_MAP_SWIZZLE_128B);
            m.s[i] = m.w[i];
        } else {
            m.w[i] = encode2d(CU_TENSOR_MAP_DATA_TYPE_UINT8, d.w[si], nb * 16, r, nb * 16, 32, 64,
                              CU_TENSOR_MAP_SWIZZLE_NONE);
            m.s[i] = encode2d(CU_TENSOR_MAP_DATA_TYPE_UINT16, (const u8*)d.w[si] + (u64)r * nb * 16, nb, r,
                              nb * 2, 8, 64, CU_TENSOR_MAP_SWIZZLE_NONE);
        }
    }
    return m;
}

// ---------------------------------------------------------------------------------------
static void prep_y(const Data& d) {
    if (d.yinit)
        CK(cudaMemcpy(d.y, d.yinit, d.ycnt * 4, cudaMemcpyDeviceToDevice));
    else
        CK(cudaMemset(d.y, 0xff, d.ycnt * 4));
}
static void launch(const Kern& kn, const Data& d, const G2Maps* maps) {
    const Prod& p = *d.p;
    const dim3 grid((d.n + kn.tok_tile - 1) / kn.tok_tile, (d.tile_rows + kn.row_tile - 1) / kn.row_tile);
    const int n = d.n, k = d.k;
    if (p.glu) {
        if (kn.glu_t) {
            const GluTmaFn f = kn.glu_t;
            f<<<grid, kn.threads, kn.smem>>>(d.x, d.x, d.xsc, d.w[0], d.w[1], d.y, p.r[0], k, n, 0, *maps);
        } else {
            const GluFn f = kn.glu;
            f<<<grid, kn.threads, kn.smem>>>(d.x, d.x, d.xsc, d.w[0], d.w[1], d.y, p.r[0], k, n, 0);
        }
        return;
    }
    float* ys[3];
    int off = 0;
    for (int i = 0; i < 3; i++) {
        ys[i] = d.y + (size_t)n * off;
        off += i < p.segs ? p.r[i] : 0;
    }
    const void* w[3];
    int r[3];
    for (int i = 0; i < 3; i++) {
        w[i] = i < p.segs ? d.w[i] : d.w[0];
        r[i] = i < p.segs ? p.r[i] : 0;
    }
    const float* res = p.res ? d.y : nullptr;
    if (kn.plain_t) {
        const PlainTmaFn f = kn.plain_t;
        f<<<grid, kn.threads, kn.smem>>>(d.x, d.x, d.xsc, w[0], w[1], w[2], ys[0], ys[1], ys[2], d.b[0],
                                         d.b[1], d.b[2], r[0], r[1], r[2], res, k, n, *maps);
    } else {
        const PlainFn f = kn.plain;
        f<<<grid, kn.threads, kn.smem>>>(d.x, d.x, d.xsc, w[0], w[1], w[2], ys[0], ys[1], ys[2], d.b[0],
                                         d.b[1], d.b[2], r[0], r[1], r[2], res, k, n);
    }
}

static unsigned long long* g_cnt = 0;
static unsigned long long count_diff(const float* a, const float* b, u64 cnt) {
    CK(cudaMemset(g_cnt, 0, 8));
    bk_diff<<<1024, 256>>>((const u32*)a, (const u32*)b, cnt, g_cnt);
    unsigned long long h = 0;
    CK(cudaMemcpy(&h, g_cnt, 8, cudaMemcpyDeviceToHost));
    return h;
}
static unsigned long long count_nan_fill(const float* a, u64 cnt) {
    CK(cudaMemset(g_cnt, 0, 8));
    bk_count<<<1024, 256>>>((const u32*)a, cnt, 0xffffffffu, g_cnt);
    unsigned long long h = 0;
    CK(cudaMemcpy(&h, g_cnt, 8, cudaMemcpyDeviceToHost));
    return h;
}

static void* g_flush = 0;
static const size_t FLUSH_BYTES = (size_t)256 << 20;
static bool g_do_flush = true;
template <class F>
static double median_us(F f) {
    for (int i = 0; i < WARM; i++) f();
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());
    std::vector<cudaEvent_t> a(REPS), b(REPS);
    for (int i = 0; i < REPS; i++) {
        CK(cudaEventCreate(&a[i]));
        CK(cudaEventCreate(&b[i]));
    }
    for (int i = 0; i < REPS; i++) {
        if (g_do_flush) CK(cudaMemsetAsync(g_flush, i & 0xff, FLUSH_BYTES));
        CK(cudaEventRecord(a[i]));
        f();
        CK(cudaEventRecord(b[i]));
    }
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());
    std::vector<float> ms(REPS);
    for (int i = 0; i < REPS; i++) {
        CK(cudaEventElapsedTime(&ms[i], a[i], b[i]));
        cudaEventDestroy(a[i]);
        cudaEventDestroy(b[i]);
    }
    std::sort(ms.begin(), ms.end());
    return 1000.0 * ms[REPS / 2];
}

static void row(const Data& d, const char* fmt, const char* kname, double us, long long diff,
                long long unw) {
    printf("ROW|n=%d|prod=%s|fmt=%s|kernel=%s|us=%.1f|TFLOPs=%.1f|diff=%lld|unw=%lld|\n", d.n, d.p->name, fmt,
           kname, us, us > 0 ? d.flop / us / 1e6 : 0.0, diff, unw);
    fflush(stdout);
}

// "-- <kernel> ..." before a kernel's first launch (and in CK's messages).
static void announce(const Kern& kn, const Data& d, const char* fmt) {
    const dim3 grid((d.n + kn.tok_tile - 1) / kn.tok_tile, (d.tile_rows + kn.row_tile - 1) / kn.row_tile);
    snprintf(g_what, sizeof g_what, "%s %s n=%d %s%s, grid %ux%u, %d threads, %d B smem", kn.name, d.p->name, d.n,
             fmt, d.p->glu ? " (glu entry)" : "", grid.x, grid.y, kn.threads, kn.smem);
    printf("-- %s\n", g_what);
    fflush(stdout);
}
// Correctness against yref, then the time.
static void run_kern(const Kern& kn, const Data& d, const char* fmt, const G2Maps* maps) {
    prep_y(d);
    announce(kn, d, fmt);
    launch(kn, d, maps);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    const long long diff = (long long)count_diff(d.y, d.yref, d.ycnt);
    const long long unw = d.yinit ? -1 : (long long)count_nan_fill(d.y, d.ycnt);
    const double us = median_us([&] { launch(kn, d, maps); });
    row(d, fmt, kn.name, us, diff, unw);
}

// The engine's entries.
static int gemmw_smem(int bn, bool glu) {
    const int pipe = 4 * (128 + bn) * 64 * 2, epi = glu ? 128 * (bn + 4) * 4 : 0;
    return (pipe > epi ? pipe : epi) + 1024;
}
static Kern engine_w(bool q4, int bn, bool glu) {
    Kern kn;
    kn.name = bn == 128 ? "engine_w128" : "engine_w256";
    if (!q4) {
        kn.plain = bn == 128 ? (PlainFn)gemmt_f16_w128 : (PlainFn)gemmt_f16_w256;
        kn.glu = bn == 128 ? (GluFn)gemmt_f16_glu_w128 : (GluFn)gemmt_f16_glu_w256;
    } else {
        kn.plain = bn == 128 ? (PlainFn)gemmt_q4_0_w128 : (PlainFn)gemmt_q4_0_w256;
        kn.glu = bn == 128 ? (GluFn)gemmt_q4_0_glu_w128 : (GluFn)gemmt_q4_0_glu_w256;
    }
    kn.smem = gemmw_smem(bn, glu);
    kn.row_tile = bn;
    const void* f = glu ? (const void*)kn.glu : (const void*)kn.plain;
    CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, kn.smem));
    return kn;
}
// gemmt.cu section 2 (mma.sync), 128-token tiles: a second witness of the reference bits.
static Kern engine_mma(bool q4, bool glu) {
    Kern kn;
    kn.name = "engine_mma128";
    if (!q4) {
        kn.plain = (PlainFn)gemmt_f16_m128_p1;
        kn.glu = (GluFn)gemmt_f16_glu_m128_p1;
    } else {
        kn.plain = (PlainFn)gemmt_q4_0_m128_p1;
        kn.glu = (GluFn)gemmt_q4_0_glu_m128_p1;
    }
    const int pipe = 3 * (128 + 128) * 40 * 2, epi = glu ? 128 * 132 * 4 : 0;
    kn.smem = pipe > epi ? pipe : epi;
    kn.row_tile = 128;
    const void* f = glu ? (const void*)kn.glu : (const void*)kn.plain;
    CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, kn.smem));
    return kn;
}

// The draft's entries of this binary's family.
static bool variant(const char* fam, bool q4, int tn, bool glu, Kern& kn) {
    static char name[64];
    snprintf(name, sizeof name, "%s_n%d", fam, tn);
    kn.name = name;
    kn.threads = G2_THREADS;
    bool found = false;
#define G2_PICK_(F, ORI, WF, TN)                                                          \
    if (!strcmp(fam, #F) && q4 == (WF == 1) && tn == TN) {                                \
        using C = G2Cfg<ORI, WF, TN>;                                                     \
        kn.smem = C::SMEM;                                                                \
        kn.tok_tile = C::XR;                                                              \
        kn.row_tile = C::WR;                                                              \
        found = true;
#define G2_PICK(F, ORI, WF, TN, FN, GFN)                                                  \
    G2_PICK_(F, ORI, WF, TN)                                                              \
        kn.plain = (PlainFn)FN;                                                           \
        kn.glu = (GluFn)GFN;                                                                   \
    }
#define G2_PICK_TMA(F, WF, TN, FN, GFN)                                                   \
    G2_PICK_(F, 1, WF, TN)                                                                \
        kn.plain_t = (PlainTmaFn)FN;                                                      \
        kn.glu_t = (GluTmaFn)GFN;                                                                  \
        kn.tma_tn = TN;                                                                   \
    }
#if GW2_ONLY == 1
    G2_PICK(ws, 0, 0, 128, gw2_ws_f16_n128, gw2_ws_f16_glu_n128)
    G2_PICK(ws, 0, 0, 256, gw2_ws_f16_n256, gw2_ws_f16_glu_n256)
    G2_PICK(ws, 0, 1, 128, gw2_ws_q4_0_n128, gw2_ws_q4_0_glu_n128)
    G2_PICK(ws, 0, 1, 256, gw2_ws_q4_0_n256, gw2_ws_q4_0_glu_n256)
#elif GW2_ONLY == 2
    G2_PICK(sw, 1, 0, 128, gw2_sw_f16_n128, gw2_sw_f16_glu_n128)
    G2_PICK(sw, 1, 0, 256, gw2_sw_f16_n256, gw2_sw_f16_glu_n256)
    G2_PICK(sw, 1, 1, 128, gw2_sw_q4_0_n128, gw2_sw_q4_0_glu_n128)
    G2_PICK(sw, 1, 1, 256, gw2_sw_q4_0_n256, gw2_sw_q4_0_glu_n256)
#elif GW2_ONLY == 3
    G2_PICK_TMA(tm, 0, 128, gw2_tm_f16_n128, gw2_tm_f16_glu_n128)
    G2_PICK_TMA(tm, 0, 256, gw2_tm_f16_n256, gw2_tm_f16_glu_n256)
    G2_PICK_TMA(tm, 1, 128, gw2_tm_q4_0_n128, gw2_tm_q4_0_glu_n128)
    G2_PICK_TMA(tm, 1, 256, gw2_tm_q4_0_n256, gw2_tm_q4_0_glu_n256)
#endif
#undef G2_PICK_
#undef G2_PICK_TMA
#undef G2_PICK
    if (!found) return false;
    const void* f = glu ? (kn.glu_t ? (const void*)kn.glu_t : (const void*)kn.glu)
                        : (kn.plain_t ? (const void*)kn.plain_t : (const void*)kn.plain);
    CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, kn.smem));
    return true;
}

int main(int argc, char** argv) {
    if (argc < 3) {
        printf("usage: %s <ref|ws|sw|tm> <f16|q4_0> [128|256]\n", argv[0]);
        return 2;
    }
    const char* fam = argv[1];
    const char* fmt = argv[2];
    const int tn = argc > 3 ? atoi(argv[3]) : 0;
    const bool q4 = !strcmp(fmt, "q4_0");
    const bool ref = !strcmp(fam, "ref");
    const bool tma = !strcmp(fam, "tm");
    g_do_flush = getenv("GW2_NOFLUSH") == 0;
    CK(cudaSetDevice(0));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("== bench %s %s %s on %s (%d SMs), binary GW2_ONLY=%d\n", fam, fmt, argc > 3 ? argv[3] : "-",
           prop.name, prop.multiProcessorCount, GW2_ONLY);
    g_cnt = (unsigned long long*)dmalloc(8);
    g_flush = dmalloc(FLUSH_BYTES);
    wd_init();
    if (tma && !tma_init()) return 1;
    cublasHandle_t h = 0;
    if (ref && !q4 && cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        printf("!! cublasCreate failed\n");
        h = 0;
    }
    for (int ni = 0; ni < 2; ni++)
        for (const Prod& p : PRODS) {
            const int n = NS[ni];
            Data d = make(p, n, q4);
            // Reference bits: the engine's w128 entry.
            const Kern e128 = engine_w(q4, 128, p.glu);
            prep_y(d);
            announce(e128, d, fmt);
            launch(e128, d, 0);
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(d.yref, d.y, d.ycnt * 4, cudaMemcpyDeviceToDevice));
            if (ref) {
                const long long unw = d.yinit ? -1 : (long long)count_nan_fill(d.yref, d.ycnt);
                row(d, fmt, e128.name, median_us([&] { launch(e128, d, 0); }), 0, unw);
                run_kern(engine_w(q4, 256, p.glu), d, fmt, 0);
                run_kern(engine_mma(q4, p.glu), d, fmt, 0);
                if (h) {
                    // cuBLAS: y[n][rows] = x W^T over every matrix of the product (f16 in, f32
                    // out), no epilogue; its own output buffer.
                    const int rows = d.tile_rows;
                    float* yc = (float*)dmalloc((size_t)n * rows * 4);
                    const float alpha = 1.f, beta = 0.f;
                    auto cb = [&] {
                        cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, rows, n, p.k, &alpha, d.wall, CUDA_R_16F,
                                     p.k, d.x, CUDA_R_16F, p.k, &beta, yc, CUDA_R_32F, rows,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
                    };
                    snprintf(g_what, sizeof g_what, "cublas_f16 %s n=%d", p.name, n);
                    row(d, fmt, "cublas_f16", median_us(cb), -1, -1);
                    cudaFree(yc);
                }
            } else {
                Kern kn;
                if (!variant(fam, q4, tn, p.glu, kn)) {
                    printf("!! no kernel %s %s n%d in this binary\n", fam, fmt, tn);
                    return 1;
                }
                bool ok = true;
                if (tma) {
                    // The TMA producer needs k % 256 == 0 (scale rows 16-byte strides) and
                    // segment rows multiples of 64.
                    ok = p.k % 256 == 0;
                    for (int i = 0; i < p.segs; i++) ok = ok && p.r[i] % 64 == 0;
                }
                if (ok) {
                    G2Maps maps;
                    if (tma) maps = make_maps(d, kn.tma_tn);
                    run_kern(kn, d, fmt, tma ? &maps : 0);
                } else {
                    printf("!! %s: shape not supported by the TMA producer\n", p.name);
                }
            }
            release(d);
        }
    if (h) cublasDestroy(h);
    printf("== done\n");
    return 0;
}
