//! Wrappers of `gemm.cu`: the tensor-core prompt pass (up to [`GEMM_N`] = 64 token rows per
//! pass over a weight matrix, `mma.sync.m16n8k16`, f16 x f16 -> f32; each weight fragment
//! serves every n-tile of 8 rows).
//!
//! A product is two launches: [`gemm_stage_x`] turns x (optionally RMS-normalised as the
//! matvec folds it) into the f16 halves hi / lo of every token slot ([`GemmX`]), then
//! [`gemm`] or [`gemm_glu`] multiply. BF16 weights multiply on bf16 MMAs with x staged as
//! three bf16 parts ([`gemm_stage_x_for`] picks the staging by the weight format; the
//! product refuses a staging of the other kind). A token's outputs depend only on its own x and the
//! weights (not on the other rows of the pass, nor on their number): kernel-check's `gemm`
//! cases compare each row alone with the same row among n = 1..64, bit for bit. They are not the
//! bits of the row path (`matvec`); the `prefill` gate bounds the difference.

use super::{Arg, DeviceWeight, NormIn, aligned, cfg1, int, launch, need, rd, wr};
use crate::cuda::select;
use crate::cuda::sources::consts::{
    GEMM_MT, GEMM_MT_GLU, GEMM_N, GEMM_RG, GEMM_RG_GLU, GEMM_WARPS,
};
use crate::cuda::{CudaError, Gpu, shape_err};
use crate::quant::QuantFormat;
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, LaunchConfig};

/// Parts of x a prompt-pass GEMM multiplies.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum XParts {
    /// The kernel's default: two for `gemm.cu`; per weight format for the tiled kernel
    /// ([`crate::cuda::select::gemmt_x_parts`]).
    #[default]
    Auto,
    /// Two (hi + lo: near-f32 activations for twice the MMAs).
    Two,
    /// One (x rounded to 16 bits).
    One,
}

impl XParts {
    /// `ASSAY_GEMM_LO`'s values: unset = auto, `0` = one part, `1` = two.
    pub fn parse(v: Option<&str>) -> Option<XParts> {
        match v {
            None | Some("auto") => Some(XParts::Auto),
            Some("0") => Some(XParts::One),
            Some("1") => Some(XParts::Two),
            _ => None,
        }
    }

    /// The count, `None` for auto.
    pub fn count(self) -> Option<u32> {
        match self {
            XParts::Auto => None,
            XParts::Two => Some(2),
            XParts::One => Some(1),
        }
    }
}

/// How the tensor-core pass runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GemmOpts {
    /// Parts of x (`gemm.cu` multiplies the lo halves unless [`XParts::One`]).
    pub x: XParts,
    /// The planted fault of the `prefill` gate: every row's first chunk loses its scale
    /// (`gemm.cu`) or decodes to zeros (`gemmt.cu`).
    pub fault: bool,
}

impl GemmOpts {
    /// Whether `gemm.cu` multiplies the lo halves of x.
    pub fn lo(&self) -> bool {
        self.x != XParts::One
    }
}

/// How x was staged ([`GemmX::staged`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XStaging {
    /// f16 hi + lo halves (`gemm_stage_x`), for every format but BF16.
    F16,
    /// bf16 hi + mid + lo parts (`gemm_stage_x_bf16`), for BF16 weights.
    Bf16,
}

impl XStaging {
    /// The staging the GEMM of `format` multiplies.
    pub fn of(format: QuantFormat) -> XStaging {
        if format == QuantFormat::BF16 {
            XStaging::Bf16
        } else {
            XStaging::F16
        }
    }
}

/// The staged activations of one pass: `[rows][k]` f16 hi and lo halves, for rows of up
/// to `k_max` values, and per row the power of two its values were divided by (1 unless
/// the row's largest |value| reached 2^15: f16 would overflow; the GEMM multiplies it back).
/// For BF16 weights the same buffers hold x as bf16 parts: hi, mid (in `lo`) and `lo2`.
pub struct GemmX {
    /// Token rows the buffers hold (a multiple of 8).
    pub rows: usize,
    pub hi: CudaSlice<u16>,
    pub lo: CudaSlice<u16>,
    /// The third bf16 part (BF16 staging only).
    pub lo2: CudaSlice<u16>,
    pub scale: CudaSlice<f32>,
    pub k_max: usize,
    /// The last staging written (`None` before the first).
    pub staged: Option<XStaging>,
}

