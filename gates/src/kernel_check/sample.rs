//! The sampling cases of kernel-check: `sample.cu` against `engine::sampling::pick`.
//!
//! Owns: the judgement of device picks against the reference chain ([`judge_picks`]: a
//! pick must equal the reference's unless the reference's margin is below the `sample`
//! tolerance — a near-tie, counted and printed — and the kernel must fall back exactly
//! when the survivors exceed `SAMPLE_CAP`), the chi-square test of sampled frequencies
//! against the exact probabilities ([`chi_square`]), both pure functions tested here with
//! planted faults, and the GPU cases ([`sample_cases`]): random logits of real vocabulary
//! sizes under every step of the chain (top-k, top-p, min-p, temperature, penalties,
//! greedy, ties, the fallback), fixed draws including 0 and the largest below 1, the
//! output words poisoned before each launch.

use super::cases::Rng;
use super::{CheckLine, Tol, tolerance};
use engine::cuda::Gpu;
use engine::cuda::ops::{self, SAMPLE_CAP, SampleBuffers};
use engine::sampling::{self, Distribution, Pick, SamplerConfig};

/// The value the output words are poisoned with before each launch.
const POISON: i32 = i32::MIN;

/// The near-tie bound of the `sample` row of the tolerance table.
fn near_tie_eps() -> f64 {
    match tolerance("sample") {
        Tol::NearTie(e) => e,
        _ => 0.0,
    }
}

/// Judge the device's output words (`[token or -1, survivors]`, one per draw) against the
/// reference picks of the same draws.
pub fn judge_picks(name: &str, got: &[[i32; 2]], want: &[Pick]) -> CheckLine {
    let eps = near_tie_eps();
    let mut line = CheckLine {
        op: "sample",
        name: String::new(),
        tol: tolerance("sample"),
        err: 0.0,
        pass: true,
        note: String::new(),
    };
    if got.len() != want.len() || got.is_empty() {
        line.pass = false;
        line.err = f64::INFINITY;
        line.note = format!("{} device outputs for {} draws", got.len(), want.len());
        line.name = name.to_string();
        return line;
    }
    let (mut bad, mut near, mut fallbacks) = (Vec::new(), Vec::new(), 0usize);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let tie = w.margin < eps;
        let must_fall_back = w.survivors > SAMPLE_CAP;
        let ok = if g[0] == -1 {
            fallbacks += 1;
            must_fall_back
        } else {
            g[0] >= 0
                && !must_fall_back
                && g[0] as u32 == w.token
                && usize::try_from(g[1]).is_ok_and(|s| s == w.survivors)
        };
        let what = format!(
            "draw {i}: got ({}, {} survivors) want ({}, {} survivors) margin {:.1e}",
            g[0], g[1], w.token, w.survivors, w.margin
        );
        if ok {
            continue;
        }
        if tie {
            near.push(what);
        } else {
            bad.push(what);
        }
    }
    line.name = format!(
        "{name}: {} draws, {fallbacks} fallbacks, {} near-ties",
        got.len(),
        near.len()
    );
    line.err = bad.len() as f64;
    line.pass = bad.is_empty();
    line.note = match (bad.first(), near.is_empty()) {
        (Some(b), _) => b.clone(),
        (None, false) => format!("near-ties: {}", near.join("; ")),
        (None, true) => String::new(),
    };
    line
}

/// Upper-tail standard normal quantile (Abramowitz & Stegun 26.2.23, error < 4.5e-4).
fn normal_upper_quantile(p: f64) -> f64 {
    let t = (-2.0 * p.ln()).sqrt();
    t - (2.515_517 + 0.802_853 * t + 0.010_328 * t * t)
        / (1.0 + 1.432_788 * t + 0.189_269 * t * t + 0.001_308 * t * t * t)
}

/// Chi-square critical value for `df` degrees of freedom at upper-tail `p`
/// (Wilson-Hilferty).
pub fn chi_square_critical(df: usize, p: f64) -> f64 {
    let k = df.max(1) as f64;
    let z = normal_upper_quantile(p);
    let a = 2.0 / (9.0 * k);
    k * (1.0 - a + z * a.sqrt()).powi(3)
}

