//! Wrappers of `attention.cu`'s split-KV decode attention: one sequence ([`attention`],
//! [`attention_two_pass`]) or rows of different sequences ([`attention_rows`]), over the
//! paged f16 KV cache (`kv.rs` has its layout and checks, `rope_kv.rs` the writes into it).

use super::kv::{KvRowsDev, check_pages};
use super::{Arg, int, launch, need, rd, wr};
use crate::cuda::select::{self, AttentionKernel};
use crate::cuda::sources::consts::ATT_SPLIT;
use crate::cuda::{CudaError, Gpu};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, LaunchConfig};
use half::f16;

/// The shape of one attention call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttnShape {
    /// Query tokens in the launch.
    pub ntok: usize,
    /// Query heads.
    pub n_heads: usize,
    /// KV heads (`n_heads` must be a multiple).
    pub n_kv_heads: usize,
    /// Head size.
    pub head_dim: usize,
    /// KV cache capacity in positions.
    pub capacity: usize,
    /// Sliding window in positions (0: none).
    pub window: usize,
}

/// Device scratch of the split-KV attention: per (token, head, split) the unnormalised
/// output and (max, sum), and per (token, head) the count of splits done (zero between
/// launches: the block that completes a count resets it). Sized for at most `max_tok`
/// tokens of one shape.
pub struct AttnScratch {
    part_o: CudaSlice<f32>,
    part_ml: CudaSlice<f32>,
    count: CudaSlice<u32>,
    max_tok: usize,
    n_heads: usize,
    head_dim: usize,
    max_splits: usize,
}

impl AttnScratch {
    /// Scratch for up to `max_tok` query tokens of `n_heads` heads of `head_dim` over a
    /// cache of `capacity` positions.
    pub fn new(
        gpu: &Gpu,
        max_tok: usize,
        n_heads: usize,
        head_dim: usize,
        capacity: usize,
    ) -> Result<AttnScratch, CudaError> {
        let max_splits = capacity
            .div_ceil(crate::cuda::sources::consts::ATT_SPLIT)
            .max(1);
        let slots = max_tok * n_heads * max_splits;
        Ok(AttnScratch {
            part_o: gpu.zeros(slots * head_dim)?,
            part_ml: gpu.zeros(slots * 2)?,
            count: gpu.zeros(max_tok * n_heads)?,
            max_tok,
            n_heads,
            head_dim,
            max_splits,
        })
    }
}

/// One sequence's paged KV cache of a layer as [`attention`] and [`attention_two_pass`] read
/// it: the K and V pools (`[n_blocks][n_kv_heads][KV_BLOCK][head_dim]` f16) and the
/// sequence's block table (the one-row counterpart of [`KvRowsDev`]).
#[derive(Clone, Copy)]
pub struct KvView<'a> {
    /// The K pool.
    pub k: &'a dyn DevicePtr<f16>,
    /// The V pool.
    pub v: &'a dyn DevicePtr<f16>,
    /// The block table (`i32` per block of positions).
    pub bt: &'a dyn DevicePtr<i32>,
}

impl KvView<'_> {
    /// The pools hold whole blocks of `s`'s heads and the table covers `s.capacity`.
    pub(super) fn check(&self, op: &'static str, s: AttnShape) -> Result<(), CudaError> {
        check_pages(
            op,
            self.k.len(),
            self.v.len(),
            self.bt.len(),
            s.n_kv_heads,
            s.head_dim,
            s.capacity,
        )
    }
}

/// Attention of `s.ntok` query tokens (q: `[ntok][n_heads][head_dim]`, positions `pos`)
/// over a layer's paged f16 caches (`kv`: pools read through its block table) into `out`
/// (shaped like q). `scale` multiplies q.k; `softcap` > 0 caps the scores as
/// `softcap * tanh(s / softcap)` (0: no cap). Returns the kernel used.
///
/// One launch: the split blocks merge their partial results themselves (the last block of
/// each token and head to finish does the combine), giving the bits of
/// [`attention_two_pass`].
#[allow(clippy::too_many_arguments)]
pub fn attention(
    gpu: &Gpu,
    q: &dyn DevicePtr<f32>,
    kv: &KvView<'_>,
    pos: &dyn DevicePtr<i32>,
    s: AttnShape,
    scale: f32,
    softcap: f32,
    scratch: &mut AttnScratch,
    out: &mut dyn DevicePtrMut<f32>,
) -> Result<AttentionKernel, CudaError> {
    attention_launch(gpu, q, kv, pos, s, scale, softcap, scratch, out, true)
}

