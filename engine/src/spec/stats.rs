//! Acceptance statistics of a speculative run, per draft position: printed by the CLI,
//! serializable for `/metrics` and receipts.

/// Planner decisions kept by [`SpecStats::merge`].
pub const MAX_MERGED_DECISIONS: usize = 16;

/// Counters of one speculative generation (or of many, [`SpecStats::merge`]d).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct SpecStats {
    /// `ngram` or `draft:<name>`.
    pub proposer: String,
    /// Largest depth allowed.
    pub k_max: usize,
    /// Verification rounds (target forwards after the prefill), plain steps included.
    pub rounds: u64,
    /// Rounds that drafted nothing (plain steps: policy off, confidence cut, no n-gram).
    pub plain_rounds: u64,
    /// `proposed[i]`: rounds whose draft had a token at position `i` (0-based).
    pub proposed: Vec<u64>,
    /// `accepted[i]`: rounds whose draft token at position `i` was accepted.
    pub accepted: Vec<u64>,
    /// Tokens emitted after the prefill's first token.
    pub emitted: u64,
    /// Forward passes of the draft network.
    pub draft_forwards: u64,
    /// Token index at which the policy first turned speculation off, if it did.
    pub off_at: Option<u64>,
    /// Times the policy turned speculation off (until a probe, or for good).
    pub policy_offs: u64,
    /// Times it turned speculation back on to measure it again.
    pub policy_probes: u64,
    /// Token index from which speculation stayed off for the rest of the request, if it
    /// did: it could not beat plain decoding even with every draft accepted, or a draft
    /// model failed its probes.
    pub hopeless_at: Option<u64>,
    /// Seconds spent drafting (catching the draft up after plain steps included).
    pub draft_s: f64,
    /// Seconds of the verification forwards of rounds that drafted something.
    pub verify_s: f64,
    /// Seconds of the rounds that drafted nothing (plain steps of the target).
    pub plain_s: f64,
    /// Seconds of a draft model's prompt pass: during the prefill (counted in the
    /// generation's prefill time), or, with the speed policy on, at its first drafted round
    /// (then in the decode time; never when the policy never drafts).
    pub draft_prefill_s: f64,
    /// `k_hist[k]`: rounds that drafted `k` tokens (`k_hist[0]`: plain rounds).
    pub k_hist: Vec<u64>,
    /// `verify_s_by_k[k]`: seconds of the target forwards of the rounds that drafted `k`
    /// tokens (`[0]`: plain steps), setup rounds included: with `k_hist` the cost of a
    /// verification by its rows (`k + 1`).
    pub verify_s_by_k: Vec<f64>,
    /// Verification rounds that also did one-time setup (a CUDA graph capture for a new row
    /// count; in the served path: a row count's first round in the sequence, which may
    /// have), and their seconds.
    pub setup_rounds: u64,
    pub setup_s: f64,
    /// What the speed policy's planner decided and the estimate behind it (the first
    /// decisions of each request, see `AdaptiveDepth::decisions`).
    pub decisions: Vec<String>,
}

impl SpecStats {
    /// Empty counters for `proposer` with depth up to `k_max`.
    pub fn new(proposer: String, k_max: usize) -> Self {
        Self {
            proposer,
            k_max,
            proposed: vec![0; k_max],
            accepted: vec![0; k_max],
            ..Self::default()
        }
    }

    /// Count one round that drafted `proposed` tokens, `accepted` of them accepted.
    pub fn record(&mut self, proposed: usize, accepted: usize) {
        self.rounds += 1;
        if self.k_hist.len() <= proposed {
            self.k_hist.resize(proposed + 1, 0);
        }
        self.k_hist[proposed] += 1;
        if proposed == 0 {
            self.plain_rounds += 1;
        }
        if self.proposed.len() < proposed {
            self.proposed.resize(proposed, 0);
            self.accepted.resize(proposed, 0);
        }
        for i in 0..proposed {
            self.proposed[i] += 1;
            if i < accepted {
                self.accepted[i] += 1;
            }
        }
    }

