//! The gates that need a GPU: registered here so that every run lists them, and skipped
//! with the reason when they cannot run. `kernel-check` runs
//! [`crate::kernel_check::run`] and also requires that the kernels compiled into this
//! binary are the kernels of the tree the receipt names; `argmax` runs
//! [`crate::decode_check`] and `graph` runs [`crate::graph_check`] on the synthetic
//! checkpoints of every family plus every catalog model present in the models folder;
//! `chunking` runs [`crate::chunking`] on the same models, and `batch` runs
//! [`crate::batch`] on them (`ASSAY_BATCH_PLANT_FAULT=1` plants its fault: the gate must go
//! red); `prefill` runs [`crate::prefill_check`] on them (the tensor-core prompt pass vs the
//! row path; `ASSAY_PREFILL_PLANT_FAULT=1` plants its fault: the gate must go red).
//! `chunking` and `prefill` also run a synthetic BF16 checkpoint holding one weight past
//! f16's range ([`crate::decode_check::wide_bf16_model`]): its prompt pass keeps x in two
//! bf16 parts.

use std::sync::Arc;

use engine::cuda::{CudaConfig, Gpu};
use engine::model_file::GgufModel;
use engine::tokenizer::Tokenizer;

use crate::batch::{self as batch_check, BatchConfig};
use crate::chunking::{self as chunk_check, ChunkingConfig};
use crate::decode_check::{self, DecodeCase, DecodeCheckConfig, check_model, synthetic_models};
use crate::graph_check::{self, GraphCheckConfig};
use crate::kernel_check::{KernelCheckConfig, run as run_kernel_check};
use crate::prefill_check::{self, PrefillCheckConfig};
use crate::receipt::Workload;
use crate::{GateContext, GateDef, GateOutcome, Verdict};

/// The GPU gates, in run order.
pub fn gates() -> Vec<GateDef> {
    vec![
        GateDef {
            name: "kernel-check",
            about: "every CUDA kernel vs its CPU reference on fresh random inputs",
            needs_gpu: true,
            quick: true,
            run: kernel_check,
        },
        GateDef {
            name: "argmax",
            about: "GPU greedy == CPU reference greedy (64 tokens, every staged real model)",
            needs_gpu: true,
            quick: true,
            run: argmax,
        },
        GateDef {
            name: "graph",
            about: "CUDA-graph replay == eager decode, token-identical",
            needs_gpu: true,
            quick: false,
            run: graph,
        },
        GateDef {
            name: "chunking",
            about: "prompt fed whole or in chunks of 1 / 64 / 512: identical KV and logits bits",
            needs_gpu: true,
            quick: false,
            run: chunking,
        },
        GateDef {
            name: "batch",
            about: "a sequence decoded alone or at any row of a batch of 2/7/16/64: identical tokens and logits",
            needs_gpu: true,
            quick: false,
            run: batch,
        },
        GateDef {
            name: "prefill",
            about: "tensor-core prompt pass vs the row path: same last-row arg-max, logits within 1e-3",
            needs_gpu: true,
            quick: false,
            run: prefill,
        },
    ]
}

/// Why a GPU gate cannot run here, if it cannot.
pub fn no_gpu_reason(ctx: &GateContext) -> Option<String> {
    (!ctx.gpu).then(|| "no GPU (nvidia-smi reports no device)".to_owned())
}

/// The prompt both decode gates continue from, tokenized by each real model.
const PROMPT: &str = "The history of the printing press begins in the fifteenth century, when";

/// Open the GPU for a decode gate.
fn open_gpu(ctx: &GateContext) -> Result<Arc<Gpu>, String> {
    let cuda = CudaConfig {
        ordinal: 0,
        cubin_cache_dir: ctx.cubin_cache.clone(),
    };
    Gpu::open(&cuda).map(Arc::new).map_err(|e| e.to_string())
}

/// Synthetic checkpoints of every family, then each catalog model found in the models
/// folder (with `--quick`, only the default model among them).
fn decode_cases(ctx: &GateContext) -> (Vec<DecodeCase>, Vec<String>) {
    let mut problems = Vec::new();
    let mut cases = match synthetic_models() {
        Ok(c) => c,
        Err(e) => {
            problems.push(format!("cannot build synthetic models: {e}"));
            Vec::new()
        }
    };
    let catalog = engine::catalog::models().unwrap_or_default();
    for m in catalog {
        if ctx.quick && m.name != ctx.default_model {
            continue;
        }
        let Ok(path) = engine::catalog::resolve(&m.name, &ctx.models_dir) else {
            continue;
        };
        let loaded = GgufModel::open(&path)
            .map_err(|e| e.to_string())
            .and_then(|model| {
                let tok = Tokenizer::from_gguf(model.header()).map_err(|e| e.to_string())?;
                let prompt = tok.encode(PROMPT, true, false).map_err(|e| e.to_string())?;
                Ok((model, prompt))
            });
        match loaded {
            Ok((model, prompt)) => cases.push(DecodeCase {
                name: m.name.clone(),
                model: Arc::new(model),
                prompt,
            }),
            Err(e) => problems.push(format!("{}: cannot load: {e}", m.name)),
        }
    }
    (cases, problems)
}

