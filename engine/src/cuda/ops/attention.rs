//! Wrappers of `attention.cu`: split-KV decode attention and the f16 KV-cache store; and
//! of `rope.cu`'s `rope_kv` (RoPE of q and k fused with the KV-cache store).
//!
//! The KV cache is paged: a layer's K (and V) cache is a pool of blocks of [`KV_BLOCK`]
//! positions, each block `[n_kv_heads][KV_BLOCK][head_dim]` f16, and a sequence reads and
//! writes it through its block table (`i32` per block of positions: entry `i` names the
//! pool block holding positions `i * KV_BLOCK ..`). A block is one attention split, so the
//! arithmetic (and the bits) of a position do not depend on where its block lies.
//! [`kv_pool_offset`] is the layout on the host; the kernels' is `kv_off` (common.cuh).
//! The wrappers check lengths; the entries of a table must name blocks of the pool (the
//! engine writes every table from its own allocator: no table comes from user input).

use super::{Arg, RopeStyle, RopeTable, int, launch, need, rd, wr};
use crate::cuda::select::{self, AttentionKernel};
use crate::cuda::sources::consts::{ATT_SPLIT, KV_BLOCK};
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

/// Blocks of a block table covering `capacity` positions.
pub fn kv_blocks(capacity: usize) -> usize {
    capacity.div_ceil(KV_BLOCK)
}

/// Halves of one pool block of `n_kv_heads` heads of `head_dim`.
pub fn kv_block_len(n_kv_heads: usize, head_dim: usize) -> usize {
    n_kv_heads * KV_BLOCK * head_dim
}

/// The offset in a pool of (KV head `h`, position `p`, dim 0) for block table `bt`: the
/// host's copy of the kernels' `kv_off`. `None` when `p` lies past the table or its entry
/// is negative.
pub fn kv_pool_offset(
    bt: &[i32],
    h: usize,
    p: usize,
    n_kv_heads: usize,
    head_dim: usize,
) -> Option<usize> {
    let b = usize::try_from(*bt.get(p / KV_BLOCK)?).ok()?;
    Some(((b * n_kv_heads + h) * KV_BLOCK + p % KV_BLOCK) * head_dim)
}

/// A logical cache (`[n_kv_heads][capacity][head_dim]`) laid out in a pool of `n_blocks`
/// blocks through table `bt` (pool slots no table entry names hold `fill`).
pub fn to_paged<T: Copy>(
    logical: &[T],
    bt: &[i32],
    n_blocks: usize,
    n_kv_heads: usize,
    capacity: usize,
    head_dim: usize,
    fill: T,
) -> Option<Vec<T>> {
    let mut pool = vec![fill; n_blocks * kv_block_len(n_kv_heads, head_dim)];
    for h in 0..n_kv_heads {
        for p in 0..capacity {
            let o = kv_pool_offset(bt, h, p, n_kv_heads, head_dim)?;
            let l = (h * capacity + p) * head_dim;
            pool.get_mut(o..o + head_dim)?
                .copy_from_slice(logical.get(l..l + head_dim)?);
        }
    }
    Some(pool)
}

/// The logical cache (`[n_kv_heads][capacity][head_dim]`) that table `bt` reads from `pool`.
pub fn from_paged<T: Copy>(
    pool: &[T],
    bt: &[i32],
    n_kv_heads: usize,
    capacity: usize,
    head_dim: usize,
) -> Option<Vec<T>> {
    let mut out = Vec::with_capacity(n_kv_heads * capacity * head_dim);
    for h in 0..n_kv_heads {
        for p in 0..capacity {
            let o = kv_pool_offset(bt, h, p, n_kv_heads, head_dim)?;
            out.extend_from_slice(pool.get(o..o + head_dim)?);
        }
    }
    Some(out)
}

