//! CPU references of every CUDA kernel: the same contract, written plainly, with f64
//! accumulation where the kernel accumulates, so that kernel-check measures the kernel's
//! error rather than the reference's.
//!
//! Owns one function per kernel (`matvec`, `embed`, `rmsnorm`, `rope`, `attention`,
//! `kv_store`, `gated_act`, `argmax`; add / scale / softcap are one-liners at the call site)
//! plus [`rope_table`], the RoPE frequency table shared by the device and the host.
//! RMSNorm and RoPE follow the reference executor's arithmetic step for step
//! (`reference::math`), so the GPU agrees with it to the bit almost always. Weights are decoded with [`crate::quant::dequantize`]
//! (an implementation independent of the kernels' decoders). Runs without a GPU.

use super::ops::{Activation, AttnShape, RopeStyle};
use crate::quant::{QuantError, QuantFormat, dequantize};
use half::f16;

/// `y[t][r] = sum_i W[r][i] * x[t][i] (+ bias[r])`, W given as `rows` rows of `k` values
/// in `format`. Returns `[ntok][rows]`.
pub fn matvec(
    format: QuantFormat,
    w: &[u8],
    rows: usize,
    k: usize,
    x: &[f32],
    ntok: usize,
    bias: Option<&[f32]>,
) -> Result<Vec<f32>, QuantError> {
    let row_bytes = format.bytes_for(k)?;
    if w.len() != rows * row_bytes {
        return Err(QuantError::LengthMismatch {
            a: w.len(),
            b: rows * row_bytes,
        });
    }
    if x.len() < ntok * k {
        return Err(QuantError::LengthMismatch {
            a: x.len(),
            b: ntok * k,
        });
    }
    let mut y = vec![0f32; ntok * rows];
    let mut row = vec![0f32; k];
    for r in 0..rows {
        dequantize(format, &w[r * row_bytes..(r + 1) * row_bytes], &mut row)?;
        for t in 0..ntok {
            let xt = &x[t * k..(t + 1) * k];
            let mut acc = 0f64;
            for (a, b) in row.iter().zip(xt) {
                acc += f64::from(*a) * f64::from(*b);
            }
            let b = bias.map_or(0.0, |b| f64::from(b[r]));
            y[t * rows + r] = (acc + b) as f32;
        }
    }
    Ok(y)
}

/// `out[t] = scale * W[tokens[t]]`; a token outside `0..rows` gives a row of NaN.
pub fn embed(
    format: QuantFormat,
    w: &[u8],
    rows: usize,
    k: usize,
    tokens: &[i32],
    scale: f32,
) -> Result<Vec<f32>, QuantError> {
    let row_bytes = format.bytes_for(k)?;
    let mut out = vec![f32::NAN; tokens.len() * k];
    for (t, &tok) in tokens.iter().enumerate() {
        let Ok(r) = usize::try_from(tok) else {
            continue;
        };
        if r >= rows {
            continue;
        }
        let o = &mut out[t * k..(t + 1) * k];
        dequantize(format, &w[r * row_bytes..(r + 1) * row_bytes], o)?;
        for v in o.iter_mut() {
            *v *= scale;
        }
    }
    Ok(out)
}

/// RMSNorm of `rows` rows of `dim` values: squares rounded to f32 and summed in f64, mean
/// rounded to f32, `scale = 1 / sqrt(mean + eps)` in f32, `y = (x * scale) * (w + w_offset)`.
pub fn rmsnorm(x: &[f32], w: &[f32], rows: usize, dim: usize, eps: f32, w_offset: f32) -> Vec<f32> {
    let mut y = vec![0f32; rows * dim];
    for r in 0..rows {
        let xr = &x[r * dim..(r + 1) * dim];
        let ss: f64 = xr.iter().map(|v| f64::from(v * v)).sum();
        let mean = (ss / dim.max(1) as f64) as f32;
        let scale = 1.0 / (mean + eps).sqrt();
        for i in 0..dim {
            y[r * dim + i] = (xr[i] * scale) * (w[i] + w_offset);
        }
    }
    y
}

/// The RoPE table for `n_rot` rotated dims: `inv[i] = base^(-2i/n_rot)` in f64 for
/// `i < n_rot/2`, then the frequency factors (1 when absent). Device and host both use it.
pub fn rope_table(base: f32, n_rot: usize, freq_factors: Option<&[f32]>) -> Vec<f64> {
    let half = n_rot / 2;
    let mut t: Vec<f64> = (0..half)
        .map(|i| f64::from(base).powf(-2.0 * i as f64 / n_rot as f64))
        .collect();
    t.extend((0..half).map(|i| {
        freq_factors
            .and_then(|f| f.get(i))
            .map_or(1.0, |v| f64::from(*v))
    }));
    t
}

