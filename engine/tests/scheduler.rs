//! The scheduler driven with a fake executor whose next token is a hash of the sequence's
//! whole history (so any mix-up of sequences, positions or KV shows in the tokens):
//! continuous batching gives every request its solo output, long prompts are prefilled in
//! chunks while running streams keep decoding, the prefix cache is reused per tenant only,
//! preemption under KV pressure recomputes correctly, cancellation frees KV, a full queue
//! refuses, executor errors end requests cleanly, and drain stops everything. The fake's
//! history marks each position fed as a PROMPT token (`StepInput::prompt`; a backend may
//! compute those by another path), so a generated token re-fed as prompt (or the reverse)
//! after a preemption or through the prefix cache changes the tokens too.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod scheduler_common;
use scheduler_common::*;

#[test]
fn concurrent_requests_each_get_their_solo_output() {
    let (f, log, _) = fake();
    let h = scheduler::start(f, config()).unwrap();
    let mut rxs = Vec::new();
    for i in 0..24u32 {
        let p = prompt(i, 3 + (i as usize * 5) % 40);
        let (req, rx) = request("t", p.clone(), 5 + i as usize % 7);
        h.submit(req).unwrap();
        rxs.push((p, 5 + i as usize % 7, rx));
    }
    for (p, n, mut rx) in rxs {
        let (toks, _, fin) = collect(&mut rx);
        assert_eq!(fin.reason, FinishReason::Length);
        assert_eq!(toks, solo(&p, n), "prompt {p:?}");
        assert_eq!((fin.prompt_tokens, fin.generated), (p.len(), n));
    }
    let max_batch = log.lock().unwrap().iter().map(Vec::len).max().unwrap();
    assert!(
        max_batch > 4,
        "requests were batched together ({max_batch})"
    );
    wait_until("idle", || idle(&h));
}

#[test]
fn long_prompt_is_chunked_while_streams_keep_decoding() {
    let (mut f, log, _) = fake();
    f.delay = Duration::from_millis(2);
    let h = scheduler::start(f, config()).unwrap();
    let (a, mut arx) = request("t", prompt(1, 4), 150);
    h.submit(a).unwrap();
    // Wait for A's first token: it is decoding.
    loop {
        if let Some(Event::Token(_)) = arx.blocking_recv() {
            break;
        }
    }
    let long = prompt(2, 200);
    let (b, mut brx) = request("t", long.clone(), 3);
    h.submit(b).unwrap();
    let (btoks, _, _) = collect(&mut brx);
    assert_eq!(btoks, solo(&long, 3));
    let (atoks, _, _) = collect(&mut arx);
    assert_eq!(atoks.len(), 149);
    let log = log.lock().unwrap();
    // Steps that prefilled a chunk of B (more than one token, no logits) also decoded A.
    let chunk_steps: Vec<&Vec<(usize, WantKind)>> = log
        .iter()
        .filter(|s| s.iter().any(|&(n, w)| n > 1 && w == WantKind::Nothing))
        .collect();
    assert!(
        chunk_steps.len() >= 5,
        "200 tokens in chunks of <= 32: {}",
        chunk_steps.len()
    );
    for s in &chunk_steps {
        assert!(
            s.iter().all(|&(n, _)| n <= 32),
            "chunk over the budget: {s:?}"
        );
        assert!(
            s.contains(&(1, WantKind::Token)),
            "a prefill step without the running decode: {s:?}"
        );
    }
}

#[test]
fn prefix_cache_is_reused_within_a_tenant_only() {
    let (f, _, _) = fake();
    let h = scheduler::start(f, config()).unwrap();
    let p = prompt(3, 30);
    let run = |tenant: &str, p: Vec<u32>| {
        let (r, mut rx) = request(tenant, p, 4);
        h.submit(r).unwrap();
        collect(&mut rx)
    };
    let (t1, c1, _) = run("alice", p.clone());
    assert_eq!(c1, 0);
    let (t2, c2, f2) = run("alice", p.clone());
    assert_eq!(c2, 29, "all but the last prompt token come from the cache");
    assert_eq!(f2.cached_tokens, 29);
    assert_eq!(t1, t2);
    let (t3, c3, _) = run("bob", p.clone());
    assert_eq!(
        (c3, t3),
        (0, t1.clone()),
        "another tenant never reuses alice's cache"
    );
    // A longer prompt sharing the first 30 tokens + the generated ones: only the 30 fed
    // as prompt come from the cache (the 3 generated ones are recomputed as prompt).
    let mut longer = p.clone();
    longer.extend_from_slice(&t1[..3]);
    longer.push(7);
    let (t4, c4, _) = run("alice", longer.clone());
    assert_eq!(c4, 30);
    assert_eq!(t4, solo(&longer, 4));
    assert!(h.stats().prefix_hits.load(Ordering::SeqCst) >= 2);
}

