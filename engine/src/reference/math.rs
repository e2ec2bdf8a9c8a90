//! The reference arithmetic, one function per primitive, each with a fixed summation order
//! that depends only on the length of its inputs — never on threads, batch size or the
//! position of a row in a batch. Backends are compared against these.

/// Lanes of [`dot`]'s accumulator.
pub const DOT_LANES: usize = 16;

/// f32 dot product in a fixed order: lane `j` (of [`DOT_LANES`]) accumulates the products
/// of elements `i ≡ j (mod 16)` in index order over the whole 16-element chunks; the lanes
/// are then summed as a fixed pairwise tree (`j += j+8`, `j += j+4`, `j += j+2`,
/// `j += j+1`), and the products of the tail elements (past the last whole chunk) are added
/// in index order. No fused multiply-add. `a` and `b` must have the same length (extra
/// elements of the longer one are ignored).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; DOT_LANES];
    let mut ca = a.chunks_exact(DOT_LANES);
    let mut cb = b.chunks_exact(DOT_LANES);
    for (xa, xb) in (&mut ca).zip(&mut cb) {
        for ((s, x), y) in acc.iter_mut().zip(xa).zip(xb) {
            *s += x * y;
        }
    }
    // Written over a constant array (not a `while` loop) so that LLVM keeps the main loop
    // on full 4-wide SSE vectors.
    for w in [8usize, 4, 2, 1] {
        for j in 0..w {
            acc[j] += acc[j + w];
        }
    }
    let mut s = acc[0];
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        s += x * y;
    }
    s
}

/// RMS norm of `x` into `out` with weight `w` (all the same length):
/// `sum = Σ x_i^2` accumulated in f64 in index order, `scale = 1 / sqrt(sum/n + eps)` in
/// f32, `out_i = (x_i * scale) * w_i`.
pub fn rms_norm(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let mut sum = 0f64;
    for &v in x {
        sum += f64::from(v * v);
    }
    let mean = (sum / x.len().max(1) as f64) as f32;
    let scale = 1.0 / (mean + eps).sqrt();
    for ((o, &v), &g) in out.iter_mut().zip(x).zip(w) {
        *o = (v * scale) * g;
    }
}

/// In-place variant of [`rms_norm`].
pub fn rms_norm_inplace(x: &mut [f32], w: &[f32], eps: f32) {
    let mut sum = 0f64;
    for &v in x.iter() {
        sum += f64::from(v * v);
    }
    let mean = (sum / x.len().max(1) as f64) as f32;
    let scale = 1.0 / (mean + eps).sqrt();
    for (v, &g) in x.iter_mut().zip(w) {
        *v = (*v * scale) * g;
    }
}

/// `x * sigmoid(x)` as `x / (1 + exp(-x))`.
#[inline]
pub fn silu(x: f32) -> f32 {
    x / (1.0 + (-x).exp())
}

/// GeLU, tanh approximation: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
#[inline]
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    0.5 * x * (1.0 + (SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x)).tanh())
}

/// `cap * tanh(x / cap)`.
#[inline]
pub fn softcap(x: f32, cap: f32) -> f32 {
    cap * (x / cap).tanh()
}

/// cos/sin of RoPE pair `i` (of `rot_dims / 2`) at position `pos`: the angle
/// `pos * freq_scale * base^(-2i/rot_dims) / factor` is computed in f64, its cos and sin
/// rounded to f32.
pub fn rope_cos_sin(
    pos: usize,
    i: usize,
    rot_dims: usize,
    base: f32,
    freq_scale: f32,
    factor: f32,
) -> (f32, f32) {
    let exponent = -2.0 * i as f64 / rot_dims as f64;
    let inv_freq = f64::from(base).powf(exponent);
    let theta = pos as f64 * f64::from(freq_scale) * inv_freq / f64::from(factor);
    (theta.cos() as f32, theta.sin() as f32)
}

