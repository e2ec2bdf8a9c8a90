//! decode-check: CUDA greedy decode against the CPU reference executor (the engine of the
//! `argmax` gate), plus a first decode timing.
//!
//! Owns: the comparison of one model ([`check_model`]): both backends are fed the same
//! tokens (the prompt, then the reference's greedy choice at every step — teacher forcing,
//! so one disagreement does not hide the steps after it); at each step the GPU's argmax
//! must equal the reference's, or the disagreement is classified by the reference's own
//! logits ([`classify`]): a *near-tie* when the reference prefers its token by at most
//! [`DecodeCheckConfig::near_tie`] logits (reported, green), else *structural* (red). The
//! worst relative logit difference over all steps is reported too. [`synthetic_models`]
//! gives small checkpoints of every family in several weight formats, so the check runs
//! without any file; real models are added by path. [`time_decode`] measures eager decode.

use crate::Verdict;
use engine::arch::synthetic::{SyntheticSpec, gguf_bytes};
use engine::cuda::{CudaDecoder, Gpu};
use engine::model_file::{FileBytes, GgufModel};
use engine::quant::QuantFormat;
use engine::reference::{Reference, ReferenceOptions};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

/// How to run decode-check.
#[derive(Clone, Debug)]
pub struct DecodeCheckConfig {
    /// Greedy steps compared after the prompt.
    pub n_tokens: usize,
    /// Largest reference margin (logits) a disagreement may have to count as a near-tie.
    pub near_tie: f32,
    /// KV capacity of the GPU decoder.
    pub capacity: usize,
}

impl Default for DecodeCheckConfig {
    fn default() -> Self {
        DecodeCheckConfig {
            n_tokens: 64,
            near_tie: 0.05,
            capacity: 1024,
        }
    }
}

/// A model to check: a name, the file, a prompt.
pub struct DecodeCase {
    pub name: String,
    pub model: Arc<GgufModel>,
    pub prompt: Vec<u32>,
}

/// One step where the backends disagreed.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Disagreement {
    pub step: usize,
    pub gpu_token: u32,
    pub ref_token: u32,
    /// Reference logit of its own choice minus that of the GPU's choice.
    pub margin: f32,
    pub near_tie: bool,
}

/// The result for one model.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DecodeLine {
    pub name: String,
    pub steps: usize,
    pub agreed: usize,
    pub disagreements: Vec<Disagreement>,
    /// max |gpu - ref| / max |ref| over every step's logits.
    pub max_logit_err: f32,
    pub pass: bool,
    /// Set when the check could not run (load or launch error).
    pub error: Option<String>,
}

impl DecodeLine {
    /// One printed line.
    pub fn render(&self) -> String {
        let status = if self.pass { "ok  " } else { "FAIL" };
        if let Some(e) = &self.error {
            return format!("{status} {:<40} error: {e}", self.name);
        }
        let nt = self.disagreements.iter().filter(|d| d.near_tie).count();
        let st = self.disagreements.len() - nt;
        let mut s = format!(
            "{status} {:<40} {}/{} steps agree, {nt} near-tie, {st} structural, max logit err {:.2e}",
            self.name, self.agreed, self.steps, self.max_logit_err
        );
        for d in &self.disagreements {
            s.push_str(&format!(
                "\n       step {}: gpu {} vs ref {} margin {:.4} ({})",
                d.step,
                d.gpu_token,
                d.ref_token,
                d.margin,
                if d.near_tie { "near-tie" } else { "STRUCTURAL" }
            ));
        }
        s
    }
}

/// Index of the largest logit (lowest index among equal maxima; NaN never wins).
pub fn argmax(logits: &[f32]) -> u32 {
    engine::reference::argmax(logits) as u32
}

/// Classify the GPU's choice `gpu_token` against the reference logits of the same step.
/// `None` when they agree.
pub fn classify(
    ref_logits: &[f32],
    gpu_token: u32,
    step: usize,
    near_tie: f32,
) -> Option<Disagreement> {
    let ref_token = argmax(ref_logits);
    if ref_token == gpu_token {
        return None;
    }
    let top = ref_logits
        .get(ref_token as usize)
        .copied()
        .unwrap_or(f32::NAN);
    let theirs = ref_logits
        .get(gpu_token as usize)
        .copied()
        .unwrap_or(f32::NEG_INFINITY);
    let margin = top - theirs;
    Some(Disagreement {
        step,
        gpu_token,
        ref_token,
        margin,
        near_tie: margin <= near_tie,
    })
}

