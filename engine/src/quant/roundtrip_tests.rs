//! Round-trip tests for every format through the public [`quantize`] / [`dequantize`] /
//! [`dot`]: quantize -> dequantize error within the bound each format promises, on seeded
//! random inputs (gaussian weights, gaussian with outliers) and on edge cases (all-zero,
//! constant, one huge outlier, negative-only, tiny values with f16-subnormal scales, values
//! near the f16 limit); finite output for finite input; and `dot` equal to
//! dequantize-then-dot within the f32 summation bound.
//!
//! # Bounds (one table: [`BOUNDS`])
//!
//! * `rmse_gauss`, `rmse_outlier`: relative RMSE `‖x − y‖ / ‖x‖` over 16384 values of
//!   N(0, 0.02²) weights, and of the same with 1 % of values scaled by 8 (outliers). The
//!   bound is 1.25 × the RMSE of the *naive* grid of the format with exact float scales
//!   (symmetric formats: the block's largest-magnitude value mapped to the most negative
//!   level; min/scale formats: the grid spanning [min, max]; IQ4: `d = −max/127` with nearest
//!   table entries), simulated with numpy on 2^18 values (gauss / outliers):
//!   Q4_0 .0861/.1374, Q5_0 .0428/.0689, Q8_0 .0054/.0087, Q4_1 and Q4_K .0783/.0967,
//!   Q5_1 and Q5_K .0379/.0468, Q2_K .3273/.3726, Q3_K .1550/.1910, Q6_K .0188/.0259,
//!   IQ4 .0799/.1074. A quantizer may use searches and quantized (f16, 6-bit) scales, but
//!   must not be more than 25 % worse than this naive reference; a broken one (wrong
//!   nibble order, wrong scale, lost bit) is several times worse. The float formats are
//!   bounded by their rounding: F16 2^-11, BF16 2^-8 relative, F32 exact.
//! * `max_err`: per block, `max|x − y| <= max_err · max|x| + FLOOR`, on every input here.
//!   For the round-to-nearest formats this is half a grid step of the worst case (Q8_0
//!   1/254, Q5_1 1/31, Q4_1 1/15, Q5_0 1/16) or one step where the symmetric grid clips
//!   its far side at `+7` / `+15` (Q4_0 1/8), each + 1 % for f16 rounding of the scale. The
//!   K / IQ formats get one full step of their naive grid (half a step + room for quantized
//!   sub-block scales): Q2_K 2/3, Q3_K 1/4, Q4_K 2/15, Q5_K 2/31, Q6_K 1/32, IQ4 24/113
//!   (the widest gap of the table). `FLOOR = 64 · 2^-24` is the granularity of f16
//!   subnormal scales times the largest level count, which matters only for tiny inputs.
//! * The 32-element formats with a uniform grid and f16 scale (Q4_0, Q5_0, Q8_0, Q4_1, Q5_1)
//!   are also checked element by element against the stored scale: error `<= d/2` inside
//!   the grid, and `<= d·(t − top)` for the far-side values `t` clipped to the top level.

use super::{QuantFormat, dequantize, dot, quantize_to_vec};
use half::f16;

/// Error bounds per format (see the module docs for where each number comes from).
pub(super) struct Bound {
    pub format: QuantFormat,
    pub rmse_gauss: f64,
    pub rmse_outlier: f64,
    pub max_err: f64,
}

const fn b(format: QuantFormat, rmse_gauss: f64, rmse_outlier: f64, max_err: f64) -> Bound {
    Bound {
        format,
        rmse_gauss,
        rmse_outlier,
        max_err,
    }
}

