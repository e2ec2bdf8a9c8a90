//! The CUDA backend as a served [`Executor`].
//!
//! [`CudaExecutor`] uploads a model's weights once (a [`CudaDecoder`] of one position that
//! only holds them) and gives every sequence its own decoder on those weights
//! ([`CudaDecoder::share`]): its KV cache is sized from the request (prompt + `max_tokens`,
//! capped by the context), so [`Executor::reserves_capacity`] is true and admission
//! reserves that many KV blocks up front. Prefix-cache copies and trims are
//! device-to-device copies into a new decoder of the right size.
//!
//! A step runs the sequences of the batch one after another (a one-token decode step
//! replays the sequence's captured CUDA graph, a prefill chunk runs eagerly). What comes
//! back depends on the input's [`Want`]:
//!
//! * [`Want::Token`] (every request that does not ask for logprobs): the token is picked
//!   on the device and only its id (4 bytes) comes back. Greedy without penalties takes the
//!   device argmax, anything else the device sampler (`sample.cu`, one draw taken from the
//!   request's [`crate::sampling::Sampler`], exactly as the host chain would). An
//!   unconstrained decode step is one graph replay with the pick captured in it. A
//!   constrained one replays the forward-only graph ([`CudaDecoder::forward_graphed`]),
//!   then uploads the request's mask ([`CudaDecoder::set_mask`]: one queued host-to-device
//!   copy of `n_vocab / 8` bytes) and queues the mask kernel and the pick — the calls `assay
//!   generate --backend cuda --json-schema` makes, so a sequence's tokens are those of
//!   `generate` with the same seed and schema, whatever else runs beside it. The grammar
//!   itself (llguidance) runs on the host: the scheduler computes the mask before the step
//!   and advances the grammar by the token that comes back.
//! * [`Want::Logits`] (logprobs / `top_logprobs`): the whole logits row (`n_vocab` f32) is
//!   downloaded and the scheduler masks and samples on the host.
//!
//! * [`Want::Rows`] (a speculative round: the last token then the drafts): one verification
//!   forward of every row ([`CudaDecoder::forward_rows_argmax_graphed`]: the graph captured
//!   per row count, one id per row back; [`CudaDecoder::forward_rows_logits`] for sampled
//!   requests), exactly what `assay generate --backend cuda --spec` runs
//!   ([`crate::spec::CudaTarget`]); the scheduler truncates the decoder past the accepted
//!   drafts ([`Executor::kv_truncate`]).
//!
//! With [`CudaExecutor::with_batched_decode`] (`assay serve --batched-decode`, opt-in) the
//! decoding sequences of a step run as ONE batched device step instead ([`batch`]: each
//! weight read once per group of up to 8 sequences), followed by the same picks. On a
//! failed step every decoder is truncated back to where it was (and its mask disarmed), so
//! no cache grows.

use std::sync::Arc;

mod batch;

use super::{Executor, StepInput, StepOut, Want};
use crate::cuda::{CudaDecoder, CudaError, Gpu, shape_err};
use crate::model_file::GgufModel;
use crate::sampling::SamplerConfig;

/// One sequence's device state: a decoder sharing the executor's weights.
pub struct CudaKv {
    dec: Box<CudaDecoder>,
}

// SAFETY: a `CudaKv` owns its decoder (device buffers and, once captured, CUDA graph
// handles). The scheduler moves it into its engine thread and touches it only there,
// through `&mut` or by value, so no two threads ever use its handles at once; CUDA graph
// handles are not tied to the thread that made them (they need external synchronization
// only), and cudarc binds the context on every call.
unsafe impl Send for CudaKv {}

/// The CUDA decoder as a served backend.
pub struct CudaExecutor {
    /// Holds the uploaded weights (one KV position, never stepped).
    base: CudaDecoder,
    /// Replay the captured one-token step for decode steps (else eager launches).
    graph: bool,
    /// Run the decoding sequences of a step as one batched device step ([`batch`]).
    batched_decode: bool,
}

// SAFETY: as for `CudaKv`: the executor is moved into the engine thread once and used
// there only.
unsafe impl Send for CudaExecutor {}

impl CudaExecutor {
    /// Upload `model`'s weights to `gpu`.
    pub fn new(gpu: Arc<Gpu>, model: &GgufModel, graph: bool) -> Result<Self, CudaError> {
        let program = crate::arch::build_program(model.header())
            .map_err(|e| crate::cuda::shape_err("decoder", e.to_string()))?;
        let base = CudaDecoder::new(gpu, model, program, 1)?;
        Ok(Self {
            base,
            graph,
            batched_decode: false,
        })
    }

    /// Run the decoding sequences of each step as one batched device step (`assay serve
    /// --batched-decode`; see [`batch`]) instead of one after another.
    pub fn with_batched_decode(mut self, on: bool) -> Self {
        self.batched_decode = on;
        self
    }

