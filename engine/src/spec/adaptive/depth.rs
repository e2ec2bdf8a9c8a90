//! The depth and speed-policy state of one request.

use super::{
    CostModel, DepthConfig, MAX_FAILED_PROBES, PLAIN_PROBE_STEPS, Plan, Replay, RoundCost,
    SpecWindow, Verdict, judge, probes_can_pay, replay_cost,
};

/// Drafted rounds in a row with no draft accepted after which the planner turns
/// speculation off whatever its estimate (the bound on a collapse).
pub const MAX_MISSES: u32 = 3;

/// Decisions kept per request for statistics and receipts (the first ones).
const MAX_DECISIONS: usize = 16;

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
    /// Plans before drafting ([`AdaptiveDepth::with_cost_model`]); `None`: the policy
    /// judges only measured rounds.
    model: Option<CostModel>,
    /// The first plan (after the timed plain steps) was made.
    planned: bool,
    /// Tokens the request may still emit, and tokens a draft model has not seen, as the
    /// loop last said ([`AdaptiveDepth::before_round`]).
    remaining: Option<u64>,
    behind: u64,
    /// Tokens emitted through recorded rounds.
    emitted: u64,
    /// What the planner decided and why (the first [`MAX_DECISIONS`]).
    decisions: Vec<String>,
    /// Drafted rounds in a row with nothing accepted.
    misses: u32,
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
            model: None,
            planned: false,
            remaining: None,
            behind: 0,
            emitted: 0,
            decisions: Vec::new(),
            misses: 0,
        }
    }

    /// Plan before drafting with `model` (see [`CostModel`]): with the speed policy on, no
    /// round drafts unless the estimate at the planned depth beats plain by
    /// [`super::MARGIN`]; adaptive depth is the plan's depth.
    pub fn with_cost_model(mut self, model: CostModel) -> Self {
        self.model = Some(model);
        self
    }

    fn planning(&self) -> bool {
        self.cfg.off_when_slower && self.model.is_some()
    }

    /// The plan for the next round at the current estimates (`None` without a cost model
    /// or before a plain step was timed).
    pub fn plan(&self) -> Option<Plan> {
        self.plan_with_margin(super::MARGIN)
    }

    fn plan_with_margin(&self, margin: f64) -> Option<Plan> {
        let m = self.model.as_ref()?;
        let ks = if self.cfg.adaptive {
            1..=self.k_best()
        } else {
            self.k_best()..=self.k_best()
        };
        Some(m.plan_with_margin(self.plain_s?, ks, self.remaining, self.behind, margin))
    }

    /// What the planner decided and why.
    pub fn decisions(&self) -> &[String] {
        &self.decisions
    }

    fn note(&mut self, what: &str, plan: &Plan) {
        if self.decisions.len() < MAX_DECISIONS {
            self.decisions.push(format!(
                "token {}: {what}: {}",
                self.emitted,
                plan.describe()
            ));
        }
    }

    /// Tell the policy what the loop knows before a round: `remaining` tokens the request
    /// may still emit, `behind` tokens a draft model would first be fed (its prompt when it
    /// never drafted). Makes the first plan once the plain steps are timed: speculation
    /// starts only when it promises to pay; otherwise off (re-checked after a back-off) or
    /// off for good when even full acceptance cannot pay. Returns the policy change.
    pub fn before_round(&mut self, remaining: Option<u64>, behind: u64) -> Option<PolicyEvent> {
        self.remaining = remaining;
        self.behind = behind;
        if !self.planning() || self.planned || self.plain_steps < PLAIN_PROBE_STEPS {
            return None;
        }
        self.planned = true;
        let plan = self.plan()?;
        if plan.k > 0 {
            self.note("speculate", &plan);
            if self.cfg.adaptive {
                self.k = plan.k;
            }
            return None;
        }
        if plan.hopeless() {
            self.note("hopeless, never drafts", &plan);
            self.mode = Mode::Hopeless;
            return Some(PolicyEvent::Hopeless);
        }
        self.note("plain", &plan);
        self.mode = Mode::Off { left: self.backoff };
        Some(PolicyEvent::Off)
    }

    /// Learn the acceptance of a free proposer replayed over known tokens without judging
    /// it.
    pub fn observe_replay(&mut self, r: &Replay) {
        if let Some(m) = self.model.as_mut() {
            m.observe(
                r.first_accepted,
                r.drafted_rounds,
                r.cont_accepted,
                r.cont_trials,
            );
        }
    }

    /// The proposer drafts for free ([`crate::spec::Proposer::is_free`]): while speculation is off
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
        if self.planning() {
            self.observe_replay(r);
            let plan = self.plan()?;
            if plan.k == 0 {
                return None;
            }
            self.note("replay says speculate", &plan);
            self.turn_on();
            return Some(PolicyEvent::Probe);
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
        if let (true, Some(p)) = (self.cfg.adaptive, self.plan().filter(|p| p.k > 0)) {
            self.k = p.k;
        } else if self.cfg.adaptive {
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
        self.emitted += r.emitted as u64;
        if r.drafted == 0 {
            return self.record_plain(r);
        }
        // A forward that also captured its graph: its verification seconds in the measured
        // window are the estimate's (the capture is paid once, not per round).
        let est = self
            .model
            .as_ref()
            .zip(self.plain_s)
            .map(|(m, p)| m.verify_s(r.drafted + 1, p));
        let r = &match (r.setup, est) {
            (true, Some(v)) => RoundCost {
                verify_s: v.min(r.verify_s),
                ..*r
            },
            _ => *r,
        };
        if let Some(m) = self.model.as_mut() {
            m.observe_round(r.drafted, r.accepted, r.draft_s, r.verify_s, r.setup);
        }
        self.misses = if r.accepted == 0 { self.misses + 1 } else { 0 };
        if self.planning() && self.mode == Mode::On {
            if let Some(plan) = self.plan_with_margin(super::KEEP_MARGIN) {
                if self.misses >= MAX_MISSES {
                    self.note("measured, nothing accepted in a row, plain", &plan);
                    self.misses = 0;
                    self.window.add(r);
                    return Some(self.turn_off(plan.hopeless()));
                }
                if plan.k == 0 {
                    // The measurements no longer promise a gain: off as if measured slower.
                    self.note("measured, plain", &plan);
                    self.window.add(r);
                    return Some(self.turn_off(plan.hopeless()));
                }
                if self.cfg.adaptive {
                    self.k = plan.k;
                }
            }
        } else if self.cfg.adaptive {
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
            Verdict::Off => Some(self.turn_off(false)),
            Verdict::Hopeless => {
                self.mode = Mode::Hopeless;
                Some(PolicyEvent::Hopeless)
            }
        }
    }

    /// Speculation off after measured rounds: for good when `hopeless`, or for a draft
    /// model after failed probes or when even full acceptance saves too little; else until
    /// the next probe (re-check), waiting longer after each failed probe.
    fn turn_off(&mut self, hopeless: bool) -> PolicyEvent {
        if self.probing {
            // A failed probe: wait longer before the next one.
            self.backoff = (self.backoff * 2).min(8 * self.cfg.probe_every.max(1));
            self.failed_probes += 1;
        }
        self.probing = false;
        let plain = self.plain_s.unwrap_or(0.0);
        if hopeless
            || (!self.free_drafts
                && (self.failed_probes >= MAX_FAILED_PROBES
                    || !probes_can_pay(plain, &self.window, self.k_best())))
        {
            // Each probe of a draft model first feeds it every token it missed:
            // stop paying for that (after failed probes, or at once when even
            // full acceptance would save too little to repay it).
            self.mode = Mode::Hopeless;
            return PolicyEvent::Hopeless;
        }
        self.mode = Mode::Off { left: self.backoff };
        PolicyEvent::Off
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
                // A host hiccup counts as twice the estimate (it must not make every
                // verification look cheap).
                Some(p) => 0.8 * p + 0.2 * s.min(super::plan::SAMPLE_CLIP * p),
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
            if self.planning() {
                // A re-check, not a blind probe: the prior weighs again, and a draft
                // model is probed only when the estimate (its catch-up included) pays.
                if let Some(m) = self.model.as_mut() {
                    m.relax();
                }
                let plan = self.plan()?;
                if plan.hopeless() {
                    self.note("re-check: hopeless", &plan);
                    self.mode = Mode::Hopeless;
                    return Some(PolicyEvent::Hopeless);
                }
                if plan.k == 0 {
                    self.backoff = (self.backoff * 2).min(8 * self.cfg.probe_every.max(1));
                    self.mode = Mode::Off { left: self.backoff };
                    return None;
                }
                self.note("re-check: probe", &plan);
            }
            self.turn_on();
            return Some(PolicyEvent::Probe);
        }
        None
    }
}
