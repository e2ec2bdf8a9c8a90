//! Wrappers of `mmv.cu`: the decode products on tensor cores (`ASSAY_MMV=1`): y[t] = W x[t]
//! for 1..=[`MMV_N`] token vectors staged by [`super::gemm_stage_x`] (f16 hi + lo halves),
//! `mma.sync.m16n8k16` with the quants as exact f16 integers, one 16-row tile per block,
//! the k split a function of the shape only ([`select::mmv_splits`]): a token's outputs are
//! the same bits for any n (kernel-check `mmv` cases check it). They are not the bits of the
//! matvec (the row path), nor of the prompt pass's `gemm`.
//!
//! BF16 weights multiply on the bf16 MMA with x staged as three bf16 parts
//! ([`super::gemm_stage_x_for`] with BF16: `gemm_stage_x_bf16`, x exactly); their entry
//! points take the third part's pointer after the second, and their `_x1` entry points
//! stage the three parts in 6 `k` bytes of shared memory ([`select::mmv_x1_shared_bytes`]).
//! Q4_K weights (GGUF block layout) take the Q4_0 / Q8_0 arguments and f16 staging; the
//! kernel adds the mins' term from x's sum per sub-block (mmv.cu's file comment).

use super::gemm::XStaging;
use super::{Arg, DeviceWeight, GemmX, NormIn, aligned, int, launch, need, rd, wr};
use crate::cuda::select::{self, MMV_SPLIT_ROWS, MMV_TARGET_BLOCKS, MmvKernel};
use crate::cuda::sources::consts::{MMV_N, MMV_WARPS};
use crate::cuda::{CudaError, Gpu, shape_err};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, LaunchConfig};

/// The split products' partial sums (`[splits][2][MMV_N][rows]`) and one arrival counter per
/// tile (zero between launches: the last block of a tile resets it). One per stream of
/// launches (launches on one stream run one after the other).
pub struct MmvScratch {
    part: CudaSlice<f32>,
    cnt: CudaSlice<u32>,
}

impl MmvScratch {
    pub fn new(gpu: &Gpu) -> Result<MmvScratch, CudaError> {
        Ok(MmvScratch {
            part: gpu.zeros(2 * MMV_N * MMV_SPLIT_ROWS)?,
            cnt: gpu.zeros(MMV_TARGET_BLOCKS)?,
        })
    }
}

/// Blocks along x of a launch of `choice` over `tiles` tiles: one per tile, or for a one
/// n-tile entry point with `MMV_PERSIST` = p (mmv.cu's define) at most p x SMs in all (each
/// block then loops over tiles; a tile's arithmetic does not depend on which block
/// computes it).
fn grid_x(gpu: &Gpu, op: &'static str, tiles: usize, choice: &MmvKernel) -> Result<u32, CudaError> {
    let splits = choice.splits;
    static PERSIST: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let p = *PERSIST.get_or_init(|| crate::cuda::sources::mmv_define_value("MMV_PERSIST") as usize);
    let sms = gpu.info().sm_count.max(1) as usize;
    let x = if p > 0 && choice.n_tiles == 1 {
        tiles.min((p * sms / splits.max(1) as usize).max(1))
    } else {
        tiles
    };
    u32::try_from(x).map_err(|_| shape_err(op, "too many rows"))
}

/// The checks shared by [`mmv`] and [`mmv_glu`]; returns the choice and launch shape.
fn check(
    op: &'static str,
    gpu: &Gpu,
    w: &DeviceWeight,
    xs: &GemmX,
    n: usize,
    y_len: usize,
    glu: bool,
) -> Result<(MmvKernel, LaunchConfig), CudaError> {
    let choice = select::choose_mmv(
        w.format,
        glu,
        w.rows,
        w.cols,
        n,
        gpu.info().compute_capability,
    )?;
    let (block, _) = w.format.block_geometry();
    if w.cols % block != 0 || w.cols > xs.k_max {
        return Err(shape_err(
            op,
            format!(
                "k = {}: a multiple of the {} block up to {}",
                w.cols, w.format, xs.k_max
            ),
        ));
    }
    let want = XStaging::of(w.format);
    if xs.staged != Some(want) {
        return Err(shape_err(
            op,
            format!(
                "x staged as {:?}; mmv multiplies {} weights with x staged as {want:?} \
                 (gemm_stage_x_for)",
                xs.staged, w.format
            ),
        ));
    }
    need(op, "y", y_len, n * w.rows)?;
    need(op, "weight", w.data.len(), w.rows * w.row_bytes)?;
    let tiles = w.rows.div_ceil(16);
    if choice.splits > 1 && tiles * 16 * choice.splits as usize > MMV_SPLIT_ROWS {
        return Err(shape_err(op, "split product larger than the scratch"));
    }
    let blocks = grid_x(gpu, op, tiles, &choice)?;
    Ok((
        choice,
        LaunchConfig {
            grid_dim: (blocks, choice.splits, 1),
            block_dim: (MMV_WARPS * 32, 1, 1),
            shared_mem_bytes: 0,
        },
    ))
}

