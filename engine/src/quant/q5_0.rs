//! Q5_0: placeholder while the format is being implemented (see quant/mod.rs).

use super::BlockFormat;

/// Q5_0 block format.
pub struct Q5_0;

impl BlockFormat for Q5_0 {
    const BLOCK_ELEMS: usize = 32;
    const BLOCK_BYTES: usize = 22;
    fn dequantize_block(_block: &[u8], out: &mut [f32]) {
        out.fill(f32::NAN);
    }
    fn quantize_block(_x: &[f32], out: &mut [u8]) {
        out.fill(0);
    }
}
