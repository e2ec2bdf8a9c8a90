//! kernel-check: every CUDA kernel against its CPU reference (`engine::cuda::cpu`).
//!
//! Owns: the one tolerance table ([`TOLERANCES`]), the comparison of a kernel's output with
//! its reference ([`compare_f32`], [`compare_exact`]; plain CPU arrays, so the logic is
//! tested without a GPU, including planted faults that must go red), the report (a line
//! per check, then `ALL GREEN` or the list of failures) and its [`Verdict`].
//!
//! The GPU cases live in `kernel_check/cases.rs` (and `batch.rs`, the batched matvec; `wr.rs`, the streamed one-token matvec; `qkv.rs`, q, k and v in one streamed launch; `gemm.rs`, the tensor-core prompt pass): fresh random inputs from a seeded
//! generator (never all zeros; quantized weights are random bytes with finite random
//! scales, so every bit pattern of the quants occurs), several shapes per kernel including
//! odd ones, and every output buffer filled with NaN before the launch so that an element
//! the kernel fails to write cannot pass.

mod attention;
mod attention_prefill;
mod batch;
mod cases;
mod gemm;
mod gemmt;
mod mask;
mod matvec;
mod mmv;
mod qkv;
mod ropefuse;
mod sample;
mod wr;
mod wrt;

pub use cases::{GROUPS, OPS, Rng, random_weight};

use crate::Verdict;
use engine::cuda::{CudaConfig, CudaError, DeviceInfo, Gpu};
use std::path::PathBuf;

/// How a kernel's output must match its reference.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub enum Tol {
    /// Bit-identical (integers, f16 stores, batch invariance).
    Exact,
    /// `max |got - want| / max |want|` at most this.
    MaxRel(f64),
    /// A sampled token must equal the reference chain's, except when the reference's
    /// [`engine::sampling::Pick::margin`] is below this (a near-tie: counted and printed).
    NearTie(f64),
    /// Sampled frequencies against the exact probabilities: the chi-square statistic must
    /// stay below its critical value at this p-value.
    ChiSquare(f64),
}

impl std::fmt::Display for Tol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tol::Exact => f.write_str("exact"),
            Tol::MaxRel(t) => write!(f, "{t:.0e}"),
            Tol::NearTie(e) => write!(f, "exact, near-tie {e:.0e}"),
            Tol::ChiSquare(p) => write!(f, "chi2 p {p:.0e}"),
        }
    }
}

