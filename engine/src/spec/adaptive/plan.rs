//! The cost model the speed policy plans with before it pays for a draft: what a round of
//! depth `k` would cost and emit, from what is known before drafting at all.
//!
//! - A plain step: measured (the first decode steps run plain and are timed).
//! - A verification forward of `r` rows: learned online, per row count (moving average of
//!   the measured forwards, a sample clipped at twice the estimate: host hiccups), never
//!   from a forward that also did one-time setup ([`super::RoundCost::setup`]: the CUDA
//!   target captures a graph per row count on first use). A row count not measured yet is
//!   affine in the rows: a fixed part and a cost per row. Before any measurement the seed
//!   `plain × (VERIFY_SEED_FIXED + (r − 1) × VERIFY_SEED_PER_ROW)` for a free proposer
//!   (a draft model, which has no replay to start from, keeps session 6's optimistic
//!   `plain × (1 + (r − 1) / 3)` so that a cheap draft is tried at its prior) (H200 at 57ea0412f5:
//!   2 rows of SmolLM2 1.7-2.2 plain steps, of Qwen 1.5B 2.2; session 5: 7 rows of Qwen
//!   1.5B ~3 steps); with one row count measured, that measurement plus the seed's cost per
//!   row; with two or more, the nearest measured one plus the fitted cost per row (least
//!   squares, within `[0, plain]` per row). Session 6 scaled the whole seed by what the
//!   nearest row count showed: 2 rows at 2.2 plain steps made 8 rows 5.4 steps, deep rounds
//!   never paid and shallow ones cannot (research/notes/spec/policy-s7.md).
//! - A drafted token: free for a lookup proposer; for a draft model measured once it ran,
//!   before that `plain × (DRAFT_FLOOR + (1 − DRAFT_FLOOR) × draft bytes / target bytes)`
//!   (a decode step of a small model does not shrink with its weights: launch and
//!   latency costs stay; measured: Qwen 0.5B drafting 1.32 ms/token for a 2.06 ms 1.5B step).
//! - Acceptance, as two rates: `a1` of a round's first draft, and `ac` of a draft given
//!   the one before it was accepted (n-gram drafts are all or nothing: when the lookup
//!   is right its continuation mostly is too; one rate per token would cut deep drafts
//!   short). Decayed counts of the measured rounds (and, for a free proposer, of replays
//!   over generated tokens while speculation is off), pulled to a prior (`PRIOR_FREE` /
//!   `PRIOR_DRAFT`, weight `PRIOR_WEIGHT` trials each) until measured. At the seed a free
//!   proposer's prior does not pay (k = 1: 1.5 tokens for 1.75 plain steps), so it never
//!   drafts blind: the first drafted round comes from a replay over generated tokens
//!   (session 6's blind depth-1 round at token 2 cost the SmolLM2 short cell 1.8%: 2 rows
//!   cost 1.7 plain steps there). A replay of the prompt's own tail is no estimate: on the
//!   board's prompts it matched 8-37% of its drafts while the generated code then matched
//!   66-79% (what the answer copies from the prompt).
//!
//! A round of depth `k` emits `1 + a1 (1 + ac + … + ac^(k−1))` tokens on average and costs
//! `k × draft + verify(k + 1)`; the plan is the
//! depth with the most tokens per second, and drafting is worth it only when that beats a
//! plain step by [`MARGIN`] — after paying, for a draft model, the catch-up on the tokens
//! it has not seen (its prompt pass when it never drafted: `CATCHUP_SHARE` of a draft step
//! per token), spread over the tokens the request may still emit.

