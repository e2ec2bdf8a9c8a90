//! The decode products on tensor cores (`kernels/mmv.cu`), behind `ASSAY_MMV=1` (default
//! off: the matvec keeps main's bits).
//!
//! With the switch on, every body matrix product of a Q4_0 / Q8_0 / BF16 / Q4_K weight
//! ([`select::MMV_FORMATS`]) outside the GEMM prompt pass runs as `gemm_stage_x` (x, with
//! the unit's folded RMSNorm, as f16 hi + lo; for BF16 `gemm_stage_x_bf16`, three bf16
//! parts: `ops::gemm_stage_x_for`) then `mmv` / `mmv_glu`: the one-token step (graphed and
//! eager), the rows
//! of `forward` (prompt rows on the row path, verification) and the batched step, through
//! the three hooks of the op interpreter (`exec.rs`: fused units, k + v pairs, lone
//! matmuls). The k split of `mmv.cu` depends on the shape only, so a row's bits are the
//! same alone or among up to 64, and the exactness contract (batched == verification ==
//! one-token, per row) holds in this mode as in the matvec one. The head (the output
//! matrix, Q6_K in the usual checkpoints) stays on the matvec in every path, so the
//! one-token head and the rows' head agree. Other formats keep the matvec (per unit: in a
//! Q4_K_M checkpoint the Q6_K v / down products stay on it; a k + v pair or a gate + up
//! pair of two formats keeps the matvec for both).
//!
//! The staging buffer and the split products' scratch are allocated when the decoder is
//! built (not during a graph capture); the switch is read then too.

use super::exec::{get, matrix, put, take, vector, w_ref};
use super::{CudaDecoder, fuse, model_err};
use crate::arch::{self, BufId, WeightId};
use crate::cuda::cudarc::driver::DevicePtr;
use crate::cuda::ops::{self, Activation, GemmX, MmvScratch, XStaging};
use crate::cuda::select::{self, MmvKernel};
use crate::cuda::sources::consts::MMV_N;
use crate::cuda::{CudaError, Gpu, shape_err};
use std::collections::HashMap;

/// `ASSAY_MMV`: `1` routes the decode products to `mmv.cu` (a one-token product stages x
/// in the kernel: `_x1`, one launch), `staged` the same with every product staged by
/// `gemm_stage_x` (the same bits: to time the two); unset, empty or `0` keeps the matvec.
/// Anything else is an error (a typo must not silently measure the other path). Returns
/// (on, one-token products staged in the kernel).
pub fn mmv_switch_from(v: Option<&str>) -> Result<(bool, bool), String> {
    match v.map(str::trim) {
        None | Some("") | Some("0") => Ok((false, false)),
        Some("1") => Ok((true, true)),
        Some("staged") => Ok((true, false)),
        Some(o) => Err(format!("ASSAY_MMV={o:?}: expected 0, 1 or staged")),
    }
}

/// A decoder's tensor-core decode state.
pub(super) struct MmvState {
    pub(super) on: bool,
    /// One-token products stage x in the kernel (`_x1`).
    x1: bool,
    /// Ops of the body (ops at or past this index are the head's).
    n_body: usize,
    /// The staging and split scratch (swapped with the batch workspace's while a batched
    /// step runs: `batch/ws.rs`).
    pub(super) x: Option<GemmX>,
    pub(super) scratch: Option<MmvScratch>,
    /// The products run so far (for receipts), by weight name.
    pub(super) choices: HashMap<String, MmvKernel>,
}

impl MmvState {
    pub(super) fn from_env(gpu: &Gpu, k_max: usize, n_body: usize) -> Result<Self, CudaError> {
        let v = std::env::var("ASSAY_MMV").ok();
        let (on, x1) = mmv_switch_from(v.as_deref()).map_err(|e| shape_err("decoder", e))?;
        // The tuning arms of mmv.cu (sources::Family::defines reads them): a typo errors here.
        if let Err(e) = crate::cuda::sources::mmv_env_defines() {
            return Err(shape_err("decoder", e.clone()));
        }
        Self::new(gpu, k_max, n_body, on, x1)
    }

