//! The CUDA engine as a bench arm: greedy decode with the captured one-token graph (the
//! decode path as shipped), warm-up discarded, and the device bandwidth measured in the
//! same run by a large device-to-device copy.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use engine::cuda::{CudaConfig, CudaDecoder, Gpu};
use engine::model_file::GgufModel;

use super::arms::ArmRun;
use super::cells::{Cell, Mode};
use super::runner::{Measured, SameTokens, prompt};

/// Open the GPU (kernels compiled or loaded from `cubin_cache`).
pub fn open_gpu(cubin_cache: Option<std::path::PathBuf>) -> Result<Arc<Gpu>> {
    let cfg = CudaConfig {
        cubin_cache_dir: cubin_cache,
        ..CudaConfig::default()
    };
    Ok(Arc::new(Gpu::open(&cfg).context("opening the GPU")?))
}

/// Device bandwidth: best of `reps` device-to-device copies of `bytes`, read + write
/// counted.
pub fn d2d_bandwidth(gpu: &Gpu, bytes: usize, reps: usize) -> Result<(f64, String)> {
    let src = gpu
        .zeros::<u8>(bytes)
        .context("allocating the copy source")?;
    let mut dst = gpu
        .zeros::<u8>(bytes)
        .context("allocating the copy destination")?;
    let mut best = f64::INFINITY;
    // One untimed copy first (first-touch, clocks up).
    for i in 0..=reps.max(1) {
        gpu.synchronize()?;
        let t = Instant::now();
        gpu.stream()
            .memcpy_dtod(&src, &mut dst)
            .context("device copy")?;
        gpu.synchronize()?;
        if i > 0 {
            best = best.min(t.elapsed().as_secs_f64());
        }
    }
    Ok((
        2.0 * bytes as f64 / best.max(1e-12),
        format!(
            "device-to-device copy {} MiB, best of {}, read+write counted",
            bytes >> 20,
            reps.max(1)
        ),
    ))
}

/// The CUDA decoder ready to time `cell`: each run prefills the prompt eagerly, then
/// makes `gen_tokens` graphed greedy steps; every run must generate the same tokens.
pub struct GpuArm {
    dec: CudaDecoder,
    cell: Cell,
    prompt: Vec<u32>,
    capacity: usize,
    same: SameTokens,
}

impl GpuArm {
    pub fn new(gpu: &Arc<Gpu>, path: &Path, cell: &Cell) -> Result<GpuArm> {
        if cell.batch != 1 {
            bail!("cell {}: the CUDA decoder runs batch 1 only", cell.id);
        }
        let model = GgufModel::open(path).with_context(|| format!("opening {}", path.display()))?;
        let program =
            engine::arch::build_program(model.header()).context("building the program")?;
        let vocab = program.shape.n_vocab;
        let capacity = cell.prompt_tokens + cell.gen_tokens + 8;
        let mut dec = CudaDecoder::new(Arc::clone(gpu), &model, program, capacity)
            .context("uploading the weights")?;
        dec.capture_step().context("capturing the step graph")?;
        Ok(GpuArm {
            dec,
            cell: cell.clone(),
            prompt: prompt(cell.prompt_tokens, vocab),
            capacity,
            same: SameTokens::default(),
        })
    }

    fn once(&mut self) -> Result<f64> {
        let cell = &self.cell;
        self.dec.reset();
        let t = Instant::now();
        self.dec.forward(&self.prompt).context("prefill")?;
        let mut tok = self.dec.argmax().context("argmax")?;
        let prefill_s = t.elapsed().as_secs_f64();
        let mut out = vec![tok];
        let t = Instant::now();
        for _ in 0..cell.gen_tokens {
            tok = self.dec.step_graphed(tok).context("graphed step")?;
            out.push(tok);
        }
        let decode_s = t.elapsed().as_secs_f64();
        self.same.check(&cell.id, out)?;
        Ok(match cell.mode {
            Mode::Decode => cell.gen_tokens as f64 / decode_s.max(1e-9),
            Mode::Prefill => cell.prompt_tokens as f64 / prefill_s.max(1e-9),
            Mode::Serve => bail!("cell {}: serve cells run through assay serve", cell.id),
        })
    }

    /// How the samples were made, with `samples` (warm-up excluded).
    pub fn measured(&self, samples: Vec<f64>) -> Measured {
        let mut kernels: Vec<String> = self
            .dec
            .kernel_choices()
            .into_iter()
            .map(|(_, k)| k)
            .collect();
        kernels.sort();
        kernels.dedup();
        Measured {
            samples,
            version: env!("CARGO_PKG_VERSION").into(),
            engine: "assay-cuda".into(),
            flags: vec![
                "graph=step".into(),
                "kv=f16".into(),
                format!("warmup={}", self.cell.warmup),
                format!("capacity={}", self.capacity),
            ],
            detail: vec![
                self.same.detail(),
                format!("matvec kernels: {}", kernels.join(", ")),
                format!(
                    "weights on device: {:.3} GB",
                    self.dec.weight_bytes() as f64 / 1e9
                ),
            ],
            kv_bytes: 2.0,
        }
    }
}

impl ArmRun for GpuArm {
    fn run(&mut self, n: usize) -> Result<Vec<f64>> {
        (0..n).map(|_| self.once()).collect()
    }
}