/// Check a pool and its table for `capacity` positions: the pools hold whole blocks (at
/// least one), the table covers the capacity.
fn check_pages(
    op: &'static str,
    k_len: usize,
    v_len: usize,
    bt_len: usize,
    n_kv_heads: usize,
    head_dim: usize,
    capacity: usize,
) -> Result<(), CudaError> {
    let block = kv_block_len(n_kv_heads, head_dim);
    if block == 0 || k_len < block || v_len < block || k_len % block != 0 || v_len % block != 0 {
        return Err(crate::cuda::shape_err(
            op,
            format!("KV pools of {k_len} / {v_len} halves are not whole blocks of {block}"),
        ));
    }
    need(op, "block table", bt_len, kv_blocks(capacity))
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

/// Store K and V of `ntok` tokens (`[ntok][n_kv_heads][head_dim]` f32 each) into a layer's
/// paged f16 caches (through block table `bt`) at positions `pos` (round to nearest
/// even; a position outside the cache is skipped).
#[allow(clippy::too_many_arguments)]
pub fn kv_store(
    gpu: &Gpu,
    k: &dyn DevicePtr<f32>,
    v: &dyn DevicePtr<f32>,
    k_cache: &mut dyn DevicePtrMut<f16>,
    v_cache: &mut dyn DevicePtrMut<f16>,
    bt: &dyn DevicePtr<i32>,
    pos: &dyn DevicePtr<i32>,
    ntok: usize,
    n_kv_heads: usize,
    head_dim: usize,
    capacity: usize,
) -> Result<(), CudaError> {
    const OP: &str = "kv_store";
    let n = ntok * n_kv_heads * head_dim;
    need(OP, "k", k.len(), n)?;
    need(OP, "v", v.len(), n)?;
    check_pages(
        OP,
        k_cache.len(),
        v_cache.len(),
        bt.len(),
        n_kv_heads,
        head_dim,
        capacity,
    )?;
    need(OP, "pos", pos.len(), ntok)?;
    if ntok == 0 {
        return Ok(());
    }
    let (kp, vp, pp) = (rd(gpu, k), rd(gpu, v), rd(gpu, pos));
    let (kcp, vcp, btp) = (wr(gpu, k_cache), wr(gpu, v_cache), rd(gpu, bt));
    launch(
        gpu,
        "kv_store",
        super::cfg1(int(OP, "ntok", ntok)? as u32, 256),
        &[
            Arg::Ptr(kp),
            Arg::Ptr(vp),
            Arg::Ptr(kcp),
            Arg::Ptr(vcp),
            Arg::Ptr(btp),
            Arg::Ptr(pp),
            Arg::I32(int(OP, "n_kv_heads", n_kv_heads)?),
            Arg::I32(int(OP, "head_dim", head_dim)?),
            Arg::I32(int(OP, "capacity", capacity)?),
        ],
    )
}

/// The shape of a [`rope_kv`] launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RopeKvShape {
    /// Tokens in the launch.
    pub ntok: usize,
    /// Query heads.
    pub n_heads: usize,
    /// KV heads.
    pub n_kv_heads: usize,
    /// Head size.
    pub head_dim: usize,
    /// KV cache capacity in positions.
    pub capacity: usize,
}

/// RoPE of q (`[ntok][n_heads][head_dim]`) and k (`[ntok][n_kv_heads][head_dim]`) in place
/// with one `table`, then k (rotated) and v stored into a layer's f16 caches at positions
/// `pos`: one launch giving the bits of [`super::rope`] on q, [`super::rope`] on k, then
/// [`kv_store`].
#[allow(clippy::too_many_arguments)]
pub fn rope_kv(
    gpu: &Gpu,
    q: &mut dyn DevicePtrMut<f32>,
    k: &mut dyn DevicePtrMut<f32>,
    v: &dyn DevicePtr<f32>,
    k_cache: &mut dyn DevicePtrMut<f16>,
    v_cache: &mut dyn DevicePtrMut<f16>,
    bt: &dyn DevicePtr<i32>,
    pos: &dyn DevicePtr<i32>,
    table: &RopeTable,
    style: RopeStyle,
    s: RopeKvShape,
) -> Result<(), CudaError> {
    const OP: &str = "rope_kv";
    let cfg = rope_kv_checks(OP, table, s, q.len(), k.len(), v.len(), pos.len())?;
    check_pages(
        OP,
        k_cache.len(),
        v_cache.len(),
        bt.len(),
        s.n_kv_heads,
        s.head_dim,
        s.capacity,
    )?;
    if s.ntok == 0 {
        return Ok(());
    }
    let (qp, kp, vp) = (wr(gpu, q), wr(gpu, k), rd(gpu, v));
    let (kcp, vcp, pp) = (wr(gpu, k_cache), wr(gpu, v_cache), rd(gpu, pos));
    let mut args = vec![
        Arg::Ptr(qp),
        Arg::Ptr(kp),
        Arg::Ptr(vp),
        Arg::Ptr(kcp),
        Arg::Ptr(vcp),
        Arg::Ptr(rd(gpu, bt)),
        Arg::Ptr(pp),
    ];
    args.extend(rope_kv_tail(OP, gpu, table, style, s)?);
    args.push(Arg::I32(int(OP, "capacity", s.capacity)?));
    launch(gpu, "rope_kv", cfg, &args)
}