    /// The state with the switch given (`on` is ignored on a device without the MMA; `x1`:
    /// one-token products stage x in the kernel).
    pub(super) fn new(
        gpu: &Gpu,
        k_max: usize,
        n_body: usize,
        on: bool,
        x1: bool,
    ) -> Result<Self, CudaError> {
        let cc = gpu.info().compute_capability;
        // Off on a device without the MMA (the matvec then serves every format).
        let on = on && cc.0 >= 8;
        let (x, scratch) = if on {
            (Some(GemmX::new(gpu, k_max)?), Some(MmvScratch::new(gpu)?))
        } else {
            (None, None)
        };
        Ok(MmvState {
            on,
            x1,
            n_body,
            x,
            scratch,
            choices: HashMap::new(),
        })
    }
}

impl CudaDecoder {
    /// Whether the decode products run on `mmv.cu` (`ASSAY_MMV=1` when the decoder was built).
    pub fn mmv_on(&self) -> bool {
        self.mmv.on
    }

    /// Choose this decoder's decode products: `true` = `mmv.cu` (what `ASSAY_MMV=1` sets
    /// when a decoder is built), `false` = the matvec. Only before the decoder's first
    /// token (its KV, a captured step and its receipts' kernel choices belong to one mode);
    /// decoders made by [`CudaDecoder::share`] afterwards take the same mode. A no-op on a
    /// device without the MMA when asked for `true` (`mmv_on` then says `false`).
    pub fn set_mmv(&mut self, on: bool) -> Result<(), CudaError> {
        if self.mmv.on == on {
            return Ok(());
        }
        if self.len > 0 || self.graph.is_some() {
            return Err(shape_err(
                "decoder",
                "the decode products' mode is chosen before the first token",
            ));
        }
        let k_max = self.mats.iter().map(|m| m.cols).max().unwrap_or(1);
        // `true` is `ASSAY_MMV=1`'s mode (one-token products staged in the kernel).
        self.mmv = MmvState::new(&self.gpu, k_max, self.program.body.len(), on, true)?;
        Ok(())
    }

