//! `harness synth-donor`: a tokenizer donor without tensors. [`super::generate`] reads only
//! a donor's metadata (its `tokenizer.*` keys and vocabulary), so a copy of the donor's
//! metadata with no tensor is a donor that writes the very same checkpoint, at a few MB
//! instead of the whole model: what a GPU window carries when the machine has no models
//! (tools/gpu/window/psynth looks for `<arch>-tokenizer.gguf`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use engine::model_file::GgufModel;
use engine::model_file::gguf_write::write_gguf;

use super::shapes::Arch;
use crate::env::EnvArgs;

#[derive(clap::Args, Debug)]
pub struct SynthDonorArgs {
    /// The architecture whose catalog test model donates (when --donor is not given).
    #[arg(long, value_enum)]
    pub arch: Arch,
    /// The donor GGUF (default: the catalog test model of the architecture).
    #[arg(long)]
    pub donor: Option<PathBuf>,
    /// Output GGUF: the donor's metadata, no tensors.
    #[arg(long)]
    pub out: PathBuf,
}

/// Write `donor`'s metadata with no tensor to `out` (through a temporary file renamed into
/// place); returns the bytes written.
pub fn write_tokenizer_donor(donor: &Path, out: &Path) -> Result<u64> {
    let m = GgufModel::open(donor)
        .with_context(|| format!("opening the tokenizer donor {}", donor.display()))?;
    super::metadata::donor_vocab(m.header())
        .with_context(|| format!("{} cannot donate a tokenizer", donor.display()))?;
    let meta: BTreeMap<_, _> = m.header().metadata.clone();
    let tmp = out.with_extension("gguf.part");
    let f = std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let w = write_gguf(std::io::BufWriter::new(f), &meta, &[])
        .with_context(|| format!("writing {}", tmp.display()))?;
    drop(w);
    std::fs::rename(&tmp, out).with_context(|| format!("renaming to {}", out.display()))?;
    Ok(std::fs::metadata(out)?.len())
}

pub fn run(env: &EnvArgs, args: &SynthDonorArgs) -> Result<bool> {
    let donor = match &args.donor {
        Some(d) => d.clone(),
        None => super::default_donor(env, args.arch)?,
    };
    let n = write_tokenizer_donor(&donor, &args.out)?;
    println!(
        "wrote {} ({n} bytes: the metadata of {}, no tensors; from {} bytes)",
        args.out.display(),
        donor.display(),
        std::fs::metadata(&donor).map(|m| m.len()).unwrap_or(0)
    );
    Ok(true)
}
