// ---------------------------------------------------------------------------------------
// 4. The same GEMM, warp-specialised with TMA loads (sm_90a, x in one f16 part, F16 weights
// in place or decoded into the scratch, Q4_0 / Q8_0 / BF16 in place):
// `gemmt_<f16|q4_0|q8_0|bf16>[_glu]_tm<TN>`.
// A block of three warpgroups (384 threads) computes GTM_WR = 128 weight rows x TN (128 or
// 256) tokens over the whole k: the hardware multiplies W x^T (weights as A, 64 rows per
// consumer warpgroup; tokens as B), each output still one f32 accumulator of the same k16
// products in k order (the k16 step is symmetric in A and B: measured bit-identical to
// section 3 on every 8B shape, research/notes/wgmma2/README.md; kernel-check compares them).
// Warpgroup 0 is the producer: one thread issues the TMA copies (`cp.async.bulk.tensor`) of
// each stage of GTM_BK = 64 values (x: box 64 x TN tokens, 128-byte swizzle, rows past n
// zero-filled; F16 / BF16 weights: one box of 64 x 64 rows per 64-row half, 128-byte
// swizzle; Q4_0 / Q8_0: the raw planar quants, box 32 (Q4_0) or 64 (Q8_0, 64-byte swizzle)
// bytes x 64 rows, and the 16-byte group of 8 scales holding the stage's pair, box 8 x 64)
// into a ring of ST stages with a `full` mbarrier (expect_tx) and an `empty` one each.
// Warpgroups 1 and 2 consume: wait `full`, issue the stage's wgmmas (F16: A and B from
// shared memory; Q4_0 / Q8_0 / BF16: A built in registers, the register-A form: d * (q - 8)
// and d * q with gt_dq8's bits, bf16 converted by gt_bf2h, each value the one section 3
// stores), commit, `wgmma.wait_group 1`, then release the previous stage.
// No __syncthreads in the main loop; the epilogues are section 2's gt_store / gt_glu_store.
// The tensor maps (GtmMaps) are encoded on the host per launch and passed by value as the
// last, __grid_constant__ parameter. Shape limits (the host checks, else section 3 runs):
// every segment (gate + up: the rows) a multiple of 64 rows (a 64-row half lies in one
// segment), k a multiple of 64 (F16, BF16) or 256 (Q4_0, Q8_0: 16-byte scale-row strides);
// the TMA traps on a box whose innermost coordinate is not a multiple of 16 bytes, which
// every coordinate here is by construction (x, F16 and BF16 64 kt values, quants 32 kt or
// 64 kt bytes, scales 8 (kt / 4) values). No function calls in these kernels (every helper
// is inlined): a call
// anywhere in them makes ptxas serialize the wgmmas (C7510).
#pragma once
#define GTM_BK 64
#define GTM_WR 128
#define GTM_THREADS 384

// The host's CUtensorMap (128 bytes, 64-byte aligned), opaque here.
struct alignas(64) GtmMap {
    u64 v[16];
};
// x ([n][k] f16); per segment (plain: up to three; gate + up: gate, up): the F16 / BF16
// weights or the Q4_0 / Q8_0 quant plane, and the quants' scale plane (F16 / BF16: unused
// copies of w).
struct GtmMaps {
    GtmMap x, w[3], s[3];
};

// A stage: [TN x rows][weights], 128-byte rows of 64 f16 (BF16: bf16) in the 128-byte
// swizzle; Q4_0 / Q8_0 weights raw: 128 rows x QROW quant bytes (32 / 64; Q8_0's in the
// 64-byte swizzle: 16-byte chunk c of row r at r * 64 + ((c ^ ((r >> 1) & 3)) * 16)), then
// 128 rows x 16 bytes of scales (the 8 at 8 (kt / 4), the stage's pair at byte 4 (kt % 4)).
// Stages are multiples of 1024 bytes. The gate + up epilogue reuses the stages as [TN
// tokens][128 + 4] floats. SMEM: dynamic bytes to launch with (+1024 to align);
// select::gemmtm_shared_bytes mirrors it. WF: 0 F16, 1 Q4_0, 2 Q8_0, 3 BF16 (section 3's).
template <int WF, int TN>
struct GtmCfg {
    static constexpr bool QUANT = WF == 1 || WF == 2;
    // Bytes of one weight row per stage in the A plane, and the scales' offset after it.
    static constexpr int QROW = WF == 1 ? 32 : WF == 2 ? 64 : 128;
    static constexpr int SOFF = GTM_WR * QROW;
    static constexpr int XBYTES = TN * 128;
    static constexpr int WBYTES = SOFF + (QUANT ? GTM_WR * 16 : 0);
    static constexpr int STAGE = XBYTES + WBYTES;
    static constexpr int ST0 = 196608 / STAGE;
    static constexpr int ST = ST0 > 8 ? 8 : ST0;
    static constexpr int CLD = GTM_WR + 4;
    static constexpr int EPI = TN * CLD * 4;
    static constexpr int SMEM = (ST * STAGE > EPI ? ST * STAGE : EPI) + 1024;
    // Bytes one stage's TMA copies bring (x, then two 64-row halves of weights / scales).
    static constexpr int TX = XBYTES + WBYTES;
    static_assert(STAGE % 1024 == 0 && SOFF % 1024 == 0, "stages and planes on 1024 bytes");
    static_assert(ST >= 2, "a ring of at least two stages");
    static_assert(SMEM + 16 * 8 <= 227 * 1024, "dynamic + the barriers within the H200's 227 KiB");
    static_assert(TX < (1 << 20), "mbarrier tx-count range");
};

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GTM_SM90 1
#endif

