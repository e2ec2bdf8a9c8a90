//! The op interpreter of [`CudaDecoder`]: one body/head op (or one fused unit of
//! `fuse::plan`) to its kernel launches (the attention units, RoPE + KV store + split-KV
//! attention, are `decode/attention.rs`'s); plus the buffer/weight lookups the other
//! submodules share.

use super::super::cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};
use super::super::ops::{self, Activation};
use super::super::sources::consts::MV_LAUNCH_MAX_TOK;
use super::super::{CudaError, DeviceWeight};
use super::attention::style_of;
use super::{CudaDecoder, DevWeight, Feed, fuse, model_err};
use crate::arch::{self, BufId, Op, WeightId};
use std::collections::HashMap;

impl CudaDecoder {
    pub(super) fn run_op(
        &mut self,
        idx: usize,
        op: &Op,
        n: usize,
        head: bool,
        feed: Feed,
    ) -> Result<(), CudaError> {
        if let Op::Attention(spec) = op {
            if head {
                return Err(model_err("attention in the head is not supported"));
            }
            return self.attention(spec, n, feed);
        }
        // `ASSAY_MMV=1`: a body product on tensor cores (decode/mmv.rs).
        if let Op::MatMul {
            x,
            weight,
            bias,
            out,
        } = op
        {
            if self.mmv_matmul(idx, head, (*x, *weight, *bias, *out), n)? {
                return Ok(());
            }
        }
        let CudaDecoder {
            gpu,
            program,
            mats,
            weights,
            rope,
            bufs,
            head_bufs,
            tokens,
            pos,
            head_pos,
            step,
            choices,
            mv,
            ..
        } = self;
        let gpu = &**gpu;
        let width = |b: BufId| program.buffer(b).width;
        let (step_tok, step_pos) = (step.slice(0..1), step.slice(1..2));
        let (tokens, pos): (&dyn DevicePtr<i32>, &dyn DevicePtr<i32>) = match (feed, head) {
            (Feed::Step, _) => (&step_tok, &step_pos),
            (Feed::Rows, true) => (&*tokens, &*head_pos),
            (Feed::Rows, false) => (&*tokens, &*pos),
        };
        let bufs = if head { head_bufs } else { bufs };
        match op {
            Op::Embed { table, out, scale } => {
                let w = w_ref(mats, matrix(weights, *table)?)?;
                let mut o = take(bufs, *out)?;
                let r = ops::embed(gpu, w, tokens, n, *scale, &mut o.slice).map(|_| ());
                put(bufs, *out, o);
                r
            }
            Op::RmsNorm {
                x,
                weight,
                out,
                group,
                eps,
            } => {
                let wv = vector(weights, *weight)?;
                let group = (*group).max(1);
                let groups = n * width(*x) / group;
                let mut o = take(bufs, *out)?;
                let r = if x == out {
                    ops::rmsnorm_inplace(gpu, &mut o.slice, wv, groups, group, *eps, 0.0)
                } else {
                    ops::rmsnorm(
                        gpu,
                        get(bufs, *x)?,
                        wv,
                        &mut o.slice,
                        groups,
                        group,
                        *eps,
                        0.0,
                    )
                };
                put(bufs, *out, o);
                r
            }
            Op::MatMul {
                x,
                weight,
                bias,
                out,
            } => {
                let w = w_ref(mats, matrix(weights, *weight)?)?;
                let bias = match bias {
                    Some(b) => Some(vector(weights, *b)? as &dyn DevicePtr<f32>),
                    None => None,
                };
                if x == out {
                    return Err(model_err("matmul in place is not supported"));
                }
                let (wx, wy) = (width(*x), width(*out));
                let mut o = take(bufs, *out)?;
                let r = (|| {
                    let xb = get(bufs, *x)?;
                    let mut last = Err(model_err("no rows"));
                    for (a, b) in row_slices(n) {
                        last = Ok(ops::matvec_fused(
                            gpu,
                            w,
                            &xb.slice(a * wx..b * wx),
                            b - a,
                            bias,
                            None,
                            false,
                            *mv,
                            &mut o.slice.slice_mut(a * wy..b * wy),
                        )?);
                    }
                    last
                })();
                put(bufs, *out, o);
                let choice = r?;
                note_choice(choices, program, [*weight], choice);
                Ok(())
            }
            Op::Rope { x, rope: spec } => {
                let table = rope
                    .get(&idx)
                    .ok_or_else(|| model_err("rope table missing"))?;
                let style = style_of(spec.style);
                let mut o = take(bufs, *x)?;
                let r = ops::rope(
                    gpu,
                    &mut o.slice,
                    pos,
                    table,
                    n,
                    spec.n_heads,
                    spec.head_dim,
                    style,
                );
                put(bufs, *x, o);
                r
            }
            Op::Scale { x, factor } => {
                let len = n * width(*x);
                let mut o = take(bufs, *x)?;
                let r = ops::scale_inplace(gpu, &mut o.slice, *factor, len);
                put(bufs, *x, o);
                r
            }
            Op::Softcap { x, cap } => {
                let len = n * width(*x);
                let mut o = take(bufs, *x)?;
                let r = ops::softcap_inplace(gpu, &mut o.slice, *cap, len);
                put(bufs, *x, o);
                r
            }
            Op::Attention(_) => Err(model_err("unreachable: attention handled above")),
            Op::GatedAct { gate, up, out, act } => {
                let len = n * width(*out);
                let act = match act {
                    arch::Activation::Silu => Activation::Silu,
                    arch::Activation::GeluTanh => Activation::GeluTanh,
                };
                let mut o = take(bufs, *out)?;
                let r = if out == gate && out == up {
                    Err(model_err("gated activation of a buffer with itself"))
                } else if out == gate {
                    ops::gated_act_inplace(gpu, &mut o.slice, get(bufs, *up)?, true, len, act)
                } else if out == up {
                    ops::gated_act_inplace(gpu, &mut o.slice, get(bufs, *gate)?, false, len, act)
                } else {
                    ops::gated_act(
                        gpu,
                        get(bufs, *gate)?,
                        get(bufs, *up)?,
                        &mut o.slice,
                        len,
                        act,
                    )
                };
                put(bufs, *out, o);
                r
            }
            Op::Add { a, b, out } => {
                let len = n * width(*out);
                let mut o = take(bufs, *out)?;
                let r = if out == a && out == b {
                    ops::scale_inplace(gpu, &mut o.slice, 2.0, len)
                } else if out == a {
                    ops::add_inplace(gpu, &mut o.slice, get(bufs, *b)?, len)
                } else if out == b {
                    ops::add_inplace(gpu, &mut o.slice, get(bufs, *a)?, len)
                } else {
                    ops::add(gpu, get(bufs, *a)?, get(bufs, *b)?, &mut o.slice, len)
                };
                put(bufs, *out, o);
                r
            }
        }
    }

