//! BF16: little-endian bfloat16 (the top half of an f32), one value per "block".
//! Quantization rounds to nearest even, as `half` and GGML do.

use super::BlockFormat;

/// bfloat16.
pub struct Bf16;

impl BlockFormat for Bf16 {
    const BLOCK_ELEMS: usize = 1;
    const BLOCK_BYTES: usize = 2;
    fn dequantize_block(block: &[u8], out: &mut [f32]) {
        out[0] = half::bf16::from_le_bytes([block[0], block[1]]).to_f32();
    }
    fn quantize_block(x: &[f32], out: &mut [u8]) {
        out.copy_from_slice(&half::bf16::from_f32(x[0]).to_le_bytes());
    }
}
