// embed.cu — embedding lookup: out[t] = scale * dequantize(W[tokens[t]]).
//
// One block per token; threads take 32-value chunks of the row in turn (the same chunk
// decoders as matvec, common/formats.cuh, in the device layout of each format). A token id outside 0..vocab writes NaN over the whole row, so a bad
// id is loud rather than a silent read out of bounds.
#include "common/common.cuh"
#include "common/formats.cuh"

template <class F>
__device__ __forceinline__ void embed_body(const u8* __restrict__ w, u64 row_bytes,
                                           const int* __restrict__ tokens, int vocab,
                                           float* __restrict__ out, int k, float scale) {
    const int t = blockIdx.x;
    const int tok = tokens[t];
    float* o = out + (u64)t * k;
    if (tok < 0 || tok >= vocab) {
        for (int i = threadIdx.x; i < k; i += blockDim.x) o[i] = ASSAY_NAN;
        return;
    }
    const WMat m = {w, row_bytes, (u64)vocab, (u64)(k / F::ELEMS)};
    for (int c = threadIdx.x; c < (k >> 5); c += blockDim.x) {
        float v[32];
        F::chunkm(m, (u64)tok, c, v);
        float4* op = (float4*)(o + ((u64)c << 5));
#pragma unroll
        for (int i = 0; i < 8; i++)
            op[i] = make_float4(v[4 * i] * scale, v[4 * i + 1] * scale, v[4 * i + 2] * scale,
                                v[4 * i + 3] * scale);
    }
}

#define ASSAY_EMBED(name, F)                                                              \
    extern "C" __global__ void embed_##name(const u8* __restrict__ w, u64 row_bytes,     \
                                            const int* __restrict__ tokens, int vocab,    \
                                            float* __restrict__ out, int k, float scale) { \
        embed_body<F>(w, row_bytes, tokens, vocab, out, k, scale);                        \
    }

ASSAY_FOR_EACH_FORMAT(ASSAY_EMBED)