    /// The `ASSAY_MMV` mode this decoder runs: `off`, `on` (one-token products staged in
    /// the kernel) or `staged`.
    pub fn mmv_mode(&self) -> &'static str {
        match (self.mmv.on, self.mmv.x1) {
            (false, _) => "off",
            (true, true) => "on",
            (true, false) => "staged",
        }
    }

    /// Whether weight `w` goes to `mmv.cu`.
    pub(super) fn mmv_takes(&self, w: WeightId) -> Result<bool, CudaError> {
        if !self.mmv.on {
            return Ok(false);
        }
        let fmt = w_ref(&self.mats, matrix(&self.weights, w)?)?.format;
        Ok(select::mmv_supported(
            fmt,
            self.gpu.info().compute_capability,
        ))
    }

    /// Run fused unit `f` for `n` rows on `mmv.cu`; `Ok(false)` (nothing queued) when the
    /// switch is off or the unit's format has no mmv.
    pub(super) fn mmv_fused(&mut self, f: fuse::Fused, n: usize) -> Result<bool, CudaError> {
        let (x, first, norm) = match f {
            fuse::Fused::Glu {
                x,
                gate_w,
                up_w,
                norm,
                ..
            } => {
                // Gate + up run in one launch of one format: a pair of two formats (a
                // mixed quantisation, e.g. Q4_K gate with a Q5_K up) keeps the matvec.
                let fmt = |w| -> Result<_, CudaError> {
                    Ok(w_ref(&self.mats, matrix(&self.weights, w)?)?.format)
                };
                if fmt(gate_w)? != fmt(up_w)? {
                    return Ok(false);
                }
                (x, gate_w, norm)
            }
            fuse::Fused::Residual {
                x, weight, norm, ..
            }
            | fuse::Fused::Plain {
                x, weight, norm, ..
            } => (x, weight, norm),
            fuse::Fused::RopeAttn { .. } => return Ok(false),
        };
        if !self.mmv_takes(first)? {
            return Ok(false);
        }
        self.mmv_run(x, norm, n, &[f])?;
        Ok(true)
    }

    /// Run k + v ([`fuse::Pair`]) for `n` rows on `mmv.cu` (one staging for both).
    pub(super) fn mmv_pair(&mut self, pr: fuse::Pair, n: usize) -> Result<bool, CudaError> {
        if !(self.mmv_takes(pr.a.0)? && self.mmv_takes(pr.b.0)?) {
            return Ok(false);
        }
        let unit = |(weight, bias, out): (WeightId, Option<WeightId>, BufId)| fuse::Fused::Plain {
            x: pr.x,
            weight,
            bias,
            out,
            norm: pr.norm,
        };
        self.mmv_run(pr.x, pr.norm, n, &[unit(pr.a), unit(pr.b)])?;
        Ok(true)
    }

    /// A lone matmul of the body (op `idx`) for `n` rows on `mmv.cu`; `Ok(false)` for the
    /// head's ops, in place products, or formats without mmv.
    pub(super) fn mmv_matmul(
        &mut self,
        idx: usize,
        head: bool,
        (x, weight, bias, out): (BufId, WeightId, Option<WeightId>, BufId),
        n: usize,
    ) -> Result<bool, CudaError> {
        if head || idx >= self.mmv.n_body || x == out || !self.mmv_takes(weight)? {
            return Ok(false);
        }
        let f = fuse::Fused::Plain {
            x,
            weight,
            bias,
            out,
            norm: None,
        };
        self.mmv_run(x, None, n, &[f])?;
        Ok(true)
    }

    /// Stage x (normalised by `norm`) once per slice of [`MMV_N`] rows, then run `units`
    /// (all reading that x) on it.
    fn mmv_run(
        &mut self,
        x: BufId,
        norm: Option<fuse::NormFold>,
        n: usize,
        units: &[fuse::Fused],
    ) -> Result<(), CudaError> {
        let (Some(mut xs), Some(mut sc)) = (self.mmv.x.take(), self.mmv.scratch.take()) else {
            return Err(model_err("mmv buffers missing"));
        };
        let r = self.mmv_slices(x, norm, n, units, &mut xs, &mut sc);
        self.mmv.x = Some(xs);
        self.mmv.scratch = Some(sc);
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn mmv_slices(
        &mut self,
        x: BufId,
        norm: Option<fuse::NormFold>,
        n: usize,
        units: &[fuse::Fused],
        xs: &mut GemmX,
        sc: &mut MmvScratch,
    ) -> Result<(), CudaError> {
        let CudaDecoder {
            gpu,
            program,
            mats,
            weights,
            bufs,
            mmv,
            ..
        } = self;
        let gpu = &**gpu;
        let width = |b: BufId| program.buffer(b).width;
        let norm_in = match norm {
            Some(nf) => Some(ops::NormIn {
                weight: vector(weights, nf.weight)?,
                eps: nf.eps,
                w_offset: 0.0,
            }),
            None => None,
        };
        let wx = width(x);
        // Each unit's format (the first matrix's: a gate + up pair of two formats is
        // refused by `ops::mmv_glu`); it picks the staging and the `_x1` row limit.
        let mut formats = Vec::with_capacity(units.len());
        for f in units {
            let w = match *f {
                fuse::Fused::Glu { gate_w: w, .. }
                | fuse::Fused::Residual { weight: w, .. }
                | fuse::Fused::Plain { weight: w, .. } => w,
                fuse::Fused::RopeAttn { .. } => {
                    return Err(model_err("rope + attention is not an mmv unit"));
                }
            };
            let m = w_ref(mats, matrix(weights, w)?)?;
            if m.cols != wx {
                return Err(model_err("mmv: the input's width is not the matrix's k"));
            }
            formats.push(m.format);
        }
        let x1_on = mmv.x1;
        let x1_fits = |fmt| x1_on && wx <= select::mmv_x1_max_k(fmt);
        for a in (0..n).step_by(MMV_N) {
            let b = (a + MMV_N).min(n);
            let one_row = b - a == 1;
            // One token of k + v: one launch for both (`_pair_x1`, the bits of two `_x1`),
            // with MMV_PAIR (sources::consts, ASSAY_MMV_DEFS).
            static PAIR: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
            let pair = *PAIR.get_or_init(|| crate::cuda::sources::mmv_define_value("MMV_PAIR") > 0);
            if one_row
                && pair
                && let [
                    fuse::Fused::Plain {
                        weight: wa,
                        bias: ba,
                        out: oa,
                        ..
                    },
                    fuse::Fused::Plain {
                        weight: wb,
                        bias: bb,
                        out: ob,
                        ..
                    },
                ] = *units
                && oa != ob
            {
                let (ma, mb) = (
                    w_ref(mats, matrix(weights, wa)?)?,
                    w_ref(mats, matrix(weights, wb)?)?,
                );
                if ma.format == mb.format
                    && ma.rows == mb.rows
                    && ma.cols == mb.cols
                    && x1_fits(ma.format)
                {
                    let bias = |bi: Option<WeightId>| -> Result<_, CudaError> {
                        Ok(match bi {
                            Some(bi) => Some(vector(weights, bi)? as &dyn DevicePtr<f32>),
                            None => None,
                        })
                    };
                    let (ba, bb) = (bias(ba)?, bias(bb)?);
                    let mut ya = take(bufs, oa)?;
                    let r = match take(bufs, ob) {
                        Ok(mut yb) => {
                            let xa = get(bufs, x)?.slice(a * wx..b * wx);
                            let (wa_, wb_) = (width(oa), width(ob));
                            let r = ops::mmv_pair_x1(
                                gpu,
                                ma,
                                mb,
                                &xa,
                                norm_in,
                                (ba, bb),
                                &mut ya.slice.slice_mut(a * wa_..b * wa_),
                                &mut yb.slice.slice_mut(a * wb_..b * wb_),
                                sc,
                            );
                            put(bufs, ob, yb);
                            r
                        }
                        Err(e) => Err(e),
                    };
                    put(bufs, oa, ya);
                    let choice = r?;
                    super::exec::note_choice(&mut mmv.choices, program, [wa, wb], choice);
                    continue;
                }
            }
            let plan = slice_plan(x1_on, b - a, wx, &formats);
            for (f, &(one, stage)) in units.iter().zip(&plan) {
                if let Some(fmt) = stage {
                    ops::gemm_stage_x_for(
                        gpu,
                        fmt,
                        &get(bufs, x)?.slice(a * wx..b * wx),
                        b - a,
                        wx,
                        norm_in,
                        xs,
                    )?;
                }
                let (out, used) = match *f {
                    fuse::Fused::Glu {
                        gate_w, up_w, out, ..
                    } => (out, [Some(gate_w), Some(up_w)]),
                    fuse::Fused::Residual { weight, out, .. }
                    | fuse::Fused::Plain { weight, out, .. } => (out, [Some(weight), None]),
                    fuse::Fused::RopeAttn { .. } => {
                        return Err(model_err("rope + attention is not an mmv unit"));
                    }
                };
                let wy = width(out);
                let mut o = take(bufs, out)?;
                let r = (|| {
                    let y = &mut o.slice.slice_mut(a * wy..b * wy);
                    let xa = get(bufs, x)?.slice(a * wx..b * wx);
                    match *f {
                        fuse::Fused::Glu {
                            gate_w, up_w, act, ..
                        } => {
                            let wg = w_ref(mats, matrix(weights, gate_w)?)?;
                            let wu = w_ref(mats, matrix(weights, up_w)?)?;
                            let act = match act {
                                arch::Activation::Silu => Activation::Silu,
                                arch::Activation::GeluTanh => Activation::GeluTanh,
                            };
                            if one {
                                ops::mmv_glu_x1(gpu, wg, wu, &xa, norm_in, act, y, sc)
                            } else {
                                ops::mmv_glu(gpu, wg, wu, xs, b - a, act, y, sc)
                            }
                        }
                        fuse::Fused::Residual { weight, bias, .. }
                        | fuse::Fused::Plain { weight, bias, .. } => {
                            let w = w_ref(mats, matrix(weights, weight)?)?;
                            let bias = match bias {
                                Some(bi) => Some(vector(weights, bi)? as &dyn DevicePtr<f32>),
                                None => None,
                            };
                            let residual = matches!(f, fuse::Fused::Residual { .. });
                            if one {
                                ops::mmv_x1(gpu, w, &xa, norm_in, bias, residual, y, sc)
                            } else {
                                ops::mmv(gpu, w, xs, b - a, bias, residual, y, sc)
                            }
                        }
                        fuse::Fused::RopeAttn { .. } => {
                            Err(model_err("rope + attention is not an mmv unit"))
                        }
                    }
                })();
                put(bufs, out, o);
                let choice = r?;
                super::exec::note_choice(
                    &mut mmv.choices,
                    program,
                    used.into_iter().flatten(),
                    choice,
                );
            }
        }
        Ok(())
    }
}

