//! The receipt: one JSON object per line of `research/*.jsonl`, one schema for every kind
//! (gate, bench, pair, report), versioned by `schema`, validated on read and before every
//! append. Unknown fields are refused, so a receipt cannot carry a field no reader checks.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::Verdict;
use crate::clock::parse_utc;
use crate::device::DeviceFacts;

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: u32 = 1;

/// What a receipt records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// One gate of the battery.
    Gate,
    /// One bench cell of our engine alone.
    Bench,
    /// One bench cell with several engines, interleaved in the same run.
    Pair,
    /// A hardware validation report was produced.
    Report,
}

impl Kind {
    /// The lowercase name used in file names and tables.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Gate => "gate",
            Kind::Bench => "bench",
            Kind::Pair => "pair",
            Kind::Report => "report",
        }
    }
}

/// What was built and measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Build {
    /// `git rev-parse HEAD`, or `unknown` outside a checkout (then `dirty` is true).
    pub commit: String,
    /// Uncommitted changes (tracked or untracked) were present.
    pub dirty: bool,
    /// sha256 over the kernel sources ([`crate::identity::kernel_identity`]).
    pub kernel_identity: String,
    /// sha256 over `engine/src/**` and `kernels/**` ([`crate::identity::engine_identity`]).
    pub engine_identity: String,
    /// Harness version and build profile, e.g. `0.1.0 release`.
    pub harness: String,
}

/// Count and bytes of the tensors of one format.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CensusEntry {
    pub tensors: u64,
    pub bytes: u64,
}

/// The model a receipt ran on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFacts {
    /// Catalog name, or the file stem of a synthetic checkpoint.
    pub name: String,
    /// File name (no directory).
    pub file: String,
    /// sha256 of the whole file.
    pub sha256: String,
    pub bytes: u64,
    /// `general.architecture`.
    pub arch: String,
    /// Per format name: tensor count and data bytes.
    pub census: BTreeMap<String, CensusEntry>,
}

/// What was run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Board the cell belongs to (bench and pair).
    pub board: Option<String>,
    /// `decode`, `prefill`, `gate`, ...
    pub mode: Option<String>,
    pub prompt_id: Option<String>,
    pub prompt_tokens: Option<u64>,
    pub gen_tokens: Option<u64>,
    pub batch: Option<u64>,
    /// Speculative depth.
    pub k: Option<u64>,
    /// `greedy`, or the sampler's settings.
    pub sampling: Option<String>,
    /// CPU threads used, where it matters.
    pub threads: Option<u64>,
}

/// Median, minimum and maximum of an arm's samples.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stats {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Stats {
    /// Statistics of `samples`; `None` when empty or not all finite.
    pub fn of(samples: &[f64]) -> Option<Stats> {
        if samples.is_empty() || samples.iter().any(|v| !v.is_finite()) {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        let n = s.len();
        let median = if n % 2 == 1 {
            s[n / 2]
        } else {
            (s[n / 2 - 1] + s[n / 2]) / 2.0
        };
        Some(Stats {
            median,
            min: s[0],
            max: s[n - 1],
        })
    }
}

/// One engine as it was run: identity, exact flags, raw samples.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Arm {
    /// Short label, e.g. `assay` or `llama.cpp`.
    pub name: String,
    /// What ran, e.g. `assay-reference-cpu`, `assay-cuda`, `llama-bench`.
    pub engine: String,
    pub version: String,
    /// The exact flags / options it ran with.
    pub flags: Vec<String>,
    /// Unit of the samples, e.g. `tok/s` (absent when there are none).
    pub unit: Option<String>,
    /// Every timed sample (warm-up excluded), in run order.
    pub samples: Vec<f64>,
    pub stats: Option<Stats>,
    /// Median over the roofline limit (decode cells).
    pub roofline_fraction: Option<f64>,
}

