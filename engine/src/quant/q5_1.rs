//! Q5_1: 32 values per 24-byte block, 5-bit with an f16 scale and an f16 minimum.
//!
//! Layout (GGML `block_q5_1`): `d: f16` (bytes 0..2), `m: f16` (2..4), `qh: u32` little-endian
//! (4..8) whose bit `i` is bit 4 of element `i`, then `qs[16]` holding the low 4 bits (element
//! `j` low nibble of `qs[j]`, element `j + 16` high nibble). Value is `d * q_i + m`,
//! `q_i` in `0..=31`.
//!
//! Quantizer: as Q4_1 with 32 levels: `m` = block minimum rounded down to f16,
//! `d = (max - m) / 31` rounded up, each element to the nearest level (error `<= d / 2`).

use super::BlockFormat;
use super::q4_0::{QK32, f16_at, f16_floor, f16_magnitude_up, round_div};
use super::q4_1::min_max;
use super::q5_0::{pack_q5, q5};

/// Q5_1 block format.
pub struct Q5_1;

impl BlockFormat for Q5_1 {
    const BLOCK_ELEMS: usize = QK32;
    const BLOCK_BYTES: usize = 4 + 4 + QK32 / 2;

    fn dequantize_block(block: &[u8], out: &mut [f32]) {
        let d = f16_at(block, 0);
        let m = f16_at(block, 2);
        for (i, o) in out.iter_mut().enumerate().take(QK32) {
            *o = d * q5(block, 4, i) as f32 + m;
        }
    }

    fn quantize_block(x: &[f32], out: &mut [u8]) {
        let (min, max) = min_max(x);
        let m = f16_floor(min);
        let d = f16_magnitude_up((max - m.to_f32()) / 31.0);
        out[0..2].copy_from_slice(&d.to_le_bytes());
        out[2..4].copy_from_slice(&m.to_le_bytes());
        let (d, m) = (d.to_f32(), m.to_f32());
        let mut q = [0u8; QK32];
        for (qi, &xi) in q.iter_mut().zip(x) {
            *qi = round_div(xi - m, d).clamp(0.0, 31.0) as u8;
        }
        pack_q5(&q, &mut out[4..]);
    }

    fn dot_block(block: &[u8], x: &[f32]) -> f32 {
        // element by element (not `d·Σq·x + m·Σx`): the two factored terms can cancel
        // heavily when `m` is large, and the reference must stay accurate relative to Σ|y·x|
        let d = f16_at(block, 0);
        let m = f16_at(block, 2);
        let mut acc = 0f32;
        for (i, &xi) in x.iter().enumerate().take(QK32) {
            acc += (d * q5(block, 4, i) as f32 + m) * xi;
        }
        acc
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    #[test]
    fn layout_matches_hand_built_block() {
        // d = 0.5, m = -2; element i has q = 31 - i: bit 4 set for i < 16
        let mut block = [0u8; 24];
        block[0..2].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
        block[2..4].copy_from_slice(&f16::from_f32(-2.0).to_le_bytes());
        block[4..8].copy_from_slice(&0x0000_FFFFu32.to_le_bytes());
        for j in 0..16 {
            let lo = (31 - j as u8) & 0x0F;
            let hi = (15 - j as u8) & 0x0F;
            block[8 + j] = lo | (hi << 4);
        }
        let mut out = [0f32; 32];
        Q5_1::dequantize_block(&block, &mut out);
        for (i, &v) in out.iter().enumerate() {
            assert_eq!(v, 0.5 * (31 - i) as f32 - 2.0);
        }
    }
}
