//! Wrappers of `matvec.cu` and `embed.cu`: weight-matrix products and embedding rows.

use super::{Arg, DeviceWeight, aligned, cfg1, int, launch, need, rd, wr};
use crate::cuda::select::{self, EmbedKernel, MatvecKernel};
use crate::cuda::sources::consts::MV_WARPS;
use cudarc::driver::LaunchConfig;
use crate::cuda::{CudaError, Gpu};
use cudarc::driver::{DevicePtr, DevicePtrMut};

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
    const OP: &str = "matvec";
    let choice = select::choose_matvec(w.format, w.rows, w.cols, ntok, &gpu.facts())?;
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
    let (wp, xp, yp) = (rd(gpu, &w.data), rd(gpu, x), wr(gpu, y));
    aligned(OP, "weight", wp, 16)?;
    aligned(OP, "x", xp, 16)?;
    let name = choice.entry();
    let blocks = u32::try_from(w.rows.div_ceil(choice.rows_per_block()))
        .map_err(|_| crate::cuda::shape_err(OP, "too many rows"))?;
    let cfg = LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (MV_WARPS * 32, 1, 1),
        shared_mem_bytes: MatvecKernel::shared_bytes(w.cols) as u32,
    };
    launch(
        gpu,
        &name,
        cfg,
        &[
            Arg::Ptr(wp),
            Arg::U64(w.row_bytes as u64),
            Arg::Ptr(xp),
            Arg::Ptr(bias_ptr),
            Arg::Ptr(yp),
            Arg::I32(int(OP, "rows", w.rows)?),
            Arg::I32(int(OP, "k", w.cols)?),
            Arg::I32(int(OP, "ntok", ntok)?),
        ],
    )?;
    Ok(choice)
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
