//! batch: a sequence's greedy tokens do not depend on the batch it is decoded in (issue 8's
//! batch invariance across sequences; the engine of the `batch` gate).
//!
//! A "needle" sequence is decoded alone, then at a random row among `B - 1` random
//! sequences (random prompts of different lengths, so every row sits at its own position)
//! for B in {2, 7, 16, 64}: all `n_tokens` greedy tokens must be identical, and so must the
//! bits of the last logits row (the one that chose the last token). Every other row of each
//! batch is held to its own solo decode too, so a fault in any row shows.
//!
//! The check ([`check`]) runs over a [`Stepper`] (solo decode, batched decode), so the gate
//! logic is tested without a GPU on a toy model, with a planted fault that turns it red.
//! [`CudaStepper`] is the real one: solo = [`CudaDecoder::generate_greedy`] (the plain
//! single-sequence reference), batched = every prompt prefilled on its own decoder, then one
//! [`CudaDecoder::forward_batch_argmax`] per step for all rows (and each decoder's own
//! [`CudaDecoder::argmax`] on the logits the step left in it must agree). Its planted fault
//! ([`CudaStepper::plant_fault`]; `harness gate` sets it from `ASSAY_BATCH_PLANT_FAULT=1`)
//! negates the final hidden state of the last row of every batched step.

use crate::Verdict;
use crate::decode_check::DecodeCase;
use crate::kernel_check::Rng;
use engine::cuda::{CudaDecoder, Gpu};
use std::sync::Arc;

/// How to run the batch check.
#[derive(Clone, Debug)]
pub struct BatchConfig {
    /// Batch sizes the needle is decoded in.
    pub sizes: Vec<usize>,
    /// Greedy tokens per sequence (the first comes from the prefill, the rest from
    /// batched steps).
    pub n_tokens: usize,
    /// Random prompts have 1..=max_prompt tokens.
    pub max_prompt: usize,
    /// Seed of the random prompts and of the needle's row.
    pub seed: u64,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            sizes: vec![2, 7, 16, 64],
            n_tokens: 128,
            max_prompt: 48,
            seed: 1,
        }
    }
}

/// What one sequence's decode gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// The greedy tokens.
    pub tokens: Vec<u32>,
    /// f32 bits of the last logits row (the one that chose the last token).
    pub last_logits: Vec<u32>,
}

/// Decoding as the check needs it.
pub trait Stepper {
    /// Vocabulary size (random prompt tokens are drawn below it).
    fn n_vocab(&self) -> usize;
    /// `n` greedy tokens after `prompt`, decoded alone.
    fn solo(&mut self, prompt: &[u32], n: usize) -> Result<Decoded, String>;
    /// `n` greedy tokens after each prompt, decoded together (row `i` is `prompts[i]`).
    fn batched(&mut self, prompts: &[Vec<u32>], n: usize) -> Result<Vec<Decoded>, String>;
}

/// The result for one model.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BatchLine {
    pub name: String,
    pub n_tokens: usize,
    /// (batch size, the needle's row) of each batch run.
    pub needle_rows: Vec<(usize, usize)>,
    /// Rows compared with their solo decode, over all batch sizes.
    pub rows_checked: usize,
    /// One line per row whose tokens differ from its solo decode.
    pub mismatches: Vec<String>,
    pub pass: bool,
    pub error: Option<String>,
}

impl BatchLine {
    /// One printed line (plus one per mismatch, at most 8).
    pub fn render(&self) -> String {
        let status = if self.pass { "ok  " } else { "FAIL" };
        if let Some(e) = &self.error {
            return format!("{status} {:<40} error: {e}", self.name);
        }
        let sizes: Vec<String> = self
            .needle_rows
            .iter()
            .map(|(b, at)| format!("B={b} (needle row {at})"))
            .collect();
        let mut s = format!(
            "{status} {:<40} {} tokens, {}: {} rows vs alone {}",
            self.name,
            self.n_tokens,
            sizes.join(", "),
            self.rows_checked,
            if self.mismatches.is_empty() {
                "identical (tokens and last logits bits)".to_owned()
            } else {
                format!("{} DIFFER", self.mismatches.len())
            }
        );
        for m in self.mismatches.iter().take(8) {
            s.push_str("\n       ");
            s.push_str(m);
        }
        s
    }
}