    /// Run a fused launch unit of the body ([`fuse::Fused`]) for `n` rows.
    pub(super) fn run_fused(&mut self, f: fuse::Fused, n: usize) -> Result<(), CudaError> {
        if self.mmv_fused(f, n)? {
            return Ok(());
        }
        let CudaDecoder {
            gpu,
            program,
            mats,
            weights,
            bufs,
            choices,
            mv,
            ..
        } = self;
        let gpu = &**gpu;
        let norm_in = |nf| norm_in(weights, nf);
        let width = |b: BufId| program.buffer(b).width;
        let (out, used): (BufId, Vec<WeightId>) = match f {
            fuse::Fused::Glu {
                gate_w, up_w, out, ..
            } => (out, vec![gate_w, up_w]),
            fuse::Fused::Residual { weight, out, .. } | fuse::Fused::Plain { weight, out, .. } => {
                (out, vec![weight])
            }
            fuse::Fused::RopeAttn { .. } => {
                return Err(model_err("rope + attention is not a matvec unit"));
            }
        };
        let mut o = take(bufs, out)?;
        let r = (|| match f {
            fuse::Fused::Glu {
                x,
                gate_w,
                up_w,
                act,
                norm,
                ..
            } => {
                let wg = w_ref(mats, matrix(weights, gate_w)?)?;
                let wu = w_ref(mats, matrix(weights, up_w)?)?;
                let act = match act {
                    arch::Activation::Silu => Activation::Silu,
                    arch::Activation::GeluTanh => Activation::GeluTanh,
                };
                let (xb, wx, wy) = (get(bufs, x)?, width(x), width(out));
                let mut last = Err(model_err("no rows"));
                for (a, b) in row_slices(n) {
                    last = Ok(ops::matvec_glu(
                        gpu,
                        wg,
                        wu,
                        &xb.slice(a * wx..b * wx),
                        b - a,
                        act,
                        norm_in(norm)?,
                        *mv,
                        &mut o.slice.slice_mut(a * wy..b * wy),
                    )?);
                }
                last
            }
            fuse::Fused::Residual {
                x,
                weight,
                bias,
                norm,
                ..
            }
            | fuse::Fused::Plain {
                x,
                weight,
                bias,
                norm,
                ..
            } => {
                let w = w_ref(mats, matrix(weights, weight)?)?;
                let bias = opt_vector(weights, bias)?;
                let residual = matches!(f, fuse::Fused::Residual { .. });
                let (xb, wx, wy) = (get(bufs, x)?, width(x), width(out));
                let mut last = Err(model_err("no rows"));
                for (a, b) in row_slices(n) {
                    last = Ok(ops::matvec_fused(
                        gpu,
                        w,
                        &xb.slice(a * wx..b * wx),
                        b - a,
                        bias,
                        norm_in(norm)?,
                        residual,
                        *mv,
                        &mut o.slice.slice_mut(a * wy..b * wy),
                    )?);
                }
                last
            }
            fuse::Fused::RopeAttn { .. } => Err(model_err("rope + attention is not a matvec unit")),
        })();
        put(bufs, out, o);
        let choice = r?;
        note_choice(choices, program, used, choice);
        Ok(())
    }

