//! Batched decode across sequences (issue 8, part 3): one step feeds one token to each of B
//! decoders that share one upload of the weights ([`CudaDecoder::share`]), each with its
//! own KV cache and position, and reads each weight matrix once per group of up to
//! [`BATCH_ROWS`] = 64 sequences (one launch per fusion unit over all the group's rows).
//!
//! Owns [`CudaDecoder::forward_batch`] (the logits of every sequence's new token left in
//! that decoder's head buffer, exactly as [`CudaDecoder::forward`] leaves them, so
//! `argmax`, `sample`, `logits` and masks work on each decoder afterwards) and
//! [`CudaDecoder::forward_batch_argmax`] (plus the greedy token of every row by one
//! row-wise argmax launch and one download of 4 bytes per row per group).
//!
//! How a group of `n <= BATCH_ROWS` sequences runs: a workspace of activation buffers
//! ([`BatchWs`]: one per upload of the weights, in a slot every decoder of the upload
//! shares, made on the first batched step and grown to the largest row count seen, up to
//! [`BATCH_ROWS`]) is swapped in for the first decoder's own buffers (and its mmv staging)
//! while the step runs (as the prompt pass swaps its buffers, so a captured graph's
//! addresses stay valid); row `r` holds sequence `r`'s token and position. Every launch
//! unit of the body's fusion plan runs over the `n` rows in one launch with the batched
//! matvec kernels (`_tb_` entry points: bit-identical per row to the one-token kernels,
//! kernel-check `batch` cases for 1..8, 13 and 64 rows per launch).
//! RoPE + KV store and the attention run once per layer for all `n` rows
//! (`rope_kv_rows`, `attn_rows*`): each row's blocks take that row's KV cache from a
//! per-layer pointer table (uploaded once per step with the tokens, positions and
//! capacities) and run the code of the one-row kernels on it, hence the same bits
//! (kernel-check `attention_rows` cases: the batched launch vs one launch per row, rows at
//! different lengths). The head runs on the `n` rows, and after the step each row's logits
//! are copied into its decoder's head buffer (eagerly, outside the graph: [`copy_logits`]).
//! A sequence's tokens therefore do not depend on the batch it runs in (the `batch` gate
//! checks it token for token on the GPU).
//!
//! Launches per step of an L-layer Llama body: the fusion plan's matvec units (5 per
//! layer) + 2 per layer for RoPE/KV/attention (more attention launches only when the
//! attention scratch budget [`BATCH_ATT_SCRATCH_BYTES`] holds fewer rows than the group at
//! a long capacity), whatever `n`; the first version took the matvec units once per 8
//! rows and `2 n` attention launches per layer. By default ([`batch_graphs_from_env`];
//! `ASSAY_BATCH_GRAPH=0` makes every launch eager, as before session 19's A/B: graphs ahead
//! by 0.3% to 2.5% at 4, 16 and 64 rows) a group's step is captured once as a CUDA graph
//! per row count (and argmax / mmv / matvec modes: [`graph::GraphKey`]) in the workspace
//! and replayed for any group of that size after the per-step uploads (tokens, positions,
//! KV tables, capacities), the attention grids then spanning every split of the capacity
//! (the same bits). The step stays exact-B (no padding rows); a continuous batch whose
//! membership changes replays the graph of its new size (at most [`BatchGraphs::MAX`]
//! graphs kept, least recently used evicted). An attention the plan did
//! not fuse with its RoPE (no model of the registry today) still runs per row.
//!
//! A planted fault for the `batch` gate's red test ([`CudaDecoder::forward_batch_argmax_planted`])
//! negates the final hidden state of one row before the head (that step always runs
//! eagerly, never captured).

use super::attention::style_of;
use super::{CudaDecoder, Feed, MAX_ROWS, fuse, get, model_err, put, take};
use crate::arch::{AttentionSpec, Op};
use crate::cuda::cudarc::driver::DevicePtr;
use crate::cuda::ops::{self, AttnShape, KvRowsDev};
use crate::cuda::sources::consts::MV_LAUNCH_MAX_TOK;
use crate::cuda::{CudaError, shape_err};
use std::sync::Arc;

