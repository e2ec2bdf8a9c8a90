//! Encode throughput (MB/s) of the GGUF tokenizers on ~2 MB of mixed text: prose, code,
//! numbers, whitespace runs, CJK, emoji and chat markup, generated deterministically here.
//!
//! Needs the test models (tools/fetch-models); a missing model is skipped with a message.
//! Run: `cargo bench -p engine --bench tokenize`.

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use engine::model_file::GgufModel;
use engine::tokenizer::Tokenizer;

const MODELS: [&str; 3] = [
    "Qwen2.5-Coder-0.5B-Instruct.gguf",
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    "Gemma-3-270M.Q4_K_M.gguf",
];

/// Deterministic mixed text of about `bytes` bytes (xorshift-driven choice of snippets).
pub fn mixed_text(bytes: usize) -> String {
    const WORDS: &[&str] = &[
        "the",
        "model",
        "token",
        "inference",
        "engine",
        "receipt",
        "kernel",
        "throughput",
        "latency",
        "Hopper",
        "batch",
        "cache",
        "speculative",
        "decoding",
        "is",
        "of",
        "and",
        "a",
        "to",
        "in",
        "verified",
        "number",
        "don't",
        "it's",
        "we'll",
        "GPU",
        "memory",
        "bandwidth",
        "quantized",
    ];
    const CODE: &[&str] = &[
        "fn main() {\n    let x: Vec<u32> = (0..10).map(|i| i * 2).collect();\n    println!(\"{x:?}\");\n}\n",
        "def f(a, b=3):\n\treturn {'k': a ** b, \"s\": f\"{a!r}\"}\n\n",
        "for (int i = 0; i < n; ++i) { acc += a[i] * b[i]; }  // dot\n",
        "<div class=\"row\">&nbsp;<span id='x'>42</span></div>\n",
    ];
    const OTHER: &[&str] = &[
        "中文分词测试，这是一个句子。",
        "日本語のテキストです。",
        "한국어 문장입니다.",
        "🦙🚀✨👍🏽",
        "Привет, мир!",
        "Ünïcödé façade naïve café",
        "3.14159 2718281828 1,000,000 0x7fff",
        "    \n\n\t  \n",
        "<|im_start|>user\nhello<|im_end|>\n",
        "\\n\\t\\u00e9 \\x00",
    ];
    let mut s = String::with_capacity(bytes + 256);
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    while s.len() < bytes {
        let r = next();
        match r % 10 {
            0..=5 => {
                for _ in 0..(r >> 8) % 12 + 3 {
                    let w = WORDS[(next() % WORDS.len() as u64) as usize];
                    s.push_str(w);
                    s.push(' ');
                }
                s.push_str(if r % 3 == 0 { ".\n" } else { ", " });
            }
            6 | 7 => s.push_str(CODE[((r >> 16) % CODE.len() as u64) as usize]),
            _ => {
                s.push_str(OTHER[((r >> 16) % OTHER.len() as u64) as usize]);
                s.push(' ');
            }
        }
    }
    s
}

fn models_dir() -> PathBuf {
    match std::env::var_os("ASSAY_MODELS_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/assay/models")
        }
    }
}

fn encode(c: &mut Criterion) {
    let text = mixed_text(2 << 20);
    let mut group = c.benchmark_group("encode");
    group.throughput(Throughput::Bytes(text.len() as u64));
    group.sample_size(10);
    for name in MODELS {
        let path = models_dir().join(name);
        let Ok(model) = GgufModel::open(&path) else {
            println!("skip {name}: not found in {}", models_dir().display());
            continue;
        };
        let Ok(tok) = Tokenizer::from_gguf(model.header()) else {
            println!("skip {name}: tokenizer does not load");
            continue;
        };
        let label = format!("{}/{}", name.trim_end_matches(".gguf"), tok.pre_name());
        group.bench_function(label, |b| {
            b.iter(|| tok.encode(black_box(&text), false, true))
        });
    }
    group.finish();
}

criterion_group!(benches, encode);
criterion_main!(benches);