    /// Run the decode products of every sequence on tensor cores (`mmv.cu`: `assay serve
    /// --mmv`, what `ASSAY_MMV=1` sets; [`CudaDecoder::set_mmv`]): one arithmetic for 1..64
    /// rows, so batched steps are much faster and a lone sequence slower; a sequence's
    /// tokens alone and in a batch still agree (within the mode).
    pub fn with_mmv(mut self, on: bool) -> Result<Self, CudaError> {
        self.base.set_mmv(on)?;
        Ok(self)
    }

    /// Bytes of weights on the device.
    pub fn weight_bytes(&self) -> usize {
        self.base.weight_bytes()
    }

    /// The program being executed.
    pub fn program(&self) -> &crate::arch::Program {
        self.base.program()
    }

    fn decoder(&self, capacity: usize) -> Result<Box<CudaDecoder>, String> {
        self.base
            .share(capacity.max(1))
            .map(Box::new)
            .map_err(|e| e.to_string())
    }

    fn run(&self, input: &mut StepInput<'_, CudaKv>) -> Result<StepOut, CudaError> {
        let dec = &mut input.kv.dec;
        // Prompt tokens take the prompt pass (a lone one too: its bits must not depend on
        // how the scheduler chunked the prompt), generated ones the row path.
        let prompt = input.prompt.min(input.tokens.len());
        if prompt > 0 && !matches!(input.want, Want::Rows { .. }) {
            let (p, rest) = input.tokens.split_at(prompt);
            dec.prefill(p)?;
            if !rest.is_empty() {
                dec.forward(rest)?;
            }
            return pick_after_feed(dec, &mut input.want);
        }
        match &mut input.want {
            Want::Token(pick) => {
                let argmax = device_argmax(pick.sampler.config());
                let tok = match (input.tokens, pick.mask) {
                    // Unconstrained decode step: one graph replay with the pick captured in
                    // it (argmax or sampler).
                    ([t], None) if self.graph => {
                        if argmax {
                            dec.step_graphed(*t)?
                        } else {
                            dec.step_graphed_sampled(*t, pick.sampler)?
                        }
                    }
                    // Constrained: the forward step (graph replay for one token, else
                    // eager), then the mask upload, the mask kernel and the pick — the calls
                    // `assay generate --backend cuda --json-schema` makes.
                    (toks, mask) => {
                        match toks {
                            [t] if self.graph => dec.forward_graphed(*t)?,
                            toks => dec.forward(toks)?,
                        }
                        if let Some(words) = mask {
                            dec.set_mask(words)?;
                        }
                        if argmax {
                            dec.argmax()?
                        } else {
                            dec.sample(pick.sampler)?
                        }
                    }
                };
                Ok(StepOut::Token(tok))
            }
            Want::Rows { argmax } => {
                // Speculative verification: one forward of every row with the head on each
                // (`spec::CudaTarget`'s calls: the graphed arg-max forward per row count, or
                // the logits rows for sampled verification).
                let toks = input.tokens;
                if *argmax {
                    let picks = if self.graph {
                        dec.forward_rows_argmax_graphed(toks)?
                    } else {
                        dec.forward_rows_argmax(toks)?
                    };
                    Ok(StepOut::Picks(picks))
                } else {
                    Ok(StepOut::Rows(dec.forward_rows_logits(toks)?))
                }
            }
            want => {
                match input.tokens {
                    [t] if self.graph => {
                        dec.step_graphed(*t)?;
                    }
                    toks => dec.forward(toks)?,
                }
                match want {
                    Want::Logits => Ok(StepOut::Logits(dec.logits()?)),
                    _ => Ok(StepOut::Nothing),
                }
            }
        }
    }
}

/// A draft model on the GPU for `assay serve --spec draft:PATH`: its weights uploaded once
/// (a decoder of one position that only holds them), and for each speculating sequence a
/// decoder sharing them ([`CudaDecoder::share`]) with a cache as large as the sequence's,
/// wrapped as the spec module's [`crate::spec::CudaTarget`] (graphed one-token draft steps)
/// inside a [`crate::spec::DraftModel`].
pub struct CudaDraftFactory {
    base: CudaDecoder,
    graph: bool,
    target_vocab: usize,
    label: String,
}

// SAFETY: as for `CudaExecutor`: the factory is moved into the engine thread once and used
// there only (the proposers it makes never leave that thread).
unsafe impl Send for CudaDraftFactory {}

impl CudaDraftFactory {
    /// Upload `draft`'s weights to `gpu` after checking that it shares `target`'s
    /// vocabulary (`target_vocab` logits per row).
    pub fn new(
        gpu: Arc<Gpu>,
        draft: &GgufModel,
        target: &GgufModel,
        target_vocab: usize,
        label: String,
        graph: bool,
    ) -> Result<Self, String> {
        crate::spec::check_vocab(target, draft).map_err(|e| e.to_string())?;
        let program = crate::arch::build_program(draft.header()).map_err(|e| e.to_string())?;
        let base = CudaDecoder::new(gpu, draft, program, 1).map_err(|e| e.to_string())?;
        Ok(Self {
            base,
            graph,
            target_vocab,
            label,
        })
    }
}