/// The physical limit of a decode cell, measured in the same run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Roofline {
    /// Weight + KV bytes that must be read per generated token.
    pub bytes_per_token: f64,
    /// Bandwidth measured in this run (bytes/s, read + write counted).
    pub bandwidth_bytes_per_s: f64,
    /// How the bandwidth was measured, e.g. `memcpy 1 GiB x 5 (CPU)`.
    pub bandwidth_method: String,
    /// `bandwidth / bytes_per_token`, tokens/s.
    pub limit_tokens_per_s: f64,
}

/// The bf16 GEMM rate of a prefill cell, measured in the same run as its arms: the model's
/// linear-layer shapes at M = the prompt's tokens, timed with torch (cuBLAS). Half of it over
/// 2 x params FLOPs per token is the cell's target ([`prefill_target_tok_s`]). A reference
/// that could not be measured keeps its reason in `absent`, with no samples.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GemmRef {
    /// Why there is no measurement (no torch, no CUDA, the timing failed); `None` when
    /// measured.
    pub absent: Option<String>,
    /// TFLOP/s of every timed rep (warm-up excluded), in run order.
    pub samples: Vec<f64>,
    pub stats: Option<Stats>,
    /// The median of `samples`: the rate the target uses.
    pub tflops: Option<f64>,
    /// The products of one rep, e.g. `512x4096 -> 6144 x32 (q+k+v)`: M x K -> N, x layers.
    pub shapes: Vec<String>,
    /// FLOPs of one rep (2 M N K summed over the products).
    pub flops_per_rep: f64,
    /// Parameters of the model (every tensor's elements): 2 x params FLOPs per token.
    pub params: u64,
    /// How it was timed (API, timer, warm-up).
    pub method: String,
    /// `torch.__version__` and its CUDA version.
    pub torch: Option<String>,
    /// The device torch timed on.
    pub device: Option<String>,
}

/// The prefill target of issue 8: half the measured bf16 GEMM rate (`tflops`, TFLOP/s)
/// over 2 x `params` FLOPs per token, in tokens/s.
pub fn prefill_target_tok_s(tflops: f64, params: u64) -> f64 {
    0.5 * tflops * 1e12 / (2.0 * params as f64)
}

/// One receipt row.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Receipt {
    pub schema: u32,
    pub kind: Kind,
    /// Gate name, bench cell id, or report name.
    pub name: String,
    /// UTC, `YYYY-MM-DDTHH:MM:SSZ`.
    pub time: String,
    pub build: Build,
    pub device: DeviceFacts,
    pub model: Option<ModelFacts>,
    pub workload: Workload,
    pub arms: Vec<Arm>,
    pub roofline: Option<Roofline>,
    /// Prefill cells: the bf16 GEMM reference measured in the same run (absent from rows
    /// written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gemm_ref: Option<GemmRef>,
    /// Prefill cells: [`prefill_target_tok_s`] of the GEMM reference, when it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_tok_s: Option<f64>,
    pub verdict: Verdict,
    /// Human lines: what was checked, numbers seen.
    pub detail: Vec<String>,
    /// Seconds the whole gate / cell took.
    pub wall_s: f64,
}

/// A receipt that breaks the schema.
#[derive(Debug, thiserror::Error)]
pub enum ReceiptError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {why}")]
    Invalid {
        path: PathBuf,
        line: usize,
        why: String,
    },
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-300)
}