mod graph;
mod ws;

pub use graph::BatchGraphStats;
pub use graph::batch_graphs_from_env;
use graph::{BatchGraphs, graph_step};
pub(super) use ws::{BatchSlot, BatchWs};
use ws::{lock_slot, take_ws, upload_step};

/// Most sequences one batched step runs in one launch per unit (larger batches run in
/// groups of this many).
pub const BATCH_ROWS: usize = MV_LAUNCH_MAX_TOK;

/// Most bytes of split-KV attention scratch the batch workspace holds per attention shape:
/// `rows x n_heads x ceil(capacity / ATT_SPLIT) x (head_dim + 2) x 4`. Llama-3.1-8B (32
/// heads of 128): all 64 rows in one launch up to a capacity of ~16k positions (63 at
/// 16384), fewer
/// rows per launch beyond (at least [`MAX_ROWS`]).
pub const BATCH_ATT_SCRATCH_BYTES: usize = 256 << 20;

/// The row ranges of a batch of `b` sequences: groups of at most [`BATCH_ROWS`].
fn groups(b: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    (0..b)
        .step_by(BATCH_ROWS)
        .map(move |a| a..(a + BATCH_ROWS).min(b))
}

impl CudaDecoder {
    /// Append `tokens[i]` to `decs[i]`'s sequence for every `i`, in groups of up to
    /// [`BATCH_ROWS`] sequences per launch, and leave each decoder's logits on the device as
    /// [`CudaDecoder::forward`] does. The decoders must share weights (made by
    /// [`CudaDecoder::share`] from one upload). On an error the decoders of the groups
    /// already run have advanced (the caller truncates them back, as the served executor
    /// does); a group that failed has not.
    pub fn forward_batch(decs: &mut [&mut CudaDecoder], tokens: &[u32]) -> Result<(), CudaError> {
        Self::batch_step(decs, tokens, false, None).map(|_| ())
    }

    /// [`CudaDecoder::forward_batch`], then the greedy token of every sequence (ties to the
    /// smallest id). A decoder with an armed mask ([`CudaDecoder::set_mask`]) gets its
    /// token from its own [`CudaDecoder::argmax`], which applies the mask.
    pub fn forward_batch_argmax(
        decs: &mut [&mut CudaDecoder],
        tokens: &[u32],
    ) -> Result<Vec<u32>, CudaError> {
        Self::batch_step(decs, tokens, true, None)
    }

    /// [`CudaDecoder::forward_batch_argmax`] with a planted fault: the final hidden state
    /// of batch row `row` is negated before the head. For the `batch` gate's red test only.
    pub fn forward_batch_argmax_planted(
        decs: &mut [&mut CudaDecoder],
        tokens: &[u32],
        row: usize,
    ) -> Result<Vec<u32>, CudaError> {
        Self::batch_step(decs, tokens, true, Some(row))
    }

    fn batch_step(
        decs: &mut [&mut CudaDecoder],
        tokens: &[u32],
        argmax: bool,
        fault: Option<usize>,
    ) -> Result<Vec<u32>, CudaError> {
        check_batch(decs, tokens)?;
        let mut out = Vec::with_capacity(if argmax { tokens.len() } else { 0 });
        for range in groups(decs.len()) {
            let local = fault
                .and_then(|r| r.checked_sub(range.start))
                .filter(|&r| r < range.len());
            let toks = &tokens[range.clone()];
            out.extend(run_group(&mut decs[range], toks, argmax, local)?);
        }
        Ok(out)
    }
}