impl GemmX {
    /// Buffers for rows of up to `k_max` values.
    /// Buffers of [`GEMM_N`] token rows (one `gemm.cu` pass).
    pub fn new(gpu: &Gpu, k_max: usize) -> Result<GemmX, CudaError> {
        GemmX::with_rows(gpu, GEMM_N, k_max)
    }

    /// Buffers of `rows` token rows (rounded up to a multiple of 8: the staging zeroes the
    /// last n-tile's slots past the pass).
    pub fn with_rows(gpu: &Gpu, rows: usize, k_max: usize) -> Result<GemmX, CudaError> {
        let rows = rows.max(1).div_ceil(8) * 8;
        let n = rows * k_max.max(1);
        Ok(GemmX {
            rows,
            hi: gpu.zeros(n)?,
            lo: gpu.zeros(n)?,
            lo2: gpu.zeros(n)?,
            scale: gpu.zeros(rows)?,
            k_max: k_max.max(1),
            staged: None,
        })
    }
}

/// Stage `n` token vectors of `k` values from x (`[n][k]`) into `xs`, normalised by `norm`
/// when given (the matvec's folded RMSNorm), a row reaching |v| >= 2^15 divided by a power
/// of two (see [`GemmX`]); the slots of the last n-tile of 8 past `n`
/// become zeros (the GEMM does not read the slots past that tile).
pub fn gemm_stage_x(
    gpu: &Gpu,
    x: &dyn DevicePtr<f32>,
    n: usize,
    k: usize,
    norm: Option<NormIn<'_>>,
    xs: &mut GemmX,
) -> Result<(), CudaError> {
    stage(gpu, XStaging::F16, x, n, k, norm, xs)
}

/// [`gemm_stage_x`] in the staging the GEMM of `format` multiplies: bf16 parts for BF16
/// (no power-of-two scaling: bf16 has f32's range), f16 halves otherwise.
pub fn gemm_stage_x_for(
    gpu: &Gpu,
    format: QuantFormat,
    x: &dyn DevicePtr<f32>,
    n: usize,
    k: usize,
    norm: Option<NormIn<'_>>,
    xs: &mut GemmX,
) -> Result<(), CudaError> {
    stage(gpu, XStaging::of(format), x, n, k, norm, xs)
}

pub(super) fn stage(
    gpu: &Gpu,
    kind: XStaging,
    x: &dyn DevicePtr<f32>,
    n: usize,
    k: usize,
    norm: Option<NormIn<'_>>,
    xs: &mut GemmX,
) -> Result<(), CudaError> {
    const OP: &str = "gemm_stage_x";
    if n == 0 || n > xs.rows {
        return Err(shape_err(
            OP,
            format!("{n} rows; the staging holds 1..={}", xs.rows),
        ));
    }
    if k == 0 || k % 32 != 0 || k > xs.k_max {
        return Err(shape_err(
            OP,
            format!("k = {k}: a positive multiple of 32 up to {}", xs.k_max),
        ));
    }
    need(OP, "x", x.len(), n * k)?;
    let (np, eps, w_off) = match norm {
        None => (0, 0.0, 0.0),
        Some(nm) => {
            need(OP, "norm weight", nm.weight.len(), k)?;
            (rd(gpu, nm.weight), nm.eps, nm.w_offset)
        }
    };
    let xp = rd(gpu, x);
    let (hp, lp, sp) = (
        wr(gpu, &mut xs.hi),
        wr(gpu, &mut xs.lo),
        wr(gpu, &mut xs.scale),
    );
    let mut args = vec![
        Arg::Ptr(xp),
        Arg::I32(int(OP, "n", n)?),
        Arg::I32(int(OP, "k", k)?),
        Arg::Ptr(np),
        Arg::F32(eps),
        Arg::F32(w_off),
        Arg::Ptr(hp),
        Arg::Ptr(lp),
    ];
    let entry = match kind {
        XStaging::F16 => "gemm_stage_x",
        XStaging::Bf16 => {
            args.push(Arg::Ptr(wr(gpu, &mut xs.lo2)));
            "gemm_stage_x_bf16"
        }
    };
    args.push(Arg::Ptr(sp));
    // Marked before the launch: a failed launch leaves no staging to trust either way.
    xs.staged = None;
    launch(gpu, entry, cfg1((n.div_ceil(8) * 8) as u32, 256), &args)?;
    xs.staged = Some(kind);
    Ok(())
}

