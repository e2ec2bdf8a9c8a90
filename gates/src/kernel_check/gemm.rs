//! kernel-check's tensor-core prompt-pass cases (`kernels/gemm.cu`), for every format of
//! [`select::GEMM_FORMATS`]:
//! - invariance (`batch_invariance`, exact): `n` of [`PASS_SIZES`] (1..=[`GEMM_N`] = 64) rows
//!   in one pass against
//!   each row alone, bit for bit, for every epilogue (plain with bias, residual, RMSNorm
//!   folded into the staging, gate/up with either activation, with and without the norm),
//!   with x as hi + lo and as f16 only; one staging buffer serves every launch, so a slot
//!   left over from a pass of 64 must not leak into a pass of 1;
//! - `fusion` (exact): the residual epilogue is the plain result + res (one f32 add), and
//!   the norm folded into the staging gives the bits of the `rmsnorm` kernel then a plain
//!   staging;
//! - against the CPU reference (`cpu::matvec`, f64): `gemm` (x as hi + lo) and `gemm_f16x`
//!   (x rounded to f16), each error divided by the row's sum |w x| + |bias|; and `gemm`
//!   with a planted huge activation (odd rows times 2^17, past f16's range: staged divided
//!   by a power of two), whose ordinary rows must keep their bits.
//!
//! Shapes: 37 rows (a partial last block: 32 rows per block, the second's last row group of
//! gate + up wholly past the end); k = 2304 (72 chunks: 5 per warp of 16 and an empty last
//! warp for the plain product, 9 per k group of 8 for gate + up in 2 row groups); k = 768 (24
//! chunks: 2 per warp, 4 warps empty; 3 per k group). Run with `ASSAY_GEMM_RG=P,G` for the
//! other row-group settings.

use super::cases::{ProductCase, ProductInputs as Inputs, Shape, dot_scales, e2s, poison};
use super::{CheckLine, Rng, compare_exact, compare_f32, compare_f32_scaled};
use engine::cuda::cudarc::driver::DevicePtr;
use engine::cuda::ops::{self, Activation, GemmOpts, GemmX, XParts};
use engine::cuda::sources::consts::GEMM_N;
use engine::cuda::{Gpu, cpu, select};

/// The pass sizes compared with the rows alone: every count of the first two n-tiles of 8,
/// the edges of the later ones, and the full pass.
const PASS_SIZES: [usize; 23] = [
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 24, 31, 33, 48, 63, GEMM_N,
];

/// One pass's outputs, token-major.
struct Outputs {
    plain: Vec<f32>,
    residual: Vec<f32>,
    norm: Vec<f32>,
    glu_silu_norm: Vec<f32>,
    glu_gelu: Vec<f32>,
}

impl Outputs {
    fn concat(&self) -> Vec<f32> {
        [
            &self.plain[..],
            &self.residual,
            &self.norm,
            &self.glu_silu_norm,
            &self.glu_gelu,
        ]
        .concat()
    }
}

/// Run the five epilogues on the `n` rows of x with residual inputs `res` (`n * rows`).
fn run(
    gpu: &Gpu,
    inp: &Inputs,
    xs: &mut GemmX,
    x: &[f32],
    res: &[f32],
    n: usize,
    opts: GemmOpts,
) -> Result<Outputs, String> {
    let (rows, k) = (inp.rows, inp.k);
    let dx = gpu.upload(x).map_err(e2s)?;
    let bias = Some(&inp.bias as &dyn DevicePtr<f32>);
    let norm = Some(ops::NormIn {
        weight: &inp.norm_w,
        eps: 1e-5,
        w_offset: 0.0,
    });
    ops::gemm_stage_x_for(gpu, inp.w.format, &dx, n, k, None, xs).map_err(e2s)?;
    let mut y = poison(gpu, n * rows).map_err(e2s)?;
    ops::gemm(gpu, &inp.w, xs, n, bias, false, &mut y, opts).map_err(e2s)?;
    let plain = gpu.download(&y).map_err(e2s)?;
    let mut y = gpu.upload(res).map_err(e2s)?;
    ops::gemm(gpu, &inp.w, xs, n, bias, true, &mut y, opts).map_err(e2s)?;
    let residual = gpu.download(&y).map_err(e2s)?;
    let mut y = poison(gpu, n * rows).map_err(e2s)?;
    ops::gemm_glu(
        gpu,
        &inp.w,
        &inp.wu,
        xs,
        n,
        Activation::GeluTanh,
        &mut y,
        opts,
    )
    .map_err(e2s)?;
    let glu_gelu = gpu.download(&y).map_err(e2s)?;
    ops::gemm_stage_x_for(gpu, inp.w.format, &dx, n, k, norm, xs).map_err(e2s)?;
    let mut y = poison(gpu, n * rows).map_err(e2s)?;
    ops::gemm(gpu, &inp.w, xs, n, bias, false, &mut y, opts).map_err(e2s)?;
    let norm_out = gpu.download(&y).map_err(e2s)?;
    let mut y = poison(gpu, n * rows).map_err(e2s)?;
    ops::gemm_glu(gpu, &inp.w, &inp.wu, xs, n, Activation::Silu, &mut y, opts).map_err(e2s)?;
    let glu_silu_norm = gpu.download(&y).map_err(e2s)?;
    Ok(Outputs {
        plain,
        residual,
        norm: norm_out,
        glu_silu_norm,
        glu_gelu,
    })
}