/// Refuse a batch that does not fit: lengths, shared weights, capacity, vocabulary.
fn check_batch(decs: &[&mut CudaDecoder], tokens: &[u32]) -> Result<(), CudaError> {
    if decs.is_empty() || decs.len() != tokens.len() {
        return Err(shape_err(
            "batch",
            format!("{} decoders for {} tokens", decs.len(), tokens.len()),
        ));
    }
    let first = &decs[0];
    let n_vocab = first.program.shape.n_vocab;
    for (i, (d, &t)) in decs.iter().zip(tokens).enumerate() {
        if !d.shares_weights_with(first) {
            return Err(model_err(format!(
                "batch row {i} does not share the weights of row 0"
            )));
        }
        if d.mmv_on() != first.mmv_on() {
            return Err(model_err(format!(
                "batch row {i} runs its decode products on {} and row 0 on {} (CudaDecoder::set_mmv)",
                if d.mmv_on() { "mmv" } else { "the matvec" },
                if first.mmv_on() { "mmv" } else { "the matvec" }
            )));
        }
        if d.len >= d.capacity {
            return Err(model_err(format!(
                "batch row {i}: the KV cache is full ({} positions)",
                d.capacity
            )));
        }
        if t as usize >= n_vocab {
            return Err(model_err(format!(
                "batch row {i}: token {t} outside the vocabulary ({n_vocab})"
            )));
        }
    }
    Ok(())
}

/// One group of up to [`BATCH_ROWS`] sequences: body over the rows in the workspace of
/// the weights' upload (its buffers swapped in for the first decoder's), head over the
/// rows, then each row's logits into its decoder's head buffer ([`copy_logits`]). The
/// workspace's slot stays locked for the whole step.
fn run_group(
    group: &mut [&mut CudaDecoder],
    toks: &[u32],
    argmax: bool,
    fault: Option<usize>,
) -> Result<Vec<u32>, CudaError> {
    let n = group.len();
    if n == 0 || n > BATCH_ROWS || toks.len() != n {
        return Err(shape_err("batch", format!("a group of {n} rows")));
    }
    let need = group.iter().map(|d| d.capacity).max().unwrap_or(1);
    let (lead, rest) = group
        .split_first_mut()
        .ok_or_else(|| model_err("empty batch group"))?;
    let lead: &mut CudaDecoder = lead;
    let slot = Arc::clone(&lead.batch);
    let mut held = lock_slot(&slot);
    let mut ws = take_ws(&mut held, lead, need, n)?;
    let graphed = fault.is_none() && batch_graphs_from_env()?;
    let res = upload_step(lead, rest, &mut ws, toks)
        .and_then(|()| {
            if graphed && graph_step(lead, rest, &mut ws, argmax, n)? {
                return Ok(());
            }
            lead.swap_batch(&mut ws);
            let r = group_body(lead, rest, &mut ws, argmax, fault, n);
            lead.swap_batch(&mut ws);
            r
        })
        .and_then(|()| copy_logits(lead, rest, &ws));
    let argmax_dev = if res.is_ok() && argmax {
        let masked = lead.mask_armed() || rest.iter().any(|d| d.mask_armed());
        (!masked)
            .then(|| lead.gpu.download(&ws.argmax.slice(0..n)))
            .transpose()
    } else {
        Ok(None)
    };
    *held = Some(ws);
    drop(held);
    res?;
    let argmax_dev = argmax_dev?;
    lead.len += 1;
    for d in rest.iter_mut() {
        d.len += 1;
    }
    if !argmax {
        return Ok(Vec::new());
    }
    if let Some(v) = argmax_dev {
        return Ok(v.into_iter().map(|t| t.max(0) as u32).collect());
    }
    let mut out = Vec::with_capacity(n);
    out.push(lead.argmax()?);
    for d in rest.iter_mut() {
        out.push(d.argmax()?);
    }
    Ok(out)
}

