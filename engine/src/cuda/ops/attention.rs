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

/// The first KV split (of `att_split` positions) that a token at position `pos` attends to
/// under a sliding window of `window` positions (0: none): the split holding
/// `max(0, pos - window + 1)`, 0 without a window. `first_split` in attention.cu: a
/// launch's block y serves split `first_split + y` of its token, the splits before it lying
/// wholly outside the window.
pub fn first_split(pos: usize, window: usize, att_split: usize) -> usize {
    if window == 0 {
        0
    } else {
        (pos + 1).saturating_sub(window) / att_split
    }
}

/// The most splits of `att_split` positions that one token's attention reads in a layout of
/// `max_splits` splits: without a window (`window` 0) all of them; with one, the most splits
/// a window of `window` positions can touch, `window.div_ceil(att_split) + 1`. It does not
/// depend on the position, so a launch captured in a CUDA graph stays valid at every
/// position it replays at.
pub fn window_splits(window: usize, att_split: usize, max_splits: usize) -> usize {
    if window == 0 {
        max_splits
    } else {
        (window.div_ceil(att_split) + 1).min(max_splits)
    }
}

/// The y dimension of a split-KV attention grid over a scratch layout of `max_splits`
/// splits, for a sliding window of `window` positions (0: none) and, when known, a bound
/// `max_pos` on every row's position (a launch captured in a graph passes `None`): block y
/// serves its token's split `first_split + y`, so the grid needs [`window_splits`] rows, and
/// no more than the last split that any row reaches.
pub fn grid_splits(window: usize, max_splits: usize, max_pos: Option<usize>) -> usize {
    max_pos
        .map_or(max_splits, |p| (p / ATT_SPLIT + 1).min(max_splits))
        .min(window_splits(window, ATT_SPLIT, max_splits))
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
    let window = int(OP, "window", s.window)?;
    // Splits in the grid: a token's window splits at most (the layout's without a window).
    let splits = int(OP, "splits", grid_splits(s.window, max_splits, None))?;
    launch(
        gpu,
        select::attention_entry(s.head_dim),
        LaunchConfig {
            grid_dim: (s.n_kv_heads as u32, splits as u32, nt),
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
            Arg::I32(window),
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
            Arg::I32(window),
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
    // Splits in the grid: a row's window splits at most (the layout's without a window), and
    // fewer when every row's position is known to lie below the last split (a split past a
    // row's position writes nothing either way).
    let splits = grid_splits(s.window, max_splits, kv.max_pos);
    launch(
        gpu,
        select::attention_rows_entry(s.head_dim),
        LaunchConfig {
            grid_dim: (
                s.n_kv_heads as u32,
                int(OP, "splits", splits)? as u32,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_split_starts_at_the_window() {
        // No window: every split from 0.
        for p in [0, 63, 64, 4000, 100_000] {
            assert_eq!(first_split(p, 0, 64), 0);
        }
        // Before the window fills (pos < window): split 0.
        for p in [0, 1, 63, 64, 1000, 1023] {
            assert_eq!(first_split(p, 1024, 64), 0, "pos {p}");
        }
        // The window starts at pos - 1023: in split 0 up to pos 1086, split 1 from 1087
        // (exactly on a split boundary), and so on.
        assert_eq!(first_split(1024, 1024, 64), 0);
        assert_eq!(first_split(1086, 1024, 64), 0);
        assert_eq!(first_split(1087, 1024, 64), 1);
        assert_eq!(first_split(1150, 1024, 64), 1);
        assert_eq!(first_split(1151, 1024, 64), 2);
        assert_eq!(first_split(4000, 1024, 64), 46);
        assert_eq!(first_split(4095, 1024, 64), 48);
        // A window not a multiple of the split: starts at pos - 99.
        assert_eq!(first_split(99, 100, 64), 0);
        assert_eq!(first_split(163, 100, 64), 1);
        assert_eq!(first_split(162, 100, 64), 0);
        assert_eq!(first_split(999, 100, 64), 14);
        // A window of one position: the position's own split.
        assert_eq!(first_split(127, 1, 64), 1);
        assert_eq!(first_split(128, 1, 64), 2);
    }

    #[test]
    fn window_splits_bound_the_grid() {
        assert_eq!(window_splits(0, 64, 64), 64);
        assert_eq!(window_splits(0, 64, 1), 1);
        // Gemma-3: a 1024-position window over a 4096-position cache.
        assert_eq!(window_splits(1024, 64, 64), 17);
        // The cache has fewer splits than the window can touch.
        assert_eq!(window_splits(1024, 64, 8), 8);
        assert_eq!(window_splits(100, 64, 64), 3);
        assert_eq!(window_splits(64, 64, 64), 2);
        assert_eq!(window_splits(1, 64, 64), 2);
        assert_eq!(grid_splits(0, 64, None), 64);
        assert_eq!(grid_splits(0, 64, Some(100)), 2);
        assert_eq!(grid_splits(1024, 64, None), 17);
        assert_eq!(grid_splits(1024, 64, Some(4000)), 17);
        assert_eq!(grid_splits(1024, 64, Some(500)), 8);
        assert_eq!(grid_splits(0, 64, Some(1 << 20)), 64);
    }

    // The kernel's mapping at every position of a cache: grid row y serves split
    // first_split + y of a token at pos, the splits up to pos's (the last) run, the rest
    // return. The window splits are exactly the rows that run (each once, so the in-launch
    // combine's count reaches their number), the first holds the window's first position,
    // and every split before it lies wholly before the window (it contributed (-inf, 0)
    // when it ran, so skipping it changes no bit of the merge).
    #[test]
    fn grid_rows_cover_exactly_the_window_splits() {
        let s = ATT_SPLIT;
        let mut widest_1024 = 0;
        for window in [0, 1, 40, 63, 64, 65, 100, 512, 1000, 1024, 4096] {
            for cap in [1usize, 64, 65, 500, 4200] {
                let max_splits = cap.div_ceil(s);
                for pos in 0..cap {
                    let first = first_split(pos, window, s);
                    let last = pos / s;
                    assert!(last < max_splits && first <= last);
                    let lo = if window == 0 {
                        0
                    } else {
                        (pos + 1).saturating_sub(window)
                    };
                    assert!(first * s <= lo && lo < (first + 1) * s, "{window} {pos}");
                    for max_pos in [None, Some(pos), Some(cap - 1)] {
                        let grid = grid_splits(window, max_splits, max_pos);
                        let run: Vec<usize> = (0..grid)
                            .map(|y| first + y)
                            .filter(|&sp| sp * s <= pos)
                            .collect();
                        let want: Vec<usize> = (first..=last).collect();
                        assert_eq!(run, want, "window {window} cap {cap} pos {pos}");
                    }
                    if window == 1024 {
                        widest_1024 = widest_1024.max(last - first + 1);
                    }
                }
            }
        }
        // The bound is reached: a 1024-position window can touch 17 splits.
        assert_eq!(widest_1024, window_splits(1024, s, 4200usize.div_ceil(s)));
    }
}