/// The tolerance of every check: (op, tolerance, why). The only tolerance table.
pub const TOLERANCES: &[(&str, Tol, &str)] = &[
    (
        "matvec",
        Tol::MaxRel(2e-5),
        "error / sum|w*x| of its row (the dot product's own rounding scale, so cancelling rows \
         are not over-weighted): f32 sums of up to ~5k products vs an f64 reference, typical \
         sqrt(k)*2^-24 ~ 4e-6; one wrongly decoded block of 32 in k=4864 moves it by ~7e-3",
    ),
    (
        "embed",
        Tol::MaxRel(1e-6),
        "one f32 multiply (maybe fused) per value vs the same in Rust",
    ),
    (
        "rmsnorm",
        Tol::MaxRel(1e-6),
        "the reference's own arithmetic (f64 sum of f32 squares, f32 scale): ~always equal",
    ),
    (
        "qk_norm",
        Tol::MaxRel(1e-6),
        "same kernel as rmsnorm, per head",
    ),
    (
        "rope",
        Tol::MaxRel(1e-6),
        "same f64 angle; device f64 sincos vs host libm, both rounded to f32: ~always equal",
    ),
    (
        "attention",
        Tol::MaxRel(1e-4),
        "f32 online softmax with expf vs an f64 softmax",
    ),
    (
        "attention_prefill",
        Tol::MaxRel(2e-3),
        "the prompt pass's tensor-core attention vs an f64 softmax, error / max|out|: q (times \
         scale) as f16 hi + lo (within ~2^-22), K / V exact f16, f32 scores and online \
         softmax, the weights rounded to f16 (2^-12 relative) for the MMA with V, f32 \
         accumulation; a position outside the mask or a wrong block moves it by ~1e-1",
    ),
    (
        "attention_prefill_f16q",
        Tol::MaxRel(2e-3),
        "the packed prompt attention with q (times scale x log2 e) as one f16 part (2^-11 \
         relative per value) and a base-2 softmax vs an f64 softmax, error / max|out|: \
         measured at most 3.0e-4 on the H200 (hi + lo: 2.3e-4), the weights' f16 rounding \
         dominates (flash4: the same, its splits folded in f32); a position outside the mask \
         or a wrong block moves it by ~1e-1",
    ),
    (
        "gated_act",
        Tol::MaxRel(1e-5),
        "expf / tanhf (a few ulp) vs f64",
    ),
    ("add", Tol::Exact, "one IEEE f32 add, same on both sides"),
    (
        "scale",
        Tol::Exact,
        "one IEEE f32 multiply, same on both sides",
    ),
    (
        "softcap",
        Tol::MaxRel(1e-6),
        "tanhf (a few ulp) vs f64 tanh, then one multiply",
    ),
    (
        "kv_store",
        Tol::Exact,
        "f32 -> f16 round to nearest even on both sides",
    ),
    (
        "argmax",
        Tol::Exact,
        "an index: (value, smallest index) is a total order",
    ),
    (
        "sample",
        Tol::NearTie(1e-9),
        "the device chain (f64 probabilities, block-ordered sums) vs engine::sampling::pick \
         (sequential f64 sums): they differ by ~1e-16 relative, so a pick may differ only \
         when the draw, the top-p mass or p/p_max lies within 1e-9 of its bound; the \
         survivor count and the fallback (survivors > SAMPLE_CAP) must match the same way",
    ),
    (
        "sample_chi2",
        Tol::ChiSquare(1e-6),
        "20k seeded draws through the kernel vs the exact probabilities of \
         engine::sampling::distribution; critical value by Wilson-Hilferty at p = 1e-6 (a \
         correct sampler fails once in a million seeds; a CDF walk off by one bin fails)",
    ),
    (
        "gemm",
        Tol::MaxRel(2e-5),
        "tensor-core prompt pass, x as f16 hi + lo (each value within ~2^-22 of its f32; \
         for BF16 weights three bf16 parts, x exactly), error / sum|w*x| of its row: products exact in the MMA, f32 accumulation (tensor \
         cores align and truncate, a few 2^-23 of the chunk's magnitude per MMA), scale \
         applied per chunk (Q4_K decode products: d sc P - dmin m S per sub-block, S the \
         sub-block's sum of x by an all-ones MMA, each term within the same bound); well \
         under the matvec's 2e-5; a dropped block scale moves it by ~1e-2",
    ),
    (
        "mmv_bf16_x",
        Tol::MaxRel(4.8e-7),
        "BF16 decode products (mmv.cu) on unit rows (one weight 1.0, the rest 0), error / |x|: \
         x multiplied in three bf16 parts (hi + mid + lo = x exactly) comes back within the \
         MMA accumulator's alignment (about 2^-23 = 1.2e-7); a product that dropped the third \
         part is off by up to 2^-17 = 7.6e-6, past 2^-21 = 4.8e-7 for nearly every value",
    ),
    (
        "gemm_f16x",
        Tol::MaxRel(3e-4),
        "the same with x rounded to f16 only (BF16 weights: x as two bf16 parts, within \
         2^-17): each value within 2^-12 = 2.4e-4 of its f32 (round to nearest), so the error / sum|w*x| stays under 2.4e-4 plus the f32 \
         accumulation",
    ),
    (
        "gemmt",
        Tol::MaxRel(3e-4),
        "tiled prompt pass (gemmt.cu), x in two parts (f16 hi + lo within ~2^-22; BF16: two \
         bf16 parts within 2^-17), error / sum|w*x| of its row (gate + up: the error carried \
         through act(g) * u, bounded by 1.13 |u| sum|wg*x| + |act(g)| sum|wu*x|): each weight \
         rounded once to f16 (within 2^-12 = 2.4e-4 of its f32 value; BF16 exact), f32 \
         accumulation in the MMAs; a dropped chunk moves it by ~1e-2",
    ),
    (
        "gemmt_x16",
        Tol::MaxRel(2.5e-3),
        "the same with x in one 16-bit part: f16 (within 2^-12, plus the weight's 2^-12) or, \
         for BF16 weights, bf16 (within 2^-9 = 1.95e-3)",
    ),
    (
        "batch_invariance",
        Tol::Exact,
        "the exactness contract: a row's result must not depend on how many share the launch",
    ),
    (
        "mask",
        Tol::Exact,
        "a grammar mask sets disallowed logits to -inf and leaves the others' bits: the masked \
         row and its argmax must equal the CPU's (TokenMask::apply, cpu::argmax) bit for bit",
    ),
    (
        "fusion",
        Tol::Exact,
        "a fused launch (matvec + residual add, gate/up matvec + gated activation, RoPE of \
         q and k + KV store, attention with its combine) must give the bits of the separate \
         kernels",
    ),
];

