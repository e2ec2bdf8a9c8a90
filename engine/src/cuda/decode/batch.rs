//! Batched decode across sequences (issue 8, part 3): one step feeds one token to each of B
//! decoders that share one upload of the weights ([`CudaDecoder::share`]), each with its
//! own KV cache and position, and reads each weight matrix once per group of up to
//! [`MAX_ROWS`] sequences instead of once per sequence.
//!
//! Owns [`CudaDecoder::forward_batch`] (the logits of every sequence's new token left in
//! that decoder's head buffer, exactly as [`CudaDecoder::forward`] leaves them, so
//! `argmax`, `sample`, `logits` and masks work on each decoder afterwards) and
//! [`CudaDecoder::forward_batch_argmax`] (plus the greedy token of every row by one
//! row-wise argmax launch and one download of 4 bytes per row per group).
//!
//! How a group of `n <= MAX_ROWS` sequences runs: the first decoder of the group lends its
//! activation buffers (sized for [`MAX_ROWS`] rows) as the workspace; row `r` holds
//! sequence `r`'s token and position. Every launch unit of the body's fusion plan runs over
//! the `n` rows with the very kernels of a prefill chunk (the batched matvecs are
//! bit-identical per row to the one-token kernels: kernel-check `batch` cases, the
//! `chunking` gate), except RoPE + KV store + attention, which run once per row with
//! `ntok = 1` on that row's slices, at that row's position, into and over the row's own
//! decoder's KV cache and attention scratch: the same launches, arguments and inputs as the
//! single-sequence step, hence the same bits. The head runs on the `n` rows (as in the
//! verification forwards of `decode/verify.rs`), and each row's logits are copied into
//! its decoder's head buffer. A sequence's tokens therefore do not depend on the batch it
//! runs in (the `batch` gate checks it token for token on the GPU).
//!
//! First version: the per-row attention is `2 n` launches per layer and every launch is
//! eager (no CUDA graph per batch size yet).
//!
//! A planted fault for the `batch` gate's red test ([`CudaDecoder::forward_batch_argmax_planted`])
//! negates the final hidden state of one row before the head.

use super::{CudaDecoder, Feed, MAX_ROWS, fuse, get, model_err, put, take};
use crate::arch::{self, AttentionSpec, Op};
use crate::cuda::cudarc::driver::DevicePtr;
use crate::cuda::ops::{self, AttnShape, RopeStyle};
use crate::cuda::{CudaError, shape_err};
use std::sync::Arc;

