//! Unit tests of the depth and speed policy (a free proposer's n-gram streams and the
//! evidence rule: `ngram_tests.rs`).

use super::*;

fn round(drafted: usize, accepted: usize, draft_s: f64, verify_s: f64) -> RoundCost {
    RoundCost {
        drafted,
        accepted,
        emitted: accepted + 1,
        draft_s,
        verify_s,
        sync_s: 0.0,
        setup: false,
    }
}

fn plain(s: f64) -> RoundCost {
    round(0, 0, 0.0, s)
}

fn policy(k: usize) -> DepthConfig {
    DepthConfig {
        off_when_slower: true,
        probe_rounds: 4,
        probe_every: 8,
        ..DepthConfig::fixed(k)
    }
}

#[test]
fn fixed_depth_never_moves() {
    let mut d = AdaptiveDepth::new(DepthConfig::fixed(5)).with_rows_per_pass(8);
    for _ in 0..10 {
        assert_eq!(d.next_k(), 5);
        assert_eq!(d.record(&round(5, 0, 1.0, 1.0)), None);
    }
}

#[test]
fn adaptive_depth_follows_acceptance_within_one_pass() {
    let cfg = DepthConfig {
        adaptive: true,
        ..DepthConfig::fixed(8)
    };
    let mut d = AdaptiveDepth::new(cfg.clone());
    for _ in 0..20 {
        let k = d.next_k();
        d.record(&round(k, k, 1.0, 1.0));
    }
    assert_eq!(d.next_k(), 8);
    for _ in 0..20 {
        let k = d.next_k();
        d.record(&round(k, 0, 1.0, 1.0));
    }
    assert_eq!(d.next_k(), 1);
    // On a target verifying 8 rows per pass, 7 drafts at most.
    let mut d = AdaptiveDepth::new(cfg).with_rows_per_pass(8);
    for _ in 0..20 {
        let k = d.next_k();
        d.record(&round(k, k, 1.0, 1.0));
    }
    assert_eq!(d.next_k(), 7);
}

#[test]
fn best_case_bound() {
    let mut w = SpecWindow::default();
    assert_eq!(best_case_s_per_token(&w, 4), None);
    w.add(&round(1, 0, 4.0, 10.0));
    w.add(&round(2, 0, 8.0, 12.0));
    // 4 s per drafted token, cheapest verification 10 s: (7 * 4 + 10) / 8.
    assert_eq!(best_case_s_per_token(&w, 7), Some(38.0 / 8.0));
    // A free proposer (n-gram): verification spread over k + 1 tokens.
    let mut w = SpecWindow::default();
    w.add(&round(3, 0, 0.0, 2.0));
    assert_eq!(best_case_s_per_token(&w, 7), Some(0.25));
}

#[test]
fn judge_decisions() {
    // Every draft rejected: 1 token per 1 s round; best case 1/8 s per token.
    let mut w = SpecWindow::default();
    w.add(&round(3, 0, 0.0, 1.0));
    assert_eq!(
        judge(0.1, &w, 4, 7),
        Verdict::Keep,
        "one round decides nothing"
    );
    w.add(&round(3, 0, 0.0, 1.0));
    assert_eq!(judge(0.6, &w, 4, 7), Verdict::Keep, "above plain, under 2x");
    assert_eq!(
        judge(0.51, &w, 4, 7),
        Verdict::Keep,
        "above plain, under 2x"
    );
    assert_eq!(judge(0.4, &w, 4, 7), Verdict::Off, "above 2x plain");
    assert_eq!(judge(0.3, &w, 4, 7), Verdict::Off, "above 3x plain");
    assert_eq!(
        judge(0.1, &w, 4, 7),
        Verdict::Hopeless,
        "best case 0.125 > 0.1"
    );
    // Every draft accepted: 4 tokens per 1 s round.
    let mut w = SpecWindow::default();
    for _ in 0..3 {
        w.add(&round(3, 3, 0.0, 1.0));
    }
    assert_eq!(judge(0.2, &w, 4, 7), Verdict::Keep, "probe not done");
    w.add(&round(3, 3, 0.0, 1.0));
    assert_eq!(
        judge(0.2, &w, 4, 7),
        Verdict::Off,
        "probe rounds done, above plain"
    );
    assert_eq!(judge(0.26, &w, 4, 7), Verdict::Keep);
}

