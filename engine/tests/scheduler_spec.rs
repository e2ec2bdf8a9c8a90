//! Speculative rounds in the scheduler (`assay serve --spec`), with the fake executor of
//! scheduler.rs: every request gets its solo output under preemption and the prefix cache
//! whatever the proposer drafts, a verifier that accepts one wrong token changes the
//! output (the planted fault), logprobs requests decode plain, and a proposer that cannot
//! be made leaves its request decoding plain.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod scheduler_common;
use scheduler_common::*;

/// A proposer that knows the fake's next tokens and gets one wrong now and then (the
/// drafted token at index `context.len() % 3` is off by one when the context length
/// is even), so rounds accept all, some or none of their drafts.
struct Oracle;

impl Proposer for Oracle {
    fn name(&self) -> String {
        "oracle".into()
    }
    fn propose(&mut self, context: &[u32], k: usize, _: DraftMode) -> Result<Draft, SpecError> {
        let mut tokens = solo(context, k);
        let at = context.len() % 3;
        if context.len() % 2 == 0
            && let Some(t) = tokens.get_mut(at)
        {
            *t = (*t + 1) % (VOCAB as u32 - 2);
        }
        Ok(Draft {
            tokens,
            dists: None,
        })
    }
}

struct OracleFactory {
    made: Arc<AtomicUsize>,
    /// Making a proposer fails (a draft decoder without memory).
    fail: bool,
}

impl ProposerFactory for OracleFactory {
    fn name(&self) -> String {
        "oracle".into()
    }
    fn make(&mut self, _: usize, _: &SamplerConfig) -> Result<Box<dyn Proposer>, String> {
        if self.fail {
            return Err("planted: no memory for a draft".into());
        }
        self.made.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(Oracle))
    }
}

fn spec(k: usize, verifier: Box<dyn Verifier + Send>) -> (SpecServe, Arc<AtomicUsize>) {
    let made = Arc::new(AtomicUsize::new(0));
    let s = SpecServe {
        verifier,
        ..SpecServe::new(
            Box::new(OracleFactory {
                made: made.clone(),
                fail: false,
            }),
            k,
            true,
            usize::MAX,
        )
    };
    (s, made)
}

