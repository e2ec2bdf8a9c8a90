//! `harness gate`: run the battery on whatever hardware is present, one line per gate, a
//! final `ALL GREEN` or the failures, one receipt row per gate (`research/gate.jsonl` by
//! default). Fetches the default model first when it is missing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use gates::receipt::{Arm, Kind, Receipt, append};
use gates::stamp::Stamp;
use gates::{GateContext, GateDef, GateOutcome, Progress, Verdict, battery, gpu_gates};

use crate::env::{EnvArgs, under};
use crate::progress;

#[derive(clap::Args, Debug)]
pub struct GateArgs {
    /// The short battery (pre-push).
    #[arg(long, conflicts_with = "full")]
    pub quick: bool,
    /// The full size where a gate's default is smaller (today the CPU `spec` gate: K = 1..8
    /// x 3 prompts x 128 tokens for n-gram and the Qwen pair; estimated near an hour on 2
    /// cores, not timed).
    #[arg(long)]
    pub full: bool,
    /// Run only these gates (comma-separated names).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Receipt file to append to (relative to the root).
    #[arg(long, default_value = "research/gate.jsonl")]
    pub receipts: PathBuf,
    /// Write no receipt (a dry run).
    #[arg(long)]
    pub no_receipt: bool,
    /// Do not fetch the default model when it is missing.
    #[arg(long)]
    pub no_fetch: bool,
    /// CPU threads for the reference executor (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Seed of the random inputs (default: the clock; recorded in the receipt).
    #[arg(long)]
    pub seed: Option<u64>,
}

fn time_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
}

/// The gates `args` selects, or an error naming an unknown gate.
pub fn select(all: &[GateDef], quick: bool, only: &[String]) -> Result<Vec<GateDef>> {
    for name in only {
        if !all.iter().any(|g| g.name == name) {
            let known: Vec<&str> = all.iter().map(|g| g.name).collect();
            bail!("no gate {name:?}; gates: {}", known.join(", "));
        }
    }
    Ok(all
        .iter()
        .filter(|g| only.is_empty() || only.iter().any(|n| n == g.name))
        .filter(|g| !quick || g.quick || !only.is_empty())
        .copied()
        .collect())
}

/// Fetch the default model with `tools/fetch-models` when its file is missing.
pub fn ensure_default_model(root: &Path, models_dir: &Path) -> Result<()> {
    let name = engine::catalog::default_name().context("reading the model catalog")?;
    let models = engine::catalog::models().context("reading the model catalog")?;
    let Some(m) = models.iter().find(|m| m.name == name) else {
        bail!("the catalog's default model {name} is not in the catalog");
    };
    if models_dir.join(&m.file).exists() {
        return Ok(());
    }
    eprintln!("default model {name} missing: tools/fetch-models --only {name}");
    let status = Command::new(root.join("tools/fetch-models"))
        .arg("--dir")
        .arg(models_dir)
        .arg("--only")
        .arg(&name)
        .status()
        .context("running tools/fetch-models")?;
    if !status.success() {
        bail!("tools/fetch-models --only {name} failed ({status})");
    }
    Ok(())
}

/// Run one gate (or skip it without a GPU). The sections a long gate reports are printed
/// as they finish, each with the gate's elapsed time.
fn run_one(g: &GateDef, ctx: &GateContext) -> (GateOutcome, f64) {
    let t = Instant::now();
    let outcome = match (g.needs_gpu, gpu_gates::no_gpu_reason(ctx)) {
        (true, Some(reason)) => GateOutcome::new(Verdict::skipped(reason), Vec::new()),
        _ => {
            let sp = progress::spinner(g.name);
            let (bar, name) = (sp.clone(), g.name);
            let mut ctx = ctx.clone();
            ctx.progress = Progress::new(move |msg| {
                let l = section_line(name, t.elapsed().as_secs_f64(), msg);
                if progress::enabled() {
                    bar.println(l);
                } else {
                    println!("{l}");
                }
            });
            let o = (g.run)(&ctx);
            sp.finish_and_clear();
            o
        }
    };
    (outcome, t.elapsed().as_secs_f64())
}

