// ---------------------------------------------------------------------------------------
// attn_prefill_d64 / _d128: the prompt pass's attention on tensor cores (flash attention).
// Grid (ceil(ntok / AP_BQ), nh), AP_BQ / 16 warps; block (tile, h) takes the tile's AP_BQ
// tokens for query head h (KV head h / G), warp w its 16 tokens. q (times `scale`, as f16
// hi + lo) is staged in shared memory; the tile's KV blocks (KV_BLOCK = 64 positions, one
// pool block each, through bt) stream through two cp.async stages from the first block a
// token of the tile can see (its window) to the block of the tile's last position. Per KV
// block a warp computes S = q k^T (m16n8k16 MMAs, dims in order, hi then lo per k16 step),
// masks positions past the token's own and outside its window (-inf), applies the softcap,
// and updates its rows' online softmax: m' = max(m, max S), c = exp(m - m') (1 while m'
// is -inf), p = exp(S - m'), l = l c + sum p (lane sums in a fixed order, then the quad's
// butterfly), O = O c + P V (P rounded to f16, V by ldmatrix.trans). out = O / l.
// Invariance: a token's bits depend only on its q, its position and the cache — never on
// the tile it lands in, the other tokens or the pass size: S of a (token, position) is one
// MMA row, and a KV block wholly masked for a token (past its position, before its window,
// or skipped by the whole warp) leaves its m, l and O bit for bit as they were (c = 1,
// p = 0, O + 0 * V). The `chunking` gate checks it end to end; kernel-check's
// `attention_prefill` cases check rows alone vs among a pass, and the CPU reference.
// The decode path keeps attn_partial (f32 q, no f16 rounding): prompt and decode rows
// differ in bits, within the `prefill` gate's tolerance.
//
// Packed entry points (select.rs: PrefillAttn, attention_prefill_pack), sm_90 only:
//  * attn_prefill_pk_d64 / _d128: the same arithmetic per (token, head) row — the bits of
//    attn_prefill_d<HD> (kernel-check compares them) — with a block holding `gp` query
//    heads of one KV head (gp divides G) for `tt` tokens each (gp x tt <= AP_PK_ROWS
//    rows, tt a multiple of 16; block row r = head r / tt, token r % tt; warp w its 16
//    rows, all of one head): a KV block staged once serves gp heads. Tiles run heaviest
//    first (tile = gridDim.x - 1 - blockIdx.x: the causal tiles at the end see the most
//    KV blocks), which changes the order blocks are scheduled, not what they compute.
//  * attn_prefill_pk1_d64 / _d128: the packed layout with q as one f16 part (times
//    scale x log2(e)) and the softmax in base 2 (exp2f; the softcap applied to S / log2(e)
//    by the same formula): one MMA per k16 step of q k^T instead of two, half the shared
//    memory for q (two blocks per SM). Other bits than attn_prefill_d<HD>, within the
//    `prefill` gate's tolerance; the same invariance (a row's bits depend only on its q,
//    position and the cache).
//  * attn_prefill_pk1s_d64 / _d128 (flash4): attn_prefill_pk1_d<HD>'s arithmetic restricted
//    to one split of the positions: grid (tiles, head groups, splits), split s (blockIdx.z)
//    covers the absolute positions [s C, (s + 1) C), C = ATT_PREFILL_SPLIT (a multiple of
//    KV_BLOCK); a block whose split holds no position a row of its tile can see exits at
//    once. Each (token, head, split) writes its partial to `part` ([ntok][nh][ns][HD + 2]
//    f32: the unnormalized O, then m (base 2) and l); attn_prefill_combine folds a row's
//    splits floor(lo / C) ..= floor(p / C) in increasing order. With one split (a row that
//    sees positions of one split only, e.g. every row at a position < C) the fold is
//    0 + O * 1 = O, l * 1 = l, out = O / l: flash3's bits. The splits sit at absolute
//    positions, so a row's bits still depend only on its q, position, window and the cache.
//
// Every entry: a KV block wholly visible to all the rows of a warp (its last position at or
// before the warp's first row's, no window cut) skips the per-element mask compare (the
// mask would keep every element: the same bits).
#pragma once
#define AP_BQ 64
#define AP_WARPS (AP_BQ / 16)
#define AP_PK_ROWS 128
#ifndef ATT_PREFILL_SPLIT
#define ATT_PREFILL_SPLIT 1024
#endif
#if ATT_PREFILL_SPLIT % KV_BLOCK != 0
#error "ATT_PREFILL_SPLIT must be a multiple of KV_BLOCK"
#endif

