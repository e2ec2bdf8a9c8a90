// gemmw2.cuh — research draft (not engine code): a warp-specialised warpgroup-MMA prompt-pass
// GEMM for sm_90a under gemmt.cu's contract. Include it after kernels/gemmt.cu (it uses that
// file's GtSegs, gt_wrow, gt_out, gt_store, gt_glu_store, gm_pair, gt_hmul2, gt_cp16,
// gt_smem, gw_desc, gw_sw, gw_mma, gw_fence, gw_commit, gw_wait0, gw_proxy_fence), so that
// its text could replace gemmt.cu section 3. research/notes/wgmma2/README.md has the design.
//
// Contract kept: y[t][r] = sum_k x[t][k] w[r][k], x in one f16 part, every output one f32
// accumulator (zeroed, then fed by the k16 steps in k order), the epilogues of gt_store /
// gt_glu_store; Q4_0 weights turned into the f16 values of gt_dq8 (q - 8 exact in f16, times
// the f16 scale rounded once). So the bits do not depend on the tile; nor, expected but to be
// measured (bench.cu), on the orientation (ORI 1 multiplies W x^T instead of x W^T).
//
// A block = 3 warpgroups (384 threads): warpgroup 0 the producer, 1 and 2 consumers. k in
// stages of G2_BK = 64 values, ST stages in a ring with a `full` and an `empty` mbarrier each;
// no __syncthreads in the main loop. Each consumer issues its wgmmas for stage kt, commits,
// waits with `wgmma.wait_group 1` (the tensor cores keep stage kt's group while the thread
// goes on) and then releases stage kt - 1 (one arrive per consumer warp).
//
// Orientation ORI (template):
//  0 "ws": A = x (the block's 128 tokens, 64 per consumer), B = TN weight rows (the engine's
//     section 3 orientation): wgmma.m64n<TN>k16, both operands from shared memory. Q4_0 is
//     decoded by the producer warpgroup into the swizzled f16 stage (raw blocks loaded into
//     registers two stages ahead).
//  1 "sw" (swapped): A = 128 weight rows (64 per consumer), B = TN tokens. f16 weights: both
//     operands from shared memory. Q4_0: the producer copies the raw planar blocks (quants,
//     scales) into the stage and each consumer decodes its A fragments in registers
//     (wgmma's register-A form), each k16 step's while the previous step's MMA runs.
// Producer LD (template): 0 cp.async by the producer warpgroup's 128 threads, completion
// signalled by `cp.async.mbarrier.arrive.noinc` (the GEMMW_ENTRY argument list, unchanged);
// 1 TMA (`cp.async.bulk.tensor`) issued by one thread, tensor maps built on the host and
// passed as one extra __grid_constant__ argument (ORI 1 only).
#pragma once

#define G2_BK 64
#define G2_THREADS 384

// The host's CUtensorMap (128 bytes, 64-byte aligned), opaque here.
struct alignas(64) G2Map {
    u64 v[16];
};
// x ([n][k] f16); per segment (plain: q, k, v; gate + up: gate, up): the f16 weights or the
// Q4_0 quant bytes, and the Q4_0 scales.
struct G2Maps {
    G2Map x, w[3], s[3];
};

// Shape of one variant: a stage is [x rows][weight rows], each row 128 bytes (64 f16 values)
// in the 128-byte swizzle, or for ORI 1 Q4_0 [x rows][128 rows x 32 quant bytes][128 rows x
// 16 bytes of f16 scales: cp.async (sw) writes the stage's pair at bytes 0..3; the TMA (tm)
// the 8 scales 8 (kt / 4) .. + 7, the stage's pair at bytes 4 (kt % 4) .. + 3]. The gate + up
// epilogue reuses the stages as a [tokens][cols + 4] float tile. SMEM: dynamic bytes to
// launch with (1024 to align).
template <int ORI, int WF, int TN>
struct G2Cfg {
    static constexpr bool RAW = ORI == 1 && WF == 1;
    static constexpr int XR = ORI == 0 ? 128 : TN;  // x rows (tokens) per block
    static constexpr int WR = ORI == 0 ? TN : 128;  // weight (tile) rows per block
    static constexpr int XBYTES = XR * 128;
    static constexpr int WBYTES = RAW ? 128 * 32 + 128 * 16 : WR * 128;
    static constexpr int STAGE = XBYTES + WBYTES;
    static constexpr int ST0 = 196608 / STAGE;
    static constexpr int ST = ST0 > 8 ? 8 : ST0;
    static constexpr int CLD = ORI == 0 ? TN + 4 : 128 + 4;
    static constexpr int EPI = XR * CLD * 4;
    static constexpr int SMEM = (ST * STAGE > EPI ? ST * STAGE : EPI) + 1024;
    // Bytes one stage's TMA loads bring (ORI 1).
    static constexpr int TX = XBYTES + (RAW ? 2 * 64 * 32 + 2 * 64 * 16 : 2 * 64 * 128);
};

