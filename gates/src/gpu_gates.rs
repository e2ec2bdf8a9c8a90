//! The gates that need a GPU: registered here so that every run lists them, and skipped
//! with the reason when they cannot run. `kernel-check` runs
//! [`crate::kernel_check::run`] and also requires that the kernels compiled into this
//! binary are the kernels of the tree the receipt names; `argmax` and `graph` arrive with
//! the CUDA decode path (issue 5).

use crate::kernel_check::{KernelCheckConfig, run as run_kernel_check};
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
    ]
}

/// Why a GPU gate cannot run here, if it cannot.
pub fn no_gpu_reason(ctx: &GateContext) -> Option<String> {
    (!ctx.gpu).then(|| "no GPU (nvidia-smi reports no device)".to_owned())
}

fn pending(ctx: &GateContext) -> GateOutcome {
    let reason = no_gpu_reason(ctx).unwrap_or_else(|| {
        "not implemented yet: arrives with the CUDA decode path (issue 5)".to_owned()
    });
    GateOutcome::new(Verdict::skipped(reason), Vec::new())
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

fn argmax(ctx: &GateContext) -> GateOutcome {
    pending(ctx)
}

fn graph(ctx: &GateContext) -> GateOutcome {
    pending(ctx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_gpu_every_gpu_gate_skips_with_a_reason() {
        let ctx = GateContext {
            root: ".".into(),
            models_dir: ".".into(),
            default_model: "x".into(),
            quick: false,
            gpu: false,
            threads: 1,
            seed: 1,
            cubin_cache: None,
        };
        for g in gates() {
            assert!(g.needs_gpu);
            match (g.run)(&ctx).verdict {
                Verdict::Skipped { reason } => assert!(reason.contains("no GPU"), "{reason}"),
                v => panic!("{}: {v:?}", g.name),
            }
        }
    }
}
