//! The CPU `spec` gate at three sizes ([`Size`]): `--quick` (pre-push), the default (what
//! `harness gate` runs; its sections took 3 min on a 2-core machine) and `--full` (the
//! whole matrix: K = 1..8 x 3 prompts x 128 tokens, for n-gram lookup on the default model
//! and for the Qwen2.5-Coder pair; estimated near an hour on 2 cores, not timed). Every
//! size runs every kind of check (greedy identity, seeded reproducibility, chi-square
//! fits); the sizes differ in depths, tokens, prompts and draws, and the gate's summary
//! line says which size ran. Each finished
//! section is reported through [`GateContext::progress`] with its time.

use std::time::Instant;

use super::*;

/// How much of the matrix one run covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Size {
    pub name: &'static str,
    /// n-gram lookup on the default model: tokens per run and depths (all three prompts).
    pub smol_tokens: usize,
    pub smol_ks: Vec<usize>,
    /// The Qwen pair's greedy identity: prompts (of [`PROMPTS`]), tokens, depths.
    pub qwen_prompts: usize,
    pub qwen_tokens: usize,
    pub qwen_ks: Vec<usize>,
    /// The Qwen pair's seeded reproducibility and first-token fit.
    pub qwen_sampled: bool,
    /// Draws per chi-square test.
    pub draws: usize,
}

impl Size {
    /// The size `ctx` asks for: `--quick`, `--full`, else the default.
    pub fn of(ctx: &GateContext) -> Size {
        if ctx.quick {
            Size::quick()
        } else if ctx.full {
            Size::full()
        } else {
            Size::default_size()
        }
    }

    /// Pre-push.
    pub fn quick() -> Size {
        Size {
            name: "quick",
            smol_tokens: 32,
            smol_ks: vec![1, 3, 8],
            qwen_prompts: 1,
            qwen_tokens: 8,
            qwen_ks: vec![1, 8],
            qwen_sampled: false,
            draws: 5_000,
        }
    }

    /// What `harness gate` runs without `--full`.
    pub fn default_size() -> Size {
        Size {
            name: "default",
            smol_tokens: 64,
            smol_ks: (1..=8).collect(),
            qwen_prompts: 1,
            qwen_tokens: 16,
            qwen_ks: vec![1, 4, 8],
            qwen_sampled: true,
            draws: 10_000,
        }
    }

    /// The issue's whole matrix (`--full`).
    pub fn full() -> Size {
        Size {
            name: "full",
            smol_tokens: 128,
            smol_ks: (1..=8).collect(),
            qwen_prompts: PROMPTS.len(),
            qwen_tokens: 128,
            qwen_ks: (1..=8).collect(),
            qwen_sampled: true,
            draws: 20_000,
        }
    }

    /// One line: what this size runs.
    pub fn describe(&self) -> String {
        format!(
            "{} size: n-gram K {:?} x {} prompts x {} tokens; Qwen pair K {:?} x {} prompt(s) x {} tokens{}; {} draws per fit",
            self.name,
            self.smol_ks,
            PROMPTS.len(),
            self.smol_tokens,
            self.qwen_ks,
            self.qwen_prompts,
            self.qwen_tokens,
            if self.qwen_sampled {
                ""
            } else {
                ", no sampled checks"
            },
            self.draws
        )
    }
}

/// Times the sections of a run and reports each through the context's progress sink.
struct Sections<'a> {
    ctx: &'a GateContext,
    at: Instant,
}

impl Sections<'_> {
    fn done(&mut self, what: &str) {
        let s = self.at.elapsed().as_secs_f64();
        self.ctx.progress.note(&format!("{what} ({s:.1} s)"));
        self.at = Instant::now();
    }
}