#[test]
fn policy_times_plain_first_then_speculates_when_faster() {
    let mut d = AdaptiveDepth::new(policy(4));
    for _ in 0..PLAIN_PROBE_STEPS {
        assert_eq!(d.next_k(), 0, "timed plain steps first");
        assert_eq!(d.record(&plain(1.0)), None);
    }
    assert_eq!(d.plain_s_per_token(), Some(1.0));
    for _ in 0..20 {
        assert_eq!(d.next_k(), 4);
        // 5 tokens for 2 s: 0.4 s/token.
        assert_eq!(d.record(&round(4, 4, 0.5, 1.5)), None);
    }
    assert!(!d.is_off());
}

#[test]
fn policy_turns_off_when_slower_and_probes_again() {
    let mut d = AdaptiveDepth::new(policy(4));
    for _ in 0..PLAIN_PROBE_STEPS {
        d.record(&plain(1.0));
    }
    // 1.5 s per token: over plain, under 2x; best case (4 * 0.1 + 1.4) / 5 = 0.36.
    let slow = round(4, 0, 0.1, 1.4);
    for _ in 0..3 {
        assert_eq!(d.record(&slow), None);
    }
    assert_eq!(d.record(&slow), Some(PolicyEvent::Off));
    assert!(d.is_off());
    // 8 plain tokens, then a probe.
    for i in 0..8 {
        assert_eq!(d.next_k(), 0);
        let ev = d.record(&plain(1.0));
        assert_eq!(ev, (i == 7).then_some(PolicyEvent::Probe));
    }
    assert_eq!(d.next_k(), 4);
    // The probe fails: 16 plain tokens before the next one.
    for _ in 0..3 {
        d.record(&slow);
    }
    assert_eq!(d.record(&slow), Some(PolicyEvent::Off));
    let waited = (0..100)
        .position(|_| d.record(&plain(1.0)) == Some(PolicyEvent::Probe))
        .unwrap();
    assert_eq!(waited + 1, 16);
    // Acceptance recovered: the probe passes and speculation stays on.
    let fast = round(4, 4, 0.1, 1.4);
    for _ in 0..20 {
        assert_eq!(d.record(&fast), None);
    }
    assert!(!d.is_off());
    // ... and a later failure waits probe_every again (the backoff was reset).
    let mut ev = None;
    for _ in 0..20 {
        ev = ev.or(d.record(&slow));
    }
    assert_eq!(ev, Some(PolicyEvent::Off));
    let waited = (0..100)
        .position(|_| d.record(&plain(1.0)) == Some(PolicyEvent::Probe))
        .unwrap();
    assert_eq!(waited + 1, 8);
}

#[test]
fn policy_gives_up_when_even_full_acceptance_loses() {
    // The measured synthetic 8B pair: a Q4_0 draft step ~4 ms, a 2-row verification
    // ~10 ms, a plain Q8_0 step ~4.3 ms: even 7 accepted drafts would cost
    // (7 * 4 + 10) / 8 = 4.75 ms per token.
    let mut d = AdaptiveDepth::new(DepthConfig {
        adaptive: true,
        ..policy(8)
    })
    .with_rows_per_pass(8);
    for _ in 0..PLAIN_PROBE_STEPS {
        d.record(&plain(0.0043));
    }
    let k = d.next_k();
    assert!(k > 0);
    assert_eq!(d.record(&round(k, 0, 0.004 * k as f64, 0.010)), None);
    let k = d.next_k();
    assert_eq!(
        d.record(&round(k, 0, 0.004 * k as f64, 0.010)),
        Some(PolicyEvent::Hopeless)
    );
    for _ in 0..1000 {
        assert_eq!(d.next_k(), 0);
        assert_eq!(d.record(&plain(0.0043)), None, "never probes again");
    }
}

#[test]
fn a_draft_model_that_saves_too_little_is_not_probed() {
    // The session-5 H200 pair: plain 4.26 ms, a draft token 3.0 ms, a verification
    // 5.0 ms: full acceptance at depth 7 would cost (7 * 3.0 + 5.0) / 8 = 3.25 ms, a
    // saving of 24% — under PROBE_MIN_SAVING, so no probe after the first Off.
    let mut d = AdaptiveDepth::new(DepthConfig {
        adaptive: true,
        ..policy(8)
    })
    .with_rows_per_pass(8);
    for _ in 0..PLAIN_PROBE_STEPS {
        d.record(&plain(0.00426));
    }
    let mut events = Vec::new();
    for _ in 0..500 {
        let k = d.next_k();
        let r = if k > 0 {
            round(k, 0, 0.003 * k as f64, 0.005)
        } else {
            plain(0.00426)
        };
        events.extend(d.record(&r));
    }
    assert_eq!(events, [PolicyEvent::Hopeless]);
    assert_eq!(d.window().rounds, 2, "two rounds decided it");
    assert!(!probes_can_pay(0.00426, d.window(), 7));
    // A cheaper draft (1 ms per token) can pay: (7 + 5) / 8 = 1.5 ms.
    let mut w = SpecWindow::default();
    w.add(&round(7, 0, 0.007, 0.005));
    assert!(probes_can_pay(0.00426, &w, 7));
    assert!(
        probes_can_pay(0.00426, &SpecWindow::default(), 7),
        "nothing measured"
    );
}

