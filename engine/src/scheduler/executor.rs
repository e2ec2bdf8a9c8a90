//! The executor the scheduler drives: one step for a batch of sequences, each appending
//! some tokens to its own KV cache and asking for nothing, the logits of its last token,
//! or the next token itself.
//!
//! [`Executor`] is what a backend implements to be served. [`CpuExecutor`] implements it
//! over the CPU [`Reference`] (thread- and batch-invariant, so a sequence's logits do not
//! depend on the rest of the batch). [`super::CudaExecutor`] implements it over the CUDA
//! decoder (one decoder per sequence on one upload of the weights, run one after another
//! within a step, or with the decoding ones as one batched device step when asked).
//!
//! What a sequence asks for is its [`Want`]; the step answers one [`StepOut`] per input, in
//! order:
//!
//! * [`Want::Nothing`] → [`StepOut::Nothing`]: a prefill chunk short of the prompt's end.
//! * [`Want::Logits`] → [`StepOut::Logits`]: the whole row (`n_vocab` f32); the scheduler
//!   masks and samples on the host. Only requests that need the raw row ask for it
//!   (logprobs / `top_logprobs`).
//! * [`Want::Token`] → [`StepOut::Token`]: the executor picks the next token itself from a
//!   [`TokenPick`] — the request's [`Sampler`] (configuration, penalty window, seeded
//!   generator: exactly one [`Sampler::draw`] is taken for a sampled pick, none for a
//!   greedy one, as [`Sampler::sample`] does) and an optional allow-bitmask in
//!   llguidance's layout. [`pick_on_host`] is the host definition every executor must
//!   match: mask the row with `-inf`, then [`Sampler::sample`]. The CUDA executor does it
//!   on the device (mask kernel, device argmax / sampler, 4 bytes back).
//!
//! * [`Want::Rows`] → [`StepOut::Picks`] or [`StepOut::Rows`]: speculative verification
//!   (the input feeds the last committed token then the drafts): the target's pick after
//!   EVERY row, as the plain path would make it at that position — the arg-max of each row
//!   (`argmax: true`: greedy without penalties; the CUDA executor sends back one id per row)
//!   or every logits row (`argmax: false`: the scheduler runs the spec module's
//!   [`crate::spec::ExactVerifier`] on them). The scheduler then cuts the cache back past the
//!   accepted drafts ([`Executor::kv_truncate`]).
//!
//! The pick does not accept the token into the sampler's penalty window; the scheduler does
//! that for every token it keeps.

use crate::kv::SeqKv;
use crate::reference::{LogitRows, Reference, SeqInput};
use crate::sampling::Sampler;

/// A request for the next token, picked by the executor.
pub struct TokenPick<'a> {
    /// The request's sampler. The pick takes exactly the draws [`Sampler::sample`] would
    /// (one when [`Sampler::uses_draw`], else none) and does not accept the token.
    pub sampler: &'a mut Sampler,
    /// Allowed tokens (bit `i % 32` of word `i / 32` set = token `i` allowed, the words of
    /// [`crate::api::constrain::TokenMask::words`]; tokens past the words are disallowed);
    /// `None` = every token.
    pub mask: Option<&'a [u32]>,
}

/// What one sequence asks the step for.
pub enum Want<'a> {
    /// Nothing (a prefill chunk that does not reach the end of the prompt).
    Nothing,
    /// The logits row of the last token fed.
    Logits,
    /// The next token after the last token fed.
    Token(TokenPick<'a>),
    /// Speculative verification: the pick after every token fed, arg-max ids (`argmax`) or
    /// the logits rows.
    Rows { argmax: bool },
}

impl Want<'_> {
    /// The kind of the request, without its data (for logs and tests).
    pub fn kind(&self) -> WantKind {
        match self {
            Want::Nothing => WantKind::Nothing,
            Want::Logits => WantKind::Logits,
            Want::Token(_) => WantKind::Token,
            Want::Rows { .. } => WantKind::Rows,
        }
    }
}

/// [`Want`] without its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WantKind {
    Nothing,
    Logits,
    Token,
    Rows,
}

/// What the step returns for one input.
#[derive(Clone, Debug, PartialEq)]
pub enum StepOut {
    /// The input asked for nothing.
    Nothing,
    /// The logits row of the last token fed.
    Logits(Vec<f32>),
    /// The token picked.
    Token(u32),
    /// The arg-max after every token fed ([`Want::Rows`] with `argmax`).
    Picks(Vec<u32>),
    /// The logits row after every token fed ([`Want::Rows`] without `argmax`).
    Rows(Vec<Vec<f32>>),
}

/// The host pick every executor must equal: set the logits of the tokens `pick.mask`
/// disallows to `-inf`, then [`Sampler::sample`] (one draw when sampled).
pub fn pick_on_host(logits: &mut [f32], pick: &mut TokenPick<'_>) -> u32 {
    if let Some(words) = pick.mask {
        for (i, l) in logits.iter_mut().enumerate() {
            let allowed = words.get(i / 32).is_some_and(|w| w >> (i % 32) & 1 == 1);
            if !allowed {
                *l = f32::NEG_INFINITY;
            }
        }
    }
    pick.sampler.sample(logits)
}

/// One sequence's part of a step.
pub struct StepInput<'a, K> {
    pub kv: &'a mut K,
    pub tokens: &'a [u32],
    /// How many of `tokens`, from the first, are PROMPT tokens (the rest are generated
    /// tokens fed again, e.g. after a preemption): a backend may run its prompt pass on
    /// those only (the CUDA decoder's tensor-core GEMMs, `CudaDecoder::prefill`).
    pub prompt: usize,
    /// What to return for the last token fed.
    pub want: Want<'a>,
}

