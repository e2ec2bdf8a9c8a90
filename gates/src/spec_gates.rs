//! The `spec` gate: speculative decoding never changes the output.
//!
//! * greedy identity — for fixed depths K, speculative greedy output equals plain greedy
//!   decode token for token on three prompts, with n-gram lookup on the default model
//!   (SmolLM2) and with the Qwen2.5-Coder pair (0.5B drafting for 1.5B) when both are
//!   fetched (`tools/fetch-models`; absent models are said in the detail). How much of the
//!   matrix runs is the run's [`Size`] (`spec_gates/cpu.rs`): `--full` is K = 1..8 over
//!   128 tokens on the three prompts for both (estimated near an hour on 2 cores, not
//!   timed); the default is K = 1..8 over 64 tokens for n-gram and the Qwen pair on one
//!   prompt for 16 tokens at K in {1, 4, 8}, 10,000 draws per chi-square test; `--quick`
//!   is 32 tokens and K in {1, 3, 8} for n-gram, the Qwen pair for 8 tokens at K in
//!   {1, 8}, 5,000 draws, no Qwen sampled checks;
//! * sampled reproducibility — a seeded speculative run (temperature 0.8) gives the same
//!   tokens twice;
//! * distribution — chi-square tests that speculative sampling draws from the target's
//!   distribution: whole 3-token sequences on a synthetic chain (draft model and n-gram
//!   proposers, K = 1, 2, 4), and the first token of a round on real next-token
//!   distributions (SmolLM2 with a hotter copy of itself as the draft and with a
//!   deterministic proposal; Qwen 1.5B with Qwen 0.5B's distribution when fetched).
//!
//! The checks take the decoders and the verifier as arguments, so the tests plant faults (a
//! verifier that accepts one wrong token; one that accepts every draft) and see it go red.
//!
//! The `spec-cuda` gate (GPU; skipped without one) runs the same loops on the CUDA decoder
//! ([`CudaTarget`]): the logits of every row of a verification forward (10 rows: two
//! launches of up to 8; eager) equal those of plain one-token steps bit for bit, and the
//! device arg-max of each row (the verification forward replayed from its captured graphs)
//! equals the greedy pick of those logits ([`check_rows_bits`]); greedy
//! speculative output equals plain greedy decode (graphed steps) token for token for
//! K = 1..8 over 128 tokens on the three prompts ([`target_identity`]) with n-gram lookup on
//! the default model (SmolLM2), with a CUDA draft model on a synthetic pair (a tiny llama in
//! Q8_0 drafted by the same weights in Q4_0), and with the default model drafting for
//! itself on a second decoder, where every draft must be accepted (draft KV kept in step,
//! rows bit-identical). `--quick`: K in {1, 3, 8}, 64 tokens.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use engine::arch::synthetic::gguf_bytes;
use engine::catalog;
use engine::cuda::{CudaConfig, CudaDecoder, Gpu};
use engine::kv::KvDtype;
use engine::model_file::FileBytes;
use engine::model_file::GgufModel;
use engine::quant::QuantFormat;
use engine::reference::{Reference, ReferenceOptions};
use engine::sampling::greedy;
use engine::sampling::{Rng, Sampler, SamplerConfig, draw_from};
use engine::spec::synthetic::{MarkovDraft, MarkovTarget};
use engine::spec::{
    CudaTarget, DepthConfig, Draft, DraftModel, ExactVerifier, NgramProposer, Proposer,
    ReferenceTarget, SpecOptions, SpecStats, Target, Verifier, generate, plain_generate,
};
use engine::tokenizer::Tokenizer;

use crate::model_facts::model_facts;
use crate::receipt::Workload;
use crate::{GateContext, GateDef, GateOutcome, Verdict};

mod cpu;
mod cuda;
pub use cpu::Size;
pub use cuda::{check_rows_bits, target_identity};

/// The speculative gate.
pub fn gates() -> Vec<GateDef> {
    vec![
        GateDef {
            name: "spec",
            about: "speculative decode == plain decode (greedy, K=1..8); sampled mode seeded and distribution-exact",
            needs_gpu: false,
            quick: true,
            run: cpu::spec_gate,
        },
        GateDef {
            name: "spec-cuda",
            about: "CUDA speculative decode == CUDA plain decode (greedy, K=1..8, n-gram on SmolLM2, CUDA draft pair); verify rows bit-identical to plain steps",
            needs_gpu: true,
            quick: true,
            run: cuda::spec_cuda_gate,
        },
    ]
}

