//! Wrapper of the q / k / v segmented streamed launch with `rope_kv` in its epilogue
//! (`matvec_<fmt>_seg3rope_wr_r<R>_d<D>`, kernels/matvec/rope_epi.cuh; issue 7,
//! `ASSAY_ROPE_FUSE=1`, opt-in): one launch giving the bits of [`super::matvec_segs`] followed by a
//! one-token [`super::rope_kv`] (q and k rotated in their outputs, k and v stored into the
//! layer's paged f16 caches), where [`select::choose_rope_fuse`] takes it.

use super::kv::check_pages;
use super::linear::{SegsLaunch, segs_launch};
use super::{
    Arg, DeviceWeight, MatvecOpts, NormIn, RopeKvShape, RopeStyle, RopeTable, int, launch, need,
    rd, wr,
};
use crate::cuda::select::{self, RopeFuse, RopeFuseShape};
use crate::cuda::{CudaError, Gpu};
use cudarc::driver::{DevicePtr, DevicePtrMut};
use half::f16;

/// The `rope_kv` half of a fused launch: what [`super::rope_kv`] takes besides q, k and v.
pub struct QkvRope<'a> {
    pub k_cache: &'a mut dyn DevicePtrMut<f16>,
    pub v_cache: &'a mut dyn DevicePtrMut<f16>,
    /// The layer's block table.
    pub bt: &'a dyn DevicePtr<i32>,
    /// The token's position (one value, read by the kernel).
    pub pos: &'a dyn DevicePtr<i32>,
    pub table: &'a RopeTable,
    pub style: RopeStyle,
    /// `ntok` must be 1; `capacity` the caches' positions.
    pub shape: RopeKvShape,
}

/// `ys = [q, k, v] = ws norm(x) (+ biases)` for one token, then q and k rotated in place and
/// k and v stored into the caches at `rope.pos[0]`, in one launch where
/// [`select::choose_rope_fuse`] takes it (the segmented launch of [`super::matvec_segs`]
/// with `opts`, the normal rotation, the shapes of [`RopeFuseShape`]): each output value and
/// each cache entry gets the bits of [`super::matvec_segs`] followed by [`super::rope_kv`].
/// `Ok(None)`: nothing launched (the caller runs those two); an error for buffers too short.
#[allow(clippy::too_many_arguments)]
pub fn matvec_segs_rope(
    gpu: &Gpu,
    ws: [&DeviceWeight; 3],
    x: &dyn DevicePtr<f32>,
    biases: [Option<&dyn DevicePtr<f32>>; 3],
    norm: Option<NormIn<'_>>,
    opts: MatvecOpts,
    ys: [&mut dyn DevicePtrMut<f32>; 3],
    rope: QkvRope<'_>,
) -> Result<Option<RopeFuse>, CudaError> {
    const OP: &str = "matvec_segs_rope";
    let s = rope.shape;
    let want = RopeFuseShape {
        ntok: s.ntok,
        n_heads: s.n_heads,
        n_kv_heads: s.n_kv_heads,
        head_dim: s.head_dim,
        n_rot: rope.table.n_rot,
        neox: rope.style == RopeStyle::Neox,
        rows: ws.map(|w| w.rows),
    };
    let Some(SegsLaunch {
        choice,
        cfg,
        mut args,
    }) = segs_launch(gpu, ws, x, s.ntok, biases, norm, opts, ys)?
    else {
        return Ok(None);
    };
    let Some(fuse) = select::choose_rope_fuse(true, Some(choice), want) else {
        return Ok(None);
    };
    check_pages(
        OP,
        rope.k_cache.len(),
        rope.v_cache.len(),
        rope.bt.len(),
        s.n_kv_heads,
        s.head_dim,
        s.capacity,
    )?;
    need(OP, "pos", rope.pos.len(), 1)?;
    need(OP, "table", rope.table.table.len(), rope.table.n_rot)?;
    args.extend([
        Arg::Ptr(rd(gpu, rope.pos)),
        Arg::Ptr(wr(gpu, rope.k_cache)),
        Arg::Ptr(wr(gpu, rope.v_cache)),
        Arg::Ptr(rd(gpu, rope.bt)),
        Arg::Ptr(rd(gpu, &rope.table.table)),
        Arg::F64(rope.table.freq_scale),
        Arg::I32(int(OP, "head_dim", s.head_dim)?),
        Arg::I32(int(OP, "n_rot", rope.table.n_rot)?),
        Arg::I32(int(OP, "n_kv_heads", s.n_kv_heads)?),
        Arg::I32(int(OP, "capacity", s.capacity)?),
    ]);
    launch(gpu, &fuse.entry(), cfg, &args)?;
    Ok(Some(fuse))
}
