//! Gates: each gate is a function that runs a check and returns a [`Verdict`]; the battery
//! ([`battery`]) lists them with what they need, and the harness runs it, prints one line
//! per gate and writes one receipt row per gate.
//!
//! Owns: [`Verdict`], the gate registry ([`GateDef`], [`GateContext`], [`GateOutcome`],
//! [`Progress`]), and the receipt schema and its stamp (time, build identity, device) in [`receipt`],
//! [`stamp`], [`identity`], [`device`], [`clock`]. Gates live one family per file:
//! [`cpu_gates`], [`reference_gates`] and [`served_gate`] (run everywhere), [`gpu_gates`] (skip with a reason
//! without a GPU).

pub mod batch;
pub mod chunking;
pub mod clock;
pub mod cpu_gates;
pub mod decode_check;
pub mod device;
pub mod fixtures;
pub mod gpu_gates;
pub mod graph_check;
pub mod identity;
pub mod kernel_check;
pub mod model_facts;
pub mod model_files;
pub mod prefill_check;
pub mod quant_golden;
pub mod receipt;
pub mod reference_gates;
pub mod served_gate;
pub mod spec_gates;
pub mod stamp;

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use receipt::{ModelFacts, Workload};

/// The outcome of one gate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum Verdict {
    /// Every check passed.
    Green,
    /// At least one check failed; each string says which and why.
    Red { failures: Vec<String> },
    /// The gate could not run here (e.g. no GPU); the string says why.
    Skipped { reason: String },
}

impl Verdict {
    /// Green when `failures` is empty, else red with them.
    pub fn from_failures(failures: Vec<String>) -> Verdict {
        if failures.is_empty() {
            Verdict::Green
        } else {
            Verdict::Red { failures }
        }
    }

    /// A skip with `reason`.
    pub fn skipped(reason: impl Into<String>) -> Verdict {
        Verdict::Skipped {
            reason: reason.into(),
        }
    }

    pub fn is_red(&self) -> bool {
        matches!(self, Verdict::Red { .. })
    }

    /// `green`, `RED` or `skipped`.
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::Green => "green",
            Verdict::Red { .. } => "RED",
            Verdict::Skipped { .. } => "skipped",
        }
    }
}

/// Everything a gate may use, built once by the harness binary.
#[derive(Clone, Debug)]
pub struct GateContext {
    /// Repository root (kernels/, engine/tests/fixtures/, tools/).
    pub root: PathBuf,
    /// Folder of the real test models.
    pub models_dir: PathBuf,
    /// Catalog name of the default model.
    pub default_model: String,
    /// The short battery (pre-push): fewer models, fewer tokens.
    pub quick: bool,
    /// The full size where a gate's default is smaller (`harness gate --full`; today the
    /// CPU `spec` gate: K = 1..8 x 3 prompts x 128 tokens, the Qwen pair likewise).
    pub full: bool,
    /// Whether a GPU with a CUDA driver is present.
    pub gpu: bool,
    /// CPU threads the reference may use.
    pub threads: usize,
    /// Seed of random inputs (kernel-check); printed in the receipt so a red run replays.
    pub seed: u64,
    /// Cubin cache folder of the CUDA gates (`None`: compile every time).
    pub cubin_cache: Option<PathBuf>,
    /// Where a long gate reports each section it finished (the harness prints a line).
    pub progress: Progress,
}

/// A context for unit tests: no GPU, one thread, no models (`models_dir` is `.`).
#[cfg(test)]
pub(crate) fn bare_context() -> GateContext {
    GateContext {
        root: ".".into(),
        models_dir: ".".into(),
        default_model: "x".into(),
        quick: false,
        full: false,
        gpu: false,
        threads: 1,
        seed: 1,
        cubin_cache: None,
        progress: Progress::default(),
    }
}

/// A sink for progress lines of a long gate (one line per finished section); the default
/// drops them.
#[derive(Clone, Default)]
pub struct Progress(Option<Arc<ProgressFn>>);

/// What a [`Progress`] calls with each line.
pub type ProgressFn = dyn Fn(&str) + Send + Sync;

impl Progress {
    /// Lines go to `f`.
    pub fn new(f: impl Fn(&str) + Send + Sync + 'static) -> Progress {
        Progress(Some(Arc::new(f)))
    }

    /// Report one line.
    pub fn note(&self, line: &str) {
        if let Some(f) = &self.0 {
            f(line);
        }
    }
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Progress(sink)"
        } else {
            "Progress(none)"
        })
    }
}

/// What a gate reports besides its verdict.
#[derive(Clone, Debug, PartialEq)]
pub struct GateOutcome {
    pub verdict: Verdict,
    /// One line each: what was checked, numbers seen. The first is the summary.
    pub detail: Vec<String>,
    pub model: Option<ModelFacts>,
    pub workload: Workload,
}

impl GateOutcome {
    /// An outcome with only a verdict and detail lines.
    pub fn new(verdict: Verdict, detail: Vec<String>) -> Self {
        Self {
            verdict,
            detail,
            model: None,
            workload: Workload::default(),
        }
    }
}

/// One gate of the battery.
#[derive(Clone, Copy, Debug)]
pub struct GateDef {
    pub name: &'static str,
    /// What it checks, one line.
    pub about: &'static str,
    /// Needs a GPU (skipped with a reason without one).
    pub needs_gpu: bool,
    /// Part of `--quick`.
    pub quick: bool,
    pub run: fn(&GateContext) -> GateOutcome,
}

/// The whole battery, in run order.
pub fn battery() -> Vec<GateDef> {
    let mut gates = cpu_gates::gates();
    gates.extend(reference_gates::gates());
    gates.extend(served_gate::gates());
    gates.extend(spec_gates::gates());
    gates.extend(gpu_gates::gates());
    gates
}
