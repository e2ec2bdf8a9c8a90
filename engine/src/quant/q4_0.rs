//! Q4_0: 32 values per 18-byte block, symmetric 4-bit with one f16 scale.
//!
//! Layout (GGML `block_q4_0`): `d: f16` (bytes 0..2), then `qs[16]`. Byte `qs[j]` holds
//! element `j` in its low nibble and element `j + 16` in its high nibble. Value of element
//! `i` is `d * (q_i - 8)` with `q_i` in `0..=15`.
//!
//! Quantizer: the element of largest magnitude, `max`, maps exactly to `q - 8 = -8` with
//! `d = -max / 8`, the magnitude of `d` rounded *up* to f16 so every element lies in
//! `[-8|d|, 8|d|]`; each element then rounds to the nearest level (clamped to `+7` on the far
//! side, the one place the error can exceed `|d| / 2`).
//!
//! This file also holds the small scale helpers the other 32-element formats share
//! (f16 fields with directed rounding, nibble packing).

use super::BlockFormat;
use half::f16;

/// Q4_0 block format.
pub struct Q4_0;

/// Elements per block of the 32-element formats (Q4_0..Q8_0, IQ4_NL).
pub(super) const QK32: usize = 32;

impl BlockFormat for Q4_0 {
    const BLOCK_ELEMS: usize = QK32;
    const BLOCK_BYTES: usize = 2 + QK32 / 2;

    fn dequantize_block(block: &[u8], out: &mut [f32]) {
        let d = f16_at(block, 0);
        let qs = &block[2..2 + QK32 / 2];
        for (j, &b) in qs.iter().enumerate() {
            out[j] = d * ((b & 0x0F) as i32 - 8) as f32;
            out[j + 16] = d * ((b >> 4) as i32 - 8) as f32;
        }
    }

    fn quantize_block(x: &[f32], out: &mut [u8]) {
        let max = signed_absmax(x);
        let d = f16_magnitude_up(-max / 8.0);
        out[0..2].copy_from_slice(&d.to_le_bytes());
        let d = d.to_f32();
        let mut q = [0u8; QK32];
        for (qi, &xi) in q.iter_mut().zip(x) {
            *qi = (round_div(xi, d).clamp(-8.0, 7.0) as i32 + 8) as u8;
        }
        pack_nibbles(&q, &mut out[2..2 + QK32 / 2]);
    }

    fn dot_block(block: &[u8], x: &[f32]) -> f32 {
        let d = f16_at(block, 0);
        let qs = &block[2..2 + QK32 / 2];
        let mut acc = 0f32;
        for (i, &xi) in x.iter().enumerate().take(QK32) {
            acc += (nibble(qs, i) as i32 - 8) as f32 * xi;
        }
        d * acc
    }
}

/// The f16 at byte offset `off`, as f32.
pub(super) fn f16_at(block: &[u8], off: usize) -> f32 {
    f16::from_le_bytes([block[off], block[off + 1]]).to_f32()
}

/// The 4-bit value of element `i` (0..32) in a `qs[16]` array laid out as in Q4_0.
pub(super) fn nibble(qs: &[u8], i: usize) -> u8 {
    if i < 16 {
        qs[i] & 0x0F
    } else {
        qs[i - 16] >> 4
    }
}

/// Pack 32 values in `0..=15` into 16 bytes: low nibble element `j`, high nibble `j + 16`.
pub(super) fn pack_nibbles(q: &[u8; QK32], out: &mut [u8]) {
    for j in 0..QK32 / 2 {
        out[j] = (q[j] & 0x0F) | ((q[j + 16] & 0x0F) << 4);
    }
}

/// The element of largest magnitude (the first one on ties), with its sign; 0 for an empty
/// or all-zero slice. NaN elements are skipped.
pub(super) fn signed_absmax(x: &[f32]) -> f32 {
    let mut best = 0f32;
    for &v in x {
        if v.abs() > best.abs() {
            best = v;
        }
    }
    best
}

/// `x / d` rounded to the nearest integer (halves away from zero), 0 when `d == 0`.
pub(super) fn round_div(x: f32, d: f32) -> f32 {
    if d == 0.0 {
        return 0.0;
    }
    let r = (x / d).round();
    if r.is_nan() { 0.0 } else { r }
}

