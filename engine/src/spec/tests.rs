//! The decode loop on the synthetic chain: greedy identity for every proposer and depth
//! (fixed and adaptive, with a confidence cut), seeded reproducibility in sampled mode.

use super::synthetic::{MarkovDraft, MarkovTarget};
use super::*;
use crate::sampling::{Sampler, SamplerConfig};

fn opts(depth: DepthConfig) -> SpecOptions {
    SpecOptions {
        depth,
        eog: vec![5],
        ignore_eos: false,
    }
}

fn plain(chain: &MarkovTarget, cfg: &SamplerConfig, prompt: &[u32], n: usize) -> Generation {
    let mut t = chain.clone();
    let mut s = Sampler::new(cfg.clone());
    plain_generate(
        &mut t,
        &mut s,
        prompt,
        n,
        &opts(DepthConfig::fixed(1)),
        &mut |_| Ok(()),
    )
    .unwrap()
}

fn spec(
    chain: &MarkovTarget,
    p: &mut dyn Proposer,
    cfg: &SamplerConfig,
    prompt: &[u32],
    n: usize,
    depth: DepthConfig,
) -> Generation {
    let mut t = chain.clone();
    let mut s = Sampler::new(cfg.clone());
    let mut seen = Vec::new();
    let g = generate(
        &mut t,
        p,
        &mut ExactVerifier,
        &mut s,
        prompt,
        n,
        &opts(depth),
        &mut |t| {
            seen.push(t);
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(seen, g.tokens, "on_token sees every token once, in order");
    g
}

#[test]
fn greedy_speculative_equals_plain_for_every_depth_and_proposer() {
    let cfg = SamplerConfig::default();
    for seed in 0..6 {
        let chain = MarkovTarget::new(seed, 9);
        for prompt in [vec![1u32, 2, 3, 1, 2], vec![7], vec![0, 0, 0, 0]] {
            let want = plain(&chain, &cfg, &prompt, 48);
            for k in 1..=8 {
                for depth in [
                    DepthConfig::fixed(k),
                    DepthConfig {
                        adaptive: true,
                        confidence: 0.3,
                        ..DepthConfig::fixed(k)
                    },
                    // The speed policy (decisions from wall-clock times: whatever it
                    // decides, the greedy tokens are plain's).
                    DepthConfig {
                        adaptive: true,
                        off_when_slower: true,
                        probe_rounds: 2,
                        probe_every: 2,
                        ..DepthConfig::fixed(k)
                    },
                ] {
                    let mut ng = NgramProposer::default();
                    let g = spec(&chain, &mut ng, &cfg, &prompt, 48, depth.clone());
                    assert_eq!(g.tokens, want.tokens, "ngram seed {seed} k {k}");
                    assert_eq!(g.stop, want.stop);
                    for noise in [0.0, 0.4, 1.0] {
                        let mut d = MarkovDraft::new(&chain, noise, &cfg);
                        let g = spec(&chain, &mut d, &cfg, &prompt, 48, depth.clone());
                        assert_eq!(g.tokens, want.tokens, "draft {noise} seed {seed} k {k}");
                        if noise == 0.0
                            && depth.confidence == 0.0
                            && !depth.off_when_slower
                            && g.stop == StopReason::Length
                        {
                            // A perfect draft is always accepted.
                            assert_eq!(g.stats.acceptance().iter().sum::<f64>(), k.min(47) as f64);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn sampled_same_seed_same_tokens() {
    let chain = MarkovTarget::new(3, 9);
    let cfg = |seed| SamplerConfig {
        temperature: 0.9,
        seed,
        ..SamplerConfig::default()
    };
    let run = |seed| {
        let mut d = MarkovDraft::new(&chain, 0.3, &cfg(seed));
        spec(
            &chain,
            &mut d,
            &cfg(seed),
            &[1, 2],
            64,
            DepthConfig::fixed(4),
        )
        .tokens
    };
    assert_eq!(run(1), run(1));
    let differs = (2..6).any(|s| run(s) != run(1));
    assert!(differs);
}

#[test]
fn max_tokens_and_eog_are_honoured() {
    let cfg = SamplerConfig::default();
    let chain = MarkovTarget::new(1, 9);
    for n in [0, 1, 2, 7] {
        let want = plain(&chain, &cfg, &[2, 3], n);
        let mut ng = NgramProposer::default();
        let g = spec(&chain, &mut ng, &cfg, &[2, 3], n, DepthConfig::fixed(8));
        assert_eq!(g.tokens, want.tokens);
        assert!(g.tokens.len() <= n);
    }
}

/// A reference executor with its own cache, as an owned [`Target`] (the shape of
/// [`CudaTarget`]: the draft model holds it boxed).
struct OwnedReference {
    exec: std::sync::Arc<crate::reference::Reference>,
    kv: crate::kv::SeqKv,
}

impl Target for OwnedReference {
    fn n_vocab(&self) -> usize {
        self.exec.program().shape.n_vocab
    }
    fn len(&self) -> usize {
        self.kv.len()
    }
    fn forward_last(&mut self, tokens: &[u32]) -> Result<Vec<f32>, SpecError> {
        Ok(self.exec.step(&mut self.kv, tokens)?)
    }
    fn forward_all(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>, SpecError> {
        let mut batch = [crate::reference::SeqInput {
            kv: &mut self.kv,
            tokens,
            logits: crate::reference::LogitRows::All,
        }];
        let l = self.exec.forward(&mut batch)?;
        Ok((0..tokens.len()).map(|i| l.row(i).to_vec()).collect())
    }
    fn truncate(&mut self, len: usize) {
        self.kv.truncate(len);
    }
}

#[test]
fn a_draft_model_on_a_boxed_target_drafting_for_its_own_weights_is_always_accepted() {
    use crate::arch::synthetic::{SyntheticSpec, gguf_bytes};
    use crate::model_file::{FileBytes, GgufModel};
    use crate::reference::{Reference, ReferenceOptions};
    use std::sync::Arc;
    let spec = SyntheticSpec::tiny("llama");
    let bytes = gguf_bytes(&spec).unwrap();
    let model = Arc::new(GgufModel::from_bytes("t.gguf".into(), FileBytes::Owned(bytes)).unwrap());
    let opts = ReferenceOptions {
        threads: Some(1),
        kv_dtype: crate::kv::KvDtype::F16,
    };
    let exec = Reference::new(model.clone(), opts).unwrap();
    let dexec = Arc::new(Reference::new(model.clone(), opts).unwrap());
    let n_vocab = exec.program().shape.n_vocab;
    let boxed = Box::new(OwnedReference {
        kv: dexec.new_cache(),
        exec: dexec,
    });
    let greedy = SamplerConfig::default();
    let mut draft =
        DraftModel::on_target(boxed, &model, &model, n_vocab, "self".into(), &greedy).unwrap();
    let prompt = [1u32, 7, 3, 9, 2];
    let mut t = ReferenceTarget::new(&exec);
    let mut s = Sampler::new(greedy.clone());
    let o = opts_fixed();
    let want = plain_generate(&mut t, &mut s, &prompt, 24, &o, &mut |_| Ok(()))
        .unwrap()
        .tokens;
    for k in [1, 3, 8] {
        let mut t = ReferenceTarget::new(&exec);
        let mut s = Sampler::new(greedy.clone());
        let g = generate(
            &mut t,
            &mut draft,
            &mut ExactVerifier,
            &mut s,
            &prompt,
            24,
            &SpecOptions {
                depth: DepthConfig::fixed(k),
                eog: Vec::new(),
                ignore_eos: true,
            },
            &mut |_| Ok(()),
        )
        .unwrap();
        assert_eq!(g.tokens, want, "K={k}");
        let acc = g.stats.acceptance();
        assert!(
            !acc.is_empty() && acc.iter().all(|&a| a == 1.0),
            "K={k}: {acc:?}"
        );
        assert!(g.stats.draft_forwards > 0);
    }
}

#[test]
fn a_draft_model_prefilled_and_synced_feeds_one_token_per_proposal() {
    use crate::arch::synthetic::{SyntheticSpec, gguf_bytes};
    use crate::model_file::{FileBytes, GgufModel};
    use crate::reference::{Reference, ReferenceOptions};
    use std::sync::Arc;
    let spec = SyntheticSpec::tiny("llama");
    let bytes = gguf_bytes(&spec).unwrap();
    let model = Arc::new(GgufModel::from_bytes("t.gguf".into(), FileBytes::Owned(bytes)).unwrap());
    let opts = ReferenceOptions {
        threads: Some(1),
        kv_dtype: crate::kv::KvDtype::F16,
    };
    let dexec = Arc::new(Reference::new(model.clone(), opts).unwrap());
    let n_vocab = dexec.program().shape.n_vocab;
    let greedy = SamplerConfig::default();
    let make = || {
        let boxed = Box::new(OwnedReference {
            kv: dexec.new_cache(),
            exec: dexec.clone(),
        });
        DraftModel::on_target(boxed, &model, &model, n_vocab, "self".into(), &greedy).unwrap()
    };
    let mode = DraftMode {
        greedy: true,
        confidence: 0.0,
    };
    let prompt = [1u32, 7, 3, 9, 2, 4, 4, 8, 1];
    let context: Vec<u32> = prompt.iter().copied().chain([5, 6, 2, 3]).collect();
    // A fresh draft proposing from scratch.
    let mut fresh = make();
    let want = fresh.propose(&context, 3, mode).unwrap();
    // Prefilled with the prompt, then caught up after four plain tokens: the proposal
    // feeds only the last token, then drafts.
    let mut d = make();
    d.prefill(&prompt).unwrap();
    assert_eq!(d.cached(), prompt.len());
    d.sync(&context).unwrap();
    assert_eq!(d.cached(), context.len() - 1);
    let before = d.forwards();
    let got = d.propose(&context, 3, mode).unwrap();
    assert_eq!(got, want);
    assert_eq!(
        d.forwards() - before,
        3,
        "1 fed token + 2 drafted tokens fed"
    );
    // Every draft accepted: a two-token feed (the last draft, never fed, and the target's
    // token) runs as two one-token steps on a target backend.
    let mut next = context.clone();
    next.extend(&got.tokens);
    next.push(11);
    let before = d.forwards();
    d.propose(&next, 1, mode).unwrap();
    assert_eq!(d.forwards() - before, 2);
    assert_eq!(d.cached(), next.len());
}

fn opts_fixed() -> SpecOptions {
    SpecOptions {
        depth: DepthConfig::fixed(1),
        eog: Vec::new(),
        ignore_eos: true,
    }
}

#[test]
fn replay_of_ngram_lookup_over_plain_tokens() {
    let mode = DraftMode {
        greedy: true,
        confidence: 0.0,
    };
    let mut ng = NgramProposer::default();
    // Distinct tokens: nothing to look up, one plain step per token.
    let fresh: Vec<u32> = (10..40).collect();
    let r = super::decode::replay(&mut ng, &fresh, 20, 4, mode).unwrap();
    assert_eq!(
        r,
        Replay {
            drafted_rounds: 0,
            empty_rounds: 10,
            tokens: 10,
            ..Replay::default()
        }
    );
    // A repeated phrase: every round drafts 4 tokens, all of them right (5 tokens a round).
    let rep: Vec<u32> = [1u32, 2, 3, 4, 5].repeat(8);
    let r = super::decode::replay(&mut ng, &rep, 20, 4, mode).unwrap();
    assert_eq!(
        r,
        Replay {
            drafted_rounds: 4,
            empty_rounds: 0,
            tokens: 20,
            drafted: 16,
            first_accepted: 4,
            cont_trials: 16,
            cont_accepted: 16
        }
    );
    assert_eq!(r.accepted(), 16);
    // Costed at a verification of 2 plain steps: 0.4 plain steps per token.
    assert_eq!(replay_cost(1.0, 2.0, &r), Some(0.4));
}

#[test]
fn the_speed_policy_decides_ngram_rounds_by_their_evidence() {
    // A free proposer under the speed policy: the evidence rule (adaptive::evidence)
    // decides every round after the timed plain steps; the tokens stay plain's.
    let chain = MarkovTarget::new(0, 9);
    let cfg = SamplerConfig::default();
    let prompt = [1u32, 2, 3, 1, 2];
    let want = plain(&chain, &cfg, &prompt, 64);
    let mut ng = NgramProposer::default();
    let depth = DepthConfig {
        adaptive: true,
        off_when_slower: true,
        ..DepthConfig::fixed(8)
    };
    let g = spec(&chain, &mut ng, &cfg, &prompt, 64, depth);
    assert_eq!(g.tokens, want.tokens);
    assert!(!g.stats.decisions.is_empty());
    assert!(
        g.stats
            .decisions
            .iter()
            .all(|d| d.contains("evidence (match")),
        "{:?}",
        g.stats.decisions
    );
    assert_eq!(g.stats.policy_probes, 0, "no replays: every round decides");
}