/// Three prompts: code with repetition (where lookup and drafts are accepted) and prose.
pub const PROMPTS: [&str; 3] = [
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "// A stack in Rust.\npub struct Stack<T> {\n    items: Vec<T>,\n}\n\nimpl<T> Stack<T> {\n    pub fn new() -> Self {\n",
    "Write three short sentences about rivers, each starting with the word River.\nRiver",
];

/// Chi-square critical value for `df` degrees of freedom at the upper normal quantile `z`
/// (Wilson–Hilferty).
pub fn chi_square_critical(df: usize, z: f64) -> f64 {
    let d = df.max(1) as f64;
    let a = 2.0 / (9.0 * d);
    d * (1.0 - a + z * a.sqrt()).powi(3)
}

/// Upper normal quantile of the gate's tests: a false alarm has probability ~1e-6 per test.
pub const Z: f64 = 4.75;

/// Pearson's chi-square of `counts` against probabilities `probs` (same bins); bins with
/// an expected count under 5 are pooled into one. Returns `(statistic, degrees of freedom)`;
/// a count in a bin of probability 0 makes the statistic infinite.
pub fn chi_square(counts: &[u64], probs: &[f64]) -> (f64, usize) {
    let n: u64 = counts.iter().sum();
    let n = n as f64;
    let (mut stat, mut bins) = (0.0, 0usize);
    let (mut pool_o, mut pool_e) = (0.0, 0.0);
    for (&o, &p) in counts.iter().zip(probs) {
        let e = n * p;
        if e <= 0.0 {
            if o > 0 {
                return (f64::INFINITY, bins.max(1));
            }
            continue;
        }
        if e < 5.0 {
            pool_o += o as f64;
            pool_e += e;
            continue;
        }
        stat += (o as f64 - e).powi(2) / e;
        bins += 1;
    }
    if pool_e > 0.0 {
        stat += (pool_o - pool_e).powi(2) / pool_e;
        bins += 1;
    }
    (stat, bins.saturating_sub(1))
}

/// `None` when `counts` fit `probs`, else the failure.
pub fn check_fit(label: &str, counts: &[u64], probs: &[f64]) -> (Option<String>, String) {
    let (stat, df) = chi_square(counts, probs);
    let crit = chi_square_critical(df, Z);
    let line = format!("{label}: chi2 {stat:.1} (df {df}, limit {crit:.1})");
    ((stat > crit).then(|| line.clone()), line)
}

/// Greedy identity over prompts and depths: `plain(prompt)` vs `spec(prompt, k)`.
pub fn check_greedy_identity(
    label: &str,
    prompts: &[Vec<u32>],
    ks: &[usize],
    mut plain: impl FnMut(&[u32]) -> Result<Vec<u32>, String>,
    mut spec: impl FnMut(&[u32], usize) -> Result<(Vec<u32>, SpecStats), String>,
) -> (Vec<String>, String) {
    let mut failures = Vec::new();
    let mut total = SpecStats::default();
    let mut compared = 0usize;
    for (pi, prompt) in prompts.iter().enumerate() {
        let want = match plain(prompt) {
            Ok(t) => t,
            Err(e) => {
                failures.push(format!("{label} prompt {pi}: plain decode: {e}"));
                continue;
            }
        };
        for &k in ks {
            match spec(prompt, k) {
                Ok((got, stats)) => {
                    total.merge(&stats);
                    compared += got.len();
                    if got != want {
                        let at = got.iter().zip(&want).position(|(a, b)| a != b);
                        failures.push(match at {
                            Some(j) => format!(
                                "{label} prompt {pi} K={k}: token {j} is {} speculative vs {} plain",
                                got[j], want[j]
                            ),
                            None => format!(
                                "{label} prompt {pi} K={k}: {} tokens speculative vs {} plain",
                                got.len(),
                                want.len()
                            ),
                        });
                    }
                }
                Err(e) => failures.push(format!("{label} prompt {pi} K={k}: {e}")),
            }
        }
    }
    let acc = total.acceptance();
    let detail = format!(
        "{label}: {} prompts x K {:?}: {compared} tokens identical to plain; acceptance by position {:?}",
        prompts.len(),
        ks,
        acc.iter()
            .map(|a| (a * 100.0).round() / 100.0)
            .collect::<Vec<_>>()
    );
    (failures, detail)
}

