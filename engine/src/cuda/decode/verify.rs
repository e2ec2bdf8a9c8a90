//! Verification forwards of speculative decoding (issue 10): one forward of `k + 1` tokens
//! whose head runs on EVERY row, not only the last.
//!
//! Owns [`CudaDecoder::forward_rows_argmax`] (the device argmax of each row: 4 bytes per row
//! come back, what greedy verification needs) and [`CudaDecoder::forward_rows_logits`] (the
//! logits of each row, for sampled verification), and [`CudaDecoder::truncate`] (rollback
//! of rejected rows: the length is set back and the KV rows past it are overwritten by the
//! next tokens fed).
//!
//! A chunk of up to [`MAX_ROWS`] tokens runs the body exactly as [`CudaDecoder::forward`]
//! does, then the head ops on all `n` rows of the body's buffers (which are sized for
//! [`MAX_ROWS`] rows, the logits buffer included). Every kernel is batch-invariant (a row's
//! arithmetic does not depend on the other rows of the launch; kernel-check), so row `i`'s
//! logits are bit for bit those of a plain one-token step at that position: greedy
//! speculative output is token-identical to plain decoding. The `spec-cuda` gate checks the
//! bits and the tokens on the GPU.
//!
//! After one of these forwards the head's one-row buffers are stale:
//! [`CudaDecoder::logits`] and [`CudaDecoder::argmax`] describe the last [`CudaDecoder::forward`]
//! or graphed step only.

use super::{CudaDecoder, Feed, MAX_ROWS, model_err};
use crate::cuda::cudarc::driver::{CudaGraph, CudaSlice, sys};
use crate::cuda::{CudaError, Gpu, ops, shape_err};

/// Device buffers and captured graphs of the verification forwards.
pub(super) struct VerifyBufs {
    /// Argmax of each row of a chunk (also used by the batched step, `decode/batch.rs`).
    pub(super) argmax: CudaSlice<i32>,
    /// The arg-max verification forward of `n` rows captured as a CUDA graph (index
    /// `n - 1`), made on first use. Like the step graph it records the addresses of the
    /// decoder's buffers (allocated once, never replaced) and reads the token ids and
    /// positions from the `tokens` / `pos` device buffers, rewritten before each replay.
    graphs: Vec<Option<CudaGraph>>,
    /// Why capturing failed, if it did (the eager forward is used from then on).
    capture_error: Option<String>,
}

impl VerifyBufs {
    pub(super) fn new(gpu: &Gpu) -> Result<Self, CudaError> {
        Ok(Self {
            argmax: gpu.zeros(MAX_ROWS)?,
            graphs: (0..MAX_ROWS).map(|_| None).collect(),
            capture_error: None,
        })
    }
}

impl CudaDecoder {
    /// Append `tokens` in one forward (chunks of [`MAX_ROWS`]) and return the greedy token
    /// after each of them (the device argmax of every row; ties to the smallest id).
    pub fn forward_rows_argmax(&mut self, tokens: &[u32]) -> Result<Vec<u32>, CudaError> {
        let mut out = Vec::with_capacity(tokens.len());
        self.forward_rows(tokens, |dec, n| {
            dec.queue_rows_argmax_only(n)?;
            let v = dec.gpu.download(&dec.verify.argmax.slice(0..n))?;
            out.extend(v.into_iter().map(|t| t.max(0) as u32));
            Ok(())
        })?;
        Ok(out)
    }

    /// [`CudaDecoder::forward_rows_argmax`] with each chunk of `n` rows replayed from a
    /// captured graph (captured on first use of each `n`; the same launches as the eager
    /// forward, so the same bits). Falls back to the eager forward for good when a capture
    /// fails ([`CudaDecoder::rows_graph_error`] says why).
    pub fn forward_rows_argmax_graphed(&mut self, tokens: &[u32]) -> Result<Vec<u32>, CudaError> {
        if self.verify.capture_error.is_some() {
            return self.forward_rows_argmax(tokens);
        }
        self.check_feed(tokens)?;
        let mut out = Vec::with_capacity(tokens.len());
        for chunk in tokens.chunks(MAX_ROWS) {
            let n = chunk.len();
            if self.verify.graphs.get(n - 1).is_some_and(Option::is_none) {
                match self.capture_rows(n) {
                    Ok(g) => self.verify.graphs[n - 1] = Some(g),
                    Err(e) => {
                        self.verify.capture_error = Some(e.to_string());
                        let rest = &tokens[out.len()..];
                        out.extend(self.forward_rows_argmax(rest)?);
                        return Ok(out);
                    }
                }
            }
            self.upload_rows(chunk)?;
            self.verify.graphs[n - 1]
                .as_ref()
                .ok_or_else(|| model_err("rows graph missing after capture"))?
                .launch()?;
            self.len += n;
            let v = self.gpu.download(&self.verify.argmax.slice(0..n))?;
            out.extend(v.into_iter().map(|t| t.max(0) as u32));
        }
        Ok(out)
    }

