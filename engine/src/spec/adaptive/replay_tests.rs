//! The policies replayed over the board's real token sequences (issue #10, session 16).
//!
//! Greedy output does not depend on the policy, and the n-gram proposer depends only on
//! the tokens so far, so what a round of any depth would accept is a function of the
//! plain greedy sequence: `fixtures/smollm2-<class>.ids` (line 1: the prompt's ids, line
//! 2: the 128 generated ids) are board `spec-h200`'s SmolLM2-135M Q4_1 cells (prompt
//! files of boards/prompts/, BOS, no chat template, 128 tokens, EOS ignored), generated
//! on the CPU reference executor (`assay generate --backend cpu --ignore-eos --json`);
//! their first 8 tokens equal the H200 receipts'. Each policy is driven as
//! `spec::generate` drives it, its rounds costed at the H200 receipts' plain step and
//! verification time by row count (bench.jsonl, 2026-12-01T21:47, engine a9f3bb6);
//! research/notes/s16/policy/README.md has the table.

use super::*;
use crate::spec::NgramProposer;

/// A board cell: its token sequence and the H200 costs of its receipts (ms): a plain
/// step, and a verification forward by row count (rows not measured: least squares over
/// the measured ones).
struct Cell {
    name: &'static str,
    ids: &'static str,
    plain_ms: f64,
    verify_ms: &'static [(usize, f64)],
    /// The receipts' tok/s over plain: acceptance-driven depth K <= 8 without the policy,
    /// and the averaged planner (the policy before session 16).
    measured: (f64, f64),
}

const CELLS: [Cell; 3] = [
    Cell {
        name: "short",
        ids: include_str!("fixtures/smollm2-short.ids"),
        plain_ms: 0.702,
        verify_ms: &[(2, 1.244), (3, 1.465), (4, 1.681), (5, 1.895)],
        measured: (1182.1 / 1420.1, 1412.0 / 1420.1),
    },
    Cell {
        name: "medium",
        ids: include_str!("fixtures/smollm2-medium.ids"),
        plain_ms: 0.759,
        verify_ms: &[
            (2, 1.321),
            (3, 1.609),
            (4, 1.795),
            (5, 2.005),
            (6, 2.192),
            (7, 2.404),
            (8, 2.649),
        ],
        measured: (1568.2 / 1326.6, 1374.5 / 1326.6),
    },
    Cell {
        name: "long",
        ids: include_str!("fixtures/smollm2-long.ids"),
        plain_ms: 0.830,
        verify_ms: &[
            (2, 1.418),
            (3, 1.653),
            (4, 1.917),
            (5, 2.164),
            (6, 2.416),
            (7, 2.637),
            (8, 2.882),
        ],
        measured: (1667.9 / 1207.4, 1434.9 / 1207.4),
    },
];

const GEN: usize = 128;

impl Cell {
    /// Seconds of a verification of `rows` rows.
    fn verify(&self, rows: usize) -> f64 {
        if let Some((_, v)) = self.verify_ms.iter().find(|(r, _)| *r == rows) {
            return v * 1e-3;
        }
        let n = self.verify_ms.len() as f64;
        let mr = self.verify_ms.iter().map(|(r, _)| *r as f64).sum::<f64>() / n;
        let mv = self.verify_ms.iter().map(|(_, v)| v).sum::<f64>() / n;
        let (sxy, sxx) = self.verify_ms.iter().fold((0.0, 0.0), |(a, b), (r, v)| {
            let dr = *r as f64 - mr;
            (a + dr * (v - mv), b + dr * dr)
        });
        (mv + sxy / sxx * (rows as f64 - mr)) * 1e-3
    }

    fn plain(&self) -> f64 {
        self.plain_ms * 1e-3
    }
}

/// What the lookup sees at each generated position `t` (context = prompt + the first `t`
/// generated tokens): its proposal's length at depth 8, how many of it the text then
/// produced, and its evidence ([`NgramProposer::match_len`]).
struct Stream {
    avail: Vec<usize>,
    rem: Vec<usize>,
    evidence: Vec<usize>,
}

