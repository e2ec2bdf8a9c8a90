//! kernel-check's cases of q, k and v in one segmented streamed launch
//! (`matvec_<fmt>_seg3_wr_r<R>_d<D>`, [`MatvecKernel::WrSegs`], `ops::matvec_segs`), on the
//! devices that run it (sm_90; no lines elsewhere). For each format of
//! [`select::MV_WR_FORMATS`] (forced: `MatvecOpts::qkv = Some(true)`) and each shape of
//! [`SHAPES`] where its requirements hold, every epilogue of [`EPILOGUES`]:
//! - each matrix's rows of the segmented launch against the same matrix in its own launch,
//!   bit for bit: today's one-token entry points (`wr = Some(false)`; k and v as today's
//!   two-matrix pair where they have one shape) and the plain streamed kernel
//!   (`wr = Some(true)`), a line each (`fusion`);
//! - the segmented launch on grids of 1 and 7 blocks against the default grid
//!   (`batch_invariance`: warps streaming row groups of several matrices).
//!
//! The shapes are Llama-3.1-8B's q / k / v (4096 + 1024 + 1024 rows, k = 4096) and scaled-down
//! ones with k = 1024 and 2048 whose row counts are not multiples of 4 (row groups padded
//! per matrix), one of them with a matrix of a single row; k = 12288 takes Q4_0's shallower
//! ring and BF16's 1-row ring (no Q8_0 ring fits beside its x: Q4_0 and BF16 only).

use super::cases::{Shape, e2s, poison, rand_vec, random_weights};
use super::{CheckLine, Rng, compare_f32};
use engine::cuda::cudarc::driver::{CudaSlice, DevicePtr};
use engine::cuda::ops::{self, MatvecOpts};
use engine::cuda::select::{self, DeviceFacts, MatvecKernel};
use engine::cuda::{DeviceWeight, Gpu};
use engine::quant::QuantFormat;

/// ([q rows, k rows, v rows], k) of the cases.
pub(super) const SHAPES: [([usize; 3], usize); 6] = [
    ([512, 128, 128], 1024),
    ([513, 130, 127], 1024),
    ([512, 128, 128], 2048),
    ([515, 129, 1], 2048),
    ([4096, 1024, 1024], 4096),
    ([67, 5, 3], 12288),
];

/// The epilogues compared: (name, biases, folded norm's w_offset).
const EPILOGUES: [(&str, bool, Option<f32>); 4] = [
    ("plain", false, None),
    ("+bias", true, None),
    ("rmsnorm", false, Some(0.0)),
    ("rmsnorm w_offset=1 +bias", true, Some(1.0)),
];

/// Names of the three matrices, in launch order.
const MATS: [&str; 3] = ["q", "k", "v"];

/// Whether the segmented kernel serves `rows` x `k` matrices in `format` on `dev` when forced.
fn segmented(format: QuantFormat, rows: &[usize; 3], k: usize, dev: &DeviceFacts) -> bool {
    matches!(
        select::choose_matvec_segs(format, rows, k, 1, dev, Some(true), None),
        Ok(Some(MatvecKernel::WrSegs { .. }))
    )
}

/// The segmented-launch cases (an error becomes a failing line).
pub fn run_all(gpu: &Gpu, rng: &mut Rng, lines: &mut Vec<CheckLine>) {
    let dev = gpu.facts();
    for format in select::MV_WR_FORMATS {
        for (rows, k) in SHAPES {
            if !segmented(format, &rows, k, &dev) {
                continue;
            }
            let name = format!(
                "{format} q/k/v rows={}+{}+{} k={k}",
                rows[0], rows[1], rows[2]
            );
            Shape::new(gpu, format, rows, k, &name).run(rng, lines, "fusion", cases_of);
        }
    }
}

/// The device inputs of one case.
struct Inputs {
    w: Vec<DeviceWeight>,
    bias: Vec<CudaSlice<f32>>,
    x: CudaSlice<f32>,
    norm_w: CudaSlice<f32>,
    rows: [usize; 3],
}

type Dp<'a> = &'a dyn DevicePtr<f32>;