    /// Why capturing a verification forward failed, if it did.
    pub fn rows_graph_error(&self) -> Option<&str> {
        self.verify.capture_error.as_deref()
    }

    /// Capture the arg-max verification forward of `n` rows (nothing runs).
    fn capture_rows(&mut self, n: usize) -> Result<CudaGraph, CudaError> {
        let stream = std::sync::Arc::clone(self.gpu.stream());
        stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
        let recorded = self.queue_rows_argmax(n);
        // Always end the capture, so the stream is usable again whatever happened.
        let ended = stream.end_capture(sys::CUgraphInstantiate_flags(0));
        recorded?;
        let g = ended?.ok_or_else(|| model_err("stream capture produced no graph"))?;
        g.upload()?;
        Ok(g)
    }

    /// Queue body, head on every row and the arg-max of each row for `n` rows.
    fn queue_rows_argmax(&mut self, n: usize) -> Result<(), CudaError> {
        self.body_pass(n, Feed::Rows)?;
        self.rows_head_pass(n)?;
        self.queue_rows_argmax_only(n)
    }

    /// Queue the arg-max of the first `n` logits rows into the verification buffer.
    pub(super) fn queue_rows_argmax_only(&mut self, n: usize) -> Result<(), CudaError> {
        let l = self.program.logits;
        let n_vocab = self.program.shape.n_vocab;
        let b = self.bufs[l.0 as usize]
            .as_ref()
            .ok_or_else(|| model_err("logits buffer missing"))?;
        ops::argmax(
            &self.gpu,
            &b.slice(0..n * n_vocab),
            n,
            n_vocab,
            &mut self.verify.argmax,
        )
    }

    /// Write a chunk's token ids and positions (from the current length) to the device.
    fn upload_rows(&mut self, chunk: &[u32]) -> Result<(), CudaError> {
        let n = chunk.len();
        let ids: Vec<i32> = chunk.iter().map(|&t| t as i32).collect();
        let pos: Vec<i32> = (0..n).map(|i| (self.len + i) as i32).collect();
        self.gpu
            .stream()
            .memcpy_htod(&ids, &mut self.tokens.slice_mut(0..n))?;
        self.gpu
            .stream()
            .memcpy_htod(&pos, &mut self.pos.slice_mut(0..n))?;
        Ok(())
    }

    /// Append `tokens` in one forward (chunks of [`MAX_ROWS`]) and return the logits after
    /// each of them (downloads `tokens.len() * n_vocab` floats).
    pub fn forward_rows_logits(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>, CudaError> {
        let mut out = Vec::with_capacity(tokens.len());
        self.forward_rows(tokens, |dec, n| {
            let l = dec.program.logits;
            let n_vocab = dec.program.shape.n_vocab;
            let b = dec.bufs[l.0 as usize]
                .as_ref()
                .ok_or_else(|| model_err("logits buffer missing"))?;
            let all = dec.gpu.download(&b.slice(0..n * n_vocab))?;
            out.extend(all.chunks(n_vocab).map(<[f32]>::to_vec));
            Ok(())
        })?;
        Ok(out)
    }

    /// Feed `tokens` chunk by chunk: body, head on every row, then `read(self, rows)`.
    fn forward_rows(
        &mut self,
        tokens: &[u32],
        mut read: impl FnMut(&mut CudaDecoder, usize) -> Result<(), CudaError>,
    ) -> Result<(), CudaError> {
        self.check_feed(tokens)?;
        for chunk in tokens.chunks(MAX_ROWS) {
            let n = chunk.len();
            self.upload_rows(chunk)?;
            self.body_pass(n, Feed::Rows)?;
            self.len += n;
            self.rows_head_pass(n)?;
            read(self, n)?;
        }
        Ok(())
    }

    /// Refuse an empty feed, one past the KV capacity or with ids outside the vocabulary.
    fn check_feed(&self, tokens: &[u32]) -> Result<(), CudaError> {
        if tokens.is_empty() {
            return Err(shape_err("decoder", "no tokens to feed"));
        }
        if self.len + tokens.len() > self.capacity {
            return Err(shape_err(
                "decoder",
                format!(
                    "{} + {} tokens exceed the KV capacity {}",
                    self.len,
                    tokens.len(),
                    self.capacity
                ),
            ));
        }
        let n_vocab = self.program.shape.n_vocab;
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= n_vocab) {
            return Err(shape_err(
                "decoder",
                format!("token {t} outside the vocabulary ({n_vocab})"),
            ));
        }
        Ok(())
    }

    /// Queue the head ops on `n` rows of the body's buffers.
    pub(super) fn rows_head_pass(&mut self, n: usize) -> Result<(), CudaError> {
        let head = std::mem::take(&mut self.program.head);
        let base = self.program.body.len();
        let res = (|| {
            for (i, op) in head.iter().enumerate() {
                self.run_op(base + i, op, n, false, Feed::Rows)?;
            }
            Ok::<(), CudaError>(())
        })();
        self.program.head = head;
        res
    }
}
