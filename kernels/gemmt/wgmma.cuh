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
#pragma once
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
