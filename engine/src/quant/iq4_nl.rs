//! IQ4_NL: 32 values per 18-byte block, 4-bit indices into a fixed non-linear table.
//!
//! Layout (GGML `block_iq4_nl`): `d: f16` (bytes 0..2), then `qs[16]` with the index of
//! element `j` in the low nibble of `qs[j]` and that of element `j + 16` in its high nibble.
//! Value of element `i` is `d * KVALUES[q_i]`.
//!
//! Quantizer: a small search for the scale. Candidate scales map the largest-magnitude
//! element onto either end of the table (`-127` or `+113`) with the divisor stretched by
//! up to ±14 % in steps of 2 %; for each candidate the elements are assigned to their nearest table entries
//! and the scale is refitted by least squares (`d = Σ x·k / Σ k²`), twice. The candidate with
//! the smallest squared error wins; its scale is rounded to f16 and every element is then
//! assigned to the table entry nearest to it under that stored scale. The helpers here are
//! shared with IQ4_XS, whose 32-element sub-blocks are quantized the same way.

use super::BlockFormat;
use super::q4_0::{QK32, f16_at, f16_magnitude_up, nibble, pack_nibbles, signed_absmax};
use half::f16;

/// IQ4_NL block format.
pub struct Iq4Nl;

/// The 16 levels of the non-linear 4-bit code (GGML's `kvalues_iq4nl`), ascending.
pub(super) const KVALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

impl BlockFormat for Iq4Nl {
    const BLOCK_ELEMS: usize = QK32;
    const BLOCK_BYTES: usize = 2 + QK32 / 2;

    fn dequantize_block(block: &[u8], out: &mut [f32]) {
        let d = f16_at(block, 0);
        let qs = &block[2..2 + QK32 / 2];
        for (i, o) in out.iter_mut().enumerate().take(QK32) {
            *o = d * KVALUES[nibble(qs, i) as usize] as f32;
        }
    }

    fn quantize_block(x: &[f32], out: &mut [u8]) {
        let d = scale_to_f16(best_scale(x));
        out[0..2].copy_from_slice(&d.to_le_bytes());
        let mut q = [0u8; QK32];
        assign(x, d.to_f32(), &mut q);
        pack_nibbles(&q, &mut out[2..2 + QK32 / 2]);
    }

    fn dot_block(block: &[u8], x: &[f32]) -> f32 {
        let d = f16_at(block, 0);
        let qs = &block[2..2 + QK32 / 2];
        let mut acc = 0f32;
        for (i, &xi) in x.iter().enumerate().take(QK32) {
            acc += KVALUES[nibble(qs, i) as usize] as f32 * xi;
        }
        d * acc
    }
}

/// The float scale (before f16 rounding) that the search finds best for `x` (a 32-element
/// block or sub-block): smallest `Σ (x - d·KVALUES[q])²` over the candidates. 0 for a block
/// with no non-zero finite element.
pub(super) fn best_scale(x: &[f32]) -> f32 {
    let max = signed_absmax(x);
    if max == 0.0 || !max.is_finite() {
        return 0.0;
    }
    let mut best = (f64::INFINITY, 0f32);
    let mut q = [0u8; QK32];
    let q = &mut q[..x.len().min(QK32)];
    for end in [KVALUES[0], KVALUES[15]] {
        for step in -7i32..=7 {
            let divisor = end as f32 * (1.0 + step as f32 / 50.0);
            let mut d = max / divisor;
            let mut err = f64::INFINITY;
            for _ in 0..2 {
                let e = assign_ideal(x, d, q);
                let refit = lsq_scale(x, q);
                err = e.min(err);
                if refit == 0.0 || !refit.is_finite() {
                    break;
                }
                d = refit;
            }
            err = err.min(assign_ideal(x, d, q));
            if err < best.0 {
                best = (err, d);
            }
        }
    }
    best.1
}

