//! The attention units of [`CudaDecoder`]: RoPE of q and k with the KV-cache store in one
//! launch, or the KV store alone, then the attention launch (the split-KV decode attention
//! in launches of at most `attention_rows` rows, or the prompt pass's tensor-core
//! attention).

use super::super::CudaError;
use super::super::cudarc::driver::{CudaSlice, CudaView};
use super::super::ops::{self, AttnShape, RopeStyle};
use super::{CudaDecoder, Feed, get, model_err, put, take};
use crate::arch::{self, AttentionSpec, Op};
use std::sync::Arc;

impl CudaDecoder {
    /// RoPE of q and k (body op `q_rope` and the one after or before it: one table, see
    /// [`fuse::Fused::RopeAttn`]) with the KV-cache store in one launch, then the attention
    /// (body op `attn`).
    pub(super) fn rope_attention(
        &mut self,
        body: &[Op],
        q_rope: usize,
        attn: usize,
        n: usize,
        feed: Feed,
    ) -> Result<(), CudaError> {
        let (Some(Op::Rope { rope: rs, .. }), Some(Op::Attention(spec))) =
            (body.get(q_rope), body.get(attn))
        else {
            return Err(model_err("rope + attention unit does not match the body"));
        };
        let table = self
            .rope
            .get(&q_rope)
            .ok_or_else(|| model_err("rope table missing"))?;
        let style = style_of(rs.style);
        let layer = self
            .kv
            .get_mut(spec.kv_layer)
            .ok_or_else(|| model_err("kv layer out of range"))?;
        if layer.n_kv_heads != spec.n_kv_heads || layer.head_dim != spec.head_dim {
            return Err(model_err("attention spec does not match its KV layer"));
        }
        let gpu = &*self.gpu;
        let bufs = &mut self.bufs;
        let pos = feed_pos(&self.step, &self.pos, feed);
        let mut q = take(bufs, spec.q)?;
        let r = (|| {
            let mut k = take(bufs, spec.k)?;
            let r = ops::rope_kv(
                gpu,
                &mut q.slice,
                &mut k.slice,
                get(bufs, spec.v)?,
                &mut layer.k,
                &mut layer.v,
                &self.bt,
                &pos,
                table,
                style,
                ops::RopeKvShape {
                    ntok: n,
                    n_heads: spec.n_heads,
                    n_kv_heads: spec.n_kv_heads,
                    head_dim: spec.head_dim,
                    capacity: self.capacity,
                },
            );
            put(bufs, spec.k, k);
            r
        })();
        put(bufs, spec.q, q);
        r?;
        self.attend(spec, n, feed)
    }

    pub(super) fn attention(
        &mut self,
        spec: &AttentionSpec,
        n: usize,
        feed: Feed,
    ) -> Result<(), CudaError> {
        let gpu = Arc::clone(&self.gpu);
        let gpu = &*gpu;
        let layer = self
            .kv
            .get_mut(spec.kv_layer)
            .ok_or_else(|| model_err("kv layer out of range"))?;
        if layer.n_kv_heads != spec.n_kv_heads || layer.head_dim != spec.head_dim {
            return Err(model_err("attention spec does not match its KV layer"));
        }
        let bufs = &mut self.bufs;
        let pos = feed_pos(&self.step, &self.pos, feed);
        ops::kv_store(
            gpu,
            get(bufs, spec.k)?,
            get(bufs, spec.v)?,
            &mut layer.k,
            &mut layer.v,
            &self.bt,
            &pos,
            n,
            spec.n_kv_heads,
            spec.head_dim,
            self.capacity,
        )?;
        self.attend(spec, n, feed)
    }

