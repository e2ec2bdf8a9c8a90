//! F32: plain little-endian IEEE-754 single precision, one value per "block".

use super::BlockFormat;

/// Unquantized f32.
pub struct F32;

impl BlockFormat for F32 {
    const BLOCK_ELEMS: usize = 1;
    const BLOCK_BYTES: usize = 4;
    fn dequantize_block(block: &[u8], out: &mut [f32]) {
        out[0] = f32::from_le_bytes([block[0], block[1], block[2], block[3]]);
    }
    fn quantize_block(x: &[f32], out: &mut [u8]) {
        out.copy_from_slice(&x[0].to_le_bytes());
    }
}