pub(super) fn spec_gate(ctx: &GateContext) -> GateOutcome {
    let size = Size::of(ctx);
    let mut sec = Sections {
        ctx,
        at: Instant::now(),
    };
    let mut failures = Vec::new();
    let mut detail = Vec::new();
    let (n_smol, ks) = (size.smol_tokens, size.smol_ks.clone());
    let draws = size.draws;
    let greedy = SamplerConfig::default();
    let sampled = SamplerConfig {
        temperature: 0.8,
        top_k: 40,
        seed: ctx.seed,
        ..SamplerConfig::default()
    };
    let mut facts = None;
    // n-gram on the default model.
    match open(ctx, &ctx.default_model) {
        Ok(Some((m, path))) => {
            facts = model_facts(&ctx.default_model, &path, &m).ok();
            let mut run = || -> Result<(), String> {
                let exec = reference(ctx, &m)?;
                let prompts = encode(&m)?;
                let (f, d) = check_greedy_identity(
                    &format!("ngram on {}", ctx.default_model),
                    &prompts,
                    &ks,
                    |p| plain_tokens(&exec, p, n_smol),
                    |p, k| spec_tokens(&exec, &mut NgramProposer::default(), &greedy, p, n_smol, k),
                );
                failures.extend(f);
                detail.push(d);
                sec.done(&format!(
                    "n-gram greedy identity on {}: {} prompts x K {ks:?} x {n_smol} tokens",
                    ctx.default_model,
                    prompts.len()
                ));
                // The same seeded run twice, each with a fresh proposer.
                let sampled_run = || {
                    let mut lookup = NgramProposer::default();
                    spec_tokens(&exec, &mut lookup, &sampled, &prompts[0], 48, 4)
                };
                let (a, b) = (sampled_run()?, sampled_run()?);
                if a.0 != b.0 {
                    failures.push("ngram sampled: same seed, different tokens".into());
                }
                detail.push(format!(
                    "ngram sampled (T=0.8, top-k 40, seed {}): 48 tokens reproduced",
                    ctx.seed
                ));
                sec.done("n-gram sampled reproducibility (48 tokens, twice)");
                // Real next-token distributions: the prompt's last row.
                let mut t = ReferenceTarget::new(&exec);
                let row = t.forward_last(&prompts[2]).map_err(|e| e.to_string())?;
                let cfg = SamplerConfig {
                    temperature: 1.0,
                    top_k: 24,
                    seed: ctx.seed,
                    ..SamplerConfig::default()
                };
                let hot = SamplerConfig {
                    temperature: 1.8,
                    ..cfg.clone()
                };
                let q = Sampler::new(hot).distribution(&row);
                let p = Sampler::new(cfg.clone()).distribution(&row);
                let x = p.get(1).map_or(0, |x| x.0);
                for (label, q) in [
                    ("SmolLM2 row, hot-copy draft", Some(q.as_slice())),
                    ("SmolLM2 row, deterministic proposal", None),
                ] {
                    let (f, d) =
                        first_token_fit(label, &row, q, x, &cfg, draws, &mut ExactVerifier);
                    failures.extend(f);
                    detail.push(d);
                }
                sec.done(&format!(
                    "first-token fits on a SmolLM2 row (2 x {draws} draws)"
                ));
                Ok(())
            };
            if let Err(e) = run() {
                failures.push(format!("ngram on {}: {e}", ctx.default_model));
            }
        }
        Ok(None) => failures.push(format!("default model {} not fetched", ctx.default_model)),
        Err(e) => failures.push(e),
    }
    // The Qwen pair.
    let pair = (
        open(ctx, "Qwen2.5-Coder-1.5B-Instruct"),
        open(ctx, "Qwen2.5-Coder-0.5B-Instruct"),
    );
    match pair {
        (Ok(Some((big, _))), Ok(Some((small, small_path)))) => {
            let mut run = || -> Result<(), String> {
                let exec = reference(ctx, &big)?;
                let n_vocab = exec.program().shape.n_vocab;
                let small_exec = Arc::new(reference(ctx, &small)?);
                let name = small_path
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let make = |cfg: &SamplerConfig| -> Result<DraftModel, String> {
                    DraftModel::new(small_exec.clone(), &big, n_vocab, name.clone(), cfg)
                        .map_err(|e| e.to_string())
                };
                let mut draft = make(&greedy)?;
                let prompts = encode(&big)?;
                let n_qwen = size.qwen_tokens;
                let (f, d) = check_greedy_identity(
                    "Qwen2.5-Coder 0.5B -> 1.5B",
                    &prompts[..size.qwen_prompts.min(prompts.len())],
                    &size.qwen_ks,
                    |p| plain_tokens(&exec, p, n_qwen),
                    |p, k| spec_tokens(&exec, &mut draft, &greedy, p, n_qwen, k),
                );
                failures.extend(f);
                detail.push(d);
                sec.done(&format!(
                    "Qwen pair greedy identity: {} prompt(s) x K {:?} x {n_qwen} tokens",
                    size.qwen_prompts, size.qwen_ks
                ));
                if !size.qwen_sampled {
                    return Ok(());
                }
                let a = spec_tokens(&exec, &mut make(&sampled)?, &sampled, &prompts[0], 16, 3)?;
                let b = spec_tokens(&exec, &mut make(&sampled)?, &sampled, &prompts[0], 16, 3)?;
                if a.0 != b.0 {
                    failures.push("Qwen pair sampled: same seed, different tokens".into());
                }
                detail.push("Qwen pair sampled (T=0.8, top-k 40): 16 tokens reproduced".into());
                let mut t = ReferenceTarget::new(&exec);
                let row = t.forward_last(&prompts[1]).map_err(|e| e.to_string())?;
                let mut td = ReferenceTarget::new(&small_exec);
                let qrow = td.forward_last(&prompts[1]).map_err(|e| e.to_string())?;
                let cfg = SamplerConfig {
                    temperature: 1.0,
                    top_k: 24,
                    seed: ctx.seed,
                    ..SamplerConfig::default()
                };
                let q = Sampler::new(cfg.clone()).distribution(&qrow);
                let (f, d) = first_token_fit(
                    "Qwen 1.5B row, Qwen 0.5B draft",
                    &row,
                    Some(&q),
                    0,
                    &cfg,
                    draws,
                    &mut ExactVerifier,
                );
                failures.extend(f);
                detail.push(d);
                sec.done(&format!(
                    "Qwen pair sampled reproducibility + first-token fit ({draws} draws)"
                ));
                Ok(())
            };
            if let Err(e) = run() {
                failures.push(format!("Qwen pair: {e}"));
            }
        }
        (Err(e), _) | (_, Err(e)) => failures.push(e),
        _ => detail.push("Qwen pair not fetched (tools/fetch-models): not checked".into()),
    }
    // Synthetic whole-sequence distributions.
    for (k, ngram) in [(1, false), (2, false), (4, false), (2, true), (4, true)] {
        let (f, d) = synthetic_sequences(ctx.seed, k, draws, ngram, &mut ExactVerifier);
        failures.extend(f);
        detail.push(d);
    }
    sec.done(&format!(
        "synthetic 3-token sequence fits (5 x {draws} draws)"
    ));
    let summary = format!(
        "greedy identical to plain for K {:?} ({} tokens); sampled seeded + chi-square fits; {}",
        ks,
        n_smol,
        size.describe()
    );
    detail.insert(0, summary);
    GateOutcome {
        verdict: Verdict::from_failures(failures),
        detail,
        model: facts,
        workload: Workload {
            mode: Some("gate".into()),
            prompt_id: Some("spec-gate-v1".into()),
            gen_tokens: Some(n_smol as u64),
            k: ks.last().map(|&k| k as u64),
            sampling: Some("greedy; T=0.8 top-k 40".into()),
            threads: Some(ctx.threads as u64),
            ..Workload::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_nest_and_full_is_the_issue_matrix() {
        let (q, d, f) = (Size::quick(), Size::default_size(), Size::full());
        assert_eq!(f.smol_ks, (1..=8).collect::<Vec<_>>());
        assert_eq!(f.qwen_ks, (1..=8).collect::<Vec<_>>());
        assert_eq!((f.smol_tokens, f.qwen_tokens), (128, 128));
        assert_eq!(f.qwen_prompts, 3);
        for (small, big) in [(&q, &d), (&d, &f)] {
            assert!(small.smol_tokens <= big.smol_tokens && small.qwen_tokens <= big.qwen_tokens);
            assert!(small.draws <= big.draws && small.qwen_prompts <= big.qwen_prompts);
            assert!(small.smol_ks.iter().all(|k| big.smol_ks.contains(k)));
            assert!(small.qwen_ks.iter().all(|k| big.qwen_ks.contains(k)));
        }
        // every size still checks the deepest speculation
        assert!([&q, &d, &f].iter().all(|s| s.smol_ks.contains(&8)));
        assert!(
            d.describe().starts_with(
                "default size: n-gram K [1, 2, 3, 4, 5, 6, 7, 8] x 3 prompts x 64 tokens"
            ),
            "{}",
            d.describe()
        );
    }

    #[test]
    fn size_follows_the_context() {
        let mut ctx = crate::bare_context();
        assert_eq!(Size::of(&ctx).name, "default");
        ctx.full = true;
        assert_eq!(Size::of(&ctx).name, "full");
        ctx.quick = true;
        assert_eq!(Size::of(&ctx).name, "quick");
    }
}
