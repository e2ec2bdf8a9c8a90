//! Cells with a prompt text and/or speculative decoding (issue #10), greedy, plain or
//! speculative: on the CPU reference executor (weights kept dequantized in memory for both
//! arms; [`TextArm`]) or on the CUDA decoder ([`CudaTextArm`]: one-token steps replay the
//! captured graph in both arms, verification runs K+1 rows in one forward with the device
//! arg-max of each row, a draft model runs on its own CUDA decoder). Before timing, the
//! plain greedy tokens are computed once; every run of a speculative cell must reproduce
//! them exactly, or the cell fails.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use engine::cuda::{CudaDecoder, Gpu};
use engine::kv::KvDtype;
use engine::model_file::GgufModel;
use engine::reference::{Reference, ReferenceOptions};
use engine::sampling::{Sampler, SamplerConfig};
use engine::spec::{
    CudaTarget, DepthConfig, DraftModel, ExactVerifier, Generation, NgramProposer, Proposer,
    ReferenceTarget, SpecOptions, SpecStats, generate, plain_generate,
};
use engine::tokenizer::Tokenizer;

use super::arms::ArmRun;
use super::cells::{Cell, Mode};
use super::runner::{Measured, prompt};

const CACHE_BYTES: usize = 6 << 30;

fn reference(path: &Path, threads: usize) -> Result<Reference> {
    let model =
        Arc::new(GgufModel::open(path).with_context(|| format!("opening {}", path.display()))?);
    let mut r = Reference::new(
        model,
        ReferenceOptions {
            threads: Some(threads),
            kv_dtype: KvDtype::F16,
        },
    )
    .context("building the reference executor")?;
    r.cache_weights(CACHE_BYTES)?;
    Ok(r)
}

/// The cell's prompt: its text file tokenized (count checked), else the ids prompt.
pub fn cell_prompt(root: &Path, r: &Reference, cell: &Cell) -> Result<Vec<u32>> {
    model_prompt(root, r.model(), r.program().shape.n_vocab, cell)
}

/// [`cell_prompt`] for `model` with `n_vocab` logits.
pub fn model_prompt(
    root: &Path,
    model: &GgufModel,
    n_vocab: usize,
    cell: &Cell,
) -> Result<Vec<u32>> {
    let Some(file) = &cell.prompt_file else {
        return Ok(prompt(cell.prompt_tokens, n_vocab));
    };
    let p = root.join(file);
    let text = std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
    let tok = Tokenizer::from_gguf(model.header()).context("reading the tokenizer")?;
    let ids = tok.encode(&text, true, false)?;
    if ids.len() != cell.prompt_tokens {
        bail!(
            "cell {}: {file} is {} tokens for this model, the cell says prompt_tokens = {}",
            cell.id,
            ids.len(),
            cell.prompt_tokens
        );
    }
    Ok(ids)
}

/// The CPU reference timing a text-prompt cell, plain or speculative (greedy). Built with
/// the plain greedy tokens of the prompt; every run must reproduce them exactly.
pub struct TextArm {
    r: Reference,
    draft: Option<Arc<Reference>>,
    cell: Cell,
    prompt: Vec<u32>,
    want: Vec<u32>,
    threads: usize,
    runs: usize,
    stats: SpecStats,
}

impl TextArm {
    pub fn new(
        root: &Path,
        models_dir: &Path,
        path: &Path,
        cell: &Cell,
        threads: usize,
    ) -> Result<TextArm> {
        if cell.batch != 1 || cell.mode != Mode::Decode {
            bail!(
                "cell {}: text/speculative CPU cells are batch-1 decode",
                cell.id
            );
        }
        let r = reference(path, threads)?;
        let prompt = cell_prompt(root, &r, cell)?;
        let draft = match cell
            .spec
            .as_ref()
            .and_then(|s| s.proposer.strip_prefix("draft:"))
        {
            Some(name) => {
                let dpath = super::resolve_draft(name, models_dir)?;
                Some(Arc::new(reference(&dpath, threads)?))
            }
            None => None,
        };
        let mut arm = TextArm {
            r,
            draft,
            cell: cell.clone(),
            prompt,
            want: Vec::new(),
            threads,
            runs: 0,
            stats: SpecStats::default(),
        };
        arm.want = arm.plain()?.tokens;
        Ok(arm)
    }