/// Fold load problems into a verdict: any problem makes the gate red.
fn with_problems(verdict: Verdict, problems: Vec<String>) -> Verdict {
    if problems.is_empty() {
        return verdict;
    }
    match verdict {
        Verdict::Red { mut failures } => {
            failures.extend(problems);
            Verdict::Red { failures }
        }
        _ => Verdict::from_failures(problems),
    }
}

fn decode_outcome(verdict: Verdict, detail: Vec<String>, n_tokens: usize) -> GateOutcome {
    GateOutcome {
        verdict,
        detail,
        model: None,
        workload: Workload {
            mode: Some("gate".into()),
            gen_tokens: Some(n_tokens as u64),
            sampling: Some("greedy".into()),
            ..Workload::default()
        },
    }
}

fn kernel_check(ctx: &GateContext) -> GateOutcome {
    if let Some(reason) = no_gpu_reason(ctx) {
        return GateOutcome::new(Verdict::skipped(reason), Vec::new());
    }
    let mut cfg = KernelCheckConfig {
        seed: ctx.seed,
        ..KernelCheckConfig::default()
    };
    cfg.cuda.cubin_cache_dir = ctx.cubin_cache.clone();
    let report = run_kernel_check(&cfg);
    let mut verdict = report.verdict.clone();
    let on_disk = crate::identity::kernel_identity(&ctx.root).unwrap_or_default();
    if report.kernel_identity != on_disk && !matches!(verdict, Verdict::Skipped { .. }) {
        let why = format!(
            "kernels compiled into this binary ({}) are not the tree's ({}): rebuild",
            &report.kernel_identity[..12.min(report.kernel_identity.len())],
            &on_disk[..12.min(on_disk.len())]
        );
        verdict = match verdict {
            Verdict::Red { mut failures } => {
                failures.insert(0, why);
                Verdict::Red { failures }
            }
            _ => Verdict::from_failures(vec![why]),
        };
    }
    let mut detail = vec![format!(
        "{} checks, seed {}{}",
        report.lines.len(),
        report.seed,
        report
            .device
            .as_ref()
            .map(|d| format!(", {} ({})", d.name, d.arch))
            .unwrap_or_default()
    )];
    detail.extend(report.render().lines().map(str::to_owned));
    GateOutcome {
        verdict,
        detail,
        model: None,
        workload: Workload {
            mode: Some("gate".into()),
            ..Workload::default()
        },
    }
}

/// The common frame of the per-model decode gates: skip without a GPU, open it, run
/// `check` on every decode case, render each line, and judge them with `judge` (load
/// problems of the cases are red too), then `finish` makes the outcome.
/// Which extra cases a per-model gate adds to [`decode_cases`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Extra {
    None,
    /// [`decode_check::wide_bf16_model`]: the prompt pass's two-part fallback.
    WideBf16,
}

fn per_model_gate<L>(
    ctx: &GateContext,
    extra: Extra,
    check: impl Fn(&Arc<Gpu>, &DecodeCase) -> L,
    render: impl Fn(&L) -> String,
    judge: impl Fn(&[L]) -> Verdict,
    header: impl Fn(usize) -> String,
    finish: impl FnOnce(Verdict, Vec<String>) -> GateOutcome,
) -> GateOutcome {
    if let Some(reason) = no_gpu_reason(ctx) {
        return GateOutcome::new(Verdict::skipped(reason), Vec::new());
    }
    let gpu = match open_gpu(ctx) {
        Ok(g) => g,
        Err(e) => return GateOutcome::new(Verdict::from_failures(vec![e]), Vec::new()),
    };
    let (mut cases, mut problems) = decode_cases(ctx);
    if extra == Extra::WideBf16 {
        match decode_check::wide_bf16_model() {
            Ok(c) => cases.push(c),
            Err(e) => problems.push(format!("cannot build the wide BF16 model: {e}")),
        }
    }
    let lines: Vec<L> = cases.iter().map(|c| check(&gpu, c)).collect();
    let mut detail = vec![header(lines.len())];
    detail.extend(lines.iter().map(render));
    finish(with_problems(judge(&lines), problems), detail)
}