/// Every schema rule a parsed receipt must also satisfy; the list of broken rules.
pub fn validate(r: &Receipt) -> Vec<String> {
    let mut bad = Vec::new();
    if r.schema != SCHEMA_VERSION {
        bad.push(format!(
            "schema {} (this build reads {SCHEMA_VERSION})",
            r.schema
        ));
    }
    if r.name.trim().is_empty() {
        bad.push("empty name".into());
    }
    if parse_utc(&r.time).is_none() {
        bad.push(format!("time {:?} is not YYYY-MM-DDTHH:MM:SSZ", r.time));
    }
    let b = &r.build;
    if !(is_hex(&b.commit, 40) || (b.commit == "unknown" && b.dirty)) {
        bad.push(format!(
            "commit {:?} is neither 40 hex digits nor `unknown` (dirty)",
            b.commit
        ));
    }
    for (what, id) in [
        ("kernel", &b.kernel_identity),
        ("engine", &b.engine_identity),
    ] {
        if !is_hex(id, 64) {
            bad.push(format!("{what} identity {id:?} is not a sha256"));
        }
    }
    if let Some(m) = &r.model
        && !is_hex(&m.sha256, 64)
    {
        bad.push(format!("model sha256 {:?} is not a sha256", m.sha256));
    }
    if r.arms.is_empty() {
        bad.push("no arm".into());
    }
    let measured = matches!(r.kind, Kind::Bench | Kind::Pair) && r.verdict == Verdict::Green;
    if r.kind == Kind::Pair && measured && r.arms.len() < 2 {
        bad.push("a pair needs at least two arms".into());
    }
    for a in &r.arms {
        if a.samples.iter().any(|v| !v.is_finite()) {
            bad.push(format!("arm {}: non-finite sample", a.name));
        }
        if a.stats != Stats::of(&a.samples) {
            bad.push(format!("arm {}: stats do not match its samples", a.name));
        }
        if !a.samples.is_empty() && a.unit.is_none() {
            bad.push(format!("arm {}: samples without a unit", a.name));
        }
        if measured && a.samples.len() < 5 {
            bad.push(format!(
                "arm {}: {} samples (a measurement needs N >= 5)",
                a.name,
                a.samples.len()
            ));
        }
        match (&r.roofline, a.roofline_fraction, a.stats) {
            (Some(roof), Some(f), Some(s)) if !close(f, s.median / roof.limit_tokens_per_s) => {
                bad.push(format!(
                    "arm {}: roofline fraction {f} != median / limit",
                    a.name
                ));
            }
            (None, Some(_), _) | (_, Some(_), None) => {
                bad.push(format!("arm {}: roofline fraction without a limit", a.name));
            }
            _ => {}
        }
    }
    if let Some(roof) = &r.roofline {
        let vals = [
            roof.bytes_per_token,
            roof.bandwidth_bytes_per_s,
            roof.limit_tokens_per_s,
        ];
        if vals.iter().any(|v| !v.is_finite() || *v <= 0.0) {
            bad.push("roofline values must be positive".into());
        } else if !close(
            roof.limit_tokens_per_s,
            roof.bandwidth_bytes_per_s / roof.bytes_per_token,
        ) {
            bad.push("roofline limit != bandwidth / bytes per token".into());
        }
    }
    if let Some(g) = &r.gemm_ref {
        bad.extend(validate_gemm_ref(g));
    }
    let target = r
        .gemm_ref
        .as_ref()
        .and_then(|g| g.tflops.map(|t| prefill_target_tok_s(t, g.params)));
    match (r.target_tok_s, target) {
        (Some(t), Some(want)) if !close(t, want) => {
            bad.push(format!(
                "target_tok_s {t} != 0.5 x GEMM rate / (2 x params) = {want}"
            ));
        }
        (Some(_), None) => bad.push("target_tok_s without a measured GEMM reference".into()),
        (None, Some(_)) => bad.push("a measured GEMM reference without target_tok_s".into()),
        _ => {}
    }
    match &r.verdict {
        Verdict::Red { failures } if failures.is_empty() => {
            bad.push("red verdict without a failure".into());
        }
        Verdict::Skipped { reason } if reason.trim().is_empty() => {
            bad.push("skipped verdict without a reason".into());
        }
        _ => {}
    }
    if !r.wall_s.is_finite() || r.wall_s < 0.0 {
        bad.push(format!("wall_s {} is not a duration", r.wall_s));
    }
    bad
}