/// The three matrices' outputs of each epilogue of [`EPILOGUES`].
type Outs = Vec<[Vec<f32>; 3]>;

impl Inputs {
    /// The three outputs (q, k, v rows), poisoned.
    fn outputs(&self, gpu: &Gpu) -> Result<Vec<CudaSlice<f32>>, String> {
        self.rows
            .iter()
            .map(|&r| poison(gpu, r))
            .collect::<Result<_, _>>()
            .map_err(e2s)
    }

    fn biases(&self, on: bool) -> [Option<Dp<'_>>; 3] {
        [0, 1, 2].map(|s| on.then_some(&self.bias[s] as Dp))
    }
    fn norm(&self, w_offset: Option<f32>) -> Option<ops::NormIn<'_>> {
        w_offset.map(|w_offset| ops::NormIn {
            weight: &self.norm_w,
            eps: 1e-5,
            w_offset,
        })
    }
}

/// Every epilogue of [`EPILOGUES`] as one segmented launch (`opts`): the outputs of the
/// three matrices per epilogue, and the kernel.
fn run_segs(gpu: &Gpu, inp: &Inputs, opts: MatvecOpts) -> Result<(Outs, MatvecKernel), String> {
    let mut outs = Vec::new();
    let mut kernel = None;
    for (_, b, n) in EPILOGUES {
        let mut y = inp.outputs(gpu)?;
        let [y0, y1, y2] = &mut y[..] else {
            return Err("three outputs".into());
        };
        let c = ops::matvec_segs(
            gpu,
            [&inp.w[0], &inp.w[1], &inp.w[2]],
            &inp.x,
            1,
            inp.biases(b),
            inp.norm(n),
            opts,
            [y0, y1, y2],
        )
        .map_err(e2s)?;
        let Some(c @ MatvecKernel::WrSegs { .. }) = c else {
            return Err("the segmented streamed kernel was not chosen".into());
        };
        kernel = Some(c);
        let d = |s: usize| gpu.download(&y[s]).map_err(e2s);
        outs.push([d(0)?, d(1)?, d(2)?]);
    }
    Ok((outs, kernel.ok_or("no epilogue")?))
}

/// Every epilogue of [`EPILOGUES`] as separate launches chosen with `wr`: q alone, k and v
/// as the two-matrix launch when they have one shape (as the decoder runs them today), else
/// alone. The outputs per epilogue and the kernels (q's, then k's).
fn run_separate(
    gpu: &Gpu,
    inp: &Inputs,
    wr: Option<bool>,
) -> Result<(Outs, [MatvecKernel; 2]), String> {
    let opts = MatvecOpts {
        wr,
        wr_grid: None,
        qkv: Some(false),
        wrt: false,
    };
    let mut outs = Vec::new();
    let mut kernels = None;
    for (_, b, n) in EPILOGUES {
        let bias = inp.biases(b);
        let mut y = inp.outputs(gpu)?;
        let [y0, y1, y2] = &mut y[..] else {
            return Err("three outputs".into());
        };
        let cq = ops::matvec_fused(
            gpu,
            &inp.w[0],
            &inp.x,
            1,
            bias[0],
            inp.norm(n),
            false,
            opts,
            y0,
        )
        .map_err(e2s)?;
        let ck = if inp.rows[1] == inp.rows[2] {
            ops::matvec_pair(
                gpu,
                &inp.w[1],
                &inp.w[2],
                &inp.x,
                1,
                bias[1],
                bias[2],
                inp.norm(n),
                opts,
                y1,
                y2,
            )
            .map_err(e2s)?
        } else {
            let c = ops::matvec_fused(
                gpu,
                &inp.w[1],
                &inp.x,
                1,
                bias[1],
                inp.norm(n),
                false,
                opts,
                y1,
            )
            .map_err(e2s)?;
            ops::matvec_fused(
                gpu,
                &inp.w[2],
                &inp.x,
                1,
                bias[2],
                inp.norm(n),
                false,
                opts,
                y2,
            )
            .map_err(e2s)?;
            c
        };
        kernels = Some([cq, ck]);
        let d = |s: usize| gpu.download(&y[s]).map_err(e2s);
        outs.push([d(0)?, d(1)?, d(2)?]);
    }
    Ok((outs, kernels.ok_or("no epilogue")?))
}