/// Whole-sequence distribution on the synthetic chain: the first three tokens of `draws`
/// seeded speculative runs (depth `k`) against the chain's exact probabilities.
pub fn synthetic_sequences(
    seed: u64,
    k: usize,
    draws: usize,
    ngram: bool,
    verifier: &mut dyn Verifier,
) -> (Option<String>, String) {
    const V: usize = 5;
    let cfg = SamplerConfig {
        temperature: 1.0,
        ..SamplerConfig::default()
    };
    let chain = MarkovTarget::new(0xC4A1, V);
    let prompt = [1u32, 2, 1, 2];
    let opts = SpecOptions {
        depth: DepthConfig::fixed(k),
        eog: Vec::new(),
        ignore_eos: true,
    };
    let mut counts = vec![0u64; V * V * V];
    for i in 0..draws {
        let s = seed.wrapping_add(i as u64);
        let scfg = SamplerConfig {
            seed: s,
            ..cfg.clone()
        };
        let mut sampler = Sampler::new(scfg.clone());
        let mut target = chain.clone();
        let mut markov = MarkovDraft::new(&chain, 0.7, &scfg);
        let mut lookup = NgramProposer::default();
        let proposer: &mut dyn Proposer = if ngram { &mut lookup } else { &mut markov };
        let out = generate(
            &mut target,
            proposer,
            verifier,
            &mut sampler,
            &prompt,
            3 + k,
            &opts,
            &mut |_| Ok(()),
        );
        match out {
            Ok(g) if g.tokens.len() >= 3 => {
                let ix = g.tokens[..3]
                    .iter()
                    .fold(0usize, |a, &t| a * V + t as usize);
                if let Some(c) = counts.get_mut(ix) {
                    *c += 1;
                }
            }
            Ok(g) => {
                return (
                    Some(format!("only {} tokens", g.tokens.len())),
                    String::new(),
                );
            }
            Err(e) => return (Some(e.to_string()), String::new()),
        }
    }
    let s = Sampler::new(cfg);
    let mut probs = vec![0f64; V * V * V];
    let mut ctx = prompt.to_vec();
    let p1 = s.distribution(&chain.logits_after(&ctx));
    for &(a, pa) in &p1 {
        ctx.push(a);
        let p2 = s.distribution(&chain.logits_after(&ctx));
        for &(b, pb) in &p2 {
            ctx.push(b);
            let p3 = s.distribution(&chain.logits_after(&ctx));
            for &(c, pc) in &p3 {
                let ix = (a as usize * V + b as usize) * V + c as usize;
                probs[ix] = pa * pb * pc;
            }
            ctx.pop();
        }
        ctx.pop();
    }
    let label = format!(
        "synthetic 3-token sequences, {} K={k}, {draws} draws",
        if ngram { "ngram" } else { "draft" }
    );
    check_fit(&label, &counts, &probs)
}

/// First emitted token of a verification round on fixed real rows: drafts drawn from `q`
/// (`None`: the deterministic proposal `x`), verified against `row` with `cfg`.
pub fn first_token_fit(
    label: &str,
    row: &[f32],
    q: Option<&[(u32, f64)]>,
    x: u32,
    cfg: &SamplerConfig,
    draws: usize,
    verifier: &mut dyn Verifier,
) -> (Option<String>, String) {
    let p = Sampler::new(cfg.clone()).distribution(row);
    let n = row.len();
    let mut counts = vec![0u64; n];
    let mut qrng = Rng::new(cfg.seed ^ 0x9E37);
    let rows = vec![row.to_vec(), row.to_vec()];
    for i in 0..draws {
        let mut sampler = Sampler::new(SamplerConfig {
            seed: cfg.seed.wrapping_add(i as u64),
            ..cfg.clone()
        });
        let draft = match q {
            Some(q) => Draft {
                tokens: vec![draw_from(q, qrng.next_f64())],
                dists: Some(vec![q.to_vec()]),
            },
            None => Draft {
                tokens: vec![x],
                dists: None,
            },
        };
        let r = verifier.verify(&rows, &draft, &mut sampler);
        let t = if r.accepted >= 1 {
            draft.tokens[0]
        } else {
            r.next
        };
        if let Some(c) = counts.get_mut(t as usize) {
            *c += 1;
        }
    }
    let mut probs = vec![0f64; n];
    for &(t, pt) in &p {
        if let Some(v) = probs.get_mut(t as usize) {
            *v = pt;
        }
    }
    check_fit(&format!("{label}, {draws} draws"), &counts, &probs)
}

