//! Wrappers of the KV-cache writes: `attention.cu`'s `kv_store` (K and V of some tokens into
//! a layer's paged f16 caches) and `rope.cu`'s `rope_kv` (RoPE of q and k fused with that
//! store) and `rope_kv_rows` (the same for rows of different sequences, each into its own
//! caches). The caches' layout and the checks of pools and tables are `kv.rs`'s.

use super::kv::{KvRowsDev, check_pages};
use super::{Arg, RopeStyle, RopeTable, int, launch, need, rd, wr};
use crate::cuda::{CudaError, Gpu, select};
use cudarc::driver::{DevicePtr, DevicePtrMut, LaunchConfig};
use half::f16;

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
    // rope_kv_pass for prompt passes (its angle table holds n_rot / 2 <= ROPE_PASS_MAX_HALF).
    let entry = if table.n_rot / 2 <= select::ROPE_PASS_MAX_HALF {
        select::rope_kv_entry(s.ntok)
    } else {
        "rope_kv"
    };
    let cfg = if entry == "rope_kv_pass" {
        LaunchConfig {
            grid_dim: (int(OP, "ntok", s.ntok)? as u32, 1, 1),
            block_dim: (select::ROPE_PASS_THREADS, 1, 1),
            shared_mem_bytes: 0,
        }
    } else {
        cfg
    };
    launch(gpu, entry, cfg, &args)
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
