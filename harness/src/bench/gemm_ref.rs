//! The bf16 GEMM reference of a prefill cell (issue 8's target): after the cell's arms, in
//! the same run, torch times bf16 products of the model's linear-layer shapes at M = the
//! prompt's tokens ([`SCRIPT`], run by the Python of `--torch-python` /
//! `ASSAY_TORCH_PYTHON`). The harness derives the shapes from the GGUF's `blk.N.*` weights
//! (q, k and v fused, gate and up fused, as the engine runs them), counts the FLOPs
//! (2 M N K summed) and makes the receipt's [`GemmRef`]; the target is half that rate over
//! 2 x params FLOPs per token ([`prefill_target_tok_s`]). No torch, no CUDA, a failing or
//! garbled script: the reference is recorded as absent with the reason, and the cell
//! stands.

use std::ffi::OsStr;
use std::fmt::Write;
use std::process::Command;
use std::time::Duration;

use engine::model_file::GgufHeader;
use gates::receipt::{GemmRef, Receipt, Stats, prefill_target_tok_s, validate_gemm_ref};
use serde::Deserialize;

use super::llamacpp::run_captured;

/// The timing script (run with `python3 -c SCRIPT REQUEST`).
pub const SCRIPT: &str = include_str!("../../py/gemm_ref.py");

/// The prefix of the script's one result line.
pub const MARK: &str = "GEMM_REF";

/// Warm-up of the timing: at least this many reps and this many seconds (clocks up).
pub const WARMUP_REPS: usize = 3;
pub const WARMUP_S: f64 = 1.0;

/// One product of a rep: `count` times [M x K] x [K x N].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gemm {
    /// The weights it stands for, e.g. `q+k+v`.
    pub what: String,
    pub k: u64,
    pub n: u64,
    /// How many layers run it.
    pub count: u64,
}

/// The weights of a layer that read the same input, fused into one product, and their
/// short names.
const GROUPS: &[&[(&str, &str)]] = &[
    &[("attn_q", "q"), ("attn_k", "k"), ("attn_v", "v")],
    &[("attn_qkv", "qkv")],
    &[("attn_output", "o")],
    &[("ffn_gate", "gate"), ("ffn_up", "up")],
    &[("ffn_down", "down")],
];

/// The linear-layer products of a model from its tensors (name, GGUF dims: `dims[0]` is
/// the input width K, `dims[1]` the output width N): per layer `blk.N`, the 2-D weights of
/// [`GROUPS`], each group of the same K fused; identical products of all layers counted
/// together, in layer order. The output head and embeddings are left out (a prompt pass
/// needs logits for its last token only).
pub fn linear_gemms<'a>(
    tensors: impl IntoIterator<Item = (&'a str, &'a [u64])>,
) -> Result<Vec<Gemm>, String> {
    use std::collections::BTreeMap;
    let mut layers: BTreeMap<u64, BTreeMap<&str, (u64, u64)>> = BTreeMap::new();
    for (name, dims) in tensors {
        let Some((idx, rest)) = name.strip_prefix("blk.").and_then(|r| r.split_once('.')) else {
            continue;
        };
        let (Ok(idx), Some(base)) = (idx.parse::<u64>(), rest.strip_suffix(".weight")) else {
            continue;
        };
        if let [k, n] = dims {
            layers.entry(idx).or_default().insert(base, (*k, *n));
        }
    }
    let mut out: Vec<Gemm> = Vec::new();
    for weights in layers.values() {
        for group in GROUPS {
            // (K, names, N) per input width among the group's weights present.
            let mut fused: Vec<(u64, Vec<&str>, u64)> = Vec::new();
            for &(name, short) in *group {
                let Some(&(k, n)) = weights.get(name) else {
                    continue;
                };
                match fused.iter_mut().find(|f| f.0 == k) {
                    Some(f) => {
                        f.1.push(short);
                        f.2 += n;
                    }
                    None => fused.push((k, vec![short], n)),
                }
            }
            for (k, names, n) in fused {
                let what = names.join("+");
                match out
                    .iter_mut()
                    .find(|g| g.what == what && g.k == k && g.n == n)
                {
                    Some(g) => g.count += 1,
                    None => out.push(Gemm {
                        what,
                        k,
                        n,
                        count: 1,
                    }),
                }
            }
        }
    }
    if out.is_empty() {
        return Err(
            "the model has no blk.N linear weights (attn_q / attn_output / ffn_up ...) to time"
                .into(),
        );
    }
    Ok(out)
}

