//! IQ4_NL: placeholder while the format is being implemented (see quant/mod.rs).

use super::BlockFormat;

/// IQ4_NL block format.
pub struct Iq4Nl;

impl BlockFormat for Iq4Nl {
    const BLOCK_ELEMS: usize = 32;
    const BLOCK_BYTES: usize = 18;
    fn dequantize_block(_block: &[u8], out: &mut [f32]) {
        out.fill(f32::NAN);
    }
    fn quantize_block(_x: &[f32], out: &mut [u8]) {
        out.fill(0);
    }
}