/// The tolerance of `op` (the strictest, [`Tol::Exact`], for an op missing from the table).
pub fn tolerance(op: &str) -> Tol {
    TOLERANCES
        .iter()
        .find(|(o, _, _)| *o == op)
        .map_or(Tol::Exact, |(_, t, _)| *t)
}

/// The result of one check.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CheckLine {
    /// The op, a key of [`TOLERANCES`].
    pub op: &'static str,
    /// What was checked (format, shape, kernel choice).
    pub name: String,
    pub tol: Tol,
    /// The measured error: max relative error, or the number of differing elements.
    pub err: f64,
    pub pass: bool,
    /// Why it failed (first differing element, NaN, length), empty when it passed.
    pub note: String,
}

impl CheckLine {
    /// A failing line for a check that could not produce an output.
    pub fn error(op: &'static str, name: impl Into<String>, why: impl std::fmt::Display) -> Self {
        CheckLine {
            op,
            name: name.into(),
            tol: tolerance(op),
            err: f64::INFINITY,
            pass: false,
            note: format!("error: {why}"),
        }
    }

    /// One printed line.
    pub fn render(&self) -> String {
        let status = if self.pass { "ok  " } else { "FAIL" };
        let err = match self.tol {
            Tol::Exact => format!("{} differ", self.err),
            Tol::MaxRel(_) => format!("err {:.2e}", self.err),
            Tol::NearTie(_) => format!("{} differ", self.err),
            Tol::ChiSquare(_) => format!("chi2/critical {:.3}", self.err),
        };
        let mut s = format!(
            "{status} {:<16} {:<58} {err} (tol {})",
            self.op, self.name, self.tol
        );
        if !self.note.is_empty() {
            s.push_str("  ");
            s.push_str(&self.note);
        }
        s
    }
}