fn argmax(ctx: &GateContext) -> GateOutcome {
    let cfg = DecodeCheckConfig::default();
    per_model_gate(
        ctx,
        Extra::None,
        |gpu, c| check_model(gpu, c, &cfg),
        |l| l.render(),
        decode_check::verdict,
        |n| {
            format!(
                "{n} models, {} greedy steps each, near-tie <= {} logits",
                cfg.n_tokens, cfg.near_tie
            )
        },
        |verdict, detail| decode_outcome(verdict, detail, cfg.n_tokens),
    )
}

fn graph(ctx: &GateContext) -> GateOutcome {
    let cfg = GraphCheckConfig::default();
    per_model_gate(
        ctx,
        Extra::None,
        |gpu, c| graph_check::check_model(gpu, c, &cfg),
        |l| l.render(),
        graph_check::verdict,
        |n| format!("{n} models, {} tokens each", cfg.n_tokens),
        |verdict, detail| decode_outcome(verdict, detail, cfg.n_tokens),
    )
}

fn chunking(ctx: &GateContext) -> GateOutcome {
    let cfg = ChunkingConfig::default();
    per_model_gate(
        ctx,
        Extra::WideBf16,
        |gpu, c| chunk_check::check_model(gpu, c, &cfg),
        |l| l.render(),
        chunk_check::verdict,
        |n| format!("{n} models, {} prompt tokens each", cfg.prompt_tokens),
        |verdict, detail| GateOutcome {
            verdict,
            detail,
            model: None,
            workload: Workload {
                mode: Some("gate".into()),
                prompt_tokens: Some(cfg.prompt_tokens as u64),
                ..Workload::default()
            },
        },
    )
}

fn batch(ctx: &GateContext) -> GateOutcome {
    let cfg = BatchConfig {
        seed: ctx.seed,
        ..BatchConfig::default()
    };
    let fault = std::env::var("ASSAY_BATCH_PLANT_FAULT").is_ok_and(|v| v == "1");
    // The batched step as CUDA graphs (the default) or eager (ASSAY_BATCH_GRAPH=0): the
    // receipt says which one the gate checked (an invalid value fails the steps themselves).
    let mode = match engine::cuda::decode::batch_graphs_from_env() {
        Ok(true) => ", batched step as CUDA graphs",
        Ok(false) => ", batched step eager (ASSAY_BATCH_GRAPH=0)",
        Err(_) => "",
    };
    let n_tokens = cfg.n_tokens;
    per_model_gate(
        ctx,
        Extra::None,
        |gpu, c| batch_check::check_model(gpu, c, &cfg, fault),
        |l| l.render(),
        batch_check::verdict,
        |n| {
            format!(
                "{n} models, {} greedy tokens, batches of {:?}{mode}{}",
                cfg.n_tokens,
                cfg.sizes,
                if fault {
                    " (planted fault: last row's hidden state negated, ASSAY_BATCH_PLANT_FAULT)"
                } else {
                    ""
                }
            )
        },
        |verdict, detail| decode_outcome(verdict, detail, n_tokens),
    )
}

fn prefill(ctx: &GateContext) -> GateOutcome {
    let cfg = PrefillCheckConfig {
        fault: std::env::var("ASSAY_PREFILL_PLANT_FAULT").is_ok_and(|v| v == "1"),
        ..PrefillCheckConfig::default()
    };
    let n_tokens = cfg.lengths.iter().copied().max().unwrap_or(0);
    per_model_gate(
        ctx,
        Extra::WideBf16,
        |gpu, c| prefill_check::check_model(gpu, c, &cfg),
        |l| l.render(),
        prefill_check::verdict,
        |n| {
            format!(
                "{n} models, prompts of {:?} tokens, tolerance {:.0e} (tiled pass) / {:.0e} (ASSAY_GEMM=v1) of the largest logit, near-tie <= {}{}",
                cfg.lengths,
                cfg.tol_tiled,
                cfg.tol,
                cfg.near_tie,
                if cfg.fault {
                    " (planted fault: chunk 0's scale dropped in every GEMM, ASSAY_PREFILL_PLANT_FAULT)"
                } else {
                    ""
                }
            )
        },
        |verdict, detail| GateOutcome {
            verdict,
            detail,
            model: None,
            workload: Workload {
                mode: Some("gate".into()),
                prompt_tokens: Some(n_tokens as u64),
                ..Workload::default()
            },
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_gpu_every_gpu_gate_skips_with_a_reason() {
        let ctx = crate::bare_context();
        for g in gates() {
            assert!(g.needs_gpu);
            match (g.run)(&ctx).verdict {
                Verdict::Skipped { reason } => assert!(reason.contains("no GPU"), "{reason}"),
                v => panic!("{}: {v:?}", g.name),
            }
        }
    }
}
