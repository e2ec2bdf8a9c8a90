//! The engines that time a cell. For now: the CPU reference executor (so the bench
//! machinery runs end to end on any machine); the CUDA engine and the paired engines
//! (llama.cpp) arrive with the CUDA decode path.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use engine::kv::KvDtype;
use engine::model_file::GgufModel;
use engine::reference::{Reference, ReferenceOptions, argmax};

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
    pub flags: Vec<String>,
    pub detail: Vec<String>,
    /// Bytes per KV element (for the roofline).
    pub kv_bytes: f64,
}

/// Time `cell` on the CPU reference executor: warm-up runs discarded, `runs` kept.
/// Every run must generate the same tokens (greedy), or the cell fails.
pub fn measure_cpu(path: &Path, cell: &Cell, threads: usize, runs: usize) -> Result<Measured> {
    if cell.batch != 1 {
        bail!(
            "cell {}: the CPU reference bench runs batch 1 only",
            cell.id
        );
    }
    let model =
        Arc::new(GgufModel::open(path).with_context(|| format!("opening {}", path.display()))?);
    let kv_dtype = KvDtype::F16;
    let options = ReferenceOptions {
        threads: Some(threads),
        kv_dtype,
    };
    let r = Reference::new(model, options).context("building the reference executor")?;
    let vocab = r.program().shape.n_vocab;
    let p = prompt(cell.prompt_tokens, vocab);
    let mut samples = Vec::new();
    let mut first_tokens: Option<Vec<u32>> = None;
    for run in 0..cell.warmup + runs {
        let mut kv = r.new_cache();
        let t = Instant::now();
        let logits = r.step(&mut kv, &p).context("prefill")?;
        let prefill_s = t.elapsed().as_secs_f64();
        let mut tok = argmax(&logits) as u32;
        let mut out = vec![tok];
        let t = Instant::now();
        for _ in 0..cell.gen_tokens {
            let logits = r.step(&mut kv, &[tok]).context("decode")?;
            tok = argmax(&logits) as u32;
            out.push(tok);
        }
        let decode_s = t.elapsed().as_secs_f64();
        match &first_tokens {
            None => first_tokens = Some(out),
            Some(f) if *f != out => bail!("cell {}: run {run} generated other tokens", cell.id),
            Some(_) => {}
        }
        if run >= cell.warmup {
            samples.push(match cell.mode {
                Mode::Decode => cell.gen_tokens as f64 / decode_s.max(1e-9),
                Mode::Prefill => cell.prompt_tokens as f64 / prefill_s.max(1e-9),
            });
        }
    }
    let toks = first_tokens.unwrap_or_default();
    Ok(Measured {
        samples,
        engine: "assay-reference-cpu".into(),
        flags: vec![
            format!("threads={threads}"),
            "kv=f16".into(),
            format!("warmup={}", cell.warmup),
        ],
        detail: vec![format!(
            "greedy tokens identical in all {} runs: {:?}",
            cell.warmup + runs,
            &toks[..toks.len().min(8)]
        )],
        kv_bytes: 2.0,
    })
}
