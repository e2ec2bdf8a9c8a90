//! `harness requant`: a GGUF checkpoint with its matrices re-quantized to one format.
//!
//! Every tensor of two or more dimensions whose rows are a whole number of the target's
//! blocks is dequantized with our dequantizers and quantized again with our quantizers (rows
//! in parallel); vectors (norms, biases), tensors named with `--keep`, and matrices whose
//! rows do not fit the target's blocks are copied byte for byte. Metadata is copied, with
//! `general.file_type` set to the target and `assay.requant.*` keys naming the source.
//!
//! Issue 10 uses it to ask what a draft model's bits cost in acceptance: a draft need not
//! match anything, and only some formats take the fastest one-token GPU kernels.
//! `draft:requant:<FORMAT>:<model>` in a bench cell names such a copy of a catalog model
//! (made on first use in the models folder, reused while its source is unchanged).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use engine::model_file::GgufModel;
use engine::model_file::MetaValue;
use engine::model_file::gguf_write::{GgufWriter, TensorSpec};
use engine::quant::{QuantFormat, dequantize, quantize};
use rayon::prelude::*;

use crate::env::EnvArgs;
use crate::progress;
use crate::synth::tensors::Mix;

#[derive(clap::Args, Debug)]
pub struct RequantArgs {
    /// Input GGUF file, or a catalog model name.
    pub input: String,
    /// Target format of the matrices (`Q4_0`, `Q8_0`, `Q4_K`, `BF16`, ...).
    #[arg(long)]
    pub to: String,
    /// Output GGUF path (default: `<input stem>.requant-<FORMAT>.gguf` beside the input).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Copy this tensor unchanged (exact name, e.g. `token_embd.weight`); repeatable.
    #[arg(long)]
    pub keep: Vec<String>,
    /// Overwrite an existing output file.
    #[arg(long)]
    pub force: bool,
}

/// What one run did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Tensors re-quantized, and their bytes in the output.
    pub converted: usize,
    pub converted_bytes: u64,
    /// Tensors copied byte for byte (vectors, `--keep`, rows not a block multiple).
    pub copied: usize,
    /// Matrices left as they were because their rows are not a whole number of blocks.
    pub misfit: Vec<String>,
    pub out_bytes: u64,
}

/// Metadata keys recording the source of a re-quantized file.
const KEY_SOURCE: &str = "assay.requant.source";
const KEY_SOURCE_BYTES: &str = "assay.requant.source_bytes";
const KEY_FORMAT: &str = "assay.requant.format";

/// Parse a target format name; every format Assay reads has a quantizer.
pub fn target_format(name: &str) -> Result<QuantFormat> {
    QuantFormat::from_name(name).with_context(|| {
        let known: Vec<&str> = QuantFormat::ALL.iter().map(|f| f.name()).collect();
        format!(
            "unknown target format {name:?} (one of {})",
            known.join(", ")
        )
    })
}

/// Write `input` re-quantized to `to` at `out` (through a temporary file renamed at the end,
/// so an interrupted run leaves no half-written output).
pub fn requant_file(input: &Path, out: &Path, to: QuantFormat, keep: &[String]) -> Result<Summary> {
    let src = GgufModel::open(input).with_context(|| format!("reading {}", input.display()))?;
    let header = src.header();
    let (block, _) = to.block_geometry();
    let mut summary = Summary::default();
    let mut plan: Vec<(bool, TensorSpec)> = Vec::with_capacity(header.tensors.len());
    for t in &header.tensors {
        let matrix = t.dims.len() >= 2;
        // A header may hold a tensor of no dimensions: never index blindly.
        let row = t.dims.first().copied().unwrap_or(0) as usize;
        let fits = row > 0 && row % block == 0;
        let kept = keep.iter().any(|k| k == &t.name);
        let convert = matrix && fits && !kept && t.format != to;
        if matrix && !fits && !kept {
            summary.misfit.push(t.name.clone());
        }
        let format = if convert { to } else { t.format };
        plan.push((convert, TensorSpec::new(t.name.clone(), &t.dims, format)));
    }
    for k in keep {
        if header.tensor(k).is_none() {
            bail!(
                "--keep {k:?}: {} has no tensor of that name",
                input.display()
            );
        }
    }

    let mut meta: BTreeMap<String, MetaValue> = header.metadata.clone();
    meta.insert(
        "general.file_type".into(),
        MetaValue::U32(Mix::Plain(to).file_type()),
    );
    let src_name = input
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let src_bytes = std::fs::metadata(input)
        .with_context(|| format!("reading {}", input.display()))?
        .len();
    meta.insert(KEY_SOURCE.into(), MetaValue::String(src_name));
    meta.insert(KEY_SOURCE_BYTES.into(), MetaValue::U64(src_bytes));
    meta.insert(KEY_FORMAT.into(), MetaValue::String(to.name().into()));

    let tmp = tmp_path(out);
    let file = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let specs: Vec<TensorSpec> = plan.iter().map(|(_, s)| s.clone()).collect();
    let result = (|| -> Result<()> {
        let mut w = GgufWriter::new(BufWriter::with_capacity(8 << 20, file), &meta, &specs)?;
        let total: u64 = specs.iter().map(|s| s.byte_len().unwrap_or(0)).sum();
        let bar = progress::bar(total, &format!("requant {}", to.name()), true);
        for ((convert, spec), t) in plan.iter().zip(&header.tensors) {
            let bytes = src.tensor_bytes(t);
            if *convert {
                let data = convert_rows(
                    bytes,
                    t.format,
                    to,
                    t.dims.first().copied().unwrap_or(0) as usize,
                )
                .with_context(|| format!("tensor {}", t.name))?;
                w.write_tensor(&data)?;
                summary.converted += 1;
                summary.converted_bytes += data.len() as u64;
            } else {
                w.write_tensor(bytes)?;
                summary.copied += 1;
            }
            bar.inc(spec.byte_len()?);
        }
        bar.finish_and_clear();
        w.finish()?;
        Ok(())
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(e.context(format!("writing {}", out.display())));
    }
    std::fs::rename(&tmp, out)
        .with_context(|| format!("renaming {} to {}", tmp.display(), out.display()))?;
    summary.out_bytes = std::fs::metadata(out)?.len();
    Ok(summary)
}

/// Re-quantize whole rows of `row_len` values from `from` to `to`, rows in parallel; each
/// row is dequantized and quantized on its own, so the output does not depend on threads.
fn convert_rows(
    data: &[u8],
    from: QuantFormat,
    to: QuantFormat,
    row_len: usize,
) -> Result<Vec<u8>> {
    let in_row = from.bytes_for(row_len)?;
    let out_row = to.bytes_for(row_len)?;
    if in_row == 0 || data.len() % in_row != 0 {
        bail!("{} bytes are not whole rows of {in_row}", data.len());
    }
    let rows = data.len() / in_row;
    let mut out = vec![0u8; rows * out_row];
    out.par_chunks_mut(out_row)
        .zip(data.par_chunks(in_row))
        .try_for_each_init(
            || vec![0f32; row_len],
            |x, (o, i)| -> Result<()> {
                dequantize(from, i, x)?;
                quantize(to, x, o)?;
                Ok(())
            },
        )?;
    Ok(out)
}

fn tmp_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".tmp-{}", std::process::id()));
    out.with_file_name(name)
}

