//! Wrappers of `norm.cu`, `rope.cu`, `elementwise.cu` and `argmax.cu`.

use super::{Arg, cfg1, int, launch, need, rd, wr};
use crate::cuda::sources::consts::NORM_THREADS;
use crate::cuda::{CudaError, Gpu, shape_err};
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut};

/// `y = x / sqrt(mean(x^2) + eps) * (w + w_offset)` for `rows` rows of `dim` values.
#[allow(clippy::too_many_arguments)]
pub fn rmsnorm(
    gpu: &Gpu,
    x: &dyn DevicePtr<f32>,
    w: &dyn DevicePtr<f32>,
    y: &mut dyn DevicePtrMut<f32>,
    rows: usize,
    dim: usize,
    eps: f32,
    w_offset: f32,
) -> Result<(), CudaError> {
    const OP: &str = "rmsnorm";
    need(OP, "x", x.len(), rows * dim)?;
    need(OP, "y", y.len(), rows * dim)?;
    let (xp, wp, yp) = (rd(gpu, x), rd(gpu, w), wr(gpu, y));
    norm_launch(gpu, OP, xp, wp, w.len(), yp, rows, dim, eps, w_offset)
}

/// [`rmsnorm`] in place.
pub fn rmsnorm_inplace(
    gpu: &Gpu,
    x: &mut dyn DevicePtrMut<f32>,
    w: &dyn DevicePtr<f32>,
    rows: usize,
    dim: usize,
    eps: f32,
    w_offset: f32,
) -> Result<(), CudaError> {
    const OP: &str = "rmsnorm_inplace";
    need(OP, "x", x.len(), rows * dim)?;
    let (xp, wp) = (wr(gpu, x), rd(gpu, w));
    norm_launch(gpu, OP, xp, wp, w.len(), xp, rows, dim, eps, w_offset)
}

/// QK-norm: RMSNorm of every head of `ntok x nheads` heads of `head_dim` values, in place,
/// with one weight of `head_dim` values shared by all heads.
#[allow(clippy::too_many_arguments)]
pub fn qk_norm(
    gpu: &Gpu,
    x: &mut dyn DevicePtrMut<f32>,
    w: &dyn DevicePtr<f32>,
    ntok: usize,
    nheads: usize,
    head_dim: usize,
    eps: f32,
    w_offset: f32,
) -> Result<(), CudaError> {
    rmsnorm_inplace(gpu, x, w, ntok * nheads, head_dim, eps, w_offset)
}

#[allow(clippy::too_many_arguments)]
fn norm_launch(
    gpu: &Gpu,
    op: &'static str,
    xp: u64,
    wp: u64,
    w_len: usize,
    yp: u64,
    rows: usize,
    dim: usize,
    eps: f32,
    w_offset: f32,
) -> Result<(), CudaError> {
    need(op, "weight", w_len, dim)?;
    if rows == 0 {
        return Ok(());
    }
    launch(
        gpu,
        "rmsnorm",
        cfg1(int(op, "rows", rows)? as u32, NORM_THREADS),
        &[
            Arg::Ptr(xp),
            Arg::Ptr(wp),
            Arg::Ptr(yp),
            Arg::I32(int(op, "dim", dim)?),
            Arg::F32(eps),
            Arg::F32(w_offset),
        ],
    )
}

/// Which dims RoPE pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeStyle {
    /// GPT-J / llama.cpp "normal": dims (2i, 2i+1).
    Normal,
    /// GPT-NeoX: dims (i, i + n_rot/2).
    Neox,
}

/// The RoPE frequency table of one rope op on the device: `inv[i] = base^(-2i/n_rot)` then
/// the frequency factors (1 when absent), as f64 (see `cpu::rope_table`).
pub struct RopeTable {
    pub n_rot: usize,
    pub freq_scale: f64,
    pub table: CudaSlice<f64>,
}

impl RopeTable {
    /// Upload the table for `n_rot` rotated dims (`n_rot` even).
    pub fn new(
        gpu: &Gpu,
        base: f32,
        n_rot: usize,
        freq_scale: f32,
        freq_factors: Option<&[f32]>,
    ) -> Result<RopeTable, CudaError> {
        let table = crate::cuda::cpu::rope_table(base, n_rot, freq_factors);
        Ok(RopeTable {
            n_rot,
            freq_scale: f64::from(freq_scale),
            table: gpu.upload(&table)?,
        })
    }
}