    /// Two matvec units run as one launch ([`fuse::Pair`]) for `n` rows.
    pub(super) fn run_pair(&mut self, pr: fuse::Pair, n: usize) -> Result<(), CudaError> {
        if self.mmv_pair(pr, n)? {
            return Ok(());
        }
        let CudaDecoder {
            gpu,
            program,
            mats,
            weights,
            bufs,
            choices,
            mv,
            ..
        } = self;
        let gpu = &**gpu;
        let norm = norm_in(weights, pr.norm)?;
        let bias = |b: Option<WeightId>| opt_vector(weights, b);
        let (wa, wb) = (
            w_ref(mats, matrix(weights, pr.a.0)?)?,
            w_ref(mats, matrix(weights, pr.b.0)?)?,
        );
        let mut ya = take(bufs, pr.a.2)?;
        let r = (|| {
            let mut yb = take(bufs, pr.b.2)?;
            let r = ops::matvec_pair(
                gpu,
                wa,
                wb,
                get(bufs, pr.x)?,
                n,
                bias(pr.a.1)?,
                bias(pr.b.1)?,
                norm,
                *mv,
                &mut ya.slice,
                &mut yb.slice,
            );
            put(bufs, pr.b.2, yb);
            r
        })();
        put(bufs, pr.a.2, ya);
        let choice = r?;
        note_choice(choices, program, [pr.a.0, pr.b.0], choice);
        Ok(())
    }

