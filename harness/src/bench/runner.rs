//! Our CPU arm: the CPU reference executor (so the bench machinery runs end to end on any
//! machine), and what every arm of ours shares (the prompt, the same-tokens check, the
//! [`Measured`] record).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use engine::kv::KvDtype;
use engine::model_file::GgufModel;
use engine::reference::{Reference, ReferenceOptions, argmax};

use super::arms::ArmRun;
use super::cells::{Cell, Mode};

/// The prompt of every cell for now: deterministic token ids (no tokenizer needed).
pub const PROMPT_ID: &str = "ids-v1: token i = 1000 + 7919 i mod (vocab - 1000)";

/// The prompt of `n` tokens for a vocabulary of `vocab`.
pub fn prompt(n: usize, vocab: usize) -> Vec<u32> {
    let span = vocab.saturating_sub(1000).max(1);
    (0..n).map(|i| (1000 + (7919 * i) % span) as u32).collect()
}

/// The timed samples of one cell and how they were made.
#[derive(Clone, Debug)]
pub struct Measured {
    /// tok/s of every timed run.
    pub samples: Vec<f64>,
    pub engine: String,
    pub version: String,
    pub flags: Vec<String>,
    pub detail: Vec<String>,
    /// Bytes per KV element (for the roofline).
    pub kv_bytes: f64,
}

/// Every run of a cell must generate the same greedy tokens: the first run's tokens, and
/// a check of each later run against them.
#[derive(Default)]
pub struct SameTokens {
    first: Option<Vec<u32>>,
    runs: usize,
}

impl SameTokens {
    pub fn check(&mut self, cell: &str, out: Vec<u32>) -> Result<()> {
        self.runs += 1;
        match &self.first {
            None => self.first = Some(out),
            Some(f) if *f != out => {
                let at = f
                    .iter()
                    .zip(&out)
                    .position(|(a, b)| a != b)
                    .unwrap_or(f.len().min(out.len()));
                bail!(
                    "cell {cell}: run {} generated other tokens: first difference at token {at} \
                     ({:?} vs {:?} in run 0; {} vs {} tokens)",
                    self.runs - 1,
                    out.get(at),
                    f.get(at),
                    out.len(),
                    f.len()
                )
            }
            Some(_) => {}
        }
        Ok(())
    }

    /// The detail line for the receipt.
    pub fn detail(&self) -> String {
        let toks = self.first.as_deref().unwrap_or_default();
        format!(
            "greedy tokens identical in all {} runs: {:?}",
            self.runs,
            &toks[..toks.len().min(8)]
        )
    }
}

/// The CPU reference executor ready to time `cell`: each run prefills the prompt into a
/// fresh cache and decodes `gen_tokens` greedy tokens; every run must generate the same
/// tokens, or the cell fails.
pub struct CpuArm {
    r: Reference,
    cell: Cell,
    prompt: Vec<u32>,
    threads: usize,
    same: SameTokens,
}

impl CpuArm {
    pub fn new(path: &Path, cell: &Cell, threads: usize) -> Result<CpuArm> {
        if cell.batch != 1 {
            bail!(
                "cell {}: the CPU reference bench runs batch 1 only",
                cell.id
            );
        }
        let model =
            Arc::new(GgufModel::open(path).with_context(|| format!("opening {}", path.display()))?);
        let options = ReferenceOptions {
            threads: Some(threads),
            kv_dtype: KvDtype::F16,
        };
        let r = Reference::new(model, options).context("building the reference executor")?;
        let vocab = r.program().shape.n_vocab;
        Ok(CpuArm {
            prompt: prompt(cell.prompt_tokens, vocab),
            r,
            cell: cell.clone(),
            threads,
            same: SameTokens::default(),
        })
    }

    fn once(&mut self) -> Result<f64> {
        let cell = &self.cell;
        let mut kv = self.r.new_cache();
        let t = Instant::now();
        let logits = self.r.step(&mut kv, &self.prompt).context("prefill")?;
        let prefill_s = t.elapsed().as_secs_f64();
        let mut tok = argmax(&logits) as u32;
        let mut out = vec![tok];
        let t = Instant::now();
        for _ in 0..cell.gen_tokens {
            let logits = self.r.step(&mut kv, &[tok]).context("decode")?;
            tok = argmax(&logits) as u32;
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
        Measured {
            samples,
            version: env!("CARGO_PKG_VERSION").into(),
            engine: "assay-reference-cpu".into(),
            flags: vec![
                format!("threads={}", self.threads),
                "kv=f16".into(),
                format!("warmup={}", self.cell.warmup),
            ],
            detail: vec![self.same.detail()],
            kv_bytes: 2.0,
        }
    }
}

impl ArmRun for CpuArm {
    fn run(&mut self, n: usize) -> Result<Vec<f64>> {
        (0..n).map(|_| self.once()).collect()
    }
}
