//! Wrappers of `matvec.cu` and `embed.cu`: weight-matrix products and embedding rows.

use super::{Arg, DeviceWeight, aligned, cfg1, int, launch, need, rd, wr};
use crate::cuda::select::{self, EmbedKernel, MatvecKernel};
use crate::cuda::sources::consts::MV_WARPS;
use crate::cuda::{CudaError, Gpu};
use cudarc::driver::{DevicePtr, DevicePtrMut, LaunchConfig};

/// Kernel choices a caller may force on a matvec launch; none of them changes a bit of the
/// result (kernel-check compares them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MatvecOpts {
    /// The streamed one-token kernel ([`MatvecKernel::Wr`], `ASSAY_MV_WR`): `None` where
    /// [`select::choose_matvec`] takes it, `Some(false)` never (today's entry points),
    /// `Some(true)` wherever its requirements hold, whatever the rows.
    pub wr: Option<bool>,
    /// Blocks of a streamed launch (kernel-check's grid invariance), `None`:
    /// [`MatvecKernel::blocks`]. Ignored by the other kernels, whose grid the rows fix.
    pub wr_grid: Option<u32>,
    /// q, k and v in one segmented streamed launch ([`MatvecKernel::WrSegs`],
    /// `ASSAY_MV_QKV`, [`matvec_segs`]): `None` where [`select::choose_matvec_segs`] takes
    /// it, `Some(false)` never, `Some(true)` wherever its requirements hold.
    pub qkv: Option<bool>,
    /// The multi-token streamed kernel ([`MatvecKernel::WrTok`], `ASSAY_MV_WRT=1`) for 2 or
    /// more token vectors where [`select::choose_matvec_wrt`] has one; `false` (the default):
    /// never (not yet run on a GPU).
    pub wrt: bool,
}

/// `y[t] = W x[t] (+ bias)` for `ntok` token vectors: x is `[ntok][w.cols]`, y is
/// `[ntok][w.rows]`, bias (if any) `[w.rows]`. Returns the kernel used.
pub fn matvec(
    gpu: &Gpu,
    w: &DeviceWeight,
    x: &dyn DevicePtr<f32>,
    ntok: usize,
    bias: Option<&dyn DevicePtr<f32>>,
    y: &mut dyn DevicePtrMut<f32>,
) -> Result<MatvecKernel, CudaError> {
    matvec_fused(gpu, w, x, ntok, bias, None, false, MatvecOpts::default(), y)
}

/// `y[t] = (W x[t] (+ bias)) + y[t]`: [`matvec`] with the residual add in its epilogue
/// (the same f32 addition as [`super::add`], so the same bits as the two launches).
pub fn matvec_residual(
    gpu: &Gpu,
    w: &DeviceWeight,
    x: &dyn DevicePtr<f32>,
    ntok: usize,
    bias: Option<&dyn DevicePtr<f32>>,
    y: &mut dyn DevicePtrMut<f32>,
) -> Result<MatvecKernel, CudaError> {
    matvec_fused(gpu, w, x, ntok, bias, None, true, MatvecOpts::default(), y)
}

/// An RMSNorm folded into a matvec's input: x is normalised with `weight` (+ `w_offset`)
/// and `eps` exactly as [`super::rmsnorm`] does (one row of `k` values per token).
#[derive(Clone, Copy)]
pub struct NormIn<'a> {
    pub weight: &'a dyn DevicePtr<f32>,
    pub eps: f32,
    pub w_offset: f32,
}

/// Device address, eps and offset of an optional folded norm, checked for `k` values.
fn norm_args(
    gpu: &Gpu,
    op: &'static str,
    norm: Option<NormIn<'_>>,
    k: usize,
) -> Result<(u64, f32, f32), CudaError> {
    match norm {
        None => Ok((0, 0.0, 0.0)),
        Some(n) => {
            need(op, "norm weight", n.weight.len(), k)?;
            let p = rd(gpu, n.weight);
            aligned(op, "norm weight", p, 16)?;
            Ok((p, n.eps, n.w_offset))
        }
    }
}

