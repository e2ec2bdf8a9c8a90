//! kernel-check's tensor-core decode-product cases (`kernels/mmv.cu`, `ASSAY_MMV=1`), for
//! every format of [`select::MMV_FORMATS`]:
//! - invariance (`batch_invariance`, exact): each token alone (n = 1) against the same
//!   token among n of [`PASS_SIZES`] (2..=64: every n-tile count of the entry points and
//!   their edges), bit for bit, for three epilogues: plain + bias, RMSNorm folded into the
//!   staging + residual, gate/up (SiLU) on the normed staging; the full pass runs first so
//!   that its slots stay in the staging buffer (a pass of 1 must not read them);
//! - `fusion` (exact): the residual epilogue == the plain result + res (one f32 add); one
//!   token through the `_x1` entry points (x staged by the kernel, RMSNorm folded) == the
//!   same token staged by `gemm_stage_x` then `_nt1`, also for a token past f16's range;
//!   two matrices through the pair entry point (`_pair_x1`, k + v) == two `_x1` launches;
//! - against the CPU reference (`cpu::matvec`, f64) under the `gemm` tolerance (x as hi +
//!   lo): plain + bias for the first [`REF_TOKENS`] tokens, and in the n = 64 pass.
//!
//! - BF16 only (`mmv_bf16_x`): unit rows (one weight 1.0, the rest 0) give back x itself
//!   within the accumulator's alignment, staged (n = 9) and through `_x1`: the check that x
//!   is multiplied in all three bf16 parts (two would leave up to 2^-17 of it), which the
//!   `gemm` tolerance alone cannot see.
//!
//! - Q4_K only (`gemm`): rows whose quants are all 0 (weights -dmin m per sub-block, so the
//!   product is the mins' term alone, `dmin m S` with S the sub-block's sum of x), staged
//!   (n = 9) and through `_x1`, against the f64 reference, on positive x whose f16 lo
//!   halves are all positive: S taken from the hi halves alone (the lo half's MMAs
//!   dropped) is off by ~2^-13 of |y|, past the tolerance (the CPU test
//!   `mins_only_rows_see_a_dropped_lo_half`).
//!
//! x is staged as its format's products multiply it (`gemm_stage_x_for`: f16 hi + lo, for
//! BF16 three bf16 parts).
//!
//! Shapes: Llama-3.1-8B's products (4096 x 4096: 256 tiles, one block each; 1024 x 4096,
//! k / v: 64 tiles, each split across 4 blocks summed in split order; 14336 x 4096 gate /
//! up; 4096 x 14336 down) and two edges: 37 rows (a partial last tile) with k = 2304 (8
//! splits of 9 chunks: warps of 2, 1 and 0 chunks) and 64 x 768 (3 splits).
//! Outputs are poisoned (NaN) before every launch.

use super::cases::{ProductCase, ProductInputs as Inputs, Shape, dot_scales, e2s, poison};
use super::{CheckLine, Rng, compare_f32, compare_f32_scaled};
use engine::cuda::cudarc::driver::DevicePtr;
use engine::cuda::ops::{self, Activation, GemmX, MmvScratch};
use engine::cuda::sources::consts::MMV_N;
use engine::cuda::{DeviceWeight, Gpu, cpu, select};
use engine::quant::QuantFormat;

/// The pass sizes compared with the tokens alone.
const PASS_SIZES: [usize; 10] = [2, 7, 8, 9, 16, 17, 31, 33, 48, MMV_N];

/// Tokens compared with the f64 reference alone (the big shapes' reference is CPU time).
const REF_TOKENS: usize = 2;

/// (rows, k) of the cases.
const SHAPES: [(usize, usize); 6] = [
    (37, 72 * 32),
    (64, 24 * 32),
    (1024, 4096),
    (4096, 4096),
    (14336, 4096),
    (4096, 14336),
];

/// One pass's outputs, token-major.
struct Outputs {
    plain: Vec<f32>,
    residual: Vec<f32>,
    glu: Vec<f32>,
}

impl Outputs {
    fn token(&self, t: usize, rows: usize) -> [&[f32]; 3] {
        let r = t * rows..(t + 1) * rows;
        [
            &self.plain[r.clone()],
            &self.residual[r.clone()],
            &self.glu[r],
        ]
    }
}

