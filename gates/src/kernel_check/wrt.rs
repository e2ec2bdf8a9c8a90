//! kernel-check's cases of the multi-token streamed matvec (`matvec_q4_0[_glu]_wrt<NT>_r<R>_d<D>`,
//! [`MatvecKernel::WrTok`]), on the devices that run it (sm_90; no lines elsewhere). For each
//! format of [`select::MV_WRT_FORMATS`], each shape of [`SHAPES`] and each token count of
//! [`NTOKS`]: every epilogue of [`EPILOGUES`] (bias, residual, folded norm, gate + up) in one
//! multi-token launch (forced: `MatvecOpts::wrt = true`) against today's one-token entry points
//! (`matvec_<fmt>_r<R>`, `wr = Some(false)`) run token by token, bit for bit (`fusion`), a line
//! per (shape, token count, epilogue); and the grid invariance of the multi-token launch
//! (grids of 1 and 7 blocks give the default grid's bits, `batch_invariance`).
//!
//! The shapes leave the last row group partial (rows odd), take k = 1024 (every step ends a
//! row group), 3072 and 14336 (Llama-3.1-8B's down: x of 8 tokens, 458 KB, read through
//! L1/L2), and one has more row groups than the default grid has warps.

use super::cases::{ProductCase, ProductInputs, e2s, poison};
use super::wr::EPILOGUES;
use super::{CheckLine, Rng, compare_f32};
use engine::cuda::Gpu;
use engine::cuda::cudarc::driver::DevicePtr;
use engine::cuda::ops::{self, Activation, MatvecOpts};
use engine::cuda::select::{self, MatvecKernel};
use engine::quant::QuantFormat;

/// (rows, k) of the cases.
const SHAPES: [(usize, usize); 4] = [(67, 1024), (133, 3072), (37, 14336), (4501, 1024)];

/// Token vectors per launch.
const NTOKS: [usize; 4] = [2, 3, 4, 8];

/// The multi-token cases (an error becomes a failing line).
pub fn run_all(gpu: &Gpu, rng: &mut Rng, lines: &mut Vec<CheckLine>) {
    let dev = gpu.facts();
    for format in select::MV_WRT_FORMATS {
        for (rows, k) in SHAPES {
            if select::choose_matvec_wrt(format, k, 2, false, &dev, true).is_none() {
                continue;
            }
            let name = format!("{format} rows={rows} k={k}");
            if let Err(e) = cases_of(gpu, rng, format, rows, k, &name, lines) {
                lines.push(CheckLine::error("fusion", name, e));
            }
        }
    }
}

/// One launch of each epilogue of [`EPILOGUES`] on `ntok` tokens `x` with residual input
/// `res` (`ntok` x rows), the kernels chosen with `opts`: the outputs and the kernels.
fn run(
    gpu: &Gpu,
    inp: &ProductInputs,
    x: &[f32],
    res: &[f32],
    ntok: usize,
    opts: MatvecOpts,
) -> Result<(Vec<Vec<f32>>, Vec<MatvecKernel>), String> {
    let rows = inp.rows;
    let dx = gpu.upload(x).map_err(e2s)?;
    let bias = Some(&inp.bias as &dyn DevicePtr<f32>);
    let norm = |w_offset| {
        Some(ops::NormIn {
            weight: &inp.norm_w,
            eps: 1e-5,
            w_offset,
        })
    };
    let (mut outs, mut kernels) = (Vec::new(), Vec::new());
    // (bias, norm, residual): wr.rs's order.
    for (b, n, residual) in [
        (None, None, false),
        (bias, None, false),
        (None, None, true),
        (bias, norm(0.0), false),
        (None, norm(1.0), true),
    ] {
        let mut y = if residual {
            gpu.upload(res)
        } else {
            poison(gpu, ntok * rows)
        }
        .map_err(e2s)?;
        let c = ops::matvec_fused(gpu, &inp.w, &dx, ntok, b, n, residual, opts, &mut y);
        kernels.push(c.map_err(e2s)?);
        outs.push(gpu.download(&y).map_err(e2s)?);
    }
    for (act, n) in [(Activation::Silu, None), (Activation::GeluTanh, norm(0.0))] {
        let mut y = poison(gpu, ntok * rows).map_err(e2s)?;
        let c = ops::matvec_glu(gpu, &inp.w, &inp.wu, &dx, ntok, act, n, opts, &mut y);
        kernels.push(c.map_err(e2s)?);
        outs.push(gpu.download(&y).map_err(e2s)?);
    }
    Ok((outs, kernels))
}