__device__ __forceinline__ void gtm_bar_init(u32 a, u32 count) {
#ifdef GTM_SM90
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(a), "r"(count) : "memory");
#endif
}
__device__ __forceinline__ void gtm_bar_init_fence() {
#ifdef GTM_SM90
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
// Arrive (release, CTA scope).
__device__ __forceinline__ void gtm_arrive(u32 a) {
#ifdef GTM_SM90
    asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.shared::cta.b64 st, [%0];\n\t}" ::"r"(a)
                 : "memory");
#endif
}
// Arrive and expect `tx` bytes of TMA writes in this phase.
__device__ __forceinline__ void gtm_arrive_tx(u32 a, u32 tx) {
#ifdef GTM_SM90
    asm volatile(
        "{\n\t.reg .b64 st;\n\tmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n\t}" ::"r"(a),
        "r"(tx)
        : "memory");
#endif
}
// Wait (acquire) for the phase of parity `parity` to complete.
__device__ __forceinline__ void gtm_wait(u32 a, u32 parity) {
#ifdef GTM_SM90
    u32 ok = 0;
    while (!ok) {
        asm volatile(
            "{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
            "selp.u32 %0, 1, 0, p;\n\t}"
            : "=r"(ok)
            : "r"(a), "r"(parity)
            : "memory");
    }
#endif
}
// A 2D box of a tensor map (innermost coordinate first) into shared memory at dst, its bytes
// completing on the mbarrier at bar. c0 must be a multiple of 16 bytes, dst of 1024.
__device__ __forceinline__ void gtm_tma2d(u32 dst, const GtmMap* map, int c0, int c1, u32 bar) {
#ifdef GTM_SM90
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, "
        "{%2, %3}], [%4];" ::"r"(dst),
        "l"((u64)map), "r"(c0), "r"(c1), "r"(bar)
        : "memory");
#endif
}
__device__ __forceinline__ void gtm_wait1() {
#ifdef GW_WGMMA
    asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
#endif
}
__device__ __forceinline__ u32 gtm_lds32(u32 a) {
    u32 v;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(a));
    return v;
}
__device__ __forceinline__ u32 gtm_prmt(u32 a, u32 b, u32 sel) {
    u32 r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
    return r;
}
// Named barrier over all 384 threads, usable by diverged threads of a warp (barrier.sync
// without .aligned: the producer's thread 0 arrives after its lanes).
__device__ __forceinline__ void gtm_sync_all(int id) {
    asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(GTM_THREADS) : "memory");
}

// d (64 x TN f32) += A (64 x 16 in registers, the m16n8k16 A fragment of each warp's 16
// rows: a0 row g k 2t.., a1 row g + 8, a2 row g k 2t + 8.., a3 row g + 8 k 2t + 8..) * B
// (TN x 16, descriptor db)^T.
template <int TN>
__device__ __forceinline__ void gtm_mma_rs(float* d, u32 a0, u32 a1, u32 a2, u32 a3, u64 db) {
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

// Pins the accumulators (an empty asm reading and writing each): keeps the compiler from
// moving instructions that define them into a wgmma pipeline stage (ptxas would serialize
// the wgmmas, C7515).
template <int N>
__device__ __forceinline__ void gtm_pin(float* d) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}

