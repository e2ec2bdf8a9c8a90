//! Fusion plan of a program's body for the CUDA decoder: which runs of ops go to the GPU
//! as one launch.
//!
//! Owns [`plan`]: a pure function of the program. Three patterns, each giving the very
//! bits of the separate launches (kernel-check compares them exactly):
//! - gate matmul, up matmul (same input, same format and shape, no bias), gated
//!   activation -> one `matvec_glu` launch ([`Fused::Glu`]);
//! - matmul into `t`, then `o = o + t` in place -> one matvec with the residual added in
//!   its epilogue ([`Fused::Residual`]);
//! - an RMSNorm (whole rows) whose output only feeds the matmuls right after it -> folded
//!   into each of them (`norm` of [`Fused`]; a lone matmul becomes [`Fused::Plain`]);
//! - RoPE of q, RoPE of k (one table) and the attention on them -> one `rope_kv` launch
//!   (both rotations and the KV-cache store) and one attention launch
//!   ([`Fused::RopeAttn`]).
//!
//! A pattern is taken only when the intermediate buffers it no longer writes are not read
//! afterwards (rest of the body, the head, then the body again from the start: the next
//! token's pass), and the matmul's input is not the buffer it writes.

use crate::arch::{Activation, BufId, Op, Program, WeightId};

/// An RMSNorm folded into a matvec's input: `x` of the unit is the norm's input.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NormFold {
    pub weight: WeightId,
    pub eps: f32,
}

/// A run of ops executed as one launch.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fused {
    /// `out = act(gate_w x) * (up_w x)`.
    Glu {
        x: BufId,
        gate_w: WeightId,
        up_w: WeightId,
        out: BufId,
        act: Activation,
        norm: Option<NormFold>,
    },
    /// `out = (weight x (+ bias)) + out`.
    Residual {
        x: BufId,
        weight: WeightId,
        bias: Option<WeightId>,
        out: BufId,
        norm: Option<NormFold>,
    },
    /// `out = weight norm(x) (+ bias)` (only with a folded norm).
    Plain {
        x: BufId,
        weight: WeightId,
        bias: Option<WeightId>,
        out: BufId,
        norm: Option<NormFold>,
    },
    /// Ops `q_rope` (RoPE of the attention's q), `k_rope` (RoPE of its k, the same table)
    /// and `attn` (the attention) of the body. The rotations stay in place in `q` and `k`.
    RopeAttn {
        q: BufId,
        k: BufId,
        q_rope: usize,
        k_rope: usize,
        attn: usize,
    },
}

impl Fused {
    fn x(&self) -> BufId {
        match self {
            Fused::Glu { x, .. } | Fused::Residual { x, .. } | Fused::Plain { x, .. } => *x,
            Fused::RopeAttn { q, .. } => *q,
        }
    }
    fn out(&self) -> BufId {
        match self {
            Fused::Glu { out, .. } | Fused::Residual { out, .. } | Fused::Plain { out, .. } => *out,
            Fused::RopeAttn { q, .. } => *q,
        }
    }
    fn with_norm(self, xr: BufId, n: NormFold) -> Fused {
        match self {
            Fused::Glu {
                gate_w,
                up_w,
                out,
                act,
                ..
            } => Fused::Glu {
                x: xr,
                gate_w,
                up_w,
                out,
                act,
                norm: Some(n),
            },
            Fused::Residual {
                weight, bias, out, ..
            } => Fused::Residual {
                x: xr,
                weight,
                bias,
                out,
                norm: Some(n),
            },
            Fused::Plain {
                weight, bias, out, ..
            } => Fused::Plain {
                x: xr,
                weight,
                bias,
                out,
                norm: Some(n),
            },
            Fused::RopeAttn { .. } => self,
        }
    }
}

/// One launch unit of the body: ops `first .. first + len`, fused or not.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    pub first: usize,
    pub len: usize,
    pub fused: Option<Fused>,
}

fn reads(op: &Op) -> Vec<BufId> {
    match op {
        Op::Embed { .. } => Vec::new(),
        Op::RmsNorm { x, .. }
        | Op::MatMul { x, .. }
        | Op::Rope { x, .. }
        | Op::Scale { x, .. }
        | Op::Softcap { x, .. } => vec![*x],
        Op::Attention(a) => vec![a.q, a.k, a.v],
        Op::GatedAct { gate, up, .. } => vec![*gate, *up],
        Op::Add { a, b, .. } => vec![*a, *b],
    }
}

