//! kernel-check's cases of the streamed one-token matvec (`matvec_<fmt>[_glu]_wr_r<R>_d<D>`,
//! [`MatvecKernel::Wr`]), on the devices that run it (sm_90; no lines elsewhere). For each
//! format of [`select::MV_WR_FORMATS`] and each shape of [`SHAPES`] where its requirements
//! hold (BF16's gate + up ring does not fit beside k = 14336's x: there its plain epilogues
//! only, [`streamed_epilogues`]):
//! - every epilogue of [`EPILOGUES`] on the streamed kernel (forced: `MatvecOpts::wr =
//!   Some(true)`) against today's one-token entry points (`Some(false)`), bit for bit, a line
//!   each (`fusion`);
//! - its plain product against the CPU reference (`matvec`);
//! - its invariance (`batch_invariance`, every epilogue): grids of 1 and 7 blocks give the
//!   default grid's bits, and rows launched as a matrix of their own (one row; 13 rows, which
//!   start in the middle of a row group) give the bits they get among all the rows.
//!
//! The shapes leave the last row group partial (rows not a multiple of 4), take k = 1024 m
//! for m = 1 (every step ends a row group), 3 and 14 (Llama-3.1-8B's down: the shallower
//! rings beside 63 KB of staged x; BF16's 1-row ring), and one has more row groups than the
//! default grid has warps (warps streaming several groups); `tests` check that together they
//! reach every streamed entry point.

use super::cases::{ProductCase, ProductInputs, Shape, dot_scales, e2s, poison};
use super::{CheckLine, Rng, compare_f32, compare_f32_scaled};
use engine::cuda::cudarc::driver::DevicePtr;
use engine::cuda::ops::{self, Activation, MatvecOpts};
use engine::cuda::select::{self, DeviceFacts, MatvecKernel};
use engine::cuda::{DeviceWeight, Gpu, cpu};
use engine::quant::QuantFormat;

/// (rows, k) of the cases.
pub(super) const SHAPES: [(usize, usize); 4] = [(67, 1024), (133, 3072), (37, 14336), (9001, 1024)];

/// The epilogues compared, in the order [`run`] returns them.
pub(super) const EPILOGUES: [&str; 7] = [
    "plain",
    "+bias",
    "residual",
    "rmsnorm +bias",
    "rmsnorm w_offset=1 +residual",
    "glu silu",
    "rmsnorm+glu gelu",
];

/// The rows launched on their own: (first, count).
const ALONE: [(usize, usize); 2] = [(5, 1), (5, 13)];

/// Whether the streamed kernel serves both one-token products (plain and gate + up) of a
/// `rows x k` weight in `format` on `dev` when forced (the tests' shorthand).
#[cfg(test)]
fn streamed(format: QuantFormat, rows: usize, k: usize, dev: &DeviceFacts) -> bool {
    streamed_epilogues(format, rows, k, dev) == EPILOGUES.len()
}

/// How many of [`EPILOGUES`] (the first ones) the streamed kernel serves for a `rows x k`
/// weight in `format` on `dev` when forced: all of them where it serves both products, the
/// plain ones (all but the last 2) where it serves the plain product only (BF16 at
/// k = 14336), none where it does not serve the plain product.
fn streamed_epilogues(format: QuantFormat, rows: usize, k: usize, dev: &DeviceFacts) -> usize {
    let wr = |c: Result<MatvecKernel, _>| matches!(c, Ok(MatvecKernel::Wr { .. }));
    if !wr(select::choose_matvec(format, rows, k, 1, dev, Some(true))) {
        0
    } else if wr(select::choose_matvec_glu(
        format,
        rows,
        k,
        1,
        dev,
        Some(true),
    )) {
        EPILOGUES.len()
    } else {
        EPILOGUES.len() - 2
    }
}

/// The streamed-kernel cases (an error becomes a failing line).
pub fn run_all(gpu: &Gpu, rng: &mut Rng, lines: &mut Vec<CheckLine>) {
    let dev = gpu.facts();
    for format in select::MV_WR_FORMATS {
        for (rows, k) in SHAPES {
            if streamed_epilogues(format, rows, k, &dev) == 0 {
                continue;
            }
            let name = format!("{format} rows={rows} k={k}");
            Shape::new(gpu, format, rows, k, &name).run(rng, lines, "fusion", cases_of);
        }
    }
}