/// The general matvec: `y[t] = W norm(x[t]) (+ bias) (+ y[t] when residual)`, with
/// `norm` the identity when `None`, the kernel chosen with `opts`. The same bits as the
/// separate launches.
#[allow(clippy::too_many_arguments)]
pub fn matvec_fused(
    gpu: &Gpu,
    w: &DeviceWeight,
    x: &dyn DevicePtr<f32>,
    ntok: usize,
    bias: Option<&dyn DevicePtr<f32>>,
    norm: Option<NormIn<'_>>,
    residual: bool,
    opts: MatvecOpts,
    y: &mut dyn DevicePtrMut<f32>,
) -> Result<MatvecKernel, CudaError> {
    matvec_impl(gpu, w, x, ntok, bias, norm, residual, opts, y)
}

fn matvec_cfg(
    gpu: &Gpu,
    choice: &MatvecKernel,
    rows: usize,
    cols: usize,
    opts: MatvecOpts,
) -> Result<LaunchConfig, CudaError> {
    let blocks = match (choice, opts.wr_grid) {
        (
            MatvecKernel::Wr { .. } | MatvecKernel::WrSegs { .. } | MatvecKernel::WrTok { .. },
            Some(0),
        ) => {
            return Err(crate::cuda::shape_err("matvec", "a grid of 0 blocks"));
        }
        (
            MatvecKernel::Wr { .. } | MatvecKernel::WrSegs { .. } | MatvecKernel::WrTok { .. },
            Some(g),
        ) => g as usize,
        _ => choice.blocks(rows, &gpu.facts()),
    };
    let blocks =
        u32::try_from(blocks).map_err(|_| crate::cuda::shape_err("matvec", "too many rows"))?;
    Ok(LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (MV_WARPS * 32, 1, 1),
        shared_mem_bytes: choice.shared_bytes(cols) as u32,
    })
}

#[allow(clippy::too_many_arguments)]
fn matvec_impl(
    gpu: &Gpu,
    w: &DeviceWeight,
    x: &dyn DevicePtr<f32>,
    ntok: usize,
    bias: Option<&dyn DevicePtr<f32>>,
    norm: Option<NormIn<'_>>,
    residual: bool,
    opts: MatvecOpts,
    y: &mut dyn DevicePtrMut<f32>,
) -> Result<MatvecKernel, CudaError> {
    const OP: &str = "matvec";
    let choice = select::choose_matvec_tok(
        w.format,
        w.rows,
        w.cols,
        ntok,
        &gpu.facts(),
        opts.wr,
        opts.wrt,
        false,
    )?;
    need(OP, "x", x.len(), ntok * w.cols)?;
    need(OP, "y", y.len(), ntok * w.rows)?;
    need(OP, "weight", w.data.len(), w.rows * w.row_bytes)?;
    let bias_ptr = match bias {
        Some(b) => {
            need(OP, "bias", b.len(), w.rows)?;
            rd(gpu, b)
        }
        None => 0,
    };
    let (np, eps, w_off) = norm_args(gpu, OP, norm, w.cols)?;
    let (wp, xp, yp) = (rd(gpu, &w.data), rd(gpu, x), wr(gpu, y));
    aligned(OP, "weight", wp, 16)?;
    aligned(OP, "x", xp, 16)?;
    launch(
        gpu,
        &choice.entry(),
        matvec_cfg(gpu, &choice, w.rows, w.cols, opts)?,
        &[
            Arg::Ptr(wp),
            Arg::U64(w.row_bytes as u64),
            Arg::Ptr(xp),
            Arg::Ptr(bias_ptr),
            Arg::Ptr(if residual { yp } else { 0 }),
            Arg::Ptr(yp),
            Arg::I32(int(OP, "rows", w.rows)?),
            Arg::I32(int(OP, "k", w.cols)?),
            Arg::I32(int(OP, "ntok", ntok)?),
            Arg::Ptr(np),
            Arg::F32(eps),
            Arg::F32(w_off),
        ],
    )?;
    Ok(choice)
}

