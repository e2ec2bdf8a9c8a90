//! Q4_1: 32 values per 20-byte block, 4-bit with an f16 scale and an f16 minimum.
//!
//! Layout (GGML `block_q4_1`): `d: f16` (bytes 0..2), `m: f16` (2..4), then `qs[16]` with
//! element `j` in the low nibble of `qs[j]` and element `j + 16` in its high nibble. Value of
//! element `i` is `d * q_i + m` with `q_i` in `0..=15`.
//!
//! Quantizer: `m` is the block minimum rounded *down* to f16 and `d = (max - m) / 15` rounded
//! *up*, so the 16-level grid `m, m + d, .., m + 15d` covers the whole block and every element
//! rounds to a level within `d / 2`.

use super::BlockFormat;
use super::q4_0::{QK32, f16_at, f16_floor, f16_magnitude_up, nibble, pack_nibbles, round_div};

/// Q4_1 block format.
pub struct Q4_1;

impl BlockFormat for Q4_1 {
    const BLOCK_ELEMS: usize = QK32;
    const BLOCK_BYTES: usize = 4 + QK32 / 2;

    fn dequantize_block(block: &[u8], out: &mut [f32]) {
        let d = f16_at(block, 0);
        let m = f16_at(block, 2);
        let qs = &block[4..4 + QK32 / 2];
        for (i, o) in out.iter_mut().enumerate().take(QK32) {
            *o = d * nibble(qs, i) as f32 + m;
        }
    }

    fn quantize_block(x: &[f32], out: &mut [u8]) {
        let (min, max) = min_max(x);
        let m = f16_floor(min);
        let d = f16_magnitude_up((max - m.to_f32()) / 15.0);
        out[0..2].copy_from_slice(&d.to_le_bytes());
        out[2..4].copy_from_slice(&m.to_le_bytes());
        let (d, m) = (d.to_f32(), m.to_f32());
        let mut q = [0u8; QK32];
        for (qi, &xi) in q.iter_mut().zip(x) {
            *qi = round_div(xi - m, d).clamp(0.0, 15.0) as u8;
        }
        pack_nibbles(&q, &mut out[4..4 + QK32 / 2]);
    }

    fn dot_block(block: &[u8], x: &[f32]) -> f32 {
        // element by element (not `d·Σq·x + m·Σx`): the two factored terms can cancel
        // heavily when `m` is large, and the reference must stay accurate relative to Σ|y·x|
        let d = f16_at(block, 0);
        let m = f16_at(block, 2);
        let qs = &block[4..4 + QK32 / 2];
        let mut acc = 0f32;
        for (i, &xi) in x.iter().enumerate().take(QK32) {
            acc += (d * nibble(qs, i) as f32 + m) * xi;
        }
        acc
    }
}

/// (minimum, maximum) of the finite elements; (0, 0) when there are none.
pub(super) fn min_max(x: &[f32]) -> (f32, f32) {
    let mut lo = f32::INFINITY;
    let mut hi = f32::NEG_INFINITY;
    for &v in x.iter().filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo > hi { (0.0, 0.0) } else { (lo, hi) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    #[test]
    fn layout_matches_hand_built_block() {
        let mut block = [0u8; 20];
        block[0..2].copy_from_slice(&f16::from_f32(0.25).to_le_bytes());
        block[2..4].copy_from_slice(&f16::from_f32(-1.0).to_le_bytes());
        for j in 0..16 {
            block[4 + j] = (j as u8) | ((15 - j as u8) << 4);
        }
        let mut out = [0f32; 32];
        Q4_1::dequantize_block(&block, &mut out);
        for j in 0..16 {
            assert_eq!(out[j], 0.25 * j as f32 - 1.0);
            assert_eq!(out[j + 16], 0.25 * (15 - j) as f32 - 1.0);
        }
    }

    #[test]
    fn grid_covers_block_ends() {
        let x: Vec<f32> = (0..32).map(|i| -0.3 + 0.037 * i as f32).collect();
        let mut block = [0u8; 20];
        Q4_1::quantize_block(&x, &mut block);
        let d = f16_at(&block, 0);
        let m = f16_at(&block, 2);
        assert!(m <= -0.3);
        assert!(m + 15.0 * d >= x[31]);
    }
}