/// The bound table.
pub(super) const BOUNDS: [Bound; 15] = [
    b(QuantFormat::F32, 0.0, 0.0, 0.0),
    b(QuantFormat::F16, 4.9e-4, 4.9e-4, 4.9e-4),
    b(QuantFormat::BF16, 3.9e-3, 3.9e-3, 3.9e-3),
    b(QuantFormat::Q4_0, 0.086 * 1.25, 0.137 * 1.25, 1.01 / 8.0),
    b(QuantFormat::Q4_1, 0.078 * 1.25, 0.097 * 1.25, 1.01 / 15.0),
    b(QuantFormat::Q5_0, 0.043 * 1.25, 0.069 * 1.25, 1.01 / 16.0),
    b(QuantFormat::Q5_1, 0.038 * 1.25, 0.047 * 1.25, 1.01 / 31.0),
    b(
        QuantFormat::Q8_0,
        0.0054 * 1.25,
        0.0087 * 1.25,
        1.01 / 254.0,
    ),
    b(QuantFormat::Q2_K, 0.327 * 1.25, 0.373 * 1.25, 2.0 / 3.0),
    b(QuantFormat::Q3_K, 0.155 * 1.25, 0.191 * 1.25, 1.0 / 4.0),
    b(QuantFormat::Q4_K, 0.078 * 1.25, 0.097 * 1.25, 2.0 / 15.0),
    b(QuantFormat::Q5_K, 0.038 * 1.25, 0.047 * 1.25, 2.0 / 31.0),
    b(QuantFormat::Q6_K, 0.0188 * 1.25, 0.0259 * 1.25, 1.0 / 32.0),
    b(
        QuantFormat::IQ4_NL,
        0.080 * 1.25,
        0.107 * 1.25,
        24.0 / 113.0,
    ),
    b(
        QuantFormat::IQ4_XS,
        0.080 * 1.25,
        0.107 * 1.25,
        24.0 / 113.0,
    ),
];

/// Absolute slack for f16-subnormal scale granularity (64 levels × 2^-24).
const FLOOR: f64 = 64.0 / 16_777_216.0;

/// Values per random test tensor (a multiple of every block size).
const N: usize = 16384;

/// A small seeded generator (splitmix64) with a Box–Muller normal.
pub(super) struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in (0, 1).
    pub fn uniform(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

fn gaussian(seed: u64, n: usize, sigma: f64) -> Vec<f32> {
    let mut r = Rng::new(seed);
    (0..n).map(|_| (sigma * r.normal()) as f32).collect()
}

fn with_outliers(seed: u64, n: usize, sigma: f64) -> Vec<f32> {
    let mut r = Rng::new(seed);
    (0..n)
        .map(|_| {
            let v = sigma * r.normal();
            (if r.uniform() < 0.01 { 8.0 * v } else { v }) as f32
        })
        .collect()
}

fn bound_of(format: QuantFormat) -> &'static Bound {
    let i = QuantFormat::ALL
        .iter()
        .position(|f| *f == format)
        .unwrap_or(0);
    &BOUNDS[i]
}

/// Quantize then dequantize through the public API; returns (bytes, values).
fn round_trip(format: QuantFormat, x: &[f32]) -> (Vec<u8>, Vec<f32>) {
    let q = quantize_to_vec(format, x).unwrap();
    let mut y = vec![f32::NAN; x.len()];
    dequantize(format, &q, &mut y).unwrap();
    (q, y)
}

fn rel_rmse(x: &[f32], y: &[f32]) -> f64 {
    let (mut e, mut s) = (0f64, 0f64);
    for (&a, &b) in x.iter().zip(y) {
        e += (a as f64 - b as f64).powi(2);
        s += (a as f64).powi(2);
    }
    if s == 0.0 { e.sqrt() } else { (e / s).sqrt() }
}