/// The f16 of the sign of `v` whose magnitude is the smallest one `>= |v|` (so a grid built
/// on it covers `v`). Values beyond the f16 range saturate to `±65504`; NaN gives 0.
pub(super) fn f16_magnitude_up(v: f32) -> f16 {
    if v.is_nan() {
        return f16::ZERO;
    }
    let h = f16::from_f32(v);
    if h.is_infinite() {
        return if v < 0.0 { f16::MIN } else { f16::MAX };
    }
    if h.to_f32().abs() < v.abs() {
        // sign-magnitude encoding: the next bit pattern has the next larger magnitude
        let up = f16::from_bits(h.to_bits() + 1);
        if up.is_infinite() {
            return if v < 0.0 { f16::MIN } else { f16::MAX };
        }
        return up;
    }
    h
}

/// The largest f16 `<= v` (round toward minus infinity), saturating at `±65504`; NaN gives 0.
pub(super) fn f16_floor(v: f32) -> f16 {
    if v.is_nan() {
        return f16::ZERO;
    }
    let h = f16::from_f32(v);
    if h.is_infinite() {
        return if v < 0.0 { f16::MIN } else { f16::MAX };
    }
    if h.to_f32() <= v {
        return h;
    }
    let bits = h.to_bits();
    let down = if bits & 0x8000 != 0 {
        bits + 1 // negative: larger magnitude is smaller
    } else if bits == 0 {
        0x8001 // +0 -> smallest negative subnormal
    } else {
        bits - 1
    };
    let down = f16::from_bits(down);
    if down.is_infinite() { f16::MIN } else { down }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directed_rounding_covers_the_value() {
        for &v in &[
            1e-9f32,
            -1e-9,
            0.1,
            -0.1,
            1.0 / 3.0,
            -7.77e-5,
            65504.0,
            70000.0,
            3.0e-6,
        ] {
            let up = f16_magnitude_up(v).to_f32();
            assert!(up.abs() >= v.abs().min(65504.0), "{v} -> {up}");
            assert!(up == 0.0 || up.signum() == v.signum(), "{v} -> {up}");
            assert!(up.is_finite());
            let fl = f16_floor(v).to_f32();
            assert!(fl <= v || v < -65504.0, "{v} -> {fl}");
            assert!(fl.is_finite());
        }
        assert_eq!(f16_magnitude_up(0.0).to_f32(), 0.0);
        assert_eq!(f16_floor(0.0).to_f32(), 0.0);
        // exactly representable values are kept
        assert_eq!(f16_magnitude_up(0.5).to_f32(), 0.5);
        assert_eq!(f16_floor(-0.5).to_f32(), -0.5);
        // f16 has an 11-bit significand: 1 + 2^-12 rounds to 1 nearest, to 1 + 2^-10 up
        assert_eq!(
            f16_magnitude_up(1.0 + 2f32.powi(-12)).to_f32(),
            1.0 + 2f32.powi(-10)
        );
        assert_eq!(
            f16_floor(1.0 - 2f32.powi(-13)).to_f32(),
            1.0 - 2f32.powi(-11)
        );
    }

    #[test]
    fn layout_matches_hand_built_block() {
        // d = 0.5, element j has q = j % 16 in the low nibbles, 15 - j % 16 in the high ones
        let mut block = [0u8; 18];
        block[0..2].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
        for j in 0..16 {
            block[2 + j] = (j as u8) | ((15 - j as u8) << 4);
        }
        let mut out = [0f32; 32];
        Q4_0::dequantize_block(&block, &mut out);
        for j in 0..16 {
            assert_eq!(out[j], 0.5 * (j as f32 - 8.0));
            assert_eq!(out[j + 16], 0.5 * (7.0 - j as f32));
        }
    }

    #[test]
    fn extreme_element_is_exact() {
        let mut x = [0.25f32; 32];
        x[5] = -3.0;
        let mut block = [0u8; 18];
        Q4_0::quantize_block(&x, &mut block);
        let mut y = [0f32; 32];
        Q4_0::dequantize_block(&block, &mut y);
        assert_eq!(y[5], -3.0);
    }
}
