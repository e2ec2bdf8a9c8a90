//! graph-check: CUDA-graph replay against eager CUDA decode (the engine of the `graph`
//! gate), plus the paired eager / graphed decode timing.
//!
//! Owns: the comparison of one model ([`check_model`]). One decoder runs three arms over
//! the same prompt: *eager* greedy decode ([`CudaDecoder::forward`] per token), then — after
//! a reset — greedy decode through the captured one-token graph
//! ([`CudaDecoder::step_graphed`]), then, after another reset, the same graph replayed for
//! a second sequence (one graph serves every position of every sequence). Both graphed arms
//! must produce exactly the eager arm's tokens, and the graphed arm's logits must equal the
//! eager arm's bit for bit at every step (the same kernels with the same arguments run in
//! both, so any difference is a defect, not rounding). The verdict logic is a pure
//! function of the recorded arms ([`compare`]), so a planted fault (a swapped token, one
//! perturbed logit) is tested without a GPU. Two more arms sample with a seeded sampler on
//! the device (every step of the chain active): eager sampled steps and the captured
//! sampled step replayed must give the same tokens. [`time_pair`] times eager and graphed decode
//! interleaved (A B A B ..., medians).

use crate::Verdict;
use crate::decode_check::DecodeCase;
use engine::cuda::{CudaDecoder, CudaError, Gpu};
use std::sync::Arc;
use std::time::Instant;

/// How to run graph-check.
#[derive(Clone, Debug)]
pub struct GraphCheckConfig {
    /// Greedy tokens compared per arm (the first comes from the eager prompt pass, the
    /// rest from graph replays).
    pub n_tokens: usize,
    /// KV capacity of the decoder.
    pub capacity: usize,
}

impl Default for GraphCheckConfig {
    fn default() -> Self {
        GraphCheckConfig {
            n_tokens: 64,
            capacity: 1024,
        }
    }
}

/// What the three arms of one model produced.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Arms {
    pub eager: Vec<u32>,
    pub graphed: Vec<u32>,
    /// The graph replayed again for a second sequence (after a reset).
    pub replay: Vec<u32>,
    /// Per step, the largest |eager - graphed| logit (0.0 when bit-identical; a NaN on
    /// one side only counts as infinite).
    pub logit_diff: Vec<f32>,
    /// Nodes of the captured graph.
    pub graph_nodes: usize,
    /// Seeded sampling on the device ([`sampled_config`]): eager steps, then the captured
    /// sampled step replayed, each with a fresh sampler of the same seed. Must be equal.
    pub sampled_eager: Vec<u32>,
    pub sampled_graphed: Vec<u32>,
}

/// The sampler of the sampled arms: every step of the chain active, penalties included.
pub fn sampled_config() -> engine::sampling::SamplerConfig {
    engine::sampling::SamplerConfig {
        temperature: 0.9,
        top_k: 40,
        top_p: 0.95,
        min_p: 0.02,
        repeat_penalty: 1.1,
        presence_penalty: 0.1,
        frequency_penalty: 0.05,
        penalty_last_n: 64,
        seed: 7,
    }
}

/// The first step where an arm left the eager tokens.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Divergence {
    pub arm: &'static str,
    pub step: usize,
    pub eager_token: Option<u32>,
    pub arm_token: Option<u32>,
}

/// The result for one model.
#[derive(Clone, Debug, serde::Serialize)]
pub struct GraphLine {
    pub name: String,
    pub tokens: usize,
    pub graph_nodes: usize,
    pub divergences: Vec<Divergence>,
    /// Steps whose logits were not bit-identical between eager and graphed.
    pub logit_mismatch_steps: Vec<usize>,
    pub max_logit_diff: f32,
    pub pass: bool,
    /// Set when the check could not run (load, capture or launch error).
    pub error: Option<String>,
}

impl GraphLine {
    fn failed(name: &str, tokens: usize, error: String) -> GraphLine {
        GraphLine {
            name: name.to_owned(),
            tokens,
            graph_nodes: 0,
            divergences: Vec::new(),
            logit_mismatch_steps: Vec::new(),
            max_logit_diff: 0.0,
            pass: false,
            error: Some(error),
        }
    }

