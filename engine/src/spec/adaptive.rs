//! Depth per request: fixed K, or adaptive from recent acceptance; and the policy that
//! turns speculation off for a request while it measures slower than plain decoding, and
//! back on (a probe) when it may pay again.
//!
//! Adaptive rule: `a` is an exponential moving average (weight 1/4 per round, starting at
//! 1/2) of the per-token acceptance rate of the last rounds (`accepted / drafted`). With
//! acceptance `a` per token, a run of accepted drafts has expected length `a / (1 - a)`;
//! the next depth is that, rounded, plus one, within `1..=k_max` — and, for adaptive depth,
//! within the rows the target verifies in one pass ([`AdaptiveDepth::with_rows_per_pass`]:
//! on the CUDA decoder 8 rows, so at most 7 drafts; a 9th row would cost a second pass over
//! the weights). A fully accepted draft thus deepens the next one, a draft rejected at its
//! first token makes it shallow.
//!
//! The depth stays acceptance-driven, not cost-driven: on the H200 a verification forward
//! of SmolLM2 costs ~2 plain steps and grows with its rows at long context (attention runs
//! per row: 2.3 ms per round at 866 tokens of context, 3.2 ms at 2530, 018bc70 receipts),
//! so "verification costs the same whatever its rows" does not hold there.
//!
//! Confidence cut (in the proposer): drafting stops at the first position whose top draft
//! probability is under `confidence`.
//!
//! Speed policy (`off_when_slower`), decided per request from the times the loop measures
//! (pure decisions over those numbers: [`judge`], [`best_case_s_per_token`]):
//! - the first [`PLAIN_PROBE_STEPS`] decode steps run plain and are timed; every later
//!   plain step (no draft, or speculation off) refreshes that plain cost (moving average);
//! - speculative rounds are costed as (draft + verification seconds) per emitted token over
//!   a decaying window ([`SpecWindow`]); after `probe_rounds` rounds, a cost above the
//!   plain step's turns speculation off (after 2 rounds already when it is above twice
//!   the plain cost: a draft model's rounds cost a draft forward per token and a
//!   verification each, so two bad rounds are already a measurable loss);
//! - it is off for good ("hopeless") when even full acceptance at the largest depth could
//!   not beat plain: `(k * draft_s_per_token + cheapest_verification) / (k + 1)` above the
//!   plain step (verification of more rows never costs less than of fewer);
//! - otherwise, after `probe_every` plain tokens it is turned back on for a probe (a fresh
//!   window; the seconds of catching the draft model up on the plain tokens count in its
//!   first round); each probe that fails doubles the wait (up to 8 x `probe_every`), one
//!   that passes resets it; after [`MAX_FAILED_PROBES`] failed probes speculation stays off
//!   for the request (each probe pays the draft's catch-up), and a draft model whose best
//!   case ([`probes_can_pay`]) saves under [`PROBE_MIN_SAVING`] of a plain step is not
//!   probed at all: its catch-up (the draft fed every token it missed) costs more than
//!   the rounds could win back (session 5, H200: the synthetic 8B Q8_0 target with its
//!   Q4_0 copy as draft probed twice per request and ran at 0.67x plain). So a request whose
//!   acceptance recovers soon (an easy continuation for a draft model) speculates again;
//! - a free proposer (n-gram lookup, [`super::Proposer::is_free`]) is never probed blind:
//!   the loop replays it over the plain tokens since speculation went off (what it would
//!   have drafted, how much of it plain decoding then produced) and turns speculation back
//!   on when that replay, costed at the measured verification and plain step times, beats
//!   plain ([`replay_cost`]).
//!
//! Greedy output never depends on the policy (every depth gives the plain tokens; the
//! `spec` gates check it); sampled output does (which uniforms decide which token depends
//! on the depth), so a seeded sampled run is reproducible with the policy off (fixed or
//! acceptance-adaptive depth are both deterministic).

/// Plain steps timed at the start of a request before speculation may run.
pub const PLAIN_PROBE_STEPS: u64 = 2;

/// Failed probes after which a (non-free) proposer stays off for the rest of the request.
pub const MAX_FAILED_PROBES: u32 = 2;

/// The share of a plain step a draft model must be able to save at full acceptance for
/// the policy to probe it again after turning it off.
pub const PROBE_MIN_SAVING: f64 = 0.25;