/// Checks every block of `x` (quantized as `q`, dequantized as `y`) against `max_err` and,
/// for uniform-grid formats, the per-element step bound. Returns the worst
/// `max|x − y| / max|x|` over the blocks.
fn check_blocks(format: QuantFormat, what: &str, x: &[f32], q: &[u8], y: &[f32]) -> f64 {
    let bound = bound_of(format);
    let (be, bb) = format.block_geometry();
    let mut worst = 0f64;
    for (k, ((xs, ys), qb)) in x
        .chunks_exact(be)
        .zip(y.chunks_exact(be))
        .zip(q.chunks_exact(bb))
        .enumerate()
    {
        for (i, &v) in ys.iter().enumerate() {
            assert!(v.is_finite(), "{format} {what}: block {k} value {i} is {v}");
        }
        let amax = xs.iter().fold(0f64, |m, &v| m.max((v as f64).abs()));
        let err = xs
            .iter()
            .zip(ys)
            .fold(0f64, |m, (&a, &b)| m.max((a as f64 - b as f64).abs()));
        let (limit, floor) = match format {
            // the float formats round element by element: relative to each element
            QuantFormat::F32 | QuantFormat::F16 | QuantFormat::BF16 => {
                for (&a, &b) in xs.iter().zip(ys) {
                    let lim = bound.max_err * (a as f64).abs() + 2f64.powi(-25);
                    assert!(
                        (a as f64 - b as f64).abs() <= lim,
                        "{format} {what}: {a} -> {b} (bound {lim})"
                    );
                }
                (f64::INFINITY, 0.0)
            }
            _ => (bound.max_err * amax + FLOOR, FLOOR),
        };
        assert!(
            err <= limit,
            "{format} {what}: block {k} max error {err:e} > {:.5} * amax {amax:e} + {floor:e}",
            bound.max_err
        );
        if let Err(e) = check_step(format, what, xs, qb, ys) {
            panic!("{e}");
        }
        if amax > 0.0 && format != QuantFormat::F16 && format != QuantFormat::BF16 {
            worst = worst.max(err / amax);
        }
    }
    worst
}

/// The per-element step bound of the uniform-grid 32-element formats, read against the
/// scale (and minimum) stored in the block. `Err` names the first violation.
fn check_step(
    format: QuantFormat,
    what: &str,
    xs: &[f32],
    qb: &[u8],
    ys: &[f32],
) -> Result<(), String> {
    let f16_at = |o: usize| f16::from_le_bytes([qb[o], qb[o + 1]]).to_f32() as f64;
    // (scale, offset, lowest level, highest level); value = d * level + m
    let (d, m, lo, hi): (f64, f64, f64, f64) = match format {
        QuantFormat::Q4_0 => (f16_at(0), 0.0, -8.0, 7.0),
        QuantFormat::Q5_0 => (f16_at(0), 0.0, -16.0, 15.0),
        QuantFormat::Q8_0 => (f16_at(0), 0.0, -127.0, 127.0),
        QuantFormat::Q4_1 => (f16_at(0), f16_at(2), 0.0, 15.0),
        QuantFormat::Q5_1 => (f16_at(0), f16_at(2), 0.0, 31.0),
        _ => return Ok(()),
    };
    for (&a, &b) in xs.iter().zip(ys) {
        let (a, b) = (a as f64, b as f64);
        let err = (a - b).abs();
        // f32 rounding of d·q (+ m) in the dequantizer
        let slack = 4.0 * f32::EPSILON as f64 * (a.abs() + m.abs() + d.abs() * hi.max(-lo));
        if d == 0.0 {
            if a != m && a != 0.0 {
                return Err(format!(
                    "{format} {what}: zero scale but {a} -> {b} (m = {m})"
                ));
            }
            continue;
        }
        let t = (a - m) / d;
        if t < lo - 0.5 - 1e-6 {
            return Err(format!(
                "{format} {what}: {a} below the grid (t = {t}, d = {d}, m = {m})"
            ));
        }
        let allowed = d.abs() * (t - hi).max(0.5) + slack;
        if err > allowed {
            return Err(format!(
                "{format} {what}: {a} -> {b}, error {err:e} > {allowed:e} (d = {d}, m = {m})"
            ));
        }
        // only the far side of a symmetric grid may overhang, by at most |lo| - hi steps
        if t > hi + 0.5 && !(lo < 0.0 && t <= -lo + 1e-3) {
            return Err(format!("{format} {what}: {a} beyond the grid (t = {t})"));
        }
    }
    Ok(())
}