/// [`attention`] as two launches: the split blocks, then a separate combine kernel (the
/// reference kernel-check compares the one-launch form with, bit for bit).
#[allow(clippy::too_many_arguments)]
pub fn attention_two_pass(
    gpu: &Gpu,
    q: &dyn DevicePtr<f32>,
    kv: &KvView<'_>,
    pos: &dyn DevicePtr<i32>,
    s: AttnShape,
    scale: f32,
    softcap: f32,
    scratch: &mut AttnScratch,
    out: &mut dyn DevicePtrMut<f32>,
) -> Result<AttentionKernel, CudaError> {
    attention_launch(gpu, q, kv, pos, s, scale, softcap, scratch, out, false)
}

/// The lengths every attention launch checks: q and out (`[ntok][n_heads][head_dim]`), pos
/// (one per token).
pub(super) fn check_io(
    op: &'static str,
    s: AttnShape,
    q_len: usize,
    out_len: usize,
    pos_len: usize,
) -> Result<(), CudaError> {
    let qlen = s.ntok * s.n_heads * s.head_dim;
    need(op, "q", q_len, qlen)?;
    need(op, "out", out_len, qlen)?;
    need(op, "pos", pos_len, s.ntok)
}

/// The kernel choice and the checks that [`attention`] and [`attention_rows`] share: q, out
/// and pos lengths, and a scratch sized for this shape. Returns the choice and its splits.
#[allow(clippy::too_many_arguments)]
fn attention_checks(
    op: &'static str,
    gpu: &Gpu,
    s: AttnShape,
    scratch: &AttnScratch,
    q_len: usize,
    out_len: usize,
    pos_len: usize,
) -> Result<(AttentionKernel, usize), CudaError> {
    let choice = select::choose_attention(
        s.head_dim,
        s.n_heads,
        s.n_kv_heads,
        s.capacity,
        &gpu.facts(),
    )?;
    let AttentionKernel::SplitKv { max_splits, .. } = choice;
    check_io(op, s, q_len, out_len, pos_len)?;
    if s.ntok > scratch.max_tok
        || s.n_heads != scratch.n_heads
        || s.head_dim != scratch.head_dim
        || max_splits != scratch.max_splits
    {
        return Err(crate::cuda::shape_err(
            op,
            format!(
                "scratch was sized for {} tokens x {} heads x {} dims x {} splits",
                scratch.max_tok, scratch.n_heads, scratch.head_dim, scratch.max_splits
            ),
        ));
    }
    Ok((choice, max_splits))
}

#[allow(clippy::too_many_arguments)]
fn attention_launch(
    gpu: &Gpu,
    q: &dyn DevicePtr<f32>,
    kv: &KvView<'_>,
    pos: &dyn DevicePtr<i32>,
    s: AttnShape,
    scale: f32,
    softcap: f32,
    scratch: &mut AttnScratch,
    out: &mut dyn DevicePtrMut<f32>,
    one_launch: bool,
) -> Result<AttentionKernel, CudaError> {
    const OP: &str = "attention";
    let (choice, max_splits) =
        attention_checks(OP, gpu, s, scratch, q.len(), out.len(), pos.len())?;
    kv.check(OP, s)?;
    if s.ntok == 0 {
        return Ok(choice);
    }
    let (qp, kp, vp, pp) = (rd(gpu, q), rd(gpu, kv.k), rd(gpu, kv.v), rd(gpu, pos));
    let btp = rd(gpu, kv.bt);
    let (pop, pmp) = (wr(gpu, &mut scratch.part_o), wr(gpu, &mut scratch.part_ml));
    let op = wr(gpu, out);
    let cp = if one_launch {
        wr(gpu, &mut scratch.count)
    } else {
        0
    };
    let nh = int(OP, "n_heads", s.n_heads)?;
    let hd = int(OP, "head_dim", s.head_dim)?;
    let ms = int(OP, "max_splits", max_splits)?;
    let nt = int(OP, "ntok", s.ntok)? as u32;
    launch(
        gpu,
        select::attention_entry(s.head_dim),
        LaunchConfig {
            grid_dim: (s.n_kv_heads as u32, ms as u32, nt),
            block_dim: (select::attention_warps(s.n_heads / s.n_kv_heads) * 32, 1, 1),
            shared_mem_bytes: 0,
        },
        &[
            Arg::Ptr(qp),
            Arg::Ptr(kp),
            Arg::Ptr(vp),
            Arg::Ptr(btp),
            Arg::Ptr(pp),
            Arg::Ptr(pop),
            Arg::Ptr(pmp),
            Arg::I32(nh),
            Arg::I32(int(OP, "n_kv_heads", s.n_kv_heads)?),
            Arg::I32(hd),
            Arg::I32(int(OP, "capacity", s.capacity)?),
            Arg::I32(int(OP, "window", s.window)?),
            Arg::F32(scale),
            Arg::F32(softcap),
            Arg::I32(ms),
            Arg::Ptr(cp),
            Arg::Ptr(op),
        ],
    )?;
    if one_launch {
        return Ok(choice);
    }
    launch(
        gpu,
        "attn_combine",
        LaunchConfig {
            grid_dim: (nh as u32, nt, 1),
            block_dim: (32, 1, 1),
            shared_mem_bytes: 0,
        },
        &[
            Arg::Ptr(pop),
            Arg::Ptr(pmp),
            Arg::Ptr(pp),
            Arg::Ptr(op),
            Arg::I32(nh),
            Arg::I32(hd),
            Arg::I32(ms),
        ],
    )?;
    Ok(choice)
}

