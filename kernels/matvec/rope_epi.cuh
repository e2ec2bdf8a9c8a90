// ---------------------------------------------------------------- RoPE + KV store epilogue
//
// The epilogue of matvec_<fmt>_seg3rope_wr_r<R>_d<D> (streamed.cuh's segmented kernel on
// q, k and v, ASSAY_ROPE_FUSE=1, select.rs choose_rope_fuse): rope.cu's one-token rope_kv
// done where the rows are summed, so that its launch goes away. Segments: 0 = q (nh heads),
// 1 = k (nkv heads), 2 = v (nkv heads), each rows_s = heads x hd (hd and R even, checked
// on the host). A row group holds R consecutive rows of one segment starting at a multiple
// of R, so the adjacent pairs (2i, 2i + 1) of the normal (GPT-J) rotation never straddle
// two groups (NeoX pairs (i, i + n_rot / 2) do: not served here). Lane j < R / 2 of the
// warp takes the group's pair j (rows 2j, 2j + 1; every lane holds the same warp_sum bits):
//  * its two values are mv_store's (s + bias[row], or s): what rope_kv reads back from y;
//  * q and k dims d < n_rot: rope_kv_item's statements on them (the f64 angle
//    pi * freq_scale * tab[i] / tab[half + i], f64 sincos rounded to f32, the rotation by
//    __fmul_rn / __fsub_rn / __fadd_rn), the results stored to y (as rope_kv stores them in
//    place);
//  * k (rotated or past n_rot) and v also into the layer's f16 caches at the token's
//    position (kv_off, f32_to_f16: kv_store's rounding), nothing when the position is
//    outside 0 .. cap - 1 (the rotations still happen), as rope_kv_item does.
// So y and the caches get rope_kv's bits after the plain segmented launch.
#pragma once
struct MvRope {
    const int* pos;  // the token's position (pos[0])
    u16* kc;         // the layer's K and V pools (paged through bt)
    u16* vc;
    const int* bt;
    const double* tab;  // rope.cu's table: inv[n_rot / 2] then fac[n_rot / 2]
    double freq_scale;
    int hd, n_rot, nkv, cap;
};

// Group lg of segment seg (output y, bias or null, rows rows), the R row sums `sum` (the
// warp_sum of each row), the token at position pi.
template <int R>
__device__ __forceinline__ void mv_rope_store(const MvRope& rp, int pi, int seg, float* y,
                                              const float* __restrict__ bias, int rows,
                                              int lg, const float (&sum)[R]) {
    static_assert(R % 2 == 0, "pairs of rows in one group");
    const int lane = threadIdx.x & 31;
    const bool store = pi >= 0 && pi < rp.cap;
    const int half = rp.n_rot >> 1;
#pragma unroll
    for (int j = 0; j < R / 2; j++) {
        const int row = lg * R + 2 * j;  // even; rows is even, so row + 1 < rows too
        if (lane != j || row >= rows) continue;
        float a = bias != 0 ? sum[2 * j] + bias[row] : sum[2 * j];
        float b = bias != 0 ? sum[2 * j + 1] + bias[row + 1] : sum[2 * j + 1];
        const int h = row / rp.hd, d = row - h * rp.hd;
        if (seg < 2 && d < rp.n_rot) {
            const int i = d >> 1;
            const double theta = (double)pi * rp.freq_scale * rp.tab[i] / rp.tab[half + i];
            double sd, cd;
            sincos(theta, &sd, &cd);
            const float s = (float)sd, c = (float)cd;
            const float r0 = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
            const float r1 = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
            a = r0;
            b = r1;
        }
        y[row] = a;
        y[row + 1] = b;
        if (seg > 0 && store) {
            u16* dst = (seg == 1 ? rp.kc : rp.vc) + kv_off(rp.bt, h, pi, rp.nkv, rp.hd) + d;
            dst[0] = f32_to_f16(a);
            dst[1] = f32_to_f16(b);
        }
    }
}
