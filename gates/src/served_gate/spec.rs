//! The `served-spec` gate: `assay serve --spec` gives the tokens of plain decoding. The
//! real server runs in-process on a loopback port with the CPU reference behind a
//! speculating scheduler ([`engine::scheduler::SpecServe`]): for each proposer (n-gram
//! lookup; the default model drafting for itself through a draft model, where every draft
//! must be accepted and the draft's cache stays in step) and fixed depth K, greedy chat
//! requests — each prompt blocking (cold) and streamed (from the prefix cache), and 8
//! concurrent requests streamed and not — return exactly the tokens of the single-sequence
//! greedy path of `assay generate` ([`super::reference_greedy`]); a seeded sampled request
//! returns the tokens of the spec module's own loop with that seed and K
//! ([`engine::spec::generate`], rejection sampling on logits rows); and the server's
//! `/metrics` shows verification rounds with drafts at every position up to K.
//!
//! [`run_served_spec`] takes the verifier, so a test plants one that accepts a wrong draft
//! token and sees the gate go red.

use std::sync::Arc;

use engine::reference::Reference;
use engine::sampling::{Sampler, SamplerConfig};
use engine::scheduler::{
    CpuExecutor, NgramFactory, ProposerFactory, ReferenceDraftFactory, SpecServe,
};
use engine::spec::{
    DepthConfig, ExactVerifier, NgramProposer, Proposer, ReferenceTarget, SpecOptions, Verifier,
};
use engine::tokenizer::{ChatTemplate, Tokenizer};

use super::{
    Case, InProcess, PROMPTS, PickSpec, chat_ids, check, key, picks, reference_greedy,
    served_tokens, served_tokens_with,
};
use crate::Verdict;

/// A proposer of the gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proposal {
    Ngram,
    /// The served model drafting for itself (a draft model on the same weights).
    SelfDraft,
}

impl Proposal {
    fn label(self) -> &'static str {
        match self {
            Proposal::Ngram => "ngram",
            Proposal::SelfDraft => "draft:self",
        }
    }

    fn factory(self, r: &Arc<Reference>) -> Box<dyn ProposerFactory> {
        match self {
            Proposal::Ngram => Box::new(NgramFactory),
            Proposal::SelfDraft => Box::new(ReferenceDraftFactory {
                exec: r.clone(),
                target_vocab: r.program().shape.n_vocab,
                label: "self".into(),
            }),
        }
    }

    fn proposer(
        self,
        r: &Arc<Reference>,
        sampling: &SamplerConfig,
    ) -> Result<Box<dyn Proposer>, String> {
        match self {
            Proposal::Ngram => Ok(Box::new(NgramProposer::default())),
            Proposal::SelfDraft => engine::spec::DraftModel::on_reference_checked(
                r.clone(),
                r.program().shape.n_vocab,
                "self".into(),
                sampling,
            )
            .map(|d| Box::new(d) as Box<dyn Proposer>)
            .map_err(|e| e.to_string()),
        }
    }
}

/// The tokens of the spec module's loop on the reference ([`engine::spec::generate`]: fixed
/// depth `k`, no policy) for `prompt` under `pick` — what a speculating server must return
/// for a sampled request with that seed.
pub fn spec_reference(
    r: &Arc<Reference>,
    tok: &Tokenizer,
    prompt: &[u32],
    n: usize,
    k: usize,
    proposal: Proposal,
    pick: &PickSpec,
) -> Result<Vec<u32>, String> {
    let mut sampler = Sampler::new(pick.sampling.clone());
    for &t in prompt {
        sampler.accept(t);
    }
    let mut target = ReferenceTarget::new(r);
    let mut proposer = proposal.proposer(r, &pick.sampling)?;
    let opts = SpecOptions {
        depth: DepthConfig::fixed(k),
        eog: tok.eog_ids(),
        ignore_eos: false,
    };
    engine::spec::generate(
        &mut target,
        proposer.as_mut(),
        &mut ExactVerifier,
        &mut sampler,
        prompt,
        n,
        &opts,
        &mut |_| Ok(()),
    )
    .map(|g| g.tokens)
    .map_err(|e| e.to_string())
}