#[test]
fn a_draft_model_stays_off_after_two_failed_probes() {
    let mut d = AdaptiveDepth::new(policy(4));
    for _ in 0..PLAIN_PROBE_STEPS {
        d.record(&plain(1.0));
    }
    let slow = round(4, 0, 0.1, 1.4);
    let mut events = Vec::new();
    for _ in 0..200 {
        let r = if d.next_k() > 0 { slow } else { plain(1.0) };
        events.extend(d.record(&r));
    }
    assert_eq!(
        events,
        [
            PolicyEvent::Off,
            PolicyEvent::Probe,
            PolicyEvent::Off,
            PolicyEvent::Probe,
            PolicyEvent::Hopeless
        ]
    );
    // The seconds of catching the draft up count in the round that follows them.
    let mut d = AdaptiveDepth::new(policy(4));
    for _ in 0..PLAIN_PROBE_STEPS {
        d.record(&plain(1.0));
    }
    let fast = round(4, 4, 0.1, 1.4);
    for _ in 0..10 {
        assert_eq!(d.record(&fast), None);
    }
    let caught_up = RoundCost {
        sync_s: 40.0,
        ..fast
    };
    assert_eq!(d.record(&caught_up), Some(PolicyEvent::Off));
}

#[test]
fn free_proposers_come_back_by_replay_not_blind_probes() {
    let mut d = AdaptiveDepth::new(policy(4)).with_free_drafts(true);
    for _ in 0..PLAIN_PROBE_STEPS {
        d.record(&plain(1.0));
    }
    let slow = round(4, 0, 0.0, 1.5);
    let mut ev = None;
    for _ in 0..4 {
        ev = ev.or(d.record(&slow));
    }
    assert_eq!(ev, Some(PolicyEvent::Off));
    for _ in 0..200 {
        assert_eq!(d.record(&plain(1.0)), None, "no blind probe");
    }
    assert!(d.wants_replay());
    // 10 plain tokens replayed as 8 drafted rounds and 2 empty ones: (8 * 1.5 + 2) / 10
    // = 1.4 s per token > 1 s: stays off; as 4 drafted and 2 empty: 0.8 s: back on.
    let bad = Replay {
        drafted_rounds: 8,
        empty_rounds: 2,
        tokens: 10,
        ..Replay::default()
    };
    assert_eq!(replay_cost(1.0, 1.5, &bad), Some(1.4));
    assert_eq!(d.replay_verdict(&bad), None);
    let good = Replay {
        drafted_rounds: 4,
        empty_rounds: 2,
        tokens: 10,
        ..Replay::default()
    };
    assert_eq!(d.replay_verdict(&good), Some(PolicyEvent::Probe));
    assert!(!d.is_off());
    assert_eq!(d.next_k(), 4);
    assert_eq!(d.replay_verdict(&good), None, "only while off");
}

#[test]
fn no_policy_never_turns_off() {
    let mut d = AdaptiveDepth::new(DepthConfig::fixed(3));
    for _ in 0..50 {
        assert_eq!(d.next_k(), 3);
        assert_eq!(d.record(&round(3, 0, 10.0, 10.0)), None);
    }
    assert!(!d.is_off());
}

/// A simulated request on a fake target: `plain` seconds a plain step, `verify(rows)`
/// seconds a verification, `draft` seconds a drafted token (0 = a free proposer),
/// `accept(round, k)` drafts accepted of `k`, `replay_acc(token)` the acceptance a replay
/// of a free proposer sees over known tokens at that point. Returns the total seconds of
/// `n` tokens, the tokens at which drafted rounds started, and the events.
struct Sim {
    plain: f64,
    verify: fn(usize) -> f64,
    draft: f64,
    bytes: Option<(u64, u64)>,
    accept: fn(u64, usize) -> usize,
    replay_acc: fn(u64) -> f64,
}

struct SimRun {
    secs: f64,
    drafted_at: Vec<u64>,
    events: Vec<PolicyEvent>,
    depth: AdaptiveDepth,
}