/// Compare sampled tokens with the exact distribution: bins of expected count >= 5 (the
/// rest merged into one bin), the statistic against its critical value at the
/// `sample_chi2` p-value. A token outside the distribution fails outright.
pub fn chi_square(name: &str, samples: &[u32], dist: &Distribution) -> CheckLine {
    let p_value = match tolerance("sample_chi2") {
        Tol::ChiSquare(p) => p,
        _ => 1e-6,
    };
    let mut line = CheckLine {
        op: "sample_chi2",
        name: format!(
            "{name}: {} draws over {} tokens",
            samples.len(),
            dist.tokens.len()
        ),
        tol: tolerance("sample_chi2"),
        err: f64::INFINITY,
        pass: false,
        note: String::new(),
    };
    let n = samples.len() as f64;
    let mut observed = vec![0usize; dist.tokens.len()];
    for &t in samples {
        match dist.tokens.iter().position(|&x| x == t) {
            Some(j) => observed[j] += 1,
            None => {
                line.note = format!("token {t} is outside the distribution");
                return line;
            }
        }
    }
    let (mut bins, mut rest) = (Vec::new(), (0f64, 0f64));
    for (j, &p) in dist.probs.iter().enumerate() {
        let e = n * p;
        let o = observed[j] as f64;
        if e >= 5.0 {
            bins.push((o, e));
        } else {
            rest.0 += o;
            rest.1 += e;
        }
    }
    if rest.1 >= 5.0 {
        bins.push(rest);
    } else if let Some(last) = bins.last_mut() {
        last.0 += rest.0;
        last.1 += rest.1;
    }
    if bins.len() < 2 {
        line.note = format!("{} bins: too few draws to test", bins.len());
        return line;
    }
    let stat: f64 = bins.iter().map(|(o, e)| (o - e) * (o - e) / e).sum();
    let df = bins.len() - 1;
    let crit = chi_square_critical(df, p_value);
    line.err = stat / crit;
    line.pass = line.err <= 1.0;
    line.note = format!("chi2 {stat:.1} over {df} df, critical {crit:.1}");
    line
}

/// How a case's logits are made.
#[derive(Clone, Copy)]
enum Logits {
    /// Uniform in [-scale, scale).
    Uniform(f32),
    /// Integers in 0..levels (many exact ties).
    Ties(u32),
}

struct Case {
    name: &'static str,
    n: usize,
    logits: Logits,
    cfg: SamplerConfig,
    /// Penalty window: this many tokens, drawn among the ids of the largest logits.
    window: usize,
}

fn cfg(temperature: f32, top_k: usize, top_p: f32, min_p: f32) -> SamplerConfig {
    SamplerConfig {
        temperature,
        top_k,
        top_p,
        min_p,
        ..SamplerConfig::default()
    }
}

fn cases() -> Vec<Case> {
    let big = 151_936;
    let pen = SamplerConfig {
        repeat_penalty: 1.3,
        presence_penalty: 0.5,
        frequency_penalty: 0.2,
        penalty_last_n: 64,
        ..cfg(0.7, 50, 1.0, 0.0)
    };
    vec![
        Case {
            name: "top-k 40 T 0.8",
            n: big,
            logits: Logits::Uniform(12.0),
            cfg: cfg(0.8, 40, 1.0, 0.0),
            window: 0,
        },
        Case {
            name: "top-k = cap, top-p 0.9",
            n: big,
            logits: Logits::Uniform(12.0),
            cfg: cfg(1.0, SAMPLE_CAP, 0.9, 0.0),
            window: 0,
        },
        Case {
            name: "top-p 0.5 (full vocab)",
            n: big,
            logits: Logits::Uniform(20.0),
            cfg: cfg(1.0, 0, 0.5, 0.0),
            window: 0,
        },
        Case {
            name: "top-p 0.99 (beyond cap: fallback)",
            n: big,
            logits: Logits::Uniform(20.0),
            cfg: cfg(1.0, 0, 0.99, 0.0),
            window: 0,
        },
        Case {
            name: "top-k 20000 top-p 0.3",
            n: big,
            logits: Logits::Uniform(20.0),
            cfg: cfg(1.1, 20_000, 0.3, 0.0),
            window: 0,
        },
        Case {
            name: "min-p 0.5 (full vocab)",
            n: big,
            logits: Logits::Uniform(20.0),
            cfg: cfg(1.0, 0, 1.0, 0.5),
            window: 0,
        },
        Case {
            name: "top-k 2000 top-p 0.8 min-p 0.05 T 1.5",
            n: 49_152,
            logits: Logits::Uniform(8.0),
            cfg: cfg(1.5, 2000, 0.8, 0.05),
            window: 0,
        },
        Case {
            name: "penalties top-k 50 T 0.7",
            n: 49_152,
            logits: Logits::Uniform(6.0),
            cfg: pen.clone(),
            window: 64,
        },
        Case {
            name: "greedy with penalties",
            n: 49_152,
            logits: Logits::Uniform(6.0),
            cfg: SamplerConfig {
                temperature: 0.0,
                ..pen
            },
            window: 40,
        },
        Case {
            name: "ties, top-k 300",
            n: 1000,
            logits: Logits::Ties(3),
            cfg: cfg(1.0, 300, 1.0, 0.0),
            window: 0,
        },
        Case {
            name: "ties, top-p 0.7",
            n: 5000,
            logits: Logits::Ties(40),
            cfg: cfg(0.9, 0, 0.7, 0.0),
            window: 0,
        },
        Case {
            name: "odd vocab, temperature only",
            n: 37,
            logits: Logits::Uniform(2.0),
            cfg: cfg(1.0, 0, 1.0, 0.0),
            window: 0,
        },
        Case {
            name: "temperature only (fallback)",
            n: 5000,
            logits: Logits::Uniform(2.0),
            cfg: cfg(1.0, 0, 1.0, 0.0),
            window: 0,
        },
    ]
}

