//! Wrappers of `gemmt.cu`: the tiled prompt pass. A product is the staging of x
//! ([`super::gemm_stage_x_for`], shared with `gemm.cu`), the weights decoded into
//! [`GemmtScratch`] (`gemmt_dq_<fmt>`: f16, or bf16 for BF16 weights; gate + up
//! interleaved in groups of [`GEMMT_GLU_G`] rows), then one tiled GEMM launch over all the
//! pass's rows (`gemmt_<f16|bf16>[_glu]_p<P>`, P = parts of x multiplied).
//!
//! A token's outputs depend only on its own x, the weights and k (one accumulator per output
//! fed in k order): kernel-check's `gemmt` cases compare each row alone with the same row
//! among many, bit for bit. They are neither `gemm.cu`'s bits nor the row path's: the weights
//! are rounded to 16 bits once; kernel-check and the `prefill` gate bound the difference.

use super::{Arg, DeviceWeight, GemmX, XStaging, int, launch, need, rd, wr};
use crate::cuda::select::{
    self, Decoded, GEMMT_BK, GEMMT_BM, GEMMT_BN, GEMMT_GLU_G, gemmt_decoded, gemmt_decoded_rows,
    gemmt_shared_bytes,
};
use crate::cuda::{CudaError, Gpu, shape_err};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, LaunchConfig};

/// How the tiled pass runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmtOpts {
    /// Parts of x multiplied: 2 (f16 hi + lo, or bf16 hi + mid: near-f32 activations for
    /// twice the MMAs) or 1 (x rounded to 16 bits).
    pub parts: u32,
    /// The planted fault of the `prefill` gate: every row's first chunk decodes to zeros.
    pub fault: bool,
}

impl Default for GemmtOpts {
    fn default() -> Self {
        GemmtOpts {
            parts: 2,
            fault: false,
        }
    }
}

/// The decoded weights of the product being multiplied (grown to the largest product on
/// first use; one per decoder's prompt pass).
#[derive(Default)]
pub struct GemmtScratch {
    buf: Option<CudaSlice<u16>>,
}

impl GemmtScratch {
    pub fn new() -> GemmtScratch {
        GemmtScratch::default()
    }

    /// Bytes held on the device.
    pub fn bytes(&self) -> usize {
        self.buf.as_ref().map_or(0, |b| b.len() * 2)
    }

    fn ensure(&mut self, gpu: &Gpu, len: usize) -> Result<&mut CudaSlice<u16>, CudaError> {
        if self.buf.as_ref().is_none_or(|b| b.len() < len) {
            self.buf = None; // free the old one before allocating the larger
            self.buf = Some(gpu.zeros(len)?);
        }
        self.buf
            .as_mut()
            .ok_or_else(|| shape_err("gemmt", "decoded-weight scratch missing"))
    }
}

/// Decode `w` into rows of `out` (`group` = 0: row r at r; else gate + up interleaving,
/// `half` 0 for gate, 1 for up).
fn decode(
    gpu: &Gpu,
    w: &DeviceWeight,
    out: &mut CudaSlice<u16>,
    group: usize,
    half: usize,
    fault: bool,
) -> Result<(), CudaError> {
    const OP: &str = "gemmt_dq";
    let kind = gemmt_decoded(w.format).ok_or(CudaError::UnsupportedFormat {
        op: OP,
        format: w.format,
    })?;
    need(OP, "weight", w.data.len(), w.rows * w.row_bytes)?;
    let chunks = w.rows * (w.cols / 32);
    let blocks = u32::try_from(chunks.div_ceil(256)).map_err(|_| shape_err(OP, "too many rows"))?;
    let (wp, op) = (rd(gpu, &w.data), wr(gpu, out));
    launch(
        gpu,
        &format!("gemmt_dq_{}", select::format_suffix(w.format)),
        super::cfg1(blocks, 256),
        &[
            Arg::Ptr(wp),
            Arg::U64(w.row_bytes as u64),
            Arg::I32(int(OP, "rows", w.rows)?),
            Arg::I32(int(OP, "k", w.cols)?),
            Arg::Ptr(op),
            Arg::I32(int(OP, "group", group)?),
            Arg::I32(half as i32),
            Arg::I32(i32::from(fault)),
            Arg::I32(i32::from(kind == Decoded::Bf16)),
        ],
    )
}

/// The checks shared by [`gemmt`] and [`gemmt_glu`]: format, k, n, x's staging, parts.
fn check(
    op: &'static str,
    gpu: &Gpu,
    w: &DeviceWeight,
    xs: &GemmX,
    n: usize,
    y_len: usize,
    opts: GemmtOpts,
) -> Result<(), CudaError> {
    if !select::gemmt_supported(w.format, gpu.info().compute_capability) {
        return Err(CudaError::UnsupportedFormat {
            op,
            format: w.format,
        });
    }
    let (block, _) = w.format.block_geometry();
    if w.cols == 0 || w.cols % GEMMT_BK != 0 || w.cols % block != 0 || w.cols > xs.k_max {
        return Err(shape_err(
            op,
            format!(
                "k = {}: a multiple of {GEMMT_BK} and of the {} block up to {}",
                w.cols, w.format, xs.k_max
            ),
        ));
    }
    if n == 0 || n > xs.rows {
        return Err(shape_err(
            op,
            format!("{n} rows; the staging holds 1..={}", xs.rows),
        ));
    }
    if !matches!(opts.parts, 1 | 2) {
        return Err(shape_err(op, format!("{} parts of x: 1 or 2", opts.parts)));
    }
    need(op, "y", y_len, n * w.rows)?;
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
    Ok(())
}