/// Concurrent, KV-pressured (preempted) and prefix-cached requests through speculative
/// rounds of every depth get the fake's solo output; the counters move; the draft state is
/// rebuilt after each preemption.
#[test]
fn speculative_rounds_give_the_solo_output_under_preemption_and_prefix_cache() {
    for k in [1, 4, 8] {
        let (f, log, _) = fake();
        let (sp, _) = spec(k, Box::new(ExactVerifier));
        let h = scheduler::start_spec(f, config(), Some(sp)).unwrap();
        let mut rxs = Vec::new();
        for i in 0..16u32 {
            let p = prompt(i, 3 + (i as usize * 5) % 40);
            let n = 5 + i as usize % 13;
            let (req, rx) = request("t", p.clone(), n);
            h.submit(req).unwrap();
            rxs.push((p, n, rx));
        }
        for (p, n, mut rx) in rxs {
            let (toks, _, fin) = collect(&mut rx);
            assert_eq!(fin.reason, FinishReason::Length);
            assert_eq!(toks, solo(&p, n), "k {k} prompt {p:?}");
            let su = fin.spec.expect("the request speculated");
            assert!(su.drafted >= su.accepted && su.rounds > 0, "{su:?}");
        }
        let st = &h.stats().spec;
        let (drafted, accepted) = (st.drafted(), st.accepted_total());
        assert!(st.rounds.load(Ordering::SeqCst) > 0);
        assert!(accepted > 0 && accepted < drafted, "{accepted}/{drafted}");
        assert!(
            st.proposed[k - 1].load(Ordering::SeqCst) > 0,
            "position {k}"
        );
        assert!(
            st.proposed
                .iter()
                .skip(k)
                .all(|c| c.load(Ordering::SeqCst) == 0)
        );
        assert!(
            log.lock()
                .unwrap()
                .iter()
                .flatten()
                .any(|&(n, w)| w == WantKind::Rows && n == k + 1),
            "a verification of k + 1 rows"
        );
        // The prefix cache: a repeat comes from the cache and speculates to the same tokens.
        let p = prompt(99, 20);
        for cached in [0, 19] {
            let (r, mut rx) = request("u", p.clone(), 12);
            h.submit(r).unwrap();
            let (toks, c, _) = collect(&mut rx);
            assert_eq!((c, toks), (cached, solo(&p, 12)), "k {k}");
        }
        wait_until("idle", || idle(&h));
    }
    // KV pressure: preempted sequences drop their proposer and rebuild it.
    let (f, _, _) = fake();
    let mut c = config();
    c.n_ctx = 64;
    c.kv_budget_bytes = 64 * 1024;
    c.prefix_cache_entries = 0;
    let (sp, made) = spec(4, Box::new(ExactVerifier));
    let h = scheduler::start_spec(f, c, Some(sp)).unwrap();
    let mut rxs = Vec::new();
    for i in 0..3 {
        let p = prompt(10 + i, 10);
        let (r, rx) = request("t", p.clone(), 40);
        h.submit(r).unwrap();
        rxs.push((p, rx));
    }
    for (p, mut rx) in rxs {
        let (toks, _, fin) = collect(&mut rx);
        assert_eq!(fin.reason, FinishReason::Length);
        assert_eq!(toks, solo(&p, 40));
    }
    let pre = h.stats().preemptions.load(Ordering::SeqCst);
    assert!(pre > 0);
    assert!(
        made.load(Ordering::SeqCst) > 3,
        "proposers rebuilt after {pre} preemptions"
    );
    wait_until("KV freed", || {
        h.stats().kv_blocks_used.load(Ordering::SeqCst) == 0
    });
}

/// A verifier that accepts one wrong draft token (the planted fault of the spec gate).
struct AcceptsOneWrong {
    fired: bool,
}

impl Verifier for AcceptsOneWrong {
    fn verify(&mut self, rows: &[Vec<f32>], d: &Draft, s: &mut Sampler) -> RoundResult {
        ExactVerifier.verify(rows, d, s)
    }
    fn verify_argmax(&mut self, picks: &[u32], d: &Draft, s: &mut Sampler) -> RoundResult {
        let r = greedy_match(picks, d, &mut s.clone());
        if self.fired || r.accepted + 1 >= d.tokens.len() {
            return greedy_match(picks, d, s);
        }
        self.fired = true;
        RoundResult {
            accepted: r.accepted + 1,
            next: picks[r.accepted + 1],
        }
    }
}

#[test]
fn a_verifier_accepting_one_wrong_token_changes_the_output() {
    let (f, _, _) = fake();
    let (sp, _) = spec(4, Box::new(AcceptsOneWrong { fired: false }));
    let h = scheduler::start_spec(f, config(), Some(sp)).unwrap();
    let mut wrong = 0;
    for i in 0..4u32 {
        let p = prompt(i, 12);
        let (r, mut rx) = request("t", p.clone(), 20);
        h.submit(r).unwrap();
        let (toks, _, _) = collect(&mut rx);
        wrong += usize::from(toks != solo(&p, 20));
    }
    assert_eq!(
        wrong, 1,
        "exactly the request with the planted acceptance differs"
    );
}