/// Rotate the first `table.n_rot` dims of each of `ntok x nheads` heads of `head_dim`
/// values in place; token t at position `pos[t]`.
#[allow(clippy::too_many_arguments)]
pub fn rope(
    gpu: &Gpu,
    x: &mut dyn DevicePtrMut<f32>,
    pos: &dyn DevicePtr<i32>,
    table: &RopeTable,
    ntok: usize,
    nheads: usize,
    head_dim: usize,
    style: RopeStyle,
) -> Result<(), CudaError> {
    const OP: &str = "rope";
    let n_rot = table.n_rot;
    if n_rot % 2 != 0 || n_rot > head_dim || n_rot == 0 {
        return Err(shape_err(
            OP,
            format!("n_rot = {n_rot} must be even and in 2..={head_dim}"),
        ));
    }
    need(OP, "x", x.len(), ntok * nheads * head_dim)?;
    need(OP, "pos", pos.len(), ntok)?;
    need(OP, "table", table.table.len(), n_rot)?;
    if ntok == 0 {
        return Ok(());
    }
    let (xp, pp, tp) = (wr(gpu, x), rd(gpu, pos), rd(gpu, &table.table));
    launch(
        gpu,
        "rope",
        cfg1(int(OP, "ntok", ntok)? as u32, 256),
        &[
            Arg::Ptr(xp),
            Arg::Ptr(pp),
            Arg::Ptr(tp),
            Arg::F64(table.freq_scale),
            Arg::I32(int(OP, "nheads", nheads)?),
            Arg::I32(int(OP, "head_dim", head_dim)?),
            Arg::I32(int(OP, "n_rot", n_rot)?),
            Arg::I32(i32::from(style == RopeStyle::Neox)),
        ],
    )
}

/// The gate activation of a gated MLP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// `g * sigmoid(g)` (llama, qwen).
    Silu,
    /// GeLU, tanh approximation (gemma).
    GeluTanh,
}

fn blocks_for(op: &'static str, n: usize) -> Result<u32, CudaError> {
    Ok(int(op, "n", n.div_ceil(256))? as u32)
}

/// `out[i] = act(gate[i]) * up[i]` for `n` values.
pub fn gated_act(
    gpu: &Gpu,
    gate: &dyn DevicePtr<f32>,
    up: &dyn DevicePtr<f32>,
    out: &mut dyn DevicePtrMut<f32>,
    n: usize,
    act: Activation,
) -> Result<(), CudaError> {
    const OP: &str = "gated_act";
    need(OP, "gate", gate.len(), n)?;
    need(OP, "up", up.len(), n)?;
    need(OP, "out", out.len(), n)?;
    if n == 0 {
        return Ok(());
    }
    let (gp, upp, op) = (rd(gpu, gate), rd(gpu, up), wr(gpu, out));
    let a = act_code(act);
    launch(
        gpu,
        "gated_act",
        cfg1(blocks_for(OP, n)?, 256),
        &[
            Arg::Ptr(gp),
            Arg::Ptr(upp),
            Arg::Ptr(op),
            Arg::I32(int(OP, "n", n)?),
            Arg::I32(a),
        ],
    )
}

/// [`gated_act`] writing over its gate (`into_gate`) or its up input: `x` is that input
/// and the output, `other` the remaining input.
pub fn gated_act_inplace(
    gpu: &Gpu,
    x: &mut dyn DevicePtrMut<f32>,
    other: &dyn DevicePtr<f32>,
    into_gate: bool,
    n: usize,
    act: Activation,
) -> Result<(), CudaError> {
    const OP: &str = "gated_act_inplace";
    need(OP, "x", x.len(), n)?;
    need(OP, "other", other.len(), n)?;
    if n == 0 {
        return Ok(());
    }
    let (xp, op) = (wr(gpu, x), rd(gpu, other));
    let (gp, upp) = if into_gate { (xp, op) } else { (op, xp) };
    launch(
        gpu,
        "gated_act",
        cfg1(blocks_for(OP, n)?, 256),
        &[
            Arg::Ptr(gp),
            Arg::Ptr(upp),
            Arg::Ptr(xp),
            Arg::I32(int(OP, "n", n)?),
            Arg::I32(act_code(act)),
        ],
    )
}