impl crate::scheduler::ProposerFactory for CudaDraftFactory {
    fn name(&self) -> String {
        format!("draft:{}", self.label)
    }

    fn make(
        &mut self,
        capacity: usize,
        sampling: &SamplerConfig,
    ) -> Result<Box<dyn crate::spec::Proposer>, String> {
        let dec = self
            .base
            .share(capacity.max(1))
            .map_err(|e| format!("draft decoder: {e}"))?;
        let target = crate::spec::CudaTarget::new(Box::new(dec), self.graph);
        crate::spec::DraftModel::on_target_checked(
            Box::new(target),
            self.target_vocab,
            self.label.clone(),
            sampling,
        )
        .map(|d| Box::new(d) as Box<dyn crate::spec::Proposer>)
        .map_err(|e| e.to_string())
    }
}

/// What `want` asks for after the tokens were fed eagerly: the mask (if any) applied on
/// the device, then the argmax or the device sampler; or the logits; or nothing.
fn pick_after_feed(dec: &mut CudaDecoder, want: &mut Want<'_>) -> Result<StepOut, CudaError> {
    match want {
        Want::Token(pick) => {
            if let Some(words) = pick.mask {
                dec.set_mask(words)?;
            }
            let tok = if device_argmax(pick.sampler.config()) {
                dec.argmax()?
            } else {
                dec.sample(pick.sampler)?
            };
            Ok(StepOut::Token(tok))
        }
        Want::Logits => Ok(StepOut::Logits(dec.logits()?)),
        Want::Nothing => Ok(StepOut::Nothing),
        Want::Rows { .. } => Err(shape_err(
            "scheduler",
            "a verification step has no prompt tokens",
        )),
    }
}

/// Whether a pick under `cfg` is the device argmax (greedy without penalties, as `assay
/// generate --backend cuda` decides); anything else runs the device sampler.
pub fn device_argmax(cfg: &SamplerConfig) -> bool {
    cfg.temperature <= 0.0
        && cfg.repeat_penalty == 1.0
        && cfg.presence_penalty == 0.0
        && cfg.frequency_penalty == 0.0
}

impl Executor for CudaExecutor {
    type Kv = CudaKv;

    fn new_kv(&self, capacity: usize) -> Result<CudaKv, String> {
        Ok(CudaKv {
            dec: self.decoder(capacity)?,
        })
    }

    fn kv_len(&self, kv: &CudaKv) -> usize {
        kv.dec.len()
    }

    fn kv_prefix(&self, kv: &CudaKv, len: usize, capacity: usize) -> Result<CudaKv, String> {
        let mut dec = self.decoder(capacity.max(len))?;
        dec.copy_prefix_from(&kv.dec, len)
            .map_err(|e| e.to_string())?;
        Ok(CudaKv { dec })
    }

    fn kv_trim(&self, kv: &mut CudaKv, len: usize) {
        let len = len.min(kv.dec.len());
        if kv.dec.capacity() == len.max(1) {
            kv.dec.truncate(len);
            return;
        }
        let trimmed = self.decoder(len).and_then(|mut d| {
            d.copy_prefix_from(&kv.dec, len)
                .map(|_| d)
                .map_err(|e| e.to_string())
        });
        match trimmed {
            Ok(d) => kv.dec = d,
            Err(e) => {
                // Keep the untrimmed cache (correct, only larger than accounted).
                tracing::warn!("KV trim failed, keeping the whole cache: {e}");
                kv.dec.truncate(len);
            }
        }
    }

    fn kv_truncate(&self, kv: &mut CudaKv, len: usize) {
        kv.dec.truncate(len);
    }

    fn kv_bytes_per_token(&self) -> usize {
        self.base.kv_bytes_per_token()
    }

    fn reserves_capacity(&self) -> bool {
        true
    }

    fn n_vocab(&self) -> usize {
        self.base.program().shape.n_vocab
    }

    fn step(&mut self, batch: &mut [StepInput<'_, CudaKv>]) -> Result<Vec<StepOut>, String> {
        let before: Vec<usize> = batch.iter().map(|b| b.kv.dec.len()).collect();
        let mut out = Vec::with_capacity(batch.len());
        let mut failed = None;
        if self.batched_decode {
            match self.step_batched(batch) {
                Ok(o) => out = o,
                Err(e) => failed = Some(e.to_string()),
            }
        } else {
            for input in batch.iter_mut() {
                match self.run(input) {
                    Ok(o) => out.push(o),
                    Err(e) => {
                        failed = Some(e.to_string());
                        break;
                    }
                }
            }
        }
        match failed {
            None => Ok(out),
            Some(e) => {
                for (b, &len) in batch.iter_mut().zip(&before) {
                    b.kv.dec.clear_mask();
                    b.kv.dec.truncate(len);
                }
                Err(e)
            }
        }
    }
}