#[test]
fn logprobs_requests_and_grammar_free_sampled_ones_choose_their_path() {
    // logprobs: plain (the raw row is needed); sampled: rejection sampling on logits rows.
    let (f, log, _) = fake();
    let (sp, _) = spec(3, Box::new(ExactVerifier));
    let h = scheduler::start_spec(f, config(), Some(sp)).unwrap();
    let p = prompt(5, 9);
    let (mut r, mut rx) = request("t", p.clone(), 10);
    r.logprobs = Some(0);
    h.submit(r).unwrap();
    let (toks, _, fin) = collect(&mut rx);
    assert_eq!(toks, solo(&p, 10));
    assert!(fin.spec.is_none(), "a logprobs request decodes plain");
    assert!(
        !log.lock()
            .unwrap()
            .iter()
            .flatten()
            .any(|&(_, w)| w == WantKind::Rows)
    );
    let (mut r, mut rx) = request("t", p.clone(), 10);
    r.sampling.temperature = 0.7;
    r.sampling.seed = 3;
    h.submit(r).unwrap();
    let (toks, _, fin) = collect(&mut rx);
    // The fake's rows put all the mass on one token: sampling picks it too.
    assert_eq!(toks, solo(&p, 10));
    assert!(fin.spec.is_some_and(|s| s.rounds > 0));
    wait_until("idle", || idle(&h));
}

#[test]
fn a_proposer_that_cannot_be_made_leaves_the_request_decoding_plain() {
    let (f, _, _) = fake();
    let spec = SpecServe::new(
        Box::new(OracleFactory {
            made: Arc::new(AtomicUsize::new(0)),
            fail: true,
        }),
        4,
        true,
        usize::MAX,
    );
    let h = scheduler::start_spec(f, config(), Some(spec)).unwrap();
    let p = prompt(7, 11);
    let (r, mut rx) = request("t", p.clone(), 15);
    h.submit(r).unwrap();
    let (toks, _, fin) = collect(&mut rx);
    assert_eq!((fin.reason, toks), (FinishReason::Length, solo(&p, 15)));
    assert!(fin.spec.is_none());
    assert_eq!(h.stats().spec.failures.load(Ordering::SeqCst), 1);
    assert_eq!(h.stats().spec.rounds.load(Ordering::SeqCst), 0);
}

/// A server with the speed policy on (adaptive depth, K <= 8) for a target of 8.5 GB of
/// weights and a draft model of `draft_bytes`, and the count of draft models it made.
fn policy_server(draft_bytes: u64) -> (scheduler::SchedulerHandle, Arc<AtomicUsize>) {
    let (f, _, _) = fake();
    let made = Arc::new(AtomicUsize::new(0));
    let sp = SpecServe {
        policy: scheduler::spec::SpecPolicy::On,
        weight_bytes: (Some(draft_bytes), Some(8_500_000_000)),
        ..SpecServe::new(
            Box::new(OracleFactory {
                made: made.clone(),
                fail: false,
            }),
            8,
            false,
            8,
        )
    };
    (scheduler::start_spec(f, config(), Some(sp)).unwrap(), made)
}

/// The speed policy per request (policy on, adaptive depth): a draft model whose weights
/// are half the target's (the session-5 H200 pair: Q4_0 drafting for Q8_0) cannot pay even
/// at full acceptance by the policy's estimate, so no request drafts and no proposer is
/// made (its prompt pass is never paid); the tokens are plain's.
#[test]
fn the_speed_policy_never_makes_a_hopeless_draft_model() {
    let (h, made) = policy_server(4_500_000_000);
    for i in 0..4u32 {
        let p = prompt(i, 12);
        let (r, mut rx) = request("t", p.clone(), 24);
        h.submit(r).unwrap();
        let (toks, _, fin) = collect(&mut rx);
        assert_eq!(toks, solo(&p, 24));
        assert_eq!(fin.spec.map_or(0, |s| s.drafted), 0, "{:?}", fin.spec);
    }
    assert_eq!(h.stats().spec.drafted(), 0);
    assert_eq!(made.load(Ordering::SeqCst), 0, "no draft model was made");
    // The same pair with a draft at 1% of the target's weights is worth a try: it is made
    // and drafts (the policy's plan at its prior), and the tokens stay plain's.
    let (h, made) = policy_server(85_000_000);
    let p = prompt(7, 12);
    let (r, mut rx) = request("t", p.clone(), 200);
    h.submit(r).unwrap();
    let (toks, _, _) = collect(&mut rx);
    assert_eq!(toks, solo(&p, 200));
    assert!(made.load(Ordering::SeqCst) > 0, "a cheap draft is tried");
}
