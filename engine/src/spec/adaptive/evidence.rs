//! The evidence rule: the speed policy of a free (lookup) proposer, decided per round
//! from the proposal's own evidence instead of an average over past rounds.
//!
//! N-gram acceptance is bursty: a generated text copies spans of its context (code it
//! edits, a tool result it quotes) and the lookup is right token after token while a copy
//! lasts, then wrong until the next one. An acceptance averaged over rounds lags both
//! edges: it turns speculation off inside copies and keeps it on after them (session 16:
//! the averaged planner ran SmolLM2 long at 1.19x plain where fixed depth 6 runs 1.60x).
//! What tells a copy apart is the match the proposal drafts from: how many tokens before
//! its occurrence agree with the context's last ones ([`crate::spec::Proposer::evidence`],
//! [`crate::spec::NgramProposer::match_len`], counted up to [`EVIDENCE_CAP`]). A
//! proposal whose match is at least [`STRONG_MATCH`] tokens long is *strong*, else *weak*.
//!
//! The rule, every round (drafting costs nothing, so the loop always drafts the largest
//! depth first and this picks how much of it to verify):
//! - Acceptance is learned per class of evidence (strong / weak) as two rates, `a1` of a
//!   round's first draft and `ac` of a draft after an accepted one, from decayed counts
//!   ([`ACC_DECAY`] per new trial of that rate) pulled to the class's prior
//!   ([`PRIOR_STRONG`], [`PRIOR_WEAK`], [`PRIOR_WEIGHT`] trials). A drafted round teaches
//!   both rates; a plain step teaches `a1` for free: the loop drafted anyway, so whether
//!   the proposal's first token is the one the plain step produced is known (a shadow
//!   trial).
//! - The depth is the one with the most expected tokens per second at the cost model's
//!   verification seconds for `k + 1` rows ([`CostModel::verify_s`]: learned per row count,
//!   affine in the rows; the timed plain step) and the proposal's length: `1 + a1 (1 +
//!   ac + … + ac^(k−1))` tokens for `verify(k + 1)`; 0 (a plain step) when no depth beats
//!   a plain step by [`MARGIN`].
//! - The first [`PLAIN_PROBE_STEPS`] steps run plain (timed); after [`MAX_MISSES`]
//!   drafted rounds in a row that accepted nothing, rounds stay plain until a shadow trial
//!   hits.
//!
//! Loss against plain: a drafted round loses at most `verify(k + 1) − plain` (nothing
//! accepted). Rounds with nothing accepted lower their class's `a1`, and after
//! [`MAX_MISSES`] of them in a row (any class) nothing is drafted until a proposal was
//! right at a plain step (a shadow hit, after which the next round likely is too); a
//! class's estimate comes back only through new trials of it. Bound and test: `ngram_tests.rs`, `evidence_loss_is_bounded_by_the_misses`.
//! Replayed over the board's SmolLM2 token sequences at the H200 costs (research/notes/
//! s16/policy/): at least plain on every class and within 10% of the best fixed depth.

use super::{CostModel, MARGIN, MAX_MISSES, PLAIN_PROBE_STEPS, expected_tokens};

/// Agreement (tokens) at which a proposal's match counts as strong evidence.
pub const STRONG_MATCH: usize = 3;
/// Longest agreement counted (a cap on the scan; longer copies are all strong).
pub const EVIDENCE_CAP: usize = 32;
/// Priors `(a1, ac)` of strong and of weak evidence.
pub const PRIOR_STRONG: (f64, f64) = (0.7, 0.8);
pub const PRIOR_WEAK: (f64, f64) = (0.2, 0.5);
/// Weight of a prior, in trials.
pub const PRIOR_WEIGHT: f64 = 2.0;
/// Weight of a class's older counts per new update.
pub const ACC_DECAY: f64 = 0.8;
/// Decisions kept per request for statistics and receipts (the first ones).
const MAX_DECISIONS: usize = 16;

/// The rule's constants (the defaults are the `pub const`s above; tests sweep them).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct EvidenceParams {
    pub strong_match: usize,
    pub prior_strong: (f64, f64),
    pub prior_weak: (f64, f64),
    pub prior_weight: f64,
    pub decay: f64,
    /// Speed over plain a depth must promise to be verified.
    pub margin: f64,
}

impl Default for EvidenceParams {
    fn default() -> Self {
        Self {
            strong_match: STRONG_MATCH,
            prior_strong: PRIOR_STRONG,
            prior_weak: PRIOR_WEAK,
            prior_weight: PRIOR_WEIGHT,
            decay: ACC_DECAY,
            margin: MARGIN,
        }
    }
}

/// Decayed counts of one class of evidence.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Counts {
    /// First drafts accepted / tried.
    first: (f64, f64),
    /// Drafts after an accepted one accepted / tried.
    cont: (f64, f64),
}

/// The evidence rule's state for one request.
#[derive(Clone, Debug)]
pub struct EvidencePolicy {
    params: EvidenceParams,
    /// Largest depth (drafts per round).
    k_cap: usize,
    /// Verification seconds by row count (a free proposer's model).
    costs: CostModel,
    /// Moving average of a plain step's seconds, and plain steps timed.
    plain_s: Option<f64>,
    plain_steps: u64,
    /// Weak (0) and strong (1) evidence.
    classes: [Counts; 2],
    /// Drafted rounds in a row that accepted nothing.
    misses: u32,
    /// Tokens emitted through recorded rounds.
    emitted: u64,
    /// Class and depth of the last decision (a change is noted).
    last: Option<(usize, usize)>,
    decisions: Vec<String>,
}

