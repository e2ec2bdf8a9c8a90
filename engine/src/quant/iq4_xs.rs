//! IQ4_XS: 256 values per 136-byte super-block: eight 32-element sub-blocks of IQ4_NL-style
//! 4-bit table indices, each with a 6-bit signed scale under one f16 super-block scale.
//!
//! Layout (GGML `block_iq4_xs`): `d: f16` (bytes 0..2), `scales_h: u16` little-endian (2..4),
//! `scales_l[4]` (4..8), `qs[128]` (8..136). Sub-block `b` (0..8) has the 6-bit scale
//! `ls_b = (scales_l[b / 2] >> 4 * (b % 2)) & 15 | ((scales_h >> 2 * b) & 3) << 4` and the
//! sixteen bytes `qs[16b..16b + 16]`, which hold its element `t` in the low nibble of byte `t`
//! and element `t + 16` in the high nibble. Value: `(d * (ls_b - 32)) * KVALUES[q]`.
//!
//! Quantizer: each sub-block gets its best float scale from the IQ4_NL search; the super
//! scale `d = -s / 32` maps the largest-magnitude sub-block scale `s` onto `-32`; each
//! sub-block scale is rounded to an integer in `-32..=31`, its two neighbours are tried as
//! well, and the one whose nearest-entry assignment under the stored scales has the smallest
//! squared error is kept.

use super::iq4_nl::{KVALUES, assign, best_scale, scale_to_f16};
use super::q4_0::{QK32, f16_at, nibble, pack_nibbles, round_div, signed_absmax};
use super::{BlockFormat, QK_K};

/// IQ4_XS block format.
pub struct Iq4Xs;

const N_SUB: usize = QK_K / QK32;

impl BlockFormat for Iq4Xs {
    const BLOCK_ELEMS: usize = QK_K;
    const BLOCK_BYTES: usize = 2 + 2 + QK_K / 64 + QK_K / 2;

    fn dequantize_block(block: &[u8], out: &mut [f32]) {
        let d = f16_at(block, 0);
        for (b, o) in out.chunks_exact_mut(QK32).enumerate().take(N_SUB) {
            let dl = d * (sub_scale(block, b) as i32 - 32) as f32;
            let qs = &block[8 + 16 * b..8 + 16 * b + 16];
            for (t, v) in o.iter_mut().enumerate() {
                *v = dl * KVALUES[nibble(qs, t) as usize] as f32;
            }
        }
    }

    fn quantize_block(x: &[f32], out: &mut [u8]) {
        out.fill(0);
        let mut scales = [0f32; N_SUB];
        for (s, xs) in scales.iter_mut().zip(x.chunks_exact(QK32)) {
            *s = best_scale(xs);
        }
        let d = scale_to_f16(-signed_absmax(&scales) / 32.0);
        out[0..2].copy_from_slice(&d.to_le_bytes());
        let d = d.to_f32();
        let mut scales_h = 0u16;
        for (b, xs) in x.chunks_exact(QK32).enumerate().take(N_SUB) {
            let l0 = round_div(scales[b], d).clamp(-32.0, 31.0) as i32;
            let mut best = (f64::INFINITY, 0i32, [0u8; QK32]);
            for l in (l0 - 1).max(-32)..=(l0 + 1).min(31) {
                let mut q = [0u8; QK32];
                let err = assign(xs, d * l as f32, &mut q);
                if err < best.0 {
                    best = (err, l, q);
                }
            }
            let ls = (best.1 + 32) as u8;
            out[4 + b / 2] |= (ls & 0x0F) << (4 * (b % 2));
            scales_h |= (((ls >> 4) & 3) as u16) << (2 * b);
            pack_nibbles(&best.2, &mut out[8 + 16 * b..8 + 16 * b + 16]);
        }
        out[2..4].copy_from_slice(&scales_h.to_le_bytes());
    }

    fn dot_block(block: &[u8], x: &[f32]) -> f32 {
        let d = f16_at(block, 0);
        let mut acc = 0f32;
        for (b, xs) in x.chunks_exact(QK32).enumerate().take(N_SUB) {
            let dl = d * (sub_scale(block, b) as i32 - 32) as f32;
            let qs = &block[8 + 16 * b..8 + 16 * b + 16];
            let mut sub = 0f32;
            for (t, &xi) in xs.iter().enumerate() {
                sub += KVALUES[nibble(qs, t) as usize] as f32 * xi;
            }
            acc += dl * sub;
        }
        acc
    }
}

/// The 6-bit scale `ls` (0..64) of sub-block `b`.
fn sub_scale(block: &[u8], b: usize) -> u8 {
    let scales_h = u16::from_le_bytes([block[2], block[3]]);
    let lo = (block[4 + b / 2] >> (4 * (b % 2))) & 0x0F;
    let hi = ((scales_h >> (2 * b)) & 3) as u8;
    lo | (hi << 4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::f16;

    #[test]
    fn layout_matches_hand_built_block() {
        // d = 0.5; sub-block b has ls = 8b + 3 (so ls - 32 = 8b - 29); element t of each
        // sub-block has index t % 16 (low nibbles) / 15 - t % 16 (high nibbles)
        let mut block = [0u8; 136];
        block[0..2].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
        let mut scales_h = 0u16;
        for b in 0..8 {
            let ls = (8 * b + 3) as u8;
            block[4 + b / 2] |= (ls & 0x0F) << (4 * (b % 2));
            scales_h |= (((ls >> 4) & 3) as u16) << (2 * b);
            for t in 0..16 {
                block[8 + 16 * b + t] = (t as u8) | ((15 - t as u8) << 4);
            }
        }
        block[2..4].copy_from_slice(&scales_h.to_le_bytes());
        let mut out = vec![0f32; 256];
        Iq4Xs::dequantize_block(&block, &mut out);
        for b in 0..8 {
            let dl = 0.5 * (8 * b as i32 - 29) as f32;
            for t in 0..16 {
                assert_eq!(out[32 * b + t], dl * KVALUES[t] as f32);
                assert_eq!(out[32 * b + 16 + t], dl * KVALUES[15 - t] as f32);
            }
        }
    }
}