/// Seed of a verification's cost: a fixed part, and a part per row beyond the first, in
/// plain steps.
pub const VERIFY_SEED_FIXED: f64 = 1.5;
pub const VERIFY_SEED_PER_ROW: f64 = 0.25;
/// The seed's cost per row beyond the first for a draft model (session 6's seed, no fixed
/// part beyond a plain step).
pub const DRAFT_SEED_PER_ROW: f64 = 1.0 / 3.0;
/// A sample of a cost above this many times its estimate counts as this many times it (a
/// host hiccup must not turn a request plain).
pub const SAMPLE_CLIP: f64 = 2.0;
/// Share of a plain step a draft model's step costs whatever its weights.
pub const DRAFT_FLOOR: f64 = 0.25;
/// Draft/target weight-byte ratio assumed when either side cannot tell its weights.
pub const DRAFT_RATIO_UNKNOWN: f64 = 0.5;
/// Speculation must promise this much more than plain (tokens per second) to start.
pub const MARGIN: f64 = 0.05;
/// Once speculating, it stays on while it promises this much more than plain (hysteresis:
/// n-gram acceptance comes in bursts, and a turn-off costs the plain tokens until the next
/// replay; turning off at the start threshold flapped on the replayed H200 costs).
pub const KEEP_MARGIN: f64 = 0.0;
/// Acceptance prior of a free (lookup) proposer, and of a draft model.
pub const PRIOR_FREE: f64 = 0.5;
pub const PRIOR_DRAFT: f64 = 0.7;
/// Weight of the prior, in drafted tokens.
pub const PRIOR_WEIGHT: f64 = 2.0;
/// Catching a draft model up costs this share of its step per missed token (a prompt pass
/// runs many tokens per pass over the weights; a pessimistic share).
pub const CATCHUP_SHARE: f64 = 0.5;
/// Weight of the older acceptance counts per new round.
const ACC_DECAY: f64 = 0.8;

/// What the policy knows of a request's costs.
#[derive(Clone, Debug, PartialEq)]
pub struct CostModel {
    free: bool,
    /// Draft weight bytes over target weight bytes.
    ratio: f64,
    /// Measured verification seconds by row count (index = rows).
    verify: Vec<Option<f64>>,
    /// Measured seconds per drafted token (draft models).
    draft_tok: Option<f64>,
    /// Decayed counts: first drafts accepted / tried, continuations accepted / tried.
    first: (f64, f64),
    cont: (f64, f64),
}

/// A plan: the depth to draft (0 = plain) and the estimate that decided it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Plan {
    /// Depth to draft; 0 = decode plain.
    pub k: usize,
    /// Expected tokens per second of the best depth over plain's (catch-up included).
    pub speedup: f64,
    /// The same at full acceptance and the largest depth (no catch-up): under `1 +
    /// MARGIN` speculation cannot pay whatever the acceptance.
    pub best_case: f64,
    /// Acceptance estimates: of a round's first draft, and of a draft after an accepted one.
    pub acceptance: f64,
    pub continuation: f64,
    /// Estimated seconds: a plain step, a drafted token, the planned verification.
    pub plain_s: f64,
    pub draft_s: f64,
    pub verify_s: f64,
}

impl Plan {
    /// Whether speculation cannot pay even at full acceptance.
    pub fn hopeless(&self) -> bool {
        self.best_case < 1.0 + MARGIN
    }

    /// One line for statistics and receipts.
    pub fn describe(&self) -> String {
        format!(
            "k={} est {:.2}x plain (best case {:.2}x) at acceptance {:.2} then {:.2}: plain {:.3} ms, draft {:.3} ms/token, verify {:.3} ms",
            self.k,
            self.speedup,
            self.best_case,
            self.acceptance,
            self.continuation,
            1e3 * self.plain_s,
            1e3 * self.draft_s,
            1e3 * self.verify_s
        )
    }
}

/// Tokens a round of depth `k` emits on average when its first draft is accepted with
/// probability `a1` and each later one, after an accepted one, with `ac`.
pub fn expected_tokens(a1: f64, ac: f64, k: usize) -> f64 {
    1.0 + a1 * (0..k).map(|i| ac.powi(i as i32)).sum::<f64>()
}

impl CostModel {
    /// A model for a proposer that drafts for free (`free`), or a draft model of
    /// `draft_bytes` of weights for a target of `target_bytes`.
    pub fn new(free: bool, draft_bytes: Option<u64>, target_bytes: Option<u64>) -> Self {
        let ratio = match (draft_bytes, target_bytes) {
            (Some(d), Some(t)) if t > 0 => d as f64 / t as f64,
            _ => DRAFT_RATIO_UNKNOWN,
        };
        Self {
            free,
            ratio,
            verify: Vec::new(),
            draft_tok: None,
            first: (0.0, 0.0),
            cont: (0.0, 0.0),
        }
    }

    /// The seed of a verification's cost and of its cost per row. A draft model has no
    /// replay to start from: for it the seed stays session 6's `plain × (1 + (r − 1) /
    /// 3)`, which lets a cheap draft try a round at its prior (the loss bound counts
    /// that probe).
    fn seed_parts(&self, plain: f64) -> (f64, f64) {
        if self.free {
            (
                plain * (VERIFY_SEED_FIXED - VERIFY_SEED_PER_ROW),
                plain * VERIFY_SEED_PER_ROW,
            )
        } else {
            (
                plain * (1.0 - DRAFT_SEED_PER_ROW),
                plain * DRAFT_SEED_PER_ROW,
            )
        }
    }

