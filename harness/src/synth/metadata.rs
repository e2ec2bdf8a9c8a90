//! GGUF metadata of a synthetic checkpoint: the architecture's hyper-parameters from the
//! shape, and a real tokenizer — every `tokenizer.*` key of the donor test model — padded
//! with unused tokens when the shape's vocabulary is larger than the donor's.

use std::collections::BTreeMap;

use anyhow::{Result, bail};
use engine::model_file::{GgufHeader, MetaArray, MetaValue};

use super::shapes::{Arch, Shape};
use super::tensors::Mix;

/// GGUF token type of padding tokens (`UNUSED`).
const TOKEN_UNUSED: i32 = 5;

/// The donor's vocabulary size (length of `tokenizer.ggml.tokens`).
pub fn donor_vocab(donor: &GgufHeader) -> Result<usize> {
    match donor.get("tokenizer.ggml.tokens") {
        Some(MetaValue::Array(MetaArray::String(t))) => Ok(t.len()),
        _ => bail!("the donor model has no tokenizer.ggml.tokens"),
    }
}

/// Pad a per-token metadata array to `vocab` entries.
fn pad(key: &str, a: &MetaArray, vocab: usize) -> Result<MetaArray> {
    let n = a.len();
    Ok(match a {
        MetaArray::String(v) if key.ends_with(".tokens") => {
            let mut v = v.clone();
            v.extend((n..vocab).map(|i| format!("<|synthetic_pad_{i}|>")));
            MetaArray::String(v)
        }
        MetaArray::I32(v) => {
            let mut v = v.clone();
            v.resize(vocab, TOKEN_UNUSED);
            MetaArray::I32(v)
        }
        MetaArray::F32(v) => {
            let mut v = v.clone();
            v.resize(vocab, 0.0);
            MetaArray::F32(v)
        }
        _ => bail!("cannot pad {key} ({} array)", a.elem_type_name()),
    })
}

/// The metadata of a synthetic `arch` checkpoint of `shape` with `vocab` tokens.
pub fn metadata(
    arch: Arch,
    shape: &Shape,
    mix: Mix,
    seed: u64,
    donor: &GgufHeader,
    vocab: usize,
) -> Result<BTreeMap<String, MetaValue>> {
    let dv = donor_vocab(donor)?;
    if vocab < dv {
        bail!("vocabulary {vocab} is smaller than the donor tokenizer's {dv}");
    }
    let mut m = BTreeMap::new();
    for (k, v) in &donor.metadata {
        if !k.starts_with("tokenizer.") {
            continue;
        }
        let per_token = matches!(
            k.as_str(),
            "tokenizer.ggml.tokens" | "tokenizer.ggml.scores" | "tokenizer.ggml.token_type"
        );
        let v = match v {
            MetaValue::Array(a) if per_token && a.len() == dv => {
                MetaValue::Array(pad(k, a, vocab)?)
            }
            other => other.clone(),
        };
        m.insert(k.clone(), v);
    }
    let s = |v: &str| MetaValue::String(v.to_owned());
    let u = |v: usize| MetaValue::U32(v as u32);
    let a = arch.name();
    m.insert("general.architecture".into(), s(a));
    m.insert(
        "general.name".into(),
        s(&format!(
            "synthetic {} {} seed {seed}",
            shape.name,
            mix.name()
        )),
    );
    m.insert("general.type".into(), s("model"));
    m.insert("general.file_type".into(), u(mix.file_type() as usize));
    m.insert("general.quantization_version".into(), u(2));
    let mut k = |key: &str, v: MetaValue| {
        m.insert(format!("{a}.{key}"), v);
    };
    k("block_count", u(shape.n_layers));
    k("context_length", u(shape.n_ctx));
    k("embedding_length", u(shape.n_embd));
    k("feed_forward_length", u(shape.n_ff));
    k("attention.head_count", u(shape.n_heads));
    k("attention.head_count_kv", u(shape.n_kv_heads));
    k("attention.key_length", u(shape.head_dim));
    k("attention.value_length", u(shape.head_dim));
    k(
        "attention.layer_norm_rms_epsilon",
        MetaValue::F32(shape.rms_eps),
    );
    k("rope.freq_base", MetaValue::F32(shape.rope_base));
    match arch {
        Arch::Llama => {
            k("rope.dimension_count", u(shape.head_dim));
            k("vocab_size", u(vocab));
        }
        Arch::Gemma3 => {
            if let Some(w) = shape.sliding_window {
                k("attention.sliding_window", u(w));
            }
        }
        Arch::Qwen2 | Arch::Qwen3 => {}
    }
    Ok(m)
}