/// The printed line of one finished section of a gate.
pub fn section_line(name: &str, elapsed_s: f64, msg: &str) -> String {
    format!("{name:<24} ...      {elapsed_s:>7.1}s  {msg}")
}

/// What a run did not cover, and how to cover it: the gates skipped for want of a GPU, and
/// the CPU `spec` gate at less than its full size (empty when nothing was left out).
pub fn left_out(ran: &[(&str, &Verdict)], quick: bool, full: bool) -> Vec<String> {
    let mut out = Vec::new();
    let no_gpu: Vec<&str> = ran
        .iter()
        .filter(|(_, v)| matches!(v, Verdict::Skipped { .. }))
        .map(|(n, _)| *n)
        .collect();
    if !no_gpu.is_empty() {
        out.push(format!(
            "skipped: {} (each line says why; the GPU gates run where a CUDA GPU is present)",
            no_gpu.join(", ")
        ));
    }
    let spec_ran = ran
        .iter()
        .any(|(n, v)| *n == "spec" && !matches!(v, Verdict::Skipped { .. }));
    if spec_ran && !full {
        let size = if quick {
            gates::spec_gates::Size::quick()
        } else {
            gates::spec_gates::Size::default_size()
        };
        out.push(format!(
            "reduced: spec ran its {}; `harness gate --full` runs the full matrix ({})",
            size.describe(),
            gates::spec_gates::Size::full().describe()
        ));
    }
    out
}

/// The receipt row of one gate.
pub fn gate_receipt(
    stamp: &Stamp,
    g: &GateDef,
    o: &GateOutcome,
    wall_s: f64,
    args: &[String],
) -> Receipt {
    let mut r = stamp.receipt(Kind::Gate, g.name, o.verdict.clone());
    r.model = o.model.clone();
    r.workload = o.workload.clone();
    r.arms = vec![Arm {
        name: "assay".into(),
        engine: if g.needs_gpu {
            "assay-cuda"
        } else {
            "assay-cpu"
        }
        .into(),
        version: env!("CARGO_PKG_VERSION").into(),
        flags: args.to_vec(),
        unit: None,
        samples: Vec::new(),
        stats: None,
        roofline_fraction: None,
    }];
    r.detail = o.detail.clone();
    r.wall_s = (wall_s * 1000.0).round() / 1000.0;
    r
}

/// One printed line for a gate.
pub fn line(name: &str, o: &GateOutcome, wall_s: f64) -> String {
    match &o.verdict {
        Verdict::Skipped { reason } => format!("{name:<24} skipped: {reason}"),
        Verdict::Red { failures } => format!(
            "{name:<24} RED      {wall_s:>7.2}s  {}",
            failures.first().cloned().unwrap_or_default()
        ),
        Verdict::Green => format!(
            "{name:<24} green    {wall_s:>7.2}s  {}",
            o.detail.first().cloned().unwrap_or_default()
        ),
    }
}

