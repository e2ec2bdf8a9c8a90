//! Depth per request: fixed K, or adaptive from recent acceptance; and the speed policy,
//! which plans before it pays for a draft and turns speculation off for a request while it
//! measures slower than plain decoding.
//!
//! Evidence rule (speed policy on, free proposer: n-gram lookup; session 16,
//! [`EvidencePolicy`], `evidence.rs` has the details). The loop drafts the largest depth
//! every round (it costs nothing) and the rule picks how much of it to verify from the
//! proposal's own evidence: the length of the match it drafts from (a copy in progress,
//! [`crate::spec::NgramProposer::match_len`]) sorts it as strong or weak; acceptance is
//! learned per class (drafted rounds, and for free at plain steps: was the proposal's
//! first token the one produced), and the depth is the one with the most expected tokens
//! per second at the learned verification costs, 0 (a plain step) when none beats plain
//! by [`MARGIN`]. No replays, no off periods: a class that stops paying stops drafting
//! after at most [`MAX_MISSES`] rounds in a row and comes back on its first right
//! proposal. Replayed over the board's SmolLM2 sequences at the H200 costs (tests:
//! `replay_tests.rs`, research/notes/s16/policy/): short 1.008x plain, medium 1.250x,
//! long 1.607x, where the planner below ran 1.00x, 1.02x and 1.21x and the best fixed
//! depth 0.84x (K = 1), 1.21x (K = 4) and 1.60x (K = 6). The planner averaged acceptance
//! over rounds, which lags n-gram acceptance's bursts: off inside copies, on after them.
//!
//! Planning policy (speed policy on, with a [`CostModel`]: what `generate` and `assay
//! serve` run for a draft model; the [`AdaptiveDepth`] planner below also still decides
//! for a free proposer when driven without the loop's evidence rule). Before drafting at all, a round of depth `k` is costed from what is known
//! ([`plan`]: plain step timed, a verification's seconds learned per row count and affine
//! in the rows ([`CostModel::verify_s`]), a draft token from the weight bytes until
//! measured, acceptance with a prior) and speculation runs only at the depth with the most
//! expected tokens per second, and only when that beats plain by [`MARGIN`] (once on, while
//! it beats plain at all: [`KEEP_MARGIN`]), counting a draft model's catch-up on tokens it
//! has not seen (its deferred prompt pass) spread over the tokens the request may still
//! emit. A draft that cannot pay even
//! at full acceptance is never probed; one whose estimate does not pay now is re-checked
//! after an exponential back-off (re-check = the estimate again, not a blind probe); a
//! free proposer comes back when a replay over generated tokens says it pays. Each drafted
//! round updates the estimates and re-plans; [`MAX_MISSES`] rounds in a row with nothing
//! accepted turn it off whatever the estimate. Worst-case loss against plain: the probes'
//! rounds (bound and test in `tests.rs`, `loss_against_plain_is_bounded_by_the_probes`).
//! The decisions and their estimates are kept ([`AdaptiveDepth::decisions`]) for the
//! statistics and receipts.
//!
//! Adaptive rule without a cost model: `a` is an exponential moving average (weight 1/4 per round, starting at
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
//! Measured policy (`off_when_slower`; with a cost model it still judges the measured
//! rounds next to the plan), decided per request from the times the loop measures
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
//!   plain ([`replay_cost`]). (`spec::generate` no longer takes this path: under the
//!   speed policy a free proposer runs the evidence rule above; [`AdaptiveDepth`] keeps
//!   it, and `replay_tests.rs` replays it as the "averaged planner" it was.)
//!
//! Greedy output never depends on the policy (every depth gives the plain tokens; the
//! `spec` gates check it); sampled output does (which uniforms decide which token depends
//! on the depth), so a seeded sampled run is reproducible with the policy off (fixed or
//! acceptance-adaptive depth are both deterministic).

mod cost;
mod depth;
mod evidence;
#[cfg(test)]
mod ngram_tests;
mod plan;
#[cfg(test)]
mod replay_tests;
#[cfg(test)]
mod tests;

pub use cost::{
    Replay, RoundCost, SpecWindow, Verdict, best_case_s_per_token, judge, probes_can_pay,
    replay_cost,
};
pub use depth::{AdaptiveDepth, MAX_MISSES, PolicyEvent};
pub use evidence::{EVIDENCE_CAP, EvidenceParams, EvidencePolicy};
pub use plan::{CostModel, KEEP_MARGIN, MARGIN, Plan, expected_tokens};

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
