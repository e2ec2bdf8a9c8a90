// rope.cu — rotary position embedding, in place, for `ntok` tokens of `nheads` heads.
//
// x is [ntok][nheads][head_dim] f32; the first n_rot dims of each head are rotated, the
// rest pass through. tab holds 2*(n_rot/2) doubles: inv[i] = base^(-2i/n_rot) (computed on
// the host) then fac[i] (frequency factors, 1 when absent). Pair i at position p turns by
// theta = p * freq_scale * inv[i] / fac[i], evaluated in f64 in exactly that order (as the
// CPU reference does); cos and sin are taken in f64 and rounded to f32; the rotation
// (x0 c - x1 s, x0 s + x1 c) is done in f32 without fused multiply-adds. Normal (GPT-J)
// style rotates dims (2i, 2i+1), NeoX style dims (i, i + n_rot/2).
#include "common/common.cuh"

extern "C" __global__ void rope(float* __restrict__ x, const int* __restrict__ pos,
                                const double* __restrict__ tab, double freq_scale, int nheads,
                                int head_dim, int n_rot, int neox) {
    const int t = blockIdx.x;
    const double p = (double)pos[t];
    const int half = n_rot >> 1;
    float* xt = x + (u64)t * nheads * head_dim;
    for (int idx = threadIdx.x; idx < nheads * half; idx += blockDim.x) {
        const int h = idx / half, i = idx - h * half;
        const double theta = p * freq_scale * tab[i] / tab[half + i];
        double sd, cd;
        sincos(theta, &sd, &cd);
        const float s = (float)sd, c = (float)cd;
        float* xh = xt + (u64)h * head_dim;
        const int i0 = neox ? i : 2 * i;
        const int i1 = neox ? i + half : 2 * i + 1;
        const float a = xh[i0], b = xh[i1];
        xh[i0] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
        xh[i1] = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
    }
}
