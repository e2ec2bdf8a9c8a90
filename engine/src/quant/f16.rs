//! F16: little-endian IEEE-754 half precision, one value per "block".

use super::BlockFormat;

/// IEEE half precision.
pub struct F16;

impl BlockFormat for F16 {
    const BLOCK_ELEMS: usize = 1;
    const BLOCK_BYTES: usize = 2;
    fn dequantize_block(block: &[u8], out: &mut [f32]) {
        out[0] = half::f16::from_le_bytes([block[0], block[1]]).to_f32();
    }
    fn quantize_block(x: &[f32], out: &mut [u8]) {
        out.copy_from_slice(&half::f16::from_f32(x[0]).to_le_bytes());
    }
}