/// Compare a kernel's f32 output with its reference under `op`'s tolerance. A NaN where
/// the reference has none (an element the kernel left poisoned, or computed as NaN) fails
/// whatever the tolerance; NaN where the reference also has NaN matches.
pub fn compare_f32(
    op: &'static str,
    name: impl Into<String>,
    got: &[f32],
    want: &[f32],
) -> CheckLine {
    let name = name.into();
    let tol = tolerance(op);
    let mut line = CheckLine {
        op,
        name,
        tol,
        err: 0.0,
        pass: true,
        note: String::new(),
    };
    if got.len() != want.len() {
        line.pass = false;
        line.err = f64::INFINITY;
        line.note = format!("length {} vs reference {}", got.len(), want.len());
        return line;
    }
    if let Some(i) = (0..got.len()).find(|&i| got[i].is_nan() != want[i].is_nan()) {
        line.pass = false;
        line.err = f64::INFINITY;
        line.note = format!("NaN mismatch at {i}: got {} want {}", got[i], want[i]);
        return line;
    }
    match tol {
        Tol::Exact | Tol::NearTie(_) | Tol::ChiSquare(_) => {
            let diff: Vec<usize> = (0..got.len())
                .filter(|&i| {
                    !(got[i].is_nan() && want[i].is_nan()) && got[i].to_bits() != want[i].to_bits()
                })
                .collect();
            line.err = diff.len() as f64;
            if let Some(&i) = diff.first() {
                line.pass = false;
                line.note = format!("first at {i}: got {:e} want {:e}", got[i], want[i]);
            }
        }
        Tol::MaxRel(t) => {
            let scale = want
                .iter()
                .filter(|v| v.is_finite())
                .fold(0f64, |m, v| m.max(f64::from(v.abs())))
                .max(f64::from(f32::MIN_POSITIVE));
            let mut worst = (0f64, 0usize);
            for i in 0..got.len() {
                if got[i].is_nan() {
                    continue;
                }
                let d = (f64::from(got[i]) - f64::from(want[i])).abs();
                let d = if d.is_nan() { f64::INFINITY } else { d };
                if d > worst.0 {
                    worst = (d, i);
                }
            }
            line.err = worst.0 / scale;
            if line.err > t || line.err.is_nan() {
                let i = worst.1;
                line.pass = false;
                line.note = format!("worst at {i}: got {:e} want {:e}", got[i], want[i]);
            }
        }
    }
    line
}

/// Compare like [`compare_f32`] under a relative tolerance, but divide each element's error
/// by its own `scale` (e.g. `sum |w*x|` of a dot product) instead of the largest reference
/// value: a row whose result cancels to a small number is judged against the rounding its
/// sum can produce, not against its own size.
pub fn compare_f32_scaled(
    op: &'static str,
    name: impl Into<String>,
    got: &[f32],
    want: &[f32],
    scale: &[f64],
) -> CheckLine {
    let mut line = compare_f32(op, name, got, want);
    let Tol::MaxRel(t) = line.tol else {
        return line;
    };
    if !line.note.is_empty() && line.err.is_infinite() {
        return line; // length or NaN mismatch: already red with its reason.
    }
    if scale.len() != want.len() {
        line.pass = false;
        line.err = f64::INFINITY;
        line.note = format!("{} scales for {} values", scale.len(), want.len());
        return line;
    }
    let mut worst = (0f64, 0usize);
    for i in 0..got.len() {
        if got[i].is_nan() {
            continue;
        }
        let d = (f64::from(got[i]) - f64::from(want[i])).abs();
        let d = if d.is_nan() { f64::INFINITY } else { d };
        let e = d / scale[i].max(f64::from(f32::MIN_POSITIVE));
        if e > worst.0 {
            worst = (e, i);
        }
    }
    line.err = worst.0;
    line.pass = !(line.err > t || line.err.is_nan());
    line.note = if line.pass {
        String::new()
    } else {
        let i = worst.1;
        format!(
            "worst at {i}: got {:e} want {:e} (scale {:e})",
            got[i], want[i], scale[i]
        )
    };
    line
}

/// Compare values that must be identical (indices, f16 bit patterns), whatever the table
/// says for `op`.
pub fn compare_exact<T: PartialEq + std::fmt::Debug>(
    op: &'static str,
    name: impl Into<String>,
    got: &[T],
    want: &[T],
) -> CheckLine {
    let mut line = CheckLine {
        op,
        name: name.into(),
        tol: Tol::Exact,
        err: 0.0,
        pass: true,
        note: String::new(),
    };
    if got.len() != want.len() {
        line.pass = false;
        line.err = f64::INFINITY;
        line.note = format!("length {} vs reference {}", got.len(), want.len());
        return line;
    }
    let diff: Vec<usize> = (0..got.len()).filter(|&i| got[i] != want[i]).collect();
    line.err = diff.len() as f64;
    if let Some(&i) = diff.first() {
        line.pass = false;
        line.note = format!("first at {i}: got {:?} want {:?}", got[i], want[i]);
    }
    line
}