/// Round a scale to f16 (nearest), saturating at ±65504; a non-zero scale never becomes 0
/// (it takes the smallest subnormal of its sign instead).
pub(super) fn scale_to_f16(d: f32) -> f16 {
    let h = f16::from_f32(d);
    if h.is_infinite() || h.is_nan() || (h.to_f32() == 0.0 && d != 0.0) {
        return f16_magnitude_up(d);
    }
    h
}

/// Assign each element to the table index whose value `d * KVALUES[k]` (computed in f32
/// exactly as the dequantizer does) is nearest to it; returns the squared error (f64).
pub(super) fn assign(x: &[f32], d: f32, q: &mut [u8]) -> f64 {
    let mut err = 0f64;
    for (qi, &xi) in q.iter_mut().zip(x) {
        let mut best = (f32::INFINITY, 8u8);
        for (k, &kv) in KVALUES.iter().enumerate() {
            let e = (xi - d * kv as f32).abs();
            if e < best.0 {
                best = (e, k as u8);
            }
        }
        *qi = best.1;
        let r = (xi - d * KVALUES[best.1 as usize] as f32) as f64;
        err += r * r;
    }
    err
}

/// Like [`assign`] but in f64 with an unrounded scale (used inside the search): the nearest
/// entry to `x / d` by bisection over the midpoints of the table.
fn assign_ideal(x: &[f32], d: f32, q: &mut [u8]) -> f64 {
    let d = d as f64;
    let mut err = 0f64;
    for (qi, &xi) in q.iter_mut().zip(x) {
        let y = xi as f64 / d;
        let k = MIDPOINTS.partition_point(|&m| m < y);
        *qi = k as u8;
        let r = xi as f64 - d * KVALUES[k] as f64;
        err += r * r;
    }
    err
}

/// Midpoints between neighbouring [`KVALUES`] entries.
const MIDPOINTS: [f64; 15] = {
    let mut m = [0f64; 15];
    let mut k = 0;
    while k < 15 {
        m[k] = (KVALUES[k] as f64 + KVALUES[k + 1] as f64) / 2.0;
        k += 1;
    }
    m
};

/// Least-squares scale for fixed indices: `Σ x·k / Σ k²`.
fn lsq_scale(x: &[f32], q: &[u8]) -> f32 {
    let mut xk = 0f64;
    let mut kk = 0f64;
    for (&xi, &qi) in x.iter().zip(q) {
        let k = KVALUES[qi as usize] as f64;
        xk += xi as f64 * k;
        kk += k * k;
    }
    if kk == 0.0 { 0.0 } else { (xk / kk) as f32 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_hand_built_block() {
        let mut block = [0u8; 18];
        block[0..2].copy_from_slice(&f16::from_f32(0.5).to_le_bytes());
        for j in 0..16 {
            block[2 + j] = (j as u8) | ((15 - j as u8) << 4);
        }
        let mut out = [0f32; 32];
        Iq4Nl::dequantize_block(&block, &mut out);
        for j in 0..16 {
            assert_eq!(out[j], 0.5 * KVALUES[j] as f32);
            assert_eq!(out[j + 16], 0.5 * KVALUES[15 - j] as f32);
        }
    }

    #[test]
    fn table_values_round_trip_exactly() {
        // a block made of table values times an f16-exact scale is reproduced exactly
        let x: Vec<f32> = (0..32)
            .map(|i| 0.25 * KVALUES[(i * 7) % 16] as f32)
            .collect();
        let mut block = [0u8; 18];
        Iq4Nl::quantize_block(&x, &mut block);
        let mut y = [0f32; 32];
        Iq4Nl::dequantize_block(&block, &mut y);
        assert_eq!(&x[..], &y[..]);
    }

    #[test]
    fn search_beats_plain_absmax_scale() {
        // the search's error is no worse than the plain choice d = -max/127
        let x: Vec<f32> = (0..32)
            .map(|i| ((i * 37 % 29) as f32 - 14.0) * 0.01 + 0.003)
            .collect();
        let mut q = [0u8; 32];
        let plain = assign(&x, -signed_absmax(&x) / 127.0, &mut q);
        let searched = assign(&x, best_scale(&x), &mut q);
        assert!(searched <= plain, "{searched} > {plain}");
    }
}