/// The staged x's pointers an entry point takes ([`check`] has matched the staging to the
/// format): f16 hi, lo; BF16's bf16 hi, mid (`lo`), lo (`lo2`), in `gemm_stage_x_bf16`'s
/// order.
fn x_args(gpu: &Gpu, xs: &GemmX) -> Vec<Arg> {
    let mut a = vec![Arg::Ptr(rd(gpu, &xs.hi)), Arg::Ptr(rd(gpu, &xs.lo))];
    if xs.staged == Some(XStaging::Bf16) {
        a.push(Arg::Ptr(rd(gpu, &xs.lo2)));
    }
    a
}

/// `y[t] = W xs[t] (+ bias) (+ y[t] when residual)` for the `n` staged tokens.
#[allow(clippy::too_many_arguments)]
pub fn mmv(
    gpu: &Gpu,
    w: &DeviceWeight,
    xs: &GemmX,
    n: usize,
    bias: Option<&dyn DevicePtr<f32>>,
    residual: bool,
    y: &mut dyn DevicePtrMut<f32>,
    scratch: &mut MmvScratch,
) -> Result<MmvKernel, CudaError> {
    const OP: &str = "mmv";
    let (choice, cfg) = check(OP, gpu, w, xs, n, y.len(), false)?;
    let bias_ptr = match bias {
        Some(b) => {
            need(OP, "bias", b.len(), w.rows)?;
            rd(gpu, b)
        }
        None => 0,
    };
    let (wp, sp, yp) = (rd(gpu, &w.data), rd(gpu, &xs.scale), wr(gpu, y));
    let (pp, cp) = (wr(gpu, &mut scratch.part), wr(gpu, &mut scratch.cnt));
    aligned(OP, "weight", wp, 16)?;
    let mut args = vec![Arg::Ptr(wp)];
    args.extend(x_args(gpu, xs));
    args.extend([
        Arg::Ptr(sp),
        Arg::Ptr(bias_ptr),
        Arg::Ptr(if residual { yp } else { 0 }),
        Arg::Ptr(yp),
        Arg::Ptr(pp),
        Arg::Ptr(cp),
        Arg::I32(int(OP, "rows", w.rows)?),
        Arg::I32(int(OP, "k", w.cols)?),
        Arg::I32(int(OP, "n", n)?),
        Arg::I32(choice.splits as i32),
    ]);
    launch(gpu, &choice.entry(), cfg, &args)?;
    Ok(choice)
}

/// `y[t] = act(Wg xs[t]) * (Wu xs[t])` for the `n` staged tokens (same format and shape).
#[allow(clippy::too_many_arguments)]
pub fn mmv_glu(
    gpu: &Gpu,
    wg: &DeviceWeight,
    wu: &DeviceWeight,
    xs: &GemmX,
    n: usize,
    act: super::Activation,
    y: &mut dyn DevicePtrMut<f32>,
    scratch: &mut MmvScratch,
) -> Result<MmvKernel, CudaError> {
    const OP: &str = "mmv_glu";
    if wg.format != wu.format || wg.rows != wu.rows || wg.cols != wu.cols {
        return Err(shape_err(OP, "gate and up differ in format or shape"));
    }
    let (choice, cfg) = check(OP, gpu, wg, xs, n, y.len(), true)?;
    need(OP, "up weight", wu.data.len(), wu.rows * wu.row_bytes)?;
    let (gp, up) = (rd(gpu, &wg.data), rd(gpu, &wu.data));
    let (sp, yp) = (rd(gpu, &xs.scale), wr(gpu, y));
    let (pp, cp) = (wr(gpu, &mut scratch.part), wr(gpu, &mut scratch.cnt));
    aligned(OP, "gate weight", gp, 16)?;
    aligned(OP, "up weight", up, 16)?;
    let mut args = vec![Arg::Ptr(gp), Arg::Ptr(up)];
    args.extend(x_args(gpu, xs));
    args.extend([
        Arg::Ptr(sp),
        Arg::Ptr(yp),
        Arg::Ptr(pp),
        Arg::Ptr(cp),
        Arg::I32(int(OP, "rows", wg.rows)?),
        Arg::I32(int(OP, "k", wg.cols)?),
        Arg::I32(int(OP, "n", n)?),
        Arg::I32(super::pointwise::act_code(act)),
        Arg::I32(choice.splits as i32),
    ]);
    launch(gpu, &choice.entry(), cfg, &args)?;
    Ok(choice)
}