/// FLOPs of one rep at `m` rows: 2 M N K per product.
pub fn flops_per_rep(m: u64, gemms: &[Gemm]) -> f64 {
    gemms
        .iter()
        .map(|g| 2.0 * m as f64 * g.n as f64 * g.k as f64 * g.count as f64)
        .sum()
}

/// The products as the receipt lists them, e.g. `512x4096 -> 6144 x32 (q+k+v)`.
pub fn shape_names(m: u64, gemms: &[Gemm]) -> Vec<String> {
    gemms
        .iter()
        .map(|g| format!("{m}x{} -> {} x{} ({})", g.k, g.n, g.count, g.what))
        .collect()
}

/// What the script answered.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// Milliseconds of every timed rep, and what timed them.
    Timed {
        ms: Vec<f64>,
        torch: String,
        cuda: Option<String>,
        device: String,
        method: String,
    },
    /// No measurement, and why (no torch, no CUDA, a failure inside the script).
    Absent(String),
}

/// The JSON of the result line.
#[derive(Deserialize)]
struct Raw {
    absent: Option<String>,
    ms: Option<Vec<f64>>,
    torch: Option<String>,
    cuda: Option<String>,
    device: Option<String>,
    method: Option<String>,
}

/// The script's reply from its stdout: the last `GEMM_REF {json}` line; an error says
/// what is wrong with output that has none or a broken one.
pub fn parse_reply(stdout: &str) -> Result<Reply, String> {
    let Some(json) = stdout
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix(MARK))
    else {
        let tail: Vec<&str> = stdout.lines().rev().take(3).collect();
        return Err(format!(
            "no `{MARK}` line in its output (last lines: {:?})",
            tail.into_iter().rev().collect::<Vec<_>>()
        ));
    };
    let raw: Raw = serde_json::from_str(json.trim())
        .map_err(|e| format!("unreadable `{MARK}` line ({e}): {}", json.trim()))?;
    if let Some(why) = raw.absent {
        let why = why.trim();
        return Ok(Reply::Absent(if why.is_empty() {
            "the script gave no reason".into()
        } else {
            why.to_owned()
        }));
    }
    let ms = raw.ms.ok_or("no `ms` in the reply")?;
    if ms.is_empty() || ms.iter().any(|t| !t.is_finite() || *t <= 0.0) {
        return Err(format!("rep times must be positive milliseconds: {ms:?}"));
    }
    Ok(Reply::Timed {
        ms,
        torch: raw.torch.ok_or("no `torch` version in the reply")?,
        cuda: raw.cuda,
        device: raw.device.ok_or("no `device` in the reply")?,
        method: raw.method.unwrap_or_else(|| "torch bf16 products".into()),
    })
}

/// What a cell's reference times: M, the products, the model's parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub m: u64,
    /// The products, or why the model's could not be found.
    pub gemms: Result<Vec<Gemm>, String>,
    pub params: u64,
    /// Timed reps (N >= 5).
    pub reps: usize,
}

impl Request {
    /// The request of a prompt of `m` tokens on the model of header `h`, timed `reps`
    /// times.
    pub fn of_model(h: &GgufHeader, m: u64, reps: usize) -> Request {
        Request {
            m,
            gemms: linear_gemms(
                h.tensors
                    .iter()
                    .map(|t| (t.name.as_str(), t.dims.as_slice())),
            ),
            params: h.tensors.iter().map(|t| t.elems).sum(),
            reps,
        }
    }

    /// The JSON argument of the script.
    pub fn json(&self, gemms: &[Gemm]) -> String {
        serde_json::json!({
            "m": self.m,
            "shapes": gemms.iter().map(|g| [g.k, g.n, g.count]).collect::<Vec<_>>(),
            "reps": self.reps,
            "warmup": WARMUP_REPS,
            "warmup_s": WARMUP_S,
        })
        .to_string()
    }

    /// The reference recorded as absent for `why`.
    pub fn absent(&self, why: String) -> GemmRef {
        let gemms = self.gemms.as_deref().unwrap_or_default();
        GemmRef {
            absent: Some(why),
            samples: Vec::new(),
            stats: None,
            tflops: None,
            shapes: shape_names(self.m, gemms),
            flops_per_rep: flops_per_rep(self.m, gemms),
            params: self.params,
            method: "torch bf16 products of the model's linear layers, not run".into(),
            torch: None,
            device: None,
        }
    }

