//! The CUDA decoder as a speculative [`Target`] (and, wrapped by [`super::DraftModel`], as
//! a draft model).
//!
//! Verification runs the `k + 1` rows in one forward whose head covers every row
//! ([`CudaDecoder::forward_rows_argmax`]: one id per row comes back for greedy decoding;
//! [`CudaDecoder::forward_rows_logits`] for sampled decoding), rollback sets the decoder's
//! length back ([`CudaDecoder::truncate`]). When `graphed`, every one-token step replays
//! the decoder's captured step graph (as `assay generate` does for plain decoding; for a
//! step whose logits are wanted, e.g. a draft model's confidence cut, they are downloaded
//! after the replay) and arg-max verification forwards replay a graph captured per row
//! count ([`CudaDecoder::forward_rows_argmax_graphed`]); the kernels are those of the
//! eager forwards, so the bits are the same (the `graph` and `spec-cuda` gates).
//!
//! A forward of up to [`MAX_ROWS`] rows reads the weights once ([`Target::rows_per_pass`]),
//! so adaptive depth drafts at most `MAX_ROWS - 1` tokens on this target.

use crate::cuda::CudaDecoder;
use crate::cuda::decode::MAX_ROWS;

use super::{SpecError, Target};

/// A [`CudaDecoder`] (one sequence) as a target.
pub struct CudaTarget {
    dec: Box<CudaDecoder>,
    graphed: bool,
    /// Chunk sizes whose verification graph this target has run (bit `n - 1`): the
    /// decoder captures one on a size's first use ([`Target::last_forward_setup`]; a
    /// decoder that captured before this target was made counts as new once).
    rows_run: u32,
    last_setup: bool,
}

impl CudaTarget {
    /// A target over `dec` (its sequence is reset). `graphed`: replay the captured
    /// one-token step for greedy steps.
    pub fn new(mut dec: Box<CudaDecoder>, graphed: bool) -> Self {
        dec.reset();
        Self {
            dec,
            graphed,
            rows_run: 0,
            last_setup: false,
        }
    }

    /// The decoder.
    pub fn decoder(&self) -> &CudaDecoder {
        &self.dec
    }

    /// Give the decoder back.
    pub fn into_decoder(self) -> Box<CudaDecoder> {
        self.dec
    }

    /// Forget the sequence.
    pub fn reset(&mut self) {
        self.dec.reset();
    }
}

fn cuda(e: crate::cuda::CudaError) -> SpecError {
    SpecError::Other(format!("CUDA target: {e}"))
}

impl Target for CudaTarget {
    fn n_vocab(&self) -> usize {
        self.dec.program().shape.n_vocab
    }

    fn len(&self) -> usize {
        self.dec.len()
    }

    fn forward_last(&mut self, tokens: &[u32]) -> Result<Vec<f32>, SpecError> {
        if let (true, &[t]) = (self.graphed, tokens) {
            // The replay leaves the step's logits on the device, as the eager forward does.
            self.dec.step_graphed(t).map_err(cuda)?;
        } else {
            self.dec.forward(tokens).map_err(cuda)?;
        }
        self.dec.logits().map_err(cuda)
    }

    fn rows_per_pass(&self) -> usize {
        MAX_ROWS
    }

    fn weight_bytes(&self) -> Option<u64> {
        Some(self.dec.weight_bytes() as u64)
    }

    fn prefill_last(&mut self, prompt: &[u32]) -> Result<Vec<f32>, SpecError> {
        self.dec.prefill(prompt).map_err(cuda)?;
        self.dec.logits().map_err(cuda)
    }

    fn prefill_last_argmax(&mut self, prompt: &[u32]) -> Result<u32, SpecError> {
        self.dec.prefill(prompt).map_err(cuda)?;
        self.dec.argmax().map_err(cuda)
    }

    fn forward_all(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>, SpecError> {
        let rows = self.dec.forward_rows_logits(tokens).map_err(cuda)?;
        if rows.len() != tokens.len() {
            return Err(SpecError::Rows {
                got: rows.len(),
                want: tokens.len(),
            });
        }
        Ok(rows)
    }

    fn truncate(&mut self, len: usize) {
        self.dec.truncate(len);
    }

    fn forward_last_argmax(&mut self, tokens: &[u32]) -> Result<u32, SpecError> {
        if let (true, &[t]) = (self.graphed, tokens) {
            return self.dec.step_graphed(t).map_err(cuda);
        }
        self.dec.forward(tokens).map_err(cuda)?;
        self.dec.argmax().map_err(cuda)
    }

    fn last_forward_setup(&self) -> bool {
        self.last_setup
    }

    fn forward_all_argmax(&mut self, tokens: &[u32]) -> Result<Vec<u32>, SpecError> {
        self.last_setup = false;
        if self.graphed {
            for chunk in tokens.chunks(MAX_ROWS) {
                let bit = 1u32 << (chunk.len() - 1).min(31);
                self.last_setup |= self.rows_run & bit == 0;
                self.rows_run |= bit;
            }
        }
        let picks = if self.graphed {
            self.dec.forward_rows_argmax_graphed(tokens)
        } else {
            self.dec.forward_rows_argmax(tokens)
        }
        .map_err(cuda)?;
        if picks.len() != tokens.len() {
            return Err(SpecError::Rows {
                got: picks.len(),
                want: tokens.len(),
            });
        }
        Ok(picks)
    }
}
