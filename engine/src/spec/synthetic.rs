//! A tiny synthetic target and draft (a second-order Markov chain over a few tokens) for
//! tests and the `spec` gate's statistical checks: cheap enough to run the whole decode
//! loop thousands of times, and with row logits that depend on the two previous tokens and
//! the position, so a wrong KV rollback or a misaligned row changes the output.

use crate::sampling::{Rng, Sampler, SamplerConfig, draw_from, greedy};

use super::{Draft, DraftMode, Proposer, SpecError, Target};

/// Logits of the chain after `(prev, cur)` at position `pos`.
fn chain_logits(seed: u64, vocab: usize, prev: u32, cur: u32, pos: usize) -> Vec<f32> {
    let mut r =
        Rng::new(seed ^ (u64::from(prev) << 40) ^ (u64::from(cur) << 20) ^ (pos % 3) as u64);
    (0..vocab)
        .map(|_| (r.next_f64() * 4.0 - 2.0) as f32)
        .collect()
}

/// The synthetic target: its "KV cache" is the token history.
#[derive(Clone, Debug)]
pub struct MarkovTarget {
    pub seed: u64,
    pub vocab: usize,
    hist: Vec<u32>,
}

impl MarkovTarget {
    pub fn new(seed: u64, vocab: usize) -> Self {
        Self {
            seed,
            vocab,
            hist: Vec::new(),
        }
    }

    /// The logits row after `context` (what the target computes at its last position).
    pub fn logits_after(&self, context: &[u32]) -> Vec<f32> {
        let n = context.len();
        let cur = context.last().copied().unwrap_or(0);
        let prev = if n >= 2 { context[n - 2] } else { 0 };
        chain_logits(self.seed, self.vocab, prev, cur, n.saturating_sub(1))
    }
}

impl Target for MarkovTarget {
    fn n_vocab(&self) -> usize {
        self.vocab
    }

    fn len(&self) -> usize {
        self.hist.len()
    }

    fn forward_last(&mut self, tokens: &[u32]) -> Result<Vec<f32>, SpecError> {
        Ok(self.forward_all(tokens)?.pop().unwrap_or_default())
    }

    fn forward_all(&mut self, tokens: &[u32]) -> Result<Vec<Vec<f32>>, SpecError> {
        let mut rows = Vec::with_capacity(tokens.len());
        for &t in tokens {
            if t as usize >= self.vocab {
                return Err(SpecError::Other(format!("token {t} outside the chain")));
            }
            self.hist.push(t);
            rows.push(self.logits_after(&self.hist));
        }
        Ok(rows)
    }

    fn truncate(&mut self, len: usize) {
        self.hist.truncate(len);
    }
}

/// A draft for [`MarkovTarget`]: the same chain with other logits (`noise` = how far off),
/// drafting greedily or by sampling with the target's sampler settings.
#[derive(Clone, Debug)]
pub struct MarkovDraft {
    target: MarkovTarget,
    other: MarkovTarget,
    /// 0 = the target's own logits, 1 = unrelated logits.
    pub noise: f32,
    sampler: Sampler,
}

impl MarkovDraft {
    pub fn new(target: &MarkovTarget, noise: f32, sampling: &SamplerConfig) -> Self {
        Self {
            target: target.clone(),
            other: MarkovTarget::new(target.seed ^ 0xD1FF, target.vocab),
            noise,
            sampler: Sampler::new(SamplerConfig {
                seed: sampling.seed ^ 0xD5AF,
                ..sampling.clone()
            }),
        }
    }
}

impl Proposer for MarkovDraft {
    fn name(&self) -> String {
        "draft:markov".into()
    }

    fn propose(&mut self, context: &[u32], k: usize, mode: DraftMode) -> Result<Draft, SpecError> {
        let mut ctx = context.to_vec();
        let mut d = Draft {
            tokens: Vec::new(),
            dists: (!mode.greedy).then(Vec::new),
        };
        for _ in 0..k {
            let a = self.target.logits_after(&ctx);
            let b = self.other.logits_after(&ctx);
            let l: Vec<f32> = a
                .iter()
                .zip(&b)
                .map(|(x, y)| (1.0 - self.noise) * x + self.noise * y)
                .collect();
            let t = if mode.greedy {
                greedy(&l)
            } else {
                let dist = self.sampler.distribution(&l);
                let u = self.sampler.rng_mut().next_f64();
                let t = draw_from(&dist, u);
                if let Some(ds) = d.dists.as_mut() {
                    ds.push(dist);
                }
                t
            };
            d.tokens.push(t);
            ctx.push(t);
        }
        Ok(d)
    }
}
