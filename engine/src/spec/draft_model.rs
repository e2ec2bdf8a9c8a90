//! A draft model: a smaller checkpoint with the target's vocabulary, run on the CPU
//! reference executor or on any [`Target`] (the CUDA decoder: [`DraftModel::on_target`]),
//! drafting autoregressively. Its KV cache is kept in step with the
//! committed context: before drafting it is cut back to the longest prefix it shares with
//! the context (rejected drafts drop out) and only the new tokens are fed. The prompt is fed
//! during the prefill ([`Proposer::prefill`]), so a round feeds one token (the target's
//! last) or two (the last accepted draft and the target's token) before it drafts.
//!
//! On a [`Target`] backend (the CUDA decoder) a feed of at most [`SEQUENTIAL_FEED`] tokens
//! runs as one-token steps (graph replays) rather than one multi-row forward: the batched
//! matvec computes all of its token slots whatever the row count, so a 2-row forward costs
//! about as much as an 8-row one (2.3-3.4 one-token steps on the H200), more than two
//! replays. The per-row arithmetic is the same either way (batch invariance).

use std::sync::Arc;

use crate::kv::SeqKv;
use crate::model_file::GgufModel;
use crate::reference::Reference;
use crate::sampling::{Sampler, SamplerConfig, draw_from, greedy};
use crate::tokenizer::Tokenizer;

use super::{Draft, DraftMode, Proposer, SpecError, Target};

/// Feeds of up to this many tokens run as one-token steps on a [`Target`] backend.
pub const SEQUENTIAL_FEED: usize = 2;

/// Where the draft network runs.
enum Backend {
    /// The CPU reference executor with the draft's own cache.
    Reference { exec: Arc<Reference>, kv: SeqKv },
    /// A target (e.g. a CUDA decoder) holding its own cache.
    Target(Box<dyn Target>),
}

/// A draft-model proposer.
pub struct DraftModel {
    backend: Backend,
    name: String,
    /// Tokens whose K/V rows are in `kv`.
    fed: Vec<u32>,
    sampler: Sampler,
    forwards: u64,
}

/// Refuse a draft whose tokenizer or logits width differs from the target's: draft token
/// ids must mean the same text.
/// Two checkpoints that both carry no usable tokenizer (synthetic test checkpoints) pass:
/// their ids name no text, and the logits widths are compared by the constructors.
pub fn check_vocab(target: &GgufModel, draft: &GgufModel) -> Result<(), SpecError> {
    let (t, d) = match (
        Tokenizer::from_gguf(target.header()),
        Tokenizer::from_gguf(draft.header()),
    ) {
        (Err(_), Err(_)) => return Ok(()),
        (t, d) => (t?, d?),
    };
    if t.vocab_size() != d.vocab_size() {
        return Err(SpecError::VocabMismatch(format!(
            "{} tokens vs {} in the target",
            d.vocab_size(),
            t.vocab_size()
        )));
    }
    for id in 0..t.vocab_size() as u32 {
        if t.token_text(id) != d.token_text(id) {
            return Err(SpecError::VocabMismatch(format!(
                "token {id} is {:?} in the draft, {:?} in the target",
                d.token_text(id).unwrap_or(""),
                t.token_text(id).unwrap_or("")
            )));
        }
    }
    Ok(())
}

impl DraftModel {
    /// A draft proposer running `exec` (shareable: each proposer keeps its own cache), checked against the target's model and logits
    /// width. `sampling` is the target's sampler configuration: the draft samples with the
    /// same temperature and filters (no penalties; any draft distribution keeps the output
    /// exact, a close one is accepted more often), seeded from the same seed.
    pub fn new(
        exec: Arc<Reference>,
        target: &GgufModel,
        target_vocab: usize,
        name: String,
        sampling: &SamplerConfig,
    ) -> Result<Self, SpecError> {
        check_vocab(target, exec.model())?;
        let n = exec.program().shape.n_vocab;
        let kv = exec.new_cache();
        Self::with_backend(
            Backend::Reference { exec, kv },
            n,
            target_vocab,
            name,
            sampling,
        )
    }

    /// A draft proposer on `exec` with a fresh cache, for a caller that already checked the
    /// vocabulary ([`check_vocab`]) once (`assay serve` makes one per sequence).
    pub fn on_reference_checked(
        exec: Arc<Reference>,
        target_vocab: usize,
        name: String,
        sampling: &SamplerConfig,
    ) -> Result<Self, SpecError> {
        let n = exec.program().shape.n_vocab;
        let kv = exec.new_cache();
        Self::with_backend(
            Backend::Reference { exec, kv },
            n,
            target_vocab,
            name,
            sampling,
        )
    }

