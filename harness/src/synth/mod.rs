//! `harness synth`: a synthetic checkpoint with a real model's exact shapes, deterministic
//! weights from a seed at realistic scales, quantized with our own quantizers (rows in
//! parallel), carrying a real tokenizer copied from a test model, written as GGUF with the
//! streaming writer (and, for BF16, also as safetensors + config.json).
//!
//! Files: [`shapes`] (the table), [`tensors`] (inventory, mix, scales), [`weights`]
//! (per-row random streams), [`metadata`] (hyper-parameters + donor tokenizer), [`hf`]
//! (safetensors side), [`donor`] (`harness synth-donor`: a tokenizer donor without tensors).

pub mod donor;
pub mod hf;
pub mod metadata;
pub mod shapes;
pub mod tensors;
pub mod weights;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use engine::model_file::GgufModel;
use engine::model_file::gguf_write::{GgufWriter, TensorSpec};
use engine::quant::{QuantFormat, quantize};
use indicatif::ProgressBar;
use rayon::prelude::*;

use crate::env::EnvArgs;
use crate::progress;
use shapes::{Arch, Shape};
use tensors::{Mix, Planned};

#[derive(clap::Args, Debug)]
pub struct SynthArgs {
    #[arg(long, value_enum)]
    pub arch: Arch,
    /// A shape of the table (`llama-3.1-8b`, `qwen2.5-7b`, `qwen3-8b`, `gemma-3-12b`, `tiny`).
    #[arg(long)]
    pub shape: String,
    /// Quant format (`Q4_0`, `Q8_0`, `BF16`, ...) or mix (`Q4_K_M`).
    #[arg(long)]
    pub quant: String,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Output GGUF path; a BF16 checkpoint also gets `<stem>.hf/` (safetensors + config).
    #[arg(long)]
    pub out: PathBuf,
    /// Tokenizer donor GGUF (default: the catalog test model of the architecture).
    #[arg(long)]
    pub donor: Option<PathBuf>,
    /// Skip the safetensors copy of a BF16 checkpoint.
    #[arg(long)]
    pub no_safetensors: bool,
}

/// Everything that decides the output.
#[derive(Clone, Debug)]
pub struct SynthSpec {
    pub arch: Arch,
    pub shape: Shape,
    pub mix: Mix,
    pub seed: u64,
    pub out: PathBuf,
    pub donor: PathBuf,
    pub safetensors: bool,
}

/// What was written.
#[derive(Clone, Debug)]
pub struct SynthSummary {
    pub gguf: PathBuf,
    pub gguf_bytes: u64,
    pub hf_dir: Option<PathBuf>,
    pub tensors: usize,
    pub params: u64,
    pub census: BTreeMap<QuantFormat, (usize, u64)>,
    pub seconds: f64,
}

/// The folder of the safetensors copy of `out`.
pub fn hf_dir_for(out: &Path) -> PathBuf {
    let stem = out
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "synthetic".into());
    out.with_file_name(format!("{stem}.hf"))
}

/// Rows per batch: about 16 M values, whole heads (a multiple of 256 rows) when possible.
fn batch_rows(t: &Planned) -> usize {
    let rows = t.rows();
    let want = ((1usize << 24) / t.row_len()).max(1);
    if rows <= 256 || want < 256 {
        return rows.min(want.max(256));
    }
    (want / 256 * 256).min(rows)
}

struct HfOut {
    dir: PathBuf,
    writer: hf::SafetensorsWriter<BufWriter<File>>,
}

/// One batch of output bytes: GGUF data, and the safetensors data when there is a twin.
type Chunk = (Vec<u8>, Option<Vec<u8>>);