fn simulate(s: &Sim, n: u64) -> SimRun {
    let free = s.draft == 0.0;
    let (db, tb) = s.bytes.unzip();
    let cfg = DepthConfig {
        adaptive: true,
        off_when_slower: true,
        ..DepthConfig::fixed(8)
    };
    let mut d = AdaptiveDepth::new(cfg)
        .with_rows_per_pass(8)
        .with_free_drafts(free)
        .with_cost_model(CostModel::new(free, db, tb));
    let replay_at = |t: u64| {
        let a = (s.replay_acc)(t);
        // 8 rounds of 4 drafts each over the known tokens, each all right or all wrong.
        let m = (8.0 * a).round() as u64;
        Replay {
            drafted_rounds: 8,
            empty_rounds: 0,
            tokens: 8 + 4 * m,
            drafted: 32,
            first_accepted: m,
            cont_trials: 4 * m,
            cont_accepted: 4 * m,
        }
    };
    let (mut t, mut secs, mut rounds) = (1u64, 0.0, 0u64);
    let (mut drafted_at, mut events) = (Vec::new(), Vec::new());
    let mut seen = if free { u64::MAX } else { 0 };
    let mut last_replay = 0;
    while t < n {
        if d.wants_replay() && t >= last_replay + 16 {
            last_replay = t;
            events.extend(d.replay_verdict(&replay_at(t)));
        }
        let behind = if free { 0 } else { t + 64 - seen.min(t + 64) };
        events.extend(d.before_round(Some(n - t), behind));
        let k = d.next_k().min((n - t - 1) as usize);
        let r = if k == 0 {
            RoundCost {
                emitted: 1,
                verify_s: s.plain,
                ..RoundCost::default()
            }
        } else {
            drafted_at.push(t);
            // Catching the draft up: CATCHUP_SHARE of a draft step per missed token.
            secs += behind as f64 * 0.5 * s.draft;
            seen = t + 64;
            let a = (s.accept)(rounds, k).min(k);
            rounds += 1;
            RoundCost {
                drafted: k,
                accepted: a,
                emitted: a + 1,
                draft_s: k as f64 * s.draft,
                verify_s: (s.verify)(k + 1),
                sync_s: 0.0,
                setup: false,
            }
        };
        secs += r.draft_s + r.verify_s;
        t += r.emitted as u64;
        events.extend(d.record(&r));
    }
    SimRun {
        secs,
        drafted_at,
        events,
        depth: d,
    }
}

#[test]
fn a_hopeless_draft_is_never_probed() {
    // The session-5 H200 synthetic 8B pair: Q8_0 target 8.5 GB (plain 4.2 ms), its Q4_0
    // copy 4.5 GB as draft (3.5 ms a token), verification ~2 plain steps and more.
    let s = Sim {
        plain: 4.2e-3,
        verify: |r| 4.2e-3 * (1.0 + r as f64 / 3.0),
        draft: 3.5e-3,
        bytes: Some((4_500_000_000, 8_500_000_000)),
        accept: |_, k| k,
        replay_acc: |_| 0.0,
    };
    let run = simulate(&s, 128);
    assert!(run.drafted_at.is_empty(), "drafted at {:?}", run.drafted_at);
    assert_eq!(run.events, [PolicyEvent::Hopeless]);
    assert!((run.secs - 127.0 * 4.2e-3).abs() < 1e-9, "exactly plain");
    assert!(run.depth.decisions()[0].contains("hopeless"));
    // The Qwen2.5-Coder pair: 1.5B Q4_K_M 1.12 GB (plain 2.06 ms), 0.5B draft ~0.5 GB at
    // 1.32 ms a token, 7 rows ~6.1 ms: not hopeless at full acceptance by the estimate,
    // but no gain at the prior: plain throughout, re-checked without drafting.
    let s = Sim {
        plain: 2.06e-3,
        verify: |r| 2.06e-3 * (1.0 + (r - 1) as f64 / 3.0),
        draft: 1.32e-3,
        bytes: Some((500_000_000, 1_117_000_000)),
        accept: |_, k| k,
        replay_acc: |_| 0.0,
    };
    let run = simulate(&s, 128);
    assert!(run.drafted_at.is_empty(), "drafted at {:?}", run.drafted_at);
    assert!((run.secs - 127.0 * 2.06e-3).abs() < 1e-9, "exactly plain");
}