/// Every GEMM format's cases (an error becomes a failing line).
pub fn gemm_cases(gpu: &Gpu, rng: &mut Rng, lines: &mut Vec<CheckLine>) {
    let cc = gpu.info().compute_capability;
    for format in select::GEMM_FORMATS {
        if !select::gemm_supported(format, cc) {
            continue;
        }
        for (rows, k) in [(37, 72 * 32), (37, 24 * 32)] {
            let name = format!("{format} rows={rows} k={k}");
            Shape::new(gpu, format, rows, k, &name).run(rng, lines, "gemm", cases_of);
        }
    }
}

fn cases_of(s: Shape, rng: &mut Rng, lines: &mut Vec<CheckLine>) -> Result<(), String> {
    let (gpu, format, rows, k, name) = s.parts();
    let ProductCase {
        w,
        bias,
        x,
        res,
        dev: inp,
        ..
    } = ProductCase::random(gpu, rng, format, rows, k, GEMM_N)?;
    let mut xs = GemmX::new(gpu, k).map_err(e2s)?;
    let want = cpu::matvec(format, &w, rows, k, &x, GEMM_N, Some(&bias)).map_err(e2s)?;
    let scale = dot_scales(format, &w, rows, k, &x, GEMM_N, Some(&bias))?;
    for (lo, op) in [(true, "gemm"), (false, "gemm_f16x")] {
        let opts = GemmOpts {
            x: if lo { XParts::Two } else { XParts::One },
            fault: false,
        };
        let tag = if lo { "x=hi+lo" } else { "x=f16" };
        // The full pass first: its slots are left in the staging buffer for the singles.
        let full = run(gpu, &inp, &mut xs, &x, &res, GEMM_N, opts)?;
        let mut single = Vec::with_capacity(GEMM_N);
        for t in 0..GEMM_N {
            let xt = &x[t * k..(t + 1) * k];
            let rt = &res[t * rows..(t + 1) * rows];
            single.push(run(gpu, &inp, &mut xs, xt, rt, 1, opts)?);
        }
        for n in PASS_SIZES {
            let got = if n == GEMM_N {
                None
            } else {
                match run(gpu, &inp, &mut xs, &x[..n * k], &res[..n * rows], n, opts) {
                    Ok(o) => Some(o),
                    Err(e) => {
                        lines.push(CheckLine::error(
                            "batch_invariance",
                            format!("gemm {name} n={n} {tag}"),
                            e,
                        ));
                        continue;
                    }
                }
            };
            let got = got.as_ref().unwrap_or(&full);
            let pick = |f: fn(&Outputs) -> &Vec<f32>| -> Vec<f32> {
                single[..n]
                    .iter()
                    .flat_map(|o| f(o).iter().copied())
                    .collect()
            };
            let alone = [
                pick(|o| &o.plain),
                pick(|o| &o.residual),
                pick(|o| &o.norm),
                pick(|o| &o.glu_silu_norm),
                pick(|o| &o.glu_gelu),
            ]
            .concat();
            lines.push(compare_f32(
                "batch_invariance",
                format!(
                    "gemm {name} {tag}: 1 vs {n} per pass, plain+bias, +residual, rmsnorm+, \
                     rmsnorm+glu silu, glu gelu"
                ),
                &got.concat(),
                &alone,
            ));
            lines.push(compare_f32_scaled(
                op,
                format!("{name} n={n} +bias {tag}"),
                &got.plain,
                &want[..n * rows],
                &scale[..n * rows],
            ));
        }
        // The residual epilogue: plain + res, one f32 add.
        let sum: Vec<f32> = full.plain.iter().zip(&res).map(|(a, b)| a + b).collect();
        lines.push(compare_f32(
            "fusion",
            format!("gemm {name} {tag}: residual epilogue == plain + res"),
            &full.residual,
            &sum,
        ));
    }
    // The norm folded into the staging == the rmsnorm kernel, then a plain staging.
    let opts = GemmOpts::default();
    let dx = gpu.upload(&x).map_err(e2s)?;
    let mut normed = poison(gpu, GEMM_N * k).map_err(e2s)?;
    ops::rmsnorm(gpu, &dx, &inp.norm_w, &mut normed, GEMM_N, k, 1e-5, 0.0).map_err(e2s)?;
    ops::gemm_stage_x_for(gpu, format, &normed, GEMM_N, k, None, &mut xs).map_err(e2s)?;
    let mut y = poison(gpu, GEMM_N * rows).map_err(e2s)?;
    let bias_d = Some(&inp.bias as &dyn DevicePtr<f32>);
    ops::gemm(gpu, &inp.w, &xs, GEMM_N, bias_d, false, &mut y, opts).map_err(e2s)?;
    let separate = gpu.download(&y).map_err(e2s)?;
    let folded = run(gpu, &inp, &mut xs, &x, &res, GEMM_N, opts)?;
    lines.push(compare_f32(
        "fusion",
        format!("gemm {name}: rmsnorm folded into the staging == rmsnorm kernel + staging"),
        &folded.norm,
        &separate,
    ));
    // gemm_stage_x's 16-byte path (x aligned) against its scalar path (the same x one
    // float off its alignment), norm folded: the same staging, so the same product bits.
    let mut shifted = vec![0f32];
    shifted.extend_from_slice(&x);
    let dxs = gpu.upload(&shifted).map_err(e2s)?;
    let norm = Some(ops::NormIn {
        weight: &inp.norm_w,
        eps: 1e-5,
        w_offset: 0.0,
    });
    let mut by_path = Vec::new();
    for src in [dx.slice(0..x.len()), dxs.slice(1..shifted.len())] {
        ops::gemm_stage_x_for(gpu, format, &src, GEMM_N, k, norm, &mut xs).map_err(e2s)?;
        let mut y = poison(gpu, GEMM_N * rows).map_err(e2s)?;
        ops::gemm(gpu, &inp.w, &xs, GEMM_N, bias_d, false, &mut y, opts).map_err(e2s)?;
        by_path.push(gpu.download(&y).map_err(e2s)?);
    }
    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<u32>>();
    lines.push(compare_exact(
        "fusion",
        format!("gemm {name}: x staged by 16-byte loads == by scalar loads (x misaligned)"),
        &bits(&by_path[0]),
        &bits(&by_path[1]),
    ));
    huge_rows(gpu, &inp, &mut xs, &w, &x, &res, &folded, name, lines)
}