fn writes(op: &Op) -> BufId {
    match op {
        Op::Embed { out, .. }
        | Op::RmsNorm { out, .. }
        | Op::MatMul { out, .. }
        | Op::GatedAct { out, .. }
        | Op::Add { out, .. } => *out,
        Op::Rope { x, .. } | Op::Scale { x, .. } | Op::Softcap { x, .. } => *x,
        Op::Attention(a) => a.out,
    }
}

/// Whether `buf` is read by the ops after the body run ending before `end` before it is
/// written again (scanning the rest of the body, the head, then the body from its start).
fn read_later(p: &Program, end: usize, buf: BufId) -> bool {
    let after = p.body[end..].iter().chain(&p.head).chain(&p.body[..end]);
    for op in after {
        if reads(op).contains(&buf) {
            return true;
        }
        if writes(op) == buf {
            return false;
        }
    }
    false
}

fn glu_at(p: &Program, i: usize) -> Option<Fused> {
    let (
        Some(Op::MatMul {
            x: x1,
            weight: w1,
            bias: None,
            out: o1,
        }),
        Some(Op::MatMul {
            x: x2,
            weight: w2,
            bias: None,
            out: o2,
        }),
        Some(Op::GatedAct { gate, up, out, act }),
    ) = (p.body.get(i), p.body.get(i + 1), p.body.get(i + 2))
    else {
        return None;
    };
    if x1 != x2 || o1 == o2 || [o1, o2].contains(&x1) || out == x1 {
        return None;
    }
    let (gate_w, up_w) = if (gate, up) == (o1, o2) {
        (*w1, *w2)
    } else if (gate, up) == (o2, o1) {
        (*w2, *w1)
    } else {
        return None;
    };
    let (sg, su) = (p.weight(gate_w), p.weight(up_w));
    if sg.format != su.format || sg.rows != su.rows || sg.cols != su.cols {
        return None;
    }
    // The matmul outputs the fused launch no longer writes must not be read afterwards.
    for b in [o1, o2] {
        if b != out && read_later(p, i + 3, *b) {
            return None;
        }
    }
    Some(Fused::Glu {
        x: *x1,
        gate_w,
        up_w,
        out: *out,
        act: *act,
        norm: None,
    })
}

fn residual_at(p: &Program, i: usize) -> Option<Fused> {
    let (
        Some(Op::MatMul {
            x,
            weight,
            bias,
            out: t,
        }),
        Some(Op::Add { a, b, out }),
    ) = (p.body.get(i), p.body.get(i + 1))
    else {
        return None;
    };
    let in_place = (a == t && b == out) || (b == t && a == out);
    if !in_place || out == t || x == out || read_later(p, i + 2, *t) {
        return None;
    }
    Some(Fused::Residual {
        x: *x,
        weight: *weight,
        bias: *bias,
        out: *out,
        norm: None,
    })
}

/// RoPE of q and of k with one table, then the attention that reads them.
fn rope_attn_at(p: &Program, i: usize) -> Option<Fused> {
    let (
        Some(Op::Rope { x: x1, rope: r1 }),
        Some(Op::Rope { x: x2, rope: r2 }),
        Some(Op::Attention(a)),
    ) = (p.body.get(i), p.body.get(i + 1), p.body.get(i + 2))
    else {
        return None;
    };
    let (q_rope, k_rope, rq, rk) = if (x1, x2) == (&a.q, &a.k) {
        (i, i + 1, r1, r2)
    } else if (x1, x2) == (&a.k, &a.q) {
        (i + 1, i, r2, r1)
    } else {
        return None;
    };
    let same_table = rq.style == rk.style
        && rq.head_dim == rk.head_dim
        && rq.rot_dims == rk.rot_dims
        && rq.base.to_bits() == rk.base.to_bits()
        && rq.freq_scale.to_bits() == rk.freq_scale.to_bits()
        && rq.freq_factors == rk.freq_factors;
    let shapes = rq.n_heads == a.n_heads
        && rk.n_heads == a.n_kv_heads
        && rq.head_dim == a.head_dim
        && a.q != a.k
        && a.v != a.q
        && a.v != a.k;
    (same_table && shapes).then_some(Fused::RopeAttn {
        q: a.q,
        k: a.k,
        q_rope,
        k_rope,
        attn: i + 2,
    })
}