/// A random prompt of 1..=max tokens below `n_vocab`.
fn random_prompt(rng: &mut Rng, n_vocab: usize, max: usize) -> Vec<u32> {
    let len = 1 + rng.below(max.max(1));
    (0..len).map(|_| rng.below(n_vocab) as u32).collect()
}

/// Where two token lists first differ (a length difference counts).
fn first_difference(a: &[u32], b: &[u32]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .or((a.len() != b.len()).then(|| a.len().min(b.len())))
}

/// Run the check on `stepper`: the needle (`needle`, or a random prompt when empty) alone,
/// then in each batch size at a random row; every row against its own solo decode.
pub fn check(
    name: &str,
    stepper: &mut dyn Stepper,
    needle: &[u32],
    cfg: &BatchConfig,
) -> BatchLine {
    let mut line = BatchLine {
        name: name.to_owned(),
        n_tokens: cfg.n_tokens,
        needle_rows: Vec::new(),
        rows_checked: 0,
        mismatches: Vec::new(),
        pass: false,
        error: None,
    };
    if let Err(e) = run_check(stepper, needle, cfg, &mut line) {
        line.error = Some(e);
        return line;
    }
    if line.rows_checked == 0 {
        line.error = Some("no batch was decoded: nothing compared".into());
        return line;
    }
    line.pass = line.mismatches.is_empty();
    line
}

fn run_check(
    stepper: &mut dyn Stepper,
    needle: &[u32],
    cfg: &BatchConfig,
    line: &mut BatchLine,
) -> Result<(), String> {
    if cfg.n_tokens == 0 || cfg.sizes.contains(&0) {
        return Err("a batch of 0 rows or 0 tokens checks nothing".into());
    }
    let n_vocab = stepper.n_vocab();
    let mut rng = Rng::new(cfg.seed);
    let needle: Vec<u32> = if needle.is_empty() {
        random_prompt(&mut rng, n_vocab, cfg.max_prompt)
    } else {
        needle.to_vec()
    };
    let most = cfg.sizes.iter().copied().max().unwrap_or(1);
    let others: Vec<Vec<u32>> = (1..most)
        .map(|_| random_prompt(&mut rng, n_vocab, cfg.max_prompt))
        .collect();
    let needle_alone = stepper
        .solo(&needle, cfg.n_tokens)
        .map_err(|e| format!("needle alone: {e}"))?;
    let mut others_alone = Vec::with_capacity(others.len());
    for (i, p) in others.iter().enumerate() {
        others_alone.push(
            stepper
                .solo(p, cfg.n_tokens)
                .map_err(|e| format!("random sequence {i} alone: {e}"))?,
        );
    }
    for &b in &cfg.sizes {
        let at = rng.below(b);
        let mut prompts: Vec<Vec<u32>> = others[..b - 1].to_vec();
        prompts.insert(at, needle.clone());
        let outs = stepper
            .batched(&prompts, cfg.n_tokens)
            .map_err(|e| format!("B={b}: {e}"))?;
        line.needle_rows.push((b, at));
        if outs.len() != b {
            line.mismatches
                .push(format!("B={b}: {} rows came back", outs.len()));
            continue;
        }
        for (row, out) in outs.iter().enumerate() {
            let (what, alone) = match row.cmp(&at) {
                std::cmp::Ordering::Equal => ("needle".to_owned(), &needle_alone),
                std::cmp::Ordering::Less => (format!("random sequence {row}"), &others_alone[row]),
                std::cmp::Ordering::Greater => (
                    format!("random sequence {}", row - 1),
                    &others_alone[row - 1],
                ),
            };
            line.rows_checked += 1;
            if let Some(i) = first_difference(&out.tokens, &alone.tokens) {
                line.mismatches.push(format!(
                    "B={b} row {row} ({what}): token {i} is {:?} in the batch, {:?} alone",
                    out.tokens.get(i),
                    alone.tokens.get(i)
                ));
            } else if out.last_logits != alone.last_logits {
                let n = out
                    .last_logits
                    .iter()
                    .zip(&alone.last_logits)
                    .filter(|(a, b)| a != b)
                    .count()
                    + out.last_logits.len().abs_diff(alone.last_logits.len());
                line.mismatches.push(format!(
                    "B={b} row {row} ({what}): same tokens, but {n} values of the last logits row differ in the batch from alone"
                ));
            }
        }
    }
    Ok(())
}