    /// One printed line (plus one per divergence).
    pub fn render(&self) -> String {
        let status = if self.pass { "ok  " } else { "FAIL" };
        if let Some(e) = &self.error {
            return format!("{status} {:<40} error: {e}", self.name);
        }
        let mut s = format!(
            "{status} {:<40} {} tokens x 5 arms (eager, graph, graph replay, sampled eager, sampled graph), {} graph nodes, logits {}",
            self.name,
            self.tokens,
            self.graph_nodes,
            if self.logit_mismatch_steps.is_empty() {
                "bit-identical".to_owned()
            } else {
                format!(
                    "differ at {} step(s), max |diff| {:.3e}",
                    self.logit_mismatch_steps.len(),
                    self.max_logit_diff
                )
            }
        );
        for d in &self.divergences {
            let show = |t: Option<u32>| t.map_or_else(|| "none".to_owned(), |t| t.to_string());
            s.push_str(&format!(
                "\n       {} arm leaves eager at token {}: eager {} vs {}",
                d.arm,
                d.step,
                show(d.eager_token),
                show(d.arm_token)
            ));
        }
        s
    }
}

fn first_divergence(arm: &'static str, eager: &[u32], other: &[u32]) -> Option<Divergence> {
    let n = eager.len().max(other.len());
    (0..n)
        .find(|&i| eager.get(i) != other.get(i))
        .map(|step| Divergence {
            arm,
            step,
            eager_token: eager.get(step).copied(),
            arm_token: other.get(step).copied(),
        })
}

/// The verdict of one model from its recorded arms: green only when both graphed arms
/// equal the eager arm token for token (same length too) and every step's logits were
/// bit-identical.
pub fn compare(name: &str, arms: &Arms) -> GraphLine {
    let divergences: Vec<Divergence> = [
        first_divergence("graph", &arms.eager, &arms.graphed),
        first_divergence("replay", &arms.eager, &arms.replay),
        first_divergence("sampled graph", &arms.sampled_eager, &arms.sampled_graphed),
    ]
    .into_iter()
    .flatten()
    .collect();
    let logit_mismatch_steps: Vec<usize> = arms
        .logit_diff
        .iter()
        .enumerate()
        .filter(|(_, d)| **d != 0.0)
        .map(|(i, _)| i)
        .collect();
    let max_logit_diff = arms.logit_diff.iter().fold(0f32, |m, d| m.max(*d));
    let pass = !arms.eager.is_empty()
        && arms.sampled_eager.len() == arms.eager.len()
        && divergences.is_empty()
        && logit_mismatch_steps.is_empty()
        && arms.logit_diff.len() == arms.eager.len();
    GraphLine {
        name: name.to_owned(),
        tokens: arms.eager.len(),
        graph_nodes: arms.graph_nodes,
        divergences,
        logit_mismatch_steps,
        max_logit_diff,
        pass,
        error: None,
    }
}

/// Largest |a - b| over two logit vectors; a NaN on one side only, or a length mismatch,
/// is infinite. Bit-identical vectors give exactly 0.0.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return f32::INFINITY;
    }
    a.iter().zip(b).fold(0f32, |m, (x, y)| {
        if x.to_bits() == y.to_bits() {
            m
        } else if x.is_nan() || y.is_nan() {
            f32::INFINITY
        } else {
            m.max((x - y).abs().max(f32::MIN_POSITIVE))
        }
    })
}