    fn opts(&self, k: usize) -> SpecOptions {
        SpecOptions {
            depth: DepthConfig {
                adaptive: self.cell.spec.as_ref().is_some_and(|s| s.adaptive),
                off_when_slower: self.cell.spec.as_ref().is_some_and(|s| s.policy),
                ..DepthConfig::fixed(k)
            },
            eog: Vec::new(),
            ignore_eos: true,
        }
    }

    fn plain(&self) -> Result<Generation> {
        let mut t = ReferenceTarget::new(&self.r);
        let mut s = Sampler::new(SamplerConfig::default());
        Ok(plain_generate(
            &mut t,
            &mut s,
            &self.prompt,
            self.cell.gen_tokens,
            &self.opts(1),
            &mut |_| Ok(()),
        )?)
    }

    fn once(&mut self) -> Result<f64> {
        let g = match &self.cell.spec {
            None => self.plain()?,
            Some(sp) => {
                let greedy = SamplerConfig::default();
                let mut proposer: Box<dyn Proposer> = match &self.draft {
                    Some(d) => Box::new(DraftModel::new(
                        d.clone(),
                        self.r.model(),
                        self.r.program().shape.n_vocab,
                        // DraftModel names itself `draft:<name>`.
                        sp.proposer
                            .strip_prefix("draft:")
                            .unwrap_or(&sp.proposer)
                            .to_owned(),
                        &greedy,
                    )?),
                    None => Box::new(NgramProposer::default()),
                };
                let mut t = ReferenceTarget::new(&self.r);
                let mut s = Sampler::new(greedy);
                let g = generate(
                    &mut t,
                    proposer.as_mut(),
                    &mut ExactVerifier,
                    &mut s,
                    &self.prompt,
                    self.cell.gen_tokens,
                    &self.opts(sp.k),
                    &mut |_| Ok(()),
                )?;
                if self.runs >= self.cell.warmup {
                    self.stats.proposer = g.stats.proposer.clone();
                    self.stats.merge(&g.stats);
                }
                g
            }
        };
        if g.tokens != self.want {
            bail!(
                "cell {}: run {} generated other tokens than plain greedy decode",
                self.cell.id,
                self.runs
            );
        }
        self.runs += 1;
        let steps = g.tokens.len().saturating_sub(1);
        Ok(steps as f64 / g.decode_s.max(1e-9))
    }

    /// How the samples were made, with `samples` (warm-up excluded).
    pub fn measured(&self, samples: Vec<f64>) -> Measured {
        let mut flags = vec![
            format!("threads={}", self.threads),
            "kv=f16".into(),
            "weights-cached".into(),
            format!("warmup={}", self.cell.warmup),
        ];
        let mut detail = vec![format!(
            "greedy tokens identical to plain decode in all {} runs: {:?}",
            self.runs,
            &self.want[..self.want.len().min(8)]
        )];
        if let Some(sp) = &self.cell.spec {
            flags.push(format!("spec={}", sp.proposer));
            flags.push(format!("spec-k={}", sp.k));
            flags.push(format!("spec-adaptive={}", sp.adaptive));
            detail.extend(stats_detail(&self.stats));
        }
        Measured {
            samples,
            engine: "assay-reference-cpu".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            flags,
            detail,
            kv_bytes: 2.0,
        }
    }
}

impl ArmRun for TextArm {
    fn run(&mut self, n: usize) -> Result<Vec<f64>> {
        (0..n).map(|_| self.once()).collect()
    }
}

/// The receipt lines of a speculative arm's statistics over its timed runs.
fn stats_detail(stats: &SpecStats) -> [String; 4] {
    [
        format!(
            "acceptance by position {:?}, {:.2} tokens per target forward (timed runs)",
            stats
                .acceptance()
                .iter()
                .map(|a| (a * 1000.0).round() / 1000.0)
                .collect::<Vec<_>>(),
            stats.tokens_per_round()
        ),
        format!("per-round times (timed runs): {}", stats.timing_line()),
        format!(
            "speed policy (timed runs): {} rounds drafted, {} plain; rounds by depth {:?}; first decisions: {}",
            stats.rounds - stats.plain_rounds,
            stats.plain_rounds,
            stats.k_hist,
            if stats.decisions.is_empty() {
                "none (policy off)".to_owned()
            } else {
                stats
                    .decisions
                    .iter()
                    .take(3)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(" | ")
            }
        ),
        format!(
            "spec stats {}",
            serde_json::to_string(stats).unwrap_or_default()
        ),
    ]
}

