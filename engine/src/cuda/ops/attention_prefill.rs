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
    /// The bound on the bytes held, when lower than the default bound.
    budget: Option<usize>,
}

impl PrefillSplitScratch {
    pub fn new() -> Self {
        Self::default()
    }

    /// Scratch bound to `budget` bytes (at most [`select::ATT_PREFILL_SPLIT_SCRATCH_BYTES`])
    /// instead of the bound: kernel-check's way to run a pass of flash4 in row groups (the
    /// bits of one launch). Other variants ignore it.
    pub fn with_budget(budget: usize) -> Self {
        PrefillSplitScratch {
            buf: None,
            budget: Some(budget),
        }
    }

    /// The bound on the bytes held.
    fn budget(&self) -> usize {
        self.budget
            .unwrap_or(select::ATT_PREFILL_SPLIT_SCRATCH_BYTES)
            .min(select::ATT_PREFILL_SPLIT_SCRATCH_BYTES)
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
    let flash = select::PrefillAttn::Flash;
    let mut ws = PrefillSplitScratch::new();
    attention_prefill_ws(gpu, flash, q, kv, pos, s, scale, softcap, &mut ws, out)
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

/// [`attention_prefill`] by the variant `v` ([`select::PrefillAttn`]): `Packed` gives the
/// same bits with the query heads of a KV head in one block; `PackedF16` other bits
/// (q as one f16 part, a base-2 softmax), a row's bits still its own; `PackedSplit`
/// (flash4) `PackedF16`'s arithmetic per split, folded by the combine kernel, its partials
/// in `ws` (grown as needed up to its bound, kept: the decoder keeps one).
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
    let budget = ws.budget();
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
    // flash4: the plan of its row groups and its partials (taken before the other buffers).
    let split = if v == select::PrefillAttn::PackedSplit {
        let plan = select::attention_prefill_split_plan(
            s.ntok, s.n_heads, s.head_dim, s.capacity, tt, budget,
        )
        .ok_or_else(|| crate::cuda::shape_err(OP, "flash4: no scratch plan"))?;
        Some((plan, rd(gpu, &*ws.ensure(gpu, plan.scratch_floats)?)))
    } else {
        None
    };
    let p = Pass::of(gpu, v, q, kv, pos, out, s, scale, softcap, (gp, tt));
    if let Some((plan, part)) = split {
        return split_launches(gpu, entry, &p, plan, part);
    }
    let entry = select::attention_prefill_entry_for(v, s.head_dim, gpu.info().compute_capability)
        .unwrap_or(entry);
    let cfg = config(s.ntok, s, v, (gp, tt), 1)?;
    let mut args = p.args(0, s.ntok, p.out)?;
    if v != select::PrefillAttn::Flash {
        args.push(Arg::I32(gp as i32));
        args.push(Arg::I32(tt as i32));
    }
    launch(gpu, entry, cfg, &args)
}

/// The launch of `n` rows of a prompt pass of `s` in variant `v` (`gp` heads x `tt` tokens
/// per block): tiles x head groups x `z`.
fn config(
    n: usize,
    s: AttnShape,
    v: select::PrefillAttn,
    (gp, tt): (usize, usize),
    z: u32,
) -> Result<LaunchConfig, CudaError> {
    let tiles = u32::try_from(n.div_ceil(tt))
        .map_err(|_| crate::cuda::shape_err("attention_prefill", "too many tokens"))?;
    Ok(LaunchConfig {
        grid_dim: (tiles, (s.n_heads / gp) as u32, z),
        block_dim: ((gp * tt / 16 * 32) as u32, 1, 1),
        shared_mem_bytes: select::attention_prefill_variant_shared_bytes(v, s.head_dim, gp * tt)
            as u32,
    })
}

/// One prompt pass's device addresses (q, the caches, positions, out) and scalars.
struct Pass {
    q: u64,
    k: u64,
    v: u64,
    bt: u64,
    pos: u64,
    out: u64,
    s: AttnShape,
    variant: select::PrefillAttn,
    scale: f32,
    softcap: f32,
    pack: (usize, usize),
}

impl Pass {
    #[allow(clippy::too_many_arguments)]
    fn of(
        gpu: &Gpu,
        variant: select::PrefillAttn,
        q: &dyn DevicePtr<f32>,
        kv: &KvView<'_>,
        pos: &dyn DevicePtr<i32>,
        out: &mut dyn DevicePtrMut<f32>,
        s: AttnShape,
        scale: f32,
        softcap: f32,
        pack: (usize, usize),
    ) -> Pass {
        let (q, k, v, pos) = (rd(gpu, q), rd(gpu, kv.k), rd(gpu, kv.v), rd(gpu, pos));
        let bt = rd(gpu, kv.bt);
        Pass {
            q,
            k,
            v,
            bt,
            pos,
            out: wr(gpu, out),
            s,
            variant,
            scale,
            softcap,
            pack,
        }
    }

    /// A prompt-attention kernel's first arguments for rows `a .. a + n` of the pass
    /// writing into `dst`: q and the positions from row `a`, the caches, then the shape
    /// and the scaling.
    fn args(&self, a: usize, n: usize, dst: u64) -> Result<Vec<Arg>, CudaError> {
        const OP: &str = "attention_prefill";
        let s = self.s;
        let w = (s.n_heads * s.head_dim) as u64;
        Ok(vec![
            Arg::Ptr(self.q + a as u64 * w * 4),
            Arg::Ptr(self.k),
            Arg::Ptr(self.v),
            Arg::Ptr(self.bt),
            Arg::Ptr(self.pos + a as u64 * 4),
            Arg::Ptr(dst),
            Arg::I32(int(OP, "ntok", n)?),
            Arg::I32(int(OP, "n_heads", s.n_heads)?),
            Arg::I32(int(OP, "n_kv_heads", s.n_kv_heads)?),
            Arg::I32(int(OP, "capacity", s.capacity)?),
            Arg::I32(int(OP, "window", s.window)?),
            Arg::F32(self.scale),
            Arg::F32(self.softcap),
        ])
    }
}

/// flash4's launches: per row group of the plan, `attn_prefill_pk1s_d<hd>` (grid tiles x
/// head groups x splits) into the partials `part`, then `attn_prefill_combine` into the
/// group's rows of the output. Rows are independent, so the grouping never changes a row's
/// bits.
fn split_launches(
    gpu: &Gpu,
    entry: &str,
    p: &Pass,
    plan: select::PrefillSplitPlan,
    part: u64,
) -> Result<(), CudaError> {
    const OP: &str = "attention_prefill";
    let s = p.s;
    let (gp, tt) = p.pack;
    let w = (s.n_heads * s.head_dim) as u64;
    let ns = int(OP, "splits", plan.splits)?;
    let mut a = 0;
    while a < s.ntok {
        let b = (a + plan.group_rows).min(s.ntok);
        let n = b - a;
        let cfg = config(n, s, p.variant, p.pack, ns as u32)?;
        let mut args = p.args(a, n, part)?;
        args.extend([Arg::I32(gp as i32), Arg::I32(tt as i32), Arg::I32(ns)]);
        launch(gpu, entry, cfg, &args)?;
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
                Arg::Ptr(p.pos + a as u64 * 4),
                Arg::Ptr(p.out + a as u64 * w * 4),
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