/// Verdict over every model's line (no line at all is red: the gate checked nothing).
pub fn verdict(lines: &[BatchLine]) -> Verdict {
    if lines.is_empty() {
        return Verdict::from_failures(vec!["no model was checked".into()]);
    }
    Verdict::from_failures(
        lines
            .iter()
            .filter(|l| !l.pass)
            .map(|l| match (&l.error, l.mismatches.first()) {
                (Some(e), _) => format!("{}: {e}", l.name),
                (None, Some(m)) => format!("{}: {m}", l.name),
                (None, None) => format!("{}: failed", l.name),
            })
            .collect(),
    )
}

/// The CUDA decoder as a [`Stepper`]: every sequence on its own decoder sharing one upload
/// of the weights.
pub struct CudaStepper {
    base: CudaDecoder,
    fault: bool,
}

impl CudaStepper {
    /// Upload `case`'s model.
    pub fn new(gpu: &Arc<Gpu>, case: &DecodeCase) -> Result<CudaStepper, String> {
        let program =
            engine::arch::build_program(case.model.header()).map_err(|e| e.to_string())?;
        let base =
            CudaDecoder::new(gpu.clone(), &case.model, program, 1).map_err(|e| e.to_string())?;
        Ok(CudaStepper { base, fault: false })
    }

    /// Negate the final hidden state of the last row of every batched step (the gate must
    /// then go red).
    pub fn plant_fault(&mut self) {
        self.fault = true;
    }

    fn decoder(&self, capacity: usize) -> Result<CudaDecoder, String> {
        self.base.share(capacity).map_err(|e| e.to_string())
    }
}

impl Stepper for CudaStepper {
    fn n_vocab(&self) -> usize {
        self.base.program().shape.n_vocab
    }

    fn solo(&mut self, prompt: &[u32], n: usize) -> Result<Decoded, String> {
        let mut d = self.decoder(prompt.len() + n)?;
        let tokens = d.generate_greedy(prompt, n).map_err(|e| e.to_string())?;
        Ok(Decoded {
            tokens,
            last_logits: logits_bits(&d)?,
        })
    }

    fn batched(&mut self, prompts: &[Vec<u32>], n: usize) -> Result<Vec<Decoded>, String> {
        let mut decs = Vec::with_capacity(prompts.len());
        let mut outs: Vec<Vec<u32>> = Vec::with_capacity(prompts.len());
        for p in prompts {
            let mut d = self.decoder(p.len() + n)?;
            d.prefill(p).map_err(|e| e.to_string())?;
            outs.push(vec![d.argmax().map_err(|e| e.to_string())?]);
            decs.push(d);
        }
        let last_row = prompts.len().saturating_sub(1);
        for _ in 1..n {
            let last: Vec<u32> = outs
                .iter()
                .map(|o| o.last().copied().unwrap_or(0))
                .collect();
            let mut refs: Vec<&mut CudaDecoder> = decs.iter_mut().collect();
            let next = if self.fault {
                CudaDecoder::forward_batch_argmax_planted(&mut refs, &last, last_row)
            } else {
                CudaDecoder::forward_batch_argmax(&mut refs, &last)
            }
            .map_err(|e| e.to_string())?;
            // The logits each decoder was left with (what sampling, masks and logprobs
            // read) must give the batch's own argmax of that row.
            for (row, (d, &t)) in decs.iter_mut().zip(&next).enumerate() {
                let kept = d.argmax().map_err(|e| e.to_string())?;
                if kept != t {
                    return Err(format!(
                        "row {row}: the logits left in its decoder give token {kept}, the batched argmax {t}"
                    ));
                }
            }
            for (o, t) in outs.iter_mut().zip(next) {
                o.push(t);
            }
        }
        outs.into_iter()
            .zip(&decs)
            .map(|(tokens, d)| {
                Ok(Decoded {
                    tokens,
                    last_logits: logits_bits(d)?,
                })
            })
            .collect()
    }
}