/// The receipt line comparing a policy cell's timed runs with plain generation timed on
/// the same decoder after each of them (None when no plain run was timed).
fn same_decoder_line(policy: &[f64], plain: &[f64]) -> Option<String> {
    if policy.is_empty() || plain.is_empty() {
        return None;
    }
    let (a, b) = (
        gates::graph_check::median(policy),
        gates::graph_check::median(plain),
    );
    Some(format!(
        "plain on the same decoder after each timed run: median {b:.2} tok/s (N={}); policy/plain {:.4}x (medians)",
        plain.len(),
        a / b.max(1e-9)
    ))
}

fn opts_of(cell: &Cell, k: usize) -> SpecOptions {
    SpecOptions {
        depth: DepthConfig {
            adaptive: cell.spec.as_ref().is_some_and(|s| s.adaptive),
            off_when_slower: cell.spec.as_ref().is_some_and(|s| s.policy),
            ..DepthConfig::fixed(k)
        },
        eog: Vec::new(),
        ignore_eos: true,
    }
}

/// The CUDA decoder timing a text-prompt cell, plain or speculative (greedy). Built with
/// the plain greedy tokens of the prompt (graphed one-token steps); every run must
/// reproduce them exactly. Both arms run [`engine::spec`]'s loops over a [`CudaTarget`]:
/// the plain arm one graphed step per token, the speculative arm rounds of drafting plus
/// one verification forward of K+1 rows. The draft model (if any) keeps its decoder between
/// runs and is reset before each, so every run pays its draft's prefill.
pub struct CudaTextArm {
    target: CudaTarget,
    draft: Option<DraftModel>,
    cell: Cell,
    prompt: Vec<u32>,
    want: Vec<u32>,
    runs: usize,
    stats: SpecStats,
    draft_file: Option<String>,
    /// Policy cells: plain generation timed on the same decoder right after each timed
    /// speculative run (tok/s), so that "never slower than plain" is read without the
    /// decoder-to-decoder variance of two cells.
    plain_after: Vec<f64>,
}

fn decoder(gpu: &Arc<Gpu>, model: &GgufModel, capacity: usize) -> Result<CudaDecoder> {
    let program = engine::arch::build_program(model.header()).context("building the program")?;
    let mut dec = CudaDecoder::new(Arc::clone(gpu), model, program, capacity)
        .context("uploading the weights")?;
    dec.capture_step().context("capturing the step graph")?;
    Ok(dec)
}

impl CudaTextArm {
    pub fn new(
        gpu: &Arc<Gpu>,
        root: &Path,
        path: &Path,
        draft: Option<&Path>,
        cell: &Cell,
    ) -> Result<CudaTextArm> {
        if cell.batch != 1 || cell.mode != Mode::Decode {
            bail!(
                "cell {}: text/speculative CUDA cells are batch-1 decode",
                cell.id
            );
        }
        let model = GgufModel::open(path).with_context(|| format!("opening {}", path.display()))?;
        // Room for the last verification forward (K+1 rows) past the generated tokens.
        let capacity = cell.prompt_tokens + cell.gen_tokens + 32;
        let dec = decoder(gpu, &model, capacity)?;
        let n_vocab = dec.program().shape.n_vocab;
        let prompt = model_prompt(root, &model, n_vocab, cell)?;
        let greedy = SamplerConfig::default();
        let (draft, draft_file) = match draft {
            Some(dp) => {
                let dmodel =
                    GgufModel::open(dp).with_context(|| format!("opening {}", dp.display()))?;
                let ddec = decoder(gpu, &dmodel, capacity)
                    .with_context(|| format!("draft model {}", dp.display()))?;
                let label = dp
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let d = DraftModel::on_target(
                    Box::new(CudaTarget::new(Box::new(ddec), true)),
                    &dmodel,
                    &model,
                    n_vocab,
                    label.clone(),
                    &greedy,
                )
                .with_context(|| format!("draft model {}", dp.display()))?;
                (Some(d), Some(label))
            }
            None => (None, None),
        };
        if cell
            .spec
            .as_ref()
            .is_some_and(|s| s.proposer.starts_with("draft:"))
            && draft.is_none()
        {
            bail!("cell {}: its draft model was not given", cell.id);
        }
        let mut arm = CudaTextArm {
            target: CudaTarget::new(Box::new(dec), true),
            draft,
            cell: cell.clone(),
            prompt,
            want: Vec::new(),
            runs: 0,
            stats: SpecStats::default(),
            draft_file,
            plain_after: Vec::new(),
        };
        arm.want = arm.plain()?.tokens;
        Ok(arm)
    }

