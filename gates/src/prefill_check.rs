//! prefill: the tensor-core prompt pass (`CudaDecoder::prefill` with
//! [`PrefillMode::Gemm`]) against the row path ([`PrefillMode::Rows`], the batched matvec
//! whose rows are the one-token kernels' bits) on the same prompts: the last row's arg-max
//! must be the same token (a disagreement is tolerated only as a near-tie: the row path's
//! margin between the two tokens at most [`PrefillCheckConfig::near_tie`], as in the
//! `argmax` gate) and the logits must agree within a tolerance of the largest |logit| that
//! depends on the prompt pass's kernel: [`PrefillCheckConfig::tol`] for `gemm.cu` (exact
//! weights), [`PrefillCheckConfig::tol_tiled`] for `gemmt.cu` (weights rounded once to f16)
//! (the engine of the `prefill` gate).
//!
//! The GEMM's x is f16 hi + lo by default; the same prompts are also run with x as f16 only
//! (reported, not judged) so the choice is recorded with its error. A planted fault
//! (`fault`: every row's first chunk of every product loses its scale) must turn the gate
//! red; [`judge`] is a pure function, tested with planted numbers without a GPU.

use crate::Verdict;
use crate::decode_check::{DecodeCase, argmax, classify};
use engine::cuda::ops::{GemmOpts, XParts};
use engine::cuda::select::GemmKernel;
use engine::cuda::{CudaDecoder, Gpu, PrefillMode};
use std::sync::Arc;

/// How to run the check.
#[derive(Clone, Debug)]
pub struct PrefillCheckConfig {
    /// Prompt lengths (the case's prompt repeated and cut).
    pub lengths: Vec<usize>,
    /// Largest tolerated max |gemm - rows| / max |rows| over the last row's logits, for the
    /// `gemm.cu` pass (`ASSAY_GEMM=v1`).
    pub tol: f32,
    /// The same for the tiled pass (`gemmt.cu`, the default).
    pub tol_tiled: f32,
    /// A different arg-max is a near-tie when the row path's margin is at most this.
    pub near_tie: f32,
    /// Plant the fault in the GEMM (the red run).
    pub fault: bool,
}

impl Default for PrefillCheckConfig {
    fn default() -> Self {
        PrefillCheckConfig {
            lengths: vec![1, 7, 8, 9, 21, 64, 65, 100, 130],
            // Per product the GEMM is within 2e-5 of sum |w x| (kernel-check `gemm`), the
            // row path within 2e-5 too; a few layers compound it well under 1e-3, while a
            // dropped block scale moves logits by O(1e-1) of their range.
            tol: 1e-3,
            // The tiled pass rounds every decoded weight once to f16 (11 significant bits:
            // within 2^-12 = 2.4e-4 of it, kernel-check `gemmt`); measured on the synthetic
            // families (session 10, H200): 1.4e-4 (F16) .. 1.3e-3 (Q5_K) of the largest logit.
            // The tolerance is that per-weight bound times 16 (3.9e-3, for the compounding
            // through deeper stacks than the synthetic ones'); a dropped chunk still moves
            // logits by O(1e-1) and the arg-max must match as before.
            tol_tiled: 4e-3,
            near_tie: 0.05,
            fault: false,
        }
    }
}

/// One prompt's comparison.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PromptResult {
    pub len: usize,
    pub rows_token: u32,
    pub gemm_token: u32,
    /// The row path's margin between its token and the GEMM's (0 when they agree).
    pub margin: f32,
    /// max |gemm - rows| / max |rows| (x in the kernel's default parts: the judged arm).
    pub rel_err: f32,
    /// The same with x in one 16-bit part (reported).
    pub rel_err_f16x: f32,
}

/// The result for one model.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PrefillLine {
    pub name: String,
    /// The prompt pass's kernel (`v1` or `tiled`) and the tolerance it was judged with.
    pub kernel: String,
    pub tol: f32,
    /// Parts of x of the judged arm (the kernel's default for the model's format).
    pub x_parts: Option<u32>,
    /// Whether any matrix of the model has a GEMM (else both paths are the row path).
    pub uses_gemm: bool,
    pub prompts: Vec<PromptResult>,
    pub failures: Vec<String>,
    pub error: Option<String>,
}

impl PrefillLine {
    pub fn pass(&self) -> bool {
        self.error.is_none() && self.failures.is_empty()
    }

