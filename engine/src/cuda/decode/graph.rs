//! CUDA-graph decode: the one-token step of a [`CudaDecoder`] captured once and replayed for
//! every token.
//!
//! Owns [`StepGraph`] and the graphed entry points of the decoder: [`CudaDecoder::capture_step`],
//! [`CudaDecoder::step_graphed`] and [`CudaDecoder::generate_greedy_graphed`], and their
//! sampled variants [`CudaDecoder::step_graphed_sampled`] and
//! [`CudaDecoder::generate_sampled_graphed`]: a second graph whose last node is the
//! sampling kernel instead of the argmax; it reads the draw, the configuration and the
//! penalty window from the decoder's sampling state, which the host rewrites (one copy)
//! before each replay.
//!
//! What is captured is exactly what [`CudaDecoder::forward`] queues for one token — the body
//! for one row, the copy of the hidden row into the head's input, the head — followed by the
//! device argmax, with one difference: every kernel reads the token id and the position
//! from the decoder's two-value `step` buffer ([`Feed::Step`]) instead of the per-call
//! `tokens` / `pos` / `head_pos` buffers. Launch shapes never depend on the position (the
//! attention grid is fixed by the KV capacity and each block reads the position from
//! device memory), so one graph serves every position of every sequence the decoder runs:
//! a replay is one 8-byte host-to-device copy, one graph launch and a 4-byte download.
//! Because the kernels and their arguments are those of the eager step, a replay computes
//! bit-identical logits; the `graph` gate checks this token by token.
//!
//! The graph records raw device addresses of the decoder's buffers (activations, KV cache,
//! weights, scratch). They are allocated once in [`CudaDecoder::new`] and never replaced,
//! and the graph is owned by the decoder, so it cannot outlive them.

use super::{CudaDecoder, Feed, model_err};
use crate::cuda::CudaError;
use crate::sampling::Sampler;
use cudarc::driver::{CudaGraph, sys};

/// A captured one-token decode step, instantiated and ready to launch.
pub struct StepGraph {
    exec: CudaGraph,
    /// Nodes of the graph: kernel launches and copies (for reports).
    nodes: usize,
}

impl StepGraph {
    /// Launch the graph on the stream it was captured from.
    pub(super) fn launch(&self) -> Result<(), CudaError> {
        self.exec.launch()?;
        Ok(())
    }

    /// Operations recorded in the graph (kernel launches and copies).
    pub fn nodes(&self) -> usize {
        self.nodes
    }
}

/// Capture what `queue` queues on `stream` as an instantiated graph (nothing runs during
/// capture).
pub(super) fn capture_stream(
    stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    queue: impl FnOnce() -> Result<(), CudaError>,
) -> Result<StepGraph, CudaError> {
    // Thread-local mode: a forbidden call (an allocation, a synchronous copy) made by this
    // thread while capturing fails instead of silently joining the graph.
    stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)?;
    let recorded = queue();
    // Always end the capture, so the stream is usable again whatever happened.
    let ended = stream.end_capture(sys::CUgraphInstantiate_flags(0));
    recorded?;
    let exec = ended?.ok_or_else(|| model_err("stream capture produced no graph"))?;
    let mut nodes = 0usize;
    // SAFETY: `exec.cu_graph()` is the live graph owned by `exec`; with a null node array
    // the call only writes the node count into `nodes`, a valid `usize`.
    unsafe { sys::cuGraphGetNodes(exec.cu_graph(), std::ptr::null_mut(), &mut nodes) }.result()?;
    exec.upload()?;
    Ok(StepGraph { exec, nodes })
}

impl CudaDecoder {
    /// Capture the one-token step as a CUDA graph (once; later calls are no-ops). Nothing
    /// runs during capture: the decoder's state is unchanged.
    pub fn capture_step(&mut self) -> Result<(), CudaError> {
        if self.graph.is_some() {
            return Ok(());
        }
        let g = self.capture_with(Self::queue_step)?;
        self.graph = Some(g);
        Ok(())
    }

    /// Capture what `queue` queues as a graph (nothing runs during capture).
    pub(super) fn capture_with(
        &mut self,
        queue: fn(&mut Self) -> Result<(), CudaError>,
    ) -> Result<StepGraph, CudaError> {
        let stream = std::sync::Arc::clone(self.gpu.stream());
        capture_stream(&stream, || queue(self))
    }

    /// Queue one graphed step's work (used while capturing).
    fn queue_step(&mut self) -> Result<(), CudaError> {
        self.body_pass(1, Feed::Step)?;
        self.head_pass(Feed::Step)?;
        self.queue_argmax()
    }