// The body of every prompt-attention entry: QLO (q as f16 hi + lo, two MMAs per k16 step),
// EX2 (q pre-scaled by log2(e), exp2f) and SPLIT (one split of the positions per block,
// blockIdx.z; partials to `part` with `ns` splits per row) at compile time; gp heads x tt
// tokens per block and the tile order (rev: heaviest first) at run time.
// attn_prefill_d<HD>: QLO, !EX2, !SPLIT, gp = 1, tt = AP_BQ, rev = 0.
template <int HD, bool QLO, bool EX2, bool SPLIT>
__device__ __forceinline__ void attn_prefill_body(
    const float* __restrict__ q, const u16* __restrict__ kc, const u16* __restrict__ vc,
    const int* __restrict__ bt, const int* __restrict__ pos, float* __restrict__ out, int n,
    int nh, int nkv, int cap, int window, float scale, float softcap, int gp, int tt,
    bool rev, float* __restrict__ part, int ns) {
    constexpr int LD = HD + 8;  // row stride in halves: conflict-free ldmatrix phases
    constexpr int KT = HD / 16; // k16 steps of q k^T
    constexpr int DT = HD / 8;  // n8 tiles of O
    extern __shared__ uint4 ap_raw[];
    const int rows = gp * tt;   // q rows of the block (heads x tokens)
    u16* sqh = (u16*)ap_raw;
    u16* sql = sqh + rows * LD; // QLO only
    u16* skv = sqh + (QLO ? 2 : 1) * rows * LD;  // [stage][K, V][64][LD]
    __shared__ int s_lo, s_hi;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int tile = rev ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x;
    const int t0 = tile * tt, h0 = blockIdx.y * gp;
    const int G = nh / nkv, kvh = h0 / G;
    // This warp's head and its 16 tokens' offset in the tile.
    const int hw = h0 + (warp * 16) / tt, tw = (warp * 16) % tt;
    // Softmax base: e (expf) or 2 (exp2f, q and the softcap scaled by log2(e)).
    const float qs = EX2 ? scale * 1.4426950408889634f : scale;
    const float cap_s = EX2 ? softcap * 1.4426950408889634f : softcap;

    // The tile's positions: the first a token can see, the last.
    if (tid == 0) {
        s_lo = 0x7fffffff;
        s_hi = -1;
    }
    __syncthreads();
    if (tid < tt && t0 + tid < n) {
        const int p = pos[t0 + tid];
        if (p < cap) {
            atomicMin(&s_lo, window > 0 ? max(0, p - window + 1) : 0);
            atomicMax(&s_hi, p);
        }
    }
    __syncthreads();
    int lo_pos = s_lo, hi_pos = s_hi;
    if (SPLIT) {  // this block's split: [split * C, split * C + C)
        const int s0 = (int)blockIdx.z * ATT_PREFILL_SPLIT;
        lo_pos = max(lo_pos, s0);
        hi_pos = min(hi_pos, s0 + ATT_PREFILL_SPLIT - 1);
        if (hi_pos < lo_pos) return;  // no row of the tile sees a position of the split
    }
    if (hi_pos < 0) return;  // no token of the tile has a position in the cache
    // q of the tile, times qs, as f16 hi (+ lo) (rows past n: zeros).
    for (int i = tid; i < rows * HD / 2; i += blockDim.x) {
        const int r = i / (HD / 2), d = 2 * (i % (HD / 2));
        const int tok = t0 + r % tt, h = h0 + r / tt;
        float2 v = make_float2(0.f, 0.f);
        if (tok < n) v = *(const float2*)(q + ((u64)tok * nh + h) * HD + d);
        v.x *= qs;
        v.y *= qs;
        const u16 hx = f32_to_f16(v.x), hy = f32_to_f16(v.y);
        *(u32*)(sqh + r * LD + d) = (u32)hx | ((u32)hy << 16);
        if (QLO) {
            const u16 lx = f32_to_f16(v.x - f16_to_f32(hx)), ly = f32_to_f16(v.y - f16_to_f32(hy));
            *(u32*)(sql + r * LD + d) = (u32)lx | ((u32)ly << 16);
        }
    }
    __syncthreads();
    const int b_lo = lo_pos / KV_BLOCK, b_hi = hi_pos / KV_BLOCK;

    // This lane's rows (g, g + 8 of the warp's 16) and their positions (-1: no row).
    int prow[2];
#pragma unroll
    for (int e = 0; e < 2; e++) {
        const int tok = t0 + tw + g + 8 * e;
        const int p = tok < n ? pos[tok] : -1;
        prow[e] = p < cap ? p : -1;
    }
    // This lane's rows' visible positions [vlo, vhi] (vhi -1: no row): the mask keeps
    // j <= p and (window > 0) j > p - window, i.e. vlo <= j <= vhi.
    int vlo[2], vhi[2];
#pragma unroll
    for (int e = 0; e < 2; e++) {
        vhi[e] = prow[e];
        vlo[e] = window > 0 ? prow[e] - window + 1 : 0;
    }
    // The warp's position range (for skipping blocks masked for all its rows).
    int wmax = max(prow[0], prow[1]), wmin = min(prow[0] < 0 ? 0x7fffffff : prow[0],
                                                 prow[1] < 0 ? 0x7fffffff : prow[1]);
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        wmax = max(wmax, __shfl_xor_sync(0xffffffffu, wmax, o));
        wmin = min(wmin, __shfl_xor_sync(0xffffffffu, wmin, o));
    }

    auto load = [&](int stage, int b) {
        const int blk = bt[b];
        const u64 boff = ((u64)blk * nkv + kvh) * KV_BLOCK * HD;
        u16* sk = skv + stage * 2 * KV_BLOCK * LD;
        u16* sv = sk + KV_BLOCK * LD;
        for (int i = tid; i < KV_BLOCK * HD / 8; i += blockDim.x) {
            const int r = i / (HD / 8), c = 8 * (i % (HD / 8));
            gt_cp16(gt_smem(sk + r * LD + c), kc + boff + (u64)r * HD + c, true);
            gt_cp16(gt_smem(sv + r * LD + c), vc + boff + (u64)r * HD + c, true);
        }
    };

    float m[2] = {ASSAY_NEG_INF, ASSAY_NEG_INF}, l[2] = {0.f, 0.f};
    float o[DT][4];