fn rel_err(got: &[f32], want: &[f32]) -> f32 {
    if got.len() != want.len() {
        return f32::INFINITY;
    }
    let scale = want
        .iter()
        .fold(0f32, |m, v| m.max(v.abs()))
        .max(f32::MIN_POSITIVE);
    let worst = got.iter().zip(want).fold(0f32, |m, (a, b)| {
        let d = (a - b).abs();
        if d.is_nan() { f32::INFINITY } else { m.max(d) }
    });
    worst / scale
}

/// Compare CUDA and reference greedy decoding on one model.
pub fn check_model(gpu: &Arc<Gpu>, case: &DecodeCase, cfg: &DecodeCheckConfig) -> DecodeLine {
    let mut line = DecodeLine {
        name: case.name.clone(),
        steps: cfg.n_tokens,
        agreed: 0,
        disagreements: Vec::new(),
        max_logit_err: 0.0,
        pass: false,
        error: None,
    };
    match run_model(gpu, case, cfg, &mut line) {
        Ok(()) => line.pass = line.disagreements.iter().all(|d| d.near_tie),
        Err(e) => line.error = Some(e),
    }
    line
}

fn run_model(
    gpu: &Arc<Gpu>,
    case: &DecodeCase,
    cfg: &DecodeCheckConfig,
    line: &mut DecodeLine,
) -> Result<(), String> {
    let reference = Reference::new(Arc::clone(&case.model), ReferenceOptions::default())
        .map_err(|e| e.to_string())?;
    let mut dec = CudaDecoder::new(
        Arc::clone(gpu),
        &case.model,
        reference.program().clone(),
        cfg.capacity,
    )
    .map_err(|e| e.to_string())?;
    let mut kv = reference.new_cache();
    let mut ref_logits = reference
        .step(&mut kv, &case.prompt)
        .map_err(|e| e.to_string())?;
    dec.prefill(&case.prompt).map_err(|e| e.to_string())?;
    for step in 0..cfg.n_tokens {
        let g_tok = dec.argmax().map_err(|e| e.to_string())?;
        let g_logits = dec.logits().map_err(|e| e.to_string())?;
        line.max_logit_err = line.max_logit_err.max(rel_err(&g_logits, &ref_logits));
        // The device argmax must be the argmax of the device's own logits.
        if g_tok != argmax(&g_logits) {
            return Err(format!(
                "step {step}: device argmax {g_tok} != host argmax of device logits"
            ));
        }
        match classify(&ref_logits, g_tok, step, cfg.near_tie) {
            None => line.agreed += 1,
            Some(d) => line.disagreements.push(d),
        }
        if step + 1 < cfg.n_tokens {
            let t = argmax(&ref_logits);
            ref_logits = reference.step(&mut kv, &[t]).map_err(|e| e.to_string())?;
            dec.forward(&[t]).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// Verdict over every model's line.
pub fn verdict(lines: &[DecodeLine]) -> Verdict {
    if lines.is_empty() {
        return Verdict::Red {
            failures: vec!["no model was checked".into()],
        };
    }
    let failures: Vec<String> = lines
        .iter()
        .filter(|l| !l.pass)
        .map(|l| match &l.error {
            Some(e) => format!("{}: {e}", l.name),
            None => format!("{}: structural disagreement", l.name),
        })
        .collect();
    if failures.is_empty() {
        Verdict::Green
    } else {
        Verdict::Red { failures }
    }
}

/// The shape of the gates' synthetic checkpoints: vocabulary 512, width 256, 4 layers,
/// `heads` query heads of `hd` over half as many KV heads (at least one), `ff` hidden units.
pub fn gate_spec(
    arch: &'static str,
    fmt: QuantFormat,
    hd: usize,
    heads: usize,
    ff: usize,
    seed: u64,
) -> SyntheticSpec {
    let mut spec = SyntheticSpec::tiny(arch);
    spec.n_vocab = 512;
    spec.n_embd = 256;
    spec.n_layers = 4;
    spec.n_heads = heads;
    spec.n_kv_heads = (heads / 2).max(1);
    spec.head_dim = hd;
    spec.n_ff = ff;
    spec.matrix_format = fmt;
    spec.seed = seed;
    spec
}

/// Small synthetic checkpoints of every family, in several weight formats.
pub fn synthetic_models() -> Result<Vec<DecodeCase>, String> {
    let variants: [(&'static str, QuantFormat, usize, usize, usize); 8] = [
        ("llama", QuantFormat::Q4_0, 64, 4, 512),
        ("llama", QuantFormat::F16, 64, 4, 512),
        ("qwen2", QuantFormat::BF16, 64, 4, 512),
        ("qwen2", QuantFormat::Q8_0, 64, 4, 512),
        ("qwen2", QuantFormat::Q5_0, 64, 4, 512),
        ("qwen3", QuantFormat::Q4_K, 64, 4, 768),
        ("qwen3", QuantFormat::Q5_K, 128, 2, 512),
        ("gemma3", QuantFormat::Q6_K, 256, 2, 512),
    ];
    let mut out = Vec::new();
    for (i, (arch, fmt, hd, heads, ff)) in variants.into_iter().enumerate() {
        let mut spec = gate_spec(arch, fmt, hd, heads, ff, 1000 + i as u64);
        if arch == "gemma3" {
            spec.sliding_window = 16;
        }
        let bytes = gguf_bytes(&spec).map_err(|e| e.to_string())?;
        let model = GgufModel::from_bytes(PathBuf::from("synthetic.gguf"), FileBytes::Owned(bytes))
            .map_err(|e| e.to_string())?;
        let prompt: Vec<u32> = (0..21).map(|j| ((j * 37 + 11 + i) % 512) as u32).collect();
        out.push(DecodeCase {
            name: format!("synthetic {arch} {fmt} hd={hd}"),
            model: Arc::new(model),
            prompt,
        });
    }
    Ok(out)
}

/// The tensor [`wide_bf16_model`] plants its wide value in, and the value (2^16 as bf16:
/// past f16's largest finite value, 65504).
pub const WIDE_BF16_TENSOR: &str = "blk.0.ffn_up.weight";
pub const WIDE_BF16_BITS: u16 = 0x4780;

/// A synthetic qwen2 BF16 checkpoint holding one weight past f16's range (element 0 of
/// [`WIDE_BF16_TENSOR`] set to 2^16). Its prompt pass must keep x in two bf16 parts (the
/// decoder's fallback: `DeviceWeight::fits_f16` is false for that matrix, and the tiled op
/// refuses one part for it, kernel-check `BF16 with 2^17`), so a gate that runs the prompt
/// pass on it checks the fallback end to end.
pub fn wide_bf16_model() -> Result<DecodeCase, String> {
    let spec = gate_spec("qwen2", QuantFormat::BF16, 64, 4, 512, 1100);
    let mut bytes = gguf_bytes(&spec).map_err(|e| e.to_string())?;
    let header = engine::model_file::gguf::parse(&bytes).map_err(|e| e.to_string())?;
    let t = header
        .tensor(WIDE_BF16_TENSOR)
        .ok_or_else(|| format!("synthetic qwen2 has no {WIDE_BF16_TENSOR}"))?;
    if t.format != QuantFormat::BF16 {
        return Err(format!("{WIDE_BF16_TENSOR} is {}, not BF16", t.format));
    }
    let at = usize::try_from(header.data_offset + t.offset).map_err(|e| e.to_string())?;
    let slot = bytes
        .get_mut(at..at + 2)
        .ok_or_else(|| format!("{WIDE_BF16_TENSOR} lies past the file"))?;
    slot.copy_from_slice(&WIDE_BF16_BITS.to_le_bytes());
    let model = GgufModel::from_bytes(
        PathBuf::from("synthetic-wide.gguf"),
        FileBytes::Owned(bytes),
    )
    .map_err(|e| e.to_string())?;
    let prompt: Vec<u32> = (0..21).map(|j| ((j * 41 + 5) % 512) as u32).collect();
    Ok(DecodeCase {
        name: "synthetic qwen2 BF16 hd=64, one weight 2^16 (x in two parts)".into(),
        model: Arc::new(model),
        prompt,
    })
}

/// Eager decode timing: prompt processing time and greedy tokens per second.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DecodeTiming {
    pub name: String,
    pub prompt_tokens: usize,
    pub prefill_s: f64,
    pub decode_tokens: usize,
    pub decode_s: f64,
    pub decode_tok_s: f64,
    pub weight_bytes: usize,
}

/// Time `n` greedy tokens after `prompt` (one warm-up run first, discarded).
pub fn time_decode(
    gpu: &Arc<Gpu>,
    case: &DecodeCase,
    n: usize,
    capacity: usize,
) -> Result<DecodeTiming, String> {
    let program = engine::arch::build_program(case.model.header()).map_err(|e| e.to_string())?;
    let mut dec = CudaDecoder::new(Arc::clone(gpu), &case.model, program, capacity)
        .map_err(|e| e.to_string())?;
    let e2s = |e: engine::cuda::CudaError| e.to_string();
    dec.generate_greedy(&case.prompt, n.min(8)).map_err(e2s)?;
    dec.reset();
    let t0 = Instant::now();
    dec.prefill(&case.prompt).map_err(e2s)?;
    let mut t = dec.argmax().map_err(e2s)?;
    let prefill_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    for _ in 0..n {
        dec.forward(&[t]).map_err(e2s)?;
        t = dec.argmax().map_err(e2s)?;
    }
    let decode_s = t1.elapsed().as_secs_f64();
    Ok(DecodeTiming {
        name: case.name.clone(),
        prompt_tokens: case.prompt.len(),
        prefill_s,
        decode_tokens: n,
        decode_s,
        decode_tok_s: n as f64 / decode_s.max(1e-9),
        weight_bytes: dec.weight_bytes(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wide_bf16_model_holds_a_weight_past_f16() {
        let case = wide_bf16_model().unwrap();
        let h = case.model.header();
        let t = h.tensor(WIDE_BF16_TENSOR).unwrap();
        let raw = case.model.tensor_bytes(t);
        assert_eq!(&raw[..2], &WIDE_BF16_BITS.to_le_bytes());
        assert!(!engine::cuda::ops::bf16_fits_f16(raw));
        assert_eq!(case.model.dequantize(WIDE_BF16_TENSOR).unwrap()[0], 65536.0);
        // Every other BF16 matrix of it fits f16: only the planted value is wide.
        for t in h.tensors.iter().filter(|t| t.format == QuantFormat::BF16) {
            let fits = engine::cuda::ops::bf16_fits_f16(case.model.tensor_bytes(t));
            assert_eq!(fits, t.name != WIDE_BF16_TENSOR, "{}", t.name);
        }
    }

    #[test]
    fn agreement_near_tie_and_structural() {
        let logits = [0.0, 5.0, 4.99, -1.0];
        assert_eq!(classify(&logits, 1, 0, 0.05), None);
        let d = classify(&logits, 2, 3, 0.05).unwrap();
        assert!(d.near_tie && d.ref_token == 1 && d.step == 3);
        // A swapped token far from the top is structural and turns the verdict red.
        let d = classify(&logits, 3, 4, 0.05).unwrap();
        assert!(!d.near_tie && (d.margin - 6.0).abs() < 1e-6);
        let bad = DecodeLine {
            name: "planted".into(),
            steps: 5,
            agreed: 4,
            disagreements: vec![d],
            max_logit_err: 0.0,
            pass: false,
            error: None,
        };
        assert!(bad.render().contains("STRUCTURAL"));
        assert!(matches!(verdict(&[bad]), Verdict::Red { .. }));
        assert!(matches!(verdict(&[]), Verdict::Red { .. }));
    }

    #[test]
    fn synthetic_models_build_for_every_family() {
        let m = synthetic_models().unwrap();
        let mut fams: Vec<String> = m
            .iter()
            .map(|c| c.model.header().architecture().unwrap_or("?").to_string())
            .collect();
        fams.sort();
        fams.dedup();
        assert_eq!(fams, ["gemma3", "llama", "qwen2", "qwen3"]);
        for c in &m {
            assert!(
                engine::arch::build_program(c.model.header()).is_ok(),
                "{}",
                c.name
            );
        }
    }
}