/// The checks that [`rope_kv`] and [`rope_kv_rows`] share (n_rot; q, k, v, pos and table
/// lengths) and their launch shape: one block row per token, 128 threads over the items of
/// a token (the items of a block are a layout choice only).
#[allow(clippy::too_many_arguments)]
fn rope_kv_checks(
    op: &'static str,
    table: &RopeTable,
    s: RopeKvShape,
    q_len: usize,
    k_len: usize,
    v_len: usize,
    pos_len: usize,
) -> Result<LaunchConfig, CudaError> {
    let n_rot = table.n_rot;
    if n_rot % 2 != 0 || n_rot > s.head_dim || n_rot == 0 {
        return Err(crate::cuda::shape_err(
            op,
            format!("n_rot = {n_rot} must be even and in 2..={}", s.head_dim),
        ));
    }
    let kv_len = s.ntok * s.n_kv_heads * s.head_dim;
    need(op, "q", q_len, s.ntok * s.n_heads * s.head_dim)?;
    need(op, "k", k_len, kv_len)?;
    need(op, "v", v_len, kv_len)?;
    need(op, "pos", pos_len, s.ntok)?;
    need(op, "table", table.table.len(), n_rot)?;
    let items = (s.n_heads + s.n_kv_heads) * (n_rot / 2)
        + s.n_kv_heads * (s.head_dim - n_rot)
        + s.n_kv_heads * s.head_dim;
    const THREADS: u32 = 128;
    Ok(LaunchConfig {
        grid_dim: (
            int(op, "ntok", s.ntok)? as u32,
            int(op, "blocks", items.div_ceil(THREADS as usize))? as u32,
            1,
        ),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// The launch arguments [`rope_kv`] and [`rope_kv_rows`] share after their pointers: the
/// table, its frequency scale and the shape.
fn rope_kv_tail(
    op: &'static str,
    gpu: &Gpu,
    table: &RopeTable,
    style: RopeStyle,
    s: RopeKvShape,
) -> Result<[Arg; 7], CudaError> {
    Ok([
        Arg::Ptr(rd(gpu, &table.table)),
        Arg::F64(table.freq_scale),
        Arg::I32(int(op, "n_heads", s.n_heads)?),
        Arg::I32(int(op, "n_kv_heads", s.n_kv_heads)?),
        Arg::I32(int(op, "head_dim", s.head_dim)?),
        Arg::I32(int(op, "n_rot", table.n_rot)?),
        Arg::I32(i32::from(style == RopeStyle::Neox)),
    ])
}

/// One row's KV cache in a batched launch ([`attention_rows`], [`rope_kv_rows`]): the
/// device addresses of a layer's K and V pools and of the row's block table, their
/// lengths (halves, entries), and the capacity in positions the table covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvRow {
    pub k: u64,
    pub v: u64,
    pub bt: u64,
    pub k_len: usize,
    pub v_len: usize,
    pub bt_len: usize,
    pub capacity: usize,
}

impl KvRow {
    /// The row of one layer's pools and a sequence's block table.
    pub fn of(
        gpu: &Gpu,
        k: &CudaSlice<f16>,
        v: &CudaSlice<f16>,
        bt: &CudaSlice<i32>,
        capacity: usize,
    ) -> KvRow {
        KvRow {
            k: rd(gpu, k),
            v: rd(gpu, v),
            bt: rd(gpu, bt),
            k_len: k.len(),
            v_len: v.len(),
            bt_len: bt.len(),
            capacity,
        }
    }
}

/// The pointer table of a batched launch, `[k0, v0, bt0, k1, v1, bt1, ...]` (row `t`'s
/// pools at `3t`, `3t + 1`, its block table at `3t + 2`), and the rows' capacities, after
/// checking every row as the one-row wrappers do (whole pool blocks, a table covering the
/// capacity, a capacity that fits an `i32`): the kernels trust the table.
pub fn kv_row_table(
    rows: &[KvRow],
    n_kv_heads: usize,
    head_dim: usize,
) -> Result<(Vec<u64>, Vec<i32>), CudaError> {
    const OP: &str = "kv rows";
    let mut ptrs = Vec::with_capacity(3 * rows.len());
    let mut caps = Vec::with_capacity(rows.len());
    for (t, r) in rows.iter().enumerate() {
        let pages = check_pages(
            OP, r.k_len, r.v_len, r.bt_len, n_kv_heads, head_dim, r.capacity,
        );
        if r.capacity == 0 || r.k == 0 || r.v == 0 || r.bt == 0 || pages.is_err() {
            return Err(crate::cuda::shape_err(
                OP,
                format!(
                    "row {t}: pools of {} / {} halves at {:#x} / {:#x}, table of {} at {:#x}, \
                     capacity {} ({})",
                    r.k_len,
                    r.v_len,
                    r.k,
                    r.v,
                    r.bt_len,
                    r.bt,
                    r.capacity,
                    pages
                        .err()
                        .map_or_else(|| "null address".to_string(), |e| e.to_string())
                ),
            ));
        }
        ptrs.push(r.k);
        ptrs.push(r.v);
        ptrs.push(r.bt);
        caps.push(int(OP, "capacity", r.capacity)?);
    }
    Ok((ptrs, caps))
}

/// A pointer table on the device for rows `0..ntok` of a batched launch: `ptrs` holds
/// `3 * ntok` addresses from [`kv_row_table`], `caps` the `ntok` capacities, and
/// `capacity` is at least the largest of them (it sizes the split layout of the scratch).
/// `max_pos`, when known, bounds every row's position (the attention's grid then stops at
/// the last split any row reaches: the blocks past it would exit at once).
pub struct KvRowsDev<'a> {
    pub ptrs: &'a dyn DevicePtr<u64>,
    pub caps: &'a dyn DevicePtr<i32>,
    pub capacity: usize,
    pub max_pos: Option<usize>,
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

/// [`rope_kv`] for `s.ntok` rows of `s.ntok` different sequences: row `t`'s k (rotated)
/// and v into its own caches (`kv`, row `t`) at position `pos[t]`, one launch of
/// `rope_kv_rows` (each row the items and bits of a one-token [`rope_kv`]).
/// `s.capacity` is not used (each row has its own).
#[allow(clippy::too_many_arguments)]
pub fn rope_kv_rows(
    gpu: &Gpu,
    q: &mut dyn DevicePtrMut<f32>,
    k: &mut dyn DevicePtrMut<f32>,
    v: &dyn DevicePtr<f32>,
    kv: &KvRowsDev<'_>,
    pos: &dyn DevicePtr<i32>,
    table: &RopeTable,
    style: RopeStyle,
    s: RopeKvShape,
) -> Result<(), CudaError> {
    const OP: &str = "rope_kv rows";
    let cfg = rope_kv_checks(OP, table, s, q.len(), k.len(), v.len(), pos.len())?;
    need(OP, "kv pointers", kv.ptrs.len(), 3 * s.ntok)?;
    need(OP, "capacities", kv.caps.len(), s.ntok)?;
    if s.ntok == 0 {
        return Ok(());
    }
    let (qp, kp, vp) = (wr(gpu, q), wr(gpu, k), rd(gpu, v));
    let (tp, cp, pp) = (rd(gpu, kv.ptrs), rd(gpu, kv.caps), rd(gpu, pos));
    let mut args = vec![
        Arg::Ptr(qp),
        Arg::Ptr(kp),
        Arg::Ptr(vp),
        Arg::Ptr(tp),
        Arg::Ptr(cp),
        Arg::Ptr(pp),
    ];
    args.extend(rope_kv_tail(OP, gpu, table, style, s)?);
    launch(gpu, "rope_kv_rows", cfg, &args)
}

#[cfg(test)]
mod tests {
    use super::*;

    // A row of `blocks` pool blocks of 2 heads x 8 dims and a table of `entries`.
    fn row(k: u64, capacity: usize, blocks: usize, entries: usize) -> KvRow {
        let len = blocks * kv_block_len(2, 8);
        KvRow {
            k,
            v: k + 0x1000,
            bt: k + 0x2000,
            k_len: len,
            v_len: len,
            bt_len: entries,
            capacity,
        }
    }

    #[test]
    fn kv_row_table_interleaves_rows_and_checks_each_cache() {
        let rows = [row(0x10000, 16, 1, 1), row(0x20000, 130, 3, 3)];
        let (p, c) = kv_row_table(&rows, 2, 8).unwrap();
        assert_eq!(
            p,
            vec![0x10000, 0x11000, 0x12000, 0x20000, 0x21000, 0x22000]
        );
        assert_eq!(c, vec![16, 130]);
        // a table shorter than the capacity needs, a pool of a partial block, an empty
        // capacity, a null address
        let mut partial = row(0x10000, 16, 1, 1);
        partial.k_len -= 1;
        for bad in [
            row(0x10000, 130, 3, 2),
            partial,
            row(0x10000, 0, 1, 1),
            row(0, 16, 1, 1),
        ] {
            let e = kv_row_table(&[rows[0], bad], 2, 8).unwrap_err().to_string();
            assert!(e.contains("row 1"), "{e}");
        }
        assert_eq!(kv_row_table(&[], 2, 8).unwrap().0.len(), 0);
    }

    #[test]
    fn paged_layout_round_trips_through_any_table() {
        let (nkv, hd, cap) = (3, 8, 2 * KV_BLOCK + 5);
        let logical: Vec<u32> = (0..(nkv * cap * hd) as u32).collect();
        assert_eq!(kv_blocks(cap), 3);
        for bt in [vec![0, 1, 2], vec![4, 0, 2], vec![1, 3, 0]] {
            let pool = to_paged(&logical, &bt, 5, nkv, cap, hd, u32::MAX).unwrap();
            assert_eq!(pool.len(), 5 * kv_block_len(nkv, hd));
            assert_eq!(from_paged(&pool, &bt, nkv, cap, hd).unwrap(), logical);
            // position p of head h sits in block bt[p / KV_BLOCK] at row p % KV_BLOCK
            let (h, p) = (2, KV_BLOCK + 7);
            let o = kv_pool_offset(&bt, h, p, nkv, hd).unwrap();
            let b = bt[1] as usize;
            assert_eq!(o, ((b * nkv + h) * KV_BLOCK + 7) * hd);
            assert_eq!(pool[o], ((h * cap + p) * hd) as u32);
        }
        // the identity table of a whole-capacity pool is block-major, not [nkv][cap][hd]
        let pool = to_paged(&logical, &[0, 1, 2], 3, nkv, cap, hd, 0).unwrap();
        assert_ne!(pool[..logical.len()], logical[..]);
        // a table too short, a block past the pool, a negative entry
        assert!(to_paged(&logical, &[0, 1], 3, nkv, cap, hd, 0).is_none());
        assert!(to_paged(&logical, &[0, 1, 3], 3, nkv, cap, hd, 0).is_none());
        assert!(kv_pool_offset(&[-1], 0, 0, nkv, hd).is_none());
    }
}