/// The rules of a GEMM reference: either absent with a reason and no samples, or N >= 5
/// positive samples whose stats and median it records, over positive FLOPs and params.
pub fn validate_gemm_ref(g: &GemmRef) -> Vec<String> {
    let mut bad = Vec::new();
    if let Some(why) = &g.absent {
        if why.trim().is_empty() {
            bad.push("gemm_ref absent without a reason".into());
        }
        if !g.samples.is_empty() || g.tflops.is_some() {
            bad.push("gemm_ref absent but with samples".into());
        }
        return bad;
    }
    if g.samples.len() < 5 {
        bad.push(format!(
            "gemm_ref: {} samples (a measurement needs N >= 5)",
            g.samples.len()
        ));
    }
    if g.samples.iter().any(|v| !v.is_finite() || *v <= 0.0) {
        bad.push("gemm_ref: samples must be positive".into());
    }
    if g.stats != Stats::of(&g.samples) {
        bad.push("gemm_ref: stats do not match its samples".into());
    }
    if g.tflops != g.stats.map(|s| s.median) {
        bad.push("gemm_ref: tflops is not the median of its samples".into());
    }
    if !g.flops_per_rep.is_finite() || g.flops_per_rep <= 0.0 || g.params == 0 {
        bad.push("gemm_ref: flops_per_rep and params must be positive".into());
    }
    bad
}

/// Parse and validate one line.
pub fn parse_line(line: &str) -> Result<Receipt, String> {
    // Read the version first, so an old or new schema gets a clear message rather than a
    // field error.
    let raw: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
    match raw.get("schema").and_then(serde_json::Value::as_u64) {
        Some(v) if v == u64::from(SCHEMA_VERSION) => {}
        Some(v) => return Err(format!("schema {v} (this build reads {SCHEMA_VERSION})")),
        None => return Err("no `schema` version".into()),
    }
    let r: Receipt = serde_json::from_value(raw).map_err(|e| e.to_string())?;
    let bad = validate(&r);
    if bad.is_empty() {
        Ok(r)
    } else {
        Err(bad.join("; "))
    }
}

/// Read and validate every receipt of a JSONL file (blank lines are allowed).
pub fn read_jsonl(path: &Path) -> Result<Vec<Receipt>, ReceiptError> {
    let text = std::fs::read_to_string(path).map_err(|source| ReceiptError::Io {
        path: path.to_owned(),
        source,
    })?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        out.push(parse_line(line).map_err(|why| ReceiptError::Invalid {
            path: path.to_owned(),
            line: i + 1,
            why,
        })?);
    }
    Ok(out)
}

/// Every `*.jsonl` file directly under `dir`, sorted by name.
pub fn jsonl_files(dir: &Path) -> Result<Vec<PathBuf>, ReceiptError> {
    let io = |source| ReceiptError::Io {
        path: dir.to_owned(),
        source,
    };
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).map_err(io)? {
        let p = e.map_err(io)?.path();
        if p.extension().is_some_and(|x| x == "jsonl") && p.is_file() {
            files.push(p);
        }
    }
    files.sort();
    Ok(files)
}

/// Validate `r` and append it as one line to `path` (created with its folder if absent).
pub fn append(path: &Path, r: &Receipt) -> Result<(), ReceiptError> {
    let invalid = |why: String| ReceiptError::Invalid {
        path: path.to_owned(),
        line: 0,
        why,
    };
    let bad = validate(r);
    if !bad.is_empty() {
        return Err(invalid(format!("refusing to write: {}", bad.join("; "))));
    }
    let line = serde_json::to_string(r).map_err(|e| invalid(e.to_string()))?;
    let io = |source| ReceiptError::Io {
        path: path.to_owned(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io)?;
    f.write_all(format!("{line}\n").as_bytes()).map_err(io)
}

#[cfg(test)]
#[path = "receipt_tests.rs"]
mod tests;
