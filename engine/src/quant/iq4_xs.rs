//! IQ4_XS: placeholder while the format is being implemented (see quant/mod.rs).

use super::BlockFormat;

/// IQ4_XS block format.
pub struct Iq4Xs;

impl BlockFormat for Iq4Xs {
    const BLOCK_ELEMS: usize = 256;
    const BLOCK_BYTES: usize = 136;
    fn dequantize_block(_block: &[u8], out: &mut [f32]) {
        out.fill(f32::NAN);
    }
    fn quantize_block(_x: &[f32], out: &mut [u8]) {
        out.fill(0);
    }
}