#[allow(clippy::too_many_arguments)]
fn run(
    gpu: &Gpu,
    inp: &Inputs,
    xs: &mut GemmX,
    sc: &mut MmvScratch,
    x: &[f32],
    res: &[f32],
    n: usize,
) -> Result<Outputs, String> {
    let (rows, k) = (inp.rows, inp.k);
    let dx = gpu.upload(x).map_err(e2s)?;
    let bias = Some(&inp.bias as &dyn DevicePtr<f32>);
    let norm = Some(ops::NormIn {
        weight: &inp.norm_w,
        eps: 1e-5,
        w_offset: 0.0,
    });
    let f = inp.w.format;
    ops::gemm_stage_x_for(gpu, f, &dx, n, k, None, xs).map_err(e2s)?;
    let mut y = poison(gpu, n * rows).map_err(e2s)?;
    ops::mmv(gpu, &inp.w, xs, n, bias, false, &mut y, sc).map_err(e2s)?;
    let plain = gpu.download(&y).map_err(e2s)?;
    ops::gemm_stage_x_for(gpu, f, &dx, n, k, norm, xs).map_err(e2s)?;
    let mut y = gpu.upload(res).map_err(e2s)?;
    ops::mmv(gpu, &inp.w, xs, n, None, true, &mut y, sc).map_err(e2s)?;
    let residual = gpu.download(&y).map_err(e2s)?;
    let mut y = poison(gpu, n * rows).map_err(e2s)?;
    ops::mmv_glu(gpu, &inp.w, &inp.wu, xs, n, Activation::Silu, &mut y, sc).map_err(e2s)?;
    let glu = gpu.download(&y).map_err(e2s)?;
    Ok(Outputs {
        plain,
        residual,
        glu,
    })
}

/// One token through the pair entry point (`_pair_x1`: two matrices of one shape on one
/// x, RMSNorm folded, + bias on the first) and through two `_x1` launches: (pair, two).
fn run_pair(
    gpu: &Gpu,
    inp: &Inputs,
    sc: &mut MmvScratch,
    x: &[f32],
) -> Result<(Vec<f32>, Vec<f32>), String> {
    let rows = inp.rows;
    let dx = gpu.upload(x).map_err(e2s)?;
    let bias = Some(&inp.bias as &dyn DevicePtr<f32>);
    let norm = Some(ops::NormIn {
        weight: &inp.norm_w,
        eps: 1e-5,
        w_offset: 0.0,
    });
    let (mut ya, mut yb) = (
        poison(gpu, rows).map_err(e2s)?,
        poison(gpu, rows).map_err(e2s)?,
    );
    ops::mmv_pair_x1(
        gpu,
        &inp.w,
        &inp.wu,
        &dx,
        norm,
        (bias, None),
        &mut ya,
        &mut yb,
        sc,
    )
    .map_err(e2s)?;
    let pair = [
        gpu.download(&ya).map_err(e2s)?,
        gpu.download(&yb).map_err(e2s)?,
    ]
    .concat();
    let mut y = poison(gpu, rows).map_err(e2s)?;
    ops::mmv_x1(gpu, &inp.w, &dx, norm, bias, false, &mut y, sc).map_err(e2s)?;
    let a = gpu.download(&y).map_err(e2s)?;
    let mut y = poison(gpu, rows).map_err(e2s)?;
    ops::mmv_x1(gpu, &inp.wu, &dx, norm, None, false, &mut y, sc).map_err(e2s)?;
    let b = gpu.download(&y).map_err(e2s)?;
    Ok((pair, [a, b].concat()))
}

/// Tokens checked through the one-token entry points (`_x1`).
const X1_TOKENS: usize = 4;

/// [`run`]'s three epilogues for one token through the `_x1` entry points.
fn run_x1(
    gpu: &Gpu,
    inp: &Inputs,
    sc: &mut MmvScratch,
    x: &[f32],
    res: &[f32],
) -> Result<Outputs, String> {
    let rows = inp.rows;
    let dx = gpu.upload(x).map_err(e2s)?;
    let bias = Some(&inp.bias as &dyn DevicePtr<f32>);
    let norm = Some(ops::NormIn {
        weight: &inp.norm_w,
        eps: 1e-5,
        w_offset: 0.0,
    });
    let mut y = poison(gpu, rows).map_err(e2s)?;
    ops::mmv_x1(gpu, &inp.w, &dx, None, bias, false, &mut y, sc).map_err(e2s)?;
    let plain = gpu.download(&y).map_err(e2s)?;
    let mut y = gpu.upload(res).map_err(e2s)?;
    ops::mmv_x1(gpu, &inp.w, &dx, norm, None, true, &mut y, sc).map_err(e2s)?;
    let residual = gpu.download(&y).map_err(e2s)?;
    let mut y = poison(gpu, rows).map_err(e2s)?;
    ops::mmv_glu_x1(
        gpu,
        &inp.w,
        &inp.wu,
        &dx,
        norm,
        Activation::Silu,
        &mut y,
        sc,
    )
    .map_err(e2s)?;
    let glu = gpu.download(&y).map_err(e2s)?;
    Ok(Outputs {
        plain,
        residual,
        glu,
    })
}

