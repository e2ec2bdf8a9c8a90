//! Constrained decoding on the device: a grammar's token mask applied to the logits by
//! `kernels/mask.cu` before the device argmax or the device sampler picks.
//!
//! Owns [`DeviceMask`] (the decoder's mask buffer, whether a mask is armed, and the captured
//! graphs that use it) and the decoder's mask API:
//!
//! * [`CudaDecoder::set_mask`] uploads one mask (`u32` words in llguidance's layout: bit
//!   `i % 32` of word `i / 32` set = token `i` allowed; what
//!   [`crate::api::constrain::TokenMask::words`] gives) — one host-to-device copy of `n_vocab / 8`
//!   bytes queued on the stream — and arms it for the **next pick only**: the next
//!   [`CudaDecoder::argmax`], [`CudaDecoder::sample`], [`CudaDecoder::step_graphed`] or
//!   [`CudaDecoder::step_graphed_sampled`] sets every disallowed logit to `-inf` in place,
//!   then picks, then disarms. Without an armed mask those calls run exactly as before (no
//!   mask launch, the unconstrained graphs), so unconstrained decoding costs nothing.
//!   [`CudaDecoder::clear_mask`] disarms without picking.
//! * Graphed steps with an armed mask replay their own captured graph (body, head, mask
//!   node, argmax or sampler) whose mask node reads the decoder's mask buffer; the host
//!   rewrites the words before each replay.
//! * [`CudaDecoder::forward_graphed`] replays only the forward step (body and head) and
//!   returns as soon as the replay is queued, so the host can compute the next mask
//!   (llguidance, on the CPU) while the GPU runs the step, then call
//!   [`CudaDecoder::set_mask`] and pick: the mask's CPU cost overlaps the GPU step.
//!
//! The mask changes the logits buffer in place: [`CudaDecoder::logits`] after a masked pick
//! returns the masked logits (download the raw logits before the pick when they are needed,
//! e.g. for logprobs). The sampler's fallback path (top-p / min-p survivors past the
//! kernel's candidate cap) downloads the masked logits, so it obeys the mask too.
//! Picks equal the CPU path's (mask applied with `-inf`, then [`crate::sampling`]) wherever
//! the logits agree; kernel-check compares them bit for bit on the same logits.
//!
//! Users: `assay generate --backend cuda --json-schema` and the served CUDA executor
//! (`scheduler/cuda.rs`: a constrained request's token is picked here, the mask computed by
//! the scheduler before the step). The upload is a `cuMemcpyHtoDAsync` from pageable host
//! memory (staged by the driver, no stream synchronization), not a pinned buffer.

use super::graph::StepGraph;
use super::{CudaDecoder, Feed, model_err};
use crate::cuda::CudaError;
use crate::cuda::ops::{self, MaskBuffer};
use crate::sampling::Sampler;

/// The decoder's mask state, made on the first [`CudaDecoder::set_mask`].
pub(super) struct DeviceMask {
    buf: MaskBuffer,
    /// A mask was uploaded and the next pick applies it.
    armed: bool,
    /// Captured forward-only step (body and head, no pick).
    forward: Option<StepGraph>,
    /// Captured greedy step with the mask node before the argmax.
    greedy: Option<StepGraph>,
    /// Masks applied so far.
    applied: usize,
}

impl CudaDecoder {
    /// Upload `words` (bit set = token allowed; llguidance's layout, `ceil(n_vocab / 32)`
    /// words, fewer leave the tokens past them disallowed) and arm the mask for the next
    /// pick. The copy is queued on the stream, behind any step already queued.
    pub fn set_mask(&mut self, words: &[u32]) -> Result<(), CudaError> {
        if words.iter().all(|&w| w == 0) {
            return Err(model_err("the mask allows no token"));
        }
        let gpu = std::sync::Arc::clone(&self.gpu);
        let m = self.mask_state()?;
        m.buf.write(&gpu, words)?;
        m.armed = true;
        Ok(())
    }

    /// Disarm a mask set by [`CudaDecoder::set_mask`] without picking.
    pub fn clear_mask(&mut self) {
        if let Some(m) = self.mask.as_mut() {
            m.armed = false;
        }
    }

    /// Whether a mask is armed for the next pick.
    pub fn mask_armed(&self) -> bool {
        self.mask.as_ref().is_some_and(|m| m.armed)
    }

    /// Masks applied by picks so far (for reports and tests).
    pub fn masks_applied(&self) -> usize {
        self.mask.as_ref().map_or(0, |m| m.applied)
    }

    /// Queue the mask kernel on the logits buffer.
    fn queue_mask(&mut self) -> Result<(), CudaError> {
        let l = self.program.logits;
        let n = self.program.shape.n_vocab;
        let logits = self.head_bufs[l.0 as usize]
            .as_mut()
            .ok_or_else(|| model_err("logits buffer missing"))?;
        let m = self
            .mask
            .as_ref()
            .ok_or_else(|| model_err("mask buffer missing"))?;
        ops::apply_mask(&self.gpu, logits, &m.buf, n)
    }

    /// Take the armed mask, if any: returns whether one was armed (and disarms it).
    fn take_armed(&mut self) -> bool {
        match self.mask.as_mut() {
            Some(m) if m.armed => {
                m.armed = false;
                m.applied += 1;
                true
            }
            _ => false,
        }
    }