#pragma unroll
    for (int i = 0; i < DT; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) o[i][e] = 0.f;

    // ldmatrix lane offsets (halves): A (q rows, k16), B (K rows = positions, k16 of dims),
    // B^T (V rows = positions k16, dims n8 pairs).
    const int a_off = (warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + (lane >> 4) * 8;
    const int k_off = ((lane & 7) + (lane >> 4) * 8) * LD + ((lane >> 3) & 1) * 8;
    const int v_off = ((lane & 7) + ((lane >> 3) & 1) * 8) * LD + (lane >> 4) * 8;

    load(0, b_lo);
    gt_commit();
    for (int b = b_lo; b <= b_hi; b++) {
        const int st = (b - b_lo) & 1;
        if (b < b_hi) load(st ^ 1, b + 1);
        gt_commit();
        gt_wait<1>();
        __syncthreads();
        const int j0 = b * KV_BLOCK;
        const bool skip = wmax < j0 || (window > 0 && j0 + KV_BLOCK - 1 < wmin - window + 1);
        // Every position of the block visible to every row of the warp (warp-uniform; wmin
        // is 0x7fffffff when the warp has no row in the cache).
        const bool full = j0 + KV_BLOCK - 1 <= wmin && wmin != 0x7fffffff &&
                          (window <= 0 || j0 > wmax - window);
        if (!skip) {  // warp-uniform
            const u16* sk = skv + st * 2 * KV_BLOCK * LD;
            const u16* sv = sk + KV_BLOCK * LD;
            float sc[8][4];
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int e = 0; e < 4; e++) sc[i][e] = 0.f;
#pragma unroll
            for (int kk = 0; kk < KT; kk++) {
                u32 ah[4], al[4];
                gt_ldm4(gt_smem(sqh + a_off + kk * 16), ah[0], ah[1], ah[2], ah[3]);
                if (QLO) gt_ldm4(gt_smem(sql + a_off + kk * 16), al[0], al[1], al[2], al[3]);
#pragma unroll
                for (int np = 0; np < 4; np++) {
                    u32 b0, b1, b2, b3;
                    gt_ldm4(gt_smem(sk + k_off + np * 16 * LD + kk * 16), b0, b1, b2, b3);
                    gm_mma(sc[2 * np], ah[0], ah[1], ah[2], ah[3], b0, b1);
                    if (QLO) gm_mma(sc[2 * np], al[0], al[1], al[2], al[3], b0, b1);
                    gm_mma(sc[2 * np + 1], ah[0], ah[1], ah[2], ah[3], b2, b3);
                    if (QLO) gm_mma(sc[2 * np + 1], al[0], al[1], al[2], al[3], b2, b3);
                }
            }
            // Mask, cap, row max over the block.
            float mb[2] = {ASSAY_NEG_INF, ASSAY_NEG_INF};
            if (full) {  // the mask keeps every element
#pragma unroll
                for (int nt = 0; nt < 8; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float v = sc[nt][e];
                        if (softcap > 0.f) v = cap_s * tanhf(v / cap_s);
                        sc[nt][e] = v;
                        mb[e >> 1] = fmaxf(mb[e >> 1], v);
                    }
            } else {
#pragma unroll
                for (int nt = 0; nt < 8; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int r = e >> 1, j = j0 + nt * 8 + 2 * t + (e & 1);
                        float v = sc[nt][e];
                        const bool ok = j <= vhi[r] && j >= vlo[r];
                        if (ok && softcap > 0.f) v = cap_s * tanhf(v / cap_s);
                        v = ok ? v : ASSAY_NEG_INF;
                        sc[nt][e] = v;
                        mb[r] = fmaxf(mb[r], v);
                    }
            }
            float corr[2], mn[2];
#pragma unroll
            for (int r = 0; r < 2; r++) {
                mb[r] = fmaxf(mb[r], __shfl_xor_sync(0xffffffffu, mb[r], 1));
                mb[r] = fmaxf(mb[r], __shfl_xor_sync(0xffffffffu, mb[r], 2));
                mn[r] = fmaxf(m[r], mb[r]);
                corr[r] = mn[r] == ASSAY_NEG_INF ? 1.f : (EX2 ? exp2f(m[r] - mn[r]) : expf(m[r] - mn[r]));
            }
            // p, the rows' sums, P as f16 A fragments (k16 step kk2: S tiles 2 kk2, 2 kk2 + 1).
            float ps[2] = {0.f, 0.f};
            u32 pa[4][4];
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                float pv[4];
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = e >> 1;
                    pv[e] = sc[nt][e] == ASSAY_NEG_INF ? 0.f
                            : (EX2 ? exp2f(sc[nt][e] - mn[r]) : expf(sc[nt][e] - mn[r]));
                    ps[r] += pv[e];
                }
                const u32 lo01 = (u32)f32_to_f16(pv[0]) | ((u32)f32_to_f16(pv[1]) << 16);
                const u32 lo23 = (u32)f32_to_f16(pv[2]) | ((u32)f32_to_f16(pv[3]) << 16);
                pa[nt >> 1][(nt & 1) * 2 + 0] = lo01;
                pa[nt >> 1][(nt & 1) * 2 + 1] = lo23;
            }
