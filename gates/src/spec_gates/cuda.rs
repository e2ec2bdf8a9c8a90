//! The `spec-cuda` gate: the speculative loops of [`super`] on the CUDA decoder
//! ([`CudaTarget`]): verification rows bit-identical to plain steps ([`check_rows_bits`]),
//! greedy speculative == plain greedy for K = 1..8 ([`target_identity`]). See the parent
//! module's header for what each check covers.

use super::*;

/// One verification forward against plain steps on `target`: feed `prompt`, make `extra`
/// plain greedy one-token steps (keeping each step's logits), roll back to before the
/// prompt's last token, then feed it and the `extra` tokens in one forward of every row:
/// each row's logits must equal the plain step's bit for bit, and (another rollback) the
/// arg-max rows must equal the greedy picks. Returns the failures and a detail line.
pub fn check_rows_bits(
    label: &str,
    target: &mut dyn Target,
    prompt: &[u32],
    extra: usize,
) -> Result<(Vec<String>, String), String> {
    let e = |e: engine::spec::SpecError| format!("{label}: {e}");
    let Some((&last, _)) = prompt.split_last() else {
        return Err(format!("{label}: empty prompt"));
    };
    let base = prompt.len() - 1;
    target.truncate(0);
    let mut plain = vec![target.forward_last(prompt).map_err(e)?];
    let mut toks = Vec::with_capacity(extra);
    for _ in 0..extra {
        let t = plain.last().map_or(0, |l| greedy(l));
        toks.push(t);
        plain.push(target.forward_last(&[t]).map_err(e)?);
    }
    let mut feed = vec![last];
    feed.extend_from_slice(&toks);
    let mut failures = Vec::new();
    target.truncate(base);
    let rows = target.forward_all(&feed).map_err(e)?;
    if rows.len() != feed.len() {
        failures.push(format!(
            "{label}: {} rows for {} tokens",
            rows.len(),
            feed.len()
        ));
    }
    let mut differing = 0usize;
    for (i, (got, want)) in rows.iter().zip(&plain).enumerate() {
        let bad: Vec<usize> = (0..got.len().max(want.len()))
            .filter(|&j| got.get(j).map(|v| v.to_bits()) != want.get(j).map(|v| v.to_bits()))
            .collect();
        if let Some(&j) = bad.first() {
            differing += 1;
            failures.push(format!(
                "{label}: row {i} of the verification forward differs from the plain step in {} of {} logits (first: id {j}, {:?} vs {:?})",
                bad.len(),
                want.len(),
                got.get(j),
                want.get(j)
            ));
        }
    }
    if target.len() != prompt.len() + extra {
        failures.push(format!(
            "{label}: length {} after the forward, want {}",
            target.len(),
            prompt.len() + extra
        ));
    }
    target.truncate(base);
    let picks = target.forward_all_argmax(&feed).map_err(e)?;
    let want: Vec<u32> = plain.iter().map(|l| greedy(l)).collect();
    if picks != want {
        failures.push(format!(
            "{label}: arg-max rows {picks:?} vs greedy picks of the plain steps {want:?}"
        ));
    }
    let detail = format!(
        "{label}: {} rows of one verification forward vs {} plain steps: {} bit-identical, arg-max rows {}",
        rows.len(),
        plain.len(),
        rows.len().min(plain.len()) - differing,
        if picks == want { "equal" } else { "DIFFER" }
    );
    Ok((failures, detail))
}