impl EvidencePolicy {
    /// A request drafting at most `k_cap` tokens per round.
    pub fn new(k_cap: usize) -> Self {
        Self {
            params: EvidenceParams::default(),
            k_cap: k_cap.max(1),
            costs: CostModel::new(true, None, None),
            plain_s: None,
            plain_steps: 0,
            classes: [Counts::default(); 2],
            misses: 0,
            emitted: 0,
            last: None,
            decisions: Vec::new(),
        }
    }

    /// The rule with other constants.
    pub fn with_params(mut self, params: EvidenceParams) -> Self {
        self.params = params;
        self
    }

    /// The class of a proposal's evidence: 1 = strong, 0 = weak.
    pub fn class_of(&self, evidence: usize) -> usize {
        usize::from(evidence >= self.params.strong_match)
    }

    /// The largest depth a round drafts (the loop drafts this much, then asks
    /// [`EvidencePolicy::pick`]).
    pub fn k_cap(&self) -> usize {
        self.k_cap
    }

    /// Acceptance estimates `(a1, ac)` for a proposal with `evidence`.
    pub fn acceptance(&self, evidence: usize) -> (f64, f64) {
        let c = self.class_of(evidence);
        let pr = &self.params;
        let prior = if c == 1 {
            pr.prior_strong
        } else {
            pr.prior_weak
        };
        let n = &self.classes[c];
        let w = pr.prior_weight;
        let est = |(a, t): (f64, f64), p: f64| (a + p * w) / (t + w);
        (est(n.first, prior.0), est(n.cont, prior.1))
    }

    /// Depth to verify of a proposal of `available` tokens with `evidence` (0 = a plain
    /// step), and its expected speed over plain.
    pub fn plan(&self, evidence: usize, available: usize) -> (usize, f64) {
        let Some(plain) = self.plain_s else {
            return (0, 1.0);
        };
        if self.plain_steps < PLAIN_PROBE_STEPS || self.misses >= MAX_MISSES {
            return (0, 1.0);
        }
        let (a1, ac) = self.acceptance(evidence);
        let mut best = (0, 1.0 + self.params.margin);
        for k in 1..=available.min(self.k_cap) {
            let speed = expected_tokens(a1, ac, k) * plain / self.costs.verify_s(k + 1, plain);
            if speed > best.1 {
                best = (k, speed);
            }
        }
        if best.0 == 0 { (0, 1.0) } else { best }
    }

    /// [`EvidencePolicy::plan`]'s depth, noting a change of decision.
    pub fn pick(&mut self, evidence: usize, available: usize) -> usize {
        let (k, speed) = self.plan(evidence, available);
        let c = self.class_of(evidence);
        if self
            .last
            .is_none_or(|(lc, lk)| lc != c || (lk > 0) != (k > 0))
            && self.decisions.len() < MAX_DECISIONS
            && self.plain_steps >= PLAIN_PROBE_STEPS
        {
            let (a1, ac) = self.acceptance(evidence);
            self.decisions.push(format!(
                "token {}: {} evidence (match {evidence}): k={k} est {speed:.2}x plain at acceptance {a1:.2} then {ac:.2}",
                self.emitted,
                if c == 1 { "strong" } else { "weak" },
            ));
        }
        if self.plain_steps >= PLAIN_PROBE_STEPS {
            self.last = Some((c, k));
        }
        k
    }

    fn learn(&mut self, evidence: usize, first: (u64, u64), cont: (u64, u64)) {
        let d = self.params.decay;
        let c = self.class_of(evidence);
        let n = &mut self.classes[c];
        // Each rate decays only with new trials of its own: the shadow trials of plain
        // steps (first drafts only) must not wash out what rounds taught of continuations.
        if first.1 > 0 {
            n.first = (
                d * n.first.0 + first.0 as f64,
                d * n.first.1 + first.1 as f64,
            );
        }
        if cont.1 > 0 {
            n.cont = (d * n.cont.0 + cont.0 as f64, d * n.cont.1 + cont.1 as f64);
        }
    }

    /// Record a round: `drafted` tokens verified (0 = a plain step) of which `accepted`,
    /// `emitted` tokens, the target forward's `verify_s` seconds (`setup`: it also did
    /// one-time setup), and the proposal's `evidence` with, for a plain step, whether the
    /// proposal's first token was the one produced (`shadow`; `None`: no proposal).
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &mut self,
        evidence: usize,
        drafted: usize,
        accepted: usize,
        emitted: usize,
        verify_s: f64,
        setup: bool,
        shadow: Option<bool>,
    ) {
        self.emitted += emitted as u64;
        if drafted == 0 {
            if emitted > 0 {
                let s = verify_s / emitted as f64;
                self.plain_s = Some(match self.plain_s {
                    None => s,
                    Some(p) => 0.8 * p + 0.2 * s.min(super::plan::SAMPLE_CLIP * p),
                });
                self.plain_steps += 1;
            }
            if let Some(hit) = shadow {
                self.learn(evidence, (u64::from(hit), 1), (0, 0));
                if hit {
                    self.misses = 0;
                }
            }
            return;
        }
        self.costs
            .observe_round(drafted, accepted, 0.0, verify_s, setup);
        let j = accepted.min(drafted);
        // As the cost model counts them: a fully accepted round also counts its unseen
        // next draft as accepted.
        let cont = if j == drafted { j } else { j.saturating_sub(1) };
        self.learn(evidence, (u64::from(j > 0), 1), (cont as u64, j as u64));
        self.misses = if j == 0 { self.misses + 1 } else { 0 };
    }

    /// What the rule decided and why (the first changes of decision).
    pub fn decisions(&self) -> &[String] {
        &self.decisions
    }
}
