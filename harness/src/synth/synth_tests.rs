//! Tests of `harness synth`: tiny checkpoints of every family open, carry the real
//! families' tensor names, are deterministic across thread counts, and the BF16 one has a
//! safetensors twin with the same values.

use super::*;
use engine::model_file::MetaValue;
use std::collections::BTreeSet;

fn models_dir() -> PathBuf {
    match std::env::var_os("ASSAY_MODELS_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/assay/models"),
    }
}

fn donor(arch: Arch) -> Option<PathBuf> {
    match engine::catalog::resolve(arch.tokenizer_donor(), &models_dir()) {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("skipped: {e}");
            None
        }
    }
}

fn spec(arch: Arch, quant: &str, out: PathBuf, donor: PathBuf) -> SynthSpec {
    SynthSpec {
        arch,
        shape: shapes::find("tiny", arch).unwrap(),
        mix: Mix::parse(quant).unwrap(),
        seed: 42,
        out,
        donor,
        safetensors: true,
    }
}

/// Tensor names with the layer number removed, e.g. `blk.attn_q.weight`.
fn leaves(m: &GgufModel) -> BTreeSet<String> {
    m.header()
        .tensors
        .iter()
        .filter(|t| !t.name.starts_with("blk.") || t.name.starts_with("blk.0."))
        .map(|t| t.name.replace("blk.0.", "blk."))
        .collect()
}

#[test]
fn tiny_checkpoints_of_every_family_have_the_real_tensor_names() {
    let dir = tempfile::tempdir().unwrap();
    for arch in [Arch::Llama, Arch::Qwen2, Arch::Gemma3, Arch::Qwen3] {
        let Some(d) = donor(arch) else { return };
        let out = dir.path().join(format!("{arch}.gguf"));
        let s = generate(
            &spec(arch, "Q8_0", out.clone(), d.clone()),
            &ProgressBar::hidden(),
        )
        .unwrap();
        let m = GgufModel::open(&out).unwrap();
        let h = m.header();
        assert_eq!(h.architecture(), Some(arch.name()));
        assert_eq!(h.tensors.len(), s.tensors);
        assert_eq!(s.gguf_bytes, std::fs::metadata(&out).unwrap().len());
        let donor_model = GgufModel::open(&d).unwrap();
        let vocab = metadata::donor_vocab(donor_model.header()).unwrap();
        assert_eq!(
            h.tensor("token_embd.weight").unwrap().dims,
            vec![256, vocab as u64]
        );
        // The tokenizer came along.
        assert_eq!(
            h.get("tokenizer.ggml.model"),
            donor_model.header().get("tokenizer.ggml.model")
        );
        assert_eq!(
            h.get(&format!("{arch}.block_count")),
            Some(&MetaValue::U32(2))
        );
        // Same tensor names as the real model of the family (qwen3 has no test model: it
        // is qwen2 without biases, with QK-norm).
        let ours = leaves(&m);
        let mut real = leaves(&donor_model);
        real.insert("output.weight".into()); // our tiny shape is untied
        if arch == Arch::Qwen3 {
            real.retain(|n| !n.ends_with(".bias"));
            real.insert("blk.attn_q_norm.weight".into());
            real.insert("blk.attn_k_norm.weight".into());
        }
        assert_eq!(ours, real, "{arch}");
        // Every tensor decodes to finite values of a sane scale.
        let q = m.dequantize("blk.1.attn_q.weight").unwrap();
        let rms = (q.iter().map(|x| x * x).sum::<f32>() / q.len() as f32).sqrt();
        assert!((rms - 1.0 / 16.0).abs() < 0.01, "{arch}: rms {rms}");
        let norm = m.dequantize("output_norm.weight").unwrap();
        assert!(norm.iter().all(|x| (0.8..1.2).contains(x)));
        // The architecture program accepts it and the CPU reference runs it.
        run_a_few_tokens(&out, arch);
    }
}

/// Greedy-decode a few tokens on the CPU reference: finite logits, tokens in range.
fn run_a_few_tokens(path: &Path, arch: Arch) {
    use engine::reference::{Reference, ReferenceOptions, argmax};
    let model = std::sync::Arc::new(GgufModel::open(path).unwrap());
    let r = Reference::new(model, ReferenceOptions::default()).unwrap();
    let vocab = r.program().shape.n_vocab;
    let mut kv = r.new_cache();
    let mut logits = r.step(&mut kv, &[1, 2, 3, 4]).unwrap();
    for _ in 0..3 {
        assert_eq!(logits.len(), vocab, "{arch}");
        assert!(
            logits.iter().all(|x| x.is_finite()),
            "{arch}: non-finite logits"
        );
        let t = argmax(&logits) as u32;
        logits = r.step(&mut kv, &[t]).unwrap();
    }
    assert_eq!(kv.len(), 7);
}

