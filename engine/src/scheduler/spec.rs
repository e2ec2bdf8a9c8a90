//! Speculative decoding in the scheduler (`assay serve --spec`): per model, a
//! [`ProposerFactory`] makes one [`Proposer`] per speculating sequence (n-gram lookup, or a
//! draft model with its own KV cache), and each decode step of such a sequence becomes a
//! round of the spec module's loop ([`crate::spec::generate`]): draft up to `k` tokens
//! after the committed context, feed the last token then the drafts as ONE input of the
//! step asking for the pick after every row ([`super::Want::Rows`]), accept the drafts the
//! target agrees with ([`crate::spec::greedy_match`] on arg-max ids, or
//! [`crate::spec::ExactVerifier`] on logits rows for sampled requests), emit them and the
//! target's own token, and cut the KV cache back past the accepted drafts
//! ([`super::Executor::kv_truncate`]).
//!
//! Which requests speculate ([`eligible`]): greedy without penalties (arg-max
//! verification: the tokens are those of plain decoding, bit for bit, because the
//! verification rows are batch-invariant; the served gate's spec case checks it), and
//! sampled requests (temperature > 0) with distribution-exact rejection sampling: their
//! tokens follow the distribution of plain sampling, not the same draws (with a seed they
//! equal `assay generate --spec` with that seed and depth, unless preempted: the recompute
//! ends with a plain pick where the loop had a round). Requests with logprobs, a
//! grammar (`response_format` / tools) or greedy with penalties decode plain.
//!
//! Depth and the speed policy are the spec module's ([`AdaptiveDepth`] with its
//! [`CostModel`], as `assay generate`): fixed or adaptive `k`, and (policy on: greedy
//! requests by default) a plan before each draft — speculation only where the estimate
//! from the timed plain steps, the verification cost learned per row count, the weight
//! bytes ([`SpecServe::weight_bytes`]) and the acceptance beats plain — and speculation
//! off for a request while it measures slower than its plain steps. A draft model's
//! proposer (its prompt pass) is made at its first drafted round, so a request the policy
//! never drafts for never pays it. The policy's clock: a
//! step's wall time shared equally among its inputs (exact with one stream; with several
//! it is a rough share, which can only change how fast greedy output comes, never which
//! tokens). Drafting time is measured per sequence.
//!
//! Draft state never gets out of step: a draft model cuts its cache back to the longest
//! prefix it shares with the context before each proposal (rejected drafts drop out), and
//! on preemption the proposer is dropped (its cache freed) and rebuilt from the tokens
//! when the sequence is admitted again. The draft model's cache is NOT counted in the KV
//! budget (it is the draft's, sized like the sequence's).

use std::time::Instant;

use crate::sampling::{Sampler, SamplerConfig};
use crate::spec::{
    AdaptiveDepth, CostModel, DepthConfig, Draft, DraftMode, PolicyEvent, Proposer, RoundCost,
    SpecStats, Verifier, argmax_only, replay,
};

/// Largest depth `assay serve` drafts (the per-position counters of `/metrics`).
pub const MAX_SERVE_K: usize = 8;

/// Plain tokens between two replays of a free proposer while speculation is off (as the
/// spec loop).
const REPLAY_EVERY: usize = 16;
/// Most plain tokens one replay covers.
const REPLAY_SPAN: usize = 32;

/// Makes a proposer for each speculating sequence of one model.
pub trait ProposerFactory: Send {
    /// `ngram` or `draft:<file>` (statistics, logs).
    fn name(&self) -> String;
    /// A proposer for a sequence of at most `capacity` positions whose requests sample
    /// with `sampling`.
    fn make(
        &mut self,
        capacity: usize,
        sampling: &SamplerConfig,
    ) -> Result<Box<dyn Proposer>, String>;
    /// Its proposers draft for free ([`Proposer::is_free`]: the speed policy replays them
    /// instead of probing blind).
    fn free(&self) -> bool {
        false
    }
}

/// n-gram prompt lookup for every sequence.
pub struct NgramFactory;

impl ProposerFactory for NgramFactory {
    fn name(&self) -> String {
        "ngram".into()
    }

