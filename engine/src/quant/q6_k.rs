//! Q6_K: placeholder while the format is being implemented (see quant/mod.rs).

use super::BlockFormat;

/// Q6_K block format.
pub struct Q6K;

impl BlockFormat for Q6K {
    const BLOCK_ELEMS: usize = 256;
    const BLOCK_BYTES: usize = 210;
    fn dequantize_block(_block: &[u8], out: &mut [f32]) {
        out.fill(f32::NAN);
    }
    fn quantize_block(_x: &[f32], out: &mut [u8]) {
        out.fill(0);
    }
}