/// Run the three arms of one model on the GPU.
pub fn run_arms(gpu: &Arc<Gpu>, case: &DecodeCase, cfg: &GraphCheckConfig) -> Result<Arms, String> {
    let e2s = |e: CudaError| e.to_string();
    let program = engine::arch::build_program(case.model.header()).map_err(|e| e.to_string())?;
    let mut dec =
        CudaDecoder::new(Arc::clone(gpu), &case.model, program, cfg.capacity).map_err(e2s)?;
    let n = cfg.n_tokens;
    let mut arms = Arms::default();
    if n == 0 {
        return Ok(arms);
    }
    // Eager arm, keeping every step's logits.
    let mut eager_logits = Vec::with_capacity(n);
    dec.prefill(&case.prompt).map_err(e2s)?;
    loop {
        let t = dec.argmax().map_err(e2s)?;
        arms.eager.push(t);
        eager_logits.push(dec.logits().map_err(e2s)?);
        if arms.eager.len() == n {
            break;
        }
        dec.forward(&[t]).map_err(e2s)?;
    }
    // Graphed arm: the prompt eagerly, then one replay per token.
    dec.reset();
    dec.capture_step().map_err(e2s)?;
    arms.graph_nodes = dec.step_graph().map_or(0, |g| g.nodes());
    dec.prefill(&case.prompt).map_err(e2s)?;
    let mut t = dec.argmax().map_err(e2s)?;
    loop {
        arms.graphed.push(t);
        let step = arms.graphed.len() - 1;
        let logits = dec.logits().map_err(e2s)?;
        arms.logit_diff.push(
            eager_logits
                .get(step)
                .map_or(f32::INFINITY, |e| max_abs_diff(e, &logits)),
        );
        if arms.graphed.len() == n {
            break;
        }
        t = dec.step_graphed(t).map_err(e2s)?;
    }
    // The same graph for a second sequence.
    dec.reset();
    arms.replay = dec.generate_greedy_graphed(&case.prompt, n).map_err(e2s)?;
    // Seeded sampling, eager then through the sampled graph.
    for graphed in [false, true] {
        dec.reset();
        let mut sampler = engine::sampling::Sampler::new(sampled_config());
        for &t in &case.prompt {
            sampler.accept(t);
        }
        let toks = if graphed {
            dec.generate_sampled_graphed(&case.prompt, n, &mut sampler)
        } else {
            dec.generate_sampled(&case.prompt, n, &mut sampler)
        };
        let toks = toks.map_err(e2s)?;
        if graphed {
            arms.sampled_graphed = toks;
        } else {
            arms.sampled_eager = toks;
        }
    }
    Ok(arms)
}

/// Check graph replay against eager decode on one model.
pub fn check_model(gpu: &Arc<Gpu>, case: &DecodeCase, cfg: &GraphCheckConfig) -> GraphLine {
    match run_arms(gpu, case, cfg) {
        Ok(arms) => compare(&case.name, &arms),
        Err(e) => GraphLine::failed(&case.name, cfg.n_tokens, e),
    }
}

/// Verdict over every model's line (no line at all is red: the gate checked nothing).
pub fn verdict(lines: &[GraphLine]) -> Verdict {
    if lines.is_empty() {
        return Verdict::from_failures(vec!["no model was checked".into()]);
    }
    Verdict::from_failures(
        lines
            .iter()
            .filter(|l| !l.pass)
            .map(|l| match (&l.error, l.divergences.first()) {
                (Some(e), _) => format!("{}: {e}", l.name),
                (None, Some(d)) => format!(
                    "{}: {} arm diverges from eager at token {}",
                    l.name, d.arm, d.step
                ),
                (None, None) => format!(
                    "{}: logits not bit-identical at {} step(s)",
                    l.name,
                    l.logit_mismatch_steps.len()
                ),
            })
            .collect(),
    )
}

/// Eager and graphed decode timing of one model, measured interleaved.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PairTiming {
    pub name: String,
    pub prompt_tokens: usize,
    pub decode_tokens: usize,
    /// Tokens per second of each eager repetition.
    pub eager_tok_s: Vec<f64>,
    /// Tokens per second of each graphed repetition.
    pub graphed_tok_s: Vec<f64>,
    pub weight_bytes: usize,
    pub graph_nodes: usize,
}

/// Median of a sample (0.0 when empty).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => 0.5 * (s[n / 2 - 1] + s[n / 2]),
    }
}

impl PairTiming {
    pub fn eager_median(&self) -> f64 {
        median(&self.eager_tok_s)
    }
    pub fn graphed_median(&self) -> f64 {
        median(&self.graphed_tok_s)
    }
}

