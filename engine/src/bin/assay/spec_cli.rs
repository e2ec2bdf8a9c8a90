//! `assay generate --spec draft:MODEL|ngram --spec-k K`: speculative decoding on the CPU
//! reference executor or on the CUDA decoder (`--backend cuda`: verification forwards of
//! K+1 rows with the device arg-max of each row; a draft model runs on its own CUDA
//! decoder). The tokens are those of plain decoding for greedy runs (the `spec`
//! gate checks it); sampled runs draw from the same distribution. Acceptance statistics per
//! draft position go to stderr at the end (and into `--json`'s `spec` field).

use std::io::Write;
use std::sync::Arc;

use anyhow::{Context, bail};
use engine::cuda::{CudaDecoder, Gpu};
use engine::kv::KvDtype;
use engine::model_file::GgufModel;
use engine::reference::{Reference, ReferenceOptions};
use engine::sampling::Sampler;
use engine::spec::{
    CudaTarget, DepthConfig, DraftModel, ExactVerifier, NgramProposer, Proposer, ReferenceTarget,
    SpecOptions, StopReason, Target, generate,
};
use engine::tokenizer::{StreamDecoder, Tokenizer};
use serde_json::json;

/// When the off policy applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Policy {
    /// On for greedy runs, off for sampled runs (whose tokens would depend on timing).
    Auto,
    On,
    Off,
}

/// The speculative flags of `assay generate`.
#[derive(clap::Args, Debug)]
pub struct SpecArgs {
    /// Speculative decoding: `ngram` (prompt lookup) or `draft:MODEL` (a path or catalog
    /// name of a model with the same vocabulary).
    #[arg(long)]
    pub spec: Option<String>,
    /// Largest number of drafted tokens per round.
    #[arg(long, default_value_t = 4)]
    pub spec_k: usize,
    /// Keep the depth at `--spec-k` instead of adapting it to recent acceptance, and
    /// speculate every round (the speed policy stays off unless `--spec-policy on`).
    #[arg(long)]
    pub spec_fixed: bool,
    /// Stop drafting when the draft model's top probability is under this (0 = never).
    /// Default: 0.3 on the CPU; 0 on CUDA, where the cut would download each draft step's
    /// logits (the device sends back only the arg-max otherwise).
    #[arg(long)]
    pub spec_confidence: Option<f64>,
    /// The speed policy. For `ngram`: each round verifies the depth (or none: a plain
    /// step) that the proposal's own evidence (its match length, and the acceptance learned
    /// for such matches) makes fastest. For a draft model: speculation off for the request
    /// while it measures slower per token than plain steps (timed at the start and whenever
    /// speculation is off), back on for a probe every 32-256 plain tokens, off for good
    /// when even full acceptance could not win. `auto` (the default) = on for greedy runs (whose tokens never depend on
    /// it) unless `--spec-fixed`; off for sampled runs.
    #[arg(long, value_enum, default_value_t = Policy::Auto)]
    pub spec_policy: Policy,
}

/// The executor `generate` loaded.
pub enum SpecExec<'a> {
    Cpu(&'a Reference),
    Cuda {
        dec: Box<CudaDecoder>,
        gpu: Arc<Gpu>,
        /// Replay the captured one-token step for one-token steps.
        graph: bool,
        /// KV positions (the draft decoder gets as many).
        capacity: usize,
    },
}

impl SpecExec<'_> {
    fn n_vocab(&self) -> usize {
        match self {
            SpecExec::Cpu(r) => r.program().shape.n_vocab,
            SpecExec::Cuda { dec, .. } => dec.program().shape.n_vocab,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            SpecExec::Cpu(_) => "cpu",
            SpecExec::Cuda { .. } => "cuda",
        }
    }
}

/// What `generate` already prepared.
pub struct Prepared<'a> {
    pub exec: SpecExec<'a>,
    pub model: &'a Arc<GgufModel>,
    pub tok: &'a Tokenizer,
    pub prompt: &'a [u32],
    pub sampler: Sampler,
    pub load_s: f64,
    pub model_path: String,
}

