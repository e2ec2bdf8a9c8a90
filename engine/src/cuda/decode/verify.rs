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
use crate::cuda::cudarc::driver::CudaSlice;
use crate::cuda::{CudaError, Gpu, ops, shape_err};

/// Device buffers of the verification forwards.
pub(super) struct VerifyBufs {
    /// Argmax of each row of a chunk.
    argmax: CudaSlice<i32>,
}

impl VerifyBufs {
    pub(super) fn new(gpu: &Gpu) -> Result<Self, CudaError> {
        Ok(Self {
            argmax: gpu.zeros(MAX_ROWS)?,
        })
    }
}

impl CudaDecoder {
    /// Append `tokens` in one forward (chunks of [`MAX_ROWS`]) and return the greedy token
    /// after each of them (the device argmax of every row; ties to the smallest id).
    pub fn forward_rows_argmax(&mut self, tokens: &[u32]) -> Result<Vec<u32>, CudaError> {
        let mut out = Vec::with_capacity(tokens.len());
        self.forward_rows(tokens, |dec, n| {
            let l = dec.program.logits;
            let n_vocab = dec.program.shape.n_vocab;
            let b = dec.bufs[l.0 as usize]
                .as_ref()
                .ok_or_else(|| model_err("logits buffer missing"))?;
            ops::argmax(
                &dec.gpu,
                &b.slice(0..n * n_vocab),
                n,
                n_vocab,
                &mut dec.verify.argmax,
            )?;
            let v = dec.gpu.download(&dec.verify.argmax.slice(0..n))?;
            out.extend(v.into_iter().map(|t| t.max(0) as u32));
            Ok(())
        })?;
        Ok(out)
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
        for chunk in tokens.chunks(MAX_ROWS) {
            let n = chunk.len();
            let ids: Vec<i32> = chunk.iter().map(|&t| t as i32).collect();
            let pos: Vec<i32> = (0..n).map(|i| (self.len + i) as i32).collect();
            self.gpu
                .stream()
                .memcpy_htod(&ids, &mut self.tokens.slice_mut(0..n))?;
            self.gpu
                .stream()
                .memcpy_htod(&pos, &mut self.pos.slice_mut(0..n))?;
            self.body_pass(n, Feed::Rows)?;
            self.len += n;
            self.rows_head_pass(n)?;
            read(self, n)?;
        }
        Ok(())
    }

    /// Queue the head ops on `n` rows of the body's buffers.
    fn rows_head_pass(&mut self, n: usize) -> Result<(), CudaError> {
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
