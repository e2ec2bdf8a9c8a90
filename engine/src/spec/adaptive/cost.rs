//! What a round costs, the decaying window of speculative rounds' costs, replays of a free
//! proposer, and the pure decisions over those numbers.

use super::PROBE_MIN_SAVING;

/// One round as the loop measured it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RoundCost {
    /// Tokens drafted (0 = a plain step).
    pub drafted: usize,
    /// Drafts accepted.
    pub accepted: usize,
    /// Tokens emitted (accepted drafts plus the target's own token).
    pub emitted: usize,
    /// Seconds of drafting.
    pub draft_s: f64,
    /// Seconds of the target forward (verification, or the plain step).
    pub verify_s: f64,
    /// Seconds of catching the draft up on the tokens of plain steps before this round (a
    /// cost of speculating again, not of drafting: left out of the per-token draft cost).
    pub sync_s: f64,
    /// The target forward also did one-time setup (the CUDA target captures a graph per
    /// verification row count on first use, ~3 plain steps of SmolLM2 on the H200): its
    /// seconds are no sample of what such a forward costs.
    pub setup: bool,
}

/// Costs of the speculative rounds since speculation was (re)started, decayed so that the
/// recent rounds weigh most, and the cost facts kept for the whole request.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SpecWindow {
    /// Rounds since (re)start.
    pub rounds: u64,
    /// Decayed sums of seconds (draft + verification) and of emitted tokens.
    pub secs: f64,
    pub emitted: f64,
    /// Whole request: drafting seconds and drafted tokens (the draft's cost per token).
    pub draft_s: f64,
    pub drafted: u64,
    /// Whole request: the cheapest verification forward seen (seconds).
    pub verify_min: Option<f64>,
    /// Whole request: moving average of a verification forward's seconds.
    pub verify_avg: Option<f64>,
}

/// Weight of the older rounds in [`SpecWindow`] per new round.
const DECAY: f64 = 0.9;

impl SpecWindow {
    /// Add a speculative round.
    pub fn add(&mut self, r: &RoundCost) {
        self.rounds += 1;
        self.secs = DECAY * self.secs + r.draft_s + r.verify_s + r.sync_s;
        self.emitted = DECAY * self.emitted + r.emitted as f64;
        self.draft_s += r.draft_s;
        self.drafted += r.drafted as u64;
        self.verify_min = Some(self.verify_min.map_or(r.verify_s, |v| v.min(r.verify_s)));
        self.verify_avg = Some(
            self.verify_avg
                .map_or(r.verify_s, |v| 0.8 * v + 0.2 * r.verify_s),
        );
    }

    /// Add a round that tried to draft and got nothing (a plain target step plus the
    /// drafting attempt): it counts in the cost per token, not in the verification costs.
    pub fn add_attempt(&mut self, r: &RoundCost) {
        self.secs = DECAY * self.secs + r.draft_s + r.verify_s;
        self.emitted = DECAY * self.emitted + r.emitted as f64;
    }

    /// Start a new window (a probe); the request-wide cost facts stay.
    pub fn restart(&mut self) {
        self.rounds = 0;
        self.secs = 0.0;
        self.emitted = 0.0;
    }

    /// Seconds per emitted token over the window.
    pub fn s_per_token(&self) -> Option<f64> {
        (self.emitted > 0.0).then(|| self.secs / self.emitted)
    }
}

/// The least seconds per emitted token speculation could reach at depth `k`: every draft
/// accepted, drafting at the measured cost per drafted token, verification at the cheapest
/// cost seen (a verification of more rows never costs less). `None` before any round.
pub fn best_case_s_per_token(w: &SpecWindow, k: usize) -> Option<f64> {
    let verify = w.verify_min?;
    let draft = if w.drafted > 0 {
        w.draft_s / w.drafted as f64
    } else {
        0.0
    };
    let k = k.max(1) as f64;
    Some((k * draft + verify) / (k + 1.0))
}

/// Whether probing a (non-free) proposer again can pay: its best case
/// ([`best_case_s_per_token`]) at depth `k` saves at least [`PROBE_MIN_SAVING`] of the
/// plain step. True before any round (nothing measured yet).
pub fn probes_can_pay(plain: f64, w: &SpecWindow, k: usize) -> bool {
    best_case_s_per_token(w, k).is_none_or(|b| b <= (1.0 - PROBE_MIN_SAVING) * plain)
}

/// Rounds of a free proposer replayed over plain tokens: rounds with a draft, rounds
/// without (a plain step each), tokens they emit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replay {
    pub drafted_rounds: u64,
    pub empty_rounds: u64,
    pub tokens: u64,
    /// Tokens drafted over all rounds.
    pub drafted: u64,
    /// Drafted rounds whose first draft matched; drafts after a matched one (a fully
    /// matched round counting its unseen next draft as matched, as
    /// [`super::CostModel::observe_round`] does) and those that matched.
    pub first_accepted: u64,
    pub cont_trials: u64,
    pub cont_accepted: u64,
}

impl Replay {
    /// Drafted tokens that matched (each round emits its matches plus one token; the last
    /// round may be cut short by the end of the known tokens).
    pub fn accepted(&self) -> u64 {
        self.tokens
            .saturating_sub(self.drafted_rounds + self.empty_rounds)
            .min(self.drafted)
    }
}

/// Seconds per token the replayed rounds would have cost: each drafted round one
/// verification (`verify` seconds), each empty round one plain step. `None` without
/// tokens.
pub fn replay_cost(plain: f64, verify: f64, r: &Replay) -> Option<f64> {
    (r.tokens > 0).then(|| {
        (r.drafted_rounds as f64 * verify + r.empty_rounds as f64 * plain) / r.tokens as f64
    })
}

/// What the policy makes of the measurements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Keep speculating.
    Keep,
    /// Slower than plain now: plain steps until the next probe.
    Off,
    /// Slower than plain even if every draft were accepted: plain for the rest of the
    /// request.
    Hopeless,
}

/// The policy's decision after a speculative round: `plain` = seconds per plain step, `w`
/// = the speculative rounds, `k_best` = the largest depth allowed.
pub fn judge(plain: f64, w: &SpecWindow, probe_rounds: u64, k_best: usize) -> Verdict {
    if w.rounds < 2 {
        return Verdict::Keep;
    }
    if best_case_s_per_token(w, k_best).is_some_and(|b| b > plain) {
        return Verdict::Hopeless;
    }
    let Some(cost) = w.s_per_token() else {
        return Verdict::Keep;
    };
    if cost > 2.0 * plain || (w.rounds >= probe_rounds.max(2) && cost > plain) {
        return Verdict::Off;
    }
    Verdict::Keep
}