/// The launch unit starting at op `i` (ops, fused form), if it is a matmul-led one.
fn unit_at(p: &Program, i: usize) -> Option<(usize, Fused)> {
    if let Some(f) = glu_at(p, i) {
        return Some((3, f));
    }
    if let Some(f) = residual_at(p, i) {
        return Some((2, f));
    }
    match p.body.get(i) {
        Some(Op::MatMul {
            x,
            weight,
            bias,
            out,
        }) if x != out => Some((
            1,
            Fused::Plain {
                x: *x,
                weight: *weight,
                bias: *bias,
                out: *out,
                norm: None,
            },
        )),
        _ => None,
    }
}

/// A unit with a folded norm: (first op, op count, fused form).
type FoldedUnit = (usize, usize, Fused);

/// An RMSNorm at `i` over whole rows whose output feeds only the units right after it:
/// those units with the norm folded in, and the op index after them.
fn norm_fold_at(p: &Program, i: usize) -> Option<(Vec<FoldedUnit>, usize)> {
    let Some(Op::RmsNorm {
        x: xr,
        weight,
        out: nb,
        group,
        eps,
    }) = p.body.get(i)
    else {
        return None;
    };
    let width = p.buffer(*xr).width;
    if xr == nb || (*group != width && *group != 0) {
        return None;
    }
    let fold = NormFold {
        weight: *weight,
        eps: *eps,
    };
    let mut units = Vec::new();
    let mut j = i + 1;
    while let Some((len, f)) = unit_at(p, j) {
        // A unit must read the norm's output as its x and write neither the norm's input
        // (other blocks of the launch still read it) nor its output.
        if f.x() != *nb || f.out() == *xr || f.out() == *nb {
            break;
        }
        units.push((j, len, f.with_norm(*xr, fold)));
        j += len;
    }
    if units.is_empty() || read_later(p, j, *nb) {
        return None;
    }
    Some((units, j))
}

/// Two consecutive [`Fused::Plain`] units (matmuls with the same folded norm on the same x,
/// weights of one format and shape, distinct outputs that are not x: k and v of an
/// attention block) that may run as one two-matrix launch (`ops::matvec_pair`). Each
/// matrix's rows get the bits of its own launch, so pairing changes nothing but the launch
/// count; the units stay separate steps of the plan (the prompt and batched paths run them
/// one by one).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pair {
    pub x: BufId,
    pub norm: Option<NormFold>,
    pub a: (WeightId, Option<WeightId>, BufId),
    pub b: (WeightId, Option<WeightId>, BufId),
}

/// One matrix of a multi-matrix launch: (weight, bias, output).
pub type Mat = (WeightId, Option<WeightId>, BufId);

/// What [`pair`] and [`triple`] share: `units` are all [`Fused::Plain`] on one x with one
/// folded norm, their outputs distinct and none of them x, their weights of one format and
/// k (and of one row count when `same_rows`). Returns (x, norm, the matrices in order).
fn plain_run(
    p: &Program,
    units: &[&Fused],
    same_rows: bool,
) -> Option<(BufId, Option<NormFold>, Vec<Mat>)> {
    let mut mats: Vec<Mat> = Vec::with_capacity(units.len());
    let mut head: Option<(BufId, Option<NormFold>)> = None;
    for u in units {
        let Fused::Plain {
            x,
            weight,
            bias,
            out,
            norm,
        } = **u
        else {
            return None;
        };
        let (x0, n0) = *head.get_or_insert((x, norm));
        if x != x0 || norm != n0 || out == x || mats.iter().any(|m| m.2 == out) {
            return None;
        }
        if let Some(&(w0, _, _)) = mats.first() {
            let (s0, s) = (p.weight(w0), p.weight(weight));
            if s.format != s0.format || s.cols != s0.cols || (same_rows && s.rows != s0.rows) {
                return None;
            }
        }
        mats.push((weight, bias, out));
    }
    let (x, norm) = head?;
    Some((x, norm, mats))
}

