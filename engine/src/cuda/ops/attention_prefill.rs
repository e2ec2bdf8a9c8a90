//! The prompt pass's attention on tensor cores (`kernels/attention.cu`'s
//! `attn_prefill_d<HD>`: flash attention over the paged f16 cache, mma.sync for q.k and
//! P.V, an online softmax). Checked by kernel-check's `attention_prefill` cases against
//! the CPU reference, and row by row against itself (rows alone, passes split anyhow).

use super::attention::{AttnShape, KvView, check_io};
use super::{Arg, int, launch, rd, wr};
use crate::cuda::select;
use crate::cuda::{CudaError, Gpu};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, LaunchConfig};

/// flash4's partials ([`select::PrefillAttn::PackedSplit`]): one device buffer, grown to
/// the largest launch asked of it and kept (a decoder holds one: no allocation per pass in
/// steady state), never above [`select::ATT_PREFILL_SPLIT_SCRATCH_BYTES`].
#[derive(Default)]
pub struct PrefillSplitScratch {
    buf: Option<CudaSlice<f32>>,
}

impl PrefillSplitScratch {
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.buf.as_ref().map_or(0, |b| b.len() * 4)
    }

    /// The buffer, grown to at least `floats` values.
    fn ensure(&mut self, gpu: &Gpu, floats: usize) -> Result<&mut CudaSlice<f32>, CudaError> {
        if self.buf.as_ref().is_none_or(|b| b.len() < floats) {
            self.buf = None; // free the old one first
            self.buf = Some(gpu.zeros::<f32>(floats.max(1))?);
        }
        self.buf
            .as_mut()
            .ok_or_else(|| crate::cuda::shape_err("attention_prefill", "no scratch"))
    }
}

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
/// (q as one f16 part, a base-2 softmax), a row's bits still its own; `PackedSplit`
/// (flash4) `PackedF16`'s arithmetic per split, folded by the combine kernel, with scratch
/// allocated for this call (the decoder keeps one: [`attention_prefill_ws`]).
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
    let mut ws = PrefillSplitScratch::new();
    attention_prefill_ws(gpu, v, q, kv, pos, s, scale, softcap, &mut ws, out)
}

/// The variant that runs for `v` on a pass of `s` (`tt` tokens per tile): flash4 whose
/// single token would need more scratch than the bound runs flash3 (same blocks, one split).
pub fn attention_prefill_effective(
    v: select::PrefillAttn,
    s: AttnShape,
    tt: usize,
) -> select::PrefillAttn {
    if v == select::PrefillAttn::PackedSplit
        && select::attention_prefill_split_plan(
            s.ntok.max(1),
            s.n_heads,
            s.head_dim,
            s.capacity,
            tt,
            select::ATT_PREFILL_SPLIT_SCRATCH_BYTES,
        )
        .is_none()
    {
        select::PrefillAttn::PackedF16
    } else {
        v
    }
}

/// [`attention_prefill_with`] with flash4's partials in `ws` (grown as needed, kept).
#[allow(clippy::too_many_arguments)]
pub fn attention_prefill_ws(
    gpu: &Gpu,
    v: select::PrefillAttn,
    q: &dyn DevicePtr<f32>,
    kv: &KvView<'_>,
    pos: &dyn DevicePtr<i32>,
    s: AttnShape,
    scale: f32,
    softcap: f32,
    ws: &mut PrefillSplitScratch,
    out: &mut dyn DevicePtrMut<f32>,
) -> Result<(), CudaError> {
    let budget = select::ATT_PREFILL_SPLIT_SCRATCH_BYTES;
    attention_prefill_budget(gpu, v, q, kv, pos, s, scale, softcap, budget, ws, out)
}

