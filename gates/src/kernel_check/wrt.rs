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

use super::cases::{ProductCase, ProductInputs, Shape};
use super::wr::{EPILOGUES, run, served_by};
use super::{CheckLine, Rng, compare_f32};
use engine::cuda::Gpu;
use engine::cuda::ops::MatvecOpts;
use engine::cuda::select::{self, MatvecKernel};

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
            Shape::new(gpu, format, rows, k, &name).run(rng, lines, "fusion", cases_of);
        }
    }
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
    let wrt = |c: &MatvecKernel| matches!(c, MatvecKernel::WrTok { .. });
    served_by(
        run(gpu, inp, x, res, ntok, opts)?,
        wrt,
        "multi-token streamed",
    )
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

fn cases_of(s: Shape, rng: &mut Rng, lines: &mut Vec<CheckLine>) -> Result<(), String> {
    let (gpu, format, rows, k, name) = s.parts();
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