/// Every mmv format's cases (an error becomes a failing line).
pub fn mmv_cases(gpu: &Gpu, rng: &mut Rng, lines: &mut Vec<CheckLine>) {
    let cc = gpu.info().compute_capability;
    let mut sc = match MmvScratch::new(gpu) {
        Ok(s) => s,
        Err(e) => {
            lines.push(CheckLine::error("gemm", "mmv scratch", e));
            return;
        }
    };
    for format in select::MMV_FORMATS {
        if !select::mmv_supported(format, cc) {
            continue;
        }
        for (rows, k) in SHAPES {
            let name = format!(
                "mmv {format} rows={rows} k={k} splits={}",
                select::mmv_splits(rows, k)
            );
            let s = Shape::new(gpu, format, rows, k, &name);
            s.run(rng, lines, "gemm", |s, rng, lines| {
                cases_of(s, rng, &mut sc, lines)
            });
        }
        if format == QuantFormat::Q4_K {
            let name = "mmv Q4_K mins only (quants 0) rows=64 k=768 splits=3";
            let s = Shape::new(gpu, format, 64, 768, name);
            s.run(rng, lines, "gemm", |s, rng, lines| {
                mins_only(s, rng, &mut sc, lines)
            });
        }
        if format == QuantFormat::BF16 {
            let name = "mmv BF16 unit rows rows=16 k=512";
            let s = Shape::new(gpu, format, 16, 512, name);
            s.run(rng, lines, "mmv_bf16_x", |s, rng, lines| {
                unit_rows(s, rng, &mut sc, lines)
            });
        }
    }
}

/// The unit row of row r: weight 1.0 at column (13 r + 5) mod k (k a power of two: every
/// row a distinct column), 0 elsewhere.
fn unit_col(r: usize, k: usize) -> usize {
    (13 * r + 5) % k
}

/// BF16: unit rows (`y[t][r] = x[t][unit_col(r)]`, no bias) staged for n = 9 tokens (two
/// n-tiles; 16 x 512: the chunks split across 2 blocks) and through `_x1` for the first:
/// against x itself, scaled by |x| (`mmv_bf16_x`'s tolerance). With x in three bf16 parts
/// the one nonzero term is x exactly; a product that dropped a part is off by up to 2^-17.
fn unit_rows(
    s: Shape,
    rng: &mut Rng,
    sc: &mut MmvScratch,
    lines: &mut Vec<CheckLine>,
) -> Result<(), String> {
    let (gpu, format, rows, k, name) = s.parts();
    const N: usize = 9;
    let mut host = vec![0u8; rows * k * 2];
    for r in 0..rows {
        let i = 2 * (r * k + unit_col(r, k));
        host[i..i + 2].copy_from_slice(&half::bf16::ONE.to_le_bytes());
    }
    let w = DeviceWeight::upload(gpu, format, rows, k, &host).map_err(e2s)?;
    // Values of 24 significant bits (the tail parts nonzero), not near 0.
    let x: Vec<f32> = (0..N * k)
        .map(|_| {
            let v = rng.symmetric();
            v + v.signum() * 0.25
        })
        .collect();
    let want: Vec<f32> = (0..N * rows)
        .map(|i| x[(i / rows) * k + unit_col(i % rows, k)])
        .collect();
    let scale: Vec<f64> = want.iter().map(|v| f64::from(v.abs())).collect();
    let dx = gpu.upload(&x).map_err(e2s)?;
    let mut xs = GemmX::new(gpu, k).map_err(e2s)?;
    ops::gemm_stage_x_for(gpu, format, &dx, N, k, None, &mut xs).map_err(e2s)?;
    let mut y = poison(gpu, N * rows).map_err(e2s)?;
    ops::mmv(gpu, &w, &xs, N, None, false, &mut y, sc).map_err(e2s)?;
    let got = gpu.download(&y).map_err(e2s)?;
    lines.push(compare_f32_scaled(
        "mmv_bf16_x",
        format!("{name} n={N} staged: y = x[unit column]"),
        &got,
        &want,
        &scale,
    ));
    let x0 = gpu.upload(&x[..k]).map_err(e2s)?;
    let mut y = poison(gpu, rows).map_err(e2s)?;
    ops::mmv_x1(gpu, &w, &x0, None, None, false, &mut y, sc).map_err(e2s)?;
    let got = gpu.download(&y).map_err(e2s)?;
    lines.push(compare_f32_scaled(
        "mmv_bf16_x",
        format!("{name} x1: y = x[unit column]"),
        &got,
        &want[..rows],
        &scale[..rows],
    ));
    Ok(())
}