fn grid(
    op: &'static str,
    n: usize,
    col_tiles: usize,
    parts: u32,
    glu: bool,
) -> Result<LaunchConfig, CudaError> {
    let y = u32::try_from(col_tiles)
        .ok()
        .filter(|&y| y <= 65535)
        .ok_or_else(|| shape_err(op, "too many rows"))?;
    Ok(LaunchConfig {
        grid_dim: (n.div_ceil(GEMMT_BM) as u32, y, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: gemmt_shared_bytes(parts as usize, glu) as u32,
    })
}

fn kind_name(w: &DeviceWeight) -> &'static str {
    match gemmt_decoded(w.format) {
        Some(Decoded::Bf16) => "bf16",
        _ => "f16",
    }
}

/// `y[t] = W xs[t] (+ bias) (+ y[t] when residual)` for the `n` staged rows.
#[allow(clippy::too_many_arguments)]
pub fn gemmt(
    gpu: &Gpu,
    w: &DeviceWeight,
    xs: &GemmX,
    scratch: &mut GemmtScratch,
    n: usize,
    bias: Option<&dyn DevicePtr<f32>>,
    residual: bool,
    y: &mut dyn DevicePtrMut<f32>,
    opts: GemmtOpts,
) -> Result<(), CudaError> {
    const OP: &str = "gemmt";
    check(OP, gpu, w, xs, n, y.len(), opts)?;
    let bias_ptr = match bias {
        Some(b) => {
            need(OP, "bias", b.len(), w.rows)?;
            rd(gpu, b)
        }
        None => 0,
    };
    let cfg = grid(OP, n, w.rows.div_ceil(GEMMT_BN), opts.parts, false)?;
    let dq = scratch.ensure(gpu, w.rows * w.cols)?;
    decode(gpu, w, dq, 0, 0, opts.fault)?;
    let (hp, lp, sp, qp, yp) = (
        rd(gpu, &xs.hi),
        rd(gpu, &xs.lo),
        rd(gpu, &xs.scale),
        rd(gpu, &*dq),
        wr(gpu, y),
    );
    launch(
        gpu,
        &format!("gemmt_{}_p{}", kind_name(w), opts.parts),
        cfg,
        &[
            Arg::Ptr(hp),
            Arg::Ptr(lp),
            Arg::Ptr(sp),
            Arg::Ptr(qp),
            Arg::I32(int(OP, "rows", w.rows)?),
            Arg::Ptr(bias_ptr),
            Arg::Ptr(if residual { yp } else { 0 }),
            Arg::Ptr(yp),
            Arg::I32(int(OP, "rows", w.rows)?),
            Arg::I32(int(OP, "k", w.cols)?),
            Arg::I32(int(OP, "n", n)?),
        ],
    )
}

/// `y[t] = act(Wg xs[t]) * (Wu xs[t])` for the `n` staged rows (same format and shape).
#[allow(clippy::too_many_arguments)]
pub fn gemmt_glu(
    gpu: &Gpu,
    wg: &DeviceWeight,
    wu: &DeviceWeight,
    xs: &GemmX,
    scratch: &mut GemmtScratch,
    n: usize,
    act: super::Activation,
    y: &mut dyn DevicePtrMut<f32>,
    opts: GemmtOpts,
) -> Result<(), CudaError> {
    const OP: &str = "gemmt_glu";
    if wg.format != wu.format || wg.rows != wu.rows || wg.cols != wu.cols {
        return Err(shape_err(OP, "gate and up differ in format or shape"));
    }
    check(OP, gpu, wg, xs, n, y.len(), opts)?;
    need(OP, "up weight", wu.data.len(), wu.rows * wu.row_bytes)?;
    let drows = gemmt_decoded_rows(wg.rows, true);
    let cfg = grid(OP, n, drows / (2 * GEMMT_GLU_G), opts.parts, true)?;
    let dq = scratch.ensure(gpu, drows * wg.cols)?;
    decode(gpu, wg, dq, GEMMT_GLU_G, 0, opts.fault)?;
    decode(gpu, wu, dq, GEMMT_GLU_G, 1, opts.fault)?;
    let (hp, lp, sp, qp, yp) = (
        rd(gpu, &xs.hi),
        rd(gpu, &xs.lo),
        rd(gpu, &xs.scale),
        rd(gpu, &*dq),
        wr(gpu, y),
    );
    launch(
        gpu,
        &format!("gemmt_{}_glu_p{}", kind_name(wg), opts.parts),
        cfg,
        &[
            Arg::Ptr(hp),
            Arg::Ptr(lp),
            Arg::Ptr(sp),
            Arg::Ptr(qp),
            Arg::I32(int(OP, "decoded rows", drows)?),
            Arg::Ptr(yp),
            Arg::I32(int(OP, "rows", wg.rows)?),
            Arg::I32(int(OP, "k", wg.cols)?),
            Arg::I32(int(OP, "n", n)?),
            Arg::I32(super::pointwise::act_code(act)),
        ],
    )
}