/// Greedy identity on one `target` (reset before every run): plain decode vs speculative
/// decode with `proposer` and `verifier` for each prompt and depth. Returns the failures,
/// the detail line and the merged statistics of the speculative runs.
pub fn target_identity(
    label: &str,
    target: &mut dyn Target,
    proposer: &mut dyn Proposer,
    verifier: &mut dyn Verifier,
    prompts: &[Vec<u32>],
    ks: &[usize],
    n: usize,
) -> (Vec<String>, String, SpecStats) {
    let greedy_cfg = SamplerConfig::default();
    let state = RefCell::new((target, proposer, verifier, SpecStats::default()));
    let (f, d) = check_greedy_identity(
        label,
        prompts,
        ks,
        |p| {
            let mut st = state.borrow_mut();
            let t = &mut *st.0;
            t.truncate(0);
            let mut s = Sampler::new(greedy_cfg.clone());
            plain_generate(t, &mut s, p, n, &fixed_opts(1), &mut |_| Ok(()))
                .map(|g| g.tokens)
                .map_err(|e| e.to_string())
        },
        |p, k| {
            let mut st = state.borrow_mut();
            let (t, pr, v, total) = &mut *st;
            t.truncate(0);
            let mut s = Sampler::new(greedy_cfg.clone());
            let g = generate(
                &mut **t,
                &mut **pr,
                &mut **v,
                &mut s,
                p,
                n,
                &fixed_opts(k),
                &mut |_| Ok(()),
            )
            .map_err(|e| e.to_string())?;
            total.proposer = g.stats.proposer.clone();
            total.merge(&g.stats);
            Ok((g.tokens, g.stats))
        },
    );
    let stats = state.into_inner().3;
    (f, d, stats)
}

/// The synthetic draft pair of the GPU gate: a tiny llama in Q8_0 (target) and the same
/// weights (same seed) in Q4_0 (draft).
fn synthetic_pair() -> Result<(GgufModel, GgufModel), String> {
    let make = |fmt: QuantFormat| -> Result<GgufModel, String> {
        let spec = crate::decode_check::gate_spec("llama", fmt, 64, 4, 512, 4242);
        let bytes = gguf_bytes(&spec).map_err(|e| e.to_string())?;
        GgufModel::from_bytes(
            PathBuf::from(format!("synthetic-llama-{fmt}.gguf")),
            FileBytes::Owned(bytes),
        )
        .map_err(|e| e.to_string())
    };
    Ok((make(QuantFormat::Q8_0)?, make(QuantFormat::Q4_0)?))
}

fn cuda_target(gpu: &Arc<Gpu>, m: &GgufModel, capacity: usize) -> Result<CudaTarget, String> {
    let program = engine::arch::build_program(m.header()).map_err(|e| e.to_string())?;
    let dec = CudaDecoder::new(Arc::clone(gpu), m, program, capacity).map_err(|e| e.to_string())?;
    Ok(CudaTarget::new(Box::new(dec), true))
}