/// Row groups per block (`gemm.cu`'s `rg`) of the plain and of the gate + up products:
/// [`GEMM_RG`] / [`GEMM_RG_GLU`], or `ASSAY_GEMM_RG=P,G` (each 1, 2 or 4; a tuning knob,
/// read once). A product's column bits depend on its `rg` (the k split), never on `n`.
pub fn gemm_row_groups() -> (u32, u32) {
    static RG: std::sync::OnceLock<(u32, u32)> = std::sync::OnceLock::new();
    *RG.get_or_init(|| {
        std::env::var("ASSAY_GEMM_RG")
            .ok()
            .and_then(|v| parse_row_groups(&v))
            .unwrap_or((GEMM_RG, GEMM_RG_GLU))
    })
}

/// `P,G` with each of 1, 2, 4.
fn parse_row_groups(v: &str) -> Option<(u32, u32)> {
    let (p, g) = v.split_once(',')?;
    let ok = |s: &str| {
        s.trim()
            .parse::<u32>()
            .ok()
            .filter(|r| matches!(r, 1 | 2 | 4) && GEMM_WARPS % r == 0)
    };
    Some((ok(p)?, ok(g)?))
}

/// The checks shared by [`gemm`] and [`gemm_glu`]; returns the launch shape.
fn check(
    op: &'static str,
    gpu: &Gpu,
    w: &DeviceWeight,
    xs: &GemmX,
    n: usize,
    y_len: usize,
    glu: bool,
) -> Result<LaunchConfig, CudaError> {
    if !select::gemm_supported(w.format, gpu.info().compute_capability) {
        return Err(CudaError::UnsupportedFormat {
            op,
            format: w.format,
        });
    }
    let (block, _) = w.format.block_geometry();
    if w.cols == 0 || w.cols % 32 != 0 || w.cols % block != 0 || w.cols > xs.k_max {
        return Err(shape_err(
            op,
            format!(
                "k = {}: a multiple of the {} block up to {}",
                w.cols, w.format, xs.k_max
            ),
        ));
    }
    if n == 0 || n > GEMM_N || n > xs.rows {
        return Err(shape_err(
            op,
            format!("{n} rows; one pass takes 1..={}", GEMM_N.min(xs.rows)),
        ));
    }
    need(op, "y", y_len, n * w.rows)?;
    need(op, "weight", w.data.len(), w.rows * w.row_bytes)?;
    let want = XStaging::of(w.format);
    if xs.staged != Some(want) {
        return Err(shape_err(
            op,
            format!(
                "x staged as {:?}; {} weights multiply x staged as {want:?} (gemm_stage_x_for)",
                xs.staged, w.format
            ),
        ));
    }
    let (rg_plain, rg_glu) = gemm_row_groups();
    let rows_per_block = if glu {
        GEMM_MT_GLU * rg_glu as usize
    } else {
        GEMM_MT * rg_plain as usize
    } * 16;
    let blocks = u32::try_from(w.rows.div_ceil(rows_per_block))
        .map_err(|_| shape_err(op, "too many rows"))?;
    Ok(LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (GEMM_WARPS * 32, 1, 1),
        shared_mem_bytes: 0,
    })
}

