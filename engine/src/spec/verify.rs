//! Verification of a draft against the target's logits rows: greedy match, and
//! distribution-exact rejection sampling.

use crate::sampling::{Sampler, draw_from};

use super::Draft;

/// What one round emits: `draft[..accepted]` then `next` (the target's own token: the
/// correction at the first rejection, or the bonus token after a fully accepted draft).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoundResult {
    pub accepted: usize,
    pub next: u32,
}

/// Decides which draft tokens the target accepts.
pub trait Verifier {
    /// `rows[i]` is the target's logits after the context and `draft.tokens[..i]`
    /// (`rows.len() == draft.tokens.len() + 1`). `sampler` holds the target's sampler state
    /// at the context; the verifier accepts every emitted token into it, in order, as plain
    /// decoding would.
    fn verify(&mut self, rows: &[Vec<f32>], draft: &Draft, sampler: &mut Sampler) -> RoundResult;
    /// Greedy verification without penalties from the target's arg-max of each row
    /// (`picks.len() == draft.tokens.len() + 1`): the drafts are accepted while they equal
    /// the target's pick; the first differing pick (or the pick after a fully accepted
    /// draft) is the next token. Accepts every emitted token into `sampler`, as
    /// [`Verifier::verify`] does. Used when the decode loop runs on arg-max rows only (a
    /// device target downloads one id per row, not the logits).
    fn verify_argmax(
        &mut self,
        picks: &[u32],
        draft: &Draft,
        sampler: &mut Sampler,
    ) -> RoundResult {
        greedy_match(picks, draft, sampler)
    }
}

/// The exact greedy rule on arg-max rows (see [`Verifier::verify_argmax`]).
pub fn greedy_match(picks: &[u32], draft: &Draft, sampler: &mut Sampler) -> RoundResult {
    for (i, (&x, &t)) in draft.tokens.iter().zip(picks).enumerate() {
        sampler.accept(t);
        if t != x {
            return RoundResult {
                accepted: i,
                next: t,
            };
        }
    }
    let k = draft.tokens.len().min(picks.len());
    let t = picks.get(k).copied().unwrap_or(0);
    sampler.accept(t);
    RoundResult {
        accepted: k,
        next: t,
    }
}

/// The exact verifier: greedy tokens must equal the target's choice; sampled tokens go
/// through rejection sampling (see the module header of `spec`).
#[derive(Clone, Copy, Debug, Default)]
pub struct ExactVerifier;

fn prob(dist: &[(u32, f64)], t: u32) -> f64 {
    dist.iter().find(|x| x.0 == t).map_or(0.0, |x| x.1)
}

/// Draw from the normalized residual `max(0, p - q)` with the uniform `u` (walking `p`'s
/// candidate order); `q = None` is a point mass on `x`. When the residual is empty (p == q
/// up to rounding) the draw falls back to `p` itself.
pub fn residual_draw(p: &[(u32, f64)], q: Option<&[(u32, f64)]>, x: u32, u: f64) -> u32 {
    let qy = |y: u32| match q {
        Some(q) => prob(q, y),
        None => f64::from(u8::from(y == x)),
    };
    let r: Vec<(u32, f64)> = p
        .iter()
        .map(|&(y, py)| (y, (py - qy(y)).max(0.0)))
        .collect();
    let z: f64 = r.iter().map(|x| x.1).sum();
    if z <= 0.0 || !z.is_finite() {
        return draw_from(p, u);
    }
    let r: Vec<(u32, f64)> = r.into_iter().map(|(y, v)| (y, v / z)).collect();
    draw_from(&r, u)
}

impl Verifier for ExactVerifier {
    fn verify(&mut self, rows: &[Vec<f32>], draft: &Draft, sampler: &mut Sampler) -> RoundResult {
        for (i, (&x, row)) in draft.tokens.iter().zip(rows).enumerate() {
            if sampler.is_greedy() {
                let t = sampler.sample(row);
                sampler.accept(t);
                if t != x {
                    return RoundResult {
                        accepted: i,
                        next: t,
                    };
                }
                continue;
            }
            let p = sampler.distribution(row);
            let q = draft
                .dists
                .as_ref()
                .and_then(|d| d.get(i))
                .map(Vec::as_slice);
            let px = prob(&p, x);
            let qx = q.map_or(1.0, |q| prob(q, x));
            let u = sampler.rng_mut().next_f64();
            if qx > 0.0 && u * qx < px {
                sampler.accept(x);
                continue;
            }
            let u = sampler.rng_mut().next_f64();
            let t = residual_draw(&p, q, x, u);
            sampler.accept(t);
            return RoundResult {
                accepted: i,
                next: t,
            };
        }
        let k = draft.tokens.len();
        let t = rows.get(k).map_or(0, |row| sampler.sample(row));
        sampler.accept(t);
        RoundResult {
            accepted: k,
            next: t,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sampling::SamplerConfig;

    #[test]
    fn residual_removes_the_draft_mass() {
        let p = [(0, 0.5), (1, 0.3), (2, 0.2)];
        // point mass on 0: residual is p without 0, renormalized: 1 -> 0.6, 2 -> 0.4
        assert_eq!(residual_draw(&p, None, 0, 0.59), 1);
        assert_eq!(residual_draw(&p, None, 0, 0.61), 2);
        // q over-weights 1: residual mass only where p > q
        let q = [(1, 0.9), (0, 0.05), (2, 0.05)];
        // r = {0: .45, 1: 0, 2: .15} / .6 = {0: .75, 2: .25}
        assert_eq!(residual_draw(&p, Some(&q), 1, 0.74), 0);
        assert_eq!(residual_draw(&p, Some(&q), 1, 0.76), 2);
        // p == q: falls back to p
        assert_eq!(residual_draw(&p, Some(&p), 0, 0.9), 2);
    }

    #[test]
    fn greedy_accepts_the_matching_prefix_then_corrects() {
        let rows = vec![
            vec![0.0, 5.0, 1.0],
            vec![3.0, 0.0, 1.0],
            vec![0.0, 0.0, 9.0],
        ];
        let mut s = Sampler::new(SamplerConfig::default());
        let d = Draft {
            tokens: vec![1, 2],
            dists: None,
        };
        assert_eq!(
            ExactVerifier.verify(&rows, &d, &mut s),
            RoundResult {
                accepted: 1,
                next: 0
            }
        );
        let d = Draft {
            tokens: vec![1, 0],
            dists: None,
        };
        assert_eq!(
            ExactVerifier.verify(&rows, &d, &mut s),
            RoundResult {
                accepted: 2,
                next: 2
            }
        );
    }

    #[test]
    fn argmax_rows_give_the_verdict_of_the_logits_rows() {
        let rows = [
            vec![0.0, 5.0, 1.0],
            vec![3.0, 0.0, 1.0],
            vec![0.0, 0.0, 9.0],
        ];
        let picks: Vec<u32> = rows.iter().map(|r| crate::sampling::greedy(r)).collect();
        for tokens in [vec![1, 2], vec![1, 0], vec![2, 0], vec![]] {
            let d = Draft {
                tokens,
                dists: None,
            };
            let n = d.tokens.len() + 1;
            let (mut a, mut b) = (
                Sampler::new(SamplerConfig::default()),
                Sampler::new(SamplerConfig::default()),
            );
            assert_eq!(
                ExactVerifier.verify(&rows[..n], &d, &mut a),
                ExactVerifier.verify_argmax(&picks[..n], &d, &mut b),
                "{d:?}"
            );
        }
    }
}