    fn make(&mut self, _: usize, _: &SamplerConfig) -> Result<Box<dyn Proposer>, String> {
        Ok(Box::new(crate::spec::NgramProposer::default()))
    }

    fn free(&self) -> bool {
        true
    }
}

/// A draft model on the CPU reference executor: one shared [`crate::reference::Reference`]
/// (weights once), one cache per sequence. The vocabulary was checked once
/// ([`crate::spec::check_vocab`]) by whoever made the factory.
pub struct ReferenceDraftFactory {
    pub exec: std::sync::Arc<crate::reference::Reference>,
    pub target_vocab: usize,
    /// The draft's file name.
    pub label: String,
}

impl ProposerFactory for ReferenceDraftFactory {
    fn name(&self) -> String {
        format!("draft:{}", self.label)
    }

    fn make(&mut self, _: usize, sampling: &SamplerConfig) -> Result<Box<dyn Proposer>, String> {
        crate::spec::DraftModel::on_reference_checked(
            self.exec.clone(),
            self.target_vocab,
            self.label.clone(),
            sampling,
        )
        .map(|d| Box::new(d) as Box<dyn Proposer>)
        .map_err(|e| e.to_string())
    }
}

/// When the speed policy applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecPolicy {
    /// On for greedy requests (whose tokens never depend on it) unless the depth is fixed;
    /// off for sampled ones (whose tokens would then depend on timing).
    Auto,
    On,
    Off,
}

/// A model's speculative configuration.
pub struct SpecServe {
    pub factory: Box<dyn ProposerFactory>,
    /// Largest depth (1..=[`MAX_SERVE_K`]).
    pub k_max: usize,
    /// Adapt the depth to recent acceptance (else always `k_max`).
    pub adaptive: bool,
    /// Confidence cut of a draft model (0 = none).
    pub confidence: f64,
    pub policy: SpecPolicy,
    /// Speculate sampled requests too (rejection sampling).
    pub sampled: bool,
    /// Rows the executor verifies in one pass over the weights (adaptive depth stays
    /// under it): [`crate::cuda::decode::MAX_ROWS`] on CUDA, unlimited on the CPU.
    pub rows_per_pass: usize,
    /// Decides which drafts are accepted: [`crate::spec::ExactVerifier`] ([`SpecServe::new`]);
    /// a test plants a faulty one to see the served-spec checks go red.
    pub verifier: Box<dyn Verifier + Send>,
    /// Weight bytes of the draft model and of the target, when known (the speed policy's
    /// first estimate of a draft step; `None`: an assumed ratio).
    pub weight_bytes: (Option<u64>, Option<u64>),
}

impl SpecServe {
    /// `factory`'s proposers at depth up to `k_max` (adaptive unless `fixed`), the speed
    /// policy `auto`, sampled requests speculating, the exact verifier.
    pub fn new(
        factory: Box<dyn ProposerFactory>,
        k_max: usize,
        fixed: bool,
        rows_per_pass: usize,
    ) -> Self {
        Self {
            factory,
            k_max,
            adaptive: !fixed,
            confidence: 0.0,
            policy: SpecPolicy::Auto,
            sampled: true,
            rows_per_pass,
            verifier: Box::new(crate::spec::ExactVerifier),
            weight_bytes: (None, None),
        }
    }
}

impl std::fmt::Debug for SpecServe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpecServe")
            .field("proposer", &self.factory.name())
            .field("k_max", &self.k_max)
            .field("adaptive", &self.adaptive)
            .field("confidence", &self.confidence)
            .field("policy", &self.policy)
            .field("sampled", &self.sampled)
            .field("rows_per_pass", &self.rows_per_pass)
            .finish()
    }
}

/// Whether a request speculates: no logprobs, no grammar, and greedy without penalties or
/// (when `sampled`) temperature > 0.
pub fn eligible(req: &super::GenRequest, sampler: &Sampler, sampled: bool) -> bool {
    req.logprobs.is_none()
        && req.constraint.is_none()
        && (argmax_only(sampler) || (sampled && !sampler.is_greedy()))
}

