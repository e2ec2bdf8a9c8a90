//! Sampled decode on the device: the [`crate::sampling`] chain run by `sample.cu` on the
//! logits the decoder left on the GPU, 4 bytes back per step.
//!
//! Owns [`DeviceSampling`] (the decoder's sampling buffers and its captured sampled step)
//! and the eager sampled entry points [`CudaDecoder::sample`] and
//! [`CudaDecoder::generate_sampled`]; the graphed variant is in [`super::graph`].
//!
//! The host keeps the [`Sampler`] (configuration, seeded generator, penalty history): each
//! step takes one draw from it ([`Sampler::draw`], advancing it exactly as the CPU chain
//! would), writes draw, configuration and penalty window into device memory in one copy,
//! and queues the kernel. A step whose top-p / min-p survivors do not fit the kernel's
//! candidate cap falls back to [`sampling::pick`] on the downloaded logits with the same
//! draw and window, so the result is the CPU chain's in both cases (up to near-ties of the
//! cumulative sums; kernel-check counts them). Tokens are not accepted here: the caller
//! calls [`Sampler::accept`] for every token it keeps, as on the CPU path.

use super::graph::StepGraph;
use super::{CudaDecoder, model_err};
use crate::cuda::CudaError;
use crate::cuda::ops::{self, SampleBuffers, Sampled};
use crate::sampling::{self, Sampler};

/// Smallest penalty window the buffers are made for (the default `penalty_last_n`).
const MIN_WINDOW: usize = 64;

/// The decoder's sampling state: buffers allocated once (reallocated, and the graph
/// dropped, only when a longer penalty window arrives) and the captured sampled step.
pub(super) struct DeviceSampling {
    pub(super) bufs: SampleBuffers,
    pub(super) graph: Option<StepGraph>,
    /// The captured sampled step with the token mask applied first (`decode/mask.rs`).
    pub(super) masked_graph: Option<StepGraph>,
    /// Steps that fell back to the host chain.
    pub(super) fallbacks: usize,
}

impl CudaDecoder {
    /// Make the sampling buffers ready for a window of `window` tokens.
    pub(super) fn ensure_sampling(&mut self, window: usize) -> Result<(), CudaError> {
        if self
            .sampling
            .as_ref()
            .is_some_and(|s| s.bufs.window_cap() >= window)
        {
            return Ok(());
        }
        let cap = window.max(MIN_WINDOW);
        let bufs = SampleBuffers::new(&self.gpu, self.program.shape.n_vocab, cap)?;
        self.sampling = Some(DeviceSampling {
            bufs,
            graph: None,
            masked_graph: None,
            fallbacks: 0,
        });
        Ok(())
    }

    /// Queue the sampling kernel on the logits buffer (state written beforehand).
    pub(super) fn queue_sample(&mut self) -> Result<(), CudaError> {
        let l = self.program.logits;
        let logits = self.head_bufs[l.0 as usize]
            .as_ref()
            .ok_or_else(|| model_err("logits buffer missing"))?;
        let s = self
            .sampling
            .as_mut()
            .ok_or_else(|| model_err("sampling buffers missing"))?;
        ops::sample(&self.gpu, logits, &mut s.bufs)
    }

    /// Take the next draw and write it with the configuration and the penalty window.
    pub(super) fn write_sample_state(&mut self, sampler: &mut Sampler) -> Result<f64, CudaError> {
        self.ensure_sampling(sampler.window().len())?;
        let u = sampler.draw();
        let s = self
            .sampling
            .as_mut()
            .ok_or_else(|| model_err("sampling buffers missing"))?;
        s.bufs
            .write_state(&self.gpu, sampler.config(), sampler.window(), u)?;
        Ok(u)
    }

    /// Read the kernel's decision; on a fallback, run the chain on the host with draw `u`.
    pub(super) fn finish_sample(&mut self, sampler: &Sampler, u: f64) -> Result<u32, CudaError> {
        let s = self
            .sampling
            .as_mut()
            .ok_or_else(|| model_err("sampling buffers missing"))?;
        match s.bufs.read_token(&self.gpu)? {
            Sampled::Token(t) => Ok(t),
            Sampled::Fallback => {
                s.fallbacks += 1;
                let logits = self.logits()?;
                Ok(sampling::pick(sampler.config(), sampler.window(), &logits, u).token)
            }
        }
    }

    /// The next token after the last token fed, chosen by `sampler`'s chain on the device
    /// (one draw taken from `sampler`; the token is not accepted).
    pub fn sample(&mut self, sampler: &mut Sampler) -> Result<u32, CudaError> {
        let u = self.write_sample_state(sampler)?;
        self.queue_pending_mask()?;
        self.queue_sample()?;
        self.finish_sample(sampler, u)
    }

    /// Steps so far whose survivors exceeded the kernel's candidate cap and were sampled
    /// on the host.
    pub fn sample_fallbacks(&self) -> usize {
        self.sampling.as_ref().map_or(0, |s| s.fallbacks)
    }

    /// Sampled decoding, eager: feed `prompt`, then `n` times sample, accept and feed.
    /// (Whether the prompt counts for the penalties is the caller's choice: accept its
    /// tokens into `sampler` before calling.)
    pub fn generate_sampled(
        &mut self,
        prompt: &[u32],
        n: usize,
        sampler: &mut Sampler,
    ) -> Result<Vec<u32>, CudaError> {
        self.prefill(prompt)?;
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let t = self.sample(sampler)?;
            sampler.accept(t);
            out.push(t);
            if i + 1 < n {
                self.forward(&[t])?;
            }
        }
        Ok(out)
    }
}
