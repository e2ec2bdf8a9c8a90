//! `harness report`: a hardware validation report in Markdown — device facts, build
//! identity, the verdict of every gate and every bench cell with its roofline fraction —
//! from the newest receipts measured on this device and on today's sources. It is written
//! to a file, ready to paste into `.github/ISSUE_TEMPLATE/hardware-validation.md`, and
//! leaves a `report` receipt row.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{Context, Result};
use gates::Verdict;
use gates::receipt::{Arm, Kind, Receipt, append};
use gates::stamp::Stamp;

use crate::board::select::load_all;
use crate::env::{EnvArgs, under};

#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// Where to write the Markdown.
    #[arg(long, default_value = "hardware-report.md")]
    pub out: PathBuf,
    /// Receipt file to append the report row to (relative to the root).
    #[arg(long, default_value = "research/report.jsonl")]
    pub receipts: PathBuf,
    /// Write no receipt.
    #[arg(long)]
    pub no_receipt: bool,
}

/// The device a receipt ran on, as the report matches it.
fn device_key(r: &gates::device::DeviceFacts) -> String {
    match r.gpu() {
        Some(g) => format!("gpu:{}", g.name),
        None => format!("cpu:{}", r.cpu.model),
    }
}

/// For each name, the newest receipt of `kind` on this device and today's sources.
fn newest<'a>(all: &'a [Receipt], stamp: &Stamp, kind: Kind) -> BTreeMap<String, &'a Receipt> {
    let dev = device_key(&stamp.device);
    let mut out: BTreeMap<String, &Receipt> = BTreeMap::new();
    for r in all {
        if r.kind != kind || !stamp.is_current(r) || device_key(&r.device) != dev {
            continue;
        }
        match out.get(&r.name) {
            Some(prev) if prev.time > r.time => {}
            _ => {
                out.insert(r.name.clone(), r);
            }
        }
    }
    out
}

fn verdict_text(v: &Verdict) -> String {
    match v {
        Verdict::Green => "green".into(),
        Verdict::Red { failures } => format!("**RED**: {}", failures.join("; ")),
        Verdict::Skipped { reason } => format!("skipped: {reason}"),
    }
}

fn arm_line(a: &Arm) -> String {
    match a.stats {
        Some(s) => format!(
            "{:.2} ({:.2} – {:.2}, N={})",
            s.median,
            s.min,
            s.max,
            a.samples.len()
        ),
        None => "—".into(),
    }
}

/// The report's Markdown and whether every gate that ran is green.
pub fn render(stamp: &Stamp, all: &[Receipt]) -> (String, Vec<String>) {
    let mut s = String::new();
    let d = &stamp.device;
    let b = &stamp.build;
    let _ = writeln!(s, "## Assay hardware validation report\n");
    let _ = writeln!(
        s,
        "Generated {} by `harness report` ({}).\n",
        stamp.time, b.harness
    );
    let _ = writeln!(s, "### Device\n");
    let _ = writeln!(s, "- OS: {}", d.os);
    let _ = writeln!(
        s,
        "- CPU: {} ({} logical cores)",
        d.cpu.model, d.cpu.logical_cores
    );
    if d.gpus.is_empty() {
        let _ = writeln!(s, "- GPU: none found (nvidia-smi reports no device)");
    }
    for g in &d.gpus {
        let clock = |v: Option<u32>| v.map(|x| format!("{x} MHz")).unwrap_or_else(|| "?".into());
        let _ = writeln!(
            s,
            "- GPU: {} — compute capability {}, driver {}, {:.1} GiB, SM clock {} (max {}), memory clock {} (max {})",
            g.name,
            g.compute_capability,
            g.driver,
            g.memory_bytes as f64 / f64::from(1u32 << 30),
            clock(g.sm_clock_mhz),
            clock(g.max_sm_clock_mhz),
            clock(g.mem_clock_mhz),
            clock(g.max_mem_clock_mhz)
        );
    }
    let _ = writeln!(s, "\n### Build\n");
    let _ = writeln!(
        s,
        "- commit: `{}`{}",
        b.commit,
        if b.dirty { " (dirty)" } else { "" }
    );
    let _ = writeln!(s, "- kernel identity: `{}`", b.kernel_identity);
    let _ = writeln!(s, "- engine identity: `{}`", b.engine_identity);
    let _ = writeln!(s, "\n### Gates\n");
    let _ = writeln!(
        s,
        "| gate | verdict | detail | receipt time |\n|---|---|---|---|"
    );
    let gates = newest(all, stamp, Kind::Gate);
    let mut red = Vec::new();
    for g in gates::battery() {
        match gates.get(g.name) {
            Some(r) => {
                if r.verdict.is_red() {
                    red.push(g.name.to_owned());
                }
                let detail = r.detail.first().cloned().unwrap_or_default();
                let _ = writeln!(
                    s,
                    "| {} | {} | {detail} | {} |",
                    g.name,
                    verdict_text(&r.verdict),
                    r.time
                );
            }
            None => {
                let _ = writeln!(s, "| {} | not run on this device and build | | |", g.name);
            }
        }
    }
    let _ = writeln!(s, "\n### Bench cells\n");
    let benches = newest(all, stamp, Kind::Bench);
    if benches.is_empty() {
        let _ = writeln!(
            s,
            "No bench receipt on this device and build (run `harness bench`)."
        );
    } else {
        let _ = writeln!(
            s,
            "| cell | model | arm | tok/s median (min – max, N) | limit tok/s | of limit | bandwidth |\n|---|---|---|---:|---:|---:|---|"
        );
        for (name, r) in &benches {
            let model = r.model.as_ref().map(|m| m.name.as_str()).unwrap_or("—");
            for a in &r.arms {
                let (limit, bw) = match &r.roofline {
                    Some(x) => (
                        format!("{:.1}", x.limit_tokens_per_s),
                        format!(
                            "{:.1} GB/s ({})",
                            x.bandwidth_bytes_per_s / 1e9,
                            x.bandwidth_method
                        ),
                    ),
                    None => ("—".into(), "—".into()),
                };
                let frac = a
                    .roofline_fraction
                    .map(|f| format!("{:.1}%", 100.0 * f))
                    .unwrap_or_else(|| "—".into());
                let _ = writeln!(
                    s,
                    "| {name} | {model} | {} | {} | {limit} | {frac} | {bw} |",
                    a.engine,
                    arm_line(a)
                );
            }
        }
    }
    let _ = writeln!(
        s,
        "\nReproduce: `harness gate && harness bench && harness report` on the same commit; the receipts are in `research/*.jsonl`."
    );
    (s, red)
}