/// Each row's logits from the workspace into its decoder's head buffer (what `forward`
/// leaves), after the step (graphed or eager) was queued: `n` device-to-device copies on
/// the stream, outside any graph, so that a captured step holds no decoder's buffer.
fn copy_logits(
    lead: &mut CudaDecoder,
    rest: &mut [&mut CudaDecoder],
    ws: &BatchWs,
) -> Result<(), CudaError> {
    let l = lead.program.logits.0 as usize;
    let n_vocab = lead.program.shape.n_vocab;
    let stream = Arc::clone(lead.gpu.stream());
    let src = ws
        .buf(l)
        .ok_or_else(|| model_err("logits buffer missing"))?;
    if src.len() < (rest.len() + 1) * n_vocab {
        return Err(model_err("batch workspace smaller than the group's logits"));
    }
    let rows = std::iter::once(&mut *lead).chain(rest.iter_mut().map(|d| &mut **d));
    for (r, d) in rows.enumerate() {
        let dst = d.head_bufs[l]
            .as_mut()
            .ok_or_else(|| model_err("logits buffer missing"))?;
        let at = r * n_vocab;
        stream.memcpy_dtod(&src.slice(at..at + n_vocab), dst)?;
    }
    Ok(())
}

/// The group's launches with the workspace's buffers swapped in: the body's units, the
/// planted fault, the head over the rows and (for `argmax`) the row-wise argmax into the
/// workspace. Every buffer written or read is the workspace's or the shared weights'
/// (tokens, positions, KV tables as uploaded data), except the KV caches and scratch of an
/// unfused attention ([`rows_attention`]; its graphs are keyed by the decoders).
fn group_body(
    lead: &mut CudaDecoder,
    rest: &mut [&mut CudaDecoder],
    ws: &mut BatchWs,
    argmax: bool,
    fault: Option<usize>,
    n: usize,
) -> Result<(), CudaError> {
    let body = std::mem::take(&mut lead.program.body);
    let plan = std::mem::take(&mut lead.plan);
    let res = (|| {
        for step in &plan {
            match step.fused {
                Some(fuse::Fused::RopeAttn { q_rope, attn, .. }) => {
                    rope_attention_rows(lead, ws, &body, q_rope, attn, n)?;
                }
                Some(f) => lead.run_fused(f, n)?,
                None => {
                    for (i, op) in body.iter().enumerate().skip(step.first).take(step.len) {
                        match op {
                            Op::Attention(spec) => rows_attention(lead, rest, spec, n)?,
                            _ => lead.run_op(i, op, n, false, Feed::Rows)?,
                        }
                    }
                }
            }
        }
        Ok::<(), CudaError>(())
    })();
    lead.plan = plan;
    lead.program.body = body;
    res?;

    if let Some(r) = fault {
        let h = lead.program.hidden;
        let w = lead.program.buffer(h).width;
        let gpu = Arc::clone(&lead.gpu);
        let b = lead.bufs[h.0 as usize]
            .as_mut()
            .ok_or_else(|| model_err("hidden buffer missing"))?;
        ops::scale_inplace(&gpu, &mut b.slice_mut(r * w..(r + 1) * w), -1.0, w)?;
    }
    lead.rows_head_pass(n)?;

    if argmax {
        let l = lead.program.logits.0 as usize;
        let n_vocab = lead.program.shape.n_vocab;
        let src = lead.bufs[l]
            .as_ref()
            .ok_or_else(|| model_err("logits buffer missing"))?;
        ops::argmax(
            &lead.gpu,
            &src.slice(0..n * n_vocab),
            n,
            n_vocab,
            &mut ws.argmax,
        )?;
    }
    Ok(())
}

/// Widths of q / k / v / out rows of an attention, checked against the buffers.
fn attn_widths(lead: &CudaDecoder, spec: &AttentionSpec) -> Result<(usize, usize), CudaError> {
    let qw = spec.n_heads * spec.head_dim;
    let kw = spec.n_kv_heads * spec.head_dim;
    let width = |b| lead.program.buffer(b).width;
    if width(spec.q) != qw || width(spec.out) != qw || width(spec.k) != kw || width(spec.v) != kw {
        return Err(model_err(
            "attention buffers do not match the attention's shape",
        ));
    }
    Ok((qw, kw))
}