fn open(
    ctx: &GateContext,
    name: &str,
) -> Result<Option<(Arc<GgufModel>, std::path::PathBuf)>, String> {
    let m = catalog::models()
        .map_err(|e| e.to_string())?
        .into_iter()
        .find(|m| m.name == name)
        .ok_or_else(|| format!("{name} not in the catalog"))?;
    let path = ctx.models_dir.join(&m.file);
    if !path.exists() {
        return Ok(None);
    }
    let model =
        GgufModel::open(Path::new(&path)).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Some((Arc::new(model), path)))
}

fn reference(ctx: &GateContext, m: &Arc<GgufModel>) -> Result<Reference, String> {
    let mut r = Reference::new(
        m.clone(),
        ReferenceOptions {
            threads: Some(ctx.threads.max(1)),
            kv_dtype: KvDtype::F16,
        },
    )
    .map_err(|e| e.to_string())?;
    r.cache_weights(4 << 30).map_err(|e| e.to_string())?;
    Ok(r)
}

fn encode(m: &GgufModel) -> Result<Vec<Vec<u32>>, String> {
    let tok = Tokenizer::from_gguf(m.header()).map_err(|e| e.to_string())?;
    PROMPTS
        .iter()
        .map(|p| tok.encode(p, true, false).map_err(|e| e.to_string()))
        .collect()
}

fn fixed_opts(k: usize) -> SpecOptions {
    SpecOptions {
        depth: DepthConfig::fixed(k),
        eog: Vec::new(),
        ignore_eos: true,
    }
}

/// Plain greedy tokens of `exec` after `prompt`.
pub fn plain_tokens(exec: &Reference, prompt: &[u32], n: usize) -> Result<Vec<u32>, String> {
    let mut t = ReferenceTarget::new(exec);
    let mut s = Sampler::new(SamplerConfig::default());
    plain_generate(&mut t, &mut s, prompt, n, &fixed_opts(1), &mut |_| Ok(()))
        .map(|g| g.tokens)
        .map_err(|e| e.to_string())
}