/// `dot` against dequantize-then-dot (f64) on every block and on the whole row, within the
/// worst-case f32 summation bound `(n + 4) · (2^-24 · Σ|y·x| + 2^-149)`, `n` = elements per
/// block (plus the number of blocks for the whole row); the `2^-149` term covers products
/// that underflow into f32 subnormals.
pub(super) fn check_dot(format: QuantFormat, what: &str, q: &[u8], y: &[f32], x: &[f32]) {
    let (be, bb) = format.block_geometry();
    let gamma = |n: usize| (n + 4) as f64 * 2f64.powi(-24);
    let tiny = |n: usize| (n + 4) as f64 * 2f64.powi(-149);
    let reference = |ys: &[f32], xs: &[f32]| {
        ys.iter().zip(xs).fold((0f64, 0f64), |(s, a), (&u, &v)| {
            (s + u as f64 * v as f64, a + (u as f64 * v as f64).abs())
        })
    };
    for (k, ((qb, ys), xs)) in q
        .chunks_exact(bb)
        .zip(y.chunks_exact(be))
        .zip(x.chunks_exact(be))
        .enumerate()
    {
        let got = dot(format, qb, xs).unwrap() as f64;
        let (want, mag) = reference(ys, xs);
        let tol = gamma(be) * mag + tiny(be);
        assert!(
            (got - want).abs() <= tol,
            "{format} {what}: block {k} dot {got} vs {want} (tol {tol:e})"
        );
    }
    let got = dot(format, q, x).unwrap() as f64;
    let (want, mag) = reference(y, x);
    let tol = gamma(be + y.len() / be) * mag + tiny(be + y.len() / be);
    assert!(
        (got - want).abs() <= tol,
        "{format} {what}: row dot {got} vs {want} (tol {tol:e})"
    );
}

/// Every check for one format; prints the observed figures (visible with `--nocapture`).
fn run(format: QuantFormat) {
    let bound = bound_of(format);
    let seed = 0x5EED_0000 + format.ggml_type() as u64;
    let mut worst_block = 0f64;

    // realistic weights: relative RMSE bounds, per-block bounds, dot
    let mut rmse = [0f64; 2];
    for (slot, x) in [gaussian(seed, N, 0.02), with_outliers(seed + 1, N, 0.02)]
        .iter()
        .enumerate()
    {
        let what = ["gaussian", "outliers"][slot];
        let (q, y) = round_trip(format, x);
        rmse[slot] = rel_rmse(x, &y);
        let limit = [bound.rmse_gauss, bound.rmse_outlier][slot];
        assert!(
            rmse[slot] <= limit,
            "{format} {what}: relative RMSE {:.5} > bound {limit:.5}",
            rmse[slot]
        );
        worst_block = worst_block.max(check_blocks(format, what, x, &q, &y));
        let act = gaussian(seed + 2, N, 1.0);
        check_dot(format, what, &q, &y, &act);
    }

    // edge cases, each a few whole blocks
    let (be, _) = format.block_geometry();
    let n = be.max(32) * 4;
    let mut cases: Vec<(&str, Vec<f32>)> = vec![
        ("all-zero", vec![0.0; n]),
        ("constant +0.37", vec![0.37; n]),
        ("constant -1.3", vec![-1.3; n]),
        (
            "negative-only",
            gaussian(seed + 3, n, 0.02)
                .iter()
                .map(|v| -v.abs())
                .collect(),
        ),
        (
            "positive-only",
            gaussian(seed + 4, n, 0.02)
                .iter()
                .map(|v| v.abs())
                .collect(),
        ),
        ("tiny (subnormal f16 scales)", gaussian(seed + 5, n, 1e-5)),
        ("below f16 range", gaussian(seed + 6, n, 1e-9)),
        (
            "near f16 limit",
            gaussian(seed + 7, n, 1.0)
                .iter()
                .map(|v| v.signum() * 6.0e4)
                .collect(),
        ),
        ("large", gaussian(seed + 8, n, 1000.0)),
    ];
    let mut outlier = gaussian(seed + 9, n, 0.02);
    outlier[n / 3] = 50.0;
    outlier[n - 1] = -50.0;
    cases.push(("one huge outlier per half", outlier));
    let mut spike = vec![0.0f32; n];
    spike[5] = 1.0;
    cases.push(("single spike in zeros", spike));
    for (what, x) in &cases {
        let (q, y) = round_trip(format, x);
        if x.iter().all(|&v| v == 0.0) {
            assert!(
                y.iter().all(|&v| v == 0.0),
                "{format} {what}: zeros do not stay zero"
            );
        }
        let w = check_blocks(format, what, x, &q, &y);
        if *what != "below f16 range" && *what != "tiny (subnormal f16 scales)" {
            worst_block = worst_block.max(w);
        }
        let act = gaussian(seed + 10, x.len(), 1.0);
        check_dot(format, what, &q, &y, &act);
    }
    eprintln!(
        "{format:>6}: rel RMSE gauss {:.5} (bound {:.5}), outliers {:.5} (bound {:.5}); \
         worst block max|err|/amax {worst_block:.5} (bound {:.5})",
        rmse[0], bound.rmse_gauss, rmse[1], bound.rmse_outlier, bound.max_err
    );
}