/// The bits of the logits a decoder holds (those of the last token fed).
fn logits_bits(d: &CudaDecoder) -> Result<Vec<u32>, String> {
    Ok(d.logits()
        .map_err(|e| e.to_string())?
        .iter()
        .map(|x| x.to_bits())
        .collect())
}

/// Run the check on one model on the GPU.
pub fn check_model(
    gpu: &Arc<Gpu>,
    case: &DecodeCase,
    cfg: &BatchConfig,
    plant_fault: bool,
) -> BatchLine {
    match CudaStepper::new(gpu, case) {
        Ok(mut s) => {
            if plant_fault {
                s.plant_fault();
            }
            check(&case.name, &mut s, &case.prompt, cfg)
        }
        Err(e) => BatchLine {
            name: case.name.clone(),
            n_tokens: cfg.n_tokens,
            needle_rows: Vec::new(),
            rows_checked: 0,
            mismatches: Vec::new(),
            pass: false,
            error: Some(e),
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A toy language model: the next token is a hash of the whole sequence so far.
    /// `fault`: (batch size, row, step) whose token is changed in batched decoding.
    struct Toy {
        fault: Option<(usize, usize, usize)>,
        fail_batched: bool,
        /// (batch size, row) whose last logits row gets one bit flipped.
        logits_fault: Option<(usize, usize)>,
    }

    /// The toy's "logits" after `seq`: a few values derived from it.
    fn logits(seq: &[u32]) -> Vec<u32> {
        vec![next(seq), seq.len() as u32, next(&seq[1..])]
    }

    fn next(seq: &[u32]) -> u32 {
        let mut h: u64 = 1469598103934665603;
        for &t in seq {
            h = (h ^ u64::from(t)).wrapping_mul(1099511628211);
        }
        (h % 97) as u32
    }

    impl Stepper for Toy {
        fn n_vocab(&self) -> usize {
            97
        }
        fn solo(&mut self, prompt: &[u32], n: usize) -> Result<Decoded, String> {
            let mut seq = prompt.to_vec();
            let mut out = Vec::new();
            for _ in 0..n {
                let t = next(&seq);
                seq.push(t);
                out.push(t);
            }
            seq.pop();
            Ok(Decoded {
                tokens: out,
                last_logits: logits(&seq),
            })
        }
        fn batched(&mut self, prompts: &[Vec<u32>], n: usize) -> Result<Vec<Decoded>, String> {
            if self.fail_batched {
                return Err("device lost".into());
            }
            let mut seqs: Vec<Vec<u32>> = prompts.to_vec();
            let mut outs = vec![Vec::new(); prompts.len()];
            for step in 0..n {
                for (row, (s, o)) in seqs.iter_mut().zip(&mut outs).enumerate() {
                    let mut t = next(s);
                    if self.fault == Some((prompts.len(), row, step)) {
                        t = (t + 1) % 97;
                    }
                    s.push(t);
                    o.push(t);
                }
            }
            Ok(seqs
                .into_iter()
                .zip(outs)
                .enumerate()
                .map(|(row, (mut s, tokens))| {
                    s.pop();
                    let mut last_logits = logits(&s);
                    if self.logits_fault == Some((prompts.len(), row)) {
                        last_logits[1] ^= 1;
                    }
                    Decoded {
                        tokens,
                        last_logits,
                    }
                })
                .collect())
        }
    }

    fn cfg() -> BatchConfig {
        BatchConfig {
            n_tokens: 16,
            ..BatchConfig::default()
        }
    }

    #[test]
    fn an_invariant_stepper_is_green() {
        let mut toy = Toy {
            fault: None,
            fail_batched: false,
            logits_fault: None,
        };
        let line = check("toy", &mut toy, &[1, 2, 3], &cfg());
        assert!(line.pass, "{}", line.render());
        assert_eq!(line.rows_checked, 2 + 7 + 16 + 64);
        assert_eq!(line.needle_rows.len(), 4);
        assert!(line.needle_rows.iter().all(|&(b, at)| at < b));
        assert_eq!(verdict(&[line]), Verdict::Green);
    }

    #[test]
    fn one_changed_token_in_one_row_of_one_batch_turns_it_red() {
        let mut toy = Toy {
            fault: Some((16, 9, 11)),
            fail_batched: false,
            logits_fault: None,
        };
        let line = check("toy", &mut toy, &[1, 2, 3], &cfg());
        assert!(!line.pass);
        assert_eq!(line.mismatches.len(), 1, "{:?}", line.mismatches);
        assert!(
            line.mismatches[0].starts_with("B=16 row 9 ")
                && line.mismatches[0].contains("token 11"),
            "{:?}",
            line.mismatches
        );
        assert!(verdict(&[line]).is_red());
    }

    #[test]
    fn a_fault_on_the_needle_row_names_the_needle() {
        let mut probe = Toy {
            fault: None,
            fail_batched: false,
            logits_fault: None,
        };
        let at = check("toy", &mut probe, &[5], &cfg()).needle_rows[3].1;
        let mut toy = Toy {
            fault: Some((64, at, 0)),
            fail_batched: false,
            logits_fault: None,
        };
        let line = check("toy", &mut toy, &[5], &cfg());
        assert!(!line.pass);
        assert!(
            line.mismatches[0].contains("needle"),
            "{:?}",
            line.mismatches
        );
    }

    #[test]
    fn an_error_or_an_empty_check_is_red() {
        let mut toy = Toy {
            fault: None,
            fail_batched: true,
            logits_fault: None,
        };
        let line = check("toy", &mut toy, &[1], &cfg());
        assert!(!line.pass && line.error.is_some());
        assert!(verdict(&[line]).is_red());
        let mut ok = Toy {
            fault: None,
            fail_batched: false,
            logits_fault: None,
        };
        let empty = BatchConfig {
            sizes: Vec::new(),
            ..cfg()
        };
        assert!(!check("toy", &mut ok, &[1], &empty).pass);
        let zero = BatchConfig {
            sizes: vec![0],
            ..cfg()
        };
        assert!(!check("toy", &mut ok, &[1], &zero).pass);
        assert!(verdict(&[]).is_red());
    }

    #[test]
    fn one_flipped_bit_of_a_last_logits_row_turns_it_red() {
        let mut toy = Toy {
            fault: None,
            fail_batched: false,
            logits_fault: Some((7, 3)),
        };
        let line = check("toy", &mut toy, &[1, 2, 3], &cfg());
        assert!(!line.pass);
        assert_eq!(line.mismatches.len(), 1, "{:?}", line.mismatches);
        assert!(
            line.mismatches[0].starts_with("B=7 row 3 ")
                && line.mismatches[0].contains("1 values of the last logits row differ"),
            "{:?}",
            line.mismatches
        );
    }

    #[test]
    fn first_difference_counts_lengths() {
        assert_eq!(first_difference(&[1, 2], &[1, 2]), None);
        assert_eq!(first_difference(&[1, 2], &[1, 3]), Some(1));
        assert_eq!(first_difference(&[1], &[1, 3]), Some(1));
    }
}
