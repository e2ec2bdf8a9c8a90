//! Criterion benchmark of the CPU reference executor on SmolLM2-135M (Q4_1/Q8_0):
//! prefill of a 128-token prompt and one-token decode at position 128, reported as tokens
//! per second (criterion's element throughput), with weights dequantized on every step and
//! with every matrix kept dequantized in memory. Skips with a message when the model is
//! not in `ASSAY_MODELS_DIR` (default `~/.cache/assay/models`).

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use engine::model_file::GgufModel;
use engine::reference::{Reference, ReferenceOptions};

const MODEL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const PROMPT: usize = 128;

fn model_path() -> PathBuf {
    let dir = match std::env::var_os("ASSAY_MODELS_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/assay/models")
        }
    };
    dir.join(MODEL)
}

fn bench(c: &mut Criterion) {
    let path = model_path();
    if !path.exists() {
        eprintln!(
            "skipping the reference benchmark: {} not found",
            path.display()
        );
        return;
    }
    let model = match GgufModel::open(&path) {
        Ok(m) => Arc::new(m),
        Err(e) => {
            eprintln!("skipping the reference benchmark: {e}");
            return;
        }
    };
    let mut r = match Reference::new(model, ReferenceOptions::default()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("skipping the reference benchmark: {e}");
            return;
        }
    };
    let prompt: Vec<u32> = (0..PROMPT as u32)
        .map(|i| 100 + (i * 7919) % 40000)
        .collect();
    let mut g = c.benchmark_group("smollm2_135m_reference");
    g.sample_size(10);
    g.throughput(Throughput::Elements(PROMPT as u64));
    g.bench_function("prefill_128", |b| {
        b.iter(|| {
            let mut kv = r.new_cache();
            black_box(r.step(&mut kv, black_box(&prompt)).ok())
        })
    });
    let mut kv = r.new_cache();
    if r.step(&mut kv, &prompt).is_err() {
        eprintln!("prefill failed; skipping decode");
        return;
    }
    g.throughput(Throughput::Elements(1));
    g.bench_function("decode_at_128", |b| {
        b.iter(|| {
            kv.truncate(PROMPT);
            black_box(r.step(&mut kv, black_box(&[42])).ok())
        })
    });
    // The same with every matrix kept dequantized (what `assay generate` does by default
    // for models that fit its 2 GiB budget).
    if let Err(e) = r.cache_weights(usize::MAX) {
        eprintln!("cannot cache weights: {e}");
        return;
    }
    g.bench_function("decode_at_128_cached_f32", |b| {
        b.iter(|| {
            kv.truncate(PROMPT);
            black_box(r.step(&mut kv, black_box(&[42])).ok())
        })
    });
    g.throughput(Throughput::Elements(PROMPT as u64));
    g.bench_function("prefill_128_cached_f32", |b| {
        b.iter(|| {
            let mut kv = r.new_cache();
            black_box(r.step(&mut kv, black_box(&prompt)).ok())
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