/// Rotate one head in place with a table of `(cos, sin)` per pair.
/// Adjacent: pairs `(2i, 2i+1)`; NeoX: pairs `(i, i + rot/2)`. Each pair
/// `(x0, x1) -> (x0 c - x1 s, x0 s + x1 c)`.
pub fn rope_head(head: &mut [f32], table: &[(f32, f32)], neox: bool) {
    let half = table.len();
    for (i, &(c, s)) in table.iter().enumerate() {
        let (i0, i1) = if neox {
            (i, i + half)
        } else {
            (2 * i, 2 * i + 1)
        };
        let (x0, x1) = (head[i0], head[i1]);
        head[i0] = x0 * c - x1 * s;
        head[i1] = x0 * s + x1 * c;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_matches_f64_and_fixed_order() {
        let a: Vec<f32> = (0..100)
            .map(|i| ((i * 37 % 17) as f32 - 8.0) * 0.25)
            .collect();
        let b: Vec<f32> = (0..100)
            .map(|i| ((i * 11 % 13) as f32 - 6.0) * 0.5)
            .collect();
        let exact: f64 = a
            .iter()
            .zip(&b)
            .map(|(x, y)| f64::from(*x) * f64::from(*y))
            .sum();
        // Small integers times powers of two: every partial sum is exact.
        assert_eq!(f64::from(dot(&a, &b)), exact);
        // Lane order, written out for a length-35 input.
        let a: Vec<f32> = (0..35).map(|i| 1.0 + i as f32 * 1e-3).collect();
        let b: Vec<f32> = (0..35).map(|i| 0.3 - i as f32 * 7e-4).collect();
        let mut acc = [0f32; 16];
        for i in 0..32 {
            acc[i % 16] += a[i] * b[i];
        }
        for w in [8, 4, 2, 1] {
            for j in 0..w {
                acc[j] += acc[j + w];
            }
        }
        let mut s = acc[0];
        for i in 32..35 {
            s += a[i] * b[i];
        }
        assert_eq!(dot(&a, &b).to_bits(), s.to_bits());
    }

    #[test]
    fn rms_norm_unit() {
        let x = [3.0f32, 4.0];
        let mut out = [0f32; 2];
        rms_norm(&x, &[1.0, 2.0], 0.0, &mut out);
        let s = 1.0 / 12.5f32.sqrt();
        assert_eq!(out, [3.0 * s, (4.0 * s) * 2.0]);
        let mut y = x;
        rms_norm_inplace(&mut y, &[1.0, 2.0], 0.0);
        assert_eq!(y, out);
    }

    #[test]
    fn activations() {
        assert_eq!(silu(0.0), 0.0);
        assert!((silu(2.0) - 2.0 / (1.0 + (-2.0f32).exp())).abs() < 1e-7);
        assert!((gelu_tanh(1.0) - 0.841_192).abs() < 1e-5);
        assert!((gelu_tanh(-3.0) - -0.003_637_4).abs() < 1e-6);
        assert!((softcap(100.0, 30.0) - 30.0 * (100.0f32 / 30.0).tanh()).abs() < 1e-6);
    }

    #[test]
    fn rope_rotates_pairs() {
        // Position 0 is the identity; pair 0 at position 1 with base b rotates by 1 rad.
        assert_eq!(rope_cos_sin(0, 3, 8, 10000.0, 1.0, 1.0), (1.0, 0.0));
        let (c, s) = rope_cos_sin(1, 0, 8, 10000.0, 1.0, 1.0);
        assert_eq!((c, s), (1f64.cos() as f32, 1f64.sin() as f32));
        let (c1, s1) = rope_cos_sin(5, 1, 8, 100.0, 1.0, 2.0);
        let th = 5.0 * 100f64.powf(-0.25) / 2.0;
        assert_eq!((c1, s1), (th.cos() as f32, th.sin() as f32));
        let t = [(0.0f32, 1.0f32), (1.0, 0.0)];
        let mut h = [1.0f32, 2.0, 3.0, 4.0];
        rope_head(&mut h, &t, false);
        assert_eq!(h, [-2.0, 1.0, 3.0, 4.0]);
        let mut h = [1.0f32, 2.0, 3.0, 4.0];
        rope_head(&mut h, &t, true);
        assert_eq!(h, [-3.0, 2.0, 1.0, 4.0]);
    }
}