#[test]
fn a_good_ngram_stream_speculates_from_the_first_replay() {
    // SmolLM2 long agentic on the H200 (session 5's costs): plain 1.46 ms, verification ~2
    // plain steps at 4-5 rows; generation accepts every draft in 4 rounds of 5 and half of
    // them in the fifth. No blind round at the prior: the first replay over the generated
    // tokens (16 of them) starts speculation.
    let s = Sim {
        plain: 1.46e-3,
        verify: |r| 1.46e-3 * (1.0 + (r - 1) as f64 / 4.0),
        draft: 0.0,
        bytes: None,
        accept: |i, k| if i % 5 == 4 { k / 2 } else { k },
        replay_acc: |_| 0.8,
    };
    let run = simulate(&s, 128);
    assert_eq!(run.drafted_at[0], 16, "at the first replay");
    assert_eq!(run.events[..2], [PolicyEvent::Off, PolicyEvent::Probe]);
    assert_eq!(run.events.len(), 2, "{:?}", run.events);
    let speedup = 127.0 * 1.46e-3 / run.secs;
    assert!(speedup > 1.6, "{speedup}");
}

#[test]
fn collapsing_acceptance_turns_speculation_off_within_a_few_rounds() {
    let s = Sim {
        plain: 1.0,
        verify: |r| 1.0 + (r - 1) as f64 / 4.0,
        draft: 0.0,
        bytes: None,
        // Every draft accepted for 10 rounds, then none.
        accept: |i, k| if i < 10 { k } else { 0 },
        replay_acc: |t| if t < 40 { 0.9 } else { 0.0 },
    };
    let run = simulate(&s, 128);
    assert_eq!(run.events.first(), Some(&PolicyEvent::Off));
    let after = run.drafted_at.len() - 10;
    assert!(
        after <= MAX_MISSES as usize,
        "{after} drafted rounds after the collapse"
    );
    assert!(run.depth.is_off());
}

/// The loss bound: with the policy on, a request loses against plain only in drafted
/// rounds the estimate promised to win — a replay over generated tokens (free proposer)
/// or a re-check after an exponential back-off (draft model, 32 .. 256 plain tokens) that
/// promised a gain; at the seed's verification cost a free proposer's prior promises none,
/// so it never drafts blind — and each such probe lasts at most [`MAX_MISSES`] rounds when nothing is
/// accepted (fewer when the learned verification cost already says plain). So the loss is
/// at most `probes x MAX_MISSES x (verify(k + 1) + k x draft - plain)` plus a draft model's
/// catch-up, which the plan counts before it pays it. Below: every verification costs 3
/// plain steps whatever its rows and nothing is ever accepted. When the replays see that
/// too (a greedy replay is exactly what the rounds would accept), it is exactly plain; a
/// cheap draft model (1% of the target's weights; a draft model keeps session 6's
/// optimistic seed, it has no replay) stays plain over 128 tokens (its catch-up on the
/// prompt) and is tempted over 1024, within 5% of plain. Worst case: replays that promise 90% while the rounds accept nothing (a text
/// whose regime changes right after each replay): the loss stays within the bound.
#[test]
fn loss_against_plain_is_bounded_by_the_probes() {
    let s = Sim {
        plain: 1.0,
        verify: |_| 3.0,
        draft: 0.0,
        bytes: None,
        accept: |_, _| 0,
        replay_acc: |_| 0.0,
    };
    let run = simulate(&s, 128);
    assert!(run.drafted_at.is_empty());
    assert_eq!(run.secs, 127.0, "exactly plain");
    let s = Sim {
        plain: 1.0,
        verify: |_| 3.0,
        draft: 0.05,
        bytes: Some((1, 100)),
        accept: |_, _| 0,
        replay_acc: |_| 0.0,
    };
    let run = simulate(&s, 128);
    assert!(run.drafted_at.is_empty());
    assert_eq!(run.secs, 127.0);
    let run = simulate(&s, 1024);
    assert!(!run.drafted_at.is_empty(), "tempted over 1024 tokens");
    assert!(run.secs <= 1023.0 * 1.05, "{} s", run.secs);
    let s = Sim {
        plain: 1.0,
        verify: |_| 3.0,
        draft: 0.0,
        bytes: None,
        accept: |_, _| 0,
        replay_acc: |_| 0.9,
    };
    let run = simulate(&s, 128);
    let probes = run
        .events
        .iter()
        .filter(|e| **e == PolicyEvent::Probe)
        .count();
    assert!(probes > 0, "the replays tempt it");
    // Each drafted round emits 1 token for 3 plain steps: a loss of 2 steps.
    let loss = run.secs - 127.0;
    let bound = (probes * MAX_MISSES as usize) as f64 * (3.0 - 1.0);
    assert!(
        loss <= bound + 1e-9,
        "loss {loss} plain steps over {probes} probes, bound {bound}"
    );
    assert!(run.drafted_at.len() <= probes * MAX_MISSES as usize);
}