// Two Q4_0 values of one row as f16 (gt_dq8's bits): bytes 0, 1 (sel 0x4140) or 2, 3
// (0x4342) of w (nibbles isolated), q - 8 exact, times the scale pair dd.
__device__ __forceinline__ u32 gtm_q4pair(u32 w, u32 sel, u32 dd) {
    return gt_hmul2(gm_pair(w, sel, 0x64086408u), dd);
}
// Two Q8_0 values of one row as f16 (gt_dq8's bits with section 3's Q8_0 operands): bytes
// 0, 1 (sel 0x4140) or 2, 3 (0x4342) of w (each q ^ 0x80, i.e. q + 128), q exact, times
// the scale pair dd.
__device__ __forceinline__ u32 gtm_q8pair(u32 w, u32 sel, u32 dd) {
    return gt_hmul2(gm_pair(w, sel, 0x64806480u), dd);
}

template <int WF, int TN, bool GLU>
__device__ __forceinline__ void gemmtm_body(const float* __restrict__ xsc, const GtSegs& sg,
                                            const float* res, int k, int n, int act,
                                            const GtmMaps* maps) {
    using C = GtmCfg<WF, TN>;
    static_assert(WF >= 0 && WF <= 3, "F16, Q4_0, Q8_0 and BF16 weights");
    static_assert(TN == 128 || TN == 256, "tiles of 128 or 256 tokens");
    constexpr int ST = C::ST, STAGE = C::STAGE;
    constexpr bool RAW = C::QUANT;
    extern __shared__ uint4 gtm_dyn[];
    __shared__ u64 gtm_bars[16];
    const u32 raw0 = gt_smem(gtm_dyn);
    const u32 base0 = (raw0 + 1023u) & ~1023u;
    u8* const sbase = (u8*)gtm_dyn + (base0 - raw0);
    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31;
    const int tok0 = blockIdx.x * TN, col0 = blockIdx.y * GTM_WR;
    const int kt_n = k / GTM_BK;
    const int rtot = sg.r[0] + sg.r[1] + sg.r[2];
    const u32 bar0 = gt_smem(gtm_bars);
    auto full = [&](int s) -> u32 { return bar0 + 8u * (u32)s; };
    auto empty = [&](int s) -> u32 { return bar0 + 8u * (u32)(ST + s); };
    if (tid == 0) {
        for (int s = 0; s < ST; s++) {
            gtm_bar_init(full(s), 1u);
            gtm_bar_init(empty(s), 8u);
        }
        gtm_bar_init_fence();
    }
    __syncthreads();

    if (wg == 0) {
        // ------------------------------------------------------------------ producer
        if (tid == 0) {
            // Each 64-row half of the weight tile: its tensor map and first row. Gate + up:
            // gate then up, rows blockIdx.y * 64. Plain: the segment of the half's first row
            // (segments are multiples of 64 rows); a half past every segment loads row 0 of
            // segment 0 (never stored).
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
                if (kt >= ST) gtm_wait(empty(s), ph ^ 1u);
                const u32 st = base0 + (u32)(s * STAGE), fb = full(s);
                gtm_arrive_tx(fb, (u32)C::TX);
                gtm_tma2d(st, &maps->x, kt * GTM_BK, tok0, fb);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    if (RAW) {
                        gtm_tma2d(st + C::XBYTES + h * 64 * C::QROW, &maps->w[mi[h]], kt * C::QROW,
                                  r0[h], fb);
                        gtm_tma2d(st + C::XBYTES + C::SOFF + h * 1024, &maps->s[mi[h]],
                                  (kt >> 2) * 8, r0[h], fb);
                    } else {
                        gtm_tma2d(st + C::XBYTES + h * 8192, &maps->w[mi[h]], kt * GTM_BK, r0[h], fb);
                    }
                }
                if (++s == ST) {
                    s = 0;
                    ph ^= 1u;
                }
            }
        }
        if (GLU) {
            gtm_sync_all(1);
            gtm_sync_all(2);
        }
    } else {
        // ------------------------------------------------------------------ consumers
        const int c = wg - 1, v = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
        float d[TN / 2];
#pragma unroll
        for (int i = 0; i < TN / 2; i++) d[i] = 0.f;
        gtm_pin<TN / 2>(d);
        // Q4_0: this thread's rows of the weight tile, 64 c + 16 v + g and + 8; bytes 2t,
        // 2t + 1, 2t + 8, 2t + 9 of a block (k columns 2t.., 2t + 8.. of both k16 steps: low
        // nibbles the first, high nibbles the second). Q8_0: bytes 2t, 2t + 1, 2t + 8, 2t + 9
        // of the k16 step's 16 (k columns 2t.., 2t + 8..). BF16: values 2t, 2t + 1 (a word) and
        // 2t + 8, 2t + 9 of the step.
        const int ar = c * 64 + 16 * v + g;
        const u32 psel = (t & 1) ? 0x7632u : 0x5410u;
        int s = 0, sp = 0;
        u32 ph = 0;
#pragma unroll 1
        for (int kt = 0; kt < kt_n; kt++) {
            gtm_wait(full(s), ph);  // TMA writes are async-proxy: no proxy fence needed
            const u32 st = base0 + (u32)(s * STAGE);
            if (WF == 1) {
                const u32 qa = st + C::XBYTES, sa = qa + C::SOFF + 4u * (u32)(kt & 3);
                u32 wq[2][2], sc[2];
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const u32 rq = qa + (u32)(ar + 8 * h) * 32u + 4u * (u32)(t >> 1);
#pragma unroll
                    for (int b = 0; b < 2; b++)
                        wq[h][b] = gtm_prmt(gtm_lds32(rq + 16 * b), gtm_lds32(rq + 16 * b + 8), psel);
                    sc[h] = gtm_lds32(sa + (u32)(ar + 8 * h) * 16u);
                }
#pragma unroll
                for (int ks = 0; ks < 4; ks++) {
                    const int b = ks >> 1;
                    u32 w[2], dd[2];
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        w[h] = ((ks & 1) ? (wq[h][b] >> 4) : wq[h][b]) & 0x0F0F0F0Fu;
                        dd[h] = gtm_prmt(sc[h], sc[h], b ? 0x3232u : 0x1010u);
                    }
                    const u32 a0 = gtm_q4pair(w[0], 0x4140u, dd[0]);
                    const u32 a1 = gtm_q4pair(w[1], 0x4140u, dd[1]);
                    const u32 a2 = gtm_q4pair(w[0], 0x4342u, dd[0]);
                    const u32 a3 = gtm_q4pair(w[1], 0x4342u, dd[1]);
                    gw_fence();
                    gtm_mma_rs<TN>(d, a0, a1, a2, a3, gw_desc(st + 32 * ks));
                    gw_commit();
                    gtm_wait1();
                    if (ks == 0 && kt > 0 && lane == 0) gtm_arrive(empty(sp));
                }
            } else if (WF == 2 || WF == 3) {
                // Rows ar and ar + 8 (h) of the tile: ar % 8 == g, so the swizzles' row terms
                // are g (128-byte: r & 7) and g >> 1 (64-byte: (r >> 1) & 3) for both.
                const u32 wa = st + C::XBYTES;
                u32 sc[2] = {0u, 0u};
                if (WF == 2) {
#pragma unroll
                    for (int h = 0; h < 2; h++)
                        sc[h] = gtm_lds32(wa + C::SOFF + 4u * (u32)(kt & 3) + (u32)(ar + 8 * h) * 16u);
                }
#pragma unroll
                for (int ks = 0; ks < 4; ks++) {
                    u32 lo[2], hi[2];  // a0 / a1 (k 2t..), a2 / a3 (k 2t + 8..) of rows h
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        if (WF == 2) {
                            // Chunk ks of the row (values 16 ks..), its words t / 2 and t / 2
                            // + 2, then bytes 2t, 2t + 1, 2t + 8, 2t + 9 (psel) as unsigned
                            // q + 128 (section 3's ^ 0x80 per byte).
                            const u32 rq = wa + (u32)(ar + 8 * h) * 64u +
                                           ((u32)(ks ^ (g >> 1)) << 4) + 4u * (u32)(t >> 1);
                            const u32 w = gtm_prmt(gtm_lds32(rq), gtm_lds32(rq + 8), psel) ^
                                          0x80808080u;
                            const u32 dd = gtm_prmt(sc[h], sc[h], (ks >> 1) ? 0x3232u : 0x1010u);
                            lo[h] = gtm_q8pair(w, 0x4140u, dd);
                            hi[h] = gtm_q8pair(w, 0x4342u, dd);
                        } else {
                            // 16-byte chunks 2 ks (values 16 ks..) and 2 ks + 1 of the row,
                            // word t of each.
                            const u32 rb = wa + (u32)(ar + 8 * h) * 128u + 4u * (u32)t;
                            lo[h] = gt_bf2h(gtm_lds32(rb + ((u32)((2 * ks) ^ g) << 4)));
                            hi[h] = gt_bf2h(gtm_lds32(rb + ((u32)((2 * ks + 1) ^ g) << 4)));
                        }
                    }
                    gw_fence();
                    gtm_mma_rs<TN>(d, lo[0], lo[1], hi[0], hi[1], gw_desc(st + 32 * ks));
                    gw_commit();
                    gtm_wait1();
                    if (ks == 0 && kt > 0 && lane == 0) gtm_arrive(empty(sp));
                }
            } else {
                const u32 aa = st + C::XBYTES + c * 8192, bb = st;
                gw_fence();
#pragma unroll
                for (int ks = 0; ks < GTM_BK / 16; ks++)
                    gw_mma<TN>(d, gw_desc(aa + 32 * ks), gw_desc(bb + 32 * ks));
                gw_commit();
                gtm_wait1();
                if (kt > 0 && lane == 0) gtm_arrive(empty(sp));
            }
            sp = s;
            if (++s == ST) {
                s = 0;
                ph ^= 1u;
            }
        }
        gw_wait0();
        gtm_pin<TN / 2>(d);
        // D fragment: warp v holds A (weight) rows 16 v + g (+ 8 h); register 4 j + 2 h + e
        // is B column (token) 8 j + 2 t + e.
        if (!GLU) {
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
        } else {
            // Gate + up through shared memory: a [TN tokens][CLD] float tile, columns 0..63
            // gate rows blockIdx.y * 64 + col, 64..127 the same rows of up (consumer 1).
            gtm_sync_all(1);  // every consumer's MMAs (which read the stages) are done
            float* cs = (float*)sbase;
            constexpr int CLD = C::CLD;
#pragma unroll
            for (int j = 0; j < TN / 8; j++)
#pragma unroll
                for (int h = 0; h < 2; h++)
#pragma unroll
                    for (int e = 0; e < 2; e++)
                        cs[(8 * j + 2 * t + e) * CLD + ar + 8 * h] = d[4 * j + 2 * h + e];
            gtm_sync_all(2);
        }
    }
    if (GLU) gt_glu_store((const float*)sbase, C::CLD, 64, TN, tok0, blockIdx.y, sg, xsc, n, act);
}