#[test]
fn kv_pressure_preempts_and_recomputes_correctly() {
    let (f, _, _) = fake();
    let mut c = config();
    // 64 positions in all: three requests of 10 + 40 cannot all hold their KV at once.
    c.n_ctx = 64;
    c.kv_budget_bytes = 64 * 1024;
    c.prefix_cache_entries = 0;
    let h = scheduler::start(f, c).unwrap();
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
    assert!(h.stats().preemptions.load(Ordering::SeqCst) > 0);
    wait_until("KV freed", || {
        h.stats().kv_blocks_used.load(Ordering::SeqCst) == 0
    });
}

#[test]
fn cancellation_frees_kv() {
    let (mut f, _, _) = fake();
    f.delay = Duration::from_millis(2);
    let mut c = config();
    c.prefix_cache_entries = 0;
    let h = scheduler::start(f, c).unwrap();
    let (r, mut rx) = request("t", prompt(4, 20), 200);
    h.submit(r).unwrap();
    loop {
        if let Some(Event::Token(_)) = rx.blocking_recv() {
            break;
        }
    }
    wait_until("KV in use", || {
        h.stats().kv_blocks_used.load(Ordering::SeqCst) > 0
    });
    drop(rx);
    wait_until("cancelled", || {
        idle(&h) && h.stats().kv_blocks_used.load(Ordering::SeqCst) == 0
    });
    assert!(h.stats().generated_tokens.load(Ordering::SeqCst) < 200);
}

#[test]
fn full_queue_refuses_and_drain_stops() {
    let (f, _, gate) = fake();
    let mut c = config();
    c.max_queue = 3;
    let held = gate.lock().unwrap();
    let h = scheduler::start(f, c).unwrap();
    // The engine is stuck in its warm-up step: submissions stay queued.
    let mut rxs = Vec::new();
    for i in 0..3 {
        let (r, rx) = request("t", prompt(i, 5), 5);
        h.submit(r).unwrap();
        rxs.push(rx);
    }
    let (r, _rx) = request("t", prompt(9, 5), 5);
    assert_eq!(h.submit(r), Err(SubmitError::QueueFull(3)));
    let (r, _rx) = request("t", prompt(9, 5), 1000);
    assert!(matches!(h.submit(r), Err(SubmitError::TooLong { .. })));
    let (r, _rx) = request("t", vec![], 5);
    assert_eq!(h.submit(r), Err(SubmitError::EmptyPrompt));
    assert!(!h.is_ready());
    drop(held);
    for mut rx in rxs {
        assert_eq!(collect(&mut rx).2.reason, FinishReason::Length);
    }
    assert!(h.is_ready());
    // Drain with no grace: a long request ends with Shutdown; new ones are refused.
    let (r, mut rx) = request("t", prompt(5, 5), 250);
    h.submit(r).unwrap();
    loop {
        if let Some(Event::Token(_)) = rx.blocking_recv() {
            break;
        }
    }
    h.drain(Duration::ZERO);
    assert_eq!(collect(&mut rx).2.reason, FinishReason::Shutdown);
    let (r, _rx) = request("t", prompt(6, 5), 5);
    assert_eq!(h.submit(r), Err(SubmitError::ShuttingDown));
    h.join();
    assert!(h.stats().stopped.load(Ordering::SeqCst));
}

#[test]
fn executor_error_ends_the_request_and_frees_kv() {
    let (mut f, _, _) = fake();
    f.fail_when_fed = Some(48);
    let mut c = config();
    c.prefix_cache_entries = 0;
    let h = scheduler::start(f, c).unwrap();
    let (r, mut rx) = request("t", vec![3, 48, 5], 5);
    h.submit(r).unwrap();
    let (_, _, fin) = collect(&mut rx);
    assert!(matches!(fin.reason, FinishReason::Error(ref e) if e.contains("planted")));
    let (r, mut rx) = request("t", vec![3, 4, 5], 5);
    h.submit(r).unwrap();
    assert_eq!(
        collect(&mut rx).0,
        solo(&[3, 4, 5], 5),
        "the engine keeps serving"
    );
    wait_until("KV freed", || {
        h.stats().kv_blocks_used.load(Ordering::SeqCst) == 0
    });
}

#[test]
fn ignore_eos_generates_past_end_of_generation_tokens() {
    let (f, _, _) = fake();
    let p = vec![7, 8, 9];
    let want = solo(&p, 6);
    let mut c = config();
    c.eog_tokens = vec![want[2]];
    let h = scheduler::start(f, c).unwrap();
    let (r, mut rx) = request("t", p.clone(), 6);
    h.submit(r).unwrap();
    let (toks, _, fin) = collect(&mut rx);
    assert_eq!(toks, want[..2].to_vec());
    assert_eq!(fin.reason, FinishReason::Eog);
    let (mut r, mut rx) = request("u", p, 6);
    r.ignore_eos = true;
    h.submit(r).unwrap();
    let (toks, _, fin) = collect(&mut rx);
    assert_eq!(toks, want);
    assert_eq!(fin.reason, FinishReason::Length);
}