/// The fused unit of [`fuse::Fused::RopeAttn`] for the group's `n` rows, one sequence per
/// row: one `rope_kv_rows` launch (each row's k and v into its own cache at its position)
/// and the attention of all rows over their own caches in launches of `att_rows` rows.
fn rope_attention_rows(
    lead: &mut CudaDecoder,
    ws: &mut BatchWs,
    body: &[Op],
    q_rope: usize,
    attn: usize,
    n: usize,
) -> Result<(), CudaError> {
    let (Some(Op::Rope { rope: rs, .. }), Some(Op::Attention(spec))) =
        (body.get(q_rope), body.get(attn))
    else {
        return Err(model_err("rope + attention unit does not match the body"));
    };
    let (qw, kw) = attn_widths(lead, spec)?;
    let style = style_of(rs.style);
    let layer = lead
        .kv
        .get(spec.kv_layer)
        .ok_or_else(|| model_err("kv layer out of range"))?;
    if layer.n_kv_heads != spec.n_kv_heads || layer.head_dim != spec.head_dim {
        return Err(model_err("attention spec does not match its KV layer"));
    }
    if spec.kv_layer >= ws.n_layers || n > BATCH_ROWS {
        return Err(model_err("batch workspace does not fit the step"));
    }
    let CudaDecoder {
        gpu,
        rope,
        bufs,
        pos,
        ..
    } = lead;
    let gpu = &**gpu;
    let table = rope
        .get(&q_rope)
        .ok_or_else(|| model_err("rope table missing"))?;
    let BatchWs {
        kvp,
        caps,
        scratch,
        capacity,
        att_rows,
        max_pos,
        ..
    } = ws;
    let max_pos = (!ws.capturing).then_some(*max_pos);
    let (capacity, att_rows) = (*capacity, (*att_rows).max(1));
    let sc = scratch
        .get_mut(&(spec.n_heads, spec.head_dim))
        .ok_or_else(|| model_err("attention scratch missing"))?;
    let base = spec.kv_layer * 3 * BATCH_ROWS;
    let rows_dev = |a: usize, b: usize| (kvp.slice(base + 3 * a..base + 3 * b), caps.slice(a..b));
    let mut q = take(bufs, spec.q)?;
    let res = (|| {
        let mut k = take(bufs, spec.k)?;
        let res = (|| {
            let mut o = take(bufs, spec.out)?;
            let res = (|| {
                let v = get(bufs, spec.v)?;
                let (p, c) = rows_dev(0, n);
                ops::rope_kv_rows(
                    gpu,
                    &mut q.slice.slice_mut(0..n * qw),
                    &mut k.slice.slice_mut(0..n * kw),
                    &v.slice(0..n * kw),
                    &KvRowsDev {
                        ptrs: &p,
                        caps: &c,
                        capacity,
                        max_pos,
                    },
                    &pos.slice(0..n),
                    table,
                    style,
                    ops::RopeKvShape {
                        ntok: n,
                        n_heads: spec.n_heads,
                        n_kv_heads: spec.n_kv_heads,
                        head_dim: spec.head_dim,
                        capacity,
                    },
                )?;
                for a in (0..n).step_by(att_rows) {
                    let b = (a + att_rows).min(n);
                    let (p, c) = rows_dev(a, b);
                    ops::attention_rows(
                        gpu,
                        &q.slice.slice(a * qw..b * qw),
                        &KvRowsDev {
                            ptrs: &p,
                            caps: &c,
                            capacity,
                            max_pos,
                        },
                        &pos.slice(a..b),
                        AttnShape {
                            ntok: b - a,
                            n_heads: spec.n_heads,
                            n_kv_heads: spec.n_kv_heads,
                            head_dim: spec.head_dim,
                            capacity,
                            window: spec.window.unwrap_or(0),
                        },
                        spec.scale,
                        spec.softcap.unwrap_or(0.0),
                        sc,
                        &mut o.slice.slice_mut(a * qw..b * qw),
                    )?;
                }
                Ok(())
            })();
            put(bufs, spec.out, o);
            res
        })();
        put(bufs, spec.k, k);
        res
    })();
    put(bufs, spec.q, q);
    res
}

