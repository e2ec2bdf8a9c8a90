//! The executor the scheduler drives: one step for a batch of sequences, each appending
//! some tokens to its own KV cache and asking for the logits of its last token or none.
//!
//! [`Executor`] is what a backend implements to be served. [`CpuExecutor`] implements it
//! over the CPU [`Reference`] (thread- and batch-invariant, so a sequence's logits do not
//! depend on the rest of the batch). [`super::CudaExecutor`] implements it over the CUDA
//! decoder (one decoder per sequence on one upload of the weights, run one after another
//! within a step; a batched device step is the batched-decode issue).

use crate::kv::SeqKv;
use crate::reference::{LogitRows, Reference, SeqInput};

/// One sequence's part of a step.
pub struct StepInput<'a, K> {
    pub kv: &'a mut K,
    pub tokens: &'a [u32],
    /// Return the logits of the last token (else none: a prefill chunk).
    pub want_logits: bool,
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
    /// Bytes one position takes in a cache.
    fn kv_bytes_per_token(&self) -> usize;
    /// Whether a cache takes the memory of its whole `capacity` when made (then admission
    /// reserves KV blocks for the request's whole length up front).
    fn reserves_capacity(&self) -> bool {
        false
    }
    /// Vocabulary size (logits per row).
    fn n_vocab(&self) -> usize;
    /// Run one step; returns, for each input in order that asked, its row of logits
    /// (`None` for inputs that did not ask). On error no cache may have grown.
    fn step(
        &mut self,
        batch: &mut [StepInput<'_, Self::Kv>],
    ) -> Result<Vec<Option<Vec<f32>>>, String>;
}

/// The CPU reference as a served backend.
pub struct CpuExecutor {
    reference: Reference,
}

impl CpuExecutor {
    pub fn new(reference: Reference) -> Self {
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

    fn kv_bytes_per_token(&self) -> usize {
        SeqKv::bytes_per_token(&self.reference.program().kv_layers)
    }

    fn n_vocab(&self) -> usize {
        self.reference.program().shape.n_vocab
    }

    fn step(
        &mut self,
        batch: &mut [StepInput<'_, SeqKv>],
    ) -> Result<Vec<Option<Vec<f32>>>, String> {
        let mut inputs: Vec<SeqInput<'_>> = batch
            .iter_mut()
            .map(|b| SeqInput {
                kv: &mut *b.kv,
                tokens: b.tokens,
                logits: if b.want_logits {
                    LogitRows::Last
                } else {
                    LogitRows::None
                },
            })
            .collect();
        let logits = self
            .reference
            .forward(&mut inputs)
            .map_err(|e| e.to_string())?;
        let mut out: Vec<Option<Vec<f32>>> = vec![None; batch.len()];
        for (i, &(seq, _pos)) in logits.rows.iter().enumerate() {
            if let Some(slot) = out.get_mut(seq) {
                *slot = Some(logits.row(i).to_vec());
            }
        }
        Ok(out)
    }
}