#[test]
fn a_cache_that_cannot_be_made_fails_the_request_not_the_engine() {
    let (mut f, _, _) = fake();
    // Prompt + max_tokens above 20 positions cannot get a cache.
    f.max_capacity = 20;
    let mut c = config();
    c.prefix_cache_entries = 0;
    let h = scheduler::start(f, c).unwrap();
    let (r, mut rx) = request("t", vec![3, 4, 5], 30);
    h.submit(r).unwrap();
    let (toks, _, fin) = collect(&mut rx);
    assert!(toks.is_empty());
    assert!(
        matches!(fin.reason, FinishReason::Error(ref e) if e.contains("planted: no memory")),
        "{:?}",
        fin.reason
    );
    let (r, mut rx) = request("t", vec![3, 4, 5], 5);
    h.submit(r).unwrap();
    assert_eq!(
        collect(&mut rx).0,
        solo(&[3, 4, 5], 5),
        "the engine keeps serving"
    );
    wait_until("KV freed", || {
        h.stats().kv_blocks_used.load(Ordering::SeqCst) == 0
    });
}

/// Every input of `log` that asked for something (warm-up excluded: its first step).
fn asked(log: &StepLog) -> Vec<WantKind> {
    log.lock()
        .unwrap()
        .iter()
        .skip(1)
        .flatten()
        .map(|&(_, w)| w)
        .filter(|&w| w != WantKind::Nothing)
        .collect()
}

#[test]
fn requests_ask_for_tokens_unless_they_need_logprobs() {
    let (f, log, _) = fake();
    let h = scheduler::start(f, config()).unwrap();
    wait_until("warm-up", || h.is_ready());
    // Without logprobs (greedy, then sampled with a seed): the executor picks the token.
    for sampling in [
        SamplerConfig::default(),
        SamplerConfig {
            temperature: 0.8,
            seed: 7,
            ..SamplerConfig::default()
        },
    ] {
        log.lock().unwrap().truncate(1);
        let p = prompt(11, 40);
        let (mut req, mut rx) = request("t", p.clone(), 6);
        req.sampling = sampling;
        h.submit(req).unwrap();
        let (toks, _, fin) = collect(&mut rx);
        assert_eq!(fin.reason, FinishReason::Length);
        assert_eq!(toks, solo(&p, 6));
        let kinds = asked(&log);
        assert_eq!(kinds, vec![WantKind::Token; 6], "{kinds:?}");
    }
    // With logprobs: the logits row comes back and is sampled here, with a logprob event
    // before each token.
    log.lock().unwrap().truncate(1);
    let p = prompt(12, 9);
    let (mut req, mut rx) = request("t", p.clone(), 4);
    req.logprobs = Some(2);
    h.submit(req).unwrap();
    let mut lps = 0;
    let mut toks = Vec::new();
    loop {
        match rx.blocking_recv() {
            Some(Event::Logprob(_)) => lps += 1,
            Some(Event::Token(t)) => toks.push(t),
            Some(Event::Finished(_)) | None => break,
            Some(Event::Admitted { .. }) => {}
        }
    }
    assert_eq!(toks, solo(&p, 4));
    assert_eq!(lps, 4);
    assert_eq!(asked(&log), vec![WantKind::Logits; 4]);
    // The warm-up asked for logits (nothing picks on it).
    assert_eq!(log.lock().unwrap()[0], vec![(1, WantKind::Logits)]);
    wait_until("idle", || idle(&h));
}

#[test]
fn a_step_answering_nothing_for_a_token_ends_the_request_with_an_error() {
    /// An executor that answers `Nothing` to every input (a broken backend).
    struct Mute;
    impl Executor for Mute {
        type Kv = Vec<u32>;
        fn new_kv(&self, _capacity: usize) -> Result<Vec<u32>, String> {
            Ok(Vec::new())
        }
        fn kv_len(&self, kv: &Vec<u32>) -> usize {
            kv.len()
        }
        fn kv_prefix(&self, kv: &Vec<u32>, len: usize, _c: usize) -> Result<Vec<u32>, String> {
            Ok(kv[..len].to_vec())
        }
        fn kv_trim(&self, kv: &mut Vec<u32>, len: usize) {
            kv.truncate(len);
        }
        fn kv_truncate(&self, kv: &mut Vec<u32>, len: usize) {
            kv.truncate(len);
        }
        fn kv_bytes_per_token(&self) -> usize {
            1024
        }
        fn n_vocab(&self) -> usize {
            VOCAB
        }
        fn step(&mut self, batch: &mut [StepInput<'_, Vec<u32>>]) -> Result<Vec<StepOut>, String> {
            for b in batch.iter_mut() {
                b.kv.extend_from_slice(b.tokens);
            }
            Ok(vec![StepOut::Nothing; batch.len()])
        }
    }
    let h = scheduler::start(Mute, config()).unwrap();
    let (req, mut rx) = request("t", prompt(1, 5), 3);
    h.submit(req).unwrap();
    let (toks, _, fin) = collect(&mut rx);
    assert!(toks.is_empty());
    assert!(
        matches!(&fin.reason, FinishReason::Error(e) if e.contains("nothing")),
        "{:?}",
        fin.reason
    );
    wait_until("idle", || idle(&h));
}