fn cases_of(s: Shape<[usize; 3]>, rng: &mut Rng, lines: &mut Vec<CheckLine>) -> Result<(), String> {
    let (gpu, format, rows, k, name) = s.parts();
    let (w, bias) = random_weights(gpu, rng, format, rows, k)?;
    let x = gpu.upload(&rand_vec(rng, k, 1.0)).map_err(e2s)?;
    let nw: Vec<f32> = (0..k).map(|_| 1.0 + 0.1 * rng.symmetric()).collect();
    let inp = Inputs {
        w,
        bias,
        x,
        norm_w: gpu.upload(&nw).map_err(e2s)?,
        rows,
    };
    let forced = |grid| MatvecOpts {
        wr: None,
        wr_grid: grid,
        qkv: Some(true),
        wrt: false,
    };
    let (seg, sk) = run_segs(gpu, &inp, forced(None))?;
    for (wr, what) in [(Some(false), "today's"), (Some(true), "streamed")] {
        let (sep, kernels) = run_separate(gpu, &inp, wr)?;
        let streamed = kernels
            .iter()
            .filter(|c| matches!(c, MatvecKernel::Wr { .. }))
            .count();
        if wr == Some(false) && streamed > 0 {
            return Err("the streamed kernel was chosen with wr = Some(false)".into());
        }
        for (e, (epi, _, _)) in EPILOGUES.iter().enumerate() {
            for (s, m) in MATS.iter().enumerate() {
                lines.push(compare_f32(
                    "fusion",
                    format!(
                        "matvec {name} {epi}: q/k/v in one streamed launch == separate \
                         launches ({what}), {m} [{sk} vs {}]",
                        kernels[usize::from(s > 0)]
                    ),
                    &seg[e][s],
                    &sep[e][s],
                ));
            }
        }
    }
    let all: Vec<f32> = seg.iter().flatten().flatten().copied().collect();
    for g in [1, 7] {
        let (o, _) = run_segs(gpu, &inp, forced(Some(g)))?;
        let got: Vec<f32> = o.iter().flatten().flatten().copied().collect();
        lines.push(compare_f32(
            "batch_invariance",
            format!(
                "matvec {name} q/k/v in one streamed launch: a grid of {g} == the default \
                 grid, {} epilogues",
                EPILOGUES.len()
            ),
            &got,
            &all,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel_check::wr::{H200, matvec_entries};
    use std::collections::BTreeSet;

    #[test]
    fn the_shapes_reach_every_segmented_entry_point() {
        let h200 = H200;
        let mut seen = BTreeSet::new();
        for f in select::MV_WR_FORMATS {
            for (rows, k) in SHAPES {
                if let Ok(Some(c)) =
                    select::choose_matvec_segs(f, &rows, k, 1, &h200, Some(true), None)
                {
                    seen.insert(c.entry());
                }
            }
        }
        // (The seg3rope entry points, rope_kv fused in: ropefuse.rs.)
        let all = matvec_entries(|e| e.contains("_seg3_"));
        assert_eq!(seen, all);
        // Every shape runs on the H200 for every format but the widest (not Q8_0); the
        // scaled-down ones have rows that are not multiples of 4, at k = 1024 and 2048.
        for f in select::MV_WR_FORMATS {
            for (rows, k) in SHAPES {
                let want = k < 12288 || f != QuantFormat::Q8_0;
                assert_eq!(segmented(f, &rows, k, &h200), want, "{f} {rows:?} {k}");
            }
        }
        for k in [1024, 2048] {
            assert!(
                SHAPES
                    .iter()
                    .any(|(r, kk)| *kk == k && r.iter().any(|n| n % 4 != 0))
            );
        }
        // Not on other devices.
        let a100 = DeviceFacts {
            compute_capability: (8, 0),
            sm_count: 108,
        };
        assert!(!segmented(QuantFormat::Q4_0, &SHAPES[0].0, 1024, &a100));
    }
}