/// A random Q4_K weight (`random_weight`) with every quant 0: each weight is -dmin m of
/// its sub-block.
fn mins_only_weight(rng: &mut Rng, rows: usize, k: usize) -> Vec<u8> {
    let mut w = super::cases::random_weight(rng, QuantFormat::Q4_K, rows, k);
    let (_, bb) = QuantFormat::Q4_K.block_geometry();
    for blk in w.chunks_exact_mut(bb) {
        blk[16..].fill(0);
    }
    w
}

/// x of the mins-only case: positive values in [0.25, 1.25), each an f16 value h plus a
/// lo part in (0, 0.45 ulp(h)) (so f16 rounds it to h and the lo half is positive): the lo
/// halves add up coherently in S, as the weights -dmin m all have one sign, so a product
/// that lost them is off by ~2^-13 of |y| (random signs would let them cancel and hide
/// under the tolerance).
fn mins_only_x(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let v = 0.75 + 0.5 * rng.symmetric();
            let h = half::f16::from_f32(v);
            let ulp = half::f16::from_bits(h.to_bits() + 1).to_f32() - h.to_f32();
            h.to_f32() + (0.05 + 0.4 * rng.unit()) * ulp
        })
        .collect()
}

/// Q4_K rows of the mins alone (quants 0), staged for n = 9 tokens and through `_x1` for
/// the first, against the f64 reference under the `gemm` tolerance.
fn mins_only(
    s: Shape,
    rng: &mut Rng,
    sc: &mut MmvScratch,
    lines: &mut Vec<CheckLine>,
) -> Result<(), String> {
    let (gpu, format, rows, k, name) = s.parts();
    const N: usize = 9;
    let host = mins_only_weight(rng, rows, k);
    let w = DeviceWeight::upload(gpu, format, rows, k, &host).map_err(e2s)?;
    let x = mins_only_x(rng, N * k);
    let want = cpu::matvec(format, &host, rows, k, &x, N, None).map_err(e2s)?;
    let scale = dot_scales(format, &host, rows, k, &x, N, None)?;
    let dx = gpu.upload(&x).map_err(e2s)?;
    let mut xs = GemmX::new(gpu, k).map_err(e2s)?;
    ops::gemm_stage_x_for(gpu, format, &dx, N, k, None, &mut xs).map_err(e2s)?;
    let mut y = poison(gpu, N * rows).map_err(e2s)?;
    ops::mmv(gpu, &w, &xs, N, None, false, &mut y, sc).map_err(e2s)?;
    let got = gpu.download(&y).map_err(e2s)?;
    lines.push(compare_f32_scaled(
        "gemm",
        format!("{name} n={N} staged: y = -sum dmin m S"),
        &got,
        &want,
        &scale,
    ));
    let x0 = gpu.upload(&x[..k]).map_err(e2s)?;
    let mut y = poison(gpu, rows).map_err(e2s)?;
    ops::mmv_x1(gpu, &w, &x0, None, None, false, &mut y, sc).map_err(e2s)?;
    let got = gpu.download(&y).map_err(e2s)?;
    lines.push(compare_f32_scaled(
        "gemm",
        format!("{name} x1: y = -sum dmin m S"),
        &got,
        &want[..rows],
        &scale[..rows],
    ));
    Ok(())
}

