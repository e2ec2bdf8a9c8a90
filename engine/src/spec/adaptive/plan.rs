//! The cost model the speed policy plans with before it pays for a draft: what a round of
//! depth `k` would cost and emit, from what is known before drafting at all.
//!
//! - A plain step: measured (the first decode steps run plain and are timed).
//! - A verification forward of `r` rows: learned online, per row count (moving average of
//!   the measured forwards); a row count not measured yet is the seed
//!   `plain × (1 + (r − 1) × VERIFY_SEED_PER_ROW)` (the H200 at session 5: 7 rows of Qwen
//!   1.5B ~6.1 ms against a 2.06 ms plain step, 3 plain steps; SmolLM2 ~2 steps at 3-4
//!   rows), scaled by what the nearest measured row count showed against its seed.
//! - A drafted token: free for a lookup proposer; for a draft model measured once it ran,
//!   before that `plain × (DRAFT_FLOOR + (1 − DRAFT_FLOOR) × draft bytes / target bytes)`
//!   (a decode step of a small model does not shrink with its weights: launch and
//!   latency costs stay; measured: Qwen 0.5B drafting 1.32 ms/token for a 2.06 ms 1.5B step).
//! - Acceptance, as two rates: `a1` of a round's first draft, and `ac` of a draft given
//!   the one before it was accepted (n-gram drafts are all or nothing: when the lookup
//!   is right its continuation mostly is too; one rate per token would cut deep drafts
//!   short). Decayed counts of the measured rounds (and, for a free proposer, of replays
//!   over generated tokens while speculation is off), pulled to a prior (`PRIOR_FREE` /
//!   `PRIOR_DRAFT`, weight `PRIOR_WEIGHT` trials each) until measured. A free proposer's
//!   prior lets it try a round of depth 1 at once (a failed one costs a third of a plain
//!   step by the seed, and one failure turns it off); a replay of the prompt's own tail
//!   is no estimate: on the board's prompts it matched 8-37% of its drafts while the
//!   generated code then matched 66-79% (what the answer copies from the prompt).
//!
//! A round of depth `k` emits `1 + a1 (1 + ac + … + ac^(k−1))` tokens on average and costs
//! `k × draft + verify(k + 1)`; the plan is the
//! depth with the most tokens per second, and drafting is worth it only when that beats a
//! plain step by [`MARGIN`] — after paying, for a draft model, the catch-up on the tokens
//! it has not seen (its prompt pass when it never drafted: `CATCHUP_SHARE` of a draft step
//! per token), spread over the tokens the request may still emit.

