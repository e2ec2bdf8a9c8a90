//! Wrapper of `sample.cu`: the sampler chain of [`crate::sampling`] on the device.
//!
//! Owns [`SampleBuffers`] (the scratch row, the state words the kernel reads — the draw,
//! the configuration and the penalty window — and the 2-word output) and [`sample`], which
//! queues the kernel. Everything the kernel reads per step lives in device memory and is
//! written by one host-to-device copy ([`SampleBuffers::write_state`]), so a captured CUDA
//! graph can replay a sampled step: the host rewrites the state, launches, and reads 4
//! bytes back ([`SampleBuffers::read_token`]). A step whose top-p / min-p survivors exceed
//! [`SAMPLE_CAP`] candidates reports [`Sampled::Fallback`]; the caller then runs
//! [`crate::sampling::pick`] on the downloaded logits with the same draw and window.

use super::{Arg, cfg1, int, launch, need, rd, wr};
use crate::cuda::sources::consts::SAMPLE_THREADS;
use crate::cuda::{CudaError, Gpu, shape_err};
use crate::sampling::SamplerConfig;
use cudarc::driver::{CudaSlice, DevicePtr};

pub use crate::cuda::sources::consts::SAMPLE_CAP;

/// Words of the state before the window (see `kernels/sample.cu`).
const HEADER: usize = 16;

/// What one launch of the sampling kernel decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sampled {
    /// The token.
    Token(u32),
    /// The survivors of top-p / min-p did not fit in [`SAMPLE_CAP`] candidates: sample
    /// this step from the logits on the host with the same draw.
    Fallback,
}

/// Device buffers of the sampling kernel for rows of `n` logits and penalty windows of up
/// to `window_cap` tokens. Allocated once; their addresses never change.
pub struct SampleBuffers {
    n: usize,
    window_cap: usize,
    scratch: CudaSlice<f32>,
    state: CudaSlice<i32>,
    out: CudaSlice<i32>,
    host: Vec<i32>,
}

impl SampleBuffers {
    /// Buffers for a vocabulary of `n` and windows of up to `window_cap` tokens.
    pub fn new(gpu: &Gpu, n: usize, window_cap: usize) -> Result<SampleBuffers, CudaError> {
        int("sample", "n", n)?;
        int("sample", "window", window_cap)?;
        Ok(SampleBuffers {
            n,
            window_cap,
            scratch: gpu.zeros(n.max(1))?,
            state: gpu.zeros(HEADER + window_cap)?,
            out: gpu.zeros(2)?,
            host: vec![0; HEADER + window_cap],
        })
    }

    /// Vocabulary size the buffers were made for.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Largest penalty window the buffers hold.
    pub fn window_cap(&self) -> usize {
        self.window_cap
    }

    /// Write the draw `u`, the configuration and the penalty `window` (oldest first) into
    /// the device state: one host-to-device copy, queued on the stream.
    pub fn write_state(
        &mut self,
        gpu: &Gpu,
        cfg: &SamplerConfig,
        window: &[u32],
        u: f64,
    ) -> Result<(), CudaError> {
        if window.len() > self.window_cap {
            return Err(shape_err(
                "sample",
                format!(
                    "penalty window of {} tokens, buffers hold {}",
                    window.len(),
                    self.window_cap
                ),
            ));
        }
        let bits = u.to_bits();
        let h = &mut self.host;
        h.fill(0);
        h[0] = bits as u32 as i32;
        h[1] = (bits >> 32) as u32 as i32;
        h[2] = window.len() as i32;
        h[3] = i32::try_from(cfg.top_k).unwrap_or(i32::MAX);
        h[4] = cfg.temperature.to_bits() as i32;
        h[5] = cfg.top_p.to_bits() as i32;
        h[6] = cfg.min_p.to_bits() as i32;
        h[7] = cfg.repeat_penalty.to_bits() as i32;
        h[8] = cfg.presence_penalty.to_bits() as i32;
        h[9] = cfg.frequency_penalty.to_bits() as i32;
        for (d, &t) in h[HEADER..].iter_mut().zip(window) {
            *d = t as i32;
        }
        gpu.write(&self.host, &mut self.state)
    }

    /// Fill both output words with `value` (kernel-check poisons them before a launch).
    pub fn poison_out(&mut self, gpu: &Gpu, value: i32) -> Result<(), CudaError> {
        gpu.write(&[value, value], &mut self.out)
    }

    /// Download the decision of the last launch (4 bytes; waits for the stream).
    pub fn read_token(&self, gpu: &Gpu) -> Result<Sampled, CudaError> {
        let v = gpu.download(&self.out.slice(0..1))?;
        Ok(match v.first().copied() {
            Some(t) if t >= 0 => Sampled::Token(t as u32),
            _ => Sampled::Fallback,
        })
    }

    /// Download both output words: the token (or -1) and the survivors sampled from.
    pub fn read_out(&self, gpu: &Gpu) -> Result<[i32; 2], CudaError> {
        let v = gpu.download(&self.out)?;
        Ok([
            v.first().copied().unwrap_or(-1),
            v.get(1).copied().unwrap_or(0),
        ])
    }
}

/// Queue the sampling kernel on the row `logits[0..n)` with the state last written into
/// `bufs` (the logits are not modified).
pub fn sample(
    gpu: &Gpu,
    logits: &dyn DevicePtr<f32>,
    bufs: &mut SampleBuffers,
) -> Result<(), CudaError> {
    const OP: &str = "sample";
    let n = bufs.n;
    need(OP, "logits", logits.len(), n)?;
    if n == 0 {
        return Err(shape_err(OP, "empty vocabulary"));
    }
    let lp = rd(gpu, logits);
    let sp = rd(gpu, &bufs.state);
    let scratch = wr(gpu, &mut bufs.scratch);
    let op = wr(gpu, &mut bufs.out);
    launch(
        gpu,
        "sample_row",
        cfg1(1, SAMPLE_THREADS),
        &[
            Arg::Ptr(lp),
            Arg::I32(int(OP, "n", n)?),
            Arg::Ptr(sp),
            Arg::Ptr(scratch),
            Arg::Ptr(op),
        ],
    )
}