impl CudaDecoder {
    /// Append `tokens[i]` to `decs[i]`'s sequence for every `i`, in groups of up to
    /// [`MAX_ROWS`] sequences per launch, and leave each decoder's logits on the device as
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
        for (g, (group, toks)) in decs
            .chunks_mut(MAX_ROWS)
            .zip(tokens.chunks(MAX_ROWS))
            .enumerate()
        {
            let local = fault
                .and_then(|r| r.checked_sub(g * MAX_ROWS))
                .filter(|&r| r < group.len());
            out.extend(run_group(group, toks, argmax, local)?);
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

/// One group of up to [`MAX_ROWS`] sequences: body over the rows (attention per row into
/// its own decoder), head over the rows, logits rows into each decoder's head buffer.
fn run_group(
    group: &mut [&mut CudaDecoder],
    toks: &[u32],
    argmax: bool,
    fault: Option<usize>,
) -> Result<Vec<u32>, CudaError> {
    let n = group.len();
    if n == 0 || n > MAX_ROWS || toks.len() != n {
        return Err(shape_err("batch", format!("a group of {n} rows")));
    }
    let (lead, rest) = group
        .split_first_mut()
        .ok_or_else(|| model_err("empty batch group"))?;
    let lead: &mut CudaDecoder = lead;
    let mut positions = Vec::with_capacity(n);
    positions.push(lead.len);
    positions.extend(rest.iter().map(|d| d.len));
    let ids: Vec<i32> = toks.iter().map(|&t| t as i32).collect();
    let pos = positions
        .iter()
        .map(|&p| i32::try_from(p).map_err(|_| model_err("position overflows i32")))
        .collect::<Result<Vec<i32>, CudaError>>()?;
    lead.gpu
        .stream()
        .memcpy_htod(&ids, &mut lead.tokens.slice_mut(0..n))?;
    lead.gpu
        .stream()
        .memcpy_htod(&pos, &mut lead.pos.slice_mut(0..n))?;

    let body = std::mem::take(&mut lead.program.body);
    let plan = std::mem::take(&mut lead.plan);
    let res = (|| {
        for step in &plan {
            match step.fused {
                Some(fuse::Fused::RopeAttn { q_rope, attn, .. }) => {
                    rows_rope_attention(lead, rest, &body, q_rope, attn, n)?;
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

    // Each row's logits into its decoder's head buffer (what `forward` leaves).
    let l = lead.program.logits.0 as usize;
    let n_vocab = lead.program.shape.n_vocab;
    {
        let stream = Arc::clone(lead.gpu.stream());
        let src = lead.bufs[l]
            .as_ref()
            .ok_or_else(|| model_err("logits buffer missing"))?;
        let dst = lead.head_bufs[l]
            .as_mut()
            .ok_or_else(|| model_err("logits buffer missing"))?;
        stream.memcpy_dtod(&src.slice(0..n_vocab), dst)?;
        for (r, d) in rest.iter_mut().enumerate() {
            let dst = d.head_bufs[l]
                .as_mut()
                .ok_or_else(|| model_err("logits buffer missing"))?;
            let at = (r + 1) * n_vocab;
            stream.memcpy_dtod(&src.slice(at..at + n_vocab), dst)?;
        }
    }
    lead.len += 1;
    for d in rest.iter_mut() {
        d.len += 1;
    }
    if !argmax {
        return Ok(Vec::new());
    }
    if lead.mask_armed() || rest.iter().any(|d| d.mask_armed()) {
        let mut out = Vec::with_capacity(n);
        out.push(lead.argmax()?);
        for d in rest.iter_mut() {
            out.push(d.argmax()?);
        }
        return Ok(out);
    }
    lead.queue_rows_argmax_only(n)?;
    let v = lead.gpu.download(&lead.verify.argmax.slice(0..n))?;
    Ok(v.into_iter().map(|t| t.max(0) as u32).collect())
}

/// The RoPE style of a program's rope spec.
fn style_of(s: arch::RopeStyle) -> RopeStyle {
    match s {
        arch::RopeStyle::Adjacent => RopeStyle::Normal,
        arch::RopeStyle::Neox => RopeStyle::Neox,
    }
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

/// The fused unit of [`fuse::Fused::RopeAttn`] for `n` rows, one sequence per row: for row
/// `r`, `rope_kv` and the attention with one token on the row's slices, into and over the
/// KV cache of row `r`'s decoder (the lead's for row 0).
fn rows_rope_attention(
    lead: &mut CudaDecoder,
    rest: &mut [&mut CudaDecoder],
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
    let CudaDecoder {
        gpu,
        rope,
        bufs,
        kv,
        scratch,
        pos,
        capacity,
        ..
    } = lead;
    let gpu = &**gpu;
    let table = rope
        .get(&q_rope)
        .ok_or_else(|| model_err("rope table missing"))?;
    let mut q = take(bufs, spec.q)?;
    let res = (|| {
        let mut k = take(bufs, spec.k)?;
        let res = (|| {
            let mut o = take(bufs, spec.out)?;
            let res = (|| {
                let v = get(bufs, spec.v)?;
                for r in 0..n {
                    let (kv_r, scratch_r, cap) = if r == 0 {
                        (&mut *kv, &mut *scratch, *capacity)
                    } else {
                        let d = rest
                            .get_mut(r - 1)
                            .ok_or_else(|| model_err("batch row missing"))?;
                        (&mut d.kv, &mut d.scratch, d.capacity)
                    };
                    let layer = kv_r
                        .get_mut(spec.kv_layer)
                        .ok_or_else(|| model_err("kv layer out of range"))?;
                    if layer.n_kv_heads != spec.n_kv_heads || layer.head_dim != spec.head_dim {
                        return Err(model_err("attention spec does not match its KV layer"));
                    }
                    let pos_r = pos.slice(r..r + 1);
                    ops::rope_kv(
                        gpu,
                        &mut q.slice.slice_mut(r * qw..(r + 1) * qw),
                        &mut k.slice.slice_mut(r * kw..(r + 1) * kw),
                        &v.slice(r * kw..(r + 1) * kw),
                        &mut layer.k,
                        &mut layer.v,
                        &pos_r,
                        table,
                        style,
                        ops::RopeKvShape {
                            ntok: 1,
                            n_heads: spec.n_heads,
                            n_kv_heads: spec.n_kv_heads,
                            head_dim: spec.head_dim,
                            capacity: cap,
                        },
                    )?;
                    let sc = scratch_r
                        .get_mut(&(spec.n_heads, spec.head_dim))
                        .ok_or_else(|| model_err("attention scratch missing"))?;
                    attend_row(
                        gpu,
                        spec,
                        &q.slice.slice(r * qw..(r + 1) * qw),
                        layer,
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
            let (kv_r, scratch_r, cap) = if r == 0 {
                (&mut *kv, &mut *scratch, *capacity)
            } else {
                let d = rest
                    .get_mut(r - 1)
                    .ok_or_else(|| model_err("batch row missing"))?;
                (&mut d.kv, &mut d.scratch, d.capacity)
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
        &layer.k,
        &layer.v,
        pos,
        shape,
        spec.scale,
        spec.softcap.unwrap_or(0.0),
        scratch,
        out,
    )
    .map(|_| ())
}