/// `y[t] = act(Wg x[t]) * (Wu x[t])` in one pass over both matrices (same format and
/// shape, no bias), x optionally normalised first (`norm`), the kernel chosen with `opts`:
/// the same bits as the separate launches (rmsnorm, two [`matvec`]s, [`super::gated_act`]).
#[allow(clippy::too_many_arguments)]
pub fn matvec_glu(
    gpu: &Gpu,
    wg: &DeviceWeight,
    wu: &DeviceWeight,
    x: &dyn DevicePtr<f32>,
    ntok: usize,
    act: super::Activation,
    norm: Option<NormIn<'_>>,
    opts: MatvecOpts,
    y: &mut dyn DevicePtrMut<f32>,
) -> Result<MatvecKernel, CudaError> {
    const OP: &str = "matvec_glu";
    if wg.format != wu.format || wg.rows != wu.rows || wg.cols != wu.cols {
        return Err(crate::cuda::shape_err(
            OP,
            format!(
                "gate {} {}x{} and up {} {}x{} differ",
                wg.format, wg.rows, wg.cols, wu.format, wu.rows, wu.cols
            ),
        ));
    }
    let choice = select::choose_matvec_tok(
        wg.format,
        wg.rows,
        wg.cols,
        ntok,
        &gpu.facts(),
        opts.wr,
        opts.wrt,
        true,
    )?;
    need(OP, "x", x.len(), ntok * wg.cols)?;
    need(OP, "y", y.len(), ntok * wg.rows)?;
    need(OP, "gate weight", wg.data.len(), wg.rows * wg.row_bytes)?;
    need(OP, "up weight", wu.data.len(), wu.rows * wu.row_bytes)?;
    let (np, eps, w_off) = norm_args(gpu, OP, norm, wg.cols)?;
    let (gp, up, xp, yp) = (rd(gpu, &wg.data), rd(gpu, &wu.data), rd(gpu, x), wr(gpu, y));
    aligned(OP, "gate weight", gp, 16)?;
    aligned(OP, "up weight", up, 16)?;
    aligned(OP, "x", xp, 16)?;
    launch(
        gpu,
        &choice.entry(),
        matvec_cfg(gpu, &choice, wg.rows, wg.cols, opts)?,
        &[
            Arg::Ptr(gp),
            Arg::Ptr(up),
            Arg::U64(wg.row_bytes as u64),
            Arg::Ptr(xp),
            Arg::Ptr(yp),
            Arg::I32(int(OP, "rows", wg.rows)?),
            Arg::I32(int(OP, "k", wg.cols)?),
            Arg::I32(int(OP, "ntok", ntok)?),
            Arg::I32(super::pointwise::act_code(act)),
            Arg::Ptr(np),
            Arg::F32(eps),
            Arg::F32(w_off),
        ],
    )?;
    Ok(choice)
}

/// `ya[t] = Wa norm(x[t]) (+ bias_a)` and `yb[t] = Wb norm(x[t]) (+ bias_b)` for two
/// matrices of one format and shape (k and v of an attention block): one launch when
/// [`select::choose_matvec_pair`] has a kernel (a lone token, small matrices), else two
/// [`matvec_fused`] launches (chosen with `opts`); the same bits either way. Returns the
/// kernel used (the first matrix's when there were two launches).
#[allow(clippy::too_many_arguments)]
pub fn matvec_pair(
    gpu: &Gpu,
    wa: &DeviceWeight,
    wb: &DeviceWeight,
    x: &dyn DevicePtr<f32>,
    ntok: usize,
    bias_a: Option<&dyn DevicePtr<f32>>,
    bias_b: Option<&dyn DevicePtr<f32>>,
    norm: Option<NormIn<'_>>,
    opts: MatvecOpts,
    ya: &mut dyn DevicePtrMut<f32>,
    yb: &mut dyn DevicePtrMut<f32>,
) -> Result<MatvecKernel, CudaError> {
    const OP: &str = "matvec_pair";
    if wa.format != wb.format || wa.rows != wb.rows || wa.cols != wb.cols {
        return Err(crate::cuda::shape_err(
            OP,
            format!(
                "matrices {} {}x{} and {} {}x{} differ",
                wa.format, wa.rows, wa.cols, wb.format, wb.rows, wb.cols
            ),
        ));
    }
    let Some(choice) = select::choose_matvec_pair(wa.format, wa.rows, wa.cols, ntok, &gpu.facts())?
    else {
        let c = matvec_impl(gpu, wa, x, ntok, bias_a, norm, false, opts, ya)?;
        matvec_impl(gpu, wb, x, ntok, bias_b, norm, false, opts, yb)?;
        return Ok(c);
    };
    need(OP, "x", x.len(), ntok * wa.cols)?;
    need(OP, "y a", ya.len(), ntok * wa.rows)?;
    need(OP, "y b", yb.len(), ntok * wb.rows)?;
    need(OP, "weight a", wa.data.len(), wa.rows * wa.row_bytes)?;
    need(OP, "weight b", wb.data.len(), wb.rows * wb.row_bytes)?;
    let mut bias = [0u64; 2];
    for (slot, b) in bias.iter_mut().zip([bias_a, bias_b]) {
        if let Some(b) = b {
            need(OP, "bias", b.len(), wa.rows)?;
            *slot = rd(gpu, b);
        }
    }
    let (np, eps, w_off) = norm_args(gpu, OP, norm, wa.cols)?;
    let (ap, bp, xp) = (rd(gpu, &wa.data), rd(gpu, &wb.data), rd(gpu, x));
    let (yap, ybp) = (wr(gpu, ya), wr(gpu, yb));
    aligned(OP, "weight a", ap, 16)?;
    aligned(OP, "weight b", bp, 16)?;
    aligned(OP, "x", xp, 16)?;
    let mut cfg = matvec_cfg(gpu, &choice, wa.rows, wa.cols, opts)?;
    let nblk = cfg.grid_dim.0;
    cfg.grid_dim.0 = nblk
        .checked_mul(2)
        .ok_or_else(|| crate::cuda::shape_err(OP, "too many rows"))?;
    launch(
        gpu,
        &choice.entry(),
        cfg,
        &[
            Arg::Ptr(ap),
            Arg::Ptr(bp),
            Arg::U64(wa.row_bytes as u64),
            Arg::Ptr(xp),
            Arg::Ptr(bias[0]),
            Arg::Ptr(bias[1]),
            Arg::Ptr(yap),
            Arg::Ptr(ybp),
            Arg::I32(int(OP, "rows", wa.rows)?),
            Arg::I32(int(OP, "k", wa.cols)?),
            Arg::I32(int(OP, "ntok", ntok)?),
            Arg::Ptr(np),
            Arg::F32(eps),
            Arg::F32(w_off),
            Arg::I32(int(OP, "blocks", nblk as usize)?),
        ],
    )?;
    Ok(choice)
}

