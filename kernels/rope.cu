// rope.cu — rotary position embedding, in place, for `ntok` tokens of `nheads` heads.
//
// x is [ntok][nheads][head_dim] f32; the first n_rot dims of each head are rotated, the
// rest pass through. Pair i (0 <= i < n_rot/2) turns by angle pos[t] * inv_freq[i]:
// normal (GPT-J) style rotates dims (2i, 2i+1), NeoX style dims (i, i + n_rot/2).
// inv_freq is computed once on the host (base, scaling and frequency factors folded in),
// so the device and the CPU reference use the very same frequencies.
#include "common/common.cuh"

extern "C" __global__ void rope(float* __restrict__ x, const int* __restrict__ pos,
                                const float* __restrict__ inv_freq, int nheads, int head_dim,
                                int n_rot, int neox) {
    const int t = blockIdx.x;
    const float p = (float)pos[t];
    const int half = n_rot >> 1;
    float* xt = x + (u64)t * nheads * head_dim;
    for (int idx = threadIdx.x; idx < nheads * half; idx += blockDim.x) {
        const int h = idx / half, i = idx - h * half;
        float s, c;
        sincosf(p * inv_freq[i], &s, &c);
        float* xh = xt + (u64)h * head_dim;
        const int i0 = neox ? i : 2 * i;
        const int i1 = neox ? i + half : 2 * i + 1;
        const float a = xh[i0], b = xh[i1];
        xh[i0] = a * c - b * s;
        xh[i1] = a * s + b * c;
    }
}