pub(crate) fn act_code(act: Activation) -> i32 {
    match act {
        Activation::Silu => 0,
        Activation::GeluTanh => 1,
    }
}

/// `out[i] = a[i] + b[i]` for `n` values.
pub fn add(
    gpu: &Gpu,
    a: &dyn DevicePtr<f32>,
    b: &dyn DevicePtr<f32>,
    out: &mut dyn DevicePtrMut<f32>,
    n: usize,
) -> Result<(), CudaError> {
    const OP: &str = "add";
    need(OP, "a", a.len(), n)?;
    need(OP, "b", b.len(), n)?;
    need(OP, "out", out.len(), n)?;
    if n == 0 {
        return Ok(());
    }
    let (ap, bp, op) = (rd(gpu, a), rd(gpu, b), wr(gpu, out));
    launch(
        gpu,
        "add",
        cfg1(blocks_for(OP, n)?, 256),
        &[
            Arg::Ptr(ap),
            Arg::Ptr(bp),
            Arg::Ptr(op),
            Arg::I32(int(OP, "n", n)?),
        ],
    )
}

/// `y[i] = cap * tanh(y[i] / cap)` for `n` values.
pub fn softcap_inplace(
    gpu: &Gpu,
    y: &mut dyn DevicePtrMut<f32>,
    cap: f32,
    n: usize,
) -> Result<(), CudaError> {
    const OP: &str = "softcap_inplace";
    need(OP, "y", y.len(), n)?;
    if n == 0 {
        return Ok(());
    }
    let yp = wr(gpu, y);
    launch(
        gpu,
        "softcap_inplace",
        cfg1(blocks_for(OP, n)?, 256),
        &[Arg::Ptr(yp), Arg::F32(cap), Arg::I32(int(OP, "n", n)?)],
    )
}

/// `y[i] += x[i]` for `n` values (residual add).
pub fn add_inplace(
    gpu: &Gpu,
    y: &mut dyn DevicePtrMut<f32>,
    x: &dyn DevicePtr<f32>,
    n: usize,
) -> Result<(), CudaError> {
    const OP: &str = "add_inplace";
    need(OP, "y", y.len(), n)?;
    need(OP, "x", x.len(), n)?;
    if n == 0 {
        return Ok(());
    }
    let (yp, xp) = (wr(gpu, y), rd(gpu, x));
    launch(
        gpu,
        "add",
        cfg1(blocks_for(OP, n)?, 256),
        &[
            Arg::Ptr(yp),
            Arg::Ptr(xp),
            Arg::Ptr(yp),
            Arg::I32(int(OP, "n", n)?),
        ],
    )
}

/// `y[i] *= s` for `n` values.
pub fn scale_inplace(
    gpu: &Gpu,
    y: &mut dyn DevicePtrMut<f32>,
    s: f32,
    n: usize,
) -> Result<(), CudaError> {
    const OP: &str = "scale_inplace";
    need(OP, "y", y.len(), n)?;
    if n == 0 {
        return Ok(());
    }
    let yp = wr(gpu, y);
    launch(
        gpu,
        "scale_inplace",
        cfg1(blocks_for(OP, n)?, 256),
        &[Arg::Ptr(yp), Arg::F32(s), Arg::I32(int(OP, "n", n)?)],
    )
}

/// `out[r]` = index of the largest value of row r of x (`rows x n`); ties to the smallest
/// index, NaN never chosen.
pub fn argmax(
    gpu: &Gpu,
    x: &dyn DevicePtr<f32>,
    rows: usize,
    n: usize,
    out: &mut dyn DevicePtrMut<i32>,
) -> Result<(), CudaError> {
    const OP: &str = "argmax";
    need(OP, "x", x.len(), rows * n)?;
    need(OP, "out", out.len(), rows)?;
    if rows == 0 {
        return Ok(());
    }
    let (xp, op) = (rd(gpu, x), wr(gpu, out));
    launch(
        gpu,
        "argmax_rows",
        cfg1(int(OP, "rows", rows)? as u32, 1024),
        &[Arg::Ptr(xp), Arg::I32(int(OP, "n", n)?), Arg::Ptr(op)],
    )
}
