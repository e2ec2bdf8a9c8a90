//! The physical limit of a decode cell: bytes that must be read per generated token
//! (every weight but the embedding table, one embedding row, and the KV cache at the
//! cell's mean context) over the bandwidth measured in the same run.

use std::time::Instant;

use engine::model_file::GgufModel;
use gates::receipt::Roofline;

/// Weight + KV bytes read per generated token at mean context `ctx`, with KV elements of
/// `kv_bytes` bytes: every tensor, except that only one row of the embedding table is read
/// when the model has its own output head.
pub fn bytes_per_token(model: &GgufModel, ctx: f64, kv_bytes: f64) -> f64 {
    let h = model.header();
    // A tied output head reads the whole embedding table for the logits.
    let tied = h.tensor("output.weight").is_none();
    let mut bytes = 0f64;
    for t in &h.tensors {
        if t.name == "token_embd.weight" && !tied {
            let rows = t.dims.get(1).copied().unwrap_or(1).max(1);
            bytes += t.bytes as f64 / rows as f64;
        } else {
            bytes += t.bytes as f64;
        }
    }
    let arch = h.architecture().unwrap_or("");
    let get = |k: &str| h.get(&format!("{arch}.{k}")).and_then(|v| v.as_u64());
    let (Some(layers), Some(embd), Some(heads)) = (
        get("block_count"),
        get("embedding_length"),
        get("attention.head_count"),
    ) else {
        return bytes;
    };
    let kv_heads = get("attention.head_count_kv").unwrap_or(heads);
    let head_dim = get("attention.key_length").unwrap_or(embd / heads.max(1));
    // K and V of every layer, every position of the context.
    bytes + 2.0 * (layers * kv_heads * head_dim) as f64 * ctx * kv_bytes
}

/// Host memory bandwidth: the best of `reps` copies of `bytes` bytes, read + write
/// counted (the same convention as the GPU's device-to-device copy).
pub fn memcpy_bandwidth(bytes: usize, reps: usize) -> (f64, String) {
    let src: Vec<u8> = (0..bytes).map(|i| (i % 251) as u8).collect();
    let mut dst = vec![0u8; bytes];
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        dst.copy_from_slice(&src);
        best = best.min(t.elapsed().as_secs_f64());
        std::hint::black_box(&mut dst);
    }
    let bw = 2.0 * bytes as f64 / best.max(1e-9);
    let method = format!(
        "host memcpy {} MiB, best of {}, read+write counted",
        bytes >> 20,
        reps.max(1)
    );
    (bw, method)
}

/// The roofline of a cell.
pub fn roofline(bytes_per_token: f64, bandwidth: f64, method: String) -> Roofline {
    Roofline {
        bytes_per_token,
        bandwidth_bytes_per_s: bandwidth,
        bandwidth_method: method,
        limit_tokens_per_s: bandwidth / bytes_per_token,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::model_file::MetaValue;
    use engine::model_file::gguf_write::{TensorSpec, gguf_to_vec};
    use engine::quant::QuantFormat;
    use std::collections::BTreeMap;

    fn model(with_output: bool) -> (tempfile::TempDir, GgufModel) {
        let mut meta = BTreeMap::new();
        meta.insert(
            "general.architecture".into(),
            MetaValue::String("llama".into()),
        );
        for (k, v) in [
            ("block_count", 2u32),
            ("embedding_length", 64),
            ("attention.head_count", 4),
            ("attention.head_count_kv", 2),
        ] {
            meta.insert(format!("llama.{k}"), MetaValue::U32(v));
        }
        let embd = vec![0u8; 64 * 10 * 4];
        let w = vec![0u8; 64 * 64 * 4];
        let mut tensors = vec![
            (
                TensorSpec::new("token_embd.weight", &[64, 10], QuantFormat::F32),
                &embd[..],
            ),
            (
                TensorSpec::new("blk.0.attn_q.weight", &[64, 64], QuantFormat::F32),
                &w[..],
            ),
        ];
        if with_output {
            tensors.push((
                TensorSpec::new("output.weight", &[64, 10], QuantFormat::F32),
                &embd[..],
            ));
        }
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("m.gguf");
        std::fs::write(&p, gguf_to_vec(&meta, &tensors).unwrap()).unwrap();
        let m = GgufModel::open(&p).unwrap();
        (t, m)
    }

    #[test]
    fn bytes_per_token_counts_one_embedding_row_and_the_kv_cache() {
        // K,V: 2 layers x 2 KV heads x 16 dims x 100 positions x 2 bytes, twice.
        let kv = 2.0 * (2 * 2 * 16) as f64 * 100.0 * 2.0;
        // Own output head: one embedding row (256 B) + the matrix + the head (2560 B).
        let (_t, m) = model(true);
        assert_eq!(
            bytes_per_token(&m, 100.0, 2.0),
            256.0 + 16384.0 + 2560.0 + kv
        );
        // Tied: the whole embedding table is read as the output head.
        let (_t, m) = model(false);
        assert_eq!(bytes_per_token(&m, 100.0, 2.0), 2560.0 + 16384.0 + kv);
    }

    #[test]
    fn memcpy_bandwidth_is_positive() {
        let (bw, method) = memcpy_bandwidth(1 << 20, 2);
        assert!(bw > 1e6 && bw.is_finite());
        assert!(method.contains("1 MiB"));
        let r = roofline(1e6, 1e9, method);
        assert_eq!(r.limit_tokens_per_s, 1e3);
    }
}
