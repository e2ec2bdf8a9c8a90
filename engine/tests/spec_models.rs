//! Speculative decoding on the real test models (CPU reference executor), bounded for CI:
//! the full check (128 tokens x K = 1..8 x 3 prompts, both proposers) is the `spec` gate of
//! `harness gate --full` (its default size is smaller: `gates/src/spec_gates/cpu.rs`); here
//! n-gram lookup on SmolLM2 runs 24 tokens for K in {1, 2, 4, 8} on three prompts, and the
//! Qwen2.5-Coder pair (0.5B drafting for 1.5B, the slow one) 6 tokens for K in {2, 5} on
//! one prompt. Also: a draft with another vocabulary is refused, and `assay generate
//! --spec` prints the plain tokens plus acceptance statistics. Models are found through
//! `ASSAY_MODELS_DIR` (default `~/.cache/assay/models`); a missing model is skipped with a
//! message.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use engine::kv::KvDtype;
use engine::model_file::GgufModel;
use engine::reference::{Reference, ReferenceOptions};
use engine::sampling::{Sampler, SamplerConfig};
use engine::spec::{
    DepthConfig, DraftModel, ExactVerifier, NgramProposer, Proposer, ReferenceTarget, SpecError,
    SpecOptions, generate, plain_generate,
};
use engine::tokenizer::Tokenizer;

const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const QWEN05: &str = "Qwen2.5-Coder-0.5B-Instruct.gguf";
const QWEN15: &str = "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf";

const PROMPTS: [&str; 3] = [
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "fn area(w: u32, h: u32) -> u32 {\n    w * h\n}\n\nfn perimeter(w: u32, h: u32) -> u32 {\n",
    "Colors: red, green, blue. Colors again: red, green,",
];

fn models_dir() -> PathBuf {
    match std::env::var_os("ASSAY_MODELS_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/assay/models")
        }
    }
}

fn open(name: &str) -> Option<Arc<GgufModel>> {
    let path = models_dir().join(name);
    if !path.exists() {
        println!("SKIP {name}: not found at {}", path.display());
        return None;
    }
    Some(Arc::new(GgufModel::open(&path).unwrap()))
}

fn exec(m: &Arc<GgufModel>) -> Reference {
    let mut r = Reference::new(
        m.clone(),
        ReferenceOptions {
            threads: Some(2),
            kv_dtype: KvDtype::F16,
        },
    )
    .unwrap();
    r.cache_weights(3 << 30).unwrap();
    r
}

fn encode(m: &GgufModel, text: &str) -> Vec<u32> {
    Tokenizer::from_gguf(m.header())
        .unwrap()
        .encode(text, true, false)
        .unwrap()
}

fn opts(k: usize) -> SpecOptions {
    SpecOptions {
        depth: DepthConfig::fixed(k),
        eog: Vec::new(),
        ignore_eos: true,
    }
}

fn plain(r: &Reference, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut t = ReferenceTarget::new(r);
    let mut s = Sampler::new(SamplerConfig::default());
    plain_generate(&mut t, &mut s, prompt, n, &opts(1), &mut |_| Ok(()))
        .unwrap()
        .tokens
}

fn spec(r: &Reference, p: &mut dyn Proposer, prompt: &[u32], n: usize, k: usize) -> Vec<u32> {
    let mut t = ReferenceTarget::new(r);
    let mut s = Sampler::new(SamplerConfig::default());
    let g = generate(
        &mut t,
        p,
        &mut ExactVerifier,
        &mut s,
        prompt,
        n,
        &opts(k),
        &mut |_| Ok(()),
    )
    .unwrap();
    println!("K={k}: {}", g.stats.report().join(" | "));
    g.tokens
}