    /// The attention launch of `spec` (K and V of the rows already in the cache).
    pub(super) fn attend(
        &mut self,
        spec: &AttentionSpec,
        n: usize,
        feed: Feed,
    ) -> Result<(), CudaError> {
        let lim = self.attention_rows();
        // The prompt pass's tensor-core attention, if it runs and has this head size.
        let flash = if feed == Feed::Rows {
            self.prefill_attention(spec.head_dim)
        } else {
            None
        };
        let gpu = &*self.gpu;
        let layer = self
            .kv
            .get(spec.kv_layer)
            .ok_or_else(|| model_err("kv layer out of range"))?;
        let bufs = &mut self.bufs;
        let shape = AttnShape {
            ntok: n,
            n_heads: spec.n_heads,
            n_kv_heads: spec.n_kv_heads,
            head_dim: spec.head_dim,
            capacity: self.capacity,
            window: spec.window.unwrap_or(0),
        };
        let scratch = self
            .scratch
            .get_mut(&(spec.n_heads, spec.head_dim))
            .ok_or_else(|| model_err("attention scratch missing"))?;
        let kv = ops::KvView {
            k: &layer.k,
            v: &layer.v,
            bt: &self.bt,
        };
        let mut o = take(bufs, spec.out)?;
        let r = if let Some(variant) = flash {
            // The prompt pass: every row in one tensor-core launch (flash4: its split
            // launches and the combine, partials in the decoder's kept scratch). flash4
            // sizes its splits (grid z, scratch) by the pass's last position + 1 rather
            // than the capacity: the pass's rows sit at self.len .. self.len + n, so no
            // row's mask or bits change (the splits are at absolute positions).
            // A pass whose positions all lie below one split (self.len + n <= C) runs
            // flash3: every row has one split there, and flash4 with one split gives
            // flash3's bits (kernel-check's "flash4 == flash3" lines), so no row changes and
            // the partials' round trip and the combine launch are saved.
            let variant = if variant == super::super::select::PrefillAttn::PackedSplit
                && self.len + n <= super::super::select::ATT_PREFILL_SPLIT
            {
                super::super::select::PrefillAttn::PackedF16
            } else {
                variant
            };
            let shape = if variant == super::super::select::PrefillAttn::PackedSplit {
                AttnShape {
                    capacity: (self.len + n).clamp(1, self.capacity),
                    ..shape
                }
            } else {
                shape
            };
            ops::attention_prefill_ws(
                gpu,
                variant,
                get(bufs, spec.q)?,
                &kv,
                &self.pos,
                shape,
                spec.scale,
                spec.softcap.unwrap_or(0.0),
                self.prefill.split_scratch(),
                &mut o.slice,
            )
        } else if n > lim && feed == Feed::Step {
            Err(model_err("a graphed step has one row"))
        } else {
            // Launches of at most `lim` rows (one unless a prompt pass is wider than the
            // scratch): each row's attention depends only on its own q and position.
            let w = spec.n_heads * spec.head_dim;
            let pos = feed_pos(&self.step, &self.pos, feed);
            (|| {
                let q = get(bufs, spec.q)?;
                for a in (0..n).step_by(lim.max(1)) {
                    let b = (a + lim).min(n);
                    ops::attention(
                        gpu,
                        &q.slice(a * w..b * w),
                        &kv,
                        &pos.slice(a..b),
                        AttnShape {
                            ntok: b - a,
                            ..shape
                        },
                        spec.scale,
                        spec.softcap.unwrap_or(0.0),
                        scratch,
                        &mut o.slice.slice_mut(a * w..b * w),
                    )?;
                }
                Ok(())
            })()
        };
        put(bufs, spec.out, o);
        r
    }
}

/// The positions of a launch's rows: the graphed step's one (`step`'s `[token, position]`
/// slot 1) or the rows' `pos`.
pub(super) fn feed_pos<'a>(
    step: &'a CudaSlice<i32>,
    pos: &'a CudaSlice<i32>,
    feed: Feed,
) -> CudaView<'a, i32> {
    match feed {
        Feed::Step => step.slice(1..2),
        Feed::Rows => pos.slice(..),
    }
}

/// The RoPE style of a program's rope spec.
pub(super) fn style_of(s: arch::RopeStyle) -> RopeStyle {
    match s {
        arch::RopeStyle::Adjacent => RopeStyle::Normal,
        arch::RopeStyle::Neox => RopeStyle::Neox,
    }
}