    /// The receipt's reference from the script's reply (or why there is none). Never
    /// invalid: a reply the receipt schema would refuse is recorded as absent.
    pub fn gemm_ref(&self, reply: Result<Reply, String>) -> GemmRef {
        let gemms = match &self.gemms {
            Ok(g) => g,
            Err(e) => return self.absent(e.clone()),
        };
        let (ms, torch, cuda, device, method) = match reply {
            Err(e) => return self.absent(format!("the GEMM script's output: {e}")),
            Ok(Reply::Absent(why)) => return self.absent(why),
            Ok(Reply::Timed {
                ms,
                torch,
                cuda,
                device,
                method,
            }) => (ms, torch, cuda, device, method),
        };
        let flops = flops_per_rep(self.m, gemms);
        let samples: Vec<f64> = ms.iter().map(|t| flops / (t * 1e-3) / 1e12).collect();
        let stats = Stats::of(&samples);
        let g = GemmRef {
            absent: None,
            tflops: stats.map(|s| s.median),
            stats,
            samples,
            shapes: shape_names(self.m, gemms),
            flops_per_rep: flops,
            params: self.params,
            method: format!("{method}, {} timed rep(s)", ms.len()),
            torch: Some(match cuda {
                Some(c) => format!("{torch} (CUDA {c})"),
                None => torch,
            }),
            device: Some(device),
        };
        let bad = validate_gemm_ref(&g);
        if bad.is_empty() {
            g
        } else {
            self.absent(format!("the GEMM script's reply: {}", bad.join("; ")))
        }
    }

    /// [`Request::measure`], once per process for the same products, prompt length and
    /// reps: a later cell of the run with the same linear shapes (another format of the
    /// same model shape) takes the measured reference (its own parameter count), so that a
    /// board run pays the Python start-up and the timing once per prompt length. Absent
    /// references are not kept (the next cell tries again).
    pub fn measure_cached(&self, python: &OsStr, timeout: Duration) -> GemmRef {
        static DONE: std::sync::Mutex<Vec<(String, GemmRef)>> = std::sync::Mutex::new(Vec::new());
        let key = match &self.gemms {
            Ok(g) => self.json(g),
            Err(e) => return self.absent(e.clone()),
        };
        if let Ok(done) = DONE.lock()
            && let Some((_, g)) = done.iter().find(|(k, _)| *k == key)
        {
            let mut g = g.clone();
            g.params = self.params;
            g.method = format!("{} (measured once in this run for these shapes)", g.method);
            return g;
        }
        let g = self.measure(python, timeout);
        if g.absent.is_none()
            && let Ok(mut done) = DONE.lock()
        {
            done.push((key, g.clone()));
        }
        g
    }

    /// Run the script with `python` (waiting at most `timeout`) and make the reference.
    pub fn measure(&self, python: &OsStr, timeout: Duration) -> GemmRef {
        let gemms = match &self.gemms {
            Ok(g) => g,
            Err(e) => return self.absent(e.clone()),
        };
        let mut cmd = Command::new(python);
        cmd.arg("-c").arg(SCRIPT).arg(self.json(gemms));
        match run_captured(&mut cmd, timeout) {
            Ok((stdout, _)) => self.gemm_ref(parse_reply(&stdout)),
            Err(e) => self.absent(format!(
                "{} could not run the GEMM script (set --torch-python / ASSAY_TORCH_PYTHON \
                 to a Python with torch): {e:#}",
                python.to_string_lossy()
            )),
        }
    }
}

/// The target of a reference, when it was measured.
pub fn target(g: &GemmRef) -> Option<f64> {
    g.tflops.map(|t| prefill_target_tok_s(t, g.params))
}

/// What a cell's console line adds for its reference: the rate and target with each
/// arm's fraction of it, or why it is absent; empty without one.
pub fn line_suffix(r: &Receipt) -> String {
    let Some(g) = &r.gemm_ref else {
        return String::new();
    };
    let mut s = String::new();
    match (&g.absent, g.stats, r.target_tok_s) {
        (Some(why), _, _) => {
            let _ = write!(s, "; bf16 GEMM reference absent: {why}");
        }
        (None, Some(st), Some(t)) => {
            let _ = write!(
                s,
                "; bf16 GEMM {:.1} TFLOP/s (min {:.1}, max {:.1}, N={}, {}, {}) -> target {:.1} tok/s",
                st.median,
                st.min,
                st.max,
                g.samples.len(),
                g.torch.as_deref().unwrap_or("torch"),
                g.device.as_deref().unwrap_or("?"),
                t
            );
            for a in &r.arms {
                if let Some(m) = a.stats.map(|x| x.median) {
                    let _ = write!(s, ", {} {:.1}% of it", a.name, 100.0 * m / t);
                }
            }
        }
        _ => {}
    }
    s
}

#[cfg(test)]
#[path = "gemm_ref_tests.rs"]
mod tests;