/// How each unit of a slice of `rows` token rows (of `wx` values) runs, the units' weight
/// formats in order: (one-token entry point `_x1`, which stages x itself; `Some(format)`:
/// stage x as `format`'s product multiplies it (`gemm_stage_x_for`) before the unit's
/// product, `None` when x already lies staged as it needs or it stages x itself). One
/// token takes `_x1` where the row fits its format's staging ([`select::mmv_x1_max_k`];
/// `x1_on`: `ASSAY_MMV=1`, not `staged`), the same bits as the staged `_nt1`; the others
/// share one staging per run of units of one kind (each product refuses x staged for
/// another format), so Q4_0 / Q8_0 units stage once, as before.
fn slice_plan(
    x1_on: bool,
    rows: usize,
    wx: usize,
    formats: &[crate::quant::QuantFormat],
) -> Vec<(bool, Option<crate::quant::QuantFormat>)> {
    let mut staged: Option<XStaging> = None;
    formats
        .iter()
        .map(|&fmt| {
            let one = x1_on && rows == 1 && wx <= select::mmv_x1_max_k(fmt);
            let want = XStaging::of(fmt);
            if one || staged == Some(want) {
                (one, None)
            } else {
                staged = Some(want);
                (false, Some(fmt))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::QuantFormat::{BF16, Q4_0, Q4_K, Q8_0};

    #[test]
    fn slices_stage_once_per_kind_and_one_token_stages_itself() {
        // Many rows: one staging for the units of a kind, in order.
        assert_eq!(
            slice_plan(true, 9, 4096, &[Q4_0, Q4_0]),
            [(false, Some(Q4_0)), (false, None)]
        );
        assert_eq!(
            slice_plan(true, 64, 4096, &[BF16, BF16]),
            [(false, Some(BF16)), (false, None)]
        );
        assert_eq!(
            slice_plan(false, 2, 4096, &[Q8_0, BF16, BF16, Q4_0]),
            [
                (false, Some(Q8_0)),
                (false, Some(BF16)),
                (false, None),
                (false, Some(Q4_0))
            ]
        );
        // One token: `_x1` where the row fits its format's staging.
        assert_eq!(
            slice_plan(true, 1, 4096, &[BF16, Q8_0]),
            [(true, None), (true, None)]
        );
        assert_eq!(slice_plan(true, 1, 14336, &[BF16]), [(true, None)]);
        let long = select::MMV_X1_BF16_MAX_K + 32;
        assert!(long <= select::MMV_X1_MAX_K);
        assert_eq!(
            slice_plan(true, 1, long, &[BF16, Q4_0]),
            [(false, Some(BF16)), (true, None)]
        );
        // Q4_K multiplies the f16 staging of Q4_0 / Q8_0: one staging for a run of them;
        // one token of Qwen2-7B's down product (18944) stages itself.
        assert_eq!(
            slice_plan(true, 9, 4096, &[Q4_K, Q4_0, Q8_0, BF16, Q4_K]),
            [
                (false, Some(Q4_K)),
                (false, None),
                (false, None),
                (false, Some(BF16)),
                (false, Some(Q4_K))
            ]
        );
        assert_eq!(
            slice_plan(true, 1, 18944, &[Q4_K, BF16]),
            [(true, None), (false, Some(BF16))]
        );
        // `staged` mode: every product on the staged x.
        assert_eq!(
            slice_plan(false, 1, 4096, &[BF16, BF16]),
            [(false, Some(BF16)), (false, None)]
        );
    }

    #[test]
    fn switch_parses_strictly() {
        assert_eq!(mmv_switch_from(None), Ok((false, false)));
        assert_eq!(mmv_switch_from(Some("")), Ok((false, false)));
        assert_eq!(mmv_switch_from(Some("0")), Ok((false, false)));
        assert_eq!(mmv_switch_from(Some("1")), Ok((true, true)));
        assert_eq!(mmv_switch_from(Some(" 1 ")), Ok((true, true)));
        assert_eq!(mmv_switch_from(Some("staged")), Ok((true, false)));
        assert!(mmv_switch_from(Some("yes")).is_err());
        assert!(mmv_switch_from(Some("2")).is_err());
    }
}