/// A CUDA decoder of `case`'s model with room for `capacity` positions.
fn decoder(gpu: &Arc<Gpu>, case: &DecodeCase, capacity: usize) -> Result<CudaDecoder, String> {
    let program = engine::arch::build_program(case.model.header()).map_err(|e| e.to_string())?;
    CudaDecoder::new(Arc::clone(gpu), &case.model, program, capacity).map_err(|e| e.to_string())
}

/// Time `n` greedy tokens after the prompt, eager then graphed, `reps` times interleaved
/// (after one discarded warm-up of each). The prompt pass is not timed.
pub fn time_pair(
    gpu: &Arc<Gpu>,
    case: &DecodeCase,
    n: usize,
    reps: usize,
    capacity: usize,
) -> Result<PairTiming, String> {
    let e2s = |e: CudaError| e.to_string();
    let mut dec = decoder(gpu, case, capacity)?;
    let mut timing = PairTiming {
        name: case.name.clone(),
        prompt_tokens: case.prompt.len(),
        decode_tokens: n,
        eager_tok_s: Vec::new(),
        graphed_tok_s: Vec::new(),
        weight_bytes: dec.weight_bytes(),
        graph_nodes: 0,
    };
    for rep in 0..=reps {
        for graphed in [false, true] {
            dec.reset();
            dec.prefill(&case.prompt).map_err(e2s)?;
            let mut t = dec.argmax().map_err(e2s)?;
            let t0 = Instant::now();
            for _ in 0..n {
                t = if graphed {
                    dec.step_graphed(t).map_err(e2s)?
                } else {
                    dec.forward(&[t]).map_err(e2s)?;
                    dec.argmax().map_err(e2s)?
                };
            }
            let tok_s = n as f64 / t0.elapsed().as_secs_f64().max(1e-9);
            if rep > 0 {
                if graphed {
                    timing.graphed_tok_s.push(tok_s);
                } else {
                    timing.eager_tok_s.push(tok_s);
                }
            }
        }
    }
    timing.graph_nodes = dec.step_graph().map_or(0, |g| g.nodes());
    Ok(timing)
}

/// Time of the verification forward by row count (`decode-check --rows N`): per row count
/// n, the wall time of [`CudaDecoder::forward_rows_argmax_graphed`] on n tokens, each rep
/// rolled back ([`CudaDecoder::truncate`]) so every rep starts at the prompt's end; row
/// count 0 is the graphed one-token step ([`CudaDecoder::step_graphed`]). What a
/// speculative round costs against a plain step on this model (issue 10).
#[derive(Clone, Debug, serde::Serialize)]
pub struct RowsTiming {
    pub name: String,
    pub prompt_tokens: usize,
    /// (rows, milliseconds per forward of each timed rep); rows 0: the one-token step.
    pub ms: Vec<(usize, Vec<f64>)>,
}