/// One launch of each epilogue of [`EPILOGUES`] on `ntok` tokens `x` with residual input
/// `res` (`ntok` x rows), the kernels chosen with `opts`: the outputs and the kernels.
pub(super) fn run(
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
    // (bias, norm, residual)
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

/// The outputs and kernels of a [`run`] with a kernel forced (`what`, the kernels `forced`
/// accepts), which must have served every launch.
pub(super) fn served_by(
    (outs, kernels): (Vec<Vec<f32>>, Vec<MatvecKernel>),
    forced: fn(&MatvecKernel) -> bool,
    what: &str,
) -> Result<(Vec<Vec<f32>>, Vec<MatvecKernel>), String> {
    if let Some(c) = kernels.iter().find(|c| !forced(c)) {
        return Err(format!("the {what} kernel was not chosen ({c})"));
    }
    Ok((outs, kernels))
}

/// [`run`] with the streamed kernel forced (on `grid` blocks, or the default grid), which
/// must have served the first `n` launches (the epilogues of [`streamed_epilogues`]); the
/// outputs and kernels of those.
fn run_streamed(
    gpu: &Gpu,
    inp: &ProductInputs,
    x: &[f32],
    res: &[f32],
    grid: Option<u32>,
    n: usize,
) -> Result<(Vec<Vec<f32>>, Vec<MatvecKernel>), String> {
    let opts = MatvecOpts {
        wr: Some(true),
        wr_grid: grid,
        qkv: None,
        wrt: false,
    };
    let (mut outs, mut kernels) = run(gpu, inp, x, res, 1, opts)?;
    outs.truncate(n);
    kernels.truncate(n);
    let streamed = |c: &MatvecKernel| matches!(c, MatvecKernel::Wr { .. });
    served_by((outs, kernels), streamed, "streamed")
}

fn cases_of(s: Shape, rng: &mut Rng, lines: &mut Vec<CheckLine>) -> Result<(), String> {
    let (gpu, format, rows, k, name) = s.parts();
    let case = ProductCase::random(gpu, rng, format, rows, k, 1)?;
    let ne = streamed_epilogues(format, rows, k, &gpu.facts());
    let (wr, wk) = run_streamed(gpu, &case.dev, &case.x, &case.res, None, ne)?;
    let today_opts = MatvecOpts {
        wr: Some(false),
        wr_grid: None,
        qkv: None,
        wrt: false,
    };
    let (today, tk) = run(gpu, &case.dev, &case.x, &case.res, 1, today_opts)?;
    if let Some(c) = tk.iter().find(|c| matches!(c, MatvecKernel::Wr { .. })) {
        return Err(format!(
            "the streamed kernel was chosen with wr = Some(false) ({c})"
        ));
    }
    for (i, e) in EPILOGUES.iter().enumerate().take(ne) {
        lines.push(compare_f32(
            "fusion",
            format!(
                "matvec {name} {e}: streamed == today's [{} vs {}]",
                wk[i], tk[i]
            ),
            &wr[i],
            &today[i],
        ));
    }
    let want = cpu::matvec(format, &case.w, rows, k, &case.x, 1, None).map_err(e2s)?;
    let scale = dot_scales(format, &case.w, rows, k, &case.x, 1, None)?;
    lines.push(compare_f32_scaled(
        "matvec",
        format!("{name} [{}]", wk[0]),
        &wr[0],
        &want,
        &scale,
    ));
    let all = wr.concat();
    for g in [1, 7] {
        let (o, _) = run_streamed(gpu, &case.dev, &case.x, &case.res, Some(g), ne)?;
        lines.push(compare_f32(
            "batch_invariance",
            format!("matvec {name} streamed: a grid of {g} == the default grid, {ne} epilogues"),
            &o.concat(),
            &all,
        ));
    }
    // Rows a..a+n as a matrix of their own (the host bytes are GGUF rows, repacked at upload).
    let row_bytes = format.bytes_for(k).map_err(e2s)?;
    let norm_w = gpu.download(&case.dev.norm_w).map_err(e2s)?;
    for (a, n) in ALONE {
        let sub = |w: &[u8]| w[a * row_bytes..(a + n) * row_bytes].to_vec();
        let inp = ProductInputs {
            w: DeviceWeight::upload(gpu, format, n, k, &sub(&case.w)).map_err(e2s)?,
            wu: DeviceWeight::upload(gpu, format, n, k, &sub(&case.wu)).map_err(e2s)?,
            bias: gpu.upload(&case.bias[a..a + n]).map_err(e2s)?,
            norm_w: gpu.upload(&norm_w).map_err(e2s)?,
            rows: n,
            k,
        };
        let (o, _) = run_streamed(gpu, &inp, &case.x, &case.res[a..a + n], None, ne)?;
        let among: Vec<f32> = wr.iter().flat_map(|e| e[a..a + n].to_vec()).collect();
        lines.push(compare_f32(
            "batch_invariance",
            format!(
                "matvec {name} streamed: rows {a}..{} alone == among {rows}, {ne} epilogues",
                a + n,
            ),
            &o.concat(),
            &among,
        ));
    }
    Ok(())
}

/// The H200's facts for the selection tests of the streamed cases (here and in qkv.rs).
#[cfg(test)]
pub(super) const H200: DeviceFacts = DeviceFacts {
    compute_capability: (9, 0),
    sm_count: 132,
};

/// The matvec family's entry points that `keep` keeps (the selection tests' "every entry
/// point is reached").
#[cfg(test)]
pub(super) fn matvec_entries(keep: impl Fn(&str) -> bool) -> std::collections::BTreeSet<String> {
    engine::cuda::sources::Family::Matvec
        .entry_points()
        .into_iter()
        .filter(|e| keep(e))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn the_shapes_reach_every_streamed_entry_point() {
        let h200 = H200;
        let mut seen = BTreeSet::new();
        for f in select::MV_WR_FORMATS {
            for (rows, k) in SHAPES {
                for c in [
                    select::choose_matvec(f, rows, k, 1, &h200, Some(true)),
                    select::choose_matvec_glu(f, rows, k, 1, &h200, Some(true)),
                ] {
                    if let Ok(c @ MatvecKernel::Wr { .. }) = c {
                        seen.insert(c.entry());
                    }
                }
            }
        }
        let all = matvec_entries(|e| {
            select::is_matvec_wr_entry(e) && !e.contains("_seg") && !e.contains("_wrt")
        });
        assert_eq!(seen, all);
        // Partial last row groups (4 rows per warp), rows alone that fit every shape, and
        // a shape with more row groups than the default grid's warps (2 blocks x 132 SMs).
        assert!(SHAPES.iter().all(|(rows, _)| rows % 4 != 0));
        for (rows, _) in SHAPES {
            assert!(ALONE.iter().all(|(a, n)| a + n <= rows));
        }
        assert!(
            SHAPES
                .iter()
                .any(|(rows, _)| rows.div_ceil(4) > 2 * 132 * 8)
        );
        // Streamed shapes only where the kernel runs.
        let a100 = DeviceFacts {
            compute_capability: (8, 0),
            sm_count: 108,
        };
        assert!(!streamed(QuantFormat::Q4_0, 67, 1024, &a100));
        assert!(streamed(QuantFormat::Q4_0, 37, 14336, &h200));
        assert!(!streamed(QuantFormat::Q8_0, 37, 14336, &h200));
        assert_eq!(streamed_epilogues(QuantFormat::Q8_0, 37, 14336, &h200), 0);
        // BF16: every shape, the plain epilogues only at k = 14336 (its 1-row ring; no gate +
        // up ring fits there).
        let bf = QuantFormat::BF16;
        for (rows, k) in SHAPES {
            let want = if k == 14336 {
                EPILOGUES.len() - 2
            } else {
                EPILOGUES.len()
            };
            assert_eq!(streamed_epilogues(bf, rows, k, &h200), want, "{rows} {k}");
        }
        assert!(
            EPILOGUES[EPILOGUES.len() - 2..]
                .iter()
                .all(|e| e.contains("glu"))
        );
        assert!(
            EPILOGUES[..EPILOGUES.len() - 2]
                .iter()
                .all(|e| !e.contains("glu"))
        );
    }
}