/// Serve `reference` (shared, one cache per sequence) speculating with each (proposer,
/// fixed depth) of `runs` (`concurrent` requests at once among the cases), the verifier
/// made by `verifier`, and check every case. Returns
/// the verdict and detail lines.
pub fn run_served_spec(
    reference: &Arc<Reference>,
    n_tokens: usize,
    concurrent: usize,
    runs: &[(Proposal, usize)],
    verifier: &dyn Fn() -> Box<dyn Verifier + Send>,
) -> (Verdict, Vec<String>) {
    let tokenizer = |r: &Reference| -> Result<(Tokenizer, ChatTemplate), String> {
        let h = r.model().header();
        Ok((
            Tokenizer::from_gguf(h).map_err(|e| e.to_string())?,
            ChatTemplate::for_model(h).map_err(|e| e.to_string())?,
        ))
    };
    let (tok, template) = match tokenizer(reference) {
        Ok(x) => x,
        Err(e) => return (Verdict::from_failures(vec![e]), vec![]),
    };
    let (tok, template) = (&tok, &template);
    let mut ids = Vec::new();
    let mut wants = Vec::new();
    for p in PROMPTS {
        match chat_ids(tok, template, p).and_then(|i| {
            let w = reference_greedy(reference, tok, &i, n_tokens)?;
            Ok((i, w))
        }) {
            Ok((i, w)) => {
                ids.push(i);
                wants.push(w);
            }
            Err(e) => {
                return (
                    Verdict::from_failures(vec![format!("reference: {e}")]),
                    vec![],
                );
            }
        }
    }
    let Some(sampled) = picks().into_iter().find(|p| p.schema.is_none()) else {
        return (
            Verdict::from_failures(vec!["no sampled case".into()]),
            vec![],
        );
    };
    let mut cases = Vec::new();
    let mut failures = Vec::new();
    let mut detail = Vec::new();
    for &(proposal, k) in runs {
        let tag = format!("{} K={k}", proposal.label());
        let spec = SpecServe {
            verifier: verifier(),
            ..SpecServe::new(proposal.factory(reference), k, true, usize::MAX)
        };
        let exec = CpuExecutor::shared(reference.clone());
        let started =
            tokenizer(reference).and_then(|(t, c)| InProcess::start(exec, t, c, Some(spec)));
        let srv = match started {
            Ok(s) => s,
            Err(e) => return (Verdict::from_failures(vec![format!("{tag}: {e}")]), detail),
        };
        let addr = srv.addr;
        for (i, p) in PROMPTS.iter().enumerate() {
            for stream in [false, true] {
                let got = served_tokens(addr, &key(i), p, n_tokens, stream).map(|x| x.0);
                let how = if stream {
                    "streamed, prefix-cached"
                } else {
                    "blocking"
                };
                cases.push(Case {
                    label: format!("{tag} prompt {i} {how}"),
                    want: wants[i].clone(),
                    got,
                });
            }
        }
        let concurrent: Vec<(usize, Result<Vec<u32>, String>)> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..concurrent)
                .map(|j| {
                    let i = j % PROMPTS.len();
                    s.spawn(move || {
                        let got = served_tokens(
                            addr,
                            &key(PROMPTS.len()),
                            PROMPTS[i],
                            n_tokens,
                            j % 2 == 1,
                        );
                        (i, got.map(|x| x.0))
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or((0, Err("client thread panicked".into())))
                })
                .collect()
        });
        for (j, (i, got)) in concurrent.into_iter().enumerate() {
            cases.push(Case {
                label: format!("{tag} concurrent #{j} prompt {i}"),
                want: wants[i].clone(),
                got,
            });
        }
        match spec_reference(reference, tok, &ids[0], n_tokens, k, proposal, &sampled) {
            Ok(want) => {
                let got = served_tokens_with(
                    addr,
                    &key(PROMPTS.len()),
                    PROMPTS[0],
                    n_tokens,
                    false,
                    &sampled.body,
                )
                .map(|x| x.0);
                cases.push(Case {
                    label: format!("{tag} {}", sampled.label),
                    want,
                    got,
                });
            }
            Err(e) => failures.push(format!("{tag}: spec reference: {e}")),
        }
        let st = &srv.state.models[0].scheduler.stats().spec;
        let (rounds, drafted, accepted) = (
            st.rounds.load(std::sync::atomic::Ordering::Relaxed),
            st.drafted(),
            st.accepted_total(),
        );
        let metrics = srv.metrics();
        srv.stop();
        let line = format!("assay_spec_rounds_total{{model=\"gate\"}} {rounds}");
        if rounds == 0 || drafted == 0 {
            failures.push(format!(
                "{tag}: no speculative round ran ({rounds} rounds, {drafted} drafted)"
            ));
        } else if !metrics.contains(&line) {
            failures.push(format!("{tag}: /metrics lacks {line:?}"));
        }
        if proposal == Proposal::SelfDraft && accepted != drafted {
            // The greedy cases run first; the sampled one draws from the same
            // distribution as its draft, so it may reject: count greedy only by bound.
            if accepted * 10 < drafted * 8 {
                failures.push(format!(
                        "{tag}: a model drafting for itself had {accepted} of {drafted} drafts accepted (the draft's cache is out of step)"
                    ));
            }
        }
        detail.push(format!(
            "{tag}: {rounds} verification rounds, {accepted}/{drafted} drafts accepted"
        ));
    }
    let n = cases.len();
    let v = check(&cases);
    if let Verdict::Red { failures: f } = v {
        failures.extend(f);
    }
    detail.insert(
        0,
        format!(
            "{n} requests over HTTP ({} prompts blocking + streamed, {concurrent} concurrent, {} per proposer and K), {n_tokens} tokens each: greedy == the single-sequence plain path, sampled == spec::generate with the seed and K",
            PROMPTS.len(),
            sampled.label
        ),
    );
    (Verdict::from_failures(failures), detail)
}
