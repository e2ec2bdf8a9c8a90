//! The Hugging Face side of a bf16 synthetic checkpoint: tensor names, the row order of
//! Llama's Q/K projections (GGUF stores them permuted for interleaved RoPE, HF in halves),
//! Gemma's norm convention (GGUF stores `1 + w`, HF stores `w`), a streaming safetensors
//! writer and `config.json`, so that vLLM / transformers load the very same weights.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::{Context, Result, bail};
use serde_json::json;

use super::shapes::{Arch, Shape};
use super::tensors::Planned;

/// The HF name of a GGUF tensor.
pub fn hf_name(arch: Arch, gguf: &str) -> Option<String> {
    match gguf {
        "token_embd.weight" => return Some("model.embed_tokens.weight".into()),
        "output_norm.weight" => return Some("model.norm.weight".into()),
        "output.weight" => return Some("lm_head.weight".into()),
        _ => {}
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, leaf) = rest.split_once('.')?;
    let gemma = arch == Arch::Gemma3;
    let hf = match leaf {
        "attn_norm.weight" => "input_layernorm.weight",
        "attn_q.weight" => "self_attn.q_proj.weight",
        "attn_k.weight" => "self_attn.k_proj.weight",
        "attn_v.weight" => "self_attn.v_proj.weight",
        "attn_q.bias" => "self_attn.q_proj.bias",
        "attn_k.bias" => "self_attn.k_proj.bias",
        "attn_v.bias" => "self_attn.v_proj.bias",
        "attn_q_norm.weight" => "self_attn.q_norm.weight",
        "attn_k_norm.weight" => "self_attn.k_norm.weight",
        "attn_output.weight" => "self_attn.o_proj.weight",
        "post_attention_norm.weight" => "post_attention_layernorm.weight",
        "ffn_norm.weight" if gemma => "pre_feedforward_layernorm.weight",
        "ffn_norm.weight" => "post_attention_layernorm.weight",
        "post_ffw_norm.weight" => "post_feedforward_layernorm.weight",
        "ffn_gate.weight" => "mlp.gate_proj.weight",
        "ffn_up.weight" => "mlp.up_proj.weight",
        "ffn_down.weight" => "mlp.down_proj.weight",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{hf}"))
}

/// Whether HF stores this tensor's rows in another order than GGUF (Llama Q and K).
pub fn needs_unpermute(arch: Arch, gguf: &str) -> bool {
    arch == Arch::Llama && (gguf.ends_with("attn_q.weight") || gguf.ends_with("attn_k.weight"))
}

/// Reorder whole heads of rows (each `head_dim` rows of `row_bytes`) from GGUF's
/// interleaved order to HF's halves: HF row `r * hd/2 + i` = GGUF row `2 i + r`.
pub fn unpermute_heads(data: &[u8], row_bytes: usize, head_dim: usize) -> Vec<u8> {
    let mut out = vec![0u8; data.len()];
    let head_bytes = row_bytes * head_dim;
    for (src, dst) in data.chunks(head_bytes).zip(out.chunks_mut(head_bytes)) {
        for i in 0..head_dim / 2 {
            for r in 0..2 {
                let from = (2 * i + r) * row_bytes;
                let to = (r * head_dim / 2 + i) * row_bytes;
                dst[to..to + row_bytes].copy_from_slice(&src[from..from + row_bytes]);
            }
        }
    }
    out
}

/// Whether the HF value is the GGUF value minus one (Gemma's RMSNorm weights).
pub fn minus_one(arch: Arch, gguf: &str) -> bool {
    arch == Arch::Gemma3 && gguf.ends_with("norm.weight")
}

/// A safetensors file being written: header first, then each tensor's bytes in order.
pub struct SafetensorsWriter<W: Write> {
    out: W,
    sizes: Vec<(String, u64)>,
    current: usize,
    written: u64,
}

impl<W: Write> SafetensorsWriter<W> {
    /// Write the header for `tensors` (HF name, shape in HF order), all BF16.
    pub fn new(mut out: W, tensors: &[(String, Vec<u64>)]) -> Result<Self> {
        let mut header = serde_json::Map::new();
        let mut offset = 0u64;
        let mut sizes = Vec::new();
        for (name, shape) in tensors {
            let bytes = shape.iter().product::<u64>() * 2;
            header.insert(
                name.clone(),
                json!({"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + bytes]}),
            );
            sizes.push((name.clone(), bytes));
            offset += bytes;
        }
        header.insert(
            "__metadata__".into(),
            json!({"format": "pt", "producer": "assay harness synth"}),
        );
        let mut text = serde_json::to_string(&header).context("encoding the header")?;
        while text.len() % 8 != 0 {
            text.push(' ');
        }
        out.write_all(&(text.len() as u64).to_le_bytes())?;
        out.write_all(text.as_bytes())?;
        Ok(Self {
            out,
            sizes,
            current: 0,
            written: 0,
        })
    }

    /// Append bytes of the current tensor.
    pub fn write(&mut self, chunk: &[u8]) -> Result<()> {
        let Some((name, size)) = self.sizes.get(self.current) else {
            bail!("safetensors: data past the last tensor");
        };
        if self.written + chunk.len() as u64 > *size {
            bail!("safetensors: {name}: more data than its shape holds");
        }
        self.out.write_all(chunk)?;
        self.written += chunk.len() as u64;
        if self.written == *size {
            self.current += 1;
            self.written = 0;
        }
        Ok(())
    }

    pub fn finish(mut self) -> Result<W> {
        if self.current != self.sizes.len() {
            bail!(
                "safetensors: {} of {} tensors written",
                self.current,
                self.sizes.len()
            );
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

/// The HF (name, shape) list of an inventory.
pub fn hf_tensors(arch: Arch, inv: &[Planned]) -> Result<Vec<(String, Vec<u64>)>> {
    inv.iter()
        .map(|t| {
            let name =
                hf_name(arch, &t.name).with_context(|| format!("no HF name for {}", t.name))?;
            Ok((name, t.dims.iter().rev().copied().collect()))
        })
        .collect()
}

/// `config.json` for the checkpoint.
pub fn config_json(
    arch: Arch,
    shape: &Shape,
    vocab: usize,
    bos: Option<u64>,
    eos: Option<u64>,
) -> serde_json::Value {
    let (model_type, class, act) = match arch {
        Arch::Llama => ("llama", "LlamaForCausalLM", "silu"),
        Arch::Qwen2 => ("qwen2", "Qwen2ForCausalLM", "silu"),
        Arch::Qwen3 => ("qwen3", "Qwen3ForCausalLM", "silu"),
        Arch::Gemma3 => ("gemma3_text", "Gemma3ForCausalLM", "gelu_pytorch_tanh"),
    };
    let mut c: BTreeMap<&str, serde_json::Value> = BTreeMap::new();
    c.insert("architectures", json!([class]));
    c.insert("model_type", json!(model_type));
    c.insert("hidden_size", json!(shape.n_embd));
    c.insert("intermediate_size", json!(shape.n_ff));
    c.insert("num_hidden_layers", json!(shape.n_layers));
    c.insert("num_attention_heads", json!(shape.n_heads));
    c.insert("num_key_value_heads", json!(shape.n_kv_heads));
    c.insert("head_dim", json!(shape.head_dim));
    c.insert("vocab_size", json!(vocab));
    c.insert("max_position_embeddings", json!(shape.n_ctx));
    c.insert("rms_norm_eps", json!(shape.rms_eps));
    c.insert("rope_theta", json!(shape.rope_base));
    c.insert("hidden_act", json!(act));
    c.insert("tie_word_embeddings", json!(shape.tied));
    c.insert("torch_dtype", json!("bfloat16"));
    c.insert("bos_token_id", json!(bos));
    c.insert("eos_token_id", json!(eos));
    if arch == Arch::Qwen2 {
        c.insert("attention_bias", json!(true));
    }
    if arch == Arch::Gemma3 {
        c.insert("sliding_window", json!(shape.sliding_window));
        c.insert("sliding_window_pattern", json!(6));
        c.insert("query_pre_attn_scalar", json!(shape.head_dim));
        c.insert("rope_local_base_freq", json!(10_000.0));
        c.insert("hidden_activation", json!(act));
    }
    json!(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unpermute_inverts_the_gguf_interleave() {
        // One head of 4 rows of 1 byte: HF rows [a0 a1 b0 b1] are stored by GGUF as
        // [a0 b0 a1 b1] (pairs (i, i + hd/2) adjacent).
        let gguf = [10u8, 20, 11, 21, 30, 40, 31, 41];
        assert_eq!(
            unpermute_heads(&gguf, 1, 4),
            vec![10, 11, 20, 21, 30, 31, 40, 41]
        );
    }

    #[test]
    fn names_map_for_every_family() {
        assert_eq!(
            hf_name(Arch::Gemma3, "blk.3.ffn_norm.weight").unwrap(),
            "model.layers.3.pre_feedforward_layernorm.weight"
        );
        assert_eq!(
            hf_name(Arch::Llama, "blk.0.ffn_norm.weight").unwrap(),
            "model.layers.0.post_attention_layernorm.weight"
        );
        assert_eq!(
            hf_name(Arch::Qwen2, "blk.1.attn_q.bias").unwrap(),
            "model.layers.1.self_attn.q_proj.bias"
        );
        assert!(hf_name(Arch::Llama, "blk.0.mystery.weight").is_none());
    }

    #[test]
    fn safetensors_header_and_data_line_up() {
        let tensors = vec![
            ("a".to_owned(), vec![2u64, 2]),
            ("b".to_owned(), vec![3u64]),
        ];
        let mut w = SafetensorsWriter::new(Vec::new(), &tensors).unwrap();
        w.write(&[1; 4]).unwrap();
        w.write(&[2; 4]).unwrap();
        w.write(&[3; 6]).unwrap();
        assert!(w.write(&[0]).is_err());
        let bytes = w.finish().unwrap();
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        assert_eq!(n % 8, 0);
        let h: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
        assert_eq!(h["b"]["data_offsets"], json!([8, 14]));
        assert_eq!(bytes.len(), 8 + n + 14);
    }
}
