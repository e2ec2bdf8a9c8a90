//! Q8_0: 32 values per 34-byte block, symmetric 8-bit with one f16 scale.
//!
//! Layout (GGML `block_q8_0`): `d: f16` (bytes 0..2), then `qs[32]` as `i8`. Value of element
//! `i` is `d * q_i`.
//!
//! Quantizer: `d = max|x| / 127` rounded *up* to f16, so every `x / d` lies in `[-127, 127]`;
//! each element rounds to the nearest integer (halves away from zero), error `<= d / 2`.

use super::BlockFormat;
use super::q4_0::{QK32, f16_at, f16_magnitude_up, round_div, signed_absmax};

/// Q8_0 block format.
pub struct Q8_0;

impl BlockFormat for Q8_0 {
    const BLOCK_ELEMS: usize = QK32;
    const BLOCK_BYTES: usize = 2 + QK32;

    fn dequantize_block(block: &[u8], out: &mut [f32]) {
        let d = f16_at(block, 0);
        for (o, &b) in out.iter_mut().zip(&block[2..2 + QK32]) {
            *o = (b as i8) as f32 * d;
        }
    }

    fn quantize_block(x: &[f32], out: &mut [u8]) {
        let amax = signed_absmax(x).abs();
        let d = f16_magnitude_up(amax / 127.0);
        out[0..2].copy_from_slice(&d.to_le_bytes());
        let d = d.to_f32();
        for (o, &xi) in out[2..2 + QK32].iter_mut().zip(x) {
            *o = (round_div(xi, d).clamp(-127.0, 127.0) as i8) as u8;
        }
    }

    fn dot_block(block: &[u8], x: &[f32]) -> f32 {
        let d = f16_at(block, 0);
        let mut acc = 0f32;
        for (&b, &xi) in block[2..2 + QK32].iter().zip(x) {
            acc += (b as i8) as f32 * xi;
        }
        d * acc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    #[test]
    fn layout_matches_hand_built_block() {
        let mut block = [0u8; 34];
        block[0..2].copy_from_slice(&f16::from_f32(0.125).to_le_bytes());
        for i in 0..32 {
            block[2 + i] = ((i as i8) * 4 - 64) as u8;
        }
        let mut out = [0f32; 32];
        Q8_0::dequantize_block(&block, &mut out);
        for (i, &v) in out.iter().enumerate() {
            assert_eq!(v, 0.125 * ((i as i32) * 4 - 64) as f32);
        }
    }
}
