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
//! replays the sequence's captured CUDA graph, a prefill chunk runs eagerly) and downloads
//! the logits of those that ask: the tokens of a sequence are those of `assay generate
//! --backend cuda`, whatever else runs beside it. A batched device step (one matvec pass for
//! every sequence) is the batched-decode issue, not this. On a failed step every decoder
//! is truncated back to where it was, so no cache grows.

use std::sync::Arc;

use super::{Executor, StepInput};
use crate::cuda::{CudaDecoder, CudaError, Gpu};
use crate::model_file::GgufModel;

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
        Ok(Self { base, graph })
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

    fn run(&self, input: &mut StepInput<'_, CudaKv>) -> Result<Option<Vec<f32>>, CudaError> {
        let dec = &mut input.kv.dec;
        match input.tokens {
            [t] if self.graph => {
                dec.step_graphed(*t)?;
            }
            toks => dec.forward(toks)?,
        }
        if input.want_logits {
            Ok(Some(dec.logits()?))
        } else {
            Ok(None)
        }
    }
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

    fn kv_bytes_per_token(&self) -> usize {
        self.base.kv_bytes_per_token()
    }

    fn reserves_capacity(&self) -> bool {
        true
    }

    fn n_vocab(&self) -> usize {
        self.base.program().shape.n_vocab
    }

    fn step(
        &mut self,
        batch: &mut [StepInput<'_, CudaKv>],
    ) -> Result<Vec<Option<Vec<f32>>>, String> {
        let before: Vec<usize> = batch.iter().map(|b| b.kv.dec.len()).collect();
        let mut out = Vec::with_capacity(batch.len());
        let mut failed = None;
        for input in batch.iter_mut() {
            match self.run(input) {
                Ok(row) => out.push(row),
                Err(e) => {
                    failed = Some(e.to_string());
                    break;
                }
            }
        }
        match failed {
            None => Ok(out),
            Some(e) => {
                for (b, &len) in batch.iter_mut().zip(&before) {
                    b.kv.dec.truncate(len);
                }
                Err(e)
            }
        }
    }
}
