//! Gates on the CPU reference executor (the oracle), run on the default model:
//!
//! * `reference-determinism` — the logits of every position of a prompt are bit-identical
//!   with 1 thread and with every other thread count tried;
//! * `prefill-decode` — prefilling a prompt gives bit-identical logits, row by row, to
//!   feeding it one token at a time, and greedy continuation from both is identical.
//!
//! The checks take the executor as closures, so tests plant a fault (one flipped bit in
//! one row) and see the gate go red.

use std::path::Path;
use std::sync::Arc;

use engine::catalog;
use engine::model_file::GgufModel;
use engine::reference::{LogitRows, Reference, ReferenceError, ReferenceOptions, SeqInput};

use crate::model_facts::model_facts;
use crate::receipt::Workload;
use crate::{GateContext, GateDef, GateOutcome, Verdict};

/// The reference gates, in run order.
pub fn gates() -> Vec<GateDef> {
    vec![
        GateDef {
            name: "reference-determinism",
            about: "reference logits bit-identical across thread counts",
            needs_gpu: false,
            quick: true,
            run: determinism,
        },
        GateDef {
            name: "prefill-decode",
            about: "reference prefill == token-by-token decode, bit for bit",
            needs_gpu: false,
            quick: true,
            run: prefill_decode,
        },
    ]
}

/// A deterministic prompt of `n` ids below `vocab`.
pub fn prompt(n: usize, vocab: usize) -> Vec<u32> {
    let span = vocab.saturating_sub(1000).max(1);
    (0..n)
        .map(|i| (1000 + (7919 * i) % span) as u32 % vocab.max(1) as u32)
        .collect()
}

/// First differing position of two rows of logits, if any (bitwise).
fn first_diff(a: &[f32], b: &[f32]) -> Option<usize> {
    if a.len() != b.len() {
        return Some(a.len().min(b.len()));
    }
    a.iter()
        .zip(b)
        .position(|(x, y)| x.to_bits() != y.to_bits())
}

/// Compare `logits(threads)` for every thread count against 1 thread.
pub fn check_determinism(
    threads: &[usize],
    n_vocab: usize,
    mut logits: impl FnMut(usize) -> Result<Vec<f32>, String>,
) -> (Verdict, Vec<String>) {
    let base = match logits(1) {
        Ok(l) => l,
        Err(e) => return (Verdict::from_failures(vec![e]), vec![]),
    };
    let mut failures = Vec::new();
    for &t in threads.iter().filter(|&&t| t != 1) {
        match logits(t) {
            Ok(l) => {
                if let Some(i) = first_diff(&base, &l) {
                    failures.push(format!(
                        "{t} threads differ from 1 thread at position {} logit {}",
                        i / n_vocab.max(1),
                        i % n_vocab.max(1)
                    ));
                }
            }
            Err(e) => failures.push(format!("{t} threads: {e}")),
        }
    }
    let detail = format!(
        "{} logits bit-identical for threads {:?}",
        base.len(),
        std::iter::once(1)
            .chain(threads.iter().copied().filter(|&t| t != 1))
            .collect::<Vec<_>>()
    );
    (Verdict::from_failures(failures), vec![detail])
}

/// Compare prefill logits (all rows) with one-token steps, row by row.
pub fn check_prefill_decode(
    tokens: &[u32],
    n_vocab: usize,
    prefill: impl FnOnce(&[u32]) -> Result<Vec<f32>, String>,
    mut step: impl FnMut(u32) -> Result<Vec<f32>, String>,
) -> (Verdict, Vec<String>) {
    let all = match prefill(tokens) {
        Ok(l) => l,
        Err(e) => return (Verdict::from_failures(vec![e]), vec![]),
    };
    let mut failures = Vec::new();
    for (i, &t) in tokens.iter().enumerate() {
        let row = match step(t) {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("step {i}: {e}"));
                break;
            }
        };
        let want = all.get(i * n_vocab..(i + 1) * n_vocab).unwrap_or(&[]);
        if let Some(j) = first_diff(want, &row) {
            failures.push(format!(
                "position {i}: decode differs from prefill at logit {j}"
            ));
        }
    }
    let detail = format!(
        "{} positions x {n_vocab} logits bit-identical",
        tokens.len()
    );
    (Verdict::from_failures(failures), vec![detail])
}

fn err(e: ReferenceError) -> String {
    e.to_string()
}

/// Logits of every position of `tokens`, one prefill.
fn all_logits(r: &Reference, tokens: &[u32]) -> Result<Vec<f32>, String> {
    let mut kv = r.new_cache();
    let mut b = [SeqInput {
        kv: &mut kv,
        tokens,
        logits: LogitRows::All,
    }];
    r.forward(&mut b).map(|l| l.data).map_err(err)
}