    /// One printed line (plus one per failure).
    pub fn render(&self) -> String {
        let status = if self.pass() { "ok  " } else { "FAIL" };
        if let Some(e) = &self.error {
            return format!("{status} {:<40} error: {e}", self.name);
        }
        let worst =
            |f: fn(&PromptResult) -> f32| {
                self.prompts.iter().map(f).fold(0f32, |m, v| {
                    if v.is_nan() { f32::INFINITY } else { m.max(v) }
                })
            };
        let agree = self
            .prompts
            .iter()
            .filter(|p| p.rows_token == p.gemm_token)
            .count();
        let mut s = format!(
            "{status} {:<40} {} {}/{} prompts same arg-max, max rel logit err {:.2e} (x in {} part(s); tolerance {:.0e}), {:.2e} (x=16-bit)",
            self.name,
            if self.uses_gemm {
                format!("gemm {}", self.kernel)
            } else {
                "(no GEMM format: rows both)".to_string()
            },
            agree,
            self.prompts.len(),
            worst(|p| p.rel_err),
            self.x_parts.map_or("-".to_string(), |p| p.to_string()),
            self.tol,
            worst(|p| p.rel_err_f16x),
        );
        for f in &self.failures {
            s.push_str("\n       ");
            s.push_str(f);
        }
        s
    }
}

/// max |got - want| / max |want| (NaN or a length mismatch: infinity).
pub fn rel_err(got: &[f32], want: &[f32]) -> f32 {
    if got.len() != want.len() || want.is_empty() {
        return f32::INFINITY;
    }
    let scale = want
        .iter()
        .fold(0f32, |m, v| m.max(v.abs()))
        .max(f32::MIN_POSITIVE);
    let mut worst = 0f32;
    for (a, b) in got.iter().zip(want) {
        let d = (a - b).abs();
        if d.is_nan() {
            return f32::INFINITY;
        }
        worst = worst.max(d);
    }
    worst / scale
}

/// Judge one prompt: the row path's and the GEMM's logits (and the f16-only GEMM's).
pub fn judge(
    len: usize,
    rows: &[f32],
    gemm: &[f32],
    gemm_f16x: &[f32],
    cfg: &PrefillCheckConfig,
) -> (PromptResult, Vec<String>) {
    let gemm_token = argmax(gemm);
    let rows_token = argmax(rows);
    let dis = classify(rows, gemm_token, 0, cfg.near_tie);
    let r = PromptResult {
        len,
        rows_token,
        gemm_token,
        margin: dis.as_ref().map_or(0.0, |d| d.margin),
        rel_err: rel_err(gemm, rows),
        rel_err_f16x: rel_err(gemm_f16x, rows),
    };
    let mut failures = Vec::new();
    if let Some(d) = dis.filter(|d| !d.near_tie) {
        failures.push(format!(
            "{len} tokens: arg-max {} (gemm) vs {} (rows), row-path margin {:.3e} > near-tie {}",
            d.gpu_token, d.ref_token, d.margin, cfg.near_tie
        ));
    }
    if r.rel_err.is_nan() || r.rel_err > cfg.tol {
        failures.push(format!(
            "{len} tokens: logits differ by {:.3e} of the largest (tolerance {:.0e})",
            r.rel_err, cfg.tol
        ));
    }
    (r, failures)
}

/// The prompt of `n` tokens: the case's prompt repeated.
fn prompt_of(case: &DecodeCase, n: usize) -> Vec<u32> {
    if case.prompt.is_empty() {
        return (0..n as u32).collect();
    }
    case.prompt.iter().copied().cycle().take(n).collect()
}

fn run(gpu: &Arc<Gpu>, case: &DecodeCase, cfg: &PrefillCheckConfig) -> Result<PrefillLine, String> {
    let program = engine::arch::build_program(case.model.header()).map_err(|e| e.to_string())?;
    let max = cfg.lengths.iter().copied().max().unwrap_or(1);
    let mut dec =
        CudaDecoder::new(gpu.clone(), &case.model, program, max + 8).map_err(|e| e.to_string())?;
    let kernel = dec.gemm_kernel();
    let cfg = &PrefillCheckConfig {
        tol: match kernel {
            GemmKernel::V1 => cfg.tol,
            GemmKernel::Tiled => cfg.tol_tiled,
        },
        ..cfg.clone()
    };
    // The judged arm's options, so that x_parts below reports them.
    dec.set_prefill_opts(GemmOpts {
        x: XParts::Auto,
        fault: cfg.fault,
    });
    let mut line = PrefillLine {
        name: case.name.clone(),
        kernel: kernel.name().to_string(),
        tol: cfg.tol,
        x_parts: dec.prefill_x_parts(),
        uses_gemm: dec.prefill_uses_gemm(),
        prompts: Vec::new(),
        failures: Vec::new(),
        error: None,
    };
    let mut logits_of = |mode: PrefillMode, opts: GemmOpts, p: &[u32]| {
        dec.reset();
        dec.set_prefill(mode);
        dec.set_prefill_opts(opts);
        dec.prefill(p).map_err(|e| e.to_string())?;
        dec.logits().map_err(|e| e.to_string())
    };
    for &n in &cfg.lengths {
        let p = prompt_of(case, n);
        // The judged arm: the kernel's default parts of x (the tiled kernel's per format:
        // one, or two for BF16 matrices past f16's range); the one-part arm is reported.
        let auto = GemmOpts {
            x: XParts::Auto,
            fault: cfg.fault,
        };
        let f16x = GemmOpts {
            x: XParts::One,
            fault: cfg.fault,
        };
        let rows = logits_of(PrefillMode::Rows, auto, &p)?;
        let gemm = logits_of(PrefillMode::Gemm, auto, &p)?;
        let gemm_f16x = logits_of(PrefillMode::Gemm, f16x, &p)?;
        let (r, mut f) = judge(n, &rows, &gemm, &gemm_f16x, cfg);
        line.prompts.push(r);
        line.failures.append(&mut f);
    }
    Ok(line)
}