/// `ys[s][t] = Ws norm(x[t]) (+ biases[s])` for the three matrices `ws` of one format and k
/// (q, k and v of an attention block) in one segmented streamed launch
/// ([`MatvecKernel::WrSegs`]) where [`select::choose_matvec_segs`] takes it (`opts.qkv`,
/// `opts.wr`; `opts.wr_grid` sets its grid): each row gets the bits of its matrix's own
/// [`matvec_fused`] launch. `Ok(None)`: nothing launched (the caller runs its own launches);
/// an error for matrices of different formats or k and for buffers too short.
#[allow(clippy::too_many_arguments)]
pub fn matvec_segs(
    gpu: &Gpu,
    ws: [&DeviceWeight; 3],
    x: &dyn DevicePtr<f32>,
    ntok: usize,
    biases: [Option<&dyn DevicePtr<f32>>; 3],
    norm: Option<NormIn<'_>>,
    opts: MatvecOpts,
    ys: [&mut dyn DevicePtrMut<f32>; 3],
) -> Result<Option<MatvecKernel>, CudaError> {
    let Some(l) = segs_launch(gpu, ws, x, ntok, biases, norm, opts, ys)? else {
        return Ok(None);
    };
    launch(gpu, &l.choice.entry(), l.cfg, &l.args)?;
    Ok(Some(l.choice))
}

/// A segmented launch of [`matvec_segs`], checked and not yet queued: its kernel, grid and
/// arguments (those of `matvec_<fmt>_seg3_wr_r<R>_d<D>`, in order).
pub(super) struct SegsLaunch {
    pub choice: MatvecKernel,
    pub cfg: LaunchConfig,
    pub args: Vec<Arg>,
}