    /// Add another run's counters.
    pub fn merge(&mut self, o: &SpecStats) {
        let n = self.proposed.len().max(o.proposed.len());
        self.proposed.resize(n, 0);
        self.accepted.resize(n, 0);
        for (i, (&p, &a)) in o.proposed.iter().zip(&o.accepted).enumerate() {
            self.proposed[i] += p;
            self.accepted[i] += a;
        }
        self.k_max = self.k_max.max(o.k_max);
        self.rounds += o.rounds;
        self.plain_rounds += o.plain_rounds;
        self.emitted += o.emitted;
        self.draft_forwards += o.draft_forwards;
        self.off_at = self.off_at.or(o.off_at);
        self.policy_offs += o.policy_offs;
        self.policy_probes += o.policy_probes;
        self.hopeless_at = self.hopeless_at.or(o.hopeless_at);
        self.draft_s += o.draft_s;
        self.verify_s += o.verify_s;
        self.plain_s += o.plain_s;
        self.draft_prefill_s += o.draft_prefill_s;
        if self.k_hist.len() < o.k_hist.len() {
            self.k_hist.resize(o.k_hist.len(), 0);
        }
        for (a, b) in self.k_hist.iter_mut().zip(&o.k_hist) {
            *a += b;
        }
        if self.verify_s_by_k.len() < o.verify_s_by_k.len() {
            self.verify_s_by_k.resize(o.verify_s_by_k.len(), 0.0);
        }
        for (a, b) in self.verify_s_by_k.iter_mut().zip(&o.verify_s_by_k) {
            *a += b;
        }
        self.setup_rounds += o.setup_rounds;
        self.setup_s += o.setup_s;
        let room = MAX_MERGED_DECISIONS.saturating_sub(self.decisions.len());
        self.decisions
            .extend(o.decisions.iter().take(room).cloned());
    }

    /// Add the target forward's seconds of a round that drafted `k` tokens.
    pub fn record_verify_s(&mut self, k: usize, secs: f64) {
        if self.verify_s_by_k.len() <= k {
            self.verify_s_by_k.resize(k + 1, 0.0);
        }
        self.verify_s_by_k[k] += secs;
    }

    /// Milliseconds of the target forward by rows (`(rows, rounds, ms per round)`, rows =
    /// drafted + 1; setup rounds included).
    pub fn verify_ms_by_rows(&self) -> Vec<(usize, u64, f64)> {
        self.verify_s_by_k
            .iter()
            .zip(&self.k_hist)
            .enumerate()
            .filter(|(_, (_, n))| **n > 0)
            .map(|(k, (s, n))| (k + 1, *n, 1e3 * s / *n as f64))
            .collect()
    }

    /// Tokens drafted in all.
    pub fn drafted(&self) -> u64 {
        self.proposed.iter().sum()
    }

    /// Milliseconds of drafting per drafted token.
    pub fn draft_ms_per_token(&self) -> f64 {
        1e3 * self.draft_s / self.drafted().max(1) as f64
    }

    /// Milliseconds per verification forward (rounds that drafted something).
    pub fn verify_ms_per_round(&self) -> f64 {
        1e3 * self.verify_s / (self.rounds - self.plain_rounds).max(1) as f64
    }

    /// Milliseconds per plain step (rounds that drafted nothing).
    pub fn plain_ms_per_step(&self) -> f64 {
        1e3 * self.plain_s / self.plain_rounds.max(1) as f64
    }

    /// One line of per-round times.
    pub fn timing_line(&self) -> String {
        format!(
            "draft {:.3} ms/drafted token ({} tokens, {} draft forwards), verify {:.3} ms/round ({} rounds), plain {:.3} ms/step ({} steps), draft prefill {:.3} s",
            self.draft_ms_per_token(),
            self.drafted(),
            self.draft_forwards,
            self.verify_ms_per_round(),
            self.rounds - self.plain_rounds,
            self.plain_ms_per_step(),
            self.plain_rounds,
            self.draft_prefill_s
        ) + &self.rows_line()
    }