/// [`run`] with the multi-token kernel forced (on `grid` blocks, or the default grid), which
/// must have served every launch.
fn run_wrt(
    gpu: &Gpu,
    inp: &ProductInputs,
    x: &[f32],
    res: &[f32],
    ntok: usize,
    grid: Option<u32>,
) -> Result<(Vec<Vec<f32>>, Vec<MatvecKernel>), String> {
    let opts = MatvecOpts {
        wr: None,
        wr_grid: grid,
        qkv: None,
        wrt: true,
    };
    let (outs, kernels) = run(gpu, inp, x, res, ntok, opts)?;
    if let Some(c) = kernels
        .iter()
        .find(|c| !matches!(c, MatvecKernel::WrTok { .. }))
    {
        return Err(format!(
            "the multi-token streamed kernel was not chosen ({c})"
        ));
    }
    Ok((outs, kernels))
}

/// Today's one-token entry points run token by token on the same inputs: per epilogue the
/// `ntok` outputs concatenated (token t at t rows, as one multi-token launch writes them).
fn run_by_token(
    gpu: &Gpu,
    inp: &ProductInputs,
    x: &[f32],
    res: &[f32],
    ntok: usize,
) -> Result<(Vec<Vec<f32>>, Vec<MatvecKernel>), String> {
    let (rows, k) = (inp.rows, inp.k);
    let opts = MatvecOpts {
        wr: Some(false),
        wr_grid: None,
        qkv: None,
        wrt: false,
    };
    let mut outs = vec![Vec::new(); EPILOGUES.len()];
    let mut kernels = Vec::new();
    for t in 0..ntok {
        let (o, kk) = run(
            gpu,
            inp,
            &x[t * k..(t + 1) * k],
            &res[t * rows..(t + 1) * rows],
            1,
            opts,
        )?;
        for (all, one) in outs.iter_mut().zip(o) {
            all.extend(one);
        }
        kernels = kk;
    }
    if let Some(c) = kernels
        .iter()
        .find(|c| c.tokens_per_pass() != 1 || c.entry().contains("_wr"))
    {
        return Err(format!("a one-token entry point was expected ({c})"));
    }
    Ok((outs, kernels))
}

fn cases_of(
    gpu: &Gpu,
    rng: &mut Rng,
    format: QuantFormat,
    rows: usize,
    k: usize,
    name: &str,
    lines: &mut Vec<CheckLine>,
) -> Result<(), String> {
    let nmax = NTOKS.iter().copied().max().unwrap_or(1);
    let case = ProductCase::random(gpu, rng, format, rows, k, nmax)?;
    for ntok in NTOKS {
        let x = &case.x[..ntok * k];
        let res = &case.res[..ntok * rows];
        let (got, gk) = run_wrt(gpu, &case.dev, x, res, ntok, None)?;
        let (want, tk) = run_by_token(gpu, &case.dev, x, res, ntok)?;
        for (i, e) in EPILOGUES.iter().enumerate() {
            lines.push(compare_f32(
                "fusion",
                format!(
                    "matvec {name} ntok={ntok} {e}: one multi-token launch == token by token [{} vs {}]",
                    gk[i], tk[i]
                ),
                &got[i],
                &want[i],
            ));
        }
        let all = got.concat();
        for g in [1, 7] {
            let (o, _) = run_wrt(gpu, &case.dev, x, res, ntok, Some(g))?;
            lines.push(compare_f32(
                "batch_invariance",
                format!(
                    "matvec {name} ntok={ntok} multi-token streamed: a grid of {g} == the default grid, {} epilogues",
                    EPILOGUES.len()
                ),
                &o.concat(),
                &all,
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel_check::wr::{H200, matvec_entries};
    use std::collections::BTreeSet;

    #[test]
    fn the_cases_reach_every_multi_token_entry_point() {
        let h200 = H200;
        let mut seen = BTreeSet::new();
        for f in select::MV_WRT_FORMATS {
            for (rows, k) in SHAPES {
                for ntok in NTOKS {
                    for glu in [false, true] {
                        if let Some(c) = select::choose_matvec_wrt(f, k, ntok, glu, &h200, true) {
                            seen.insert(c.entry());
                        }
                    }
                    assert!(
                        select::choose_matvec_wrt(f, k, ntok, false, &h200, true).is_some(),
                        "{f} rows={rows} k={k} ntok={ntok}"
                    );
                }
            }
        }
        let all = matvec_entries(|e| e.contains("_wrt"));
        assert_eq!(seen, all);
        assert!(SHAPES.iter().all(|(rows, _)| rows % 2 == 1));
        assert!(
            SHAPES
                .iter()
                .any(|(rows, _)| rows.div_ceil(2) > 2 * 132 * 8)
        );
    }
}
