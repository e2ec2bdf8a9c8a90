//! The batched decode step of the served CUDA backend (`assay serve --batched-decode`,
//! [`CudaExecutor::with_batched_decode`]; opt-in until the H200 shows the `batch` gate
//! green).
//!
//! Every input of a step that feeds one token (a decoding sequence, whatever it asks for)
//! runs in ONE batched device step ([`CudaDecoder::forward_batch_argmax`]: each weight read
//! once per group of up to 64 sequences, RoPE + KV store and attention one launch per layer
//! for all of them, each row into its own KV cache; by default one captured CUDA graph per
//! row count in a workspace shared by every decoder of the executor's weights, so a request
//! joining or leaving replays the graph of the new count, captured once per count seen,
//! `ASSAY_BATCH_GRAPH=0`: eager); the
//! other inputs (prefill chunks) run one by one as in the plain path, and a step with fewer
//! than two decoding sequences is the plain path altogether (graph replay for one).
//!
//! The batched step leaves each sequence's logits in its decoder exactly as a one-sequence
//! forward does (bit for bit: the `batch` gate), so the pick afterwards is the plain
//! path's: greedy without a mask takes the row's device argmax from the batched step; a
//! mask ([`CudaDecoder::set_mask`]) then [`CudaDecoder::argmax`], or the device sampler
//! ([`CudaDecoder::sample`], one draw from the request's sampler), or the logits row for
//! requests that ask for it.

use super::{CudaExecutor, CudaKv, device_argmax};
use crate::cuda::{CudaDecoder, CudaError, shape_err};
use crate::scheduler::{StepInput, StepOut, Want};

impl CudaExecutor {
    /// One step with the decoding inputs batched (see the module header).
    pub(super) fn step_batched(
        &self,
        batch: &mut [StepInput<'_, CudaKv>],
    ) -> Result<Vec<StepOut>, CudaError> {
        // A lone PROMPT token (the tail of a chunked prompt) takes the prompt pass in
        // `run`, not the batched row path.
        let decodes = |b: &StepInput<'_, CudaKv>| b.tokens.len() == 1 && b.prompt == 0;
        let decoding: Vec<usize> = (0..batch.len()).filter(|&i| decodes(&batch[i])).collect();
        if decoding.len() < 2 {
            return batch.iter_mut().map(|input| self.run(input)).collect();
        }
        let mut out: Vec<Option<StepOut>> = (0..batch.len()).map(|_| None).collect();
        for (i, input) in batch.iter_mut().enumerate() {
            if !decodes(input) {
                out[i] = Some(self.run(input)?);
            }
        }
        let tokens: Vec<u32> = decoding.iter().map(|&i| batch[i].tokens[0]).collect();
        let greedy = {
            let mut decs: Vec<&mut CudaDecoder> = batch
                .iter_mut()
                .filter(|b| decodes(b))
                .map(|b| &mut *b.kv.dec)
                .collect();
            CudaDecoder::forward_batch_argmax(&mut decs, &tokens)?
        };
        for (&i, &g) in decoding.iter().zip(&greedy) {
            let input = &mut batch[i];
            let dec = &mut input.kv.dec;
            out[i] = Some(match &mut input.want {
                Want::Nothing => StepOut::Nothing,
                Want::Logits => StepOut::Logits(dec.logits()?),
                // A verification feeds two tokens at least: never a one-token input.
                Want::Rows { .. } => {
                    return Err(shape_err("batched step", "a one-row verification"));
                }
                Want::Token(pick) => {
                    let argmax = device_argmax(pick.sampler.config());
                    if argmax && pick.mask.is_none() {
                        StepOut::Token(g)
                    } else {
                        if let Some(words) = pick.mask {
                            dec.set_mask(words)?;
                        }
                        StepOut::Token(if argmax {
                            dec.argmax()?
                        } else {
                            dec.sample(pick.sampler)?
                        })
                    }
                }
            });
        }
        out.into_iter()
            .map(|o| o.ok_or_else(|| shape_err("batched step", "an input got no answer")))
            .collect()
    }
}