/// The default output path: `<stem>.requant-<FORMAT>.gguf` beside `input`.
pub fn default_out(input: &Path, to: QuantFormat) -> PathBuf {
    let stem = input
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = stem.strip_suffix(".gguf").unwrap_or(&stem).to_owned();
    input.with_file_name(format!("{stem}.requant-{}.gguf", to.name()))
}

/// Whether `out` is a re-quantized copy of `input` in `to` made from the same source file
/// (name and size); a copy from another source, or a foreign file, is not.
fn is_current(out: &Path, input: &Path, to: QuantFormat) -> bool {
    let Ok(m) = GgufModel::open(out) else {
        return false;
    };
    let h = m.header();
    let src_name = input.file_name().map(|n| n.to_string_lossy().into_owned());
    let src_bytes = std::fs::metadata(input).map(|m| m.len()).ok();
    matches!(h.get(KEY_SOURCE), Some(MetaValue::String(s)) if Some(s) == src_name.as_ref())
        && matches!(h.get(KEY_SOURCE_BYTES), Some(MetaValue::U64(b)) if Some(*b) == src_bytes)
        && matches!(h.get(KEY_FORMAT), Some(MetaValue::String(f)) if f == to.name())
}

/// `requant:<FORMAT>:<model>` (a bench cell's draft): the re-quantized copy of a catalog
/// model (or file) in the models folder, made now unless a current one is there.
pub fn resolve(spec: &str, models_dir: &Path) -> Result<PathBuf> {
    let Some((fmt, name)) = spec.split_once(':') else {
        bail!("requant:{spec}: want requant:<FORMAT>:<model>");
    };
    let to = target_format(fmt)?;
    let input = engine::catalog::resolve(name, models_dir)?;
    let file = default_out(&input, to);
    let out = models_dir.join(file.file_name().unwrap_or_default());
    if is_current(&out, &input, to) {
        return Ok(out);
    }
    let t0 = Instant::now();
    let s = requant_file(&input, &out, to, &[])?;
    eprintln!(
        "requant: {} -> {} ({} matrices to {}, {} tensors copied, {:.1} s)",
        input.display(),
        out.display(),
        s.converted,
        to.name(),
        s.copied,
        t0.elapsed().as_secs_f64()
    );
    Ok(out)
}

pub fn run(env: &EnvArgs, args: &RequantArgs) -> Result<bool> {
    let to = target_format(&args.to)?;
    let input = engine::catalog::resolve(&args.input, &env.models_dir()?)?;
    let out = args.out.clone().unwrap_or_else(|| default_out(&input, to));
    if out.exists() && !args.force {
        bail!("{} exists (pass --force to overwrite)", out.display());
    }
    if out.canonicalize().ok() == input.canonicalize().ok() && out.exists() {
        bail!("the output would overwrite the input {}", input.display());
    }
    let t0 = Instant::now();
    let s = requant_file(&input, &out, to, &args.keep)?;
    println!(
        "{}: {} matrices re-quantized to {} ({:.1} MB), {} tensors copied, {} bytes in all, {:.1} s",
        out.display(),
        s.converted,
        to.name(),
        s.converted_bytes as f64 / 1e6,
        s.copied,
        s.out_bytes,
        t0.elapsed().as_secs_f64()
    );
    if !s.misfit.is_empty() {
        println!(
            "left as they were (rows not a multiple of {} values): {}",
            to.block_geometry().0,
            s.misfit.join(", ")
        );
    }
    Ok(true)
}

#[cfg(test)]
#[path = "requant_tests.rs"]
mod tests;