    /// The captured step, if any.
    pub fn step_graph(&self) -> Option<&StepGraph> {
        self.graph.as_ref()
    }

    /// Append `token` to the sequence by replaying the captured step (capturing it first if
    /// needed) and return the greedy token after it (with the mask armed by
    /// [`CudaDecoder::set_mask`] applied first, through its own graph). The logits stay on the device
    /// ([`CudaDecoder::logits`]), exactly as after [`CudaDecoder::forward`].
    pub fn step_graphed(&mut self, token: u32) -> Result<u32, CudaError> {
        if self.mask_armed() {
            return self.step_graphed_masked(token);
        }
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
        self.capture_step()?;
        let pos = i32::try_from(self.len).map_err(|_| model_err("position overflows i32"))?;
        let input = [token as i32, pos];
        self.gpu.stream().memcpy_htod(&input, &mut self.step)?;
        self.graph
            .as_ref()
            .ok_or_else(|| model_err("step graph missing after capture"))?
            .exec
            .launch()?;
        self.len += 1;
        self.read_argmax()
    }

    /// Greedy decoding with graphed steps: feed `prompt` eagerly, then `n` times take the
    /// argmax and feed it through the graph. Returns the `n` generated tokens; equal to
    /// [`CudaDecoder::generate_greedy`] token for token.
    pub fn generate_greedy_graphed(
        &mut self,
        prompt: &[u32],
        n: usize,
    ) -> Result<Vec<u32>, CudaError> {
        self.prefill(prompt)?;
        let mut out = Vec::with_capacity(n);
        if n == 0 {
            return Ok(out);
        }
        let mut t = self.argmax()?;
        out.push(t);
        while out.len() < n {
            t = self.step_graphed(t)?;
            out.push(t);
        }
        Ok(out)
    }

    /// Queue one graphed sampled step's work (used while capturing).
    fn queue_sampled_step(&mut self) -> Result<(), CudaError> {
        self.body_pass(1, Feed::Step)?;
        self.head_pass(Feed::Step)?;
        self.queue_sample()
    }

    /// The captured sampled step, if any.
    pub fn sampled_step_graph(&self) -> Option<&StepGraph> {
        self.sampling.as_ref().and_then(|s| s.graph.as_ref())
    }

    /// Append `token` by replaying the captured sampled step (capturing it first if
    /// needed) and return the token `sampler` chooses after it (one draw taken; the token
    /// is not accepted). Equal to [`CudaDecoder::forward`] + [`CudaDecoder::sample`].
    pub fn step_graphed_sampled(
        &mut self,
        token: u32,
        sampler: &mut Sampler,
    ) -> Result<u32, CudaError> {
        if self.mask_armed() {
            return self.step_graphed_sampled_masked(token, sampler);
        }
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
        // State first: a longer penalty window reallocates the buffers and drops the graph.
        let u = self.write_sample_state(sampler)?;
        if self.sampled_step_graph().is_none() {
            let g = self.capture_with(Self::queue_sampled_step)?;
            if let Some(s) = self.sampling.as_mut() {
                s.graph = Some(g);
            }
        }
        let pos = i32::try_from(self.len).map_err(|_| model_err("position overflows i32"))?;
        let input = [token as i32, pos];
        self.gpu.stream().memcpy_htod(&input, &mut self.step)?;
        self.sampled_step_graph()
            .ok_or_else(|| model_err("sampled step graph missing after capture"))?
            .exec
            .launch()?;
        self.len += 1;
        self.finish_sample(sampler, u)
    }

    /// Sampled decoding with graphed steps: feed `prompt` eagerly, sample, then `n - 1`
    /// times accept the token and feed it through the sampled graph. Token for token equal
    /// to [`CudaDecoder::generate_sampled`] with a sampler of the same seed and history.
    pub fn generate_sampled_graphed(
        &mut self,
        prompt: &[u32],
        n: usize,
        sampler: &mut Sampler,
    ) -> Result<Vec<u32>, CudaError> {
        self.prefill(prompt)?;
        let mut out = Vec::with_capacity(n);
        if n == 0 {
            return Ok(out);
        }
        let mut t = self.sample(sampler)?;
        sampler.accept(t);
        out.push(t);
        while out.len() < n {
            t = self.step_graphed_sampled(t, sampler)?;
            sampler.accept(t);
            out.push(t);
        }
        Ok(out)
    }
}
