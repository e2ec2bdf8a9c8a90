//! chunking: a prompt fed to the CUDA decoder in chunks of 1, 64, 512 tokens or whole must
//! leave the same KV cache and give the same logits, bit for bit (issue 8's batch
//! invariance over prompt chunking; the engine of the `chunking` gate).
//!
//! The prompt goes through `CudaDecoder::prefill` (the prompt pass) in each of
//! [`ChunkingConfig::modes`]: the row path and the tensor-core GEMMs (issue 8), each
//! compared with itself across chunkings.
//!
//! The prompt is [`ChunkingConfig::prompt_tokens`] = 1100 tokens by default: longer than the
//! tiled kernel's default pass (`PREFILL_PASS_ROWS`, 1024 rows since engine21), so feeding it
//! whole still runs two passes in one `prefill` call (1024 + 76 rows), next to chunkings
//! whose passes end elsewhere (512 + 512 + 76, seventeen of 64 + 12, single rows).
//!
//! One decoder per model runs the same prompt once per chunk size, resetting in between;
//! after each run the last token's logits and the cached K/V of every position are read
//! back. The verdict ([`compare`]) is a pure function of those runs, so a planted fault
//! (one flipped logit, one flipped KV value) is tested without a GPU.

use crate::Verdict;
use crate::decode_check::DecodeCase;
use engine::cuda::{CudaDecoder, Gpu, PrefillMode};
use std::sync::Arc;

/// How to run the chunking check.
#[derive(Clone, Debug)]
pub struct ChunkingConfig {
    /// Prompt length (the case's prompt repeated and cut to this length); more than the
    /// prompt pass's default rows, so that the whole prompt takes more than one pass.
    pub prompt_tokens: usize,
    /// Chunk sizes compared against feeding the prompt whole (0 = whole).
    pub chunks: Vec<usize>,
    /// Prompt-pass modes, each checked on its own.
    pub modes: Vec<PrefillMode>,
}

impl Default for ChunkingConfig {
    fn default() -> Self {
        ChunkingConfig {
            prompt_tokens: 1100,
            chunks: vec![0, 1, 64, 512],
            modes: vec![PrefillMode::Rows, PrefillMode::Gemm],
        }
    }
}

/// What one chunking left behind.
#[derive(Clone, Debug, PartialEq)]
pub struct ChunkRun {
    /// Tokens per `forward` call (0 = the whole prompt in one call).
    pub chunk: usize,
    pub logits: Vec<f32>,
    /// f16 bits of the cache ([`CudaDecoder::kv_snapshot`]).
    pub kv: Vec<u16>,
}

/// The result for one model.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ChunkLine {
    pub name: String,
    pub prompt_tokens: usize,
    pub chunks: Vec<usize>,
    /// One line per chunking that differs from the first run.
    pub mismatches: Vec<String>,
    pub pass: bool,
    pub error: Option<String>,
}

impl ChunkLine {
    /// One printed line (plus one per mismatch).
    pub fn render(&self) -> String {
        let status = if self.pass { "ok  " } else { "FAIL" };
        if let Some(e) = &self.error {
            return format!("{status} {:<40} error: {e}", self.name);
        }
        let shown: Vec<String> = self
            .chunks
            .iter()
            .map(|&c| {
                if c == 0 {
                    "whole".into()
                } else {
                    c.to_string()
                }
            })
            .collect();
        let mut s = format!(
            "{status} {:<40} {} prompt tokens in chunks of {}: logits and KV {}",
            self.name,
            self.prompt_tokens,
            shown.join(" / "),
            if self.mismatches.is_empty() {
                "bit-identical"
            } else {
                "DIFFER"
            }
        );
        for m in &self.mismatches {
            s.push_str("\n       ");
            s.push_str(m);
        }
        s
    }
}

fn label(chunk: usize) -> String {
    if chunk == 0 {
        "whole".into()
    } else {
        format!("chunks of {chunk}")
    }
}

/// Compare every run with the first: logits bit for bit (NaN bits included) and KV bits.
pub fn compare(name: &str, prompt_tokens: usize, runs: &[ChunkRun]) -> ChunkLine {
    let mut mismatches = Vec::new();
    if runs.len() < 2 {
        mismatches.push(format!("only {} run(s): nothing compared", runs.len()));
    }
    if let Some((first, rest)) = runs.split_first() {
        for r in rest {
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            if r.logits.len() != first.logits.len() {
                mismatches.push(format!(
                    "{}: {} logits vs {}",
                    label(r.chunk),
                    r.logits.len(),
                    first.logits.len()
                ));
            } else if bits(&r.logits) != bits(&first.logits) {
                let n = r
                    .logits
                    .iter()
                    .zip(&first.logits)
                    .filter(|(a, b)| a.to_bits() != b.to_bits())
                    .count();
                let max = r
                    .logits
                    .iter()
                    .zip(&first.logits)
                    .map(|(a, b)| (a - b).abs())
                    .fold(
                        0f32,
                        |m, d| if d.is_nan() { f32::INFINITY } else { m.max(d) },
                    );
                mismatches.push(format!(
                    "{} vs {}: {n} logits differ, max |diff| {max:.3e}",
                    label(r.chunk),
                    label(first.chunk)
                ));
            }
            if r.kv.len() != first.kv.len() {
                mismatches.push(format!(
                    "{}: {} KV values vs {}",
                    label(r.chunk),
                    r.kv.len(),
                    first.kv.len()
                ));
            } else if let Some(i) = r.kv.iter().zip(&first.kv).position(|(a, b)| a != b) {
                let n = r.kv.iter().zip(&first.kv).filter(|(a, b)| a != b).count();
                mismatches.push(format!(
                    "{} vs {}: {n} KV values differ (first at flat index {i})",
                    label(r.chunk),
                    label(first.chunk)
                ));
            }
        }
    }
    ChunkLine {
        name: name.to_owned(),
        prompt_tokens,
        chunks: runs.iter().map(|r| r.chunk).collect(),
        pass: mismatches.is_empty(),
        mismatches,
        error: None,
    }
}