    /// The target forward's cost by rows, and the setup rounds (empty when nothing was
    /// recorded by rows).
    fn rows_line(&self) -> String {
        let by = self.verify_ms_by_rows();
        if by.is_empty() {
            return String::new();
        }
        let parts: Vec<String> = by
            .iter()
            .map(|(r, n, ms)| format!("{r}: {ms:.3} x{n}"))
            .collect();
        format!(
            "; target forward ms by rows {{{}}}, {} setup rounds ({:.3} ms)",
            parts.join(", "),
            self.setup_rounds,
            1e3 * self.setup_s
        )
    }

    /// Acceptance rate at each draft position (accepted / proposed; positions never
    /// proposed are left out).
    pub fn acceptance(&self) -> Vec<f64> {
        self.proposed
            .iter()
            .zip(&self.accepted)
            .take_while(|(p, _)| **p > 0)
            .map(|(&p, &a)| a as f64 / p as f64)
            .collect()
    }

    /// Tokens emitted per target forward (1 = no gain).
    pub fn tokens_per_round(&self) -> f64 {
        self.emitted as f64 / self.rounds.max(1) as f64
    }

    /// Human-readable lines (the CLI prints them on stderr).
    pub fn report(&self) -> Vec<String> {
        let total_p: u64 = self.proposed.iter().sum();
        let total_a: u64 = self.accepted.iter().sum();
        let mut lines = vec![format!(
            "spec {}: {} rounds ({} plain), {} tokens, {:.2} tokens/round, drafts accepted {}/{} ({:.1}%), draft forwards {}, draft {:.2}s verify {:.2}s plain {:.2}s{}",
            self.proposer,
            self.rounds,
            self.plain_rounds,
            self.emitted,
            self.tokens_per_round(),
            total_a,
            total_p,
            100.0 * total_a as f64 / total_p.max(1) as f64,
            self.draft_forwards,
            self.draft_s,
            self.verify_s,
            self.plain_s,
            match (self.off_at, self.hopeless_at) {
                (_, Some(t)) => format!(
                    ", policy: speculation off for good at token {t} ({} off, {} probes)",
                    self.policy_offs, self.policy_probes
                ),
                (Some(t), None) => format!(
                    ", policy: speculation first off at token {t} ({} off, {} probes)",
                    self.policy_offs, self.policy_probes
                ),
                (None, None) => String::new(),
            }
        )];
        lines.push(format!("  timing: {}", self.timing_line()));
        if !self.k_hist.is_empty() {
            lines.push(format!("  rounds by depth: {:?}", self.k_hist));
        }
        for d in &self.decisions {
            lines.push(format!("  policy: {d}"));
        }
        for (i, (p, a)) in self.proposed.iter().zip(&self.accepted).enumerate() {
            if *p == 0 {
                continue;
            }
            lines.push(format!(
                "  position {}: accepted {a}/{p} ({:.1}%)",
                i + 1,
                100.0 * *a as f64 / *p as f64
            ));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_position_counts() {
        let mut s = SpecStats::new("ngram".into(), 3);
        s.record(3, 1);
        s.record(2, 2);
        s.record(0, 0);
        assert_eq!(s.proposed, vec![2, 2, 1]);
        assert_eq!(s.accepted, vec![2, 1, 0]);
        assert_eq!(s.acceptance(), vec![1.0, 0.5, 0.0]);
        assert_eq!((s.rounds, s.plain_rounds), (3, 1));
        let mut m = SpecStats::new("ngram".into(), 1);
        m.merge(&s);
        assert_eq!(m.proposed, vec![2, 2, 1]);
        assert_eq!(s.k_hist, vec![1, 0, 1, 1]);
        assert_eq!(m.k_hist, vec![1, 0, 1, 1]);
        assert_eq!(s.report().len(), 6);
        assert_eq!(m.k_max, 3, "merge keeps the largest depth");
        assert_eq!(s.drafted(), 5);
    }
}