/// [`RowsTiming`] of `case` for 1 ..= `max_rows` rows, `reps` timed reps per row count after
/// one untimed rep (the capture of that row count's graph).
pub fn time_rows(
    gpu: &Arc<Gpu>,
    case: &DecodeCase,
    max_rows: usize,
    reps: usize,
    capacity: usize,
) -> Result<RowsTiming, String> {
    let e2s = |e: CudaError| e.to_string();
    let mut dec = decoder(gpu, case, capacity)?;
    dec.prefill(&case.prompt).map_err(e2s)?;
    let t = dec.argmax().map_err(e2s)?;
    let at = dec.len();
    // Tokens of the rows: the prompt's own ids, in order (any ids time the same).
    let ids: Vec<u32> = case.prompt.iter().copied().cycle().take(max_rows).collect();
    let mut out = RowsTiming {
        name: case.name.clone(),
        prompt_tokens: case.prompt.len(),
        ms: Vec::new(),
    };
    for rows in 0..=max_rows {
        let mut v = Vec::new();
        for rep in 0..=reps {
            let t0 = Instant::now();
            if rows == 0 {
                dec.step_graphed(t).map_err(e2s)?;
            } else {
                dec.forward_rows_argmax_graphed(&ids[..rows]).map_err(e2s)?;
            }
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            dec.truncate(at);
            if rep > 0 {
                v.push(ms);
            }
        }
        out.ms.push((rows, v));
    }
    if let Some(e) = dec.rows_graph_error() {
        return Err(format!("the rows forward ran eagerly: {e}"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good_arms() -> Arms {
        let toks = vec![5, 9, 9, 2, 7, 1];
        Arms {
            eager: toks.clone(),
            graphed: toks.clone(),
            replay: toks.clone(),
            logit_diff: vec![0.0; toks.len()],
            graph_nodes: 42,
            sampled_eager: vec![3, 3, 8, 1, 0, 4],
            sampled_graphed: vec![3, 3, 8, 1, 0, 4],
        }
    }

    #[test]
    fn a_swapped_token_in_the_sampled_graph_arm_or_a_missing_sampled_arm_is_red() {
        let mut arms = good_arms();
        arms.sampled_graphed.swap(1, 2);
        let l = compare("planted", &arms);
        assert!(!l.pass);
        assert_eq!(l.divergences[0].arm, "sampled graph");
        assert_eq!(l.divergences[0].step, 1);
        let mut arms = good_arms();
        arms.sampled_eager.clear();
        arms.sampled_graphed.clear();
        assert!(!compare("no sampled arms", &arms).pass);
    }

    #[test]
    fn identical_arms_are_green() {
        let l = compare("m", &good_arms());
        assert!(l.pass, "{}", l.render());
        assert!(l.render().contains("bit-identical"));
        assert_eq!(verdict(&[l]), Verdict::Green);
    }

    #[test]
    fn a_swapped_token_in_the_graph_arm_is_red() {
        let mut arms = good_arms();
        arms.graphed.swap(2, 3);
        let l = compare("planted", &arms);
        assert!(!l.pass);
        assert_eq!(
            l.divergences,
            vec![Divergence {
                arm: "graph",
                step: 2,
                eager_token: Some(9),
                arm_token: Some(2),
            }]
        );
        assert!(l.render().contains("graph arm leaves eager at token 2"));
        match verdict(&[compare("ok", &good_arms()), l]) {
            Verdict::Red { failures } => {
                assert_eq!(failures.len(), 1);
                assert!(failures[0].contains("planted: graph arm diverges"));
            }
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn a_short_or_diverging_replay_is_red() {
        let mut arms = good_arms();
        arms.replay.pop();
        let l = compare("short", &arms);
        assert!(!l.pass);
        assert_eq!(l.divergences[0].arm, "replay");
        assert_eq!(l.divergences[0].step, 5);
        assert_eq!(l.divergences[0].arm_token, None);
    }

    #[test]
    fn a_perturbed_logit_is_red_even_with_equal_tokens() {
        let eager = vec![0.5f32, -1.25, 3.0];
        let mut graphed = eager.clone();
        assert_eq!(max_abs_diff(&eager, &graphed), 0.0);
        graphed[1] = f32::from_bits(graphed[1].to_bits() + 1);
        let d = max_abs_diff(&eager, &graphed);
        assert!(d > 0.0 && d < 1e-6);
        assert_eq!(max_abs_diff(&eager, &[0.5, f32::NAN, 3.0]), f32::INFINITY);
        assert_eq!(max_abs_diff(&eager, &eager[..2]), f32::INFINITY);
        let mut arms = good_arms();
        arms.logit_diff[4] = d;
        let l = compare("ulp", &arms);
        assert!(!l.pass && l.divergences.is_empty());
        assert_eq!(l.logit_mismatch_steps, vec![4]);
        assert!(matches!(verdict(&[l]), Verdict::Red { .. }));
    }

    #[test]
    fn nothing_checked_is_red() {
        assert!(verdict(&[]).is_red());
        assert!(!compare("empty", &Arms::default()).pass);
    }

    #[test]
    fn median_of_samples() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }
}