    /// A draft proposer on `draft` for a caller that already checked the vocabulary
    /// ([`check_vocab`]) once (`assay serve` on CUDA: one draft decoder per sequence).
    pub fn on_target_checked(
        draft: Box<dyn Target>,
        target_vocab: usize,
        name: String,
        sampling: &SamplerConfig,
    ) -> Result<Self, SpecError> {
        let n = draft.n_vocab();
        Self::with_backend(Backend::Target(draft), n, target_vocab, name, sampling)
    }

    /// A draft proposer running on `draft` (e.g. a CUDA decoder of `draft_model`), checked
    /// against the target's model and logits width like [`DraftModel::new`].
    pub fn on_target(
        draft: Box<dyn Target>,
        draft_model: &GgufModel,
        target: &GgufModel,
        target_vocab: usize,
        name: String,
        sampling: &SamplerConfig,
    ) -> Result<Self, SpecError> {
        check_vocab(target, draft_model)?;
        let n = draft.n_vocab();
        Self::with_backend(Backend::Target(draft), n, target_vocab, name, sampling)
    }

    fn with_backend(
        mut backend: Backend,
        n: usize,
        target_vocab: usize,
        name: String,
        sampling: &SamplerConfig,
    ) -> Result<Self, SpecError> {
        if let Backend::Target(t) = &mut backend {
            t.truncate(0);
        }
        if n != target_vocab {
            return Err(SpecError::VocabMismatch(format!(
                "the draft has {n} logits per row, the target {target_vocab}"
            )));
        }
        let cfg = SamplerConfig {
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: sampling.seed ^ 0x5DEE_CE66_D1CE_F00D,
            ..sampling.clone()
        };
        Ok(Self {
            backend,
            name,
            fed: Vec::new(),
            sampler: Sampler::new(cfg),
            forwards: 0,
        })
    }

    /// Positions in the draft's cache.
    pub fn cached(&self) -> usize {
        match &self.backend {
            Backend::Reference { kv, .. } => kv.len(),
            Backend::Target(t) => t.len(),
        }
    }

    /// Forget the draft's sequence (its cache is refilled on the next proposal).
    pub fn reset(&mut self) {
        self.truncate(0);
    }

    fn truncate(&mut self, len: usize) {
        match &mut self.backend {
            Backend::Reference { kv, .. } => kv.truncate(len),
            Backend::Target(t) => t.truncate(len),
        }
        self.fed.truncate(len);
    }

    fn step(&mut self, tokens: &[u32]) -> Result<Vec<f32>, SpecError> {
        if let (Backend::Target(_), Some((last, head))) = (&self.backend, tokens.split_last())
            && !head.is_empty()
            && tokens.len() <= SEQUENTIAL_FEED
        {
            self.feed_steps(head)?;
            return self.step(&[*last]);
        }
        self.forwards += 1;
        self.fed.extend_from_slice(tokens);
        match &mut self.backend {
            Backend::Reference { exec, kv } => Ok(exec.step(kv, tokens)?),
            Backend::Target(t) => t.forward_last(tokens),
        }
    }

    /// Feed `tokens` one-token step by step on a target backend (the picks are dropped).
    fn feed_steps(&mut self, tokens: &[u32]) -> Result<(), SpecError> {
        if let Backend::Target(t) = &mut self.backend {
            for &tok in tokens {
                self.forwards += 1;
                self.fed.push(tok);
                t.forward_last_argmax(&[tok])?;
            }
        }
        Ok(())
    }

    /// The greedy token after `tokens` (a device target sends back only the id).
    fn step_pick(&mut self, tokens: &[u32]) -> Result<u32, SpecError> {
        if let Backend::Target(t) = &mut self.backend {
            if tokens.len() > 1 && tokens.len() <= SEQUENTIAL_FEED {
                let (last, head) = tokens.split_last().ok_or(SpecError::EmptyPrompt)?;
                self.feed_steps(head)?;
                return self.step_pick(&[*last]);
            }
            self.forwards += 1;
            self.fed.extend_from_slice(tokens);
            return t.forward_last_argmax(tokens);
        }
        Ok(greedy(&self.step(tokens)?))
    }