// ---------------------------------------------------------------------------------------
// mbarrier, cp.async-arrive, TMA, wgmma register-A helpers.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define G2_SM90 1
#endif

__device__ __forceinline__ void g2_bar_init(u32 a, u32 count) {
#ifdef G2_SM90
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(a), "r"(count) : "memory");
#endif
}
__device__ __forceinline__ void g2_bar_init_fence() {
#ifdef G2_SM90
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
// Arrive (release, CTA scope).
__device__ __forceinline__ void g2_arrive(u32 a) {
#ifdef G2_SM90
    asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.shared::cta.b64 st, [%0];\n\t}" ::"r"(a)
                 : "memory");
#endif
}
// Arrive and expect `tx` bytes of asynchronous (TMA) writes in this phase.
__device__ __forceinline__ void g2_arrive_tx(u32 a, u32 tx) {
#ifdef G2_SM90
    asm volatile(
        "{\n\t.reg .b64 st;\n\tmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n\t}" ::"r"(a),
        "r"(tx)
        : "memory");
#endif
}
// Arrive once every cp.async this thread issued so far has landed (the count was set for it).
__device__ __forceinline__ void g2_cp_arrive(u32 a) {
#ifdef G2_SM90
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(a) : "memory");
#endif
}
__device__ __forceinline__ u32 g2_try(u32 a, u32 parity) {
    u32 ok = 1;
#ifdef G2_SM90
    asm volatile(
        "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(ok)
        : "r"(a), "r"(parity)
        : "memory");
#endif
    return ok;
}
#ifdef GW2_WATCHDOG
// Bench builds: where a failed check reports before its trap. Not printf: a device printf is
// a function call, and any call in these kernels makes ptxas serialize every wgmma (C7510,
// "wgmma pipeline crossing function boundary"), even on a path that never runs. Instead two
// 64-bit words per kind of failure in host-mapped memory (the host sets g2_wd_mail; null:
// trap only), read by the host after the error: word 0 = 1 << 63 | who << 61 | parity << 60
// | s << 56 | kt << 40 | blockIdx.x << 28 | blockIdx.y << 12 | threadIdx.x, word 1 the
// mbarrier's state word (layout undocumented, printed raw) or the bad coordinate. who: 0 a
// consumer's wait on full[s], 1 a producer's wait on empty[s], 2 a TMA coordinate check.
// Threads failing alike may overwrite each other's record (any one of them is reported).
__device__ unsigned long long* g2_wd_mail;
__device__ __forceinline__ void g2_fail(int who, u32 parity, int s, int kt, unsigned long long w1) {
    unsigned long long* m = g2_wd_mail;
    if (m != 0) {
        const unsigned long long w0 = (1ull << 63) | ((unsigned long long)(who & 3) << 61) |
                                      ((unsigned long long)(parity & 1u) << 60) |
                                      ((unsigned long long)(s & 15) << 56) |
                                      ((unsigned long long)(kt & 0xFFFF) << 40) |
                                      ((unsigned long long)(blockIdx.x & 0xFFF) << 28) |
                                      ((unsigned long long)(blockIdx.y & 0xFFFF) << 12) |
                                      (unsigned long long)(threadIdx.x & 0xFFF);
        volatile unsigned long long* v = m + 2 * who;
        v[1] = w1;
        v[0] = w0;
        __threadfence_system();
    }
    __trap();
}
#endif
// Wait (acquire) for the phase of parity `parity` to complete. GW2_WATCHDOG (a clock count,
// bench builds only) turns a hang into a report (who: 0 a consumer on full[s], 1 a producer
// on empty[s]; kt the k step) and a trap.
__device__ __forceinline__ void g2_wait(u32 a, u32 parity, int who, int s, int kt) {
#ifdef GW2_WATCHDOG
    const long long t0 = clock64();
#endif
    while (!g2_try(a, parity)) {
#ifdef GW2_WATCHDOG
        if (clock64() - t0 > (long long)(GW2_WATCHDOG)) {
            unsigned long long w = 0;
#ifdef G2_SM90
            asm volatile("ld.shared.b64 %0, [%1];" : "=l"(w) : "r"(a));
#endif
            g2_fail(who, parity, s, kt, w);
        }
#endif
    }
}
// 4 bytes global -> shared (zero-filled when !ok; src must still be a valid address).
__device__ __forceinline__ void g2_cp4(u32 dst, const void* src, bool ok) {
#ifdef G2_SM90
    const int n = ok ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(n)
                 : "memory");