/// Generate one tensor in batches and hand each batch's bytes to the writer thread.
fn write_tensor(
    spec: &SynthSpec,
    t: &Planned,
    format: QuantFormat,
    twin: bool,
    out: &std::sync::mpsc::SyncSender<Chunk>,
    pb: &ProgressBar,
) -> Result<()> {
    let (mean, std) = tensors::scale(t);
    let tseed = weights::tensor_seed(spec.seed, &t.name);
    let (rows, k) = (t.rows(), t.row_len());
    let row_bytes = format.bytes_for(k).context("row size")?;
    let batch = batch_rows(t);
    let mut vals = vec![0f32; batch * k];
    let mut first = 0;
    while first < rows {
        let n = batch.min(rows - first);
        let v = &mut vals[..n * k];
        weights::fill_rows(tseed, first, k, mean, std, v);
        let mut qb = vec![0u8; n * row_bytes];
        qb.par_chunks_mut(row_bytes)
            .zip(v.par_chunks(k))
            .try_for_each(|(out, row)| quantize(format, row, out))
            .with_context(|| format!("quantizing {} to {format}", t.name))?;
        let hf_bytes = if twin {
            let mut bf = if format == QuantFormat::BF16 {
                qb.clone()
            } else {
                let mut x = v.to_vec();
                if hf::minus_one(spec.arch, &t.name) {
                    x.iter_mut().for_each(|e| *e -= 1.0);
                }
                engine::quant::quantize_to_vec(QuantFormat::BF16, &x)?
            };
            if hf::needs_unpermute(spec.arch, &t.name) {
                bf = hf::unpermute_heads(&bf, k * 2, spec.shape.head_dim);
            }
            Some(bf)
        } else {
            None
        };
        if out.send((qb, hf_bytes)).is_err() {
            bail!("the writer stopped (see its error)");
        }
        pb.inc((n * k) as u64);
        first += n;
    }
    Ok(())
}

/// The writer thread: every chunk in order to the GGUF (and safetensors) files, then
/// finish both.
fn write_all(
    rx: std::sync::mpsc::Receiver<Chunk>,
    mut gguf: GgufWriter<BufWriter<File>>,
    mut hf_out: Option<HfOut>,
) -> Result<Option<HfOut>> {
    for (g, h) in rx {
        gguf.write_data(&g).context("writing GGUF data")?;
        if let (Some(out), Some(bytes)) = (hf_out.as_mut(), h) {
            out.writer.write(&bytes)?;
        }
    }
    gguf.finish().context("finishing the GGUF file")?;
    Ok(hf_out)
}

