//! Launch wrappers, one per kernel family (candle-style: check shapes, pick the kernel,
//! push the arguments, launch on the GPU's stream).
//!
//! Owns: [`DeviceWeight`] (a weight matrix uploaded in its GGUF block layout) and the
//! shared launch plumbing. Buffers are passed as `cudarc` device pointers (`CudaSlice` or
//! views), so callers can hand in sub-ranges of larger buffers; every wrapper checks that
//! each buffer is long enough for the launch before queueing it, which is what keeps the
//! kernels' raw indexing in bounds.

mod attention;
mod linear;
mod pointwise;
mod sample;

pub use attention::{AttnScratch, AttnShape, attention, kv_store};
pub use linear::{embed, matvec};
pub use pointwise::{
    Activation, RopeStyle, RopeTable, add, add_inplace, argmax, gated_act, gated_act_inplace,
    qk_norm, rmsnorm, rmsnorm_inplace, rope, scale_inplace, softcap_inplace,
};
pub use sample::{SAMPLE_CAP, SampleBuffers, Sampled, sample};

use super::{CudaError, Gpu, shape_err};
use crate::quant::QuantFormat;
use cudarc::driver::{CudaSlice, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg};

/// A weight matrix on the device: `rows` rows of `cols` values in `format`'s block layout,
/// exactly as stored in the model file.
pub struct DeviceWeight {
    pub format: QuantFormat,
    pub rows: usize,
    pub cols: usize,
    pub row_bytes: usize,
    pub data: CudaSlice<u8>,
}

impl DeviceWeight {
    /// Upload `bytes` (rows of `format.bytes_for(cols)` bytes each).
    pub fn upload(
        gpu: &Gpu,
        format: QuantFormat,
        rows: usize,
        cols: usize,
        bytes: &[u8],
    ) -> Result<DeviceWeight, CudaError> {
        let row_bytes = format
            .bytes_for(cols)
            .map_err(|e| shape_err("upload weight", e.to_string()))?;
        if rows.checked_mul(row_bytes) != Some(bytes.len()) {
            return Err(shape_err(
                "upload weight",
                format!(
                    "{rows} rows of {row_bytes} bytes, got {} bytes",
                    bytes.len()
                ),
            ));
        }
        Ok(DeviceWeight {
            format,
            rows,
            cols,
            row_bytes,
            data: gpu.upload(bytes)?,
        })
    }
}

/// Check that a buffer holds at least `need` elements.
pub(crate) fn need(
    op: &'static str,
    what: &str,
    have: usize,
    need: usize,
) -> Result<(), CudaError> {
    if have < need {
        return Err(shape_err(
            op,
            format!("{what} holds {have} values, the launch needs {need}"),
        ));
    }
    Ok(())
}

/// Check a device address is aligned to `align` bytes.
pub(crate) fn aligned(op: &'static str, what: &str, ptr: u64, align: u64) -> Result<(), CudaError> {
    if ptr % align != 0 {
        return Err(shape_err(
            op,
            format!("{what} must start {align}-byte aligned"),
        ));
    }
    Ok(())
}

/// Convert a size to the kernels' `int`.
pub(crate) fn int(op: &'static str, what: &str, v: usize) -> Result<i32, CudaError> {
    i32::try_from(v)
        .map_err(|_| shape_err(op, format!("{what} = {v} exceeds the kernel's int range")))
}

/// One kernel argument: a device address or a scalar.
#[derive(Clone, Copy)]
pub(crate) enum Arg {
    Ptr(u64),
    I32(i32),
    U64(u64),
    F32(f32),
    F64(f64),
}

/// Launch `name` with `args` (in the kernel's parameter order) on the GPU's stream.
pub(crate) fn launch(
    gpu: &Gpu,
    name: &str,
    cfg: LaunchConfig,
    args: &[Arg],
) -> Result<(), CudaError> {
    let f = gpu.function(name)?;
    let stream = gpu.stream();
    let mut b = stream.launch_builder(f);
    for a in args {
        match a {
            Arg::Ptr(p) | Arg::U64(p) => b.arg(p),
            Arg::I32(v) => b.arg(v),
            Arg::F32(v) => b.arg(v),
            Arg::F64(v) => b.arg(v),
        };
    }
    // SAFETY: every wrapper checks, before calling here, that each buffer is long enough for
    // the grid it launches and that each scalar matches the kernel's parameter list in order
    // and type (u64 addresses, int, float, double); the addresses come from live cudarc buffers whose
    // borrows the caller holds until this call returns and the work is queued on the one
    // stream they are used on.
    unsafe { b.launch(cfg) }?;
    Ok(())
}

/// Device address of a read-only buffer.
pub(crate) fn rd<T>(gpu: &Gpu, b: &dyn DevicePtr<T>) -> u64 {
    let (p, _sync) = b.device_ptr(gpu.stream());
    p
}

/// Device address of a written buffer.
pub(crate) fn wr<T>(gpu: &Gpu, b: &mut dyn DevicePtrMut<T>) -> u64 {
    let (p, _sync) = b.device_ptr_mut(gpu.stream());
    p
}

/// A 1-D launch of `blocks` blocks of `threads` threads.
pub(crate) fn cfg1(blocks: u32, threads: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: 0,
    }
}