fn make_logits(rng: &mut Rng, n: usize, kind: Logits) -> Vec<f32> {
    (0..n)
        .map(|_| match kind {
            Logits::Uniform(s) => s * rng.symmetric(),
            Logits::Ties(levels) => rng.below(levels as usize) as f32,
        })
        .collect()
}

/// A window of `len` tokens drawn among the ids of the 20 largest logits (so the
/// penalties move the top of the distribution), with repeats.
fn make_window(rng: &mut Rng, logits: &[f32], len: usize) -> Vec<u32> {
    let mut ids: Vec<u32> = (0..logits.len() as u32).collect();
    ids.sort_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
    ids.truncate(20);
    (0..len).map(|_| ids[rng.below(ids.len())]).collect()
}

/// Launch the kernel once per draw and collect its output words.
pub(super) fn run_draws(
    gpu: &Gpu,
    bufs: &mut SampleBuffers,
    logits: &engine::cuda::cudarc::driver::CudaSlice<f32>,
    cfg: &SamplerConfig,
    window: &[u32],
    draws: &[f64],
) -> Result<Vec<[i32; 2]>, String> {
    let e2s = |e: engine::cuda::CudaError| e.to_string();
    let mut out = Vec::with_capacity(draws.len());
    for &u in draws {
        bufs.poison_out(gpu, POISON).map_err(e2s)?;
        bufs.write_state(gpu, cfg, window, u).map_err(e2s)?;
        ops::sample(gpu, logits, bufs).map_err(e2s)?;
        out.push(bufs.read_out(gpu).map_err(e2s)?);
    }
    Ok(out)
}