/// The prompt of `n` tokens: the case's prompt repeated (tokens below the vocabulary).
fn long_prompt(case: &DecodeCase, n: usize) -> Vec<u32> {
    if case.prompt.is_empty() {
        return (0..n as u32).collect();
    }
    case.prompt.iter().copied().cycle().take(n).collect()
}

fn run_all(
    gpu: &Arc<Gpu>,
    case: &DecodeCase,
    cfg: &ChunkingConfig,
    mode: PrefillMode,
) -> Result<Vec<ChunkRun>, String> {
    let program = engine::arch::build_program(case.model.header()).map_err(|e| e.to_string())?;
    let prompt = long_prompt(case, cfg.prompt_tokens);
    let mut dec = CudaDecoder::new(gpu.clone(), &case.model, program, prompt.len() + 8)
        .map_err(|e| e.to_string())?;
    dec.set_prefill(mode);
    let mut runs = Vec::new();
    for &chunk in &cfg.chunks {
        dec.reset();
        let step = if chunk == 0 { prompt.len() } else { chunk };
        for part in prompt.chunks(step) {
            dec.prefill(part)
                .map_err(|e| format!("{}: {e}", label(chunk)))?;
        }
        runs.push(ChunkRun {
            chunk,
            logits: dec.logits().map_err(|e| e.to_string())?,
            kv: dec.kv_snapshot().map_err(|e| e.to_string())?,
        });
    }
    Ok(runs)
}

/// Run and compare one model.
/// Run and compare one model in every mode of `cfg` (mismatches and errors name the mode).
pub fn check_model(gpu: &Arc<Gpu>, case: &DecodeCase, cfg: &ChunkingConfig) -> ChunkLine {
    let mut line = ChunkLine {
        name: format!(
            "{} [{}]",
            case.name,
            cfg.modes
                .iter()
                .map(|m| m.name())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        prompt_tokens: cfg.prompt_tokens,
        chunks: cfg.chunks.clone(),
        mismatches: Vec::new(),
        pass: !cfg.modes.is_empty(),
        error: cfg
            .modes
            .is_empty()
            .then(|| "no prompt-pass mode to check".to_string()),
    };
    for &mode in &cfg.modes {
        match run_all(gpu, case, cfg, mode) {
            Ok(runs) => {
                let l = compare(&case.name, cfg.prompt_tokens, &runs);
                line.pass &= l.pass;
                line.mismatches.extend(
                    l.mismatches
                        .into_iter()
                        .map(|m| format!("{}: {m}", mode.name())),
                );
            }
            Err(e) => {
                line.pass = false;
                line.error = Some(format!("{}: {e}", mode.name()));
            }
        }
    }
    line
}

/// Verdict over every model's line (no line at all is red: the gate checked nothing).
pub fn verdict(lines: &[ChunkLine]) -> Verdict {
    if lines.is_empty() {
        return Verdict::from_failures(vec!["no model was checked".into()]);
    }
    Verdict::from_failures(
        lines
            .iter()
            .filter(|l| !l.pass)
            .map(|l| match (&l.error, l.mismatches.first()) {
                (Some(e), _) => format!("{}: {e}", l.name),
                (None, Some(m)) => format!("{}: {m}", l.name),
                (None, None) => format!("{}: failed", l.name),
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn runs() -> Vec<ChunkRun> {
        [0, 1, 64, 512]
            .into_iter()
            .map(|chunk| ChunkRun {
                chunk,
                logits: vec![0.5, -1.25, 3.0, f32::NAN],
                kv: vec![1, 2, 3, 4, 5],
            })
            .collect()
    }

    #[test]
    fn default_prompt_spans_more_than_one_pass() {
        // Fed whole, the prompt must still cross a pass boundary of the default tiled pass.
        let cfg = ChunkingConfig::default();
        assert!(cfg.prompt_tokens > engine::cuda::decode::PREFILL_PASS_ROWS);
        assert!(cfg.chunks.contains(&0));
    }

    #[test]
    fn identical_runs_are_green() {
        let line = compare("m", 600, &runs());
        assert!(line.pass, "{}", line.render());
        assert_eq!(verdict(&[line]), Verdict::Green);
    }

    #[test]
    fn one_flipped_logit_turns_it_red() {
        let mut r = runs();
        r[2].logits[1] = f32::from_bits((-1.25f32).to_bits() ^ 1);
        let line = compare("m", 600, &r);
        assert!(!line.pass);
        assert!(
            line.mismatches[0].contains("chunks of 64"),
            "{:?}",
            line.mismatches
        );
        assert!(verdict(&[line]).is_red());
    }

    #[test]
    fn one_flipped_kv_value_turns_it_red() {
        let mut r = runs();
        r[1].kv[3] ^= 1;
        let line = compare("m", 600, &r);
        assert!(!line.pass);
        assert!(
            line.mismatches[0].contains("flat index 3"),
            "{:?}",
            line.mismatches
        );
    }

    #[test]
    fn a_shorter_cache_or_a_single_run_is_red() {
        let mut r = runs();
        r[3].kv.pop();
        assert!(!compare("m", 600, &r).pass);
        assert!(!compare("m", 600, &runs()[..1]).pass);
        assert!(verdict(&[]).is_red());
    }
}