    /// Whether any of the triple `t`'s weights goes to `mmv.cu` (its segmented launches then
    /// do not apply).
    pub(super) fn triple_on_mmv(&self, t: &fuse::Triple) -> Result<bool, CudaError> {
        for m in &t.m {
            if self.mmv_takes(m.0)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Three matvec units ([`fuse::Triple`]: q, k and v) as one segmented streamed launch
    /// (`ops::matvec_segs`) for `n` rows, where it applies: one row (the decode step, graphed
    /// or not), none of the weights on mmv, and `select::choose_matvec_segs` takes the
    /// shapes (`ASSAY_MV_QKV`, `ASSAY_MV_WR`). `Ok(false)`: nothing queued (the caller runs
    /// the units as today: k and v paired where they pair).
    pub(super) fn run_triple(&mut self, t: fuse::Triple, n: usize) -> Result<bool, CudaError> {
        if n != 1 {
            return Ok(false);
        }
        if self.triple_on_mmv(&t)? {
            return Ok(false);
        }
        let CudaDecoder {
            gpu,
            program,
            mats,
            weights,
            bufs,
            choices,
            mv,
            ..
        } = self;
        let gpu = &**gpu;
        let (norm, ws, biases) = triple_inputs(mats, weights, &t)?;
        let r = with_triple_out(bufs, &t, |x, ys| {
            ops::matvec_segs(gpu, ws, x, n, biases, norm, *mv, ys)
        });
        let Some(choice) = r? else {
            return Ok(false);
        };
        note_choice(choices, program, t.m.iter().map(|m| m.0), choice);
        Ok(true)
    }
}

/// A triple's folded input norm, weights and biases (q, k, v), in that order of lookup.
#[allow(clippy::type_complexity)]
pub(super) fn triple_inputs<'a>(
    mats: &'a [DeviceWeight],
    weights: &'a [DevWeight],
    t: &fuse::Triple,
) -> Result<
    (
        Option<ops::NormIn<'a>>,
        [&'a DeviceWeight; 3],
        [Option<&'a dyn DevicePtr<f32>>; 3],
    ),
    CudaError,
> {
    let norm = norm_in(weights, t.norm)?;
    let bias = |b: Option<WeightId>| opt_vector(weights, b);
    let ws = [
        w_ref(mats, matrix(weights, t.m[0].0)?)?,
        w_ref(mats, matrix(weights, t.m[1].0)?)?,
        w_ref(mats, matrix(weights, t.m[2].0)?)?,
    ];
    let biases = [bias(t.m[0].1)?, bias(t.m[1].1)?, bias(t.m[2].1)?];
    Ok((norm, ws, biases))
}

/// Runs `f` on a triple's input x and its three outputs: the outputs are taken out of their
/// slots (distinct buffers, none of them x: fuse::triple) and put back whatever happens.
pub(super) fn with_triple_out<R>(
    bufs: &mut [Option<CudaSlice<f32>>],
    t: &fuse::Triple,
    f: impl FnOnce(&CudaSlice<f32>, [&mut dyn DevicePtrMut<f32>; 3]) -> Result<R, CudaError>,
) -> Result<R, CudaError> {
    let mut ya = take(bufs, t.m[0].2)?;
    let r = (|| {
        let mut yb = take(bufs, t.m[1].2)?;
        let r = (|| {
            let mut yc = take(bufs, t.m[2].2)?;
            let r = f(
                get(bufs, t.x)?,
                [&mut ya.slice, &mut yb.slice, &mut yc.slice],
            );
            put(bufs, t.m[2].2, yc);
            r
        })();
        put(bufs, t.m[1].2, yb);
        r
    })();
    put(bufs, t.m[0].2, ya);
    r
}

/// The input norm a fused matvec folds in, if any.
pub(super) fn norm_in(
    weights: &[DevWeight],
    nf: Option<fuse::NormFold>,
) -> Result<Option<ops::NormIn<'_>>, CudaError> {
    match nf {
        Some(nf) => Ok(Some(ops::NormIn {
            weight: vector(weights, nf.weight)?,
            eps: nf.eps,
            w_offset: 0.0,
        })),
        None => Ok(None),
    }
}

/// Row ranges `a..b` of at most [`MV_LAUNCH_MAX_TOK`] rows covering `0..n` (the matvec's
/// launches; one range for the row path, a prompt pass and a batched step of up to 64
/// rows).
fn row_slices(n: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..n)
        .step_by(MV_LAUNCH_MAX_TOK)
        .map(move |a| (a, (a + MV_LAUNCH_MAX_TOK).min(n)))
}

pub(super) fn matrix(weights: &[DevWeight], id: WeightId) -> Result<usize, CudaError> {
    match weights.get(id.0 as usize) {
        Some(DevWeight::Matrix(i)) => Ok(*i),
        _ => Err(model_err(format!("weight {} is not a matrix", id.0))),
    }
}

/// A bias vector, if the unit has one.
pub(super) fn opt_vector(
    weights: &[DevWeight],
    id: Option<WeightId>,
) -> Result<Option<&dyn DevicePtr<f32>>, CudaError> {
    match id {
        Some(b) => Ok(Some(vector(weights, b)? as &dyn DevicePtr<f32>)),
        None => Ok(None),
    }
}

/// Record `choice` as the kernel of the weights `ws` that have none yet (a weight reports
/// the first launch it took part in).
pub(super) fn note_choice<C: Copy>(
    choices: &mut HashMap<String, C>,
    program: &arch::Program,
    ws: impl IntoIterator<Item = WeightId>,
    choice: C,
) {
    for w in ws {
        choices
            .entry(program.weight(w).name.clone())
            .or_insert(choice);
    }
}

pub(super) fn vector(weights: &[DevWeight], id: WeightId) -> Result<&CudaSlice<f32>, CudaError> {
    match weights.get(id.0 as usize) {
        Some(DevWeight::Vector(d, _)) => Ok(d),
        _ => Err(model_err(format!("weight {} is not a vector", id.0))),
    }
}

pub(super) fn vector_host(weights: &[DevWeight], id: WeightId) -> Result<&[f32], CudaError> {
    match weights.get(id.0 as usize) {
        Some(DevWeight::Vector(_, h)) => Ok(h),
        _ => Err(model_err(format!("weight {} is not a vector", id.0))),
    }
}

pub(super) fn w_ref(mats: &[DeviceWeight], i: usize) -> Result<&DeviceWeight, CudaError> {
    mats.get(i)
        .ok_or_else(|| model_err("matrix index out of range"))
}

/// A buffer taken out of its slot while an op writes it.
pub(super) struct Taken {
    pub(super) slice: CudaSlice<f32>,
}

pub(super) fn take(bufs: &mut [Option<CudaSlice<f32>>], id: BufId) -> Result<Taken, CudaError> {
    bufs.get_mut(id.0 as usize)
        .and_then(Option::take)
        .map(|slice| Taken { slice })
        .ok_or_else(|| model_err(format!("buffer {} missing or aliased", id.0)))
}

pub(super) fn put(bufs: &mut [Option<CudaSlice<f32>>], id: BufId, t: Taken) {
    if let Some(slot) = bufs.get_mut(id.0 as usize) {
        *slot = Some(t.slice);
    }
}

pub(super) fn get(
    bufs: &[Option<CudaSlice<f32>>],
    id: BufId,
) -> Result<&CudaSlice<f32>, CudaError> {
    bufs.get(id.0 as usize)
        .and_then(Option::as_ref)
        .ok_or_else(|| {
            model_err(format!(
                "buffer {} missing or aliased with the output",
                id.0
            ))
        })
}

/// `ASSAY_MV_WR` ([`ops::MatvecOpts::wr`]): `0` (today's one-token matvec entry points
/// everywhere), `1` (the streamed kernel wherever its requirements hold), unset, empty or
/// `auto` (`select::choose_matvec`'s rule). Anything else is an error (a typo must not
/// silently measure the other kernel).
pub(super) fn mv_wr_switch_from(v: Option<&str>) -> Result<Option<bool>, String> {
    switch_from("ASSAY_MV_WR", v)
}

/// `ASSAY_MV_WRT` ([`ops::MatvecOpts::wrt`]): `1` (the multi-token streamed matvec for 2 or
/// more token vectors wherever its requirements hold); `0`, unset, empty or `auto`: never
/// (not yet run on a GPU). Anything else is an error.
pub(super) fn mv_wrt_switch_from(v: Option<&str>) -> Result<bool, String> {
    Ok(switch_from("ASSAY_MV_WRT", v)? == Some(true))
}

/// `ASSAY_MV_QKV` ([`ops::MatvecOpts::qkv`]): `0` (q, k and v in their own launches, as
/// before), `1` (one segmented streamed launch wherever its requirements hold), unset, empty
/// or `auto` (`select::choose_matvec_segs`'s rule). Anything else is an error.
pub(super) fn mv_qkv_switch_from(v: Option<&str>) -> Result<Option<bool>, String> {
    switch_from("ASSAY_MV_QKV", v)
}

/// A strict `0` / `1` / `auto` switch named `var`.
fn switch_from(var: &str, v: Option<&str>) -> Result<Option<bool>, String> {
    match v.map(str::trim) {
        None | Some("") | Some("auto") => Ok(None),
        Some("0") => Ok(Some(false)),
        Some("1") => Ok(Some(true)),
        Some(o) => Err(format!("{var}={o:?}: expected 0, 1 or auto")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_slices_cover_the_rows_in_launches_of_the_launch_limit() {
        const M: usize = MV_LAUNCH_MAX_TOK;
        assert_eq!(row_slices(1).collect::<Vec<_>>(), vec![(0, 1)]);
        use super::super::MAX_ROWS;
        assert_eq!(
            row_slices(MAX_ROWS).collect::<Vec<_>>(),
            vec![(0, MAX_ROWS)]
        );
        assert_eq!(row_slices(M).collect::<Vec<_>>(), vec![(0, M)]);
        let s: Vec<_> = row_slices(2 * M + 3).collect();
        assert_eq!(s, vec![(0, M), (M, 2 * M), (2 * M, 2 * M + 3)]);
        assert_eq!(row_slices(0).count(), 0);
    }

    #[test]
    fn mv_wr_switch_is_strict() {
        assert_eq!(mv_wr_switch_from(None), Ok(None));
        assert_eq!(mv_wr_switch_from(Some("")), Ok(None));
        assert_eq!(mv_wr_switch_from(Some("auto")), Ok(None));
        assert_eq!(mv_wr_switch_from(Some("0")), Ok(Some(false)));
        assert_eq!(mv_wr_switch_from(Some(" 1 ")), Ok(Some(true)));
        for bad in ["2", "on", "yes", "AUTO"] {
            assert!(mv_wr_switch_from(Some(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn mv_qkv_switch_is_strict() {
        assert_eq!(mv_qkv_switch_from(None), Ok(None));
        assert_eq!(mv_qkv_switch_from(Some("auto")), Ok(None));
        assert_eq!(mv_qkv_switch_from(Some("0")), Ok(Some(false)));
        assert_eq!(mv_qkv_switch_from(Some("1")), Ok(Some(true)));
        let e = mv_qkv_switch_from(Some("yes")).unwrap_err();
        assert!(e.starts_with("ASSAY_MV_QKV="), "{e}");
    }
}