#endif
}
// A 2D box of a tensor map (innermost coordinate first, ES-byte elements) into shared memory,
// completing its bytes on the mbarrier at `bar`. The innermost coordinate must be a multiple
// of 16 bytes (else the TMA raises "illegal instruction"), dst a multiple of 128 (1024 with
// the 128-byte swizzle); bench builds check the coordinate and dst's 128 (g2_fail who 2,
// word 1 = c0 | dst << 32).
template <int ES>
__device__ __forceinline__ void g2_tma2d(u32 dst, const G2Map* map, int c0, int c1, u32 bar, int kt) {
#ifdef GW2_WATCHDOG
    if (((c0 * ES) & 15) != 0 || (dst & 127u) != 0)
        g2_fail(2, 0u, 0, kt, (unsigned long long)(u32)c0 | ((unsigned long long)dst << 32));
#endif
#ifdef G2_SM90
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, "
        "{%2, %3}], [%4];" ::"r"(dst),
        "l"((u64)map), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
#endif
}
// Every cp.async of this thread landed (committed into a group or not).
__device__ __forceinline__ void g2_cp_wait_all() {
#ifdef G2_SM90
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}
__device__ __forceinline__ void g2_wait1() {
#ifdef GW_WGMMA
    asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
#endif
}
__device__ __forceinline__ u32 g2_lds32(u32 a) {
    u32 v;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(a));
    return v;
}
__device__ __forceinline__ void g2_sts128(u32 a, uint4 v) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(a), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
}
__device__ __forceinline__ u32 g2_prmt(u32 a, u32 b, u32 sel) {
    u32 r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}
// Named barrier over all 384 threads, usable from different code and by diverged threads of
// a warp (barrier.sync without .aligned: the TMA producer's lane 0 arrives after its lanes).
__device__ __forceinline__ void g2_sync_all(int id) {
    asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(G2_THREADS) : "memory");
}

// d (64 x TN f32) += A (64 x 16, registers: the m16n8k16 A fragment of each warp's 16 rows:
// a0 row g k 2t..2t+1, a1 row g + 8, a2 row g k 2t + 8.., a3 row g + 8 k 2t + 8..) * B (TN x
// 16, descriptor db)^T.
template <int TN>
__device__ __forceinline__ void g2_mma_rs(float* d, u32 a0, u32 a1, u32 a2, u32 a3, u64 db) {
#ifdef GW_WGMMA
    if constexpr (TN == 256) {
        asm volatile(
            "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, 1, 1, 1, 0;"
            : GW_F64(0), GW_F64(64)
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db));
    } else {
        asm volatile(
            "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, 1, 1, 1, 0;"
            : GW_F64(0)
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(db));
    }
#else
    __trap();
#endif
}

// Pins the accumulators (an empty asm that reads and writes each): keeps the compiler from
// moving instructions that define them into a wgmma pipeline stage (ptxas would serialize).
template <int N>
__device__ __forceinline__ void g2_pin(float* d) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}

// Two Q4_0 values of one row as f16 (the bits of gt_dq8): the bytes 0, 1 (sel 0x4140) or 2, 3
// (0x4342) of `w` (nibbles already isolated), q - 8 exact, times the scale pair dd.
__device__ __forceinline__ u32 g2_q4pair(u32 w, u32 sel, u32 dd) {
    return gt_hmul2(gm_pair(w, sel, 0x64086408u), dd);
}