/// Green when every line passed, else red with one entry per failing line.
pub fn verdict(lines: &[CheckLine]) -> Verdict {
    let failures: Vec<String> = lines
        .iter()
        .filter(|l| !l.pass)
        .map(|l| format!("{} {}: {}", l.op, l.name, l.note))
        .collect();
    if lines.is_empty() {
        Verdict::Red {
            failures: vec!["no check ran".into()],
        }
    } else if failures.is_empty() {
        Verdict::Green
    } else {
        Verdict::Red { failures }
    }
}

/// How to run kernel-check.
#[derive(Clone, Debug, Default)]
pub struct KernelCheckConfig {
    /// Seed of the random inputs (printed, so a red run can be replayed).
    pub seed: u64,
    /// Device ordinal and cubin cache.
    pub cuda: CudaConfig,
    /// Only these case groups ([`GROUPS`]); empty = every group.
    pub only: Vec<String>,
}

/// Everything a kernel-check run found.
#[derive(Clone, Debug, serde::Serialize)]
pub struct KernelCheckReport {
    pub seed: u64,
    pub kernel_identity: String,
    pub device: Option<DeviceInfo>,
    /// How each kernel module was obtained (compiled or cached, seconds).
    pub modules: Vec<String>,
    pub lines: Vec<CheckLine>,
    pub verdict: Verdict,
}

impl KernelCheckReport {
    /// The printed report: header, a line per check, then `ALL GREEN` or the failures.
    pub fn render(&self) -> String {
        let mut s = format!(
            "kernel-check  seed {}  kernel identity {}\n",
            self.seed, self.kernel_identity
        );
        if let Some(d) = &self.device {
            s.push_str(&format!(
                "device {} (cc {}.{}, {}, driver {}, NVRTC {}.{}, {} SMs)\n",
                d.name,
                d.compute_capability.0,
                d.compute_capability.1,
                d.arch,
                d.driver_version,
                d.nvrtc_version.0,
                d.nvrtc_version.1,
                d.sm_count
            ));
        }
        if !self.modules.is_empty() {
            s.push_str(&format!("modules: {}\n", self.modules.join(", ")));
        }
        for l in &self.lines {
            s.push_str(&l.render());
            s.push('\n');
        }
        match &self.verdict {
            Verdict::Green => s.push_str(&format!("ALL GREEN ({} checks)\n", self.lines.len())),
            Verdict::Red { failures } => {
                s.push_str(&format!(
                    "FAILED {} of {} checks:\n",
                    failures.len(),
                    self.lines.len()
                ));
                for f in failures {
                    s.push_str(&format!("  {f}\n"));
                }
            }
            Verdict::Skipped { reason } => s.push_str(&format!("SKIPPED: {reason}\n")),
        }
        s
    }
}

/// Open the GPU and run every check. No driver: [`Verdict::Skipped`]; a GPU that cannot
/// compile or load the kernels: [`Verdict::Red`].
pub fn run(cfg: &KernelCheckConfig) -> KernelCheckReport {
    let kernel_identity = engine::cuda::kernel_identity();
    let gpu = match Gpu::open(&cfg.cuda) {
        Ok(g) => g,
        Err(e @ (CudaError::NoDriver | CudaError::NoNvrtc)) => {
            return KernelCheckReport {
                seed: cfg.seed,
                kernel_identity,
                device: None,
                modules: Vec::new(),
                lines: Vec::new(),
                verdict: Verdict::Skipped {
                    reason: e.to_string(),
                },
            };
        }
        Err(e) => {
            let lines = vec![CheckLine::error(
                "batch_invariance",
                "open GPU and load kernels",
                e,
            )];
            let verdict = verdict(&lines);
            return KernelCheckReport {
                seed: cfg.seed,
                kernel_identity,
                device: None,
                modules: Vec::new(),
                lines,
                verdict,
            };
        }
    };
    let modules = gpu
        .module_loads()
        .iter()
        .map(|m| {
            format!(
                "{} ({:?}) {:?} {:.2}s",
                m.family.file(),
                m.family,
                m.origin,
                m.seconds
            )
        })
        .collect();
    if let Some(g) = cfg.only.iter().find(|g| !GROUPS.contains(&g.as_str())) {
        let lines = vec![CheckLine::error(
            "batch_invariance",
            "select case groups",
            format!("unknown group {g:?} (groups: {})", GROUPS.join(", ")),
        )];
        return KernelCheckReport {
            seed: cfg.seed,
            kernel_identity,
            device: Some(gpu.info().clone()),
            modules,
            verdict: verdict(&lines),
            lines,
        };
    }
    let lines = cases::run_all(&gpu, cfg.seed, &cfg.only);
    KernelCheckReport {
        seed: cfg.seed,
        kernel_identity,
        device: Some(gpu.info().clone()),
        modules,
        verdict: verdict(&lines),
        lines,
    }
}