    /// Make the cache hold exactly `tokens`: cut it back to the prefix it shares with them,
    /// then feed the rest (a few as one-token steps, more in one forward).
    fn feed_prefix(&mut self, tokens: &[u32]) -> Result<(), SpecError> {
        let shared = self
            .fed
            .iter()
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count();
        self.truncate(shared);
        let todo = &tokens[shared..];
        if todo.is_empty() {
            return Ok(());
        }
        if todo.len() <= SEQUENTIAL_FEED {
            return self.feed_steps_any(todo);
        }
        self.forwards += 1;
        self.fed.extend_from_slice(todo);
        match &mut self.backend {
            Backend::Reference { exec, kv } => {
                exec.step(kv, todo)?;
            }
            Backend::Target(t) => {
                t.forward_last_argmax(todo)?;
            }
        }
        Ok(())
    }

    /// Feed a few tokens, one-token steps on a target, one forward on the reference.
    fn feed_steps_any(&mut self, tokens: &[u32]) -> Result<(), SpecError> {
        if let Backend::Reference { exec, kv } = &mut self.backend {
            self.forwards += 1;
            self.fed.extend_from_slice(tokens);
            exec.step(kv, tokens)?;
            return Ok(());
        }
        self.feed_steps(tokens)
    }
}

/// Largest softmax probability of a logits row.
fn top_prob(logits: &[f32]) -> f64 {
    let m = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if !m.is_finite() {
        return 0.0;
    }
    let s: f64 = logits
        .iter()
        .map(|&l| (f64::from(l) - f64::from(m)).exp())
        .sum();
    1.0 / s
}

impl Proposer for DraftModel {
    fn name(&self) -> String {
        format!("draft:{}", self.name)
    }

    fn propose(&mut self, context: &[u32], k: usize, mode: DraftMode) -> Result<Draft, SpecError> {
        if k == 0 || context.is_empty() {
            return Ok(Draft::default());
        }
        // Keep the draft cache in step: cut back to the shared prefix (always feeding at
        // least the last context token, whose logits are needed).
        let shared = self
            .fed
            .iter()
            .zip(context)
            .take_while(|(a, b)| a == b)
            .count()
            .min(context.len() - 1);
        self.truncate(shared);
        let mut draft = Draft {
            tokens: Vec::with_capacity(k),
            dists: (!mode.greedy).then(Vec::new),
        };
        if mode.greedy && mode.confidence <= 0.0 {
            // Only the arg-max of each step is needed.
            let mut t = self.step_pick(&context[shared..])?;
            for j in 0..k {
                draft.tokens.push(t);
                if j + 1 < k {
                    t = self.step_pick(&[t])?;
                }
            }
            return Ok(draft);
        }
        let mut logits = self.step(&context[shared..])?;
        for j in 0..k {
            let t = if mode.greedy {
                if mode.confidence > 0.0 && top_prob(&logits) < mode.confidence {
                    break;
                }
                greedy(&logits)
            } else {
                let dist = self.sampler.distribution(&logits);
                let top = dist.first().map_or(0.0, |x| x.1);
                if mode.confidence > 0.0 && top < mode.confidence {
                    break;
                }
                let u = self.sampler.rng_mut().next_f64();
                let t = draw_from(&dist, u);
                if let Some(d) = draft.dists.as_mut() {
                    d.push(dist);
                }
                t
            };
            draft.tokens.push(t);
            if j + 1 < k {
                logits = self.step(&[t])?;
            }
        }
        Ok(draft)
    }

    fn forwards(&self) -> u64 {
        self.forwards
    }

    fn weight_bytes(&self) -> Option<u64> {
        match &self.backend {
            Backend::Reference { exec, .. } => {
                Some(super::target::model_weight_bytes(exec.model()))
            }
            Backend::Target(t) => t.weight_bytes(),
        }
    }

    fn prefill(&mut self, prompt: &[u32]) -> Result<(), SpecError> {
        // All of the prompt: the first round then feeds only the target's first token. A
        // fresh target-backed draft takes it as a prompt pass (`Target::prefill_last_argmax`:
        // the CUDA decoder's tensor-core GEMMs when on); anything after goes the row path.
        if let (true, Backend::Target(t)) = (
            self.fed.is_empty() && prompt.len() > SEQUENTIAL_FEED,
            &mut self.backend,
        ) {
            self.forwards += 1;
            self.fed.extend_from_slice(prompt);
            t.prefill_last_argmax(prompt)?;
            return Ok(());
        }
        self.feed_prefix(prompt)
    }

    fn sync(&mut self, context: &[u32]) -> Result<(), SpecError> {
        // All but the last token, which the next proposal feeds for its logits.
        match context.split_last() {
            Some((_, before)) => self.feed_prefix(before),
            None => Ok(()),
        }
    }
}