/// One speculating sequence's state.
pub(super) struct SeqSpec {
    proposer: Option<Box<dyn Proposer>>,
    depth: AdaptiveDepth,
    pub(super) stats: SpecStats,
    /// The draft missed the tokens of plain rounds since it last drafted.
    behind: bool,
    off_from: usize,
    replayed_at: usize,
    mode: DraftMode,
    /// Depth asked for this round (0 = a plain step).
    k: usize,
    /// Greedy without penalties: verify on arg-max ids.
    pub(super) argmax: bool,
    /// Positions the sequence may hold (a draft model's cache is made that large).
    pub(super) capacity: usize,
    /// This round: the draft, the input fed (last token, then the drafts), seconds.
    pub(super) draft: Draft,
    pub(super) feed: Vec<u32>,
    draft_s: f64,
    sync_s: f64,
    /// Context length the proposer had seen when it last drafted (0: never).
    seen: usize,
    free: bool,
    /// Verification row counts this sequence has run (bit `rows`): the executor may
    /// capture a graph on a row count's first use, so that round is no cost sample.
    rows_run: u128,
}

impl SeqSpec {
    pub(super) fn new(spec: &SpecServe, sampler: &Sampler, capacity: usize) -> Self {
        let greedy = sampler.is_greedy();
        let off_when_slower = match spec.policy {
            SpecPolicy::Auto => greedy && spec.adaptive,
            SpecPolicy::On => true,
            SpecPolicy::Off => false,
        };
        let cfg = DepthConfig {
            adaptive: spec.adaptive,
            confidence: spec.confidence,
            off_when_slower,
            ..DepthConfig::fixed(spec.k_max)
        };
        Self {
            proposer: None,
            depth: AdaptiveDepth::new(cfg)
                .with_rows_per_pass(spec.rows_per_pass)
                .with_free_drafts(spec.factory.free())
                .with_cost_model(CostModel::new(
                    spec.factory.free(),
                    spec.weight_bytes.0,
                    spec.weight_bytes.1,
                )),
            stats: SpecStats::new(spec.factory.name(), spec.k_max),
            behind: true,
            off_from: 0,
            replayed_at: 0,
            mode: DraftMode {
                greedy,
                confidence: spec.confidence,
            },
            k: 0,
            argmax: argmax_only(sampler),
            capacity,
            draft: Draft::default(),
            feed: Vec::new(),
            draft_s: 0.0,
            sync_s: 0.0,
            seen: 0,
            free: spec.factory.free(),
            rows_run: 0,
        }
    }

    /// Drop the proposer (preemption: its cache is freed, rebuilt on the next round).
    pub(super) fn drop_proposer(&mut self) {
        self.proposer = None;
        self.behind = true;
        self.seen = 0;
        self.clear_round();
    }

    pub(super) fn clear_round(&mut self) {
        self.draft = Draft::default();
        self.feed.clear();
        self.draft_s = 0.0;
        self.sync_s = 0.0;
        self.k = 0;
    }

