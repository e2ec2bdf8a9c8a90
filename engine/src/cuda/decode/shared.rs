//! Several sequences on one upload of the weights.
//!
//! [`CudaDecoder::share`] makes a decoder with its own activation buffers, attention
//! scratch, step graph and KV cache around the weights of another: the matrices, vectors
//! and RoPE tables are reference-counted, never copied, so a served model pays for its
//! weights once however many sequences run. [`CudaDecoder::copy_prefix_from`] fills a KV
//! cache with the first positions of another decoder's by device-to-device copies (the
//! prefix cache of the scheduler), and [`CudaDecoder::truncate`] forgets positions (a step
//! rolled back). The served CUDA backend (`scheduler::CudaExecutor`) keeps one decoder per
//! sequence this way.

use super::{CudaDecoder, model_err};
use crate::cuda::{CudaError, ops};
use std::sync::Arc;

impl CudaDecoder {
    /// A new decoder on the same uploaded weights, with an empty KV cache of `capacity`
    /// positions (and buffers of its own).
    pub fn share(&self, capacity: usize) -> Result<CudaDecoder, CudaError> {
        if capacity == 0 {
            return Err(model_err("a KV cache needs at least one position"));
        }
        let mut d = Self::with_weights(
            Arc::clone(&self.gpu),
            self.program.clone(),
            Arc::clone(&self.mats),
            Arc::clone(&self.weights),
            Arc::clone(&self.rope),
            capacity,
        )?;
        // The decode products' mode of the decoder shared from (a batch's rows must agree).
        d.set_mmv(self.mmv_on())?;
        d.mv = self.mv;
        d.share_prefill(self);
        // One batched-step workspace (and its captured steps) per upload of the weights.
        d.batch = Arc::clone(&self.batch);
        Ok(d)
    }

    /// Whether `other` runs on the same uploaded weights (made by [`CudaDecoder::share`]).
    pub fn shares_weights_with(&self, other: &CudaDecoder) -> bool {
        Arc::ptr_eq(&self.mats, &other.mats) && Arc::ptr_eq(&self.weights, &other.weights)
    }

    /// Bytes of KV cache one position takes (f16 keys and values of every layer).
    pub fn kv_bytes_per_token(&self) -> usize {
        self.kv
            .iter()
            .map(|l| 2 * l.n_kv_heads * l.head_dim * std::mem::size_of::<half::f16>())
            .sum()
    }

    /// Forget every position from `len` on (nothing when the sequence is shorter).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Make this decoder's sequence the first `len` positions of `src`'s: the pool blocks
    /// that hold them are copied on the device, block by block through both block tables
    /// (whole blocks: the positions of the last block past `len` are never read before
    /// they are written).
    pub fn copy_prefix_from(&mut self, src: &CudaDecoder, len: usize) -> Result<(), CudaError> {
        if !self.shares_weights_with(src) {
            return Err(model_err("KV copy between decoders of different weights"));
        }
        if len > src.len || len > self.capacity {
            return Err(model_err(format!(
                "cannot copy {len} positions (source holds {}, room for {})",
                src.len, self.capacity
            )));
        }
        let stream = Arc::clone(self.gpu.stream());
        let blocks = ops::kv_blocks(len);
        for (dst, s) in self.kv.iter_mut().zip(&src.kv) {
            if dst.n_kv_heads != s.n_kv_heads || dst.head_dim != s.head_dim {
                return Err(model_err("KV layers differ in shape"));
            }
            let n = ops::kv_block_len(s.n_kv_heads, s.head_dim);
            for b in 0..blocks {
                let p = b * crate::cuda::sources::consts::KV_BLOCK;
                let (Some(so), Some(d)) = (
                    ops::kv_pool_offset(&src.bt_host, 0, p, s.n_kv_heads, s.head_dim),
                    ops::kv_pool_offset(&self.bt_host, 0, p, s.n_kv_heads, s.head_dim),
                ) else {
                    return Err(model_err("KV block tables shorter than the copy"));
                };
                if so + n > s.k.len().min(s.v.len()) || d + n > dst.k.len().min(dst.v.len()) {
                    return Err(model_err("KV block past its pool"));
                }
                stream.memcpy_dtod(&s.k.slice(so..so + n), &mut dst.k.slice_mut(d..d + n))?;
                stream.memcpy_dtod(&s.v.slice(so..so + n), &mut dst.v.slice_mut(d..d + n))?;
            }
        }
        self.len = len;
        Ok(())
    }
}