fn proposer(args: &crate::generate::Args, p: &Prepared<'_>) -> anyhow::Result<Box<dyn Proposer>> {
    let spec = args.spec.spec.as_deref().unwrap_or("");
    if spec == "ngram" {
        return Ok(Box::new(NgramProposer::default()));
    }
    let Some(name) = spec.strip_prefix("draft:") else {
        bail!("--spec {spec:?}: expected `ngram` or `draft:MODEL`");
    };
    let path = crate::common::resolve_model(Some(name), args.models_dir.clone())?;
    let model = GgufModel::open(&path)
        .with_context(|| format!("cannot open draft model {}", path.display()))?;
    let label = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| name.to_owned());
    let n_vocab = p.exec.n_vocab();
    let draft = match &p.exec {
        SpecExec::Cpu(_) => {
            let options = ReferenceOptions {
                threads: args.threads,
                kv_dtype: KvDtype::F16,
            };
            let mut exec = Reference::new(Arc::new(model), options)
                .with_context(|| format!("cannot run draft model {}", path.display()))?;
            exec.cache_weights(args.cache_weights_mb.saturating_mul(1 << 20))?;
            DraftModel::new(Arc::new(exec), p.model, n_vocab, label, p.sampler.config())
        }
        SpecExec::Cuda {
            gpu,
            graph,
            capacity,
            ..
        } => {
            let program = engine::arch::build_program(model.header())
                .with_context(|| format!("cannot run draft model {}", path.display()))?;
            let mut dec =
                CudaDecoder::new(gpu.clone(), &model, program, *capacity).with_context(|| {
                    format!("cannot load draft model {} on the GPU", path.display())
                })?;
            if *graph {
                dec.capture_step()?;
            }
            DraftModel::on_target(
                Box::new(CudaTarget::new(Box::new(dec), *graph)),
                &model,
                p.model,
                n_vocab,
                label,
                p.sampler.config(),
            )
        }
    }
    .with_context(|| format!("draft model {}", path.display()))?;
    Ok(Box::new(draft))
}

/// Run the speculative generation and print like plain `generate` does.
pub fn run(args: &crate::generate::Args, mut p: Prepared<'_>) -> anyhow::Result<()> {
    if args.spec.spec_k == 0 || args.spec.spec_k > 64 {
        bail!("--spec-k {} is out of range (1..=64)", args.spec.spec_k);
    }
    let mut proposer = proposer(args, &p)?;
    let greedy = p.sampler.is_greedy();
    let off_when_slower = match args.spec.spec_policy {
        Policy::Auto => greedy && !args.spec.spec_fixed,
        Policy::On => true,
        Policy::Off => false,
    };
    let backend = p.exec.name();
    let opts = SpecOptions {
        depth: DepthConfig {
            adaptive: !args.spec.spec_fixed,
            confidence: args.spec.spec_confidence.unwrap_or(match backend {
                "cuda" => 0.0,
                _ => 0.3,
            }),
            off_when_slower,
            ..DepthConfig::fixed(args.spec.spec_k)
        },
        eog: p.tok.eog_ids(),
        ignore_eos: args.ignore_eos,
    };
    let mut target: Box<dyn Target + '_> = match p.exec {
        SpecExec::Cpu(r) => Box::new(ReferenceTarget::new(r)),
        SpecExec::Cuda { mut dec, graph, .. } => {
            // Capture the step graph before the clock starts: the off policy times the
            // first plain step.
            if graph {
                dec.capture_step()?;
            }
            Box::new(CudaTarget::new(dec, graph))
        }
    };
    let mut stream = StreamDecoder::new(p.tok);
    let mut out = std::io::stdout().lock();
    let mut text = String::new();
    let json_out = args.json;
    let g = generate(
        target.as_mut(),
        proposer.as_mut(),
        &mut ExactVerifier,
        &mut p.sampler,
        p.prompt,
        args.max_tokens,
        &opts,
        &mut |t| {
            let piece = stream
                .push(t)
                .map_err(|e| engine::spec::SpecError::Other(e.to_string()))?;
            if !json_out {
                write!(out, "{piece}")
                    .and_then(|()| out.flush())
                    .map_err(|e| engine::spec::SpecError::Other(e.to_string()))?;
            }
            text.push_str(&piece);
            Ok(())
        },
    )?;
    let tail = stream.finish();
    text.push_str(&tail);
    let stop = match g.stop {
        StopReason::Length => "length",
        StopReason::Eog => "eog",
    };
    let decode_steps = g.tokens.len().saturating_sub(1);
    let prefill_tps = p.prompt.len() as f64 / g.prefill_s.max(1e-9);
    let decode_tps = decode_steps as f64 / g.decode_s.max(1e-9);
    if json_out {
        let obj = json!({
            "model": p.model_path,
            "backend": backend,
            "prompt_tokens": p.prompt,
            "tokens": g.tokens,
            "text": text,
            "stop": stop,
            "timings": {
                "load_s": p.load_s,
                "prefill_s": g.prefill_s,
                "decode_s": g.decode_s,
                "prefill_tokens_per_s": prefill_tps,
                "decode_tokens_per_s": decode_tps,
            },
            "spec": g.stats,
        });
        writeln!(out, "{obj}")?;
    } else {
        writeln!(out, "{tail}")?;
        eprintln!(
            "prompt: {} tokens in {:.2}s ({prefill_tps:.1} tok/s) | generated: {} tokens in {:.2}s ({decode_tps:.1} tok/s) | backend: {backend} | stop: {stop}",
            p.prompt.len(),
            g.prefill_s,
            g.tokens.len(),
            g.decode_s,
        );
    }
    for line in g.stats.report() {
        eprintln!("{line}");
    }
    Ok(())
}