/// RoPE in place on `[ntok][nheads][head_dim]`: pair i at position p turns by
/// `theta = p * freq_scale * inv[i] / fac[i]` (f64), cos/sin rounded to f32, the rotation
/// in f32 (see [`rope_table`]).
#[allow(clippy::too_many_arguments)]
pub fn rope(
    x: &mut [f32],
    pos: &[i32],
    table: &[f64],
    freq_scale: f32,
    ntok: usize,
    nheads: usize,
    head_dim: usize,
    n_rot: usize,
    style: RopeStyle,
) {
    let half = n_rot / 2;
    for t in 0..ntok {
        let cs: Vec<(f32, f32)> = (0..half)
            .map(|i| {
                let th = f64::from(pos[t]) * f64::from(freq_scale) * table[i] / table[half + i];
                (th.cos() as f32, th.sin() as f32)
            })
            .collect();
        for h in 0..nheads {
            let xh = &mut x[(t * nheads + h) * head_dim..(t * nheads + h + 1) * head_dim];
            for (i, &(c, s)) in cs.iter().enumerate() {
                let (i0, i1) = match style {
                    RopeStyle::Normal => (2 * i, 2 * i + 1),
                    RopeStyle::Neox => (i, i + half),
                };
                let (a, b) = (xh[i0], xh[i1]);
                xh[i0] = a * c - b * s;
                xh[i1] = a * s + b * c;
            }
        }
    }
}

/// Attention of `s.ntok` queries over f16 caches `[n_kv_heads][capacity][head_dim]`; token t
/// attends to positions `max(0, pos[t]-window+1) ..= pos[t]` (all of `0..=pos[t]` when
/// window is 0). Scores soft-capped when `softcap > 0`. Softmax in f64.
pub fn attention(
    q: &[f32],
    k_cache: &[f16],
    v_cache: &[f16],
    pos: &[i32],
    s: AttnShape,
    scale: f32,
    softcap: f32,
) -> Vec<f32> {
    let (nh, hd, cap) = (s.n_heads, s.head_dim, s.capacity);
    let group = nh / s.n_kv_heads.max(1);
    let mut out = vec![0f32; s.ntok * nh * hd];
    for t in 0..s.ntok {
        let p = pos[t].max(0) as usize;
        let lo = if s.window > 0 {
            (p + 1).saturating_sub(s.window)
        } else {
            0
        };
        for h in 0..nh {
            let kvh = h / group.max(1);
            let qh = &q[(t * nh + h) * hd..(t * nh + h + 1) * hd];
            let scores: Vec<f64> = (lo..=p)
                .map(|j| {
                    let kr = &k_cache[(kvh * cap + j) * hd..(kvh * cap + j + 1) * hd];
                    let dot: f64 = qh
                        .iter()
                        .zip(kr)
                        .map(|(a, b)| f64::from(*a) * f64::from(b.to_f32()))
                        .sum();
                    let sc = dot * f64::from(scale);
                    if softcap > 0.0 {
                        f64::from(softcap) * (sc / f64::from(softcap)).tanh()
                    } else {
                        sc
                    }
                })
                .collect();
            let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|v| (v - m).exp()).collect();
            let l: f64 = e.iter().sum();
            for d in 0..hd {
                let mut acc = 0f64;
                for (idx, j) in (lo..=p).enumerate() {
                    acc += e[idx] * f64::from(v_cache[(kvh * cap + j) * hd + d].to_f32());
                }
                out[(t * nh + h) * hd + d] = (acc / l) as f32;
            }
        }
    }
    out
}

/// Store K and V (`[ntok][n_kv_heads][head_dim]`) into f16 caches at `pos` (round to
/// nearest even); positions outside the cache are skipped.
#[allow(clippy::too_many_arguments)]
pub fn kv_store(
    k: &[f32],
    v: &[f32],
    k_cache: &mut [f16],
    v_cache: &mut [f16],
    pos: &[i32],
    n_kv_heads: usize,
    head_dim: usize,
    capacity: usize,
) {
    let n = n_kv_heads * head_dim;
    for (t, &p) in pos.iter().enumerate() {
        let Ok(p) = usize::try_from(p) else { continue };
        if p >= capacity {
            continue;
        }
        for idx in 0..n {
            let (kvh, d) = (idx / head_dim, idx % head_dim);
            let dst = (kvh * capacity + p) * head_dim + d;
            k_cache[dst] = f16::from_f32(k[t * n + idx]);
            v_cache[dst] = f16::from_f32(v[t * n + idx]);
        }
    }
}

/// `act(gate[i]) * up[i]`, in f64.
pub fn gated_act(gate: &[f32], up: &[f32], act: Activation) -> Vec<f32> {
    gate.iter()
        .zip(up)
        .map(|(&g, &u)| {
            let g = f64::from(g);
            let a = match act {
                Activation::Silu => g / (1.0 + (-g).exp()),
                Activation::GeluTanh => {
                    let k0 = (2.0 / std::f64::consts::PI).sqrt();
                    0.5 * g * (1.0 + (k0 * (g + 0.044715 * g * g * g)).tanh())
                }
            };
            (a * f64::from(u)) as f32
        })
        .collect()
}