/// Write the checkpoint `spec` describes.
pub fn generate(spec: &SynthSpec, pb: &ProgressBar) -> Result<SynthSummary> {
    let t0 = Instant::now();
    let donor = GgufModel::open(&spec.donor)
        .with_context(|| format!("opening the tokenizer donor {}", spec.donor.display()))?;
    let donor_vocab = metadata::donor_vocab(donor.header())?;
    let vocab = spec.shape.vocab.unwrap_or(donor_vocab);
    let inv = tensors::inventory(spec.arch, &spec.shape, vocab);
    let formats: Vec<QuantFormat> = inv
        .iter()
        .map(|t| spec.mix.format_for(t, spec.shape.n_layers))
        .collect();
    let specs: Vec<TensorSpec> = inv
        .iter()
        .zip(&formats)
        .map(|(t, f)| TensorSpec::new(t.name.clone(), &t.dims, *f))
        .collect();
    let meta = metadata::metadata(
        spec.arch,
        &spec.shape,
        spec.mix,
        spec.seed,
        donor.header(),
        vocab,
    )?;
    if let Some(dir) = spec.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let file =
        File::create(&spec.out).with_context(|| format!("creating {}", spec.out.display()))?;
    let gguf = GgufWriter::new(BufWriter::with_capacity(8 << 20, file), &meta, &specs)
        .context("laying out the GGUF header")?;
    let bf16 = spec.mix == Mix::Plain(QuantFormat::BF16);
    let hf_out = if bf16 && spec.safetensors {
        let dir = hf_dir_for(&spec.out);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let f =
            File::create(dir.join("model.safetensors")).context("creating model.safetensors")?;
        let writer = hf::SafetensorsWriter::new(
            BufWriter::with_capacity(8 << 20, f),
            &hf::hf_tensors(spec.arch, &inv)?,
        )?;
        Some(HfOut { dir, writer })
    } else {
        None
    };
    let params: u64 = inv.iter().map(|t| t.elems() as u64).sum();
    pb.set_length(params);
    let mut census: BTreeMap<QuantFormat, (usize, u64)> = BTreeMap::new();
    for (t, f) in inv.iter().zip(&formats) {
        let e = census.entry(*f).or_default();
        e.0 += 1;
        e.1 += f.bytes_for(t.elems())? as u64;
    }
    // Generation (rayon) overlaps with writing (one thread, two batches in flight).
    let twin = hf_out.is_some();
    let (tx, rx) = std::sync::mpsc::sync_channel::<Chunk>(2);
    let (made, written) = std::thread::scope(|scope| {
        let writer = scope.spawn(move || write_all(rx, gguf, hf_out));
        let made = inv
            .iter()
            .zip(&formats)
            .try_for_each(|(t, f)| write_tensor(spec, t, *f, twin, &tx, pb));
        drop(tx);
        let written = writer
            .join()
            .unwrap_or_else(|_| Err(anyhow::anyhow!("the writer thread panicked")));
        (made, written)
    });
    let hf_out = written?;
    made?;
    let hf_dir = match hf_out {
        Some(h) => {
            h.writer.finish()?;
            let id = |k: &str| donor.header().get(k).and_then(|v| v.as_u64());
            let cfg = hf::config_json(
                spec.arch,
                &spec.shape,
                vocab,
                id("tokenizer.ggml.bos_token_id"),
                id("tokenizer.ggml.eos_token_id"),
            );
            std::fs::write(
                h.dir.join("config.json"),
                serde_json::to_string_pretty(&cfg)? + "\n",
            )
            .context("writing config.json")?;
            Some(h.dir)
        }
        None => None,
    };
    pb.finish_and_clear();
    Ok(SynthSummary {
        gguf: spec.out.clone(),
        gguf_bytes: std::fs::metadata(&spec.out)?.len(),
        hf_dir,
        tensors: inv.len(),
        params,
        census,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// The donor model of `arch` in the models folder.
pub fn default_donor(env: &EnvArgs, arch: Arch) -> Result<PathBuf> {
    let dir = env.models_dir()?;
    engine::catalog::resolve(arch.tokenizer_donor(), &dir)
        .with_context(|| format!("the {arch} tokenizer donor {}", arch.tokenizer_donor()))
}

pub fn run(env: &EnvArgs, args: &SynthArgs) -> Result<bool> {
    let shape = shapes::find(&args.shape, args.arch).map_err(anyhow::Error::msg)?;
    let Some(mix) = Mix::parse(&args.quant) else {
        bail!(
            "unknown quant {:?}: one of {} or Q3_K_M/Q4_K_M/Q5_K_M",
            args.quant,
            QuantFormat::ALL.map(|f| f.name()).join(", ")
        );
    };
    let donor = match &args.donor {
        Some(d) => d.clone(),
        None => default_donor(env, args.arch)?,
    };
    let spec = SynthSpec {
        arch: args.arch,
        shape,
        mix,
        seed: args.seed,
        out: args.out.clone(),
        donor,
        safetensors: !args.no_safetensors,
    };
    let pb = progress::bar(0, &format!("synth {}", spec.shape.name), false);
    let s = generate(&spec, &pb)?;
    let census = s
        .census
        .iter()
        .map(|(f, (n, b))| format!("{f}: {n} tensors {:.2} GB", *b as f64 / 1e9))
        .collect::<Vec<_>>()
        .join(", ");
    println!(
        "wrote {} ({:.3} GB, {} tensors, {:.3} B params) in {:.1} s on {} threads",
        s.gguf.display(),
        s.gguf_bytes as f64 / 1e9,
        s.tensors,
        s.params as f64 / 1e9,
        s.seconds,
        rayon::current_num_threads()
    );
    println!("census: {census}");
    if let Some(d) = &s.hf_dir {
        println!("safetensors + config.json: {}", d.display());
    }
    Ok(true)
}

#[cfg(test)]
#[path = "synth_tests.rs"]
mod tests;
