//! Depth per request: fixed K, or adaptive from recent acceptance; and the policy that
//! turns speculation off for a request where it measures slower than plain decoding.
//!
//! Adaptive rule: `a` is an exponential moving average (weight 1/4 per round, starting at
//! 1/2) of the per-token acceptance rate of the last rounds (`accepted / drafted`). With
//! acceptance `a` per token, a run of accepted drafts has expected length `a / (1 - a)`;
//! the next depth is that, rounded, plus one, within `1..=k_max`. A fully accepted draft
//! thus deepens the next one, a draft rejected at its first token makes it shallow.
//!
//! Confidence cut (in the proposer): drafting stops at the first position whose top draft
//! probability is under `confidence`.
//!
//! Off policy (`off_when_slower`), decided per request: the first decode step after the
//! prefill runs plain and is timed; then speculation runs; after `probe_rounds`
//! speculative rounds, if their seconds per emitted token (drafting + verification) exceed
//! the plain step's, speculation is off for the rest of the request (plain steps from then
//! on). Greedy output never depends on the policy (every depth gives the plain tokens; the
//! `spec` gate checks it); sampled output does (which uniforms decide which token depends on
//! the depth), so a seeded sampled run is reproducible with the policy off (fixed or
//! acceptance-adaptive depth are both deterministic).

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
    /// Turn speculation off for the request when it measures slower than plain decode.
    pub off_when_slower: bool,
    /// Speculative rounds timed before the off decision.
    pub probe_rounds: u64,
}

impl DepthConfig {
    /// Always `k` tokens, no cut, no policy: the configuration the gates use.
    pub fn fixed(k: usize) -> Self {
        Self {
            k_max: k,
            adaptive: false,
            confidence: 0.0,
            off_when_slower: false,
            probe_rounds: 8,
        }
    }
}

/// The depth state of one request.
#[derive(Clone, Debug)]
pub struct AdaptiveDepth {
    cfg: DepthConfig,
    acceptance: f64,
    k: usize,
    plain_s_per_token: Option<f64>,
    spec_s: f64,
    spec_tokens: u64,
    spec_rounds: u64,
    off: bool,
}

impl AdaptiveDepth {
    pub fn new(cfg: DepthConfig) -> Self {
        let k = if cfg.adaptive {
            cfg.k_max.min(2)
        } else {
            cfg.k_max
        };
        Self {
            cfg,
            acceptance: 0.5,
            k,
            plain_s_per_token: None,
            spec_s: 0.0,
            spec_tokens: 0,
            spec_rounds: 0,
            off: false,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &DepthConfig {
        &self.cfg
    }

    /// Whether the policy has turned speculation off.
    pub fn is_off(&self) -> bool {
        self.off
    }

    /// Depth of the next round (0 = a plain step).
    pub fn next_k(&self) -> usize {
        if self.off || (self.cfg.off_when_slower && self.plain_s_per_token.is_none()) {
            0
        } else {
            self.k
        }
    }

    /// Record a round: `drafted` tokens drafted, `accepted` accepted, `emitted` tokens out,
    /// `secs` of drafting plus verification. Returns true when this round turned
    /// speculation off.
    pub fn record(&mut self, drafted: usize, accepted: usize, emitted: usize, secs: f64) -> bool {
        if drafted == 0 {
            if self.plain_s_per_token.is_none() && emitted > 0 {
                self.plain_s_per_token = Some(secs / emitted as f64);
            }
            return false;
        }
        if self.cfg.adaptive {
            let rate = accepted.min(drafted) as f64 / drafted as f64;
            self.acceptance = 0.75 * self.acceptance + 0.25 * rate;
            let a = self.acceptance.min(0.99);
            let k = (a / (1.0 - a)).round() as usize + 1;
            self.k = k.clamp(1, self.cfg.k_max.max(1));
        }
        if self.cfg.off_when_slower && !self.off {
            self.spec_s += secs;
            self.spec_tokens += emitted as u64;
            self.spec_rounds += 1;
            if self.spec_rounds >= self.cfg.probe_rounds {
                let spec = self.spec_s / self.spec_tokens.max(1) as f64;
                if self.plain_s_per_token.is_some_and(|plain| spec > plain) {
                    self.off = true;
                    return true;
                }
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_depth_never_moves() {
        let mut d = AdaptiveDepth::new(DepthConfig::fixed(5));
        for _ in 0..10 {
            assert_eq!(d.next_k(), 5);
            d.record(5, 0, 1, 1.0);
        }
    }

    #[test]
    fn adaptive_depth_follows_acceptance() {
        let cfg = DepthConfig {
            adaptive: true,
            ..DepthConfig::fixed(8)
        };
        let mut d = AdaptiveDepth::new(cfg);
        for _ in 0..20 {
            let k = d.next_k();
            d.record(k, k, k + 1, 1.0);
        }
        assert_eq!(d.next_k(), 8);
        for _ in 0..20 {
            let k = d.next_k();
            d.record(k, 0, 1, 1.0);
        }
        assert_eq!(d.next_k(), 1);
    }

    #[test]
    fn policy_turns_off_when_slower_and_stays_on_when_faster() {
        let cfg = DepthConfig {
            off_when_slower: true,
            probe_rounds: 2,
            ..DepthConfig::fixed(4)
        };
        let mut d = AdaptiveDepth::new(cfg.clone());
        assert_eq!(d.next_k(), 0, "the first step is a timed plain step");
        d.record(0, 0, 1, 1.0);
        assert_eq!(d.next_k(), 4);
        assert!(!d.record(4, 0, 1, 1.5));
        assert!(d.record(4, 0, 1, 1.5), "1.5 s/token > 1 s/token plain");
        assert_eq!(d.next_k(), 0);
        let mut d = AdaptiveDepth::new(cfg);
        d.record(0, 0, 1, 1.0);
        d.record(4, 4, 5, 2.0);
        d.record(4, 4, 5, 2.0);
        assert!(!d.is_off());
        assert_eq!(d.next_k(), 4);
    }
}