/// The sampling cases: a [`judge_picks`] line per case and one [`chi_square`] line.
pub fn sample_cases(gpu: &Gpu, rng: &mut Rng, lines: &mut Vec<CheckLine>) {
    for c in cases() {
        let r = (|| -> Result<CheckLine, String> {
            let logits = make_logits(rng, c.n, c.logits);
            let window = make_window(rng, &logits, c.window);
            let mut draws = vec![0.0, 0.5, 1.0 - f64::EPSILON / 2.0];
            let mut g = sampling::Rng::new(rng.next_u64());
            draws.extend((0..29).map(|_| g.next_f64()));
            let want: Vec<Pick> = draws
                .iter()
                .map(|&u| sampling::pick(&c.cfg, &window, &logits, u))
                .collect();
            let dl = gpu.upload(&logits).map_err(|e| e.to_string())?;
            let mut bufs =
                SampleBuffers::new(gpu, c.n, window.len().max(1)).map_err(|e| e.to_string())?;
            let got = run_draws(gpu, &mut bufs, &dl, &c.cfg, &window, &draws)?;
            Ok(judge_picks(&format!("n={} {}", c.n, c.name), &got, &want))
        })();
        lines.push(r.unwrap_or_else(|e| CheckLine::error("sample", c.name, e)));
    }
    let name = "n=256 top-k 128 top-p 0.9 T 1.0";
    let r = (|| -> Result<CheckLine, String> {
        let n = 256;
        let c = cfg(1.0, 128, 0.9, 0.0);
        let logits = make_logits(rng, n, Logits::Uniform(2.0));
        let dist = sampling::distribution(&c, &[], &logits).ok_or("greedy config")?;
        let mut g = sampling::Rng::new(rng.next_u64());
        let draws: Vec<f64> = (0..20_000).map(|_| g.next_f64()).collect();
        let dl = gpu.upload(&logits).map_err(|e| e.to_string())?;
        let mut bufs = SampleBuffers::new(gpu, n, 1).map_err(|e| e.to_string())?;
        let got = run_draws(gpu, &mut bufs, &dl, &c, &[], &draws)?;
        let tokens: Vec<u32> = got
            .iter()
            .map(|o| u32::try_from(o[0]).unwrap_or(u32::MAX))
            .collect();
        Ok(chi_square(name, &tokens, &dist))
    })();
    lines.push(r.unwrap_or_else(|e| CheckLine::error("sample_chi2", name, e)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits(n: usize, seed: u64) -> Vec<f32> {
        let mut r = Rng::new(seed);
        make_logits(&mut r, n, Logits::Uniform(4.0))
    }

    fn out_of(p: &Pick) -> [i32; 2] {
        if p.survivors > SAMPLE_CAP {
            [-1, 0]
        } else {
            [p.token as i32, p.survivors as i32]
        }
    }

    #[test]
    fn exact_picks_are_green_and_a_swapped_token_is_red() {
        let l = logits(500, 1);
        let c = cfg(1.0, 50, 0.9, 0.0);
        let draws = [0.1, 0.4, 0.77, 0.95];
        let want: Vec<Pick> = draws
            .iter()
            .map(|&u| sampling::pick(&c, &[], &l, u))
            .collect();
        let got: Vec<[i32; 2]> = want.iter().map(out_of).collect();
        let line = judge_picks("exact", &got, &want);
        assert!(line.pass, "{}", line.render());
        // Planted fault: one pick replaced by the next candidate, far from any boundary.
        let mut bad = got.clone();
        bad[2][0] = want[1].token as i32;
        assert_ne!(bad[2][0], got[2][0]);
        let line = judge_picks("swapped", &bad, &want);
        assert!(!line.pass, "{}", line.render());
        assert_eq!(line.err, 1.0);
        // A wrong survivor count (a top-p cut off by one) is red too.
        let mut bad = got.clone();
        bad[0][1] += 1;
        assert!(!judge_picks("cut", &bad, &want).pass);
        // A poisoned (unwritten) output is red.
        let mut bad = got;
        bad[3] = [POISON, POISON];
        assert!(!judge_picks("poison", &bad, &want).pass);
    }

    #[test]
    fn a_draw_on_a_boundary_is_a_near_tie_and_fallback_must_match_the_cap() {
        let l = logits(500, 2);
        let c = cfg(1.0, 0, 1.0, 0.0);
        let d = sampling::distribution(&c, &[], &l).unwrap();
        // The draw exactly at the first cumulative boundary: margin 0.
        let u = d.probs[0];
        let w = sampling::pick(&c, &[], &l, u);
        assert!(w.margin < 1e-12, "{w:?}");
        let neighbour = [d.tokens[0] as i32, w.survivors as i32];
        let line = judge_picks("tie", &[neighbour], &[w]);
        assert!(line.pass, "{}", line.render());
        assert!(line.name.contains("1 near-ties"), "{}", line.name);
        // A fallback where the survivors fit the cap is red; where they do not, green.
        assert!(!judge_picks("fb", &[[-1, 0]], &[sampling::pick(&c, &[], &l, 0.5)]).pass);
        let big = logits(SAMPLE_CAP + 100, 3);
        let wb = sampling::pick(&c, &[], &big, 0.5);
        assert!(wb.survivors > SAMPLE_CAP);
        assert!(judge_picks("fb", &[[-1, 0]], &[wb]).pass);
        assert!(!judge_picks("fb", &[[wb.token as i32, wb.survivors as i32]], &[wb]).pass);
        assert!(!judge_picks("empty", &[], &[]).pass);
    }

    #[test]
    fn chi_square_passes_the_exact_sampler_and_fails_a_shifted_one() {
        let l = logits(64, 4);
        let c = cfg(1.0, 32, 1.0, 0.0);
        let d = sampling::distribution(&c, &[], &l).unwrap();
        let mut g = sampling::Rng::new(9);
        let draws: Vec<f64> = (0..20_000).map(|_| g.next_f64()).collect();
        let good: Vec<u32> = draws
            .iter()
            .map(|&u| sampling::pick(&c, &[], &l, u).token)
            .collect();
        let line = chi_square("exact", &good, &d);
        assert!(line.pass, "{}", line.render());
        // Planted fault: the CDF walk returns the next candidate (off by one bin).
        let shifted: Vec<u32> = good
            .iter()
            .map(|t| {
                let j = d.tokens.iter().position(|x| x == t).unwrap();
                d.tokens[(j + 1).min(d.tokens.len() - 1)]
            })
            .collect();
        let line = chi_square("shifted", &shifted, &d);
        assert!(!line.pass, "{}", line.render());
        // A subtle bias: 3% of the draws of the top candidate moved to the second.
        let mut biased = good.clone();
        let mut moved = 0;
        for t in biased.iter_mut() {
            if *t == d.tokens[0] && moved < 600 {
                *t = d.tokens[1];
                moved += 1;
            }
        }
        assert!(!chi_square("biased", &biased, &d).pass);
        // A token outside the survivors is red.
        let mut outside = good;
        outside[0] = 63_000;
        assert!(!chi_square("outside", &outside, &d).pass);
    }

    #[test]
    fn critical_values_match_tables() {
        // Tabulated chi-square quantiles: df 10 at p 1e-3 is 29.59, df 100 at 1e-3 149.45.
        assert!((chi_square_critical(10, 1e-3) - 29.59).abs() < 0.5);
        assert!((chi_square_critical(100, 1e-3) - 149.45).abs() < 1.0);
    }
}
