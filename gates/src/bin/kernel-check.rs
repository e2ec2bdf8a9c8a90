//! `kernel-check`: run kernel-check on this machine's GPU and print the report.
//!
//! Usage: `kernel-check [--seed N] [--cubin-cache DIR | --no-cache] [--json FILE]`.
//! The seed defaults to the current time (printed, so a red run can be replayed); the cubin
//! cache to `~/.cache/assay/cubins`. Exit status: 0 all green, 1 any failure, 2 skipped
//! (no GPU / no NVRTC here), 3 bad arguments. `harness gate` runs the same function
//! (`gates::kernel_check::run`) as its `kernel-check` section.

use gates::Verdict;
use gates::kernel_check::{KernelCheckConfig, default_cache_dir, run};
use std::path::PathBuf;
use std::process::ExitCode;

fn usage(msg: &str) -> ExitCode {
    eprintln!(
        "kernel-check: {msg}\nusage: kernel-check [--seed N] [--cubin-cache DIR | --no-cache] [--json FILE]"
    );
    ExitCode::from(3)
}

fn main() -> ExitCode {
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    let mut cache = default_cache_dir(std::env::var_os("HOME").map(PathBuf::from));
    let mut json: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seed" => match args.next().and_then(|v| v.parse().ok()) {
                Some(v) => seed = v,
                None => return usage("--seed needs an integer"),
            },
            "--cubin-cache" => match args.next() {
                Some(v) => cache = Some(PathBuf::from(v)),
                None => return usage("--cubin-cache needs a directory"),
            },
            "--no-cache" => cache = None,
            "--json" => match args.next() {
                Some(v) => json = Some(PathBuf::from(v)),
                None => return usage("--json needs a file"),
            },
            "-h" | "--help" => return usage("help"),
            other => return usage(&format!("unknown argument {other}")),
        }
    }
    let mut cfg = KernelCheckConfig {
        seed,
        ..Default::default()
    };
    cfg.cuda.cubin_cache_dir = cache;
    let t0 = std::time::Instant::now();
    let report = run(&cfg);
    print!("{}", report.render());
    println!("kernel-check took {:.2}s", t0.elapsed().as_secs_f64());
    if let Some(path) = json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => {
                if let Err(e) = std::fs::write(&path, s) {
                    eprintln!("kernel-check: cannot write {}: {e}", path.display());
                    return ExitCode::from(1);
                }
            }
            Err(e) => {
                eprintln!("kernel-check: cannot serialize the report: {e}");
                return ExitCode::from(1);
            }
        }
    }
    match report.verdict {
        Verdict::Green => ExitCode::SUCCESS,
        Verdict::Red { .. } => ExitCode::from(1),
        Verdict::Skipped { .. } => ExitCode::from(2),
    }
}
