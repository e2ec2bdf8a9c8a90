//! Deterministic values: every row of every tensor has its own random stream, keyed by
//! (seed, tensor name, row), so the file is the same whatever the thread count or batch
//! size. Values are Gaussian (Marsaglia's polar method over SplitMix64) with the tensor's
//! mean and scale. The logarithm is our own ([`ln`]: exact bit operations, then a fixed
//! sequence of f64 adds, multiplies and divides), not the platform's libm, so the same
//! seed gives the same bytes on every machine — a checkpoint made on the GPU machine can
//! be checked against one made here by its sha256.

use rayon::prelude::*;
use sha2::{Digest, Sha256};

/// SplitMix64: small, fast, and good enough for weights.
pub struct SplitMix(u64);

impl SplitMix {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in (-1, 1), from the top 53 bits.
    fn signed_unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 / (1u64 << 52) as f64) - 1.0
    }
}

/// Natural logarithm of a positive, finite, normal `x`, computed with IEEE-exact steps only
/// (bit decomposition, then `ln m = 2 atanh((m - 1) / (m + 1))` as a fixed series with `m`
/// in [√½, √2)), so every machine gets the same bits. Accurate to a few ulps.
pub fn ln(x: f64) -> f64 {
    let bits = x.to_bits();
    let mut e = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let mut m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | 0x3ff0_0000_0000_0000);
    if m > std::f64::consts::SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    let z = (m - 1.0) / (m + 1.0);
    let z2 = z * z;
    // Σ z^(2k+1) / (2k+1), k = 0..=13: |z| < 0.1716, the first omitted term is < 1e-22.
    let mut term = z;
    let mut sum = 0.0;
    for k in 0..14 {
        sum += term / f64::from(2 * k + 1);
        term *= z2;
    }
    2.0 * sum + e as f64 * std::f64::consts::LN_2
}

/// The seed of tensor `name` under run seed `seed`.
pub fn tensor_seed(seed: u64, name: &str) -> u64 {
    let mut h = Sha256::new();
    h.update(seed.to_le_bytes());
    h.update(name.as_bytes());
    let d = h.finalize();
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    u64::from_le_bytes(b)
}

/// Fill `row` (row number `index` of a tensor with seed `tseed`) with N(mean, std²).
pub fn fill_row(tseed: u64, index: usize, mean: f32, std: f32, row: &mut [f32]) {
    let mut rng = SplitMix::new(tseed ^ (index as u64).wrapping_mul(0xD1B5_4A32_D192_ED03));
    let (mean, std) = (f64::from(mean), f64::from(std));
    for pair in row.chunks_mut(2) {
        // Marsaglia's polar method: a point uniform in the unit disc gives two normals.
        let (u, v, s) = loop {
            let (u, v) = (rng.signed_unit(), rng.signed_unit());
            let s = u * u + v * v;
            if s > 1e-300 && s < 1.0 {
                break (u, v, s);
            }
        };
        let f = (-2.0 * ln(s) / s).sqrt();
        pair[0] = (mean + std * u * f) as f32;
        if let Some(second) = pair.get_mut(1) {
            *second = (mean + std * v * f) as f32;
        }
    }
}

/// Fill rows `first..first + out.len() / row_len` of a tensor, in parallel.
pub fn fill_rows(tseed: u64, first: usize, row_len: usize, mean: f32, std: f32, out: &mut [f32]) {
    out.par_chunks_mut(row_len)
        .enumerate()
        .for_each(|(i, row)| fill_row(tseed, first + i, mean, std, row));
}

#[cfg(test)]
mod tests {
    use super::*;

    const PINNED: [u32; 4] = [3219350823, 1060446032, 1060549845, 3189552150];

    #[test]
    fn rows_are_deterministic_and_distinct() {
        let s = tensor_seed(7, "blk.0.attn_q.weight");
        assert_ne!(s, tensor_seed(8, "blk.0.attn_q.weight"));
        assert_ne!(s, tensor_seed(7, "blk.1.attn_q.weight"));
        let mut whole = vec![0f32; 4 * 64];
        fill_rows(s, 0, 64, 0.0, 1.0, &mut whole);
        // The same rows filled one by one (another "batching") are identical.
        let mut third = vec![0f32; 64];
        fill_row(s, 2, 0.0, 1.0, &mut third);
        assert_eq!(&whole[128..192], &third[..]);
        assert_ne!(&whole[0..64], &whole[64..128]);
    }

    #[test]
    fn our_ln_matches_the_platform_ln() {
        let mut x = 1e-300f64;
        while x < 1.0 {
            let (a, b) = (ln(x), x.ln());
            assert!(
                (a - b).abs() <= 4.0 * f64::EPSILON * b.abs().max(1.0),
                "{x}: {a} {b}"
            );
            x *= 1.37;
        }
        assert_eq!(ln(1.0), 0.0);
    }

    #[test]
    fn values_are_pinned_bit_for_bit() {
        // Any change to the generator changes every synthetic checkpoint: this pins it.
        let mut v = [0f32; 4];
        fill_row(tensor_seed(0, "blk.0.attn_q.weight"), 3, 0.0, 1.0, &mut v);
        let bits: Vec<u32> = v.iter().map(|x| x.to_bits()).collect();
        assert_eq!(bits, PINNED);
    }

    #[test]
    fn values_have_the_asked_mean_and_scale() {
        let mut v = vec![0f32; 1 << 16];
        fill_rows(tensor_seed(1, "t"), 0, 4096, 1.0, 0.02, &mut v);
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
        let var = v
            .iter()
            .map(|&x| (f64::from(x) - mean).powi(2))
            .sum::<f64>()
            / n;
        assert!((mean - 1.0).abs() < 1e-3, "{mean}");
        assert!((var.sqrt() - 0.02).abs() < 5e-4, "{}", var.sqrt());
    }
}