fn cases_of(
    s: Shape,
    rng: &mut Rng,
    sc: &mut MmvScratch,
    lines: &mut Vec<CheckLine>,
) -> Result<(), String> {
    let (gpu, format, rows, k, name) = s.parts();
    let ProductCase {
        w,
        bias,
        x,
        res,
        dev: inp,
        ..
    } = ProductCase::random(gpu, rng, format, rows, k, MMV_N)?;
    let mut xs = GemmX::new(gpu, k).map_err(e2s)?;
    // The full pass first: its slots stay in the staging buffer for the singles.
    let full = run(gpu, &inp, &mut xs, sc, &x, &res, MMV_N)?;
    let mut single = Vec::with_capacity(MMV_N);
    for t in 0..MMV_N {
        let xt = &x[t * k..(t + 1) * k];
        let rt = &res[t * rows..(t + 1) * rows];
        single.push(run(gpu, &inp, &mut xs, sc, xt, rt, 1)?);
    }
    for n in PASS_SIZES {
        let got = if n == MMV_N {
            None
        } else {
            match run(gpu, &inp, &mut xs, sc, &x[..n * k], &res[..n * rows], n) {
                Ok(o) => Some(o),
                Err(e) => {
                    lines.push(CheckLine::error(
                        "batch_invariance",
                        format!("{name} n={n}"),
                        e,
                    ));
                    continue;
                }
            }
        };
        let got = got.as_ref().unwrap_or(&full);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for (t, one) in single.iter().enumerate().take(n) {
            for (g, s) in got.token(t, rows).iter().zip(one.token(0, rows)) {
                a.extend_from_slice(g);
                b.extend_from_slice(s);
            }
        }
        lines.push(compare_f32(
            "batch_invariance",
            format!("{name}: 1 vs {n} per launch, plain+bias, rmsnorm+residual, rmsnorm+glu silu"),
            &a,
            &b,
        ));
    }
    // One token staged by the kernel itself (`_x1`) == staged by gemm_stage_x(_bf16), bit
    // for bit, also for a token past f16's range (f16 staging: divided by a power of two).
    for t in 0..X1_TOKENS {
        let xt = &x[t * k..(t + 1) * k];
        let rt = &res[t * rows..(t + 1) * rows];
        let got = run_x1(gpu, &inp, sc, xt, rt)?;
        lines.push(compare_f32(
            "fusion",
            format!("{name} token {t}: x staged in the kernel (x1) == gemm_stage_x + mmv n=1, plain+bias, rmsnorm+residual, rmsnorm+glu"),
            &[&got.plain[..], &got.residual, &got.glu].concat(),
            &[&single[t].plain[..], &single[t].residual, &single[t].glu].concat(),
        ));
    }
    // The pair (k + v in one launch) == two `_x1` launches, bit for bit (and past f16).
    let big: Vec<f32> = x[..k].iter().map(|v| v * 131072.0).collect();
    for (what, xt) in [("token 0", &x[..k]), ("token times 2^17", &big[..])] {
        let (got, want) = run_pair(gpu, &inp, sc, xt)?;
        lines.push(compare_f32(
            "fusion",
            format!("{name} {what}: pair_x1 (two matrices, one launch) == two x1 launches, rmsnorm (+bias on the first)"),
            &got,
            &want,
        ));
    }
    let staged = run(gpu, &inp, &mut xs, sc, &big, &res[..rows], 1)?;
    let got = run_x1(gpu, &inp, sc, &big, &res[..rows])?;
    lines.push(compare_f32(
        "fusion",
        format!("{name}: token times 2^17 (past f16): x1 == gemm_stage_x + mmv n=1"),
        &[&got.plain[..], &got.residual, &got.glu].concat(),
        &[&staged.plain[..], &staged.residual, &staged.glu].concat(),
    ));
    // Against f64: the first tokens alone, and the same tokens in the full pass.
    let nr = REF_TOKENS;
    let want = cpu::matvec(format, &w, rows, k, &x[..nr * k], nr, Some(&bias)).map_err(e2s)?;
    let scale = dot_scales(format, &w, rows, k, &x[..nr * k], nr, Some(&bias))?;
    let alone: Vec<f32> = single[..nr]
        .iter()
        .flat_map(|o| o.plain.iter().copied())
        .collect();
    lines.push(compare_f32_scaled(
        "gemm",
        format!("{name} n=1 +bias"),
        &alone,
        &want,
        &scale,
    ));
    lines.push(compare_f32_scaled(
        "gemm",
        format!("{name} n={MMV_N} (first {nr}) +bias"),
        &full.plain[..nr * rows],
        &want,
        &scale,
    ));
    // The residual epilogue: the normed plain product + res, one f32 add.
    let dx = gpu.upload(&x).map_err(e2s)?;
    let norm = Some(ops::NormIn {
        weight: &inp.norm_w,
        eps: 1e-5,
        w_offset: 0.0,
    });
    ops::gemm_stage_x_for(gpu, format, &dx, MMV_N, k, norm, &mut xs).map_err(e2s)?;
    let mut y = poison(gpu, MMV_N * rows).map_err(e2s)?;
    ops::mmv(gpu, &inp.w, &xs, MMV_N, None, false, &mut y, sc).map_err(e2s)?;
    let normed: Vec<f32> = gpu.download(&y).map_err(e2s)?;
    let sum: Vec<f32> = normed.iter().zip(&res).map(|(a, b)| a + b).collect();
    lines.push(compare_f32(
        "fusion",
        format!("{name}: residual epilogue == plain + res"),
        &full.residual,
        &sum,
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    /// x's bf16 parts as `gm_bf16_parts` makes them (round to nearest even, exact f32
    /// differences): hi, mid, lo.
    fn parts(v: f32) -> [f32; 3] {
        let h = bf16::from_f32(v).to_f32();
        let r1 = v - h;
        let m = bf16::from_f32(r1).to_f32();
        [h, m, bf16::from_f32(r1 - m).to_f32()]
    }

    #[test]
    fn mins_only_rows_see_a_dropped_lo_half() {
        // The mins-only case's weights and x (same generators), against the product with S
        // from x's f16 hi half alone (what mmv gives if the lo half's ones-MMAs are lost),
        // and with S exact up to f32 rounding (one ulp of each output: green).
        let (rows, k, n) = (16, 768, 3);
        let mut rng = Rng::new(11);
        let w = mins_only_weight(&mut rng, rows, k);
        let x = mins_only_x(&mut rng, n * k);
        let want = cpu::matvec(QuantFormat::Q4_K, &w, rows, k, &x, n, None).unwrap();
        let scale = dot_scales(QuantFormat::Q4_K, &w, rows, k, &x, n, None).unwrap();
        let ulp: Vec<f32> = want
            .iter()
            .map(|&v| f32::from_bits(v.to_bits() + 1))
            .collect();
        assert!(compare_f32_scaled("gemm", "ulp", &ulp, &want, &scale).pass);
        let hi: Vec<f32> = x.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect();
        let got = cpu::matvec(QuantFormat::Q4_K, &w, rows, k, &hi, n, None).unwrap();
        let line = compare_f32_scaled("gemm", "hi only", &got, &want, &scale);
        assert!(!line.pass, "{}", line.render());
        // Most outputs alone already go red (not one unlucky value).
        let red = got
            .iter()
            .zip(&want)
            .zip(&scale)
            .filter(|((g, v), s)| (f64::from(**g) - f64::from(**v)).abs() > 2e-5 * **s)
            .count();
        assert!(red > got.len() / 2, "{red} of {}", got.len());
    }

    #[test]
    fn unit_rows_see_a_dropped_part() {
        // The unit-row case's x (same generator and law), against the products a unit row
        // gives with three parts (x itself) and with the third part dropped.
        let mut rng = Rng::new(7);
        let x: Vec<f32> = (0..9 * 16)
            .map(|_| {
                let v = rng.symmetric();
                v + v.signum() * 0.25
            })
            .collect();
        let scale: Vec<f64> = x.iter().map(|v| f64::from(v.abs())).collect();
        let three: Vec<f32> = x.iter().map(|&v| parts(v).iter().sum()).collect();
        assert_eq!(three, x, "three bf16 parts sum to x exactly");
        let line = compare_f32_scaled("mmv_bf16_x", "three", &three, &x, &scale);
        assert!(line.pass, "{}", line.render());
        // One truncation of the accumulator (an ulp of x) stays green.
        let ulp: Vec<f32> = x.iter().map(|&v| f32::from_bits(v.to_bits() - 1)).collect();
        assert!(compare_f32_scaled("mmv_bf16_x", "ulp", &ulp, &x, &scale).pass);
        let two: Vec<f32> = x
            .iter()
            .map(|&v| {
                let p = parts(v);
                p[0] + p[1]
            })
            .collect();
        let line = compare_f32_scaled("mmv_bf16_x", "two", &two, &x, &scale);
        assert!(!line.pass, "{}", line.render());
        // Most values alone already go red (not one unlucky value).
        let red = two
            .iter()
            .zip(&x)
            .filter(|(t, v)| (f64::from(**t) - f64::from(**v)).abs() > 4.8e-7 * f64::from(v.abs()))
            .count();
        assert!(red > x.len() / 2, "{red} of {}", x.len());
    }
}
