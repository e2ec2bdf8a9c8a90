//! Reference attention: store each row's K/V in its sequence's cache, then for every
//! (row, query head) compute softmax-weighted V over the visible cache positions.
//!
//! Order of arithmetic for one (row, head), positions `j` ascending over the window:
//! `s_j = dot(q, k_j) * scale` (then `cap * tanh(s_j / cap)` when soft-capped);
//! `m = max_j s_j`; `e_j = exp(s_j - m)`; `sum = Σ e_j` in f32, ascending `j`;
//! `o = Σ e_j v_j` in f32, ascending `j`, element by element; `out = o * (1 / sum)`.
//! Parallel over (row, head) pairs only, so every output is computed by one task in this
//! fixed order whatever the thread count or batch composition.

use rayon::prelude::*;

use crate::arch::AttentionSpec;
use crate::kv::SeqKv;

use super::ReferenceError;
use super::math::{dot, softcap};

/// Where a batch row lives: index of its sequence in the batch and its position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowPos {
    pub seq: usize,
    pub pos: usize,
}

/// Write K/V rows into the caches (sequentially), then attend (in parallel).
pub fn attention(
    spec: &AttentionSpec,
    rows: &[RowPos],
    q: &[f32],
    k: &[f32],
    v: &[f32],
    caches: &mut [&mut SeqKv],
    out: &mut [f32],
) -> Result<(), ReferenceError> {
    let hd = spec.head_dim;
    let kv_row = spec.n_kv_heads * hd;
    for (r, rp) in rows.iter().enumerate() {
        let cache = caches
            .get_mut(rp.seq)
            .ok_or(ReferenceError::Internal("row of unknown sequence"))?;
        cache.write(
            spec.kv_layer,
            rp.pos,
            &k[r * kv_row..(r + 1) * kv_row],
            &v[r * kv_row..(r + 1) * kv_row],
        )?;
    }
    let caches: Vec<&SeqKv> = caches.iter().map(|c| &**c).collect();
    let group = spec.n_heads / spec.n_kv_heads;
    out.par_chunks_mut(hd).enumerate().try_for_each(|(idx, o)| {
        let (r, h) = (idx / spec.n_heads, idx % spec.n_heads);
        let rp = rows[r];
        let cache = caches[rp.seq];
        let qh = &q[(r * spec.n_heads + h) * hd..(r * spec.n_heads + h + 1) * hd];
        let kvh = h / group;
        let lo = match spec.window {
            Some(w) => (rp.pos + 1).saturating_sub(w),
            None => 0,
        };
        let mut scores = Vec::with_capacity(rp.pos + 1 - lo);
        for j in lo..=rp.pos {
            let kj = cache
                .k(spec.kv_layer, j, kvh)
                .ok_or(ReferenceError::Internal("K row missing"))?;
            let mut s = dot(qh, kj) * spec.scale;
            if let Some(cap) = spec.softcap {
                s = softcap(s, cap);
            }
            scores.push(s);
        }
        let m = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0f32;
        for s in scores.iter_mut() {
            *s = (*s - m).exp();
            sum += *s;
        }
        o.fill(0.0);
        for (j, &e) in (lo..=rp.pos).zip(&scores) {
            let vj = cache
                .v(spec.kv_layer, j, kvh)
                .ok_or(ReferenceError::Internal("V row missing"))?;
            for (a, &b) in o.iter_mut().zip(vj) {
                *a += e * b;
            }
        }
        let inv = 1.0 / sum;
        for a in o.iter_mut() {
            *a *= inv;
        }
        Ok::<(), ReferenceError>(())
    })
}