/// The default model, opened, with its facts.
pub fn default_model(
    ctx: &GateContext,
) -> Result<(Arc<GgufModel>, crate::receipt::ModelFacts), String> {
    let name = ctx.default_model.clone();
    let m = catalog::models()
        .map_err(|e| e.to_string())?
        .into_iter()
        .find(|m| m.name == name)
        .ok_or_else(|| format!("default model {name} not in the catalog"))?;
    let path = ctx.models_dir.join(&m.file);
    let model =
        GgufModel::open(Path::new(&path)).map_err(|e| format!("{}: {e}", path.display()))?;
    let facts = model_facts(&name, &path, &model).map_err(|e| e.to_string())?;
    Ok((Arc::new(model), facts))
}

fn tokens_for(ctx: &GateContext) -> usize {
    if ctx.quick { 6 } else { 24 }
}

fn workload(ctx: &GateContext, n: usize) -> Workload {
    Workload {
        mode: Some("gate".into()),
        prompt_id: Some("ids-v1".into()),
        prompt_tokens: Some(n as u64),
        sampling: Some("greedy".into()),
        threads: Some(ctx.threads as u64),
        ..Workload::default()
    }
}

fn determinism(ctx: &GateContext) -> GateOutcome {
    let (model, facts) = match default_model(ctx) {
        Ok(x) => x,
        Err(e) => return GateOutcome::new(Verdict::from_failures(vec![e]), vec![]),
    };
    let n = tokens_for(ctx);
    let mut threads = vec![2, 3, ctx.threads.max(1)];
    threads.sort_unstable();
    threads.dedup();
    let build = |t: usize| {
        let opts = ReferenceOptions {
            threads: Some(t),
            ..ReferenceOptions::default()
        };
        Reference::new(model.clone(), opts).map_err(err)
    };
    let n_vocab = match build(1) {
        Ok(r) => r.program().shape.n_vocab,
        Err(e) => return GateOutcome::new(Verdict::from_failures(vec![e]), vec![]),
    };
    let toks = prompt(n, n_vocab);
    let (verdict, detail) = check_determinism(&threads, n_vocab, |t| all_logits(&build(t)?, &toks));
    GateOutcome {
        verdict,
        detail,
        model: Some(facts),
        workload: workload(ctx, n),
    }
}

fn prefill_decode(ctx: &GateContext) -> GateOutcome {
    let (model, facts) = match default_model(ctx) {
        Ok(x) => x,
        Err(e) => return GateOutcome::new(Verdict::from_failures(vec![e]), vec![]),
    };
    let n = tokens_for(ctx);
    let opts = ReferenceOptions {
        threads: Some(ctx.threads.max(1)),
        ..ReferenceOptions::default()
    };
    let r = match Reference::new(model, opts) {
        Ok(r) => r,
        Err(e) => return GateOutcome::new(Verdict::from_failures(vec![err(e)]), vec![]),
    };
    let n_vocab = r.program().shape.n_vocab;
    let toks = prompt(n, n_vocab);
    let mut kv = r.new_cache();
    let (verdict, detail) = check_prefill_decode(
        &toks,
        n_vocab,
        |t| all_logits(&r, t),
        |t| r.step(&mut kv, &[t]).map_err(err),
    );
    GateOutcome {
        verdict,
        detail,
        model: Some(facts),
        workload: workload(ctx, n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_logits(n: usize, vocab: usize) -> Vec<f32> {
        (0..n * vocab).map(|i| (i as f32 * 0.37).sin()).collect()
    }

    #[test]
    fn determinism_is_green_when_equal_and_red_on_one_flipped_bit() {
        let good = fake_logits(4, 10);
        let (v, _) = check_determinism(&[2, 4], 10, |_| Ok(good.clone()));
        assert_eq!(v, Verdict::Green);
        let (v, _) = check_determinism(&[2, 4], 10, |t| {
            let mut l = good.clone();
            if t == 4 {
                l[23] = f32::from_bits(l[23].to_bits() ^ 1);
            }
            Ok(l)
        });
        let Verdict::Red { failures } = v else {
            panic!("not red")
        };
        assert_eq!(
            failures,
            vec!["4 threads differ from 1 thread at position 2 logit 3".to_owned()]
        );
    }

    #[test]
    fn prefill_decode_is_red_when_one_step_differs() {
        let vocab = 10;
        let all = fake_logits(3, vocab);
        let rows: Vec<Vec<f32>> = all.chunks(vocab).map(<[f32]>::to_vec).collect();
        let toks = [5, 6, 7];
        let mut i = 0;
        let (v, _) = check_prefill_decode(
            &toks,
            vocab,
            |_| Ok(all.clone()),
            |_| {
                i += 1;
                Ok(rows[i - 1].clone())
            },
        );
        assert_eq!(v, Verdict::Green);
        let mut i = 0;
        let (v, _) = check_prefill_decode(
            &toks,
            vocab,
            |_| Ok(all.clone()),
            |_| {
                i += 1;
                let mut r = rows[i - 1].clone();
                if i == 2 {
                    r[0] += 1e-6;
                }
                Ok(r)
            },
        );
        assert!(v.is_red());
    }
}
