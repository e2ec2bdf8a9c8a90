//! Synthetic checkpoints: small GGUF files of any supported family with seeded random
//! weights, for tests and gates where no real checkpoint is at hand (Qwen3) or a tiny one
//! is enough (thread, batch and prefill invariance; CPU vs GPU kernel checks).
//!
//! Weights are drawn from a seeded splitmix64 stream (approximately normal, a sum of four
//! uniforms), scaled by `1/sqrt(cols)` so activations stay O(1) through the layers; norm
//! weights are `1 + small noise`. Matrices are stored in `matrix_format` (quantized with
//! the `quant` module), vectors in F32.

use std::collections::BTreeMap;

use crate::model_file::gguf_write::{GgufWriteError, TensorSpec, gguf_to_vec};
use crate::model_file::{MetaArray, MetaValue};
use crate::quant::{self, QuantError, QuantFormat};

/// Shape and contents of a synthetic checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct SyntheticSpec {
    /// `llama`, `qwen2`, `qwen3` or `gemma3`.
    pub arch: &'static str,
    pub n_vocab: usize,
    pub n_embd: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub n_ff: usize,
    pub rope_base: f32,
    pub rms_eps: f32,
    /// Gemma 3: sliding window of the local layers (0: all global).
    pub sliding_window: usize,
    /// Gemma 3: explicit per-layer local/global pattern (`None`: the default period).
    pub swa_pattern: Option<Vec<bool>>,
    /// Store an `output.weight` (otherwise the head is tied to the embedding).
    pub untied_output: bool,
    pub matrix_format: QuantFormat,
    pub seed: u64,
}

impl SyntheticSpec {
    /// A small model of family `arch`: 3 layers, 64 wide, 4 heads of 16 (2 KV heads).
    pub fn tiny(arch: &'static str) -> Self {
        Self {
            arch,
            n_vocab: 96,
            n_embd: 64,
            n_layers: 3,
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: 16,
            n_ff: 96,
            rope_base: 10000.0,
            rms_eps: 1e-6,
            sliding_window: if arch == "gemma3" { 4 } else { 0 },
            swa_pattern: None,
            untied_output: arch != "gemma3",
            matrix_format: QuantFormat::F32,
            seed: 1,
        }
    }
}