#pragma unroll
            for (int r = 0; r < 2; r++) {
                ps[r] += __shfl_xor_sync(0xffffffffu, ps[r], 1);
                ps[r] += __shfl_xor_sync(0xffffffffu, ps[r], 2);
                l[r] = fmaf(l[r], corr[r], ps[r]);
                m[r] = mn[r];
            }
#pragma unroll
            for (int dt = 0; dt < DT; dt++) {
                o[dt][0] *= corr[0];
                o[dt][1] *= corr[0];
                o[dt][2] *= corr[1];
                o[dt][3] *= corr[1];
            }
#pragma unroll
            for (int kk2 = 0; kk2 < 4; kk2++) {
#pragma unroll
                for (int dp = 0; dp < DT / 2; dp++) {
                    u32 b0, b1, b2, b3;
                    gt_ldm4t(gt_smem(sv + v_off + kk2 * 16 * LD + dp * 16), b0, b1, b2, b3);
                    gm_mma(o[2 * dp], pa[kk2][0], pa[kk2][1], pa[kk2][2], pa[kk2][3], b0, b1);
                    gm_mma(o[2 * dp + 1], pa[kk2][0], pa[kk2][1], pa[kk2][2], pa[kk2][3], b2,
                           b3);
                }
            }
        }
        __syncthreads();  // the stage is refilled next
    }
    gt_wait<0>();
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int tok = t0 + tw + g + 8 * r;
        if (prow[r] < 0) continue;
        if (SPLIT) {  // the unnormalized partial: O, then m and l
            float* dst = part + (((u64)tok * nh + hw) * ns + blockIdx.z) * (HD + 2);
#pragma unroll
            for (int dt = 0; dt < DT; dt++)
                *(float2*)(dst + dt * 8 + 2 * t) = make_float2(o[dt][2 * r], o[dt][2 * r + 1]);
            if (t == 0) {
                dst[HD] = m[r];
                dst[HD + 1] = l[r];
            }
            continue;
        }
        float* dst = out + ((u64)tok * nh + hw) * HD;
