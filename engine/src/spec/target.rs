//! The model whose distribution speculative decoding must reproduce.

use crate::kv::SeqKv;
use crate::reference::{LogitRows, Reference, SeqInput};
use crate::sampling::greedy;

use super::SpecError;

/// A target model with one sequence's KV cache.
pub trait Target {
    /// Vocabulary size of the logits rows.
    fn n_vocab(&self) -> usize;
    /// Positions in the cache.
    fn len(&self) -> usize;
    /// Whether the cache is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Append `tokens` and return the logits of the last one (prefill, plain decode).
    fn forward_last(&mut self, tokens: &[u32]) -> Result<Vec<f32>, SpecError>;
    /// Append `tokens` in one forward and return the logits of every row, in order
    /// (verification of a draft).
    fn forward_all(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>, SpecError>;
    /// Drop every cached position from `len` on (rejected drafts).
    fn truncate(&mut self, len: usize);
    /// Append `tokens` and return the greedy token after the last one (the largest logit,
    /// lowest id among ties). Used for greedy decoding without penalties, where only the
    /// arg-max matters; a device target computes it without downloading the logits.
    fn forward_last_argmax(&mut self, tokens: &[u32]) -> Result<u32, SpecError> {
        Ok(greedy(&self.forward_last(tokens)?))
    }
    /// [`Target::forward_last`] for PROMPT tokens: a backend may run its prompt pass
    /// (the CUDA decoder's tensor-core GEMMs); generated tokens never come here.
    fn prefill_last(&mut self, prompt: &[u32]) -> Result<Vec<f32>, SpecError> {
        self.forward_last(prompt)
    }
    /// [`Target::forward_last_argmax`] for PROMPT tokens (see [`Target::prefill_last`]).
    fn prefill_last_argmax(&mut self, prompt: &[u32]) -> Result<u32, SpecError> {
        self.forward_last_argmax(prompt)
    }
    /// Bytes of the model's weights, when the backend can tell (the speed policy compares
    /// a draft model's with the target's before drafting).
    fn weight_bytes(&self) -> Option<u64> {
        None
    }
    /// Rows one verification forward runs over the weights in one pass (a forward of more
    /// rows costs another pass); unlimited by default.
    fn rows_per_pass(&self) -> usize {
        usize::MAX
    }
    /// Whether the last forward also did one-time setup whose time is no sample of what
    /// such a forward costs (the CUDA target captures a graph per verification row count
    /// on first use). The speed policy does not learn a verification's cost from it.
    fn last_forward_setup(&self) -> bool {
        false
    }
    /// Append `tokens` in one forward and return the greedy token after each of them
    /// (greedy verification of a draft: one id per row instead of a row of logits).
    fn forward_all_argmax(&mut self, tokens: &[u32]) -> Result<Vec<u32>, SpecError> {
        Ok(self
            .forward_all(tokens)?
            .iter()
            .map(|r| greedy(r))
            .collect())
    }
}

/// The CPU reference executor as a target.
pub struct ReferenceTarget<'a> {
    exec: &'a Reference,
    kv: SeqKv,
}

impl<'a> ReferenceTarget<'a> {
    /// A target with a fresh cache.
    pub fn new(exec: &'a Reference) -> Self {
        Self {
            kv: exec.new_cache(),
            exec,
        }
    }
}

impl Target for ReferenceTarget<'_> {
    fn n_vocab(&self) -> usize {
        self.exec.program().shape.n_vocab
    }

    fn len(&self) -> usize {
        self.kv.len()
    }

    fn forward_last(&mut self, tokens: &[u32]) -> Result<Vec<f32>, SpecError> {
        Ok(self.exec.step(&mut self.kv, tokens)?)
    }

    fn forward_all(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>, SpecError> {
        let mut batch = [SeqInput {
            kv: &mut self.kv,
            tokens,
            logits: LogitRows::All,
        }];
        let logits = self.exec.forward(&mut batch)?;
        if logits.rows.len() != tokens.len() {
            return Err(SpecError::Rows {
                got: logits.rows.len(),
                want: tokens.len(),
            });
        }
        Ok((0..tokens.len()).map(|i| logits.row(i).to_vec()).collect())
    }

    fn truncate(&mut self, len: usize) {
        self.kv.truncate(len);
    }

    fn weight_bytes(&self) -> Option<u64> {
        Some(model_weight_bytes(self.exec.model()))
    }
}

/// Bytes of a checkpoint's tensors.
pub fn model_weight_bytes(m: &crate::model_file::GgufModel) -> u64 {
    m.header().tensors.iter().map(|t| t.bytes).sum()
}
