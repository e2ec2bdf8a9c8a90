//! Q5_0: 32 values per 22-byte block, symmetric 5-bit with one f16 scale.
//!
//! Layout (GGML `block_q5_0`): `d: f16` (bytes 0..2), `qh: u32` little-endian (2..6) whose bit
//! `i` is bit 4 of element `i`, then `qs[16]` with the low 4 bits of element `j` in the low
//! nibble of `qs[j]` and those of element `j + 16` in its high nibble. Value of element `i`
//! is `d * (q_i - 16)` with `q_i` in `0..=31`.
//!
//! Quantizer: as Q4_0 with 32 levels: the largest-magnitude element maps exactly to `-16`
//! with `d = -max / 16` (magnitude rounded up to f16); the rest round to nearest, clamped to
//! `+15` on the far side.

use super::BlockFormat;
use super::q4_0::{QK32, f16_at, f16_magnitude_up, nibble, round_div, signed_absmax};

/// Q5_0 block format.
pub struct Q5_0;

impl BlockFormat for Q5_0 {
    const BLOCK_ELEMS: usize = QK32;
    const BLOCK_BYTES: usize = 2 + 4 + QK32 / 2;

    fn dequantize_block(block: &[u8], out: &mut [f32]) {
        let d = f16_at(block, 0);
        for (i, o) in out.iter_mut().enumerate().take(QK32) {
            *o = d * (q5(block, 2, i) as i32 - 16) as f32;
        }
    }

    fn quantize_block(x: &[f32], out: &mut [u8]) {
        let max = signed_absmax(x);
        let d = f16_magnitude_up(-max / 16.0);
        out[0..2].copy_from_slice(&d.to_le_bytes());
        let d = d.to_f32();
        let mut q = [0u8; QK32];
        for (qi, &xi) in q.iter_mut().zip(x) {
            *qi = (round_div(xi, d).clamp(-16.0, 15.0) as i32 + 16) as u8;
        }
        pack_q5(&q, &mut out[2..]);
    }

    fn dot_block(block: &[u8], x: &[f32]) -> f32 {
        let d = f16_at(block, 0);
        let mut acc = 0f32;
        for (i, &xi) in x.iter().enumerate().take(QK32) {
            acc += (q5(block, 2, i) as i32 - 16) as f32 * xi;
        }
        d * acc
    }
}

/// The 5-bit value of element `i` of a block whose `qh: u32` starts at byte `qh_at`, followed
/// directly by `qs[16]` (the Q5_0 / Q5_1 layout).
pub(super) fn q5(block: &[u8], qh_at: usize, i: usize) -> u8 {
    let qh = u32::from_le_bytes([
        block[qh_at],
        block[qh_at + 1],
        block[qh_at + 2],
        block[qh_at + 3],
    ]);
    let lo = nibble(&block[qh_at + 4..qh_at + 4 + QK32 / 2], i);
    lo | ((((qh >> i) & 1) as u8) << 4)
}

/// Pack 32 values in `0..=31` into `qh: u32` (4 bytes) followed by `qs[16]` (`out` holds 20
/// bytes or more).
pub(super) fn pack_q5(q: &[u8; QK32], out: &mut [u8]) {
    let mut qh = 0u32;
    for (i, &v) in q.iter().enumerate() {
        qh |= (((v >> 4) & 1) as u32) << i;
    }
    out[0..4].copy_from_slice(&qh.to_le_bytes());
    for j in 0..QK32 / 2 {
        out[4 + j] = (q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    #[test]
    fn layout_matches_hand_built_block() {
        // d = 1; element i has q = i (0..32): qh holds bit 4, i.e. elements 16..32
        let mut block = [0u8; 22];
        block[0..2].copy_from_slice(&f16::from_f32(1.0).to_le_bytes());
        block[2..6].copy_from_slice(&0xFFFF_0000u32.to_le_bytes());
        for j in 0..16 {
            block[6 + j] = (j as u8) | ((j as u8) << 4);
        }
        let mut out = [0f32; 32];
        Q5_0::dequantize_block(&block, &mut out);
        for (i, &v) in out.iter().enumerate() {
            assert_eq!(v, i as f32 - 16.0);
        }
        let mut back = [0u8; 22];
        Q5_0::quantize_block(&out, &mut back);
        let mut again = [0f32; 32];
        Q5_0::dequantize_block(&back, &mut again);
        assert_eq!(out, again);
    }
}
