//! Q4_K: placeholder while the format is being implemented (see quant/mod.rs).

use super::BlockFormat;

/// Q4_K block format.
pub struct Q4K;

impl BlockFormat for Q4K {
    const BLOCK_ELEMS: usize = 256;
    const BLOCK_BYTES: usize = 144;
    fn dequantize_block(_block: &[u8], out: &mut [f32]) {
        out.fill(f32::NAN);
    }
    fn quantize_block(_x: &[f32], out: &mut [u8]) {
        out.fill(0);
    }
}
