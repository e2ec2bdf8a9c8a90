//! kernel-check's batched-matvec cases: for every format, `ntok` in 1..=[`MV_MAX_TOK`], 13
//! and [`MV_LAUNCH_MAX_TOK`] token vectors in one launch (the batched entry points, which
//! load each chunk of W once per group of 8 tokens) against one launch per token, bit for
//! bit, for every epilogue (plain with bias, residual, RMSNorm folded into the input,
//! gate/up with either activation,
//! with and without the norm); and the plain product against the CPU reference within
//! the `matvec` tolerance.
//!
//! The shape makes the batched kernel tile x differently from the one-token kernel (more
//! chunks than one batched tile holds, a partial last tile) and leaves the last block of
//! rows partial, so a chunk order or row guard that depended on the batch would show.

use super::cases::{ProductCase, ProductInputs as Inputs, Shape, dot_scales, e2s, poison};
use super::{CheckLine, Rng, compare_f32, compare_f32_scaled};
use engine::cuda::cudarc::driver::DevicePtr;
use engine::cuda::ops::{self, Activation};
use engine::cuda::sources::consts::{MV_LAUNCH_MAX_TOK, MV_MAX_TOK};
use engine::cuda::{Gpu, cpu, select};
use engine::quant::QuantFormat;

/// One launch of every matvec epilogue on the first `n` tokens; outputs token-major.
struct Outputs {
    plain: Vec<f32>,
    residual: Vec<f32>,
    norm: Vec<f32>,
    glu_silu_norm: Vec<f32>,
    glu_gelu: Vec<f32>,
    plain_kernel: String,
    kernels: String,
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

/// Run the five epilogues on `x` (`n` tokens) with residual inputs `res` (`n * rows`).
fn run(gpu: &Gpu, inp: &Inputs, x: &[f32], res: &[f32], n: usize) -> Result<Outputs, String> {
    let rows = inp.rows;
    let dx = gpu.upload(x).map_err(e2s)?;
    let bias = Some(&inp.bias as &dyn DevicePtr<f32>);
    let norm = Some(ops::NormIn {
        weight: &inp.norm_w,
        eps: 1e-5,
        w_offset: 0.0,
    });
    let mut y = poison(gpu, n * rows).map_err(e2s)?;
    let c1 = ops::matvec(gpu, &inp.w, &dx, n, bias, &mut y).map_err(e2s)?;
    let plain = gpu.download(&y).map_err(e2s)?;
    let mut y = gpu.upload(res).map_err(e2s)?;
    ops::matvec_residual(gpu, &inp.w, &dx, n, bias, &mut y).map_err(e2s)?;
    let residual = gpu.download(&y).map_err(e2s)?;
    let mut y = poison(gpu, n * rows).map_err(e2s)?;
    let mv = ops::MatvecOpts::default();
    ops::matvec_fused(gpu, &inp.w, &dx, n, bias, norm, false, mv, &mut y).map_err(e2s)?;
    let norm_out = gpu.download(&y).map_err(e2s)?;
    let mut y = poison(gpu, n * rows).map_err(e2s)?;
    let c2 = ops::matvec_glu(
        gpu,
        &inp.w,
        &inp.wu,
        &dx,
        n,
        Activation::Silu,
        norm,
        mv,
        &mut y,
    )
    .map_err(e2s)?;
    let glu_silu_norm = gpu.download(&y).map_err(e2s)?;
    let mut y = poison(gpu, n * rows).map_err(e2s)?;
    ops::matvec_glu(
        gpu,
        &inp.w,
        &inp.wu,
        &dx,
        n,
        Activation::GeluTanh,
        None,
        mv,
        &mut y,
    )
    .map_err(e2s)?;
    let glu_gelu = gpu.download(&y).map_err(e2s)?;
    Ok(Outputs {
        plain,
        residual,
        norm: norm_out,
        glu_silu_norm,
        glu_gelu,
        plain_kernel: c1.to_string(),
        kernels: format!("{c1}, {c2}"),
    })
}

/// The batched-matvec cases of one format (an error becomes a failing line).
pub fn matvec_batch_cases(
    gpu: &Gpu,
    rng: &mut Rng,
    format: QuantFormat,
    lines: &mut Vec<CheckLine>,
) {
    // 72 chunks of 32 (9 super-blocks): one tile for one token per pass, a full and a
    // partial tile at 8 tokens per pass; 37 rows: a partial last block at 2 rows per warp.
    // 48 chunks (6 super-blocks, Qwen2.5-1.5B's hidden size): a row shorter than the
    // batched tile (staged at the full tile's stride), lanes with 2 and with 1 chunk.
    for (rows, k) in [(37, 72 * 32), (37, 48 * 32)] {
        let name = format!("{format} rows={rows} k={k}");
        Shape::new(gpu, format, rows, k, &name).run(rng, lines, "batch_invariance", cases_of);
    }
}

fn cases_of(s: Shape, rng: &mut Rng, lines: &mut Vec<CheckLine>) -> Result<(), String> {
    let (gpu, format, rows, k, name) = s.parts();
    // Every count of the row paths, and launches past them (the batched decode step and a
    // prompt pass run up to MV_LAUNCH_MAX_TOK rows per launch).
    const NMAX: usize = MV_LAUNCH_MAX_TOK;
    let ProductCase {
        w,
        bias,
        x,
        res,
        dev: inp,
        ..
    } = ProductCase::random(gpu, rng, format, rows, k, NMAX)?;
    // Each token alone (the one-token-per-pass kernels).
    let mut single = Vec::with_capacity(NMAX);
    for t in 0..NMAX {
        let xt = &x[t * k..(t + 1) * k];
        let rt = &res[t * rows..(t + 1) * rows];
        single.push(run(gpu, &inp, xt, rt, 1)?);
    }
    let want =
        cpu::matvec(format, &w, rows, k, &x, NMAX, Some(&bias)).map_err(|e| e.to_string())?;
    let scale = dot_scales(format, &w, rows, k, &x, NMAX, Some(&bias))?;
    for n in (1..=MV_MAX_TOK).chain([13, NMAX]) {
        let got = match run(gpu, &inp, &x[..n * k], &res[..n * rows], n) {
            Ok(o) => o,
            Err(e) => {
                lines.push(CheckLine::error(
                    "batch_invariance",
                    format!("{name} ntok={n}"),
                    e,
                ));
                continue;
            }
        };
        // The singles in the batch's layout: each epilogue's n tokens, token-major.
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
                "matvec {name}: 1 vs {n} per launch, plain+bias, +residual, rmsnorm+, \
                 rmsnorm+glu silu, glu gelu [{}]",
                got.kernels
            ),
            &got.concat(),
            &alone,
        ));
        lines.push(compare_f32_scaled(
            "matvec",
            format!("{name} ntok={n} +bias [{}]", got.plain_kernel),
            &got.plain,
            &want[..n * rows],
            &scale[..n * rows],
        ));
    }
    Ok(())
}

/// Every format's batched cases.
pub fn run_all(gpu: &Gpu, rng: &mut Rng, lines: &mut Vec<CheckLine>) {
    for format in select::KERNEL_FORMATS {
        matvec_batch_cases(gpu, rng, format, lines);
    }
}