/// Index of the largest value of each row (`rows x n`): ties to the smallest index, NaN
/// never chosen, 0 for a row without a non-NaN value.
pub fn argmax(x: &[f32], rows: usize, n: usize) -> Vec<i32> {
    (0..rows)
        .map(|r| {
            let mut best: Option<(f32, usize)> = None;
            for (i, &v) in x[r * n..(r + 1) * n].iter().enumerate() {
                if v.is_nan() {
                    continue;
                }
                if best.is_none_or(|(bv, _)| v > bv) {
                    best = Some((v, i));
                }
            }
            best.map_or(0, |(_, i)| i as i32)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matvec_of_f32_identity_rows() {
        // W = [[1,0,...],[0,2,0,...]] over k = 32.
        let k = 32;
        let mut w = vec![0f32; 2 * k];
        w[0] = 1.0;
        w[k + 1] = 2.0;
        let bytes: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        let x: Vec<f32> = (0..2 * k).map(|i| i as f32).collect();
        let y = matvec(QuantFormat::F32, &bytes, 2, k, &x, 2, Some(&[0.5, 0.0])).unwrap();
        assert_eq!(y, vec![0.5, 2.0, 32.5, 66.0]);
    }

    #[test]
    fn rmsnorm_hand_values() {
        let y = rmsnorm(&[3.0, 4.0], &[1.0, 0.0], 1, 2, 0.0, 1.0);
        let inv = 1.0 / 12.5f32.sqrt();
        assert_eq!(y, vec![(3.0 * inv) * 2.0, 4.0 * inv]);
    }

    #[test]
    fn rope_styles_rotate_the_right_pairs() {
        let t = rope_table(10000.0, 4, None);
        assert_eq!(t, vec![1.0, 0.01, 1.0, 1.0]);
        assert_eq!(rope_table(100.0, 4, Some(&[2.0, 4.0]))[2..], [2.0, 4.0]);
        // Pair 1 has frequency 0 here: it must not move.
        let t = vec![1.0, 0.0, 1.0, 1.0];
        let mut a = vec![1.0, 0.0, 1.0, 0.0];
        rope(&mut a, &[1], &t, 1.0, 1, 1, 4, 4, RopeStyle::Normal);
        assert!((a[0] - 1f32.cos()).abs() < 1e-7 && (a[1] - 1f32.sin()).abs() < 1e-7);
        assert_eq!((a[2], a[3]), (1.0, 0.0));
        let mut b = vec![1.0, 0.0, 0.0, 0.0];
        rope(&mut b, &[1], &t, 1.0, 1, 1, 4, 4, RopeStyle::Neox);
        assert!((b[0] - 1f32.cos()).abs() < 1e-7 && (b[2] - 1f32.sin()).abs() < 1e-7);
    }

    #[test]
    fn attention_window_and_single_position() {
        let s = AttnShape {
            ntok: 1,
            n_heads: 2,
            n_kv_heads: 1,
            head_dim: 2,
            capacity: 4,
            window: 0,
        };
        let kc: Vec<f16> = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0]
            .map(f16::from_f32)
            .to_vec();
        let vc: Vec<f16> = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
            .map(f16::from_f32)
            .to_vec();
        // Position 0 only: output equals V[0] whatever q is.
        let o = attention(&[5.0, -3.0, 0.1, 0.2], &kc, &vc, &[0], s, 1.0, 0.0);
        assert_eq!(o, vec![1.0, 2.0, 1.0, 2.0]);
        // Window 1 at position 2: only position 2.
        let o = attention(
            &[5.0, -3.0, 0.1, 0.2],
            &kc,
            &vc,
            &[2],
            AttnShape { window: 1, ..s },
            1.0,
            0.0,
        );
        assert_eq!(o, vec![5.0, 6.0, 5.0, 6.0]);
        // Equal scores over positions 0 and 1: the mean of V.
        let o = attention(&[1.0, 1.0, 0.0, 0.0], &kc, &vc, &[1], s, 1.0, 0.0);
        assert_eq!(o, vec![2.0, 3.0, 2.0, 3.0]);
    }

    #[test]
    fn argmax_ties_and_nan() {
        let x = [
            1.0,
            3.0,
            f32::NAN,
            3.0,
            f32::NAN,
            f32::NAN,
            f32::NEG_INFINITY,
            f32::NEG_INFINITY,
        ];
        assert_eq!(argmax(&x, 2, 4), vec![1, 2]);
        assert_eq!(argmax(&[f32::NAN; 3], 1, 3), vec![0]);
    }

    #[test]
    fn activations() {
        let y = gated_act(&[0.0, 1.0], &[2.0, 2.0], Activation::Silu);
        assert_eq!(y[0], 0.0);
        assert!((y[1] as f64 - 2.0 / (1.0 + (-1f64).exp())).abs() < 1e-6);
        let y = gated_act(&[1.0], &[1.0], Activation::GeluTanh);
        assert!((y[0] - 0.841_192).abs() < 1e-5);
    }
}
