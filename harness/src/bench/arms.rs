//! The engines a cell pairs (its `arms`), and the schedule that times them one at a time:
//! every arm's warm-up runs first (discarded), then the timed runs alternate A B A B, so
//! that a drift in clocks or temperature during the cell hits every arm alike.

use anyhow::{Result, bail};

/// An engine a bench cell can time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArmKind {
    /// Our engine (the CPU reference on CPU cells, the CUDA decoder on GPU cells).
    Assay,
    /// llama.cpp's `llama-bench`, built by `competitors/llama.cpp/build`.
    LlamaCpp,
}

impl ArmKind {
    /// The arm of a board's `arms` entry.
    pub fn parse(name: &str) -> Result<ArmKind> {
        match name {
            "assay" => Ok(ArmKind::Assay),
            "llama.cpp" => Ok(ArmKind::LlamaCpp),
            other => bail!("unknown arm {other:?} (known: assay, llama.cpp)"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ArmKind::Assay => "assay",
            ArmKind::LlamaCpp => "llama.cpp",
        }
    }
}

/// The arms of a cell that this run times: the cell's arms in its order, kept to `only`
/// when given. An unknown arm name is an error, so is a selection that keeps none.
pub fn select(cell_arms: &[String], only: &[String]) -> Result<Vec<ArmKind>> {
    let mut out = Vec::new();
    for a in only {
        ArmKind::parse(a)?;
    }
    for a in cell_arms {
        let k = ArmKind::parse(a)?;
        if (only.is_empty() || only.iter().any(|o| o == a)) && !out.contains(&k) {
            out.push(k);
        }
    }
    if out.is_empty() {
        bail!(
            "none of the cell's arms ({}) is selected by --arms {}",
            cell_arms.join(", "),
            only.join(",")
        );
    }
    if out[0] != ArmKind::Assay && out.contains(&ArmKind::Assay) {
        bail!("assay must be the first arm");
    }
    Ok(out)
}

/// How the timed runs of the arms are ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Interleave {
    /// One run of each arm in turn, `runs` times: A B A B ...
    Rep,
    /// All runs of one arm, then all runs of the next (one process per arm: cheaper when
    /// an arm reloads its model on every call).
    Block,
}

impl Interleave {
    pub fn name(self) -> &'static str {
        match self {
            Interleave::Rep => "rep",
            Interleave::Block => "block",
        }
    }
}

/// One arm ready to time: `run(n)` makes `n` timed runs and returns one sample per run.
pub trait ArmRun {
    fn run(&mut self, n: usize) -> Result<Vec<f64>>;
}

/// Time the arms: `warmup` discarded runs of each arm (arm after arm), then `runs` timed
/// runs per arm in the order `how` says. The samples of each arm, in run order.
pub fn interleave(
    arms: &mut [&mut dyn ArmRun],
    warmup: usize,
    runs: usize,
    how: Interleave,
) -> Result<Vec<Vec<f64>>> {
    for a in arms.iter_mut() {
        if warmup > 0 {
            a.run(warmup)?;
        }
    }
    let mut samples = vec![Vec::with_capacity(runs); arms.len()];
    match how {
        Interleave::Rep => {
            for _ in 0..runs {
                for (i, a) in arms.iter_mut().enumerate() {
                    samples[i].extend(a.run(1)?);
                }
            }
        }
        Interleave::Block => {
            for (i, a) in arms.iter_mut().enumerate() {
                samples[i] = a.run(runs)?;
            }
        }
    }
    for (i, s) in samples.iter().enumerate() {
        if s.len() != runs {
            bail!("arm {i} returned {} samples for {runs} runs", s.len());
        }
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// An arm that logs each call as (arm, n) and returns n samples of its id.
    struct Fake {
        id: usize,
        log: Rc<RefCell<Vec<(usize, usize)>>>,
        short: bool,
    }

    impl ArmRun for Fake {
        fn run(&mut self, n: usize) -> Result<Vec<f64>> {
            self.log.borrow_mut().push((self.id, n));
            let n = if self.short { n.saturating_sub(1) } else { n };
            Ok(vec![self.id as f64; n])
        }
    }

    fn fakes(log: &Rc<RefCell<Vec<(usize, usize)>>>) -> (Fake, Fake) {
        let f = |id| Fake {
            id,
            log: Rc::clone(log),
            short: false,
        };
        (f(0), f(1))
    }

    #[test]
    fn rep_interleaving_alternates_after_the_warmups() {
        let log = Rc::new(RefCell::new(Vec::new()));
        let (mut a, mut b) = fakes(&log);
        let s = interleave(&mut [&mut a, &mut b], 1, 3, Interleave::Rep).unwrap();
        assert_eq!(s, vec![vec![0.0; 3], vec![1.0; 3]]);
        assert_eq!(
            *log.borrow(),
            vec![
                (0, 1),
                (1, 1),
                (0, 1),
                (1, 1),
                (0, 1),
                (1, 1),
                (0, 1),
                (1, 1)
            ]
        );
    }

    #[test]
    fn block_runs_each_arm_once_for_all_its_runs() {
        let log = Rc::new(RefCell::new(Vec::new()));
        let (mut a, mut b) = fakes(&log);
        let s = interleave(&mut [&mut a, &mut b], 2, 5, Interleave::Block).unwrap();
        assert_eq!(s[1].len(), 5);
        assert_eq!(*log.borrow(), vec![(0, 2), (1, 2), (0, 5), (1, 5)]);
    }

    #[test]
    fn an_arm_that_returns_too_few_samples_is_an_error() {
        let log = Rc::new(RefCell::new(Vec::new()));
        let (mut a, mut b) = fakes(&log);
        b.short = true;
        assert!(interleave(&mut [&mut a, &mut b], 0, 5, Interleave::Block).is_err());
        let (mut a, mut b) = fakes(&log);
        b.short = true;
        assert!(interleave(&mut [&mut a, &mut b], 0, 5, Interleave::Rep).is_err());
    }

    #[test]
    fn arm_selection() {
        let cell = vec!["assay".to_string(), "llama.cpp".to_string()];
        assert_eq!(
            select(&cell, &[]).unwrap(),
            vec![ArmKind::Assay, ArmKind::LlamaCpp]
        );
        assert_eq!(
            select(&cell, &["assay".into()]).unwrap(),
            vec![ArmKind::Assay]
        );
        assert_eq!(
            select(&cell, &["llama.cpp".into()]).unwrap(),
            vec![ArmKind::LlamaCpp]
        );
        // A selection that keeps none of the cell's arms, or names an unknown arm.
        assert!(select(&["assay".to_string()], &["llama.cpp".into()]).is_err());
        assert!(select(&cell, &["vllm".into()]).is_err());
        assert!(select(&["assay".into(), "mystery".into()], &[]).is_err());
        // Our arm leads when present.
        assert!(select(&["llama.cpp".into(), "assay".into()], &[]).is_err());
        assert_eq!(ArmKind::parse("llama.cpp").unwrap().name(), "llama.cpp");
    }
}