// Grid: (ceil(n / TN), ceil(tile rows / 128)) (gate + up: tile rows = 2 rows), 384 threads,
// GtmCfg::SMEM dynamic bytes. Section 3's arguments (xh, xl unused: x comes through the
// map), then the tensor maps by value.
#define GEMMTM_ENTRY(name, WF, TN)                                                              \
    extern "C" __global__ void __launch_bounds__(GTM_THREADS, 1) gemmt_##name##_tm##TN(         \
        const u16* __restrict__ xh, const u16* __restrict__ xl, const float* __restrict__ xsc, \
        const void* w0, const void* w1, const void* w2, float* y0, float* y1, float* y2,      \
        const float* b0, const float* b1, const float* b2, int r0, int r1, int r2,            \
        const float* res, int k, int n, const __grid_constant__ GtmMaps maps) {               \
        const GtSegs sg = {{w0, w1, w2}, {y0, y1, y2}, {b0, b1, b2}, {r0, r1, r2}};           \
        gemmtm_body<WF, TN, false>(xsc, sg, res, k, n, 0, &maps);                             \
    }                                                                                         \
    extern "C" __global__ void __launch_bounds__(GTM_THREADS, 1) gemmt_##name##_glu_tm##TN(     \
        const u16* __restrict__ xh, const u16* __restrict__ xl, const float* __restrict__ xsc, \
        const void* wg, const void* wu, float* y, int rows, int k, int n, int act,            \
        const __grid_constant__ GtmMaps maps) {                                               \
        const GtSegs sg = {{wg, wu, wg}, {y, y, y}, {0, 0, 0}, {rows, 0, 0}};                 \
        gemmtm_body<WF, TN, true>(xsc, sg, 0, k, n, act, &maps);                              \
    }
GEMMTM_ENTRY(f16, 0, 128)
GEMMTM_ENTRY(f16, 0, 256)
GEMMTM_ENTRY(q4_0, 1, 128)
GEMMTM_ENTRY(q4_0, 1, 256)
GEMMTM_ENTRY(q8_0, 2, 128)
GEMMTM_ENTRY(q8_0, 2, 256)
GEMMTM_ENTRY(bf16, 3, 128)
GEMMTM_ENTRY(bf16, 3, 256)
