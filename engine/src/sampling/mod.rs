//! Sampling: turning a row of logits into the next token.
//!
//! Owns the [`SamplerConfig`] (built by the binaries), the [`Sampler`] chain and its seeded
//! PRNG ([`Rng`], xoshiro256** seeded through splitmix64: same seed, same tokens, on every
//! platform). The chain, in order (llama.cpp's default order):
//!
//! 1. penalties over the last `penalty_last_n` accepted tokens (prompt included when the
//!    caller accepts it): repetition (`l > 0 ? l / r : l * r`), then frequency
//!    (`l -= f * count`) and presence (`l -= p` when `count > 0`);
//! 2. `temperature <= 0`: greedy — the arg-max (lowest id among ties), nothing random;
//! 3. candidates sorted by logit, descending, ties by id ascending; top-k keeps `k`;
//! 4. top-p keeps the smallest prefix whose softmax mass reaches `p`;
//! 5. min-p keeps tokens with probability `>= min_p * p_max`;
//! 6. temperature: softmax of `l / T` over the survivors, one uniform draw from [`Rng`],
//!    walk the cumulative sum in candidate order.
//!
//! Probabilities in steps 4-6 are computed in f64. [`pick`] is the chain as a pure function
//! of (configuration, penalty window, logits, draw), with the margin by which the choice
//! missed going another way; [`distribution`] gives the survivors' probabilities. The CUDA
//! backend runs the same chain on the device (`kernels/sample.cu`) with draws taken from
//! the same [`Sampler`] ([`Sampler::draw`]), and kernel-check compares it with [`pick`].

/// Sampling parameters. The defaults are greedy decoding with no penalties.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct SamplerConfig {
    /// 0 (or less) = greedy.
    pub temperature: f32,
    /// 0 = off.
    pub top_k: usize,
    /// 1 = off.
    pub top_p: f32,
    /// 0 = off.
    pub min_p: f32,
    /// 1 = off.
    pub repeat_penalty: f32,
    /// 0 = off.
    pub presence_penalty: f32,
    /// 0 = off.
    pub frequency_penalty: f32,
    /// How many recent tokens the penalties look at.
    pub penalty_last_n: usize,
    pub seed: u64,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        Self {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            penalty_last_n: 64,
            seed: 0,
        }
    }
}