    /// Queue the armed mask (if any) before an eager pick, and disarm it.
    pub(super) fn queue_pending_mask(&mut self) -> Result<(), CudaError> {
        if self.take_armed() {
            self.queue_mask()?;
        }
        Ok(())
    }

    /// Check `token` can be appended and write the graphed step's `[token, position]`.
    fn write_step(&mut self, token: u32) -> Result<(), CudaError> {
        if self.len >= self.capacity {
            return Err(model_err(format!(
                "the KV cache is full ({} positions)",
                self.capacity
            )));
        }
        let n_vocab = self.program.shape.n_vocab;
        if token as usize >= n_vocab {
            return Err(model_err(format!(
                "token {token} outside the vocabulary ({n_vocab})"
            )));
        }
        let pos = i32::try_from(self.len).map_err(|_| model_err("position overflows i32"))?;
        let input = [token as i32, pos];
        self.gpu.stream().memcpy_htod(&input, &mut self.step)?;
        Ok(())
    }

    fn queue_forward_step(&mut self) -> Result<(), CudaError> {
        self.body_pass(1, Feed::Step)?;
        self.head_pass(Feed::Step)
    }

    fn queue_masked_step(&mut self) -> Result<(), CudaError> {
        self.queue_forward_step()?;
        self.queue_mask()?;
        self.queue_argmax()
    }

    fn queue_masked_sampled_step(&mut self) -> Result<(), CudaError> {
        self.queue_forward_step()?;
        self.queue_mask()?;
        self.queue_sample()
    }

    /// Append `token` by replaying the captured forward step (body and head; captured on
    /// first use) and return once the replay is queued: the logits of the new last token
    /// are on the device when the next pick ([`CudaDecoder::argmax`],
    /// [`CudaDecoder::sample`]) reads them, with the mask applied if one was set in between.
    /// Same logits as [`CudaDecoder::forward`] with one token.
    pub fn forward_graphed(&mut self, token: u32) -> Result<(), CudaError> {
        // A mask armed before the step would apply to the logits of the step before.
        if self.mask_armed() {
            return Err(model_err(
                "a mask is armed: pick before feeding the next token (or clear_mask)",
            ));
        }
        if self.mask.as_ref().is_none_or(|m| m.forward.is_none()) {
            let g = self.capture_with(Self::queue_forward_step)?;
            self.mask_state()?.forward = Some(g);
        }
        self.write_step(token)?;
        self.mask_state()?
            .forward
            .as_ref()
            .ok_or_else(|| model_err("forward graph missing after capture"))?
            .launch()?;
        self.len += 1;
        Ok(())
    }

    /// The mask state, made (with an all-zero buffer, unarmed) when missing.
    fn mask_state(&mut self) -> Result<&mut DeviceMask, CudaError> {
        if self.mask.is_none() {
            let buf = MaskBuffer::new(&self.gpu, self.program.shape.n_vocab)?;
            self.mask = Some(DeviceMask {
                buf,
                armed: false,
                forward: None,
                greedy: None,
                applied: 0,
            });
        }
        self.mask
            .as_mut()
            .ok_or_else(|| model_err("mask state missing"))
    }

    /// [`CudaDecoder::step_graphed`] with the armed mask applied before the argmax (its own
    /// captured graph). Called by `step_graphed` when a mask is armed.
    pub(super) fn step_graphed_masked(&mut self, token: u32) -> Result<u32, CudaError> {
        if self.mask_state()?.greedy.is_none() {
            let g = self.capture_with(Self::queue_masked_step)?;
            self.mask_state()?.greedy = Some(g);
        }
        self.write_step(token)?;
        self.take_armed();
        self.mask_state()?
            .greedy
            .as_ref()
            .ok_or_else(|| model_err("masked step graph missing after capture"))?
            .launch()?;
        self.len += 1;
        self.read_argmax()
    }

    /// [`CudaDecoder::step_graphed_sampled`] with the armed mask applied before the sampler
    /// (its own captured graph). Called by `step_graphed_sampled` when a mask is armed.
    pub(super) fn step_graphed_sampled_masked(
        &mut self,
        token: u32,
        sampler: &mut Sampler,
    ) -> Result<u32, CudaError> {
        // State first: a longer penalty window reallocates the buffers and drops the graphs.
        let u = self.write_sample_state(sampler)?;
        if self
            .sampling
            .as_ref()
            .is_none_or(|s| s.masked_graph.is_none())
        {
            let g = self.capture_with(Self::queue_masked_sampled_step)?;
            if let Some(s) = self.sampling.as_mut() {
                s.masked_graph = Some(g);
            }
        }
        self.write_step(token)?;
        self.take_armed();
        self.sampling
            .as_ref()
            .and_then(|s| s.masked_graph.as_ref())
            .ok_or_else(|| model_err("masked sampled graph missing after capture"))?
            .launch()?;
        self.len += 1;
        self.finish_sample(sampler, u)
    }

    /// Nodes of the captured masked greedy step, if captured (for reports).
    pub fn masked_step_graph(&self) -> Option<&StepGraph> {
        self.mask.as_ref().and_then(|m| m.greedy.as_ref())
    }
}