macro_rules! roundtrip_tests {
    ($($name:ident => $fmt:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                run(QuantFormat::$fmt);
            }
        )*
    };
}

roundtrip_tests! {
    roundtrip_f32 => F32,
    roundtrip_f16 => F16,
    roundtrip_bf16 => BF16,
    roundtrip_q4_0 => Q4_0,
    roundtrip_q4_1 => Q4_1,
    roundtrip_q5_0 => Q5_0,
    roundtrip_q5_1 => Q5_1,
    roundtrip_q8_0 => Q8_0,
    roundtrip_q2_k => Q2_K,
    roundtrip_q3_k => Q3_K,
    roundtrip_q4_k => Q4_K,
    roundtrip_q5_k => Q5_K,
    roundtrip_q6_k => Q6_K,
    roundtrip_iq4_nl => IQ4_NL,
    roundtrip_iq4_xs => IQ4_XS,
}

#[test]
fn bound_table_lists_every_format_in_order() {
    for (b, f) in BOUNDS.iter().zip(QuantFormat::ALL) {
        assert_eq!(b.format, f);
    }
}

#[test]
fn step_check_catches_a_broken_quantizer() {
    // a Q4_0 block whose nibbles were swapped (a typical layout bug) must fail the checks
    let x = gaussian(7, 32, 0.02);
    let mut q = quantize_to_vec(QuantFormat::Q4_0, &x).unwrap();
    for byte in &mut q[2..] {
        *byte = byte.rotate_left(4);
    }
    let mut y = vec![0f32; 32];
    dequantize(QuantFormat::Q4_0, &q, &mut y).unwrap();
    assert!(check_step(QuantFormat::Q4_0, "swapped", &x, &q, &y).is_err());
    // and the intact block passes
    let good = quantize_to_vec(QuantFormat::Q4_0, &x).unwrap();
    let mut z = vec![0f32; 32];
    dequantize(QuantFormat::Q4_0, &good, &mut z).unwrap();
    assert_eq!(
        check_step(QuantFormat::Q4_0, "intact", &x, &good, &z),
        Ok(())
    );
    assert!(rel_rmse(&x, &y) > 3.0 * bound_of(QuantFormat::Q4_0).rmse_gauss);
}
