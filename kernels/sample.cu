// sample.cu — the sampler chain of engine/src/sampling on the device: one row of logits in,
// one token id out (4 bytes back to the host).
//
// Contract (the CPU chain is `engine::sampling::pick`; kernel-check compares the two):
//   1. w = logits with NaN -> -inf, into the scratch row; penalties over the window of the
//      last accepted tokens (repetition, then frequency * count + presence), in the CPU's
//      f32 operation order with explicit round-to-nearest intrinsics (no FMA contraction),
//      so the penalized row is bit-identical to the CPU's;
//   2. temperature <= 0: arg-max of w (ties to the smallest id, like argmax.cu);
//   3. candidates ordered by (value descending, id ascending) — one 64-bit key per token,
//      (order-preserving bits of the f32 << 32) | (0xffffffff - id), a total order; the
//      top R = min(K, SAMPLE_CAP) keys (K = top_k, or the vocabulary when top-k is off) are
//      found by radix select (counting passes over 8-bit digits, early exit once the
//      selected bin holds exactly the missing count), gathered and bitonic-sorted in shared
//      memory;
//   4. top-p over the softmax of the top K (normalizer over all K tokens, also when K > R),
//      5. min-p (keep e_j = exp(v_j - v_0) >= min_p), 6. softmax of v / T over the
//      survivors and the first j with draw < cumulative p_j (none: the last survivor of
//      nonzero probability, so a -inf logit is never picked). Probabilities in f64; sums and
//      prefix sums are block reductions in a fixed order (deterministic, but not the CPU's
//      sequential order: a draw within ~1e-15 of a boundary may pick a neighbour — the
//      near-ties kernel-check counts);
//   7. when the survivors of top-p / min-p do not fit in the R sorted candidates (K > R and
//      neither cut falls inside them), out[0] = -1: the host samples that step from the
//      logits on the CPU with the same draw (the documented fallback; e.g. plain
//      temperature sampling over a 150k vocabulary).
// A row whose best value is -inf (every logit NaN or -inf) gives the best candidate's id.
//
// state (int32 words, written by the host before each launch or graph replay):
//   [0..2) draw in [0, 1) as f64 bits (lo, hi)   [2] window length   [3] top_k (0 = off)
//   [4] temperature  [5] top_p  [6] min_p  [7] repeat  [8] presence  [9] frequency (f32 bits)
//   [16..16+window) the window of accepted tokens, oldest first.
// out[0] = token or -1 (fallback); out[1] = survivors sampled from (diagnostic).
// One block of SAMPLE_THREADS threads; scratch holds n floats.
#include "common/common.cuh"

#define ST_HEADER 16
#define PER_THREAD (SAMPLE_CAP / SAMPLE_THREADS)

__device__ __forceinline__ u32 fkey(float v) {
    const u32 b = __float_as_uint(v);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float unkey(u32 k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

__device__ __forceinline__ u64 ckey(float v, int i) {
    return ((u64)fkey(v) << 32) | (u64)(0xffffffffu - (u32)i);
}

__device__ __forceinline__ bool better(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}

// The rank-th largest key (1-based) of w[0..n): every key >= the result is among the top
// `rank`, and there are exactly `rank` of them.
__device__ u64 radix_select(const float* w, int n, int rank, u32* hist, int* sh) {
    u64 prefix = 0, mask = 0;
    int r = rank;
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
        __syncthreads();
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            const u64 k = ckey(w[i], i);
            if ((k & mask) == prefix) atomicAdd(&hist[(k >> shift) & 255], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int acc = 0, b = 255;
            for (; b > 0; b--) {
                if (acc + (int)hist[b] >= r) break;
                acc += (int)hist[b];
            }
            sh[0] = b;
            sh[1] = r - acc;
            sh[2] = (int)hist[b];
        }
        __syncthreads();
        prefix |= (u64)sh[0] << shift;
        mask |= (u64)255 << shift;
        r = sh[1];
        const bool done = sh[2] == r;
        __syncthreads();
        if (done) return prefix;
    }
    return prefix;
}

// Sum over the block in a fixed order (each thread's partial, then lanes, then warps).
__device__ double block_sum(double v, double* sw) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) sw[warp] = v;
    __syncthreads();
    double t = 0.0;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) t += sw[i];
    __syncthreads();
    return t;
}