#pragma unroll
        for (int dt = 0; dt < DT; dt++) {
            float2 v = make_float2(o[dt][2 * r] / l[r], o[dt][2 * r + 1] / l[r]);
            *(float2*)(dst + dt * 8 + 2 * t) = v;
        }
    }
}

#define ATTN_PREFILL(HD)                                                                      \
    extern "C" __global__ void __launch_bounds__(AP_WARPS * 32) attn_prefill_d##HD(          \
        const float* __restrict__ q, const u16* __restrict__ kc, const u16* __restrict__ vc,  \
        const int* __restrict__ bt, const int* __restrict__ pos, float* __restrict__ out,     \
        int n, int nh, int nkv, int cap, int window, float scale, float softcap) {            \
        attn_prefill_body<HD, true, false, false>(q, kc, vc, bt, pos, out, n, nh, nkv, cap,   \
                                                  window, scale, softcap, 1, AP_BQ, false,    \
                                                  nullptr, 0);                                \
    }                                                                                         \
    extern "C" __global__ void __launch_bounds__(AP_PK_ROWS / 16 * 32)                        \
        attn_prefill_pk_d##HD(const float* __restrict__ q, const u16* __restrict__ kc,        \
                              const u16* __restrict__ vc, const int* __restrict__ bt,         \
                              const int* __restrict__ pos, float* __restrict__ out, int n,    \
                              int nh, int nkv, int cap, int window, float scale,              \
                              float softcap, int gp, int tt) {                                \
        attn_prefill_body<HD, true, false, false>(q, kc, vc, bt, pos, out, n, nh, nkv, cap,   \
                                                  window, scale, softcap, gp, tt, true,       \
                                                  nullptr, 0);                                \
    }                                                                                         \
    extern "C" __global__ void __launch_bounds__(AP_PK_ROWS / 16 * 32, 2)                     \
        attn_prefill_pk1_d##HD(const float* __restrict__ q, const u16* __restrict__ kc,       \
                               const u16* __restrict__ vc, const int* __restrict__ bt,        \
                               const int* __restrict__ pos, float* __restrict__ out, int n,   \
                               int nh, int nkv, int cap, int window, float scale,             \
                               float softcap, int gp, int tt) {                               \
        attn_prefill_body<HD, false, true, false>(q, kc, vc, bt, pos, out, n, nh, nkv, cap,   \
                                                  window, scale, softcap, gp, tt, true,       \
                                                  nullptr, 0);                                \
    }                                                                                         \
    extern "C" __global__ void __launch_bounds__(AP_PK_ROWS / 16 * 32, 2)                     \
        attn_prefill_pk1s_d##HD(const float* __restrict__ q, const u16* __restrict__ kc,      \
                                const u16* __restrict__ vc, const int* __restrict__ bt,       \
                                const int* __restrict__ pos, float* __restrict__ part, int n, \
                                int nh, int nkv, int cap, int window, float scale,            \
                                float softcap, int gp, int tt, int ns) {                      \
        attn_prefill_body<HD, false, true, true>(q, kc, vc, bt, pos, nullptr, n, nh, nkv, cap, \
                                                 window, scale, softcap, gp, tt, true, part,  \
                                                 ns);                                         \
    }