#[test]
fn ngram_on_smollm2_equals_plain_greedy() {
    let Some(m) = open(SMOL) else { return };
    let r = exec(&m);
    let mut any_accepted = false;
    for text in PROMPTS {
        let prompt = encode(&m, text);
        let want = plain(&r, &prompt, 24);
        for k in [1, 2, 4, 8] {
            let mut t = ReferenceTarget::new(&r);
            let mut s = Sampler::new(SamplerConfig::default());
            let g = generate(
                &mut t,
                &mut NgramProposer::default(),
                &mut ExactVerifier,
                &mut s,
                &prompt,
                24,
                &opts(k),
                &mut |_| Ok(()),
            )
            .unwrap();
            assert_eq!(g.tokens, want, "prompt {text:?} K={k}");
            any_accepted |= g.stats.accepted.iter().sum::<u64>() > 0;
        }
    }
    assert!(
        any_accepted,
        "n-gram lookup never accepted a token on repetitive prompts"
    );
}

#[test]
fn qwen_pair_equals_plain_greedy_and_other_vocab_is_refused() {
    let (Some(big), Some(small)) = (open(QWEN15), open(QWEN05)) else {
        return;
    };
    let r = exec(&big);
    let n_vocab = r.program().shape.n_vocab;
    let d = Arc::new(exec(&small));
    let prompt = encode(&big, PROMPTS[0]);
    let want = plain(&r, &prompt, 6);
    for k in [2, 5] {
        let mut draft = DraftModel::new(
            d.clone(),
            &big,
            n_vocab,
            "0.5B".into(),
            &SamplerConfig::default(),
        )
        .unwrap();
        assert_eq!(spec(&r, &mut draft, &prompt, 6, k), want, "K={k}");
    }
    if let Some(smol) = open(SMOL) {
        let e = DraftModel::new(
            Arc::new(exec(&smol)),
            &big,
            n_vocab,
            "smol".into(),
            &SamplerConfig::default(),
        )
        .err()
        .unwrap();
        assert!(matches!(e, SpecError::VocabMismatch(_)), "{e}");
        assert!(e.to_string().contains("vocabulary"), "{e}");
    }
}

fn assay(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_assay"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn cli_spec_ngram_prints_the_plain_tokens_and_statistics() {
    let path = models_dir().join(SMOL);
    if !path.exists() {
        println!("SKIP {SMOL}");
        return;
    }
    let p = path.to_str().unwrap();
    let base = [
        "generate",
        p,
        "--json",
        "--threads",
        "2",
        "-n",
        "20",
        "-p",
        PROMPTS[0],
    ];
    let (ok, plain_out, err) = assay(&base);
    assert!(ok, "{err}");
    let mut args = base.to_vec();
    args.extend(["--spec", "ngram", "--spec-k", "3"]);
    let (ok, spec_out, err) = assay(&args);
    assert!(ok, "{err}");
    let a: serde_json::Value = serde_json::from_str(plain_out.trim()).unwrap();
    let b: serde_json::Value = serde_json::from_str(spec_out.trim()).unwrap();
    assert_eq!(a["tokens"], b["tokens"]);
    assert_eq!(b["spec"]["proposer"], "ngram");
    // The speed policy (on by default for greedy runs) says what it decided and why.
    assert!(err.contains("policy: token "), "{err}");
    // With the policy off every round drafts: per-position statistics.
    args.extend(["--spec-policy", "off"]);
    let (ok, spec_out, err) = assay(&args);
    assert!(ok, "{err}");
    let b: serde_json::Value = serde_json::from_str(spec_out.trim()).unwrap();
    assert_eq!(a["tokens"], b["tokens"]);
    assert!(err.contains("position 1: accepted"), "{err}");
    let (ok, _, err) = assay(&["generate", p, "-n", "2", "-p", "x", "--spec", "medusa"]);
    assert!(
        !ok && err.contains("expected `ngram` or `draft:MODEL`"),
        "{err}"
    );
    let (ok, _, err) = assay(&[
        "generate", p, "-n", "2", "-p", "x", "--spec", "ngram", "--spec-k", "0",
    ]);
    assert!(!ok && err.contains("out of range"), "{err}");
}