// Inclusive prefix sums of x (PER_THREAD consecutive values per thread, candidate order)
// into out[0..SAMPLE_CAP); returns the total. Fixed order: deterministic.
__device__ double block_scan(const double* x, double* out, double* sw) {
    double loc[PER_THREAD];
    double run = 0.0;
#pragma unroll
    for (int q = 0; q < PER_THREAD; q++) {
        run += x[q];
        loc[q] = run;
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    double incl = run;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const double y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += y;
    }
    if (lane == 31) sw[warp] = incl;
    __syncthreads();
    double excl = __shfl_up_sync(0xffffffffu, incl, 1);
    if (lane == 0) excl = 0.0;
    double before = 0.0, total = 0.0;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) {
        if (i < warp) before += sw[i];
        total += sw[i];
    }
    const double off = before + excl;
#pragma unroll
    for (int q = 0; q < PER_THREAD; q++) out[threadIdx.x * PER_THREAD + q] = off + loc[q];
    __syncthreads();
    return total;
}

extern "C" __global__ void __launch_bounds__(SAMPLE_THREADS)
    sample_row(const float* __restrict__ logits, int n, const int* __restrict__ st,
               float* __restrict__ w, int* __restrict__ out) {
    __shared__ u64 cand[SAMPLE_CAP];  // sorted keys, later reused as f64 prefix sums
    __shared__ u32 hist[256];
    __shared__ double sw[32];
    __shared__ int sh[4];
    __shared__ float sbv[32];
    __shared__ int sbi[32];
    const int tid = threadIdx.x;

    const double u = __hiloint2double(st[1], st[0]);
    const int wlen = st[2];
    const int top_k = st[3];
    const float temp = __int_as_float(st[4]);
    const float top_p = __int_as_float(st[5]);
    const float min_p = __int_as_float(st[6]);
    const float rep = __int_as_float(st[7]);
    const float pres = __int_as_float(st[8]);
    const float freq = __int_as_float(st[9]);
    const int* win = st + ST_HEADER;

    // 1. penalized copy.
    for (int i = tid; i < n; i += blockDim.x) {
        const float v = logits[i];
        w[i] = v != v ? ASSAY_NEG_INF : v;
    }
    __syncthreads();
    if (rep != 1.0f || pres != 0.0f || freq != 0.0f) {
        for (int j = tid; j < wlen; j += blockDim.x) {
            const int t = win[j];
            bool first = true;
            int count = 0;
            for (int k = 0; k < wlen; k++) {
                if (win[k] == t) {
                    if (k < j) first = false;
                    count++;
                }
            }
            if (first && t >= 0 && t < n) {
                float v = w[t];
                if (rep != 1.0f && rep > 0.0f) v = v > 0.0f ? __fdiv_rn(v, rep) : __fmul_rn(v, rep);
                v = __fsub_rn(v, __fadd_rn(__fmul_rn(freq, (float)count), pres));
                w[t] = v;
            }
        }
        __syncthreads();
    }

    // 2. greedy.
    if (temp <= 0.0f) {
        float bv = ASSAY_NEG_INF;
        int bi = 0x7fffffff;
        for (int i = tid; i < n; i += blockDim.x) {
            const float v = w[i];
            if (better(v, i, bv, bi)) { bv = v; bi = i; }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
        }
        if ((tid & 31) == 0) { sbv[tid >> 5] = bv; sbi[tid >> 5] = bi; }
        __syncthreads();
        if (tid == 0) {
            for (int i = 0; i < (int)(blockDim.x >> 5); i++)
                if (better(sbv[i], sbi[i], bv, bi)) { bv = sbv[i]; bi = sbi[i]; }
            out[0] = bi == 0x7fffffff ? 0 : bi;
            out[1] = 1;
        }
        return;
    }

    const int kk = (top_k > 0 && top_k < n) ? top_k : n;
    const bool use_p = top_p < 1.0f, use_min = min_p > 0.0f;
    if (kk > SAMPLE_CAP && !use_p && !use_min) {
        if (tid == 0) { out[0] = -1; out[1] = kk; }
        return;
    }
    const int r = kk < SAMPLE_CAP ? kk : SAMPLE_CAP;

    // 3. the top r keys, sorted descending.
    const u64 thr = r == n ? 0ull : radix_select(w, n, r, hist, sh);
    if (tid == 0) sh[3] = 0;
    for (int i = tid; i < SAMPLE_CAP; i += blockDim.x) cand[i] = 0ull;
    __syncthreads();
    for (int i = tid; i < n; i += blockDim.x) {
        const u64 k = ckey(w[i], i);
        if (k >= thr) {
            const int s = atomicAdd(&sh[3], 1);
            if (s < SAMPLE_CAP) cand[s] = k;
        }
    }
    __syncthreads();
    int p2 = 2;
    while (p2 < r) p2 <<= 1;
    for (int k = 2; k <= p2; k <<= 1) {
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = tid; i < p2; i += blockDim.x) {
                const int ixj = i ^ j;
                if (ixj > i) {
                    const u64 a = cand[i], b = cand[ixj];
                    const bool desc = (i & k) == 0;
                    if (desc ? (a < b) : (a > b)) { cand[i] = b; cand[ixj] = a; }
                }
            }
            __syncthreads();
        }
    }
    float v[PER_THREAD];
    int id[PER_THREAD];