fn stream(ids: &str) -> Stream {
    let mut lines = ids.lines().map(|l| {
        l.split_whitespace()
            .map(|x| x.parse::<u32>().unwrap())
            .collect::<Vec<_>>()
    });
    let (prompt, out) = (lines.next().unwrap(), lines.next().unwrap());
    assert_eq!(out.len(), GEN);
    let p = NgramProposer::default();
    let mut s = Stream {
        avail: vec![0],
        rem: vec![0],
        evidence: vec![0],
    };
    let mut ctx = prompt.clone();
    ctx.push(out[0]);
    for t in 1..GEN {
        let d = p.lookup(&ctx, 8);
        let m = d.iter().zip(&out[t..]).take_while(|(a, b)| a == b).count();
        s.avail.push(d.len());
        s.rem.push(m);
        s.evidence.push(p.match_len(&ctx, EVIDENCE_CAP));
        ctx.push(out[t]);
    }
    s
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Policy {
    /// Always `k` drafts (as many as the lookup has).
    Fixed(usize),
    /// The board's `-ngram` cells: acceptance-driven depth, at most 7 drafts, no policy.
    Unplanned,
    /// The averaged planner ([`AdaptiveDepth`] with its cost model; replays while off).
    Averaged,
    /// The evidence rule ([`EvidencePolicy`]).
    Evidence,
}

/// Seconds to decode the cell's 127 tokens after the first, and the drafted rounds.
fn run(cell: &Cell, s: &Stream, policy: Policy) -> (f64, u64) {
    let r = run_with(cell, s, policy, EvidenceParams::default());
    (r.0, r.1)
}

/// [`run`] with the evidence rule's constants, and the rounds by depth.
fn run_with(
    cell: &Cell,
    s: &Stream,
    policy: Policy,
    params: EvidenceParams,
) -> (f64, u64, Vec<u64>) {
    let mut by_depth = vec![0u64; 9];
    let cfg = DepthConfig {
        adaptive: true,
        off_when_slower: policy == Policy::Averaged,
        ..DepthConfig::fixed(8)
    };
    let mut d = AdaptiveDepth::new(cfg)
        .with_rows_per_pass(8)
        .with_free_drafts(true)
        .with_cost_model(CostModel::new(true, None, None));
    let mut ev = EvidencePolicy::new(7).with_params(params);
    let (mut t, mut secs, mut drafted_rounds) = (1usize, 0.0, 0u64);
    let (mut off_from, mut replayed_at) = (0usize, 0usize);
    while t < GEN {
        let remaining = GEN - t;
        if policy == Policy::Averaged {
            if d.wants_replay() && t >= replayed_at + 16 {
                // spec::replay over the last 32 tokens since speculation went off.
                let k = d.replay_k();
                let mut r = Replay::default();
                let mut pos = off_from.max(t.saturating_sub(32)).max(1);
                while pos < t {
                    let drafted = k.min(s.avail[pos]);
                    let m = drafted.min(s.rem[pos]).min(t - pos);
                    if drafted == 0 {
                        r.empty_rounds += 1;
                    } else {
                        r.drafted_rounds += 1;
                        r.drafted += drafted as u64;
                        r.first_accepted += u64::from(m > 0);
                        r.cont_trials += m as u64;
                        r.cont_accepted +=
                            if m == drafted { m } else { m.saturating_sub(1) } as u64;
                    }
                    let step = (m + 1).min(t - pos);
                    r.tokens += step as u64;
                    pos += step;
                }
                replayed_at = t;
                d.replay_verdict(&r);
            }
            if matches!(
                d.before_round(Some(remaining as u64), 0),
                Some(PolicyEvent::Off | PolicyEvent::Hopeless)
            ) {
                off_from = t;
                replayed_at = t;
            }
        }
        let k = match policy {
            Policy::Fixed(k) => k,
            Policy::Unplanned | Policy::Averaged => d.next_k(),
            Policy::Evidence => ev.k_cap(),
        }
        .min(remaining - 1);
        let mut drafted = k.min(s.avail[t]);
        if policy == Policy::Evidence {
            drafted = ev.pick(s.evidence[t], drafted);
        }
        let m = drafted.min(s.rem[t]);
        let verify_s = if drafted == 0 {
            cell.plain()
        } else {
            cell.verify(drafted + 1)
        };
        secs += verify_s;
        drafted_rounds += u64::from(drafted > 0);
        by_depth[drafted] += 1;
        match policy {
            Policy::Evidence => {
                let shadow = (drafted == 0 && k > 0 && s.avail[t] > 0).then_some(s.rem[t] > 0);
                ev.record(s.evidence[t], drafted, m, m + 1, verify_s, false, shadow);
            }
            Policy::Unplanned | Policy::Averaged => {
                let r = RoundCost {
                    drafted,
                    accepted: m,
                    emitted: m + 1,
                    draft_s: 0.0,
                    verify_s,
                    sync_s: 0.0,
                    setup: false,
                };
                if matches!(d.record(&r), Some(PolicyEvent::Off | PolicyEvent::Hopeless)) {
                    off_from = t + m + 1;
                    replayed_at = off_from;
                }
            }
            Policy::Fixed(_) => {}
        }
        t += m + 1;
    }
    (secs, drafted_rounds, by_depth)
}

/// Speed over plain of `policy` on `cell`.
fn speed(cell: &Cell, s: &Stream, policy: Policy) -> f64 {
    (GEN - 1) as f64 * cell.plain() / run(cell, s, policy).0
}

/// The replay reproduces the receipts: the no-policy depth (deterministic: the
/// acceptance-driven depth depends only on the tokens) within 2%, the averaged planner
/// within 6% (it decides from measured times, which jitter on the GPU).
#[test]
fn replay_reproduces_the_h200_receipts() {
    for cell in &CELLS {
        let s = stream(cell.ids);
        let free = speed(cell, &s, Policy::Unplanned);
        let avg = speed(cell, &s, Policy::Averaged);
        let line = format!(
            "{}: no policy {free:.3}x (measured {:.3}x), averaged planner {avg:.3}x (measured {:.3}x)",
            cell.name, cell.measured.0, cell.measured.1
        );
        println!("{line}");
        // Rounds by depth of the no-policy cell: the receipts' (5 timed runs) / 5.
        let by_depth = run_with(cell, &s, Policy::Unplanned, EvidenceParams::default()).2;
        let want: &[u64] = match cell.name {
            "short" => &[57, 36, 13, 1, 1, 0, 0, 0, 0],
            "medium" => &[1, 3, 20, 11, 5, 3, 1, 2, 0],
            _ => &[0, 1, 9, 12, 6, 3, 3, 3, 0],
        };
        assert_eq!(by_depth, want, "{line}");
        assert!((free / cell.measured.0 - 1.0).abs() < 0.02, "{line}");
        assert!((avg / cell.measured.1 - 1.0).abs() < 0.06, "{line}");
    }
}

/// The evidence rule over the real sequences: never below plain, within 10% of the best
/// fixed depth (K = 1..=8, an oracle that knows the sequence), and at least the
/// averaged planner and the no-policy depth on every class. Prints the table of
/// research/notes/s16/policy/README.md.
#[test]
fn evidence_rule_on_the_board_sequences() {
    println!("class | plain | K=1 .. K=8 | no policy | averaged | evidence");
    for cell in &CELLS {
        let s = stream(cell.ids);
        let fixed: Vec<f64> = (1..=8).map(|k| speed(cell, &s, Policy::Fixed(k))).collect();
        let best = fixed.iter().copied().fold(0.0, f64::max);
        let free = speed(cell, &s, Policy::Unplanned);
        let avg = speed(cell, &s, Policy::Averaged);
        let (secs, rounds) = run(cell, &s, Policy::Evidence);
        let evid = (GEN - 1) as f64 * cell.plain() / secs;
        let line = format!(
            "{} | 1.000 | {} | {free:.3} | {avg:.3} | {evid:.3} ({rounds} drafted rounds)",
            cell.name,
            fixed
                .iter()
                .map(|f| format!("{f:.3}"))
                .collect::<Vec<_>>()
                .join(" "),
        );
        println!("{line}");
        assert!(evid >= 1.0, "{line}");
        assert!(evid >= 0.9 * best, "{line}");
        assert!(evid >= avg && evid >= free, "{line}");
    }
}

/// The evidence rule's constants swept over the board sequences (`cargo test -p engine
/// --lib evidence_parameter_sweep -- --ignored --nocapture`): each setting's worst class
/// against max(plain, best fixed depth), and its mean.
#[test]
#[ignore]
fn evidence_parameter_sweep() {
    let streams: Vec<Stream> = CELLS.iter().map(|c| stream(c.ids)).collect();
    let bests: Vec<f64> = CELLS
        .iter()
        .zip(&streams)
        .map(|(c, s)| {
            (1..=8)
                .map(|k| speed(c, s, Policy::Fixed(k)))
                .fold(1.0, f64::max)
        })
        .collect();
    let mut rows = Vec::new();
    for strong_match in [2, 3, 4, 6, 8] {
        for prior_strong in [(0.7, 0.8), (0.8, 0.85), (0.9, 0.9)] {
            for prior_weak in [(0.2, 0.5), (0.3, 0.5), (0.4, 0.6)] {
                for prior_weight in [1.0, 2.0, 4.0] {
                    for decay in [0.7, 0.8, 0.9] {
                        for margin in [0.0, 0.05] {
                            let p = EvidenceParams {
                                strong_match,
                                prior_strong,
                                prior_weak,
                                prior_weight,
                                decay,
                                margin,
                            };
                            let r: Vec<f64> = CELLS
                                .iter()
                                .zip(&streams)
                                .map(|(c, s)| {
                                    (GEN - 1) as f64 * c.plain()
                                        / run_with(c, s, Policy::Evidence, p).0
                                })
                                .collect();
                            let worst = r
                                .iter()
                                .zip(&bests)
                                .map(|(a, b)| a / b)
                                .fold(f64::MAX, f64::min);
                            rows.push((worst, r, p));
                        }
                    }
                }
            }
        }
    }
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (w, r, p) in rows.iter().take(25) {
        println!("{w:.3} {r:.3?} {p:?}");
    }
    let d = rows
        .iter()
        .find(|r| r.2 == EvidenceParams::default())
        .unwrap();
    println!("default: {:.3} {:.3?}", d.0, d.1);
}
