//! CUDA backend: device context, the NVRTC kernel pipeline, one launch wrapper per kernel
//! family, and a CPU reference twin of every kernel.
//!
//! Owns:
//! - [`sources`]: the `kernels/*.cu` sources embedded with `include_str!`, their
//!   `#include` expansion and the *kernel identity* (sha256 over all sources) receipts record;
//! - [`nvrtc`]: compiling a family to a cubin for the present device through NVRTC, and the
//!   on-disk cubin cache keyed by sha256(source, options, arch, driver, NVRTC version);
//! - [`device`]: [`Gpu`] — probing for a driver (a machine without one gets
//!   [`CudaError::NoDriver`], never a panic), the context and stream, loading every kernel;
//! - [`select`]: kernel choice as pure functions of (op, shape, format, device);
//! - [`ops`]: the launch wrappers (matvec, embedding, RMSNorm / QK-norm, RoPE, attention,
//!   KV store, gated activation, residual add, scale, argmax, sampling), each checking shapes before
//!   a launch;
//! - [`cpu`]: the CPU reference of every kernel, which kernel-check compares against;
//! - [`decode`]: [`CudaDecoder`], the executor of an `arch::Program` for one sequence,
//!   eager or with its one-token step captured once as a CUDA graph and replayed; greedy
//!   (device argmax) or sampled (the sampler chain on the device, 4 bytes back per token).
//!
//! Weights keep GGUF's block layout as stored (no repacking yet; rows start 16-byte
//! aligned). Activations are f32, the KV cache f16. `unsafe` lives only in this module,
//! each block with a `// SAFETY:` note.

pub mod cpu;
pub mod decode;
pub mod device;
pub mod nvrtc;
pub mod ops;
pub mod select;
pub mod sources;

pub use cudarc;
pub use decode::{CudaDecoder, DEFAULT_PREFILL, PrefillMode};
pub use device::{CudaConfig, DeviceInfo, Gpu, driver_present};
pub use ops::DeviceWeight;
pub use sources::kernel_identity;

use crate::quant::QuantFormat;

/// Errors of the CUDA backend.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// No CUDA driver library on this machine; callers fall back to the CPU backend.
    #[error("no CUDA driver found; using the CPU backend")]
    NoDriver,
    /// The driver is present but NVRTC (libnvrtc) could not be loaded.
    #[error(
        "NVRTC (libnvrtc.so.13) not found: put the CUDA toolkit's lib directory (e.g. /usr/local/cuda/targets/x86_64-linux/lib) on LD_LIBRARY_PATH"
    )]
    NoNvrtc,
    /// A CUDA driver call failed.
    #[error("CUDA driver: {0}")]
    Driver(#[from] cudarc::driver::DriverError),
    /// NVRTC failed to compile a kernel family; `log` is the compiler's output.
    #[error("NVRTC failed to compile {file} for {arch}: {code}\n{log}")]
    Compile {
        file: String,
        arch: String,
        code: String,
        log: String,
    },
    /// A kernel source includes a file that is not embedded.
    #[error("{file}: #include \"{include}\" names no embedded kernel source")]
    MissingInclude { file: String, include: String },
    /// The cubin cache directory could not be read or written.
    #[error("cubin cache {path}: {source}")]
    Cache {
        path: String,
        source: std::io::Error,
    },
    /// A kernel compilation thread ended without a result (it panicked).
    #[error("a kernel compilation thread failed")]
    CompileThread,
    /// A compiled module lacks an entry point the wrappers need.
    #[error("kernel entry point {0} not found in the loaded modules")]
    MissingKernel(String),
    /// Buffer sizes or shapes passed to a wrapper do not fit the kernel's contract.
    #[error("{op}: {detail}")]
    Shape { op: &'static str, detail: String },
    /// No kernel exists for this format.
    #[error("no CUDA {op} kernel for format {format}")]
    UnsupportedFormat {
        op: &'static str,
        format: QuantFormat,
    },
}

/// Shorthand for a shape error.
pub(crate) fn shape_err(op: &'static str, detail: impl Into<String>) -> CudaError {
    CudaError::Shape {
        op,
        detail: detail.into(),
    }
}