#pragma unroll
    for (int q = 0; q < PER_THREAD; q++) {
        const u64 key = cand[tid * PER_THREAD + q];
        v[q] = unkey((u32)(key >> 32));
        id[q] = (int)(0xffffffffu - (u32)key);
    }
    const float v0 = unkey((u32)(cand[0] >> 32));
    const int id0 = (int)(0xffffffffu - (u32)cand[0]);
    __syncthreads();  // cand is reused as prefix sums below
    double* acc = (double*)cand;
    if (v0 == ASSAY_NEG_INF) {
        if (tid == 0) { out[0] = id0; out[1] = 1; }
        return;
    }
    double x[PER_THREAD];
    const int BEYOND = 0x7fffffff;
    int keep = r < kk ? BEYOND : r;

    // 4. top-p: normalizer over all kk tokens.
    if (use_p) {
        double z;
        if (r == kk) {
            double part = 0.0;
#pragma unroll
            for (int q = 0; q < PER_THREAD; q++)
                part += tid * PER_THREAD + q < r ? exp((double)v[q] - (double)v0) : 0.0;
            z = block_sum(part, sw);
        } else {
            const u64 tk = kk == n ? 0ull : radix_select(w, n, kk, hist, sh);
            double part = 0.0;
            for (int i = tid; i < n; i += blockDim.x) {
                const float wi = w[i];
                if (ckey(wi, i) >= tk) part += exp((double)wi - (double)v0);
            }
            z = block_sum(part, sw);
        }
#pragma unroll
        for (int q = 0; q < PER_THREAD; q++)
            x[q] = tid * PER_THREAD + q < r ? exp((double)v[q] - (double)v0) / z : 0.0;
        block_scan(x, acc, sw);
        if (tid == 0) sh[0] = BEYOND;
        __syncthreads();
#pragma unroll
        for (int q = 0; q < PER_THREAD; q++) {
            const int j = tid * PER_THREAD + q;
            if (j < r && acc[j] >= (double)top_p) atomicMin(&sh[0], j + 1);
        }
        __syncthreads();
        const int kp = sh[0];
        __syncthreads();
        if (kp != BEYOND) keep = kp;
    }
    // 5. min-p: keep the prefix with exp(v - v0) >= min_p.
    if (use_min) {
        if (tid == 0) sh[0] = BEYOND;
        __syncthreads();
#pragma unroll
        for (int q = 0; q < PER_THREAD; q++) {
            const int j = tid * PER_THREAD + q;
            if (j < r && exp((double)v[q] - (double)v0) < (double)min_p) atomicMin(&sh[0], j);
        }
        __syncthreads();
        const int km = sh[0];
        __syncthreads();
        if (km < keep) keep = km;
    }
    if (keep == BEYOND) {
        if (tid == 0) { out[0] = -1; out[1] = kk; }
        return;
    }
    if (keep > r) keep = r;
    if (keep < 1) keep = 1;

    // 6. temperature softmax over the survivors and the draw.
    const double t = (double)temp;
#pragma unroll
    for (int q = 0; q < PER_THREAD; q++)
        x[q] = tid * PER_THREAD + q < keep ? exp(((double)v[q] - (double)v0) / t) : 0.0;
    double part = 0.0;
#pragma unroll
    for (int q = 0; q < PER_THREAD; q++) part += x[q];
    const double s = block_sum(part, sw);
#pragma unroll
    for (int q = 0; q < PER_THREAD; q++) x[q] = x[q] / s;
    block_scan(x, acc, sw);
    if (tid == 0) { sh[0] = BEYOND; sh[1] = 0; }
    __syncthreads();
#pragma unroll
    for (int q = 0; q < PER_THREAD; q++) {
        const int j = tid * PER_THREAD + q;
        if (j < keep && u < acc[j]) atomicMin(&sh[0], j);
        if (j < keep && x[q] > 0.0) atomicMax(&sh[1], j);
    }
    __syncthreads();
    // A draw at or past the rounded total (u close to 1) takes the last survivor of nonzero
    // probability, never a zero-probability one (a -inf logit: a token a grammar masked).
    const int pick = sh[0] != BEYOND ? sh[0] : sh[1];
#pragma unroll
    for (int q = 0; q < PER_THREAD; q++)
        if (tid * PER_THREAD + q == pick) { out[0] = id[q]; out[1] = keep; }
}
