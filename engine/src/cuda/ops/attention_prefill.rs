//! The prompt pass's attention on tensor cores (`kernels/attention.cu`'s
//! `attn_prefill_d<HD>`: flash attention over the paged f16 cache, mma.sync for q.k and
//! P.V, an online softmax). Checked by kernel-check's `attention_prefill` cases against
//! the CPU reference, and row by row against itself (rows alone, passes split anyhow).

use super::attention::{AttnShape, KvView, check_io};
use super::{Arg, int, launch, rd, wr};
use crate::cuda::select;
use crate::cuda::{CudaError, Gpu};
use cudarc::driver::{DevicePtr, DevicePtrMut, LaunchConfig};

/// The prompt pass's attention on tensor cores (`attn_prefill_d64` / `_d128`, flash
/// attention): `s.ntok` query tokens (q: `[ntok][n_heads][head_dim]`, positions `pos`) over
/// a layer's paged f16 caches, as [`super::attention()`] computes it but with q (times `scale`) in
/// f16 hi + lo parts and the softmax weights rounded to f16 for the MMA with V; no scratch.
/// A token's bits depend only on its q, position and the cache (not on the pass). Only
/// for the head sizes of [`select::attention_prefill_entry`].
#[allow(clippy::too_many_arguments)]
pub fn attention_prefill(
    gpu: &Gpu,
    q: &dyn DevicePtr<f32>,
    kv: &KvView<'_>,
    pos: &dyn DevicePtr<i32>,
    s: AttnShape,
    scale: f32,
    softcap: f32,
    out: &mut dyn DevicePtrMut<f32>,
) -> Result<(), CudaError> {
    const OP: &str = "attention_prefill";
    let entry = select::attention_prefill_entry(s.head_dim, gpu.info().compute_capability)
        .ok_or_else(|| {
            crate::cuda::shape_err(
                OP,
                format!(
                    "no tensor-core prompt attention for heads of {} dims on this device",
                    s.head_dim
                ),
            )
        })?;
    if s.n_kv_heads == 0 || s.n_heads == 0 || s.n_heads % s.n_kv_heads != 0 {
        return Err(crate::cuda::shape_err(
            OP,
            format!(
                "{} query heads do not share {} KV heads evenly",
                s.n_heads, s.n_kv_heads
            ),
        ));
    }
    check_io(OP, s, q.len(), out.len(), pos.len())?;
    kv.check(OP, s)?;
    if s.ntok == 0 {
        return Ok(());
    }
    let tiles = u32::try_from(s.ntok.div_ceil(select::ATT_PREFILL_BQ))
        .map_err(|_| crate::cuda::shape_err(OP, "too many tokens"))?;
    let (qp, kp, vp, pp) = (rd(gpu, q), rd(gpu, kv.k), rd(gpu, kv.v), rd(gpu, pos));
    let btp = rd(gpu, kv.bt);
    let op = wr(gpu, out);
    launch(
        gpu,
        entry,
        LaunchConfig {
            grid_dim: (tiles, int(OP, "n_heads", s.n_heads)? as u32, 1),
            block_dim: ((select::ATT_PREFILL_BQ / 16 * 32) as u32, 1, 1),
            shared_mem_bytes: select::attention_prefill_shared_bytes(s.head_dim) as u32,
        },
        &[
            Arg::Ptr(qp),
            Arg::Ptr(kp),
            Arg::Ptr(vp),
            Arg::Ptr(btp),
            Arg::Ptr(pp),
            Arg::Ptr(op),
            Arg::I32(int(OP, "ntok", s.ntok)?),
            Arg::I32(int(OP, "n_heads", s.n_heads)?),
            Arg::I32(int(OP, "n_kv_heads", s.n_kv_heads)?),
            Arg::I32(int(OP, "capacity", s.capacity)?),
            Arg::I32(int(OP, "window", s.window)?),
            Arg::F32(scale),
            Arg::F32(softcap),
        ],
    )
}