/// An unfused attention op for `n` rows, one sequence per row: the KV store and the
/// attention with one token per row, into and over row `r`'s decoder's cache.
fn rows_attention(
    lead: &mut CudaDecoder,
    rest: &mut [&mut CudaDecoder],
    spec: &AttentionSpec,
    n: usize,
) -> Result<(), CudaError> {
    let (qw, kw) = attn_widths(lead, spec)?;
    let CudaDecoder {
        gpu,
        bufs,
        kv,
        bt,
        scratch,
        pos,
        capacity,
        ..
    } = lead;
    let gpu = &**gpu;
    let mut o = take(bufs, spec.out)?;
    let res = (|| {
        let (q, k, v) = (get(bufs, spec.q)?, get(bufs, spec.k)?, get(bufs, spec.v)?);
        for r in 0..n {
            let (kv_r, bt_r, scratch_r, cap) = if r == 0 {
                (&mut *kv, &*bt, &mut *scratch, *capacity)
            } else {
                let d = rest
                    .get_mut(r - 1)
                    .ok_or_else(|| model_err("batch row missing"))?;
                (&mut d.kv, &d.bt, &mut d.scratch, d.capacity)
            };
            let layer = kv_r
                .get_mut(spec.kv_layer)
                .ok_or_else(|| model_err("kv layer out of range"))?;
            if layer.n_kv_heads != spec.n_kv_heads || layer.head_dim != spec.head_dim {
                return Err(model_err("attention spec does not match its KV layer"));
            }
            let pos_r = pos.slice(r..r + 1);
            ops::kv_store(
                gpu,
                &k.slice(r * kw..(r + 1) * kw),
                &v.slice(r * kw..(r + 1) * kw),
                &mut layer.k,
                &mut layer.v,
                bt_r,
                &pos_r,
                1,
                spec.n_kv_heads,
                spec.head_dim,
                cap,
            )?;
            let sc = scratch_r
                .get_mut(&(spec.n_heads, spec.head_dim))
                .ok_or_else(|| model_err("attention scratch missing"))?;
            attend_row(
                gpu,
                spec,
                &q.slice(r * qw..(r + 1) * qw),
                layer,
                bt_r,
                &pos_r,
                cap,
                sc,
                &mut o.slice.slice_mut(r * qw..(r + 1) * qw),
            )?;
        }
        Ok(())
    })();
    put(bufs, spec.out, o);
    res
}

/// The attention launch of one row (one query token), as [`CudaDecoder::attend`] makes it
/// for a one-token step.
#[allow(clippy::too_many_arguments)]
fn attend_row(
    gpu: &crate::cuda::Gpu,
    spec: &AttentionSpec,
    q: &dyn DevicePtr<f32>,
    layer: &super::LayerKv,
    bt: &dyn DevicePtr<i32>,
    pos: &dyn DevicePtr<i32>,
    capacity: usize,
    scratch: &mut ops::AttnScratch,
    out: &mut dyn crate::cuda::cudarc::driver::DevicePtrMut<f32>,
) -> Result<(), CudaError> {
    let shape = AttnShape {
        ntok: 1,
        n_heads: spec.n_heads,
        n_kv_heads: spec.n_kv_heads,
        head_dim: spec.head_dim,
        capacity,
        window: spec.window.unwrap_or(0),
    };
    ops::attention(
        gpu,
        q,
        &ops::KvView {
            k: &layer.k,
            v: &layer.v,
            bt,
        },
        pos,
        shape,
        spec.scale,
        spec.softcap.unwrap_or(0.0),
        scratch,
        out,
    )
    .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_cover_the_batch_in_launches_of_batch_rows() {
        assert_eq!(groups(1).collect::<Vec<_>>(), vec![0..1]);
        assert_eq!(groups(BATCH_ROWS).collect::<Vec<_>>(), vec![0..BATCH_ROWS]);
        assert_eq!(
            groups(2 * BATCH_ROWS + 5).collect::<Vec<_>>(),
            vec![
                0..BATCH_ROWS,
                BATCH_ROWS..2 * BATCH_ROWS,
                2 * BATCH_ROWS..2 * BATCH_ROWS + 5
            ]
        );
        assert_eq!(groups(0).count(), 0);
        assert_eq!(BATCH_ROWS, 64);
    }
}