/// [`matvec_segs`]'s choice, checks and arguments (`Ok(None)`: the segmented launch does
/// not apply).
#[allow(clippy::too_many_arguments)]
pub(super) fn segs_launch(
    gpu: &Gpu,
    ws: [&DeviceWeight; 3],
    x: &dyn DevicePtr<f32>,
    ntok: usize,
    biases: [Option<&dyn DevicePtr<f32>>; 3],
    norm: Option<NormIn<'_>>,
    opts: MatvecOpts,
    ys: [&mut dyn DevicePtrMut<f32>; 3],
) -> Result<Option<SegsLaunch>, CudaError> {
    const OP: &str = "matvec_segs";
    let w0 = ws[0];
    if let Some(w) = ws
        .iter()
        .find(|w| w.format != w0.format || w.cols != w0.cols)
    {
        return Err(crate::cuda::shape_err(
            OP,
            format!(
                "matrices {} x{} and {} x{} differ in format or k",
                w0.format, w0.cols, w.format, w.cols
            ),
        ));
    }
    let rows = ws.map(|w| w.rows);
    let Some(choice) = select::choose_matvec_segs(
        w0.format,
        &rows,
        w0.cols,
        ntok,
        &gpu.facts(),
        opts.qkv,
        opts.wr,
    )?
    else {
        return Ok(None);
    };
    need(OP, "x", x.len(), ntok * w0.cols)?;
    let mut wp = [0u64; 3];
    let mut bp = [0u64; 3];
    for (s, w) in ws.iter().enumerate() {
        need(OP, "weight", w.data.len(), w.rows * w.row_bytes)?;
        wp[s] = rd(gpu, &w.data);
        aligned(OP, "weight", wp[s], 16)?;
        if let Some(b) = biases[s] {
            need(OP, "bias", b.len(), w.rows)?;
            bp[s] = rd(gpu, b);
        }
    }
    let mut yp = [0u64; 3];
    for (s, y) in ys.into_iter().enumerate() {
        need(OP, "y", y.len(), ntok * rows[s])?;
        yp[s] = wr(gpu, y);
    }
    let (np, eps, w_off) = norm_args(gpu, OP, norm, w0.cols)?;
    let xp = rd(gpu, x);
    aligned(OP, "x", xp, 16)?;
    let per_warp = (choice.rows_per_block() / MV_WARPS as usize) as u32;
    let cfg = matvec_cfg(
        gpu,
        &choice,
        select::mv_seg_rows(per_warp, &rows),
        w0.cols,
        opts,
    )?;
    let args = vec![
        Arg::Ptr(wp[0]),
        Arg::Ptr(wp[1]),
        Arg::Ptr(wp[2]),
        Arg::Ptr(xp),
        Arg::Ptr(bp[0]),
        Arg::Ptr(bp[1]),
        Arg::Ptr(bp[2]),
        Arg::Ptr(yp[0]),
        Arg::Ptr(yp[1]),
        Arg::Ptr(yp[2]),
        Arg::I32(int(OP, "rows", rows[0])?),
        Arg::I32(int(OP, "rows", rows[1])?),
        Arg::I32(int(OP, "rows", rows[2])?),
        Arg::I32(int(OP, "k", w0.cols)?),
        Arg::Ptr(np),
        Arg::F32(eps),
        Arg::F32(w_off),
    ];
    Ok(Some(SegsLaunch { choice, cfg, args }))
}

/// `out[t] = scale * W[tokens[t]]` for `ntok` tokens: out is `[ntok][w.cols]`. A token id
/// outside `0..w.rows` yields a row of NaN. Returns the kernel used.
pub fn embed(
    gpu: &Gpu,
    w: &DeviceWeight,
    tokens: &dyn DevicePtr<i32>,
    ntok: usize,
    scale: f32,
    out: &mut dyn DevicePtrMut<f32>,
) -> Result<EmbedKernel, CudaError> {
    const OP: &str = "embed";
    let choice = select::choose_embed(w.format, w.cols)?;
    need(OP, "tokens", tokens.len(), ntok)?;
    need(OP, "out", out.len(), ntok * w.cols)?;
    need(OP, "weight", w.data.len(), w.rows * w.row_bytes)?;
    if ntok == 0 {
        return Ok(choice);
    }
    let (wp, tp, op) = (rd(gpu, &w.data), rd(gpu, tokens), wr(gpu, out));
    aligned(OP, "weight", wp, 16)?;
    aligned(OP, "out", op, 16)?;
    let name = match choice {
        EmbedKernel::ChunkPerThread { format } => {
            format!("embed_{}", select::format_suffix(format))
        }
    };
    let threads = ((w.cols / 32).div_ceil(32) * 32).clamp(32, 256) as u32;
    launch(
        gpu,
        &name,
        cfg1(int(OP, "ntok", ntok)? as u32, threads),
        &[
            Arg::Ptr(wp),
            Arg::U64(w.row_bytes as u64),
            Arg::Ptr(tp),
            Arg::I32(int(OP, "vocab", w.rows)?),
            Arg::Ptr(op),
            Arg::I32(int(OP, "k", w.cols)?),
            Arg::F32(scale),
        ],
    )?;
    Ok(choice)
}