/// A planted huge activation: the odd rows of x times 2^17 (|x| up to ~1.3e5, past f16's
/// 65504, so a plain f16 staging makes them inf) must come out finite and within the
/// reference's tolerance (the staging divides such a row by a power of two, the epilogue
/// multiplies it back), and the even rows keep the bits they have among ordinary rows.
#[allow(clippy::too_many_arguments)]
fn huge_rows(
    gpu: &Gpu,
    inp: &Inputs,
    xs: &mut GemmX,
    w: &[u8],
    x: &[f32],
    res: &[f32],
    ordinary: &Outputs,
    name: &str,
    lines: &mut Vec<CheckLine>,
) -> Result<(), String> {
    let (rows, k) = (inp.rows, inp.k);
    let big: Vec<f32> = x
        .chunks(k)
        .enumerate()
        .flat_map(|(t, r)| {
            let f = if t % 2 == 1 { 131072.0 } else { 1.0 };
            r.iter().map(move |v| v * f)
        })
        .collect();
    let bias: Vec<f32> = gpu.download(&inp.bias).map_err(e2s)?;
    let format = inp.w.format;
    let want = cpu::matvec(format, w, rows, k, &big, GEMM_N, Some(&bias)).map_err(e2s)?;
    let scale = dot_scales(format, w, rows, k, &big, GEMM_N, Some(&bias))?;
    let got = run(gpu, inp, xs, &big, res, GEMM_N, GemmOpts::default())?;
    lines.push(compare_f32_scaled(
        "gemm",
        format!("{name} odd rows of x times 2^17 (past f16) +bias"),
        &got.plain,
        &want,
        &scale,
    ));
    let even = |o: &Outputs| -> Vec<f32> {
        o.concat()
            .chunks(rows)
            .enumerate()
            .filter(|(i, _)| (i % GEMM_N) % 2 == 0)
            .flat_map(|(_, r)| r.iter().copied())
            .collect()
    };
    lines.push(compare_f32(
        "batch_invariance",
        format!("gemm {name}: ordinary rows among rows past f16 == among ordinary rows"),
        &even(&got),
        &even(ordinary),
    ));
    Ok(())
}