/// Depth configuration of one request.
#[derive(Clone, Debug, PartialEq)]
pub struct DepthConfig {
    /// Largest depth (drafted tokens per round).
    pub k_max: usize,
    /// Adapt the depth to recent acceptance (else always `k_max`).
    pub adaptive: bool,
    /// Confidence cut: stop drafting when the draft's top probability is under this
    /// (0 = off).
    pub confidence: f64,
    /// Turn speculation off for the request while it measures slower than plain decode.
    pub off_when_slower: bool,
    /// Speculative rounds measured before the policy compares their cost with plain's.
    pub probe_rounds: u64,
    /// Plain tokens between the policy turning speculation off and the next probe (doubled
    /// after each failed probe, up to 8 times this).
    pub probe_every: u64,
}

impl DepthConfig {
    /// Always `k` tokens, no cut, no policy: the configuration the gates use.
    pub fn fixed(k: usize) -> Self {
        Self {
            k_max: k,
            adaptive: false,
            confidence: 0.0,
            off_when_slower: false,
            probe_rounds: 6,
            probe_every: 32,
        }
    }
}

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

/// What a recorded round changed in the policy (for statistics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PolicyEvent {
    /// Speculation turned off until the next probe.
    Off,
    /// Speculation turned off for the rest of the request.
    Hopeless,
    /// Speculation turned back on for a probe.
    Probe,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Speculating (after the plain probe steps).
    On,
    /// Plain steps; `left` more before the next probe.
    Off { left: u64 },
    /// Plain for the rest of the request.
    Hopeless,
}

/// The depth state of one request.
#[derive(Clone, Debug)]
pub struct AdaptiveDepth {
    cfg: DepthConfig,
    acceptance: f64,
    k: usize,
    /// Largest depth adaptive rounds use (rows verified in one pass, minus one).
    k_cap: usize,
    /// Moving average of a plain step's seconds, and how many plain steps were timed.
    plain_s: Option<f64>,
    plain_steps: u64,
    window: SpecWindow,
    mode: Mode,
    /// Plain tokens to wait after the next failed probe.
    backoff: u64,
    /// The proposer is free: no blind probes, replays ([`AdaptiveDepth::replay_verdict`]).
    free_drafts: bool,
    /// Probes that ended with speculation off again.
    failed_probes: u32,
    /// The current window is a probe after an off period.
    probing: bool,
}

impl AdaptiveDepth {
    pub fn new(cfg: DepthConfig) -> Self {
        let k = if cfg.adaptive {
            cfg.k_max.min(2)
        } else {
            cfg.k_max
        };
        let backoff = cfg.probe_every.max(1);
        Self {
            cfg,
            acceptance: 0.5,
            k,
            k_cap: usize::MAX,
            plain_s: None,
            plain_steps: 0,
            window: SpecWindow::default(),
            mode: Mode::On,
            backoff,
            probing: false,
            free_drafts: false,
            failed_probes: 0,
        }
    }

    /// The proposer drafts for free ([`super::Proposer::is_free`]): while speculation is off
    /// the loop replays it ([`AdaptiveDepth::wants_replay`]) instead of probing blind.
    pub fn with_free_drafts(mut self, free: bool) -> Self {
        self.free_drafts = free;
        self
    }

    /// Speculation is off until a replay of the free proposer says it pays.
    pub fn wants_replay(&self) -> bool {
        self.free_drafts && matches!(self.mode, Mode::Off { .. })
    }

    /// The depth a replay should draft with.
    pub fn replay_k(&self) -> usize {
        self.k_best()
    }

    /// Judge a replay of the free proposer over plain tokens: speculation back on (a
    /// probe, measured like any other) when the replayed rounds, at the measured
    /// verification cost, would beat a plain step.
    pub fn replay_verdict(&mut self, r: &Replay) -> Option<PolicyEvent> {
        if !self.wants_replay() {
            return None;
        }
        let (plain, verify) = (self.plain_s?, self.window.verify_avg?);
        if replay_cost(plain, verify, r)? < plain {
            self.turn_on();
            return Some(PolicyEvent::Probe);
        }
        None
    }

    fn turn_on(&mut self) {
        self.mode = Mode::On;
        self.window.restart();
        self.probing = true;
        if self.cfg.adaptive {
            // A fresh estimate: acceptance may have changed while no draft was checked.
            self.acceptance = 0.5;
            self.k = 2.min(self.k_best());
        }
    }

    /// Adaptive depth stays within what the target verifies in one pass (`rows` rows: at
    /// most `rows - 1` drafts). Fixed depth is not capped.
    pub fn with_rows_per_pass(mut self, rows: usize) -> Self {
        self.k_cap = rows.saturating_sub(1).max(1);
        if self.cfg.adaptive {
            self.k = self.k.min(self.k_cap);
        }
        self
    }