/// The [`Pair`] of units `a` then `b` of `p`'s plan, if they make one.
pub fn pair(p: &Program, a: &Fused, b: &Fused) -> Option<Pair> {
    let (x, norm, m) = plain_run(p, &[a, b], true)?;
    Some(Pair {
        x,
        norm,
        a: m[0],
        b: m[1],
    })
}

/// Three consecutive [`Fused::Plain`] units on the same x with the same folded norm, weights
/// of one format and k (the row counts may differ), distinct outputs that are not x: q, k
/// and v of an attention block, which a one-token step may run as one segmented streamed
/// launch (`ops::matvec_segs`, each row with the bits of its own launch). Like [`Pair`], the
/// units stay separate steps of the plan: where the segmented launch does not apply (several
/// rows, the prompt's GEMMs, mmv, a shape or device it does not serve) they run as today
/// (k and v as a [`Pair`] where they make one).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Triple {
    pub x: BufId,
    pub norm: Option<NormFold>,
    pub m: [Mat; 3],
}

/// The [`Triple`] of units `a`, `b`, `c` of `p`'s plan, in that order, if they make one.
pub fn triple(p: &Program, a: &Fused, b: &Fused, c: &Fused) -> Option<Triple> {
    let (x, norm, m) = plain_run(p, &[a, b, c], false)?;
    Some(Triple {
        x,
        norm,
        m: [m[0], m[1], m[2]],
    })
}

/// How many of the leading `steps` (at least 1 unless there are none) make one group of
/// prompt-pass GEMMs: consecutive plain products of one x and folded norm (q, k and v of an
/// attention block), of one format and k, with distinct outputs that are not x; at most
/// `max`. The tiled kernel multiplies them in one launch (the bits of their own launches).
pub fn gemm_group(p: &Program, steps: &[Step], max: usize) -> usize {
    let Some(Some(Fused::Plain {
        x, weight, norm, ..
    })) = steps.first().map(|s| s.fused)
    else {
        return usize::from(!steps.is_empty());
    };
    let w0 = p.weight(weight);
    let mut outs: Vec<BufId> = Vec::new();
    let mut len = 0;
    for s in steps.iter().take(max) {
        let Some(Fused::Plain {
            x: xi,
            weight: wi,
            norm: ni,
            out,
            ..
        }) = s.fused
        else {
            break;
        };
        let wi = p.weight(wi);
        if xi != x || ni != norm || out == x || outs.contains(&out) {
            break;
        }
        if wi.format != w0.format || wi.cols != w0.cols {
            break;
        }
        outs.push(out);
        len += 1;
    }
    len.max(1)
}

/// Which of `p`'s buffers (by index) the body's ops read or write, and the body's output
/// (`hidden`, copied to the head's input): the only ones a prompt pass needs at its many
/// rows. The rest belong to the head alone (the final norm's output, the logits), which
/// runs on one row in the decoder's `head_bufs`.
pub(super) fn body_buffers(p: &Program) -> Vec<bool> {
    let mut used = vec![false; p.buffers.len()];
    let ids = p
        .body
        .iter()
        .flat_map(|op| reads(op).into_iter().chain([writes(op)]))
        .chain([p.hidden]);
    for b in ids {
        if let Some(u) = used.get_mut(b.0 as usize) {
            *u = true;
        }
    }
    used
}

/// The body of `p` as launch units, in order, covering every op once.
pub fn plan(p: &Program) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut i = 0;
    while i < p.body.len() {
        if let Some((units, end)) = norm_fold_at(p, i) {
            // The norm op joins the first unit's step.
            for (k, (j, len, f)) in units.into_iter().enumerate() {
                let (first, len) = if k == 0 { (i, len + j - i) } else { (j, len) };
                steps.push(Step {
                    first,
                    len,
                    fused: Some(f),
                });
            }
            i = end;
            continue;
        }
        let (len, fused) = if let Some(f) = glu_at(p, i) {
            (3, Some(f))
        } else if let Some(f) = residual_at(p, i) {
            (2, Some(f))
        } else if let Some(f) = rope_attn_at(p, i) {
            (3, Some(f))
        } else {
            (1, None)
        };
        steps.push(Step {
            first: i,
            len,
            fused,
        });
        i += len;
    }
    steps
}

#[cfg(test)]
#[path = "fuse_tests.rs"]
mod tests;