    /// Draft the next round after `context` (prompt and emitted tokens; the last one is not
    /// in the target's cache yet): at most `room` tokens (what the request and the context
    /// still allow past the target's own token). Sets [`SeqSpec::feed`] to the last token
    /// then the drafts (just the last token when nothing is drafted).
    pub(super) fn prepare(
        &mut self,
        spec: &mut SpecServe,
        sampling: &SamplerConfig,
        context: &[u32],
        room: usize,
    ) -> Result<(), String> {
        self.clear_round();
        let Some(&last) = context.last() else {
            return Err("speculation on an empty context".into());
        };
        self.feed.push(last);
        if self.free && self.proposer.is_none() && self.depth.wants_replay() {
            // A lookup proposer costs nothing to make: the policy's replays need it.
            self.proposer = Some(spec.factory.make(self.capacity, sampling)?);
        }
        if self.depth.wants_replay()
            && context.len() >= self.replayed_at + REPLAY_EVERY
            && let Some(p) = self.proposer.as_mut()
        {
            let from = self.off_from.max(context.len().saturating_sub(REPLAY_SPAN));
            let t = Instant::now();
            let r = replay(p.as_mut(), context, from, self.depth.replay_k(), self.mode)
                .map_err(|e| e.to_string())?;
            self.stats.draft_s += t.elapsed().as_secs_f64();
            self.replayed_at = context.len();
            if self.depth.replay_verdict(&r).is_some() {
                self.stats.policy_probes += 1;
            }
        }
        let behind = if self.free {
            0
        } else {
            context.len().saturating_sub(self.seen)
        };
        let event = self
            .depth
            .before_round(Some(room as u64 + 1), behind as u64);
        self.note_event(event, context.len());
        let k = self.depth.next_k().min(room);
        self.k = k;
        if k > 0 {
            self.seen = context.len();
        }
        if k == 0 {
            return Ok(());
        }
        if self.proposer.is_none() {
            // First round (or after preemption): make the proposer and feed it the context
            // (a draft model's prompt pass), outside the policy's clock as in `generate`.
            let t = Instant::now();
            let mut p = spec.factory.make(self.capacity, sampling)?;
            // All of the context but its last token (the proposal feeds it): a fresh draft
            // model takes it as a prompt pass.
            let before = &context[..context.len() - 1];
            p.prefill(before).map_err(|e| e.to_string())?;
            self.stats.draft_prefill_s += t.elapsed().as_secs_f64();
            self.proposer = Some(p);
            self.behind = false;
        }
        let Some(p) = self.proposer.as_mut() else {
            return Ok(());
        };
        if self.behind {
            let t = Instant::now();
            p.sync(context).map_err(|e| e.to_string())?;
            self.sync_s = t.elapsed().as_secs_f64();
            self.stats.draft_s += self.sync_s;
            self.behind = false;
        }
        let t = Instant::now();
        let mut d = p
            .propose(context, k, self.mode)
            .map_err(|e| e.to_string())?;
        d.tokens.truncate(k);
        if let Some(q) = d.dists.as_mut() {
            q.truncate(d.tokens.len());
        }
        self.draft_s = t.elapsed().as_secs_f64();
        self.feed.extend_from_slice(&d.tokens);
        self.draft = d;
        Ok(())
    }

    /// Record the round just verified (`accepted` drafts; `verify_s` = this sequence's
    /// share of the step). `context_len` = the context before the round's tokens.
    pub(super) fn end_round(&mut self, accepted: usize, verify_s: f64, context_len: usize) {
        let drafted = self.draft.tokens.len();
        let accepted = accepted.min(drafted);
        self.stats.draft_s += self.draft_s;
        if drafted == 0 {
            self.stats.plain_s += verify_s;
        } else {
            self.stats.verify_s += verify_s;
        }
        self.stats.record(drafted, accepted);
        self.stats.record_verify_s(drafted, verify_s);
        if self.k == 0 {
            self.behind = true;
        }
        // The executor's clock cannot tell a graph capture apart: a row count's first
        // verification in this sequence may include one.
        let bit = 1u128 << (drafted + 1).min(127);
        let setup = drafted > 0 && self.rows_run & bit == 0;
        self.rows_run |= bit;
        if setup {
            self.stats.setup_rounds += 1;
            self.stats.setup_s += verify_s;
        }
        let round = RoundCost {
            drafted,
            accepted,
            emitted: accepted + 1,
            draft_s: self.draft_s,
            verify_s,
            sync_s: self.sync_s,
            setup,
        };
        let event = self.depth.record(&round);
        self.note_event(event, context_len + accepted + 1);
        if self.stats.decisions.len() != self.depth.decisions().len() {
            self.stats.decisions = self.depth.decisions().to_vec();
        }
        self.clear_round();
    }

    /// Count a policy change; `off_from` = the context length from which replays start.
    fn note_event(&mut self, event: Option<PolicyEvent>, off_from: usize) {
        if matches!(event, Some(PolicyEvent::Off | PolicyEvent::Hopeless)) {
            self.off_from = off_from;
            self.replayed_at = off_from;
        }
        let at = self.stats.emitted;
        match event {
            Some(PolicyEvent::Off) => {
                self.stats.policy_offs += 1;
                self.stats.off_at.get_or_insert(at);
            }
            Some(PolicyEvent::Hopeless) => {
                self.stats.policy_offs += 1;
                self.stats.off_at.get_or_insert(at);
                self.stats.hopeless_at = Some(at);
            }
            Some(PolicyEvent::Probe) => self.stats.policy_probes += 1,
            None => {}
        }
    }
}