/// Speculative tokens of `exec` after `prompt` with `proposer` at depth `k`.
pub fn spec_tokens(
    exec: &Reference,
    proposer: &mut dyn Proposer,
    sampling: &SamplerConfig,
    prompt: &[u32],
    n: usize,
    k: usize,
) -> Result<(Vec<u32>, SpecStats), String> {
    let mut t = ReferenceTarget::new(exec);
    let mut s = Sampler::new(sampling.clone());
    generate(
        &mut t,
        proposer,
        &mut ExactVerifier,
        &mut s,
        prompt,
        n,
        &fixed_opts(k),
        &mut |_| Ok(()),
    )
    .map(|g| (g.tokens, g.stats))
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::spec::{RoundResult, greedy_match};

    /// Plants the fault of the issue: at the first rejection, it accepts the wrong draft
    /// token anyway (once).
    pub(super) struct AcceptsOneWrong {
        pub(super) fired: bool,
    }

    impl Verifier for AcceptsOneWrong {
        fn verify(
            &mut self,
            rows: &[Vec<f32>],
            draft: &Draft,
            sampler: &mut Sampler,
        ) -> RoundResult {
            let mut probe = sampler.clone();
            let r = ExactVerifier.verify(rows, draft, &mut probe);
            if self.fired || r.accepted >= draft.tokens.len() {
                *sampler = probe;
                return r;
            }
            self.fired = true;
            for &t in &draft.tokens[..=r.accepted] {
                sampler.accept(t);
            }
            let next = sampler.sample(&rows[r.accepted + 1]);
            sampler.accept(next);
            RoundResult {
                accepted: r.accepted + 1,
                next,
            }
        }

        fn verify_argmax(
            &mut self,
            picks: &[u32],
            draft: &Draft,
            sampler: &mut Sampler,
        ) -> RoundResult {
            self.argmax_fault(picks, draft, sampler)
        }
    }

    impl AcceptsOneWrong {
        fn argmax_fault(
            &mut self,
            picks: &[u32],
            draft: &Draft,
            sampler: &mut Sampler,
        ) -> RoundResult {
            let mut probe = sampler.clone();
            let r = greedy_match(picks, draft, &mut probe);
            if self.fired || r.accepted >= draft.tokens.len() {
                *sampler = probe;
                return r;
            }
            self.fired = true;
            for &t in &draft.tokens[..=r.accepted] {
                sampler.accept(t);
            }
            let next = picks[r.accepted + 1];
            sampler.accept(next);
            RoundResult {
                accepted: r.accepted + 1,
                next,
            }
        }
    }

    /// Accepts every draft token: the output follows the draft's distribution.
    struct AcceptsAll;

    impl Verifier for AcceptsAll {
        fn verify(
            &mut self,
            rows: &[Vec<f32>],
            draft: &Draft,
            sampler: &mut Sampler,
        ) -> RoundResult {
            for &t in &draft.tokens {
                sampler.accept(t);
            }
            let k = draft.tokens.len();
            let next = sampler.sample(&rows[k]);
            sampler.accept(next);
            RoundResult { accepted: k, next }
        }
    }

    fn synthetic_identity(verifier: &mut dyn Verifier) -> Vec<String> {
        let chain = MarkovTarget::new(7, 6);
        let greedy = SamplerConfig::default();
        let prompts = vec![vec![1, 2, 3], vec![4, 4, 4, 4], vec![0]];
        let (f, d) = check_greedy_identity(
            "markov",
            &prompts,
            &[1, 2, 5, 8],
            |p| {
                let mut t = chain.clone();
                let mut s = Sampler::new(greedy.clone());
                plain_generate(&mut t, &mut s, p, 40, &fixed_opts(1), &mut |_| Ok(()))
                    .map(|g| g.tokens)
                    .map_err(|e| e.to_string())
            },
            |p, k| {
                let mut t = chain.clone();
                let mut s = Sampler::new(greedy.clone());
                let mut d = MarkovDraft::new(&chain, 0.5, &greedy);
                generate(
                    &mut t,
                    &mut d,
                    verifier,
                    &mut s,
                    p,
                    40,
                    &fixed_opts(k),
                    &mut |_| Ok(()),
                )
                .map(|g| (g.tokens, g.stats))
                .map_err(|e| e.to_string())
            },
        );
        assert!(d.contains("tokens identical"), "{d}");
        f
    }

    #[test]
    fn greedy_identity_green_and_red_with_one_wrong_token_accepted() {
        assert_eq!(synthetic_identity(&mut ExactVerifier), Vec::<String>::new());
        let f = synthetic_identity(&mut AcceptsOneWrong { fired: false });
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].contains("speculative vs"), "{f:?}");
    }

    #[test]
    fn synthetic_distribution_green_when_exact_red_when_accepting_all() {
        for ngram in [false, true] {
            let (f, d) = synthetic_sequences(11, 2, 6000, ngram, &mut ExactVerifier);
            assert!(f.is_none(), "{d}");
            let (f, d) = synthetic_sequences(11, 2, 6000, ngram, &mut AcceptsAll);
            assert!(f.is_some(), "{d}");
        }
    }

    #[test]
    fn first_token_fit_green_when_exact_red_when_accepting_all() {
        let row: Vec<f32> = (0..30).map(|i| ((i * 37 % 11) as f32) * 0.4).collect();
        let cfg = SamplerConfig {
            temperature: 1.0,
            top_k: 12,
            seed: 3,
            ..SamplerConfig::default()
        };
        let q = Sampler::new(SamplerConfig {
            temperature: 2.5,
            ..cfg.clone()
        })
        .distribution(&row);
        for (q, x) in [(Some(q.as_slice()), 0), (None, 5)] {
            let (f, d) = first_token_fit("t", &row, q, x, &cfg, 8000, &mut ExactVerifier);
            assert!(f.is_none(), "{d}");
            let (f, d) = first_token_fit("t", &row, q, x, &cfg, 8000, &mut AcceptsAll);
            assert!(f.is_some(), "{d}");
        }
    }

    #[test]
    fn chi_square_basics() {
        let (s, df) = chi_square(&[50, 50], &[0.5, 0.5]);
        assert_eq!((s, df), (0.0, 1));
        let (s, _) = chi_square(&[1, 99], &[0.5, 0.5]);
        assert!(s > chi_square_critical(1, Z));
        assert!(chi_square(&[1, 9], &[0.0, 1.0]).0.is_infinite());
        // Wilson–Hilferty near the table value chi2(0.999, 10) = 29.59 (z = 3.09)
        assert!((chi_square_critical(10, 3.09) - 29.59).abs() < 0.5);
    }
}