    fn plain(&mut self) -> Result<Generation> {
        self.target.reset();
        let mut s = Sampler::new(SamplerConfig::default());
        Ok(plain_generate(
            &mut self.target,
            &mut s,
            &self.prompt,
            self.cell.gen_tokens,
            &opts_of(&self.cell, 1),
            &mut |_| Ok(()),
        )?)
    }

    fn once(&mut self) -> Result<f64> {
        let g = match self.cell.spec.clone() {
            None => self.plain()?,
            Some(sp) => {
                self.target.reset();
                let mut ngram = NgramProposer::default();
                let proposer: &mut dyn Proposer = match self.draft.as_mut() {
                    Some(d) => {
                        d.reset();
                        d
                    }
                    None => &mut ngram,
                };
                let mut s = Sampler::new(SamplerConfig::default());
                let g = generate(
                    &mut self.target,
                    proposer,
                    &mut ExactVerifier,
                    &mut s,
                    &self.prompt,
                    self.cell.gen_tokens,
                    &opts_of(&self.cell, sp.k),
                    &mut |_| Ok(()),
                )?;
                if self.runs >= self.cell.warmup {
                    self.stats.proposer = g.stats.proposer.clone();
                    self.stats.merge(&g.stats);
                }
                g
            }
        };
        if g.tokens != self.want {
            bail!(
                "cell {}: run {} generated other tokens than plain greedy decode",
                self.cell.id,
                self.runs
            );
        }
        let timed = self.runs >= self.cell.warmup;
        self.runs += 1;
        let steps = g.tokens.len().saturating_sub(1);
        let rate = steps as f64 / g.decode_s.max(1e-9);
        if timed && self.cell.spec.as_ref().is_some_and(|s| s.policy) {
            let p = self.plain()?;
            if p.tokens != self.want {
                bail!(
                    "cell {}: plain generation after run {} gave other tokens",
                    self.cell.id,
                    self.runs - 1
                );
            }
            let ps = p.tokens.len().saturating_sub(1);
            self.plain_after.push(ps as f64 / p.decode_s.max(1e-9));
        }
        Ok(rate)
    }

    /// How the samples were made, with `samples` (warm-up excluded).
    pub fn measured(&self, samples: Vec<f64>) -> Measured {
        let mut flags = vec![
            "graph=on".into(),
            "kv=f16".into(),
            format!("warmup={}", self.cell.warmup),
        ];
        let mut detail = vec![format!(
            "greedy tokens identical to plain decode in all {} runs: {:?}",
            self.runs,
            &self.want[..self.want.len().min(8)]
        )];
        if let Some(e) = self.target.decoder().rows_graph_error() {
            detail.push(format!(
                "verification graphs not captured ({e}); eager verification forwards used"
            ));
        }
        let choices = self.target.decoder().kernel_choices();
        if !choices.is_empty() {
            detail.push(format!("matvec kernels: {choices:?}"));
        }
        if let Some(sp) = &self.cell.spec {
            flags.push(format!("spec={}", sp.proposer));
            flags.push(format!("spec-k={}", sp.k));
            flags.push(format!("spec-adaptive={}", sp.adaptive));
            flags.push(format!("spec-policy={}", sp.policy));
            if let Some(f) = &self.draft_file {
                flags.push(format!("draft-file={f}"));
            }
            detail.extend(stats_detail(&self.stats));
            detail.extend(same_decoder_line(&samples, &self.plain_after));
        }
        Measured {
            samples,
            engine: "assay-cuda".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            flags,
            detail,
            kv_bytes: 2.0,
        }
    }
}

impl ArmRun for CudaTextArm {
    fn run(&mut self, n: usize) -> Result<Vec<f64>> {
        (0..n).map(|_| self.once()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::same_decoder_line;

    #[test]
    fn the_same_decoder_line_compares_medians() {
        assert_eq!(same_decoder_line(&[], &[1.0]), None);
        assert_eq!(same_decoder_line(&[1.0], &[]), None);
        let l = same_decoder_line(&[99.0, 101.0, 100.0], &[200.0, 100.0, 101.0, 99.0]).unwrap();
        assert!(l.contains("median 100.50 tok/s (N=4)"), "{l}");
        assert!(l.contains("policy/plain 0.9950x"), "{l}");
    }
}