/// xoshiro256** (Blackman & Vigna), state seeded from one `u64` through splitmix64.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// A generator seeded from `seed`.
    pub fn new(seed: u64) -> Self {
        let mut x = seed;
        let mut next = || {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        Self {
            s: [next(), next(), next(), next()],
        }
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// The sampler chain with its state (RNG and penalty history).
#[derive(Clone, Debug)]
pub struct Sampler {
    cfg: SamplerConfig,
    rng: Rng,
    history: Vec<u32>,
}

/// Greedy choice: index of the largest logit, lowest index among ties, NaN never chosen.
pub fn greedy(logits: &[f32]) -> u32 {
    let mut best = 0usize;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &v) in logits.iter().enumerate() {
        if v > best_v {
            best = i;
            best_v = v;
        }
    }
    best as u32
}

impl Sampler {
    pub fn new(cfg: SamplerConfig) -> Self {
        let rng = Rng::new(cfg.seed);
        Self {
            cfg,
            rng,
            history: Vec::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SamplerConfig {
        &self.cfg
    }

    /// Record a token (prompt or generated) for the penalties.
    pub fn accept(&mut self, token: u32) {
        self.history.push(token);
        let keep = self.cfg.penalty_last_n.max(1) * 4;
        if self.history.len() > keep {
            let drop = self.history.len() - self.cfg.penalty_last_n;
            self.history.drain(..drop);
        }
    }

    /// The tokens the penalties look at: the last `penalty_last_n` accepted, oldest first.
    pub fn window(&self) -> &[u32] {
        let start = self.history.len().saturating_sub(self.cfg.penalty_last_n);
        &self.history[start..]
    }

    /// Whether a choice consumes a draw (temperature > 0, or NaN: not greedy).
    pub fn uses_draw(&self) -> bool {
        self.cfg.temperature > 0.0 || self.cfg.temperature.is_nan()
    }

    /// The uniform draw of the next choice (advances the generator only when the choice
    /// uses one, exactly as [`Sampler::sample`] does; 0 otherwise). A backend that runs the
    /// chain elsewhere (the CUDA sampler) takes its draws here, so the same seed gives the
    /// same tokens on every backend.
    pub fn draw(&mut self) -> f64 {
        if self.uses_draw() {
            self.rng.next_f64()
        } else {
            0.0
        }
    }

    /// Whether choices are greedy (no draw): speculative verification then compares tokens.
    pub fn is_greedy(&self) -> bool {
        !self.uses_draw()
    }

    /// The distribution [`Sampler::sample`] draws from for `logits`: `(token, probability)`
    /// in candidate order; greedy gives the arg-max with probability 1. Speculative
    /// rejection sampling uses it as the target distribution `p` (and the draft's `q`).
    pub fn distribution(&self, logits: &[f32]) -> Vec<(u32, f64)> {
        match distribution(&self.cfg, self.window(), logits) {
            Some(d) => d.tokens.into_iter().zip(d.probs).collect(),
            None => vec![(greedy(&penalized(&self.cfg, self.window(), logits)), 1.0)],
        }
    }

    /// The generator (speculative decoding draws its accept/reject and residual uniforms
    /// from it, so one seed fixes the whole run).
    pub fn rng_mut(&mut self) -> &mut Rng {
        &mut self.rng
    }

    #[cfg(test)]
    fn penalized(&self, logits: &[f32]) -> Vec<f32> {
        penalized(&self.cfg, self.window(), logits)
    }

    /// Choose the next token from `logits` (does not accept it; call [`Sampler::accept`]).
    pub fn sample(&mut self, logits: &[f32]) -> u32 {
        if logits.is_empty() {
            return 0;
        }
        let u = self.draw();
        pick(&self.cfg, self.window(), logits, u).token
    }
}

/// Walk the cumulative sum of `dist` (in its order) to the first entry past `u` in `[0, 1)`
/// (as [`pick`] does); the last entry when rounding leaves `u` past the total.
pub fn draw_from(dist: &[(u32, f64)], u: f64) -> u32 {
    let mut acc = 0.0;
    for &(t, p) in dist {
        acc += p;
        if u < acc {
            return t;
        }
    }
    dist.last().map_or(0, |x| x.0)
}

/// The logits with NaN as -inf and the penalties of `window` applied (step 1 of the chain).
pub fn penalized(cfg: &SamplerConfig, window: &[u32], logits: &[f32]) -> Vec<f32> {
    let mut l: Vec<f32> = logits
        .iter()
        .map(|&v| if v.is_nan() { f32::NEG_INFINITY } else { v })
        .collect();
    let c = cfg;
    if c.repeat_penalty == 1.0 && c.presence_penalty == 0.0 && c.frequency_penalty == 0.0 {
        return l;
    }
    let mut counts: Vec<(u32, u32)> = Vec::new();
    for &t in window {
        match counts.iter_mut().find(|(id, _)| *id == t) {
            Some((_, n)) => *n += 1,
            None => counts.push((t, 1)),
        }
    }
    for (t, n) in counts {
        let Some(v) = l.get_mut(t as usize) else {
            continue;
        };
        if c.repeat_penalty != 1.0 && c.repeat_penalty > 0.0 {
            *v = if *v > 0.0 {
                *v / c.repeat_penalty
            } else {
                *v * c.repeat_penalty
            };
        }
        *v -= c.frequency_penalty * n as f32 + c.presence_penalty;
    }
    l
}

/// One choice of the chain, with how close it came to going another way.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pick {
    pub token: u32,
    /// Candidates the draw was made over (after top-k, top-p, min-p; 1 when greedy).
    pub survivors: usize,
    /// The smallest distance, in probability, between a quantity the chain compared and
    /// the bound it was compared with: the draw against the cumulative sums around the
    /// picked candidate, the top-p mass against `top_p` at the cut, `p / p_max` against
    /// `min_p` at the cut. An implementation that sums in another order may choose
    /// differently only when this is within its rounding (a near-tie). Infinite when greedy.
    pub margin: f64,
}

/// The distribution a sampled (not greedy) choice draws from: the survivors of steps 3-5
/// in candidate order and their probabilities at the temperature.
#[derive(Clone, Debug, PartialEq)]
pub struct Distribution {
    pub tokens: Vec<u32>,
    pub probs: Vec<f64>,
    /// The [`Pick::margin`] contributions of the top-p and min-p cuts.
    pub cut_margin: f64,
}

/// Steps 1 and 3-6 of the chain (up to the draw) for a row of logits; `None` when the
/// choice is greedy (temperature <= 0 or no logits).
pub fn distribution(cfg: &SamplerConfig, window: &[u32], logits: &[f32]) -> Option<Distribution> {
    let l = penalized(cfg, window, logits);
    survivors(cfg, &l)
}

fn survivors(cfg: &SamplerConfig, l: &[f32]) -> Option<Distribution> {
    let c = cfg;
    if c.temperature <= 0.0 || l.is_empty() {
        return None;
    }
    let mut margin = f64::INFINITY;
    let order = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    let mut cand: Vec<(u32, f32)> = l.iter().enumerate().map(|(i, &v)| (i as u32, v)).collect();
    if c.top_k > 0 && c.top_k < cand.len() {
        cand.select_nth_unstable_by(c.top_k - 1, order);
        cand.truncate(c.top_k);
    }
    cand.sort_unstable_by(order);
    let softmax = |cand: &[(u32, f32)], t: f64| -> Vec<f64> {
        let m = f64::from(cand.first().map_or(0.0, |x| x.1));
        let e: Vec<f64> = cand
            .iter()
            .map(|x| ((f64::from(x.1) - m) / t).exp())
            .collect();
        let s: f64 = e.iter().sum();
        e.into_iter().map(|x| x / s).collect()
    };
    if c.top_p < 1.0 {
        let p = softmax(&cand, 1.0);
        let mut mass = 0.0;
        let mut keep = cand.len();
        for (i, pi) in p.iter().enumerate() {
            let before = mass;
            mass += pi;
            if mass >= f64::from(c.top_p) {
                keep = i + 1;
                margin = margin
                    .min(mass - f64::from(c.top_p))
                    .min((f64::from(c.top_p) - before).abs());
                break;
            }
        }
        cand.truncate(keep.max(1));
    }
    if c.min_p > 0.0 {
        let p = softmax(&cand, 1.0);
        let pmax = p.first().copied().unwrap_or(0.0);
        let bound = f64::from(c.min_p) * pmax;
        let keep = p.iter().take_while(|&&pi| pi >= bound).count();
        for j in [keep.wrapping_sub(1), keep] {
            if let Some(pj) = p.get(j) {
                margin = margin.min((pj - bound).abs() / pmax.max(f64::MIN_POSITIVE));
            }
        }
        cand.truncate(keep.max(1));
    }
    let probs = softmax(&cand, f64::from(c.temperature));
    Some(Distribution {
        tokens: cand.into_iter().map(|x| x.0).collect(),
        probs,
        cut_margin: margin,
    })
}

/// The chain of the module doc on one row of logits with the draw `u` (in `[0, 1)`; unused
/// when greedy) and the penalty `window` (oldest first).
pub fn pick(cfg: &SamplerConfig, window: &[u32], logits: &[f32], u: f64) -> Pick {
    let l = penalized(cfg, window, logits);
    let Some(d) = survivors(cfg, &l) else {
        return Pick {
            token: greedy(&l),
            survivors: 1,
            margin: f64::INFINITY,
        };
    };
    let mut margin = d.cut_margin;
    let mut acc = 0.0;
    // A draw at or past the rounded total (u close to 1) takes the last survivor of nonzero
    // probability: never a zero-probability one (a -inf logit, e.g. a token a grammar's mask
    // disallowed). `kernels/sample.cu` does the same.
    let mut chosen = d
        .probs
        .iter()
        .rposition(|&p| p > 0.0)
        .unwrap_or(d.tokens.len().saturating_sub(1));
    for (i, pi) in d.probs.iter().enumerate() {
        let before = acc;
        acc += pi;
        if u < acc {
            chosen = i;
            if i > 0 {
                margin = margin.min(u - before);
            }
            margin = margin.min(acc - u);
            break;
        }
    }
    Pick {
        token: d.tokens.get(chosen).copied().unwrap_or(0),
        survivors: d.tokens.len(),
        margin,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_draw_past_the_rounded_total_never_picks_a_masked_token() {
        // Masked logits (-inf) sort last; a draw of the largest f64 below 1 lies at or past
        // the rounded cumulative sum, and must take the last survivor of nonzero
        // probability (token 9 here), not a -inf one.
        let inf = f32::NEG_INFINITY;
        // Values whose probabilities sum (sequentially, in f64) to 1 - 2^-52: below the draw.
        let mut logits = vec![inf; 33];
        logits[0] = 2.077_184_4;
        logits[2] = 0.031_702_925;
        logits[7] = 0.534_013_6;
        logits[9] = -2.792_845;
        logits[11] = -1.543_560_1;
        let cfg = SamplerConfig {
            temperature: 0.7,
            ..SamplerConfig::default()
        };
        for u in [1.0 - f64::EPSILON / 2.0, 0.999_999_999, 0.0, 0.5] {
            let p = pick(&cfg, &[], &logits, u);
            assert!(
                logits[p.token as usize].is_finite(),
                "u {u}: token {}",
                p.token
            );
            assert_eq!(p.survivors, 33);
        }
        let last = pick(&cfg, &[], &logits, 1.0 - f64::EPSILON / 2.0);
        assert_eq!(last.token, 9, "the last survivor of nonzero probability");
    }

    fn cfg(t: f32) -> SamplerConfig {
        SamplerConfig {
            temperature: t,
            ..Default::default()
        }
    }

    #[test]
    fn rng_is_deterministic_and_uniform_enough() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        let xs: Vec<u64> = (0..10).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..10).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(
            xs,
            (0..10).map(|_| Rng::new(43).next_u64()).collect::<Vec<_>>()
        );
        let mut r = Rng::new(7);
        let mean: f64 = (0..10000).map(|_| r.next_f64()).sum::<f64>() / 10000.0;
        assert!((mean - 0.5).abs() < 0.02, "{mean}");
    }

    #[test]
    fn greedy_picks_max_lowest_index_and_ignores_nan() {
        assert_eq!(greedy(&[1.0, 3.0, 3.0, 2.0]), 1);
        assert_eq!(greedy(&[f32::NAN, 0.5, 0.1]), 1);
        let mut s = Sampler::new(cfg(0.0));
        assert_eq!(s.sample(&[0.1, 0.2, 5.0, 0.3]), 2);
    }

    #[test]
    fn same_seed_same_tokens_different_seed_differs() {
        let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin()).collect();
        let run = |seed| {
            let mut s = Sampler::new(SamplerConfig { seed, ..cfg(1.0) });
            (0..64).map(|_| s.sample(&logits)).collect::<Vec<_>>()
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }

    #[test]
    fn top_k_one_is_greedy_and_top_k_restricts() {
        let logits = [0.0f32, 2.0, 1.0, 1.9, -1.0];
        let mut s = Sampler::new(SamplerConfig {
            top_k: 1,
            ..cfg(5.0)
        });
        for _ in 0..20 {
            assert_eq!(s.sample(&logits), 1);
        }
        let mut s = Sampler::new(SamplerConfig {
            top_k: 2,
            ..cfg(100.0)
        });
        let seen: std::collections::BTreeSet<u32> = (0..200).map(|_| s.sample(&logits)).collect();
        assert_eq!(seen, [1, 3].into_iter().collect());
    }

    #[test]
    fn top_p_and_min_p_cut_the_tail() {
        // probabilities ~ [0.643, 0.237, 0.087, 0.032] for logits [3, 2, 1, 0]
        let logits = [3.0f32, 2.0, 1.0, 0.0];
        let mut s = Sampler::new(SamplerConfig {
            top_p: 0.85,
            ..cfg(50.0)
        });
        let seen: std::collections::BTreeSet<u32> = (0..300).map(|_| s.sample(&logits)).collect();
        assert_eq!(seen, [0, 1].into_iter().collect());
        let mut s = Sampler::new(SamplerConfig {
            min_p: 0.1,
            ..cfg(50.0)
        });
        let seen: std::collections::BTreeSet<u32> = (0..300).map(|_| s.sample(&logits)).collect();
        assert_eq!(seen, [0, 1, 2].into_iter().collect());
    }

    #[test]
    fn temperature_shapes_the_distribution() {
        let logits = [1.0f32, 0.0];
        let frac = |t: f32| {
            let mut s = Sampler::new(SamplerConfig { seed: 9, ..cfg(t) });
            (0..4000).filter(|_| s.sample(&logits) == 0).count() as f64 / 4000.0
        };
        let expect = |t: f64| 1.0 / (1.0 + (-1.0 / t).exp());
        assert!((frac(1.0) - expect(1.0)).abs() < 0.03);
        assert!((frac(0.25) - expect(0.25)).abs() < 0.03);
        assert!((frac(10.0) - expect(10.0)).abs() < 0.03);
    }

    #[test]
    fn penalties() {
        let mut s = Sampler::new(SamplerConfig {
            repeat_penalty: 2.0,
            presence_penalty: 0.5,
            frequency_penalty: 0.25,
            ..cfg(0.0)
        });
        for t in [0, 1, 1] {
            s.accept(t);
        }
        let l = s.penalized(&[4.0, -1.0, 3.0]);
        assert_eq!(l, vec![4.0 / 2.0 - 0.25 - 0.5, -2.0 - 0.5 - 0.5, 3.0]);
        // 4/2 - .75 = 1.25 < 3: the penalty changes the greedy choice.
        assert_eq!(s.sample(&[4.0, -1.0, 3.0]), 2);
        // penalty_last_n bounds the window.
        let mut s = Sampler::new(SamplerConfig {
            repeat_penalty: 2.0,
            penalty_last_n: 1,
            ..cfg(0.0)
        });
        s.accept(0);
        s.accept(1);
        assert_eq!(s.penalized(&[4.0, 4.0]), vec![4.0, 2.0]);
    }

    #[test]
    fn sample_is_pick_with_the_next_draw_and_margins_shrink_at_boundaries() {
        let logits: Vec<f32> = (0..300).map(|i| (i as f32 * 0.731).sin() * 4.0).collect();
        let c = SamplerConfig {
            top_k: 50,
            top_p: 0.9,
            min_p: 0.01,
            repeat_penalty: 1.2,
            seed: 11,
            ..cfg(0.8)
        };
        let mut a = Sampler::new(c.clone());
        let mut b = Sampler::new(c.clone());
        for t in [3, 7, 7] {
            a.accept(t);
            b.accept(t);
        }
        for _ in 0..50 {
            let t = a.sample(&logits);
            let u = b.draw();
            assert_eq!(t, pick(&c, b.window(), &logits, u).token);
            a.accept(t);
            b.accept(t);
        }
        // Greedy takes no draw.
        let mut g = Sampler::new(cfg(0.0));
        assert!(!g.uses_draw());
        assert_eq!(g.draw(), 0.0);
        // A draw on the first cumulative boundary has (almost) no margin; one in the middle
        // of a bucket has a clear one; the distribution sums to 1.
        let d = distribution(&c, &[], &logits).unwrap();
        assert!((d.probs.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!(pick(&c, &[], &logits, d.probs[0]).margin < 1e-12);
        let mid = pick(&c, &[], &logits, d.probs[0] / 2.0);
        assert_eq!(mid.token, d.tokens[0]);
        assert!(mid.margin > 1e-6, "{mid:?}");
        assert_eq!(mid.survivors, d.tokens.len());
    }
}