/// The usual cubin cache directory under a home directory (the binaries decide).
pub fn default_cache_dir(home: Option<PathBuf>) -> Option<PathBuf> {
    home.map(|h| h.join(".cache/assay/cubins"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::cuda::cpu;
    use engine::quant::QuantFormat;

    fn rand_vec(rng: &mut Rng, n: usize) -> Vec<f32> {
        (0..n).map(|_| rng.symmetric()).collect()
    }

    #[test]
    fn scaled_compare_judges_cancelling_rows_by_their_sum_scale() {
        // A dot product that cancels to 0.158 from terms summing to 50 in magnitude: an
        // f32-sized error of 3e-6 is 2e-5 of the value but 6e-8 of the scale.
        let (want1, got1) = ([0.158f32], [0.158f32 + 4e-6]);
        assert!(!compare_f32("matvec", "unscaled", &got1, &want1).pass);
        assert!(compare_f32_scaled("matvec", "scaled", &got1, &want1, &[50.0]).pass);
        let want = [0.158f32, 3.0];
        let got = [0.158f32 + 4e-6, 3.0];
        let scale = [50.0, 40.0];
        assert!(compare_f32_scaled("matvec", "scaled", &got, &want, &scale).pass);
        // A planted fault of a wrongly decoded block (~1e-2 of the scale) stays red.
        let bad = [0.158f32, 3.0 + 0.4];
        let line = compare_f32_scaled("matvec", "planted", &bad, &want, &scale);
        assert!(!line.pass, "{}", line.render());
        // NaN left in the output and wrong lengths stay red whatever the scale.
        let nan = [f32::NAN, 3.0];
        assert!(!compare_f32_scaled("matvec", "nan", &nan, &want, &scale).pass);
        assert!(!compare_f32_scaled("matvec", "len", &got[..1], &want, &scale).pass);
        assert!(!compare_f32_scaled("matvec", "scales", &got, &want, &scale[..1]).pass);
    }

    #[test]
    fn every_op_has_one_tolerance() {
        for op in cases::OPS {
            assert_eq!(
                TOLERANCES.iter().filter(|(o, _, _)| *o == op).count(),
                1,
                "{op}"
            );
        }
        assert_eq!(tolerance("no such op"), Tol::Exact);
    }

    #[test]
    fn correct_output_is_green_and_a_wrongly_decoded_block_is_red() {
        // The "kernel" here is the CPU reference itself, once right and once with a planted
        // fault: one block of one row decoded with its nibbles swapped.
        let mut rng = Rng::new(7);
        for format in [QuantFormat::Q4_0, QuantFormat::Q8_0, QuantFormat::Q4_K] {
            let (rows, k, ntok) = (9, 768, 2);
            let w = random_weight(&mut rng, format, rows, k);
            let x = rand_vec(&mut rng, ntok * k);
            let want = cpu::matvec(format, &w, rows, k, &x, ntok, None).unwrap();
            let ok = compare_f32("matvec", format.name(), &want, &want);
            assert!(ok.pass, "{}", ok.render());
            let mut bad_w = w.clone();
            let row_bytes = format.bytes_for(k).unwrap();
            let (_, bb) = format.block_geometry();
            // Row 4, second block: swap the nibbles of its last 8 bytes (quant bytes in all
            // three formats).
            let blk = 4 * row_bytes + bb;
            for b in &mut bad_w[blk + bb - 8..blk + bb] {
                *b = b.rotate_left(4);
            }
            let got = cpu::matvec(format, &bad_w, rows, k, &x, ntok, None).unwrap();
            let line = compare_f32("matvec", format.name(), &got, &want);
            assert!(!line.pass, "planted fault not caught: {}", line.render());
            assert!(line.render().starts_with("FAIL"));
        }
    }

    #[test]
    fn one_perturbed_element_or_a_left_poison_is_red() {
        let mut rng = Rng::new(11);
        let want = rand_vec(&mut rng, 1000);
        let mut got = want.clone();
        let max = want.iter().fold(0f32, |m, v| m.max(v.abs()));
        got[517] += 1e-3 * max;
        assert!(!compare_f32("matvec", "perturbed", &got, &want).pass);
        assert!(!compare_f32("attention", "perturbed", &got, &want).pass);
        let mut poisoned = want.clone();
        poisoned[999] = f32::NAN;
        let l = compare_f32("matvec", "poison", &poisoned, &want);
        assert!(!l.pass && l.note.contains("NaN"), "{}", l.render());
        // A one-ulp change passes a relative tolerance but not an exact one.
        let mut ulp = want.clone();
        ulp[3] = f32::from_bits(ulp[3].to_bits() + 1);
        assert!(compare_f32("matvec", "ulp", &ulp, &want).pass);
        assert!(!compare_f32("batch_invariance", "ulp", &ulp, &want).pass);
        assert!(!compare_f32("add", "short", &want[..999], &want).pass);
    }

    #[test]
    fn a_swapped_token_is_red_and_the_verdict_lists_it() {
        let want = vec![3i32, 17, 0];
        let good = compare_exact("argmax", "rows=3", &want, &want);
        let bad = compare_exact("argmax", "rows=3 swapped", &[3, 18, 0], &want);
        assert!(good.pass && !bad.pass);
        assert_eq!(verdict(std::slice::from_ref(&good)), Verdict::Green);
        match verdict(&[good.clone(), bad.clone()]) {
            Verdict::Red { failures } => {
                assert_eq!(failures.len(), 1);
                assert!(failures[0].contains("swapped"));
            }
            v => panic!("expected red, got {v:?}"),
        }
        let report = KernelCheckReport {
            seed: 1,
            kernel_identity: "x".into(),
            device: None,
            modules: Vec::new(),
            lines: vec![good, bad],
            verdict: Verdict::Red {
                failures: vec!["argmax rows=3 swapped".into()],
            },
        };
        let text = report.render();
        assert!(text.contains("FAILED 1 of 2") && !text.contains("ALL GREEN"));
        assert!(
            matches!(verdict(&[]), Verdict::Red { .. }),
            "an empty run must not be green"
        );
    }

    #[test]
    fn random_weights_are_never_all_zero_and_decode_finite() {
        let mut rng = Rng::new(3);
        for format in engine::cuda::select::KERNEL_FORMATS {
            let k = if format.block_geometry().0 == 256 {
                512
            } else {
                64
            };
            let w = random_weight(&mut rng, format, 2, k);
            assert!(w.iter().any(|&b| b != 0));
            let mut out = vec![0f32; 2 * k];
            engine::quant::dequantize(format, &w, &mut out).unwrap();
            // Q5_K / Q6_K decode to NaN while their CPU reference is still a placeholder;
            // every implemented format must decode to finite, not-all-zero values.
            if out.iter().all(|v| v.is_finite()) {
                assert!(out.iter().any(|&v| v != 0.0), "{format}");
            }
        }
    }

    #[test]
    fn no_gpu_is_skipped_not_red() {
        if engine::cuda::driver_present() {
            eprintln!("skip: a CUDA driver is present here; this test covers machines without one");
            return;
        }
        let r = run(&KernelCheckConfig::default());
        assert!(
            matches!(r.verdict, Verdict::Skipped { .. }),
            "{:?}",
            r.verdict
        );
        assert!(r.render().contains("SKIPPED"));
    }
}
