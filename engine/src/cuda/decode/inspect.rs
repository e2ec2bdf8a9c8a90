//! Read-back of a decoder's state for the gates: the KV cache of the positions fed so far.

use super::{CudaDecoder, model_err};
use crate::cuda::CudaError;

impl CudaDecoder {
    /// The f16 bits of every cached K and V value of positions `0..len()`, layer by layer
    /// (K then V, each `[n_kv_heads][len][head_dim]`). Downloads the whole cache: for
    /// gates and tests (the `chunking` gate compares it across prompt chunkings), not for
    /// the decode loop.
    pub fn kv_snapshot(&self) -> Result<Vec<u16>, CudaError> {
        let mut out = Vec::new();
        for layer in &self.kv {
            for buf in [&layer.k, &layer.v] {
                let all = self.gpu.download(buf)?;
                let per_head = self.capacity * layer.head_dim;
                if all.len() < layer.n_kv_heads * per_head {
                    return Err(model_err("KV buffer smaller than its shape"));
                }
                for h in 0..layer.n_kv_heads {
                    let base = h * per_head;
                    out.extend(
                        all[base..base + self.len * layer.head_dim]
                            .iter()
                            .map(|v| v.to_bits()),
                    );
                }
            }
        }
        Ok(out)
    }
}