/// Errors from building a synthetic checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum SyntheticError {
    #[error(transparent)]
    Quant(#[from] QuantError),
    #[error(transparent)]
    Write(#[from] GgufWriteError),
}

struct Stream(u64);

impl Stream {
    fn next(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    }
    /// Approximately N(0, 1/3): sum of four uniforms on [-0.5, 0.5).
    fn normal(&mut self) -> f32 {
        self.next() + self.next() + self.next() + self.next()
    }
}

/// The tensors (name, GGUF dims, values) of a checkpoint, in file order.
fn tensors(s: &SyntheticSpec) -> Vec<(String, Vec<u64>, Vec<f32>, bool)> {
    let mut rng = Stream(s.seed);
    let mut out = Vec::new();
    let matrix = |rng: &mut Stream, name: String, rows: usize, cols: usize| {
        let k = 1.0 / (cols as f32).sqrt() * 1.7;
        let v: Vec<f32> = (0..rows * cols).map(|_| rng.normal() * k).collect();
        (name, vec![cols as u64, rows as u64], v, true)
    };
    let vector = |rng: &mut Stream, name: String, n: usize, center: f32, spread: f32| {
        let v: Vec<f32> = (0..n).map(|_| center + rng.normal() * spread).collect();
        (name, vec![n as u64], v, false)
    };
    let (e, hd) = (s.n_embd, s.head_dim);
    let (q, kv) = (s.n_heads * hd, s.n_kv_heads * hd);
    let mut t = vec![matrix(&mut rng, "token_embd.weight".into(), s.n_vocab, e)];
    if s.arch != "gemma3" {
        // Embedding rows of unit-ish scale, like trained models.
        for x in &mut t[0].2 {
            *x *= (e as f32).sqrt() / 1.7 * 0.5;
        }
    }
    out.append(&mut t);
    for il in 0..s.n_layers {
        let p = |n: &str| format!("blk.{il}.{n}");
        out.push(vector(&mut rng, p("attn_norm.weight"), e, 1.0, 0.2));
        out.push(matrix(&mut rng, p("attn_q.weight"), q, e));
        out.push(matrix(&mut rng, p("attn_k.weight"), kv, e));
        out.push(matrix(&mut rng, p("attn_v.weight"), kv, e));
        if s.arch == "qwen2" {
            out.push(vector(&mut rng, p("attn_q.bias"), q, 0.0, 0.3));
            out.push(vector(&mut rng, p("attn_k.bias"), kv, 0.0, 0.3));
            out.push(vector(&mut rng, p("attn_v.bias"), kv, 0.0, 0.3));
        }
        if s.arch == "qwen3" || s.arch == "gemma3" {
            out.push(vector(&mut rng, p("attn_q_norm.weight"), hd, 1.0, 0.2));
            out.push(vector(&mut rng, p("attn_k_norm.weight"), hd, 1.0, 0.2));
        }
        out.push(matrix(&mut rng, p("attn_output.weight"), e, q));
        if s.arch == "gemma3" {
            out.push(vector(
                &mut rng,
                p("post_attention_norm.weight"),
                e,
                1.0,
                0.2,
            ));
        }
        out.push(vector(&mut rng, p("ffn_norm.weight"), e, 1.0, 0.2));
        out.push(matrix(&mut rng, p("ffn_gate.weight"), s.n_ff, e));
        out.push(matrix(&mut rng, p("ffn_up.weight"), s.n_ff, e));
        out.push(matrix(&mut rng, p("ffn_down.weight"), e, s.n_ff));
        if s.arch == "gemma3" {
            out.push(vector(&mut rng, p("post_ffw_norm.weight"), e, 1.0, 0.2));
        }
    }
    out.push(vector(&mut rng, "output_norm.weight".into(), e, 1.0, 0.2));
    if s.untied_output {
        out.push(matrix(&mut rng, "output.weight".into(), s.n_vocab, e));
    }
    out
}

/// The metadata of a checkpoint.
pub fn metadata(s: &SyntheticSpec) -> BTreeMap<String, MetaValue> {
    let mut m = BTreeMap::new();
    let a = s.arch;
    let u = |v: usize| MetaValue::U32(v as u32);
    m.insert("general.architecture".into(), MetaValue::String(a.into()));
    m.insert(
        "general.name".into(),
        MetaValue::String(format!("synthetic {a}")),
    );
    m.insert(format!("{a}.block_count"), u(s.n_layers));
    m.insert(format!("{a}.context_length"), u(4096));
    m.insert(format!("{a}.embedding_length"), u(s.n_embd));
    m.insert(format!("{a}.feed_forward_length"), u(s.n_ff));
    m.insert(format!("{a}.attention.head_count"), u(s.n_heads));
    m.insert(format!("{a}.attention.head_count_kv"), u(s.n_kv_heads));
    m.insert(format!("{a}.attention.key_length"), u(s.head_dim));
    m.insert(format!("{a}.attention.value_length"), u(s.head_dim));
    m.insert(
        format!("{a}.attention.layer_norm_rms_epsilon"),
        MetaValue::F32(s.rms_eps),
    );
    m.insert(format!("{a}.rope.freq_base"), MetaValue::F32(s.rope_base));
    if a == "gemma3" && s.sliding_window > 0 {
        m.insert(format!("{a}.attention.sliding_window"), u(s.sliding_window));
        if let Some(p) = &s.swa_pattern {
            m.insert(
                format!("{a}.attention.sliding_window_pattern"),
                MetaValue::Array(MetaArray::Bool(p.clone())),
            );
        }
    }
    m
}

/// A synthetic checkpoint as GGUF bytes.
pub fn gguf_bytes(s: &SyntheticSpec) -> Result<Vec<u8>, SyntheticError> {
    let ts = tensors(s);
    let mut specs = Vec::with_capacity(ts.len());
    let mut data = Vec::with_capacity(ts.len());
    for (name, dims, values, is_matrix) in &ts {
        let fmt = if *is_matrix {
            s.matrix_format
        } else {
            QuantFormat::F32
        };
        specs.push(TensorSpec::new(name.clone(), dims, fmt));
        data.push(quant::quantize_to_vec(fmt, values)?);
    }
    let pairs: Vec<(TensorSpec, &[u8])> = specs
        .into_iter()
        .zip(data.iter().map(Vec::as_slice))
        .collect();
    Ok(gguf_to_vec(&metadata(s), &pairs)?)
}