    /// The configuration.
    pub fn config(&self) -> &DepthConfig {
        &self.cfg
    }

    /// Whether the policy has speculation off now.
    pub fn is_off(&self) -> bool {
        !matches!(self.mode, Mode::On)
    }

    /// The largest depth rounds may use.
    fn k_best(&self) -> usize {
        if self.cfg.adaptive {
            self.cfg.k_max.min(self.k_cap).max(1)
        } else {
            self.cfg.k_max.max(1)
        }
    }

    /// Seconds of a plain step as measured so far.
    pub fn plain_s_per_token(&self) -> Option<f64> {
        self.plain_s
    }

    /// The speculative rounds' costs.
    pub fn window(&self) -> &SpecWindow {
        &self.window
    }

    /// Depth of the next round (0 = a plain step).
    pub fn next_k(&self) -> usize {
        if !self.cfg.off_when_slower {
            return self.k;
        }
        match self.mode {
            Mode::On if self.plain_steps >= PLAIN_PROBE_STEPS => self.k,
            _ => 0,
        }
    }

    /// Record a round (what [`AdaptiveDepth::next_k`] asked for, as run). Returns what it
    /// changed in the policy, if anything.
    pub fn record(&mut self, r: &RoundCost) -> Option<PolicyEvent> {
        if r.drafted == 0 {
            return self.record_plain(r);
        }
        if self.cfg.adaptive {
            let rate = r.accepted.min(r.drafted) as f64 / r.drafted as f64;
            self.acceptance = 0.75 * self.acceptance + 0.25 * rate;
            let a = self.acceptance.min(0.99);
            let k = (a / (1.0 - a)).round() as usize + 1;
            self.k = k.clamp(1, self.k_best());
        }
        if !self.cfg.off_when_slower || self.mode != Mode::On {
            return None;
        }
        self.window.add(r);
        let plain = self.plain_s?;
        match judge(plain, &self.window, self.cfg.probe_rounds, self.k_best()) {
            Verdict::Keep => {
                if self.probing && self.window.rounds >= self.cfg.probe_rounds {
                    // The probe passed: later off periods start short again.
                    self.probing = false;
                    self.backoff = self.cfg.probe_every.max(1);
                }
                None
            }
            Verdict::Off => {
                if self.probing {
                    // A failed probe: wait longer before the next one.
                    self.backoff = (self.backoff * 2).min(8 * self.cfg.probe_every.max(1));
                    self.failed_probes += 1;
                }
                self.probing = false;
                if !self.free_drafts
                    && (self.failed_probes >= MAX_FAILED_PROBES
                        || !probes_can_pay(plain, &self.window, self.k_best()))
                {
                    // Each probe of a draft model first feeds it every token it missed:
                    // stop paying for that (after failed probes, or at once when even
                    // full acceptance would save too little to repay it).
                    self.mode = Mode::Hopeless;
                    return Some(PolicyEvent::Hopeless);
                }
                self.mode = Mode::Off { left: self.backoff };
                Some(PolicyEvent::Off)
            }
            Verdict::Hopeless => {
                self.mode = Mode::Hopeless;
                Some(PolicyEvent::Hopeless)
            }
        }
    }

    fn record_plain(&mut self, r: &RoundCost) -> Option<PolicyEvent> {
        if self.cfg.off_when_slower && self.mode == Mode::On && r.draft_s > 0.0 {
            // A round that asked for a draft and got none.
            self.window.add_attempt(r);
        }
        if r.emitted > 0 {
            let s = r.verify_s / r.emitted as f64;
            self.plain_s = Some(match self.plain_s {
                None => s,
                Some(p) => 0.8 * p + 0.2 * s,
            });
            self.plain_steps += 1;
        }
        if let Mode::Off { left } = self.mode {
            if self.free_drafts {
                // Back on only through a replay.
                return None;
            }
            let left = left.saturating_sub(r.emitted as u64);
            if left > 0 {
                self.mode = Mode::Off { left };
                return None;
            }
            self.turn_on();
            return Some(PolicyEvent::Probe);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(drafted: usize, accepted: usize, draft_s: f64, verify_s: f64) -> RoundCost {
        RoundCost {
            drafted,
            accepted,
            emitted: accepted + 1,
            draft_s,
            verify_s,
            sync_s: 0.0,
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
        };
        assert_eq!(replay_cost(1.0, 1.5, &bad), Some(1.4));
        assert_eq!(d.replay_verdict(&bad), None);
        let good = Replay {
            drafted_rounds: 4,
            empty_rounds: 2,
            tokens: 10,
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
}
