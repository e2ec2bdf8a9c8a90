//! Host cost of the speculative loop's speed policy while speculation is off: the replay of
//! the n-gram proposer over the latest plain tokens (`spec::replay`, every 16 tokens over
//! up to 32), on a context without repeats (every lookup fails: the worst case) and on one
//! that repeats itself. On the H200 a SmolLM2 step is ~0.7 ms, so microseconds per token
//! show on the spec-h200 board (research/notes/spec/).
//! Run: `cargo bench -p engine --bench spec`.

#![allow(clippy::unwrap_used)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use engine::spec::{DraftMode, NgramProposer, replay};

fn contexts() -> [(&'static str, Vec<u32>); 2] {
    // No token repeats: every lookup scans the whole context and finds nothing.
    let distinct: Vec<u32> = (0..160).map(|i| 1000 + i).collect();
    // A 40-token phrase repeated with small edits: lookups match early and long.
    let phrase: Vec<u32> = (0..40).map(|i| (i * 7 + 3) % 50).collect();
    let repeating: Vec<u32> = (0..160)
        .map(|i| if i % 37 == 0 { 999 } else { phrase[i % 40] })
        .collect();
    [("distinct-160", distinct), ("repeating-160", repeating)]
}

fn bench(c: &mut Criterion) {
    let mode = DraftMode {
        greedy: true,
        confidence: 0.0,
    };
    for (name, ctx) in contexts() {
        c.bench_function(&format!("ngram replay of 32 tokens, {name}"), |b| {
            let mut p = NgramProposer::default();
            b.iter(|| replay(&mut p, black_box(&ctx), ctx.len() - 32, 8, mode).unwrap())
        });
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).warm_up_time(std::time::Duration::from_secs(1)).measurement_time(std::time::Duration::from_secs(3));
    targets = bench
}
criterion_main!(benches);