/// `y[t] = W xs[t] (+ bias) (+ y[t] when residual)` for the `n` staged rows.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    gpu: &Gpu,
    w: &DeviceWeight,
    xs: &GemmX,
    n: usize,
    bias: Option<&dyn DevicePtr<f32>>,
    residual: bool,
    y: &mut dyn DevicePtrMut<f32>,
    opts: GemmOpts,
) -> Result<(), CudaError> {
    const OP: &str = "gemm";
    let cfg = check(OP, gpu, w, xs, n, y.len(), false)?;
    let bias_ptr = match bias {
        Some(b) => {
            need(OP, "bias", b.len(), w.rows)?;
            rd(gpu, b)
        }
        None => 0,
    };
    let (wp, hp, lp, sp, yp) = (
        rd(gpu, &w.data),
        rd(gpu, &xs.hi),
        rd(gpu, &xs.lo),
        rd(gpu, &xs.scale),
        wr(gpu, y),
    );
    aligned(OP, "weight", wp, 16)?;
    let mut args = vec![Arg::Ptr(wp), Arg::Ptr(hp), Arg::Ptr(lp)];
    if xs.staged == Some(XStaging::Bf16) {
        args.push(Arg::Ptr(rd(gpu, &xs.lo2)));
    }
    args.extend([
        Arg::Ptr(sp),
        Arg::Ptr(bias_ptr),
        Arg::Ptr(if residual { yp } else { 0 }),
        Arg::Ptr(yp),
        Arg::I32(int(OP, "rows", w.rows)?),
        Arg::I32(int(OP, "k", w.cols)?),
        Arg::I32(int(OP, "n", n)?),
        Arg::I32(i32::from(opts.lo())),
        Arg::I32(i32::from(opts.fault)),
        Arg::I32(gemm_row_groups().0 as i32),
    ]);
    launch(
        gpu,
        &format!("gemm_{}", select::format_suffix(w.format)),
        cfg,
        &args,
    )
}

/// `y[t] = act(Wg xs[t]) * (Wu xs[t])` for the `n` staged rows (same format and shape).
#[allow(clippy::too_many_arguments)]
pub fn gemm_glu(
    gpu: &Gpu,
    wg: &DeviceWeight,
    wu: &DeviceWeight,
    xs: &GemmX,
    n: usize,
    act: super::Activation,
    y: &mut dyn DevicePtrMut<f32>,
    opts: GemmOpts,
) -> Result<(), CudaError> {
    const OP: &str = "gemm_glu";
    if wg.format != wu.format || wg.rows != wu.rows || wg.cols != wu.cols {
        return Err(shape_err(OP, "gate and up differ in format or shape"));
    }
    let cfg = check(OP, gpu, wg, xs, n, y.len(), true)?;
    need(OP, "up weight", wu.data.len(), wu.rows * wu.row_bytes)?;
    let (gp, up) = (rd(gpu, &wg.data), rd(gpu, &wu.data));
    let (hp, lp, sp, yp) = (
        rd(gpu, &xs.hi),
        rd(gpu, &xs.lo),
        rd(gpu, &xs.scale),
        wr(gpu, y),
    );
    aligned(OP, "gate weight", gp, 16)?;
    aligned(OP, "up weight", up, 16)?;
    let mut args = vec![Arg::Ptr(gp), Arg::Ptr(up), Arg::Ptr(hp), Arg::Ptr(lp)];
    if xs.staged == Some(XStaging::Bf16) {
        args.push(Arg::Ptr(rd(gpu, &xs.lo2)));
    }
    args.extend([
        Arg::Ptr(sp),
        Arg::Ptr(yp),
        Arg::I32(int(OP, "rows", wg.rows)?),
        Arg::I32(int(OP, "k", wg.cols)?),
        Arg::I32(int(OP, "n", n)?),
        Arg::I32(super::pointwise::act_code(act)),
        Arg::I32(i32::from(opts.lo())),
        Arg::I32(i32::from(opts.fault)),
        Arg::I32(gemm_row_groups().1 as i32),
    ]);
    launch(
        gpu,
        &format!("gemm_{}_glu", select::format_suffix(wg.format)),
        cfg,
        &args,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_groups_parse() {
        assert_eq!(parse_row_groups("1,2"), Some((1, 2)));
        assert_eq!(parse_row_groups(" 4 , 1"), Some((4, 1)));
        assert_eq!(parse_row_groups("3,2"), None);
        assert_eq!(parse_row_groups("2"), None);
        assert_eq!(parse_row_groups("8,1"), None);
        assert_eq!(parse_row_groups(""), None);
    }
}
