// mask.cu — a grammar's token mask applied to a row of logits on the device.
//
// mask holds ceil(n / 32) u32 words in llguidance's layout: bit (i % 32) of word (i / 32)
// set = token i allowed. Every disallowed logit becomes -inf in place; allowed logits are
// not touched (same bits), so the argmax (argmax.cu) and the sampler chain (sample.cu)
// that run next can only pick allowed tokens, exactly as the CPU path that sets the same
// logits to -inf before picking (engine::api::TokenMask::apply). One thread per logit.
#include "common/common.cuh"

extern "C" __global__ void __launch_bounds__(256)
    mask_logits(float* __restrict__ x, const u32* __restrict__ mask, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const u32 w = mask[i >> 5];
    if (((w >> (i & 31)) & 1u) == 0u) x[i] = ASSAY_NEG_INF;
}