pub fn run(env: &EnvArgs, args: &GateArgs) -> Result<bool> {
    let root = env.root()?;
    let models_dir = env.models_dir()?;
    let gates = select(&battery(), args.quick, &args.only)?;
    if !args.no_fetch {
        ensure_default_model(&root, &models_dir)?;
    }
    let stamp = env.stamp(&root)?;
    let ctx = GateContext {
        root: root.clone(),
        models_dir,
        default_model: engine::catalog::default_name().context("reading the model catalog")?,
        quick: args.quick,
        full: args.full,
        gpu: stamp.device.gpu().is_some() || engine::cuda::driver_present(),
        threads: args
            .threads
            .unwrap_or(stamp.device.cpu.logical_cores as usize),
        seed: args.seed.unwrap_or_else(time_seed),
        cubin_cache: gates::kernel_check::default_cache_dir(
            std::env::var_os("HOME").map(PathBuf::from),
        ),
        progress: Progress::default(),
    };
    let receipts = under(&root, &args.receipts);
    let mut flags = Vec::new();
    if args.quick {
        flags.push("--quick".to_owned());
    }
    if args.full {
        flags.push("--full".to_owned());
    }
    if !args.only.is_empty() {
        flags.push(format!("--only {}", args.only.join(",")));
    }
    println!(
        "harness gate on {} — commit {}{}, kernels {}",
        stamp.device.summary(),
        &stamp.build.commit[..stamp.build.commit.len().min(12)],
        if stamp.build.dirty { " (dirty)" } else { "" },
        &stamp.build.kernel_identity[..12]
    );
    let mut red = Vec::new();
    let (mut green, mut skipped) = (0, 0);
    let mut verdicts = Vec::new();
    let started = Instant::now();
    for g in &gates {
        let (o, wall) = run_one(g, &ctx);
        println!("{}", line(g.name, &o, wall));
        verdicts.push((g.name, o.verdict.clone()));
        match &o.verdict {
            Verdict::Green => green += 1,
            Verdict::Skipped { .. } => skipped += 1,
            Verdict::Red { failures } => {
                for f in failures.iter().skip(1) {
                    println!("{:<24} {:<8}           {f}", "", "");
                }
                red.push(g.name);
            }
        }
        if !args.no_receipt {
            append(&receipts, &gate_receipt(&stamp, g, &o, wall, &flags))
                .with_context(|| format!("writing the {} receipt", g.name))?;
        }
    }
    if !args.no_receipt {
        println!("receipts: {}", receipts.display());
    }
    let ran: Vec<(&str, &Verdict)> = verdicts.iter().map(|(n, v)| (*n, v)).collect();
    for l in left_out(&ran, args.quick, args.full) {
        println!("{l}");
    }
    println!(
        "{} gates in {:.1} s",
        gates.len(),
        started.elapsed().as_secs_f64()
    );
    if red.is_empty() {
        println!("ALL GREEN ({green} green, {skipped} skipped)");
        Ok(true)
    } else {
        println!(
            "FAILED: {} ({green} green, {skipped} skipped)",
            red.join(", ")
        );
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_honours_quick_and_only() {
        let all = battery();
        let names = |v: Vec<GateDef>| v.iter().map(|g| g.name).collect::<Vec<_>>();
        let every = names(select(&all, false, &[]).unwrap());
        assert!(every.contains(&"quant-golden") && every.contains(&"graph"));
        let quick = names(select(&all, true, &[]).unwrap());
        assert!(!quick.contains(&"graph") && quick.contains(&"quant-golden"));
        let only = names(select(&all, true, &["graph".into()]).unwrap());
        assert_eq!(only, vec!["graph"]);
        assert!(select(&all, false, &["nope".into()]).is_err());
    }

    #[test]
    fn what_a_run_left_out_is_said() {
        let (g, s) = (Verdict::Green, Verdict::skipped("no GPU here"));
        let ran = [("spec", &g), ("argmax", &s), ("graph", &s)];
        let out = left_out(&ran, false, false);
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(out[0].starts_with("skipped: argmax, graph"), "{out:?}");
        assert!(
            out[1].contains("spec ran its default size")
                && out[1].contains("harness gate --full")
                && out[1].contains(
                    "full size: n-gram K [1, 2, 3, 4, 5, 6, 7, 8] x 3 prompts x 128 tokens"
                ),
            "{out:?}"
        );
        assert!(left_out(&ran, true, false)[1].contains("spec ran its quick size"));
        assert_eq!(left_out(&ran, false, true).len(), 1);
        assert!(left_out(&[("spec", &g)], false, true).is_empty());
        assert!(left_out(&[("spec", &s)], false, false)[0].starts_with("skipped: spec"));
        assert!(section_line("spec", 12.34, "done (1.0 s)").contains("12.3s  done (1.0 s)"));
    }

    #[test]
    fn quick_and_full_conflict() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            gate: GateArgs,
        }
        assert!(Cli::try_parse_from(["h", "--quick", "--full"]).is_err());
        assert!(Cli::try_parse_from(["h", "--full"]).unwrap().gate.full);
    }

    #[test]
    fn a_red_gate_prints_its_first_failure() {
        let o = GateOutcome::new(
            Verdict::from_failures(vec!["Q4_K: 1 of 2048 values differ".into()]),
            vec!["summary".into()],
        );
        let l = line("quant-golden", &o, 0.5);
        assert!(l.contains("RED") && l.contains("Q4_K: 1 of"), "{l}");
    }
}
