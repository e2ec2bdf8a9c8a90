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
    attention_prefill_with(
        gpu,
        select::PrefillAttn::Flash,
        q,
        kv,
        pos,
        s,
        scale,
        softcap,
        out,
    )
}

/// [`attention_prefill`] by the variant `v` ([`select::PrefillAttn`]): `Packed` gives the
/// same bits with the query heads of a KV head in one block; `PackedF16` other bits
/// (q as one f16 part, a base-2 softmax), a row's bits still its own.
#[allow(clippy::too_many_arguments)]
pub fn attention_prefill_with(
    gpu: &Gpu,
    v: select::PrefillAttn,
    q: &dyn DevicePtr<f32>,
    kv: &KvView<'_>,
    pos: &dyn DevicePtr<i32>,
    s: AttnShape,
    scale: f32,
    softcap: f32,
    out: &mut dyn DevicePtrMut<f32>,
) -> Result<(), CudaError> {
    const OP: &str = "attention_prefill";
    let entry = select::attention_prefill_entry_for(v, s.head_dim, gpu.info().compute_capability)
        .ok_or_else(|| {
        crate::cuda::shape_err(
            OP,
            format!(
                "no tensor-core prompt attention ({}) for heads of {} dims on this device",
                v.name(),
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
    // Tokens and heads per block: (1, ATT_PREFILL_BQ) for Flash, the packing otherwise.
    let (gp, tt) = match v {
        select::PrefillAttn::Flash => (1, select::ATT_PREFILL_BQ),
        _ => select::attention_prefill_pack(s.n_heads, s.n_kv_heads)
            .ok_or_else(|| crate::cuda::shape_err(OP, "no packing for these heads"))?,
    };
    let tiles = u32::try_from(s.ntok.div_ceil(tt))
        .map_err(|_| crate::cuda::shape_err(OP, "too many tokens"))?;
    let (qp, kp, vp, pp) = (rd(gpu, q), rd(gpu, kv.k), rd(gpu, kv.v), rd(gpu, pos));
    let btp = rd(gpu, kv.bt);
    let op = wr(gpu, out);
    let mut args = vec![
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
    ];
    if v != select::PrefillAttn::Flash {
        args.push(Arg::I32(gp as i32));
        args.push(Arg::I32(tt as i32));
    }
    launch(
        gpu,
        entry,
        LaunchConfig {
            grid_dim: (tiles, (s.n_heads / gp) as u32, 1),
            block_dim: ((gp * tt / 16 * 32) as u32, 1, 1),
            shared_mem_bytes: select::attention_prefill_variant_shared_bytes(v, s.head_dim, gp * tt)
                as u32,
        },
        &args,
    )
}