/// [`attention`] for `s.ntok` query rows of `s.ntok` different sequences, row `t` over its
/// own caches (`kv`, row `t`, at position `pos[t]`): one launch of `attn_rows*`, each
/// row's blocks running the code of the one-row kernel on its caches (the same bits as
/// [`attention`] on that row alone, over a scratch of at least its splits). `s.capacity`
/// must be `kv.capacity`, the largest capacity of the rows.
#[allow(clippy::too_many_arguments)]
pub fn attention_rows(
    gpu: &Gpu,
    q: &dyn DevicePtr<f32>,
    kv: &KvRowsDev<'_>,
    pos: &dyn DevicePtr<i32>,
    s: AttnShape,
    scale: f32,
    softcap: f32,
    scratch: &mut AttnScratch,
    out: &mut dyn DevicePtrMut<f32>,
) -> Result<AttentionKernel, CudaError> {
    const OP: &str = "attention rows";
    let (choice, max_splits) =
        attention_checks(OP, gpu, s, scratch, q.len(), out.len(), pos.len())?;
    need(OP, "kv pointers", kv.ptrs.len(), 3 * s.ntok)?;
    need(OP, "capacities", kv.caps.len(), s.ntok)?;
    if s.capacity != kv.capacity {
        return Err(crate::cuda::shape_err(
            OP,
            format!(
                "capacity {} is not the rows' largest capacity {}",
                s.capacity, kv.capacity
            ),
        ));
    }
    if s.ntok == 0 {
        return Ok(choice);
    }
    let (qp, tp, cp, pp) = (rd(gpu, q), rd(gpu, kv.ptrs), rd(gpu, kv.caps), rd(gpu, pos));
    let (pop, pmp) = (wr(gpu, &mut scratch.part_o), wr(gpu, &mut scratch.part_ml));
    let cnt = wr(gpu, &mut scratch.count);
    let op = wr(gpu, out);
    let ms = int(OP, "max_splits", max_splits)?;
    // Splits in the grid: the layout's, or fewer when every row's position is known to lie
    // below the last split (a split past a row's position writes nothing either way).
    let grid_splits = kv
        .max_pos
        .map_or(max_splits, |p| (p / ATT_SPLIT + 1).min(max_splits));
    launch(
        gpu,
        select::attention_rows_entry(s.head_dim),
        LaunchConfig {
            grid_dim: (
                s.n_kv_heads as u32,
                int(OP, "splits", grid_splits)? as u32,
                int(OP, "ntok", s.ntok)? as u32,
            ),
            block_dim: (select::attention_warps(s.n_heads / s.n_kv_heads) * 32, 1, 1),
            shared_mem_bytes: 0,
        },
        &[
            Arg::Ptr(qp),
            Arg::Ptr(tp),
            Arg::Ptr(cp),
            Arg::Ptr(pp),
            Arg::Ptr(pop),
            Arg::Ptr(pmp),
            Arg::I32(int(OP, "n_heads", s.n_heads)?),
            Arg::I32(int(OP, "n_kv_heads", s.n_kv_heads)?),
            Arg::I32(int(OP, "head_dim", s.head_dim)?),
            Arg::I32(int(OP, "window", s.window)?),
            Arg::F32(scale),
            Arg::F32(softcap),
            Arg::I32(ms),
            Arg::Ptr(cnt),
            Arg::Ptr(op),
        ],
    )?;
    Ok(choice)
}