/// A backend the scheduler can drive.
pub trait Executor: Send + 'static {
    /// One sequence's KV cache.
    type Kv: Send + 'static;

    /// An empty cache for a sequence that will hold at most `capacity` positions (a
    /// backend may size its cache from it). Fails when the memory for it cannot be had.
    fn new_kv(&self, capacity: usize) -> Result<Self::Kv, String>;
    /// Committed positions of `kv`.
    fn kv_len(&self, kv: &Self::Kv) -> usize;
    /// A new cache holding a copy of the first `len` positions of `kv`, room for
    /// `capacity` positions in all.
    fn kv_prefix(&self, kv: &Self::Kv, len: usize, capacity: usize) -> Result<Self::Kv, String>;
    /// Shrink the cache to its first `len` positions and drop spare room (prefix-cache
    /// entries keep only what they hold).
    fn kv_trim(&self, kv: &mut Self::Kv, len: usize);
    /// Forget every position from `len` on, keeping the room (rejected drafts of a
    /// speculative round).
    fn kv_truncate(&self, kv: &mut Self::Kv, len: usize);
    /// Bytes one position takes in a cache.
    fn kv_bytes_per_token(&self) -> usize;
    /// Whether a cache takes the memory of its whole `capacity` when made (then admission
    /// reserves KV blocks for the request's whole length up front).
    fn reserves_capacity(&self) -> bool {
        false
    }
    /// Vocabulary size (logits per row).
    fn n_vocab(&self) -> usize;
    /// Run one step; returns one [`StepOut`] per input, in order, answering its
    /// [`Want`]. On error no cache may have grown.
    fn step(&mut self, batch: &mut [StepInput<'_, Self::Kv>]) -> Result<Vec<StepOut>, String>;
}

/// The CPU reference as a served backend.
pub struct CpuExecutor {
    reference: std::sync::Arc<Reference>,
}

impl CpuExecutor {
    pub fn new(reference: Reference) -> Self {
        Self::shared(std::sync::Arc::new(reference))
    }

    /// An executor over a reference shared with others (a gate's reference path, a draft
    /// model drafting for itself): each sequence still has its own cache.
    pub fn shared(reference: std::sync::Arc<Reference>) -> Self {
        Self { reference }
    }

    /// The wrapped reference.
    pub fn reference(&self) -> &Reference {
        &self.reference
    }
}

impl Executor for CpuExecutor {
    type Kv = SeqKv;

    fn new_kv(&self, _capacity: usize) -> Result<SeqKv, String> {
        Ok(self.reference.new_cache())
    }

    fn kv_len(&self, kv: &SeqKv) -> usize {
        kv.len()
    }

    fn kv_prefix(&self, kv: &SeqKv, len: usize, _capacity: usize) -> Result<SeqKv, String> {
        Ok(kv.prefix_copy(len))
    }

    fn kv_trim(&self, kv: &mut SeqKv, len: usize) {
        *kv = kv.prefix_copy(len);
    }

    fn kv_truncate(&self, kv: &mut SeqKv, len: usize) {
        kv.truncate(len);
    }

    fn kv_bytes_per_token(&self) -> usize {
        SeqKv::bytes_per_token(&self.reference.program().kv_layers)
    }

    fn n_vocab(&self) -> usize {
        self.reference.program().shape.n_vocab
    }

    fn step(&mut self, batch: &mut [StepInput<'_, SeqKv>]) -> Result<Vec<StepOut>, String> {
        let mut inputs: Vec<SeqInput<'_>> = batch
            .iter_mut()
            .map(|b| SeqInput {
                kv: &mut *b.kv,
                tokens: b.tokens,
                logits: match b.want {
                    Want::Nothing => LogitRows::None,
                    Want::Logits | Want::Token(_) => LogitRows::Last,
                    Want::Rows { .. } => LogitRows::All,
                },
            })
            .collect();
        let logits = self
            .reference
            .forward(&mut inputs)
            .map_err(|e| e.to_string())?;
        // Every row of each input, in order (one for `Last`, all for `All`).
        let mut rows: Vec<Vec<Vec<f32>>> = vec![Vec::new(); batch.len()];
        for (i, &(seq, _pos)) in logits.rows.iter().enumerate() {
            if let Some(slot) = rows.get_mut(seq) {
                slot.push(logits.row(i).to_vec());
            }
        }
        batch
            .iter_mut()
            .zip(rows)
            .map(|(b, mut rows)| match (&mut b.want, rows.pop()) {
                (Want::Nothing, _) => Ok(StepOut::Nothing),
                (Want::Logits, Some(row)) => Ok(StepOut::Logits(row)),
                (Want::Token(pick), Some(mut row)) => {
                    Ok(StepOut::Token(pick_on_host(&mut row, pick)))
                }
                (Want::Rows { argmax }, Some(last)) => {
                    rows.push(last);
                    if rows.len() != b.tokens.len() {
                        return Err(format!(
                            "the reference returned {} rows for {} tokens",
                            rows.len(),
                            b.tokens.len()
                        ));
                    }
                    Ok(if *argmax {
                        StepOut::Picks(rows.iter().map(|r| crate::sampling::greedy(r)).collect())
                    } else {
                        StepOut::Rows(rows)
                    })
                }
                (_, None) => {
                    Err("the reference returned no logits row for an input that asked".into())
                }
            })
            .collect()
    }
}