/// The checks and launch shape of the one-token entry points (`_x1`: x staged by the
/// kernel into `4 k` bytes of dynamic shared memory, BF16 `6 k`).
#[allow(clippy::too_many_arguments)]
fn check_x1(
    op: &'static str,
    gpu: &Gpu,
    w: &DeviceWeight,
    x_len: usize,
    norm: Option<NormIn<'_>>,
    y_len: usize,
    glu: bool,
    pair: bool,
) -> Result<(MmvKernel, LaunchConfig, u64, f32, f32), CudaError> {
    let cc = gpu.info().compute_capability;
    let choice = if pair {
        select::choose_mmv_pair_x1(w.format, w.rows, w.cols, cc)?
    } else {
        select::choose_mmv_x1(w.format, glu, w.rows, w.cols, cc)?
    };
    let (block, _) = w.format.block_geometry();
    if w.cols % block != 0 {
        return Err(shape_err(
            op,
            format!("k = {}: a multiple of the {} block", w.cols, w.format),
        ));
    }
    need(op, "x", x_len, w.cols)?;
    need(op, "y", y_len, w.rows)?;
    need(op, "weight", w.data.len(), w.rows * w.row_bytes)?;
    let (np, eps, w_off) = match norm {
        None => (0, 0.0, 0.0),
        Some(nm) => {
            need(op, "norm weight", nm.weight.len(), w.cols)?;
            (rd(gpu, nm.weight), nm.eps, nm.w_offset)
        }
    };
    let tiles = w.rows.div_ceil(16);
    if choice.splits > 1 && tiles * 16 * choice.splits as usize > MMV_SPLIT_ROWS {
        return Err(shape_err(op, "split product larger than the scratch"));
    }
    let blocks = grid_x(gpu, op, tiles, &choice)?;
    let cfg = LaunchConfig {
        grid_dim: (blocks, choice.splits, 1),
        block_dim: (MMV_WARPS * 32, 1, 1),
        shared_mem_bytes: u32::try_from(select::mmv_x1_shared_bytes(w.format, w.cols))
            .map_err(|_| shape_err(op, "k too long"))?,
    };
    Ok((choice, cfg, np, eps, w_off))
}

/// One token: `y = W norm(x) (+ bias) (+ y when residual)` in one launch, x (`[k]`, f32)
/// normalised by `norm` when given and staged by the kernel: the bits of
/// [`super::gemm_stage_x`] + [`mmv`] for that token (kernel-check `mmv` cases).
#[allow(clippy::too_many_arguments)]
pub fn mmv_x1(
    gpu: &Gpu,
    w: &DeviceWeight,
    x: &dyn DevicePtr<f32>,
    norm: Option<NormIn<'_>>,
    bias: Option<&dyn DevicePtr<f32>>,
    residual: bool,
    y: &mut dyn DevicePtrMut<f32>,
    scratch: &mut MmvScratch,
) -> Result<MmvKernel, CudaError> {
    const OP: &str = "mmv_x1";
    let (choice, cfg, np, eps, w_off) = check_x1(OP, gpu, w, x.len(), norm, y.len(), false, false)?;
    let bias_ptr = match bias {
        Some(b) => {
            need(OP, "bias", b.len(), w.rows)?;
            rd(gpu, b)
        }
        None => 0,
    };
    let (wp, xp, yp) = (rd(gpu, &w.data), rd(gpu, x), wr(gpu, y));
    let (pp, cp) = (wr(gpu, &mut scratch.part), wr(gpu, &mut scratch.cnt));
    aligned(OP, "weight", wp, 16)?;
    launch(
        gpu,
        &choice.entry(),
        cfg,
        &[
            Arg::Ptr(wp),
            Arg::Ptr(xp),
            Arg::Ptr(np),
            Arg::F32(eps),
            Arg::F32(w_off),
            Arg::Ptr(bias_ptr),
            Arg::Ptr(if residual { yp } else { 0 }),
            Arg::Ptr(yp),
            Arg::Ptr(pp),
            Arg::Ptr(cp),
            Arg::I32(int(OP, "rows", w.rows)?),
            Arg::I32(int(OP, "k", w.cols)?),
            Arg::I32(choice.splits as i32),
        ],
    )?;
    Ok(choice)
}