#[test]
fn output_is_identical_whatever_the_thread_count() {
    let Some(d) = donor(Arch::Llama) else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for threads in [1, 2] {
        let out = dir.path().join(format!("t{threads}.gguf"));
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let sp = spec(Arch::Llama, "Q4_K_M", out.clone(), d.clone());
        pool.install(|| generate(&sp, &ProgressBar::hidden()))
            .unwrap();
        files.push(std::fs::read(out).unwrap());
    }
    assert_eq!(files[0], files[1]);
    // Another seed gives other weights.
    let out = dir.path().join("seed.gguf");
    let mut sp = spec(Arch::Llama, "Q4_K_M", out.clone(), d);
    sp.seed = 43;
    generate(&sp, &ProgressBar::hidden()).unwrap();
    assert_ne!(std::fs::read(out).unwrap(), files[0]);
}

#[test]
fn bf16_checkpoints_have_a_safetensors_twin_with_the_same_values() {
    let Some(d) = donor(Arch::Llama) else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bf16.gguf");
    let s = generate(
        &spec(Arch::Llama, "BF16", out.clone(), d),
        &ProgressBar::hidden(),
    )
    .unwrap();
    let hf = s.hf_dir.unwrap();
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(hf.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["hidden_size"], 256);
    assert_eq!(cfg["model_type"], "llama");
    let st = std::fs::read(hf.join("model.safetensors")).unwrap();
    let n = u64::from_le_bytes(st[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&st[8..8 + n]).unwrap();
    let m = GgufModel::open(&out).unwrap();
    let tensor = |hf_name: &str| {
        let e = &header[hf_name]["data_offsets"];
        let (a, b) = (
            e[0].as_u64().unwrap() as usize,
            e[1].as_u64().unwrap() as usize,
        );
        &st[8 + n + a..8 + n + b]
    };
    // Unpermuted tensors are byte-identical to the GGUF data.
    let t = m.header().tensor("blk.0.ffn_up.weight").unwrap();
    assert_eq!(
        tensor("model.layers.0.mlp.up_proj.weight"),
        m.tensor_bytes(t)
    );
    // Q rows come back in HF order.
    let t = m.header().tensor("blk.1.attn_q.weight").unwrap();
    assert_eq!(
        tensor("model.layers.1.self_attn.q_proj.weight"),
        &hf::unpermute_heads(m.tensor_bytes(t), 256 * 2, 64)[..]
    );
    assert_eq!(
        header["model.layers.1.self_attn.q_proj.weight"]["shape"],
        serde_json::json!([256, 256])
    );
}

#[test]
fn a_donor_without_tensors_writes_the_same_checkpoint() {
    for arch in [Arch::Llama, Arch::Qwen2, Arch::Gemma3] {
        let Some(full) = donor(arch) else { continue };
        let d = tempfile::tempdir().unwrap();
        let slim = d.path().join(format!("{arch}-tokenizer.gguf"));
        let n = donor::write_tokenizer_donor(&full, &slim).unwrap();
        assert!(
            n < std::fs::metadata(&full).unwrap().len() / 4,
            "{arch}: {n} bytes"
        );
        let m = GgufModel::open(&slim).unwrap();
        assert!(m.header().tensors.is_empty());
        let write = |donor: &Path, name: &str| {
            let out = d.path().join(name);
            let mut s = spec(arch, "Q8_0", out.clone(), donor.to_owned());
            s.safetensors = false;
            generate(&s, &ProgressBar::hidden()).unwrap();
            std::fs::read(out).unwrap()
        };
        assert!(
            write(&full, "a.gguf") == write(&slim, "b.gguf"),
            "{arch}: the checkpoint differs with the donor without tensors"
        );
    }
    // A file with no tokenizer cannot donate: a clear error, not a checkpoint without one.
    let d = tempfile::tempdir().unwrap();
    let bare = d.path().join("bare.gguf");
    engine::model_file::gguf_write::write_gguf(
        std::fs::File::create(&bare).unwrap(),
        &std::collections::BTreeMap::new(),
        &[],
    )
    .unwrap();
    let e = donor::write_tokenizer_donor(&bare, &d.path().join("x.gguf")).unwrap_err();
    assert!(
        format!("{e:#}").contains("cannot donate a tokenizer"),
        "{e:#}"
    );
}