ATTN_PREFILL(64)
ATTN_PREFILL(128)

// attn_prefill_combine: flash4's fold of a row's split partials (attn_prefill_pk1s_d<HD>'s
// `part`, [n][nh][ns][hd + 2]). One warp per (token, head) row at position p with window w:
// the splits s = floor(lo / C) ..= floor(p / C) (lo = w > 0 ? max(0, p - w + 1) : 0), in
// increasing s: m* = max m_s, f_s = exp2f(m_s - m*) (0 where m_s is -inf),
// O = sum O_s f_s, l = sum l_s f_s (fmaf, in order); out = O / l. A row at no position in
// the cache writes nothing (as the other entries). One split: 0 + O * 1 = O, out = O / l,
// the bits of attn_prefill_pk1_d<HD>. Block: 4 warps (4 rows), grid ceil(n nh / 4).
extern "C" __global__ void __launch_bounds__(128)
    attn_prefill_combine(const float* __restrict__ part, const int* __restrict__ pos,
                         float* __restrict__ out, int n, int nh, int hd, int cap, int window,
                         int ns) {
    const int lane = threadIdx.x & 31;
    const long long row = (long long)blockIdx.x * 4 + (threadIdx.x >> 5);
    if (row >= (long long)n * nh) return;
    const int tok = (int)(row / nh);
    const int p = pos[tok];
    if (p < 0 || p >= cap) return;
    const int lo = window > 0 ? max(0, p - window + 1) : 0;
    const int s0 = lo / ATT_PREFILL_SPLIT;
    const int s1 = min(p / ATT_PREFILL_SPLIT, ns - 1);
    const float* pr = part + (u64)row * ns * (hd + 2);
    float ms = ASSAY_NEG_INF;
    for (int s = s0; s <= s1; s++) ms = fmaxf(ms, pr[(u64)s * (hd + 2) + hd]);
    // The first contributing split's term is taken as O_s f_s (= 0 + O_s f_s, keeping the
    // sign of a zero O_s as the unsplit kernel does), the later ones fmaf'd on in order.
    float l = 0.f;
    bool first = true;
    for (int s = s0; s <= s1; s++) {
        const float m = pr[(u64)s * (hd + 2) + hd];
        if (m == ASSAY_NEG_INF) continue;  // contributes 0
        const float f = exp2f(m - ms), ls = pr[(u64)s * (hd + 2) + hd + 1];
        l = first ? ls * f : fmaf(ls, f, l);
        first = false;
    }
    float* dst = out + (u64)row * hd;
    for (int d = lane; d < hd; d += 32) {
        float o = 0.f;
        first = true;
        for (int s = s0; s <= s1; s++) {
            const float m = pr[(u64)s * (hd + 2) + hd];
            if (m == ASSAY_NEG_INF) continue;
            const float f = exp2f(m - ms), os = pr[(u64)s * (hd + 2) + d];
            o = first ? os * f : fmaf(os, f, o);
            first = false;
        }
        dst[d] = o / l;
    }
}