/// Seed of a verification's cost per row beyond the first, in plain steps.
pub const VERIFY_SEED_PER_ROW: f64 = 1.0 / 3.0;
/// Share of a plain step a draft model's step costs whatever its weights.
pub const DRAFT_FLOOR: f64 = 0.25;
/// Draft/target weight-byte ratio assumed when either side cannot tell its weights.
pub const DRAFT_RATIO_UNKNOWN: f64 = 0.5;
/// Speculation must promise this much more than plain (tokens per second) to run.
pub const MARGIN: f64 = 0.05;
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
    /// Whether a row count's first (graph-capturing) verification was seen.
    verify_seen: Vec<bool>,
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
            verify_seen: Vec::new(),
            draft_tok: None,
            first: (0.0, 0.0),
            cont: (0.0, 0.0),
        }
    }

    fn seed(rows: usize, plain: f64) -> f64 {
        plain * (1.0 + rows.saturating_sub(1) as f64 * VERIFY_SEED_PER_ROW)
    }

    /// Seconds of a verification forward of `rows` rows.
    pub fn verify_s(&self, rows: usize, plain: f64) -> f64 {
        if let Some(Some(v)) = self.verify.get(rows) {
            return *v;
        }
        let nearest = self
            .verify
            .iter()
            .enumerate()
            .filter_map(|(r, v)| v.map(|v| (r, v)))
            .min_by_key(|(r, _)| r.abs_diff(rows));
        let scale = nearest.map_or(1.0, |(r, v)| v / Self::seed(r, plain));
        Self::seed(rows, plain) * scale
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

    /// Learn from a round that drafted something.
    pub fn observe_round(&mut self, drafted: usize, accepted: usize, draft_s: f64, verify_s: f64) {
        if drafted == 0 {
            return;
        }
        let rows = drafted + 1;
        if self.verify.len() <= rows {
            self.verify.resize(rows + 1, None);
            self.verify_seen.resize(rows + 1, false);
        }
        // The first verification of a row count also captures its CUDA graph (made on first
        // use, `cuda::decode::verify`): not a sample of its cost. Learn from the second on.
        if std::mem::replace(&mut self.verify_seen[rows], true) {
            let v = &mut self.verify[rows];
            *v = Some(v.map_or(verify_s, |o| 0.7 * o + 0.3 * verify_s));
        }
        if !self.free {
            let d = draft_s / drafted as f64;
            self.draft_tok = Some(self.draft_tok.map_or(d, |o| 0.7 * o + 0.3 * d));
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
    /// `behind` = tokens a draft model would first have to be fed.
    pub fn plan(
        &self,
        plain: f64,
        ks: std::ops::RangeInclusive<usize>,
        remaining: Option<u64>,
        behind: u64,
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
        if best.speedup < 1.0 + MARGIN {
            best.k = 0;
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_seed_is_learned_per_row_count() {
        let mut m = CostModel::new(true, None, None);
        assert!(
            (m.verify_s(7, 2.0) - 6.0).abs() < 1e-12,
            "7 rows = 3 plain steps"
        );
        // The first verification of 4 rows (it captures the graph) teaches nothing.
        m.observe_round(3, 3, 0.0, 50.0);
        assert!((m.verify_s(4, 1.0) - 2.0).abs() < 1e-12, "still the seed");
        m.observe_round(3, 3, 0.0, 2.0);
        assert_eq!(m.verify_s(4, 1.0), 2.0, "measured");
        // 5 rows scale the seed by what 4 rows showed (2.0 against a seed of 2.0).
        assert!((m.verify_s(5, 1.0) - 1.0 * (1.0 + 4.0 / 3.0)).abs() < 1e-12);
        m.observe_round(3, 3, 0.0, 1.0);
        assert!((m.verify_s(4, 1.0) - 1.7).abs() < 1e-12, "moving average");
    }

    #[test]
    fn draft_cost_from_weight_bytes_until_measured() {
        let m = CostModel::new(false, Some(400), Some(1000));
        assert!((m.draft_s(2.0) - 2.0 * (0.25 + 0.75 * 0.4)).abs() < 1e-12);
        assert_eq!(CostModel::new(true, None, None).draft_s(2.0), 0.0);
        let mut m = m;
        m.observe_round(4, 0, 4.0, 1.0);
        assert_eq!(m.draft_s(2.0), 1.0);
    }

    #[test]
    fn plans_follow_acceptance() {
        let mut m = CostModel::new(true, None, None);
        // Prior 0.5: 1.5 tokens for 1.33 plain steps at k = 1: try depth 1.
        let p = m.plan(1.0, 1..=7, None, 0);
        assert_eq!(p.k, 1, "{}", p.describe());
        // Two rounds whose draft was rejected: plain.
        let mut bad = m.clone();
        bad.observe_round(1, 0, 0.0, 4.0 / 3.0);
        bad.observe_round(1, 0, 0.0, 4.0 / 3.0);
        let p = bad.plan(1.0, 1..=7, None, 0);
        assert_eq!(p.k, 0, "{}", p.describe());
        assert!(!p.hopeless());
        // Fully accepted rounds of depth 1 deepen the plan.
        let mut good = m.clone();
        for _ in 0..4 {
            good.observe_round(1, 1, 0.0, 4.0 / 3.0);
        }
        assert!(good.plan(1.0, 1..=7, None, 0).k >= 2);
        for _ in 0..6 {
            m.observe(2, 2, 7, 8);
        }
        let p = m.plan(1.0, 1..=7, None, 0);
        assert!(p.k >= 3 && p.speedup > 1.4, "{}", p.describe());
        // Fixed depth: only that depth is considered.
        assert_eq!(m.plan(1.0, 7..=7, None, 0).k, 7);
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