/// One token: `y = act(Wg norm(x)) * (Wu norm(x))` in one launch (see [`mmv_x1`]).
#[allow(clippy::too_many_arguments)]
pub fn mmv_glu_x1(
    gpu: &Gpu,
    wg: &DeviceWeight,
    wu: &DeviceWeight,
    x: &dyn DevicePtr<f32>,
    norm: Option<NormIn<'_>>,
    act: super::Activation,
    y: &mut dyn DevicePtrMut<f32>,
    scratch: &mut MmvScratch,
) -> Result<MmvKernel, CudaError> {
    const OP: &str = "mmv_glu_x1";
    if wg.format != wu.format || wg.rows != wu.rows || wg.cols != wu.cols {
        return Err(shape_err(OP, "gate and up differ in format or shape"));
    }
    let (choice, cfg, np, eps, w_off) = check_x1(OP, gpu, wg, x.len(), norm, y.len(), true, false)?;
    need(OP, "up weight", wu.data.len(), wu.rows * wu.row_bytes)?;
    let (gp, up, xp, yp) = (rd(gpu, &wg.data), rd(gpu, &wu.data), rd(gpu, x), wr(gpu, y));
    let (pp, cp) = (wr(gpu, &mut scratch.part), wr(gpu, &mut scratch.cnt));
    aligned(OP, "gate weight", gp, 16)?;
    aligned(OP, "up weight", up, 16)?;
    launch(
        gpu,
        &choice.entry(),
        cfg,
        &[
            Arg::Ptr(gp),
            Arg::Ptr(up),
            Arg::Ptr(xp),
            Arg::Ptr(np),
            Arg::F32(eps),
            Arg::F32(w_off),
            Arg::Ptr(yp),
            Arg::Ptr(pp),
            Arg::Ptr(cp),
            Arg::I32(int(OP, "rows", wg.rows)?),
            Arg::I32(int(OP, "k", wg.cols)?),
            Arg::I32(super::pointwise::act_code(act)),
            Arg::I32(choice.splits as i32),
        ],
    )?;
    Ok(choice)
}

/// One token, two products of one shape on one x (k + v) in one launch: `ya = Wa norm(x)
/// (+ ba)`, `yb = Wb norm(x) (+ bb)`, x staged once: the bits of two [`mmv_x1`] launches
/// (kernel-check `mmv` cases).
#[allow(clippy::too_many_arguments)]
pub fn mmv_pair_x1(
    gpu: &Gpu,
    wa: &DeviceWeight,
    wb: &DeviceWeight,
    x: &dyn DevicePtr<f32>,
    norm: Option<NormIn<'_>>,
    (ba, bb): (Option<&dyn DevicePtr<f32>>, Option<&dyn DevicePtr<f32>>),
    ya: &mut dyn DevicePtrMut<f32>,
    yb: &mut dyn DevicePtrMut<f32>,
    scratch: &mut MmvScratch,
) -> Result<MmvKernel, CudaError> {
    const OP: &str = "mmv_pair_x1";
    if wa.format != wb.format || wa.rows != wb.rows || wa.cols != wb.cols {
        return Err(shape_err(OP, "the two matrices differ in format or shape"));
    }
    let (choice, cfg, np, eps, w_off) =
        check_x1(OP, gpu, wa, x.len(), norm, ya.len(), false, true)?;
    need(OP, "second weight", wb.data.len(), wb.rows * wb.row_bytes)?;
    need(OP, "second y", yb.len(), wb.rows)?;
    let bias_ptr = |b: Option<&dyn DevicePtr<f32>>| match b {
        Some(b) => need(OP, "bias", b.len(), wa.rows).map(|_| rd(gpu, b)),
        None => Ok(0),
    };
    let (bap, bbp) = (bias_ptr(ba)?, bias_ptr(bb)?);
    let (ap, bp, xp) = (rd(gpu, &wa.data), rd(gpu, &wb.data), rd(gpu, x));
    let (yap, ybp) = (wr(gpu, ya), wr(gpu, yb));
    let (pp, cp) = (wr(gpu, &mut scratch.part), wr(gpu, &mut scratch.cnt));
    aligned(OP, "first weight", ap, 16)?;
    aligned(OP, "second weight", bp, 16)?;
    launch(
        gpu,
        &choice.entry(),
        cfg,
        &[
            Arg::Ptr(ap),
            Arg::Ptr(bp),
            Arg::Ptr(xp),
            Arg::Ptr(np),
            Arg::F32(eps),
            Arg::F32(w_off),
            Arg::Ptr(bap),
            Arg::Ptr(bbp),
            Arg::Ptr(yap),
            Arg::Ptr(ybp),
            Arg::Ptr(pp),
            Arg::Ptr(cp),
            Arg::I32(int(OP, "rows", wa.rows)?),
            Arg::I32(int(OP, "k", wa.cols)?),
            Arg::I32(choice.splits as i32),
        ],
    )?;
    Ok(choice)
}