pub(super) fn spec_cuda_gate(ctx: &GateContext) -> GateOutcome {
    if !ctx.gpu {
        return GateOutcome::new(
            Verdict::skipped("no GPU (nvidia-smi reports no device)".to_owned()),
            Vec::new(),
        );
    }
    let (n, ks): (usize, Vec<usize>) = if ctx.quick {
        (64, vec![1, 3, 8])
    } else {
        (128, (1..=8).collect())
    };
    let mut failures = Vec::new();
    let mut detail = Vec::new();
    let mut facts = None;
    let gpu = match Gpu::open(&CudaConfig {
        ordinal: 0,
        cubin_cache_dir: ctx.cubin_cache.clone(),
    }) {
        Ok(g) => Arc::new(g),
        Err(e) => {
            return GateOutcome::new(
                Verdict::from_failures(vec![format!("cannot open the GPU: {e}")]),
                Vec::new(),
            );
        }
    };
    let capacity = 512 + n + 32;
    // n-gram and self-draft on the default model.
    match open(ctx, &ctx.default_model) {
        Ok(Some((m, path))) => {
            facts = model_facts(&ctx.default_model, &path, &m).ok();
            let mut run = || -> Result<(), String> {
                let prompts = encode(&m)?;
                let mut target = cuda_target(&gpu, &m, capacity)?;
                let label = format!("{} CUDA", ctx.default_model);
                let (f, d) = check_rows_bits(&label, &mut target, &prompts[0], 9)?;
                failures.extend(f);
                detail.push(d);
                let (f, d, _) = target_identity(
                    &format!("ngram on {label}"),
                    &mut target,
                    &mut NgramProposer::default(),
                    &mut ExactVerifier,
                    &prompts,
                    &ks,
                    n,
                );
                failures.extend(f);
                detail.push(d);
                // Sampled mode (logits rows downloaded, rejection sampling on the host):
                // one seed, one K, the same tokens.
                let sampled = SamplerConfig {
                    temperature: 0.8,
                    top_k: 40,
                    seed: ctx.seed,
                    ..SamplerConfig::default()
                };
                let mut sampled_run = || -> Result<Vec<u32>, String> {
                    target.truncate(0);
                    let mut s = Sampler::new(sampled.clone());
                    generate(
                        &mut target,
                        &mut NgramProposer::default(),
                        &mut ExactVerifier,
                        &mut s,
                        &prompts[0],
                        48,
                        &fixed_opts(4),
                        &mut |_| Ok(()),
                    )
                    .map(|g| g.tokens)
                    .map_err(|e| e.to_string())
                };
                let (a, b) = (sampled_run()?, sampled_run()?);
                if a != b || a.len() != 48 {
                    failures.push(format!(
                        "ngram sampled on {label}: same seed, different tokens ({} vs {})",
                        a.len(),
                        b.len()
                    ));
                }
                detail.push(format!(
                    "ngram sampled on {label} (T=0.8, top-k 40, seed {}, K=4): 48 tokens reproduced",
                    ctx.seed
                ));
                let dtarget = cuda_target(&gpu, &m, capacity)?;
                let mut draft = DraftModel::on_target(
                    Box::new(dtarget),
                    &m,
                    &m,
                    target.n_vocab(),
                    ctx.default_model.clone(),
                    &SamplerConfig::default(),
                )
                .map_err(|e| e.to_string())?;
                let self_ks = [1, 4, 8];
                let (f, d, stats) = target_identity(
                    &format!("{label} drafting for itself (CUDA draft decoder)"),
                    &mut target,
                    &mut draft,
                    &mut ExactVerifier,
                    &prompts,
                    &self_ks,
                    n,
                );
                failures.extend(f);
                detail.push(d);
                if let Some(e) = target.decoder().rows_graph_error() {
                    detail.push(format!("{label}: verification graphs not captured ({e}); eager verification forwards used"));
                }
                let acc = stats.acceptance();
                if acc.is_empty() || acc.iter().any(|&a| a != 1.0) {
                    failures.push(format!(
                        "{label} drafting for itself: acceptance by position {acc:?}, want all 1 (the draft's picks must be the target's)"
                    ));
                }
                Ok(())
            };
            if let Err(e) = run() {
                failures.push(format!("{} CUDA: {e}", ctx.default_model));
            }
        }
        Ok(None) => failures.push(format!("default model {} not fetched", ctx.default_model)),
        Err(e) => failures.push(e),
    }
    // The synthetic draft pair.
    let mut run = || -> Result<(), String> {
        let (big, small) = synthetic_pair()?;
        let mut target = cuda_target(&gpu, &big, capacity)?;
        let prompts: Vec<Vec<u32>> = (0..3u32)
            .map(|i| {
                (0..(17 + 9 * i))
                    .map(|j| (j * 37 + 11 * i + 5) % 512)
                    .collect()
            })
            .collect();
        let (f, d) = check_rows_bits("synthetic llama Q8_0 CUDA", &mut target, &prompts[1], 9)?;
        failures.extend(f);
        detail.push(d);
        let dtarget = cuda_target(&gpu, &small, capacity)?;
        let mut draft = DraftModel::on_target(
            Box::new(dtarget),
            &small,
            &big,
            target.n_vocab(),
            "synthetic-llama-Q4_0".into(),
            &SamplerConfig::default(),
        )
        .map_err(|e| e.to_string())?;
        let (f, d, _) = target_identity(
            "synthetic llama Q4_0 -> Q8_0 (CUDA draft decoder)",
            &mut target,
            &mut draft,
            &mut ExactVerifier,
            &prompts,
            &ks,
            n,
        );
        failures.extend(f);
        detail.push(d);
        Ok(())
    };
    if let Err(e) = run() {
        failures.push(format!("synthetic pair: {e}"));
    }
    detail.insert(
        0,
        format!("CUDA greedy speculative == CUDA plain for K {ks:?} ({n} tokens); verify rows bit-identical"),
    );
    GateOutcome {
        verdict: Verdict::from_failures(failures),
        detail,
        model: facts,
        workload: Workload {
            mode: Some("gate".into()),
            prompt_id: Some("spec-gate-v1".into()),
            gen_tokens: Some(n as u64),
            k: ks.last().map(|&k| k as u64),
            sampling: Some("greedy".into()),
            ..Workload::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec_gates::tests::AcceptsOneWrong;
    use engine::spec::SpecError;

    /// A target whose verification forwards perturb one logit of row 2 (a batch-variant
    /// kernel), with the arg-max rows following the perturbed logits.
    struct BatchVariant(MarkovTarget);

    impl Target for BatchVariant {
        fn n_vocab(&self) -> usize {
            self.0.n_vocab()
        }
        fn len(&self) -> usize {
            self.0.len()
        }
        fn forward_last(&mut self, tokens: &[u32]) -> Result<Vec<f32>, SpecError> {
            self.0.forward_last(tokens)
        }
        fn forward_all(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>, SpecError> {
            let mut rows = self.0.forward_all(tokens)?;
            if let Some(r) = rows.get_mut(2) {
                let j = greedy(r) as usize;
                let n = r.len();
                r[(j + 1) % n] += 1e3;
            }
            Ok(rows)
        }
        fn truncate(&mut self, len: usize) {
            self.0.truncate(len);
        }
    }

    #[test]
    fn rows_bits_green_on_a_batch_invariant_target_red_on_a_variant_one() {
        let (f, d) =
            check_rows_bits("markov", &mut MarkovTarget::new(5, 7), &[1, 2, 3], 9).unwrap();
        assert!(f.is_empty(), "{f:?}");
        assert!(
            d.contains("10 rows") && d.contains("10 bit-identical"),
            "{d}"
        );
        let (f, _) = check_rows_bits(
            "markov",
            &mut BatchVariant(MarkovTarget::new(5, 7)),
            &[1, 2, 3],
            9,
        )
        .unwrap();
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f[0].contains("row 2"), "{f:?}");
        assert!(f[1].contains("arg-max rows"), "{f:?}");
    }

    #[test]
    fn target_identity_green_and_red_with_one_wrong_token_accepted() {
        // The GPU gate's check, run on the CPU stand-in target through the arg-max path
        // (greedy without penalties) that the CUDA target serves.
        let chain = MarkovTarget::new(7, 6);
        let prompts = vec![vec![1, 2, 3], vec![4, 4, 4, 4], vec![0]];
        let greedy_cfg = SamplerConfig::default();
        let mut target = chain.clone();
        let mut draft = MarkovDraft::new(&chain, 0.5, &greedy_cfg);
        let (f, d, stats) = target_identity(
            "markov",
            &mut target,
            &mut draft,
            &mut ExactVerifier,
            &prompts,
            &[1, 2, 5, 8],
            40,
        );
        assert!(f.is_empty(), "{f:?}");
        assert!(d.contains("tokens identical"), "{d}");
        assert!(stats.rounds > 0, "{stats:?}");
        let mut draft = MarkovDraft::new(&chain, 0.5, &greedy_cfg);
        let (f, _, _) = target_identity(
            "markov",
            &mut target,
            &mut draft,
            &mut AcceptsOneWrong { fired: false },
            &prompts,
            &[1, 2, 5, 8],
            40,
        );
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].contains("speculative vs"), "{f:?}");
    }
}
