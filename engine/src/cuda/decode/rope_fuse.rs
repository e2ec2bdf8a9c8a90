//! The one-token step's q, k and v products with `rope_kv`'s work (RoPE of q and k, k and v
//! into the KV cache) in their segmented launch's epilogue (`ops::matvec_segs_rope`, issue
//! 7), then the attention: a [`fuse::Triple`] followed by its [`fuse::Fused::RopeAttn`] in
//! one unit, where `ASSAY_ROPE_FUSE=1` asks for it (opt-in; [`rope_fuse_switch_from`]) and
//! `select::choose_rope_fuse` take it. Every value (q, k and v buffers, cache entries,
//! attention output) has the bits of `run_triple` then `rope_attention`.

use super::super::CudaError;
use super::super::ops;
use super::attention::{feed_pos, style_of};
use super::exec::{note_choice, triple_inputs, with_triple_out};
use super::{CudaDecoder, Feed, fuse, model_err};
use crate::arch::Op;

impl CudaDecoder {
    /// The triple `t` (q, k and v of one x) and the unit `ra` right after it (RoPE of q and
    /// k, the attention: its q and k are t's outputs, its v t's third) as one launch for the
    /// products and rope_kv, then the attention launch. `Ok(false)`: nothing queued (off,
    /// not one row, a weight on mmv, or the fused launch does not take the shapes: the
    /// caller runs the triple and `rope_attention` as today).
    pub(super) fn run_triple_rope(
        &mut self,
        t: fuse::Triple,
        ra: fuse::Fused,
        body: &[Op],
        n: usize,
        feed: Feed,
    ) -> Result<bool, CudaError> {
        let fuse::Fused::RopeAttn {
            q, k, q_rope, attn, ..
        } = ra
        else {
            return Ok(false);
        };
        if !self.rope_fuse || n != 1 {
            return Ok(false);
        }
        let (Some(Op::Rope { rope: rs, .. }), Some(Op::Attention(spec))) =
            (body.get(q_rope), body.get(attn))
        else {
            return Err(model_err("rope + attention unit does not match the body"));
        };
        // The products' outputs must be the attention's q, k and v (distinct buffers).
        if [t.m[0].2, t.m[1].2, t.m[2].2] != [q, k, spec.v] || spec.q != q || spec.k != k {
            return Ok(false);
        }
        if self.triple_on_mmv(&t)? {
            return Ok(false);
        }
        let style = style_of(rs.style);
        let CudaDecoder {
            gpu,
            program,
            mats,
            weights,
            bufs,
            choices,
            mv,
            rope,
            kv,
            bt,
            step,
            pos,
            capacity,
            ..
        } = self;
        let gpu = &**gpu;
        let table = rope
            .get(&q_rope)
            .ok_or_else(|| model_err("rope table missing"))?;
        let layer = kv
            .get_mut(spec.kv_layer)
            .ok_or_else(|| model_err("kv layer out of range"))?;
        if layer.n_kv_heads != spec.n_kv_heads || layer.head_dim != spec.head_dim {
            return Err(model_err("attention spec does not match its KV layer"));
        }
        let (norm, ws, biases) = triple_inputs(mats, weights, &t)?;
        let p = feed_pos(step, pos, feed);
        let shape = ops::RopeKvShape {
            ntok: n,
            n_heads: spec.n_heads,
            n_kv_heads: spec.n_kv_heads,
            head_dim: spec.head_dim,
            capacity: *capacity,
        };
        let r = with_triple_out(bufs, &t, |x, ys| {
            ops::matvec_segs_rope(
                gpu,
                ws,
                x,
                biases,
                norm,
                *mv,
                ys,
                ops::QkvRope {
                    k_cache: &mut layer.k,
                    v_cache: &mut layer.v,
                    bt: &*bt,
                    pos: &p,
                    table,
                    style,
                    shape,
                },
            )
        });
        let Some(fused) = r? else {
            return Ok(false);
        };
        note_choice(choices, program, t.m.iter().map(|m| m.0), fused.kernel());
        self.attend(spec, n, feed)?;
        Ok(true)
    }
}

/// `ASSAY_ROPE_FUSE`: `1`: rope_kv in the q / k / v launch's epilogue where it applies
/// (bit-identical to the separate launches by construction and by kernel-check's `ropefuse`
/// lines, one launch fewer per layer); unset, empty or `0`: off (the separate `rope_kv`
/// launch, the default again since engine21: on by default in engine19, it measured 2.4%
/// slower on the H200 in session 20's A/B, 8B Q4_0 p512 decode 378.38 tok/s on vs 387.59
/// off, research/notes/s20). Anything else is an error.
pub(super) fn rope_fuse_switch_from(v: Option<&str>) -> Result<bool, String> {
    match v.map(str::trim) {
        None | Some("") | Some("0") => Ok(false),
        Some("1") => Ok(true),
        Some(other) => Err(format!("ASSAY_ROPE_FUSE={other}: expected 0 or 1")),
    }
}

#[cfg(test)]
mod tests {
    use super::rope_fuse_switch_from;

    #[test]
    fn rope_fuse_switch_is_strict_and_off_by_default() {
        assert_eq!(rope_fuse_switch_from(None), Ok(false));
        assert_eq!(rope_fuse_switch_from(Some("")), Ok(false));
        assert_eq!(rope_fuse_switch_from(Some("0")), Ok(false));
        assert_eq!(rope_fuse_switch_from(Some(" 0 ")), Ok(false));
        assert_eq!(rope_fuse_switch_from(Some("1")), Ok(true));
        assert_eq!(rope_fuse_switch_from(Some("1\n")), Ok(true));
        let e = rope_fuse_switch_from(Some("yes")).unwrap_err();
        assert!(e.starts_with("ASSAY_ROPE_FUSE="), "{e}");
    }
}
