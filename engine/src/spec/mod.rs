//! Speculative decoding that never changes the output.
//!
//! Owns the [`Proposer`] trait and its implementations — a draft model with the target's
//! vocabulary ([`DraftModel`]) and n-gram prompt lookup ([`NgramProposer`]); the trait
//! leaves room for an MTP head — the [`Target`] the drafts are verified on
//! ([`ReferenceTarget`]: the CPU reference executor; [`CudaTarget`]: the CUDA decoder,
//! whose verification forward returns the device arg-max of each row for greedy decoding
//! without penalties, see [`argmax_only`]), the [`Verifier`] (greedy match and
//! distribution-exact rejection sampling, [`ExactVerifier`]), adaptive depth and the
//! speculation-off policy ([`AdaptiveDepth`]), acceptance statistics ([`SpecStats`], for the
//! CLI, `/metrics` and receipts), and the decode loop ([`generate`]) next to the plain loop
//! it must equal ([`plain_generate`]). `assay serve --spec` runs the same rounds inside the
//! scheduler, one sequence's round per step input (`crate::scheduler::spec`).
//!
//! One round: the proposer drafts `d_1..d_k` after the committed context; the target runs
//! ONE forward of `k + 1` rows (the last committed token, then the drafts) with logits of
//! every row; row `i` is the target's distribution after `context + d_1..d_i`. The reference
//! executor is batch-invariant (a row's arithmetic does not depend on the other rows), so
//! row `i` equals what plain decode computes at that position when the drafts before it
//! equal plain decode's tokens: greedy speculative output is token-identical to plain greedy
//! decode by construction (and `harness gate`'s `spec` gate checks it for K = 1..8). The
//! target's KV cache is truncated past the accepted tokens; the draft model's cache is cut
//! back to the longest prefix it shares with the new context before it drafts again.
//!
//! Sampled mode (temperature > 0): draft token `x` drawn from the draft's distribution `q`
//! is accepted with probability `min(1, p(x) / q(x))`, else the token is drawn from the
//! normalized residual `max(0, p - q)`; when every draft is accepted one more token is
//! drawn from the last row. The emitted sequence then has exactly the distribution of plain
//! sampling from `p` (Leviathan et al. 2023; Chen et al. 2023). `p` is the sampler's own
//! distribution (penalties over the history, top-k/top-p/min-p, temperature), row by row.
//! A deterministic proposer (n-gram) has `q = δ(x)`: accept with probability `p(x)`, else
//! draw from `p` with `x` removed. All uniforms come from the target sampler's seeded
//! [`crate::sampling::Rng`] (the draft model samples with its own, seeded from the same
//! seed), so one seed and one K give the same tokens.

mod adaptive;
mod cuda;
mod decode;
mod draft_model;
mod ngram;
mod stats;
pub mod synthetic;
mod target;
#[cfg(test)]
mod tests;
mod verify;

pub use adaptive::{
    AdaptiveDepth, CostModel, DepthConfig, EVIDENCE_CAP, EvidenceParams, EvidencePolicy, MARGIN,
    MAX_MISSES, PLAIN_PROBE_STEPS, Plan, PolicyEvent, Replay, RoundCost, SpecWindow, Verdict,
    best_case_s_per_token, expected_tokens, judge, replay_cost,
};
pub use cuda::CudaTarget;
pub use decode::{Generation, StopReason, argmax_only, generate, plain_generate, replay};
pub use draft_model::{DraftModel, check_vocab};
pub use ngram::NgramProposer;
pub use stats::SpecStats;
pub use target::{ReferenceTarget, Target, model_weight_bytes};
pub use verify::{ExactVerifier, RoundResult, Verifier, greedy_match, residual_draw};

use crate::reference::ReferenceError;
use crate::tokenizer::TokenizerError;

/// Errors of speculative decoding.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error(transparent)]
    Reference(#[from] ReferenceError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error(
        "the draft model's vocabulary differs from the target's: {0}; a draft must share the target's tokenizer"
    )]
    VocabMismatch(String),
    #[error("the target returned {got} logits rows for {want} tokens")]
    Rows { got: usize, want: usize },
    #[error("empty prompt")]
    EmptyPrompt,
    #[error("{0}")]
    Other(String),
}

/// A proposal: up to `k` draft tokens following the committed context.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Draft {
    pub tokens: Vec<u32>,
    /// For each token, the distribution it was drawn from (`(token, probability)`), when
    /// the proposer samples; `None` for a deterministic proposal (point mass on the token)
    /// and for greedy drafting.
    pub dists: Option<Vec<Vec<(u32, f64)>>>,
}

/// How the proposer should draft (mirrors the target's sampler).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DraftMode {
    /// Draft greedily (the target decodes greedily) or sample with the target's
    /// temperature/filters.
    pub greedy: bool,
    /// Stop drafting when the draft's top probability (softmax of its raw logits) falls
    /// under this (0 = never). Ignored by deterministic proposers.
    pub confidence: f64,
}

/// A source of draft tokens. Implementations: a draft model ([`DraftModel`]), n-gram prompt
/// lookup ([`NgramProposer`]); an MTP head would be a third (drafting from the target's own
/// hidden state).
pub trait Proposer {
    /// Short name for statistics and receipts (`draft:<file>`, `ngram`).
    fn name(&self) -> String;
    /// Propose up to `k` tokens to follow `context` (the prompt and every token emitted so
    /// far). May return fewer (none when it has nothing).
    fn propose(&mut self, context: &[u32], k: usize, mode: DraftMode) -> Result<Draft, SpecError>;
    /// Forward passes of a draft network made so far (0 for lookup proposers).
    fn forwards(&self) -> u64 {
        0
    }
    /// Bytes of the draft network's weights, when it can tell (the speed policy's first
    /// estimate of a draft step); `None` for lookup proposers.
    fn weight_bytes(&self) -> Option<u64> {
        None
    }
    /// Drafting costs nothing next to a target step and depends only on the context (a
    /// lookup): the speed policy may then replay it over plain tokens to see whether
    /// speculation would pay again, instead of probing blind.
    fn is_free(&self) -> bool {
        false
    }
    /// The evidence behind what [`Proposer::propose`] drafts after `context`, for a lookup
    /// proposer: the length of the match it drafts from ([`NgramProposer::match_len`]);
    /// `None` when the proposer has none to give.
    fn evidence(&self, _context: &[u32]) -> Option<usize> {
        None
    }
    /// Process the prompt before decoding starts (a draft model's prompt pass, timed with
    /// the prefill); the default does nothing.
    fn prefill(&mut self, _prompt: &[u32]) -> Result<(), SpecError> {
        Ok(())
    }
    /// Catch up with `context` after rounds that did not draft (plain steps while the
    /// policy had speculation off), so that the next [`Proposer::propose`] feeds only the
    /// last token; the default does nothing.
    fn sync(&mut self, _context: &[u32]) -> Result<(), SpecError> {
        Ok(())
    }
}

/// Options of one speculative generation.
#[derive(Clone, Debug, PartialEq)]
pub struct SpecOptions {
    /// Depth: fixed or adaptive, confidence cut, the off policy.
    pub depth: DepthConfig,
    /// Tokens that end generation (end-of-generation ids) unless `ignore_eos`.
    pub eog: Vec<u32>,
    pub ignore_eos: bool,
}