// ---------------------------------------------------------------------------------------
// The kernel body. maps: the TMA tensor maps (LD = 1) or null.
template <int ORI, int WF, int TN, bool GLU, int LD>
__device__ __forceinline__ void g2_body(const u16* __restrict__ xh, const float* __restrict__ xsc,
                                        const GtSegs& sg, const float* res, int k, int n, int act,
                                        const G2Maps* maps) {
    using C = G2Cfg<ORI, WF, TN>;
    static_assert(WF == 0 || WF == 1, "f16 and Q4_0 only in this draft");
    static_assert(TN == 128 || TN == 256, "tiles of 128 or 256");
    static_assert(LD == 0 || ORI == 1, "TMA loads: the swapped orientation only");
    constexpr int ST = C::ST, STAGE = C::STAGE, XR = C::XR, WR = C::WR;
    constexpr int G = ORI == 0 ? TN / 2 : 64;  // gate + up: gate rows per tile
    constexpr bool RAW = C::RAW;
    constexpr bool DEC = ORI == 0 && WF == 1;  // the producer decodes Q4_0 into the stage
    extern __shared__ uint4 g2_dyn[];
    __shared__ u64 g2_bars[16];
    __shared__ const u8* g2_wtab[256];  // cp.async producers: weight row (quants) at k = 0
    __shared__ const u8* g2_stab[256];  // Q4_0: the row's scales at k = 0
    const u32 raw0 = gt_smem(g2_dyn);
    const u32 base0 = (raw0 + 1023u) & ~1023u;
    u8* const sbase = (u8*)g2_dyn + (base0 - raw0);
    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31;
    const int tok0 = blockIdx.x * XR, col0 = blockIdx.y * WR;
    const int kt_n = k / G2_BK;
    const int rtot = sg.r[0] + sg.r[1] + sg.r[2];
    const u32 bar0 = gt_smem(g2_bars);
    auto full = [&](int s) -> u32 { return bar0 + 8u * (u32)s; };
    auto empty = [&](int s) -> u32 { return bar0 + 8u * (u32)(ST + s); };

    if (LD == 0) {
        const u64 nb = (u64)(k >> 5);
        for (int r = tid; r < WR; r += G2_THREADS) {
            const u8* base;
            int row, mrows;
            const bool ok = gt_wrow<GLU>(sg, G, blockIdx.y, col0, r, base, row, mrows);
            const u8* p = 0;
            const u8* q = 0;
            if (ok) {
                if (WF == 0) {
                    p = base + (u64)row * k * 2;
                } else {
                    p = base + (u64)row * nb * 16;
                    q = base + (u64)mrows * nb * 16 + (u64)row * nb * 2;
                }
            }
            g2_wtab[r] = p;
            g2_stab[r] = q;
        }
    }
    if (tid == 0) {
        const u32 fc = LD == 1 ? 1u : (DEC ? 256u : 128u);
        for (int s = 0; s < ST; s++) {
            g2_bar_init(full(s), fc);
            g2_bar_init(empty(s), 8u);
        }
        g2_bar_init_fence();
    }
    __syncthreads();

    if (wg == 0) {
        // ------------------------------------------------------------------ producer
        if (LD == 1) {
            if (tid == 0) {
                // Each 64-row half of the weight tile: its tensor map and first row. Gate +
                // up: gate then up, rows blockIdx.y * 64. Plain: the segment of the half's
                // first row (segments are multiples of 64 rows: the host checks); a half past
                // every segment loads rows 0 of segment 0 (never stored).
                int mi[2], r0[2];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    if (GLU) {
                        mi[h] = h;
                        r0[h] = blockIdx.y * 64;
                    } else {
                        int row = col0 + 64 * h;
                        int m = 0;
                        if (row >= rtot) {
                            row = 0;
                        } else if (row >= sg.r[0]) {
                            row -= sg.r[0];
                            m = 1;
                            if (row >= sg.r[1]) {
                                row -= sg.r[1];
                                m = 2;
                            }
                        }
                        mi[h] = m;
                        r0[h] = row;
                    }
                }
                int s = 0;
                u32 ph = 0;
#pragma unroll 1
                for (int kt = 0; kt < kt_n; kt++) {
                    if (kt >= ST) g2_wait(empty(s), ph ^ 1u, 1, s, kt);
                    const u32 st = base0 + (u32)(s * STAGE), fb = full(s);
                    g2_arrive_tx(fb, (u32)C::TX);
                    g2_tma2d<2>(st, &maps->x, kt * G2_BK, tok0, fb, kt);
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        if (RAW) {
                            // The innermost box coordinate must be a multiple of 16 bytes (the
                            // TMA traps with "illegal instruction" otherwise): the quants' kt * 32
                            // bytes are; the scales' 2 kt f16 are not (4 kt bytes), so the box of
                            // 8 scales starts at 8 (kt / 4) and the consumers read the pair at
                            // byte 4 (kt % 4) of each row (k % 256 == 0 keeps it in bounds).
                            g2_tma2d<1>(st + C::XBYTES + h * 2048, &maps->w[mi[h]], kt * 32, r0[h], fb, kt);
                            g2_tma2d<2>(st + C::XBYTES + 4096 + h * 1024, &maps->s[mi[h]], (kt >> 2) * 8,
                                        r0[h], fb, kt);
                        } else {
                            g2_tma2d<2>(st + C::XBYTES + h * 8192, &maps->w[mi[h]], kt * G2_BK, r0[h], fb,
                                        kt);
                        }
                    }
                    if (++s == ST) {
                        s = 0;
                        ph ^= 1u;
                    }
                }
            }
        } else {
            // cp.async: thread tp takes 16-byte chunk cc of rows tp / 8 + 16 i of the x part
            // and (f16) of the weight part.
            const int tp = tid, xr = tp >> 3, cc = tp & 7;
            const u16* xrow = xh + (u64)(tok0 + xr) * k + 8 * cc;  // row xr, chunk cc at k = 0
            const u64 xstep = (u64)16 * k;
            auto load_x = [&](u32 st, int kt) {
#pragma unroll
                for (int i = 0; i < XR / 16; i++) {
                    const bool ok = tok0 + xr + 16 * i < n;
                    const u16* src = ok ? xrow + i * xstep + kt * G2_BK : xh;
                    gt_cp16(st + gw_sw(xr + 16 * i, cc), src, ok);
                }
            };
            auto load_w16 = [&](u32 st, int kt) {
#pragma unroll
                for (int i = 0; i < WR / 16; i++) {
                    const u8* p = g2_wtab[xr + 16 * i];
                    const bool ok = p != 0;
                    const void* src = ok ? (const void*)(p + (u64)kt * 128 + 16 * cc) : (const void*)xh;
                    gt_cp16(st + gw_sw(xr + 16 * i, cc), src, ok);
                }
            };
            if (DEC) {
                // Q4_0 decoded here: thread tp takes weight rows tp + 128 i, both 32-value
                // blocks of a stage; raw blocks (32 quant bytes, the two scales) loaded into
                // registers two stages ahead.
                constexpr int NR = TN / 128;
                const u8* qp[NR];
                const u8* sp[NR];
#pragma unroll
                for (int i = 0; i < NR; i++) {
                    qp[i] = g2_wtab[tp + 128 * i];
                    sp[i] = g2_stab[tp + 128 * i];
                }
                uint4 qa[NR][2], qb[NR][2];
                u32 sa[NR], sb[NR];
                auto fetch = [&](int kt, uint4 (&q)[NR][2], u32 (&sc)[NR]) {
#pragma unroll
                    for (int i = 0; i < NR; i++) {
                        q[i][0] = q[i][1] = make_uint4(0u, 0u, 0u, 0u);
                        sc[i] = 0u;
                        if (qp[i] != 0 && kt < kt_n) {
                            const uint4* src = (const uint4*)(qp[i] + (u64)kt * 32);
                            q[i][0] = src[0];
                            q[i][1] = src[1];
                            sc[i] = *(const u32*)(sp[i] + (u64)kt * 4);
                        }
                    }
                };
                fetch(0, qa, sa);
                fetch(1, qb, sb);
                int s = 0;
                u32 ph = 0;
                // One k step from the registers q / sc (fetched two steps ago), which then
                // take step kt + 2. Two steps per trip through the loop, so that each buffer
                // stays in place (a register copy would wait for the loads in flight).
                auto step = [&](int kt, uint4 (&q)[NR][2], u32 (&sc)[NR]) {
                    if (kt >= ST) g2_wait(empty(s), ph ^ 1u, 1, s, kt);
                    const u32 st = base0 + (u32)(s * STAGE);
                    load_x(st, kt);
                    g2_cp_arrive(full(s));
                    const u32 wst = st + C::XBYTES;
#pragma unroll
                    for (int i = 0; i < NR; i++) {
                        const int r = tp + 128 * i;
#pragma unroll
                        for (int b = 0; b < 2; b++) {
                            const u32 dd = g2_prmt(sc[i], sc[i], b ? 0x3232u : 0x1010u);
                            const uint4 a = q[i][b];
                            // Byte j: low nibble value j, high nibble value 16 + j.
                            const uint4 v0 = gt_dq8(a.x & 0x0F0F0F0Fu, a.y & 0x0F0F0F0Fu, 0x64086408u, dd);
                            const uint4 v1 = gt_dq8(a.z & 0x0F0F0F0Fu, a.w & 0x0F0F0F0Fu, 0x64086408u, dd);
                            const uint4 v2 = gt_dq8((a.x >> 4) & 0x0F0F0F0Fu, (a.y >> 4) & 0x0F0F0F0Fu,
                                                    0x64086408u, dd);
                            const uint4 v3 = gt_dq8((a.z >> 4) & 0x0F0F0F0Fu, (a.w >> 4) & 0x0F0F0F0Fu,
                                                    0x64086408u, dd);
                            g2_sts128(wst + gw_sw(r, 4 * b + 0), v0);
                            g2_sts128(wst + gw_sw(r, 4 * b + 1), v1);
                            g2_sts128(wst + gw_sw(r, 4 * b + 2), v2);
                            g2_sts128(wst + gw_sw(r, 4 * b + 3), v3);
                        }
                    }
                    // No proxy fence here (it compiles to MEMBAR.ALL.CTA, which would wait for
                    // the loads in flight): the consumers fence after their acquire.
                    g2_arrive(full(s));
                    fetch(kt + 2, q, sc);
                    if (++s == ST) {
                        s = 0;
                        ph ^= 1u;
                    }
                };
#pragma unroll 1
                for (int kt = 0; kt < kt_n; kt += 2) {
                    step(kt, qa, sa);
                    if (kt + 1 < kt_n) step(kt + 1, qb, sb);
                }
                g2_cp_wait_all();
            } else {
                // f16 weights, or (RAW) the raw Q4_0 blocks of weight row tp.
                const u8* qrow = RAW ? g2_wtab[tp] : 0;
                const u8* srow = RAW ? g2_stab[tp] : 0;
                int s = 0;
                u32 ph = 0;
#pragma unroll 1
                for (int kt = 0; kt < kt_n; kt++) {
                    if (kt >= ST) g2_wait(empty(s), ph ^ 1u, 1, s, kt);
                    const u32 st = base0 + (u32)(s * STAGE);
                    if (RAW) {
                        load_x(st, kt);
                        const u32 q = st + C::XBYTES + tp * 32;
                        const bool ok = qrow != 0;
                        gt_cp16(q, ok ? (const void*)(qrow + (u64)kt * 32) : (const void*)xh, ok);
                        gt_cp16(q + 16, ok ? (const void*)(qrow + (u64)kt * 32 + 16) : (const void*)xh, ok);
                        g2_cp4(st + C::XBYTES + 4096 + tp * 16,
                               ok ? (const void*)(srow + (u64)kt * 4) : (const void*)xh, ok);
                    } else {
                        load_x(st, kt);
                        load_w16(st + C::XBYTES, kt);
                    }
                    g2_cp_arrive(full(s));
                    if (++s == ST) {
                        s = 0;
                        ph ^= 1u;
                    }
                }
                g2_cp_wait_all();  // no cp.async left in flight when the thread leaves
            }
        }
        if (GLU) {
            g2_sync_all(1);
            g2_sync_all(2);
        }
    } else {
        // ------------------------------------------------------------------ consumers
        const int c = wg - 1, v = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
        float d[TN / 2];
#pragma unroll
        for (int i = 0; i < TN / 2; i++) d[i] = 0.f;
        g2_pin<TN / 2>(d);
        // Register-A decode (RAW): this thread's rows of the weight tile, 64 c + 16 v + g and
        // + 8; bytes 2t, 2t + 1, 2t + 8, 2t + 9 of a block (its k columns 2t.., 2t + 8.. of
        // both k16 steps: low nibbles step 0, high nibbles step 1).
        const int ar = c * 64 + 16 * v + g;
        const u32 psel = (t & 1) ? 0x7632u : 0x5410u;
        int s = 0, sp = 0;
        u32 ph = 0;
#pragma unroll 1
        for (int kt = 0; kt < kt_n; kt++) {
            g2_wait(full(s), ph, 0, s, kt);
            // cp.async and the producer's stores write through the generic proxy, the MMAs
            // read through the async proxy (TMA writes are async-proxy already).
            // GW2_NO_CFENCE (an experiment, not for the engine): skip it where the stage was
            // written by cp.async only (as CUTLASS's cp.async warp-specialised mainloop does).
#ifdef GW2_NO_CFENCE
            if (LD == 0 && DEC) gw_proxy_fence();
#else
            if (LD == 0) gw_proxy_fence();
#endif
            const u32 st = base0 + (u32)(s * STAGE);
            if (RAW) {
                // Scales: cp.async puts the stage's pair at byte 0 of the row's 16, the TMA the
                // 16-byte-aligned group of 8 scales holding it (the pair at byte 4 (kt % 4)).
                const u32 qa = st + C::XBYTES, sa = qa + 4096 + (LD == 1 ? 4u * (u32)(kt & 3) : 0u);
                u32 wq[2][2], sc[2];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const u32 rq = qa + (u32)(ar + 8 * h) * 32u + 4u * (u32)(t >> 1);
#pragma unroll
                    for (int b = 0; b < 2; b++)
                        wq[h][b] = g2_prmt(g2_lds32(rq + 16 * b), g2_lds32(rq + 16 * b + 8), psel);
                    sc[h] = g2_lds32(sa + (u32)(ar + 8 * h) * 16u);
                }
#pragma unroll
                for (int ks = 0; ks < 4; ks++) {
                    const int b = ks >> 1;
                    u32 w[2], dd[2];
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        w[h] = ((ks & 1) ? (wq[h][b] >> 4) : wq[h][b]) & 0x0F0F0F0Fu;
                        dd[h] = g2_prmt(sc[h], sc[h], b ? 0x3232u : 0x1010u);
                    }
                    const u32 a0 = g2_q4pair(w[0], 0x4140u, dd[0]);
                    const u32 a1 = g2_q4pair(w[1], 0x4140u, dd[1]);
                    const u32 a2 = g2_q4pair(w[0], 0x4342u, dd[0]);
                    const u32 a3 = g2_q4pair(w[1], 0x4342u, dd[1]);
                    gw_fence();
                    g2_mma_rs<TN>(d, a0, a1, a2, a3, gw_desc(st + 32 * ks));
                    gw_commit();
                    g2_wait1();
                    if (ks == 0 && kt > 0 && lane == 0) g2_arrive(empty(sp));
                }
            } else {
                const u32 aa = ORI == 0 ? st + c * 8192 : st + C::XBYTES + c * 8192;
                const u32 bb = ORI == 0 ? st + C::XBYTES : st;
                gw_fence();
#pragma unroll
                for (int ks = 0; ks < G2_BK / 16; ks++)
                    gw_mma<TN>(d, gw_desc(aa + 32 * ks), gw_desc(bb + 32 * ks));
                gw_commit();
                g2_wait1();
                if (kt > 0 && lane == 0) g2_arrive(empty(sp));
            }
            sp = s;
            if (++s == ST) {
                s = 0;
                ph ^= 1u;
            }
        }
        gw_wait0();
        g2_pin<TN / 2>(d);
        // D fragment: warp v holds A rows 16 v + g (+ 8 h); register 4 j + 2 h + e is B
        // column 8 j + 2 t + e.
        if (!GLU) {
            if (ORI == 0) {
                const int trow = c * 64 + 16 * v + g;
#pragma unroll
                for (int j = 0; j < TN / 8; j++)
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
            } else {
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int row = col0 + ar + 8 * h;
                    if (row >= rtot) continue;
                    const GtOut o = gt_out(sg, row);
#pragma unroll
                    for (int j = 0; j < TN / 8; j++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            const int tok = tok0 + 8 * j + 2 * t + e;
                            if (tok < n) gt_store(o, tok, d[4 * j + 2 * h + e], xsc, res);
                        }
                }
            }
        } else {
            // Gate + up through shared memory: a [XR tokens][CLD] float tile, columns 0..G-1
            // gate rows blockIdx.y * G + col, G..2G-1 the same rows of up.
            g2_sync_all(1);  // every consumer's MMAs (which read the stages) are done
            float* cs = (float*)sbase;
            constexpr int CLD = C::CLD;
#pragma unroll
            for (int j = 0; j < TN / 8; j++)
#pragma unroll
                for (int h = 0; h < 2; h++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        const int a = c * 64 + 16 * v + g + 8 * h, b = 8 * j + 2 * t + e;
                        if (ORI == 0)
                            cs[a * CLD + b] = d[4 * j + 2 * h + e];
                        else
                            cs[b * CLD + a] = d[4 * j + 2 * h + e];
                    }
            g2_sync_all(2);
        }
    }
    if (GLU) gt_glu_store((const float*)sbase, C::CLD, G, XR, tok0, blockIdx.y, sg, xsc, n, act);
}

