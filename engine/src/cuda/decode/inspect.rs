//! Read-back of a decoder's state for the gates: the KV cache of the positions fed so far.

use super::{CudaDecoder, model_err};
use crate::cuda::{CudaError, ops};

impl CudaDecoder {
    /// The f16 bits of every cached K and V value of positions `0..len()`, layer by layer
    /// (K then V, each `[n_kv_heads][len][head_dim]`). Downloads the whole cache: for
    /// gates and tests (the `chunking` gate compares it across prompt chunkings), not for
    /// the decode loop.
    pub fn kv_snapshot(&self) -> Result<Vec<u16>, CudaError> {
        let mut out = Vec::new();
        for layer in &self.kv {
            for buf in [&layer.k, &layer.v] {
                let pool = self.gpu.download(buf)?;
                let logical = ops::from_paged(
                    &pool,
                    &self.bt_host,
                    layer.n_kv_heads,
                    self.len,
                    layer.head_dim,
                )
                .ok_or_else(|| model_err("KV pool smaller than its block table"))?;
                out.extend(logical.iter().map(|v| v.to_bits()));
            }
        }
        Ok(out)
    }
}