/// [`attention_prefill_ws`] with flash4's scratch bound `budget` bytes (at most
/// [`select::ATT_PREFILL_SPLIT_SCRATCH_BYTES`]) instead of the bound: kernel-check's way to
/// run a pass in row groups (the bits of one launch). Other variants ignore it.
#[allow(clippy::too_many_arguments)]
pub fn attention_prefill_budget(
    gpu: &Gpu,
    v: select::PrefillAttn,
    q: &dyn DevicePtr<f32>,
    kv: &KvView<'_>,
    pos: &dyn DevicePtr<i32>,
    s: AttnShape,
    scale: f32,
    softcap: f32,
    budget: usize,
    ws: &mut PrefillSplitScratch,
    out: &mut dyn DevicePtrMut<f32>,
) -> Result<(), CudaError> {
    let budget = budget.min(select::ATT_PREFILL_SPLIT_SCRATCH_BYTES);
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
    let v = attention_prefill_effective(v, s, tt);
    if v == select::PrefillAttn::PackedSplit {
        let geo = (gp, tt, budget);
        return split_launches(gpu, entry, q, kv, pos, s, scale, softcap, geo, ws, out);
    }
    let entry = select::attention_prefill_entry_for(v, s.head_dim, gpu.info().compute_capability)
        .unwrap_or(entry);
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

/// flash4's launches: per row group of the plan, `attn_prefill_pk1s_d<hd>` (grid tiles x
/// head groups x splits) into `ws`, then `attn_prefill_combine` into the group's rows of
/// `out`. Rows are independent, so the grouping never changes a row's bits.
#[allow(clippy::too_many_arguments)]
fn split_launches(
    gpu: &Gpu,
    entry: &str,
    q: &dyn DevicePtr<f32>,
    kv: &KvView<'_>,
    pos: &dyn DevicePtr<i32>,
    s: AttnShape,
    scale: f32,
    softcap: f32,
    (gp, tt, budget): (usize, usize, usize),
    ws: &mut PrefillSplitScratch,
    out: &mut dyn DevicePtrMut<f32>,
) -> Result<(), CudaError> {
    const OP: &str = "attention_prefill";
    let plan =
        select::attention_prefill_split_plan(s.ntok, s.n_heads, s.head_dim, s.capacity, tt, budget)
            .ok_or_else(|| crate::cuda::shape_err(OP, "flash4: no scratch plan"))?;
    let part = rd(gpu, &*ws.ensure(gpu, plan.scratch_floats)?);
    let (qp, kp, vp, pp) = (rd(gpu, q), rd(gpu, kv.k), rd(gpu, kv.v), rd(gpu, pos));
    let btp = rd(gpu, kv.bt);
    let op = wr(gpu, out);
    let w = (s.n_heads * s.head_dim) as u64;
    let ns = int(OP, "splits", plan.splits)?;
    let shared = select::attention_prefill_variant_shared_bytes(
        select::PrefillAttn::PackedSplit,
        s.head_dim,
        gp * tt,
    ) as u32;
    let mut a = 0;
    while a < s.ntok {
        let b = (a + plan.group_rows).min(s.ntok);
        let n = b - a;
        let tiles = u32::try_from(n.div_ceil(tt))
            .map_err(|_| crate::cuda::shape_err(OP, "too many tokens"))?;
        launch(
            gpu,
            entry,
            LaunchConfig {
                grid_dim: (tiles, (s.n_heads / gp) as u32, ns as u32),
                block_dim: ((gp * tt / 16 * 32) as u32, 1, 1),
                shared_mem_bytes: shared,
            },
            &[
                Arg::Ptr(qp + a as u64 * w * 4),
                Arg::Ptr(kp),
                Arg::Ptr(vp),
                Arg::Ptr(btp),
                Arg::Ptr(pp + a as u64 * 4),
                Arg::Ptr(part),
                Arg::I32(int(OP, "ntok", n)?),
                Arg::I32(int(OP, "n_heads", s.n_heads)?),
                Arg::I32(int(OP, "n_kv_heads", s.n_kv_heads)?),
                Arg::I32(int(OP, "capacity", s.capacity)?),
                Arg::I32(int(OP, "window", s.window)?),
                Arg::F32(scale),
                Arg::F32(softcap),
                Arg::I32(gp as i32),
                Arg::I32(tt as i32),
                Arg::I32(ns),
            ],
        )?;
        let rows = n * s.n_heads;
        let blocks = u32::try_from(rows.div_ceil(4))
            .map_err(|_| crate::cuda::shape_err(OP, "too many rows"))?;
        launch(
            gpu,
            "attn_prefill_combine",
            LaunchConfig {
                grid_dim: (blocks, 1, 1),
                block_dim: (128, 1, 1),
                shared_mem_bytes: 0,
            },
            &[
                Arg::Ptr(part),
                Arg::Ptr(pp + a as u64 * 4),
                Arg::Ptr(op + a as u64 * w * 4),
                Arg::I32(int(OP, "ntok", n)?),
                Arg::I32(int(OP, "n_heads", s.n_heads)?),
                Arg::I32(int(OP, "head_dim", s.head_dim)?),
                Arg::I32(int(OP, "capacity", s.capacity)?),
                Arg::I32(int(OP, "window", s.window)?),
                Arg::I32(ns),
            ],
        )?;
        a = b;
    }
    Ok(())
}