// ---------------------------------------------------------------------------------------
// Entries: gw2_<fam>_<fmt>[_glu]_n<TN>, fam ws (ORI 0, cp.async), sw (ORI 1, cp.async), tm
// (ORI 1, TMA). Grid: (ceil(n / XR), ceil(tile rows / WR)), 384 threads, G2Cfg::SMEM bytes.
// The cp.async entries take GEMMW_ENTRY's arguments; tm adds the tensor maps.
#define G2_ENTRY_CP(fam, name, ORI, WF, TN)                                                    \
    extern "C" __global__ void __launch_bounds__(G2_THREADS, 1) gw2_##fam##_##name##_n##TN(    \
        const u16* __restrict__ xh, const u16* __restrict__ xl, const float* __restrict__ xsc, \
        const void* w0, const void* w1, const void* w2, float* y0, float* y1, float* y2,      \
        const float* b0, const float* b1, const float* b2, int r0, int r1, int r2,            \
        const float* res, int k, int n) {                                                     \
        const GtSegs sg = {{w0, w1, w2}, {y0, y1, y2}, {b0, b1, b2}, {r0, r1, r2}};           \
        g2_body<ORI, WF, TN, false, 0>(xh, xsc, sg, res, k, n, 0, 0);                         \
    }                                                                                         \
    extern "C" __global__ void __launch_bounds__(G2_THREADS, 1) gw2_##fam##_##name##_glu_n##TN( \
        const u16* __restrict__ xh, const u16* __restrict__ xl, const float* __restrict__ xsc, \
        const void* wg, const void* wu, float* y, int rows, int k, int n, int act) {          \
        const GtSegs sg = {{wg, wu, wg}, {y, y, y}, {0, 0, 0}, {rows, 0, 0}};                 \
        g2_body<ORI, WF, TN, true, 0>(xh, xsc, sg, 0, k, n, act, 0);                          \
    }