/// Run and judge one model.
pub fn check_model(gpu: &Arc<Gpu>, case: &DecodeCase, cfg: &PrefillCheckConfig) -> PrefillLine {
    run(gpu, case, cfg).unwrap_or_else(|e| PrefillLine {
        name: case.name.clone(),
        kernel: String::new(),
        tol: cfg.tol,
        x_parts: None,
        uses_gemm: false,
        prompts: Vec::new(),
        failures: Vec::new(),
        error: Some(e),
    })
}

/// Verdict over every model's line: any failure is red, and so is a run in which no model
/// went through the GEMM (the gate would have compared the row path with itself).
pub fn verdict(lines: &[PrefillLine]) -> Verdict {
    let mut failures: Vec<String> = lines
        .iter()
        .filter(|l| !l.pass())
        .map(|l| match (&l.error, l.failures.first()) {
            (Some(e), _) => format!("{}: {e}", l.name),
            (None, Some(m)) => format!("{}: {m}", l.name),
            (None, None) => format!("{}: failed", l.name),
        })
        .collect();
    if !lines
        .iter()
        .any(|l| l.uses_gemm && l.pass() && !l.prompts.is_empty())
    {
        failures.push("no model went through the tensor-core prompt pass".into());
    }
    Verdict::from_failures(failures)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn logits() -> Vec<f32> {
        (0..64)
            .map(|i| ((i * 37 % 64) as f32 - 32.0) / 8.0)
            .collect()
    }

    fn line(prompts: Vec<PromptResult>, failures: Vec<String>) -> PrefillLine {
        PrefillLine {
            name: "m".into(),
            kernel: "tiled".into(),
            tol: 4e-3,
            x_parts: Some(1),
            uses_gemm: true,
            prompts,
            failures,
            error: None,
        }
    }

    #[test]
    fn close_logits_are_green() {
        let cfg = PrefillCheckConfig::default();
        let rows = logits();
        let gemm: Vec<f32> = rows.iter().map(|v| v * (1.0 + 1e-6)).collect();
        let (r, f) = judge(8, &rows, &gemm, &gemm, &cfg);
        assert!(f.is_empty(), "{f:?}");
        assert_eq!(r.rows_token, r.gemm_token);
        assert_eq!(verdict(&[line(vec![r], f)]), Verdict::Green);
    }

    #[test]
    fn a_planted_scale_fault_turns_it_red() {
        // A dropped block scale: the logits move by a visible fraction and the top changes.
        let cfg = PrefillCheckConfig::default();
        let rows = logits();
        let mut gemm = rows.clone();
        let top = argmax(&rows) as usize;
        gemm[top] -= 1.0;
        let (r, f) = judge(8, &rows, &gemm, &gemm, &cfg);
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(verdict(&[line(vec![r], f)]).is_red());
    }

    #[test]
    fn a_small_error_over_tolerance_is_red_and_a_near_tie_is_not() {
        let cfg = PrefillCheckConfig::default();
        let rows = logits();
        let mut gemm = rows.clone();
        gemm[0] += 0.01 * 4.0;
        let (_, f) = judge(8, &rows, &gemm, &gemm, &cfg);
        assert_eq!(f.len(), 1, "{f:?}");
        // Two tokens 0.01 apart swapped: a near-tie, and within tolerance.
        let mut rows = vec![0.0f32; 16];
        rows[3] = 4.0;
        rows[5] = 3.999_9;
        let mut gemm = rows.clone();
        gemm[5] = 4.000_1;
        gemm[3] = 3.999_9;
        let (r, f) = judge(8, &rows, &gemm, &gemm, &cfg);
        assert_ne!(r.rows_token, r.gemm_token);
        assert!(f.is_empty(), "{f:?}");
    }

    #[test]
    fn nan_no_gemm_model_or_no_line_is_red() {
        let cfg = PrefillCheckConfig::default();
        let rows = logits();
        let mut gemm = rows.clone();
        gemm[7] = f32::NAN;
        let (_, f) = judge(8, &rows, &gemm, &gemm, &cfg);
        assert!(!f.is_empty());
        let mut l = line(Vec::new(), Vec::new());
        l.uses_gemm = false;
        assert!(verdict(&[l]).is_red());
        assert!(verdict(&[]).is_red());
    }
}