pub fn run(env: &EnvArgs, args: &ReportArgs) -> Result<bool> {
    let root = env.root()?;
    let stamp = env.measurement_stamp(&root)?;
    let all = load_all(&root.join("research")).context("reading the receipts")?;
    let (md, red) = render(&stamp, &all);
    std::fs::write(&args.out, &md).with_context(|| format!("writing {}", args.out.display()))?;
    println!("wrote {}", args.out.display());
    if !args.no_receipt {
        let failures: Vec<String> = red.iter().map(|g| format!("gate {g} is red")).collect();
        let mut r = stamp.receipt(
            Kind::Report,
            "hardware-report",
            Verdict::from_failures(failures),
        );
        r.arms = vec![Arm {
            name: "assay".into(),
            engine: "harness-report".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            flags: vec![format!("--out {}", args.out.display())],
            unit: None,
            samples: vec![],
            stats: None,
            roofline_fraction: None,
        }];
        r.detail = vec![format!("report written to {}", args.out.display())];
        append(&under(&root, &args.receipts), &r).context("writing the report receipt")?;
    }
    Ok(red.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gates::device::{CpuFacts, DeviceFacts};
    use gates::receipt::Build;

    fn stamp(kernel: &str) -> Stamp {
        Stamp {
            time: "2026-11-29T10:00:00Z".into(),
            build: Build {
                commit: "unknown".into(),
                dirty: true,
                kernel_identity: kernel.repeat(64),
                engine_identity: "b".repeat(64),
                harness: "0.1.0 test".into(),
            },
            device: DeviceFacts {
                os: "linux".into(),
                cpu: CpuFacts {
                    model: "Test CPU".into(),
                    logical_cores: 2,
                },
                gpus: vec![],
            },
        }
    }

    #[test]
    fn the_report_shows_current_gates_and_flags_red_ones() {
        let now = stamp("a");
        let mut green = now.receipt(Kind::Gate, "quant-golden", Verdict::Green);
        green.detail = vec!["15 formats exact".into()];
        let red = now.receipt(
            Kind::Gate,
            "model-files",
            Verdict::from_failures(vec!["sha256 differs".into()]),
        );
        // A receipt on other kernels is not this build's.
        let old = stamp("c").receipt(Kind::Gate, "kernel-check", Verdict::Green);
        let (md, reds) = render(&now, &[green, red, old]);
        assert_eq!(reds, vec!["model-files".to_owned()]);
        assert!(
            md.contains("| quant-golden | green | 15 formats exact |"),
            "{md}"
        );
        assert!(md.contains("**RED**: sha256 differs"));
        assert!(md.contains("| kernel-check | not run on this device and build |"));
        assert!(md.contains("Test CPU (2 logical cores)"));
        assert!(md.contains("No bench receipt"));
    }
}