#define G2_ENTRY_TMA(fam, name, WF, TN)                                                        \
    extern "C" __global__ void __launch_bounds__(G2_THREADS, 1) gw2_##fam##_##name##_n##TN(    \
        const u16* __restrict__ xh, const u16* __restrict__ xl, const float* __restrict__ xsc, \
        const void* w0, const void* w1, const void* w2, float* y0, float* y1, float* y2,      \
        const float* b0, const float* b1, const float* b2, int r0, int r1, int r2,            \
        const float* res, int k, int n, const __grid_constant__ G2Maps maps) {                \
        const GtSegs sg = {{w0, w1, w2}, {y0, y1, y2}, {b0, b1, b2}, {r0, r1, r2}};           \
        g2_body<1, WF, TN, false, 1>(xh, xsc, sg, res, k, n, 0, &maps);                       \
    }                                                                                         \
    extern "C" __global__ void __launch_bounds__(G2_THREADS, 1) gw2_##fam##_##name##_glu_n##TN( \
        const u16* __restrict__ xh, const u16* __restrict__ xl, const float* __restrict__ xsc, \
        const void* wg, const void* wu, float* y, int rows, int k, int n, int act,            \
        const __grid_constant__ G2Maps maps) {                                                \
        const GtSegs sg = {{wg, wu, wg}, {y, y, y}, {0, 0, 0}, {rows, 0, 0}};                 \
        g2_body<1, WF, TN, true, 1>(xh, xsc, sg, 0, k, n, act, &maps);                        \
    }

// GW2_ONLY (bench builds): 1 ws, 2 sw, 3 tm, unset all of them.
#if !defined(GW2_ONLY) || GW2_ONLY == 1
G2_ENTRY_CP(ws, f16, 0, 0, 128)
G2_ENTRY_CP(ws, f16, 0, 0, 256)
G2_ENTRY_CP(ws, q4_0, 0, 1, 128)
G2_ENTRY_CP(ws, q4_0, 0, 1, 256)
#endif
#if !defined(GW2_ONLY) || GW2_ONLY == 2
G2_ENTRY_CP(sw, f16, 1, 0, 128)
G2_ENTRY_CP(sw, f16, 1, 0, 256)
G2_ENTRY_CP(sw, q4_0, 1, 1, 128)
G2_ENTRY_CP(sw, q4_0, 1, 1, 256)
#endif
#if !defined(GW2_ONLY) || GW2_ONLY == 3
G2_ENTRY_TMA(tm, f16, 0, 128)
G2_ENTRY_TMA(tm, f16, 0, 256)
G2_ENTRY_TMA(tm, q4_0, 1, 128)
G2_ENTRY_TMA(tm, q4_0, 1, 256)
#endif