    fn seed(&self, rows: usize, plain: f64) -> f64 {
        if rows <= 1 {
            return plain;
        }
        let (fixed, per_row) = self.seed_parts(plain);
        fixed + rows as f64 * per_row
    }

    /// The measured row counts and their seconds.
    fn measured(&self) -> impl Iterator<Item = (usize, f64)> + '_ {
        self.verify
            .iter()
            .enumerate()
            .filter_map(|(r, v)| v.map(|v| (r, v)))
    }

    /// Seconds per verification row beyond the first: fitted over the measured row
    /// counts when there are two or more (least squares, within `[0, plain]`), else the
    /// seed's.
    pub fn verify_per_row_s(&self, plain: f64) -> f64 {
        let pts: Vec<(f64, f64)> = self.measured().map(|(r, v)| (r as f64, v)).collect();
        if pts.len() < 2 {
            return self.seed_parts(plain).1;
        }
        let n = pts.len() as f64;
        let (mr, mv) = pts
            .iter()
            .fold((0.0, 0.0), |(a, b), (r, v)| (a + r / n, b + v / n));
        let (sxy, sxx) = pts.iter().fold((0.0, 0.0), |(a, b), (r, v)| {
            (a + (r - mr) * (v - mv), b + (r - mr) * (r - mr))
        });
        if sxx <= 0.0 {
            return self.seed_parts(plain).1;
        }
        (sxy / sxx).clamp(0.0, plain)
    }

    /// Seconds of a verification forward of `rows` rows: measured, or affine from the
    /// nearest measured row count (or the seed) at [`CostModel::verify_per_row_s`].
    pub fn verify_s(&self, rows: usize, plain: f64) -> f64 {
        if let Some(Some(v)) = self.verify.get(rows) {
            return *v;
        }
        let Some((r0, v0)) = self.measured().min_by_key(|(r, _)| r.abs_diff(rows)) else {
            return self.seed(rows, plain);
        };
        let est = v0 + (rows as f64 - r0 as f64) * self.verify_per_row_s(plain);
        // Fewer rows never cost less than a plain step.
        est.max(plain.min(v0))
    }

    /// Seconds per drafted token.
    pub fn draft_s(&self, plain: f64) -> f64 {
        if self.free {
            return 0.0;
        }
        self.draft_tok
            .unwrap_or(plain * (DRAFT_FLOOR + (1.0 - DRAFT_FLOOR) * self.ratio.min(1.0)))
    }

    /// Acceptance estimates: of a round's first draft, and of a draft after an accepted
    /// one.
    pub fn acceptance(&self) -> (f64, f64) {
        let prior = if self.free { PRIOR_FREE } else { PRIOR_DRAFT };
        let est = |(a, n): (f64, f64)| (a + prior * PRIOR_WEIGHT) / (n + PRIOR_WEIGHT);
        (est(self.first), est(self.cont))
    }

    /// Learn from a round that drafted something. `setup`: its verification also did
    /// one-time setup (a graph capture): no sample of the verification's cost.
    pub fn observe_round(
        &mut self,
        drafted: usize,
        accepted: usize,
        draft_s: f64,
        verify_s: f64,
        setup: bool,
    ) {
        if drafted == 0 {
            return;
        }
        let rows = drafted + 1;
        if self.verify.len() <= rows {
            self.verify.resize(rows + 1, None);
        }
        if !setup {
            let v = &mut self.verify[rows];
            *v = Some(v.map_or(verify_s, |o| 0.7 * o + 0.3 * verify_s.min(SAMPLE_CLIP * o)));
        }
        if !self.free {
            let d = draft_s / drafted as f64;
            self.draft_tok = Some(
                self.draft_tok
                    .map_or(d, |o| 0.7 * o + 0.3 * d.min(SAMPLE_CLIP * o)),
            );
        }
        let j = accepted.min(drafted);
        // First draft: one trial. Continuations: the drafts after an accepted one; a fully
        // accepted round also counts its unseen next draft as accepted (else a round of
        // depth 1 could never show that deeper drafts pay: a fully accepted draft deepens
        // the next one, and deeper rounds measure the truth).
        let cont_acc = if j == drafted { j } else { j.saturating_sub(1) };
        self.observe(u64::from(j > 0), 1, cont_acc as u64, j as u64);
    }

    /// Learn acceptance alone, as counts (one decay step): first drafts accepted of
    /// `first_n` rounds, continuations accepted of `cont_n` (a replay of a free proposer
    /// over known tokens, [`super::Replay`]).
    pub fn observe(&mut self, first_acc: u64, first_n: u64, cont_acc: u64, cont_n: u64) {
        if first_n == 0 {
            return;
        }
        let d = ACC_DECAY;
        self.first = (
            d * self.first.0 + first_acc as f64,
            d * self.first.1 + first_n as f64,
        );
        self.cont = (
            d * self.cont.0 + cont_acc as f64,
            d * self.cont.1 + cont_n as f64,
        );
    }

    /// Let the prior weigh again (a re-check after plain tokens: acceptance may have
    /// changed while nothing was drafted).
    pub fn relax(&mut self) {
        for c in [&mut self.first, &mut self.cont] {
            c.0 *= 0.5;
            c.1 *= 0.5;
        }
    }

    /// The plan for the next round: `plain` = seconds of a plain step, depths `ks` to
    /// consider, `remaining` tokens the request may still emit (`None` = unbounded),
    /// `behind` = tokens a draft model would first have to be fed. Drafts only when the
    /// best depth beats plain by [`MARGIN`].
    pub fn plan(
        &self,
        plain: f64,
        ks: std::ops::RangeInclusive<usize>,
        remaining: Option<u64>,
        behind: u64,
    ) -> Plan {
        self.plan_with_margin(plain, ks, remaining, behind, MARGIN)
    }

    /// [`CostModel::plan`] drafting when the best depth beats plain by `margin`.
    pub fn plan_with_margin(
        &self,
        plain: f64,
        ks: std::ops::RangeInclusive<usize>,
        remaining: Option<u64>,
        behind: u64,
        margin: f64,
    ) -> Plan {
        let (a1, ac) = self.acceptance();
        let d = self.draft_s(plain);
        let k_best = *ks.end();
        let full = (k_best as f64 + 1.0) / (k_best as f64 * d + self.verify_s(k_best + 1, plain));
        let mut best = Plan {
            k: 0,
            speedup: 1.0,
            best_case: full * plain,
            acceptance: a1,
            continuation: ac,
            plain_s: plain,
            draft_s: d,
            verify_s: 0.0,
        };
        let catchup = if self.free {
            0.0
        } else {
            behind as f64 * CATCHUP_SHARE * d
        };
        let mut best_rate = 0.0;
        for k in ks.filter(|&k| k > 0) {
            let v = self.verify_s(k + 1, plain);
            let rate = expected_tokens(a1, ac, k) / (k as f64 * d + v);
            if rate > best_rate {
                best_rate = rate;
                let mut speedup = rate * plain;
                if let Some(n) = remaining.filter(|_| catchup > 0.0) {
                    // n tokens: n / rate seconds speculating plus the catch-up, against n
                    // plain steps.
                    let n = n.max(1) as f64;
                    speedup = n * plain / (n / rate + catchup);
                }
                best = Plan {
                    k,
                    speedup,
                    verify_s: v,
                    ..best
                };
            }
        }
        if best.speedup < 1.0 + margin {
            best.k = 0;
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_cost_is_affine_in_the_rows() {
        let mut m = CostModel::new(true, None, None);
        assert!(
            (m.verify_s(7, 2.0) - 6.0).abs() < 1e-12,
            "7 rows = 3 plain steps"
        );
        assert!((m.verify_s(2, 1.0) - 1.75).abs() < 1e-12);
        // A verification that also captured its graph teaches nothing.
        m.observe_round(3, 3, 0.0, 50.0, true);
        assert!((m.verify_s(4, 1.0) - 2.25).abs() < 1e-12, "still the seed");
        m.observe_round(3, 3, 0.0, 2.0, false);
        assert_eq!(m.verify_s(4, 1.0), 2.0, "measured");
        // One row count measured: it plus the seed's cost per row (not the seed scaled).
        assert!((m.verify_s(5, 1.0) - 2.25).abs() < 1e-12);
        assert!((m.verify_s(8, 1.0) - 3.0).abs() < 1e-12);
        // Two: the fitted cost per row from the nearest one.
        m.observe_round(5, 5, 0.0, 2.6, false);
        assert!((m.verify_per_row_s(1.0) - 0.3).abs() < 1e-12);
        assert!((m.verify_s(8, 1.0) - 3.2).abs() < 1e-12);
        assert!((m.verify_s(2, 1.0) - 1.4).abs() < 1e-12);
        // A hiccup (10 s for a 2 s forward) counts as twice the estimate.
        m.observe_round(3, 3, 0.0, 10.0, false);
        assert!((m.verify_s(4, 1.0) - (0.7 * 2.0 + 0.3 * 4.0)).abs() < 1e-12);
        // The H200 at 57ea0412f5: 2 rows of SmolLM2 medium at 2.16 plain steps. Session 6
        // scaled the seed (8 rows: 2.16 / 1.33 x 3.33 = 5.4 steps); now 2.16 + 6 x 0.25.
        let mut m = CostModel::new(true, None, None);
        m.observe_round(1, 1, 0.0, 2.16, false);
        assert!((m.verify_s(8, 1.0) - 3.66).abs() < 1e-12);
        // A fitted cost per row stays within [0, plain].
        m.observe_round(2, 0, 0.0, 1.0, false);
        assert_eq!(m.verify_per_row_s(1.0), 0.0);
        m.observe_round(3, 0, 0.0, 9.0, false);
        assert!(m.verify_per_row_s(1.0) <= 1.0);
    }

    #[test]
    fn draft_cost_from_weight_bytes_until_measured() {
        let m = CostModel::new(false, Some(400), Some(1000));
        assert!((m.draft_s(2.0) - 2.0 * (0.25 + 0.75 * 0.4)).abs() < 1e-12);
        assert_eq!(CostModel::new(true, None, None).draft_s(2.0), 0.0);
        let mut m = m;
        m.observe_round(4, 0, 4.0, 1.0, false);
        assert_eq!(m.draft_s(2.0), 1.0);
    }

    #[test]
    fn plans_follow_acceptance() {
        let mut m = CostModel::new(true, None, None);
        // Prior 0.5 at the seed: 1.5 tokens for 1.75 plain steps at k = 1, 2.0 for 2.25
        // at k = 3: no blind round.
        let p = m.plan(1.0, 1..=7, None, 0);
        assert_eq!(p.k, 0, "{}", p.describe());
        assert!(!p.hopeless(), "{}", p.describe());
        // A replay over generated tokens that matched (first drafts 2 of 2, continuations
        // 7 of 8, six times): deep rounds pay at the seed.
        let mut good = m.clone();
        for _ in 0..6 {
            good.observe(2, 2, 7, 8);
        }
        let p = good.plan(1.0, 1..=7, None, 0);
        assert!(p.k >= 3 && p.speedup > 1.4, "{}", p.describe());
        // Fixed depth: only that depth is considered.
        assert_eq!(good.plan(1.0, 7..=7, None, 0).k, 7);
        // Rounds whose drafts were rejected: plain (after 3 in a row the policy is plain
        // anyway, `MAX_MISSES`; the estimate follows after a few more).
        let mut bad = good.clone();
        for _ in 0..6 {
            bad.observe_round(4, 0, 0.0, 2.25, false);
        }
        let p = bad.plan(1.0, 1..=7, None, 0);
        assert_eq!(p.k, 0, "{}", p.describe());
        // Fully accepted rounds deepen the plan.
        let mut deep = m.clone();
        for _ in 0..6 {
            deep.observe_round(2, 2, 0.0, 2.0, false);
        }
        assert!(deep.plan(1.0, 1..=7, None, 0).k >= 4);
        m.observe(0, 2, 0, 0);
        assert_eq!(m.plan(1.0, 1..=7, None, 0).k, 0);
    }

    #[test]
    fn catch_up_is_paid_from_the_remaining_tokens() {
        let mut m = CostModel::new(false, Some(100), Some(1000));
        for _ in 0..6 {
            m.observe(2, 2, 8, 8);
        }
        let free_run = m.plan(1.0, 1..=7, Some(128), 0);
        assert!(free_run.k > 0, "{}", free_run.describe());
        // A 2000-token prompt pass the draft has not run: 2000 x 0.5 x 0.325 plain steps.
        let behind = m.plan(1.0, 1..=7, Some(128), 2000);
        assert_eq!(behind.k, 0, "{}", behind.describe());
        assert!(m.plan(1.0, 1..=7, Some(100_000), 2000).k > 0);
    }
}
