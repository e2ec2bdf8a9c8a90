//! Cost of structured output on the CPU: computing one llguidance token mask (what the
//! scheduler does before every constrained sample) at the start of a JSON schema and a few
//! tokens in, for the test models' vocabularies (49k SmolLM2, 152k Qwen).
//!
//! Needs the test models (tools/fetch-models); a missing model is skipped with a message.
//! Run: `cargo bench -p engine --bench grammar`.

#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use engine::api::constrain::{Constrained, GrammarEnv, GrammarSpec};
use engine::model_file::GgufModel;
use engine::tokenizer::Tokenizer;
use serde_json::json;

const MODELS: [&str; 2] = [
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    "Qwen2.5-Coder-0.5B-Instruct.gguf",
];

fn models_dir() -> PathBuf {
    match std::env::var_os("ASSAY_MODELS_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/assay/models")
        }
    }
}

fn spec() -> GrammarSpec {
    GrammarSpec::JsonSchema {
        schema: json!({"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 40},
            "kind": {"enum": ["cat", "dog", "bird"]},
            "tags": {"type": "array", "items": {"type": "string"}}},
            "required": ["name", "kind", "tags"]}),
        strict: true,
    }
}

/// A fresh matcher advanced by `steps` tokens, each the lowest allowed id (deterministic).
fn advanced(env: &GrammarEnv, steps: usize) -> Constrained {
    let mut c = env.compile(&spec()).unwrap();
    for _ in 0..steps {
        let m = c.mask().unwrap();
        let t = (0..m.words().len() as u32 * 32)
            .find(|&t| m.allows(t))
            .unwrap();
        c.commit(t).unwrap();
    }
    c
}

fn bench(c: &mut Criterion) {
    for name in MODELS {
        let path = models_dir().join(name);
        if !path.exists() {
            println!("SKIP: {} not found", path.display());
            continue;
        }
        let model = GgufModel::open(&path).unwrap();
        let tok = Tokenizer::from_gguf(model.header()).unwrap();
        let short = name.split('-').next().unwrap_or(name);
        let t0 = std::time::Instant::now();
        let env = GrammarEnv::new(&tok, tok.vocab_size()).unwrap();
        println!("{short}: grammar environment built in {:?}", t0.elapsed());
        let mut g = c.benchmark_group(format!("mask/{short}"));
        g.sample_size(20);
        // start of the object, and after three tokens (each the lowest allowed id)
        for (label, steps) in [("start", 0usize), ("after_3_tokens", 3)] {
            g.bench_function(label, |b| {
                b.iter_batched(
                    || advanced(&env, steps),
                    |mut m| black_box(m.mask().unwrap()),
                    BatchSize::SmallInput,
                )
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
