//! `kernel-check`: run kernel-check on this machine's GPU and print the report.
//!
//! Usage: `kernel-check [--seed N] [--cubin-cache DIR | --no-cache] [--json FILE]
//! [--only GROUP,...]` (groups: `gates::kernel_check::GROUPS`, e.g. `--only mask,sample`).
//! The seed defaults to the current time (printed, so a red run can be replayed); the cubin
//! cache to `~/.cache/assay/cubins`. Exit status: 0 all green, 1 any failure, 2 skipped
//! (no GPU / no NVRTC here), 3 bad arguments. `harness gate` runs the same function
//! (`gates::kernel_check::run`) as its `kernel-check` section.
//!
//! `kernel-check --cubin-cache DIR --precompile ARCH:DRIVER` (e.g. `sm_90a:13000`) checks
//! nothing: it fills DIR with every kernel family compiled for ARCH under the cache key of
//! a machine whose CUDA driver reports version DRIVER, without a GPU (NVRTC only). Carried
//! to the GPU machine, the cache saves its NVRTC time (seen on the H200, driver 580.159 =
//! 13000: every module loaded `Cached`, kernel-check 3.3 s instead of a minute or more).

use gates::Verdict;
use gates::kernel_check::{KernelCheckConfig, default_cache_dir, run};
use std::path::PathBuf;
use std::process::ExitCode;

fn usage(msg: &str) -> ExitCode {
    eprintln!(
        "kernel-check: {msg}\nusage: kernel-check [--seed N] [--cubin-cache DIR | --no-cache] [--json FILE] [--only GROUP,...]\n       kernel-check --cubin-cache DIR --precompile ARCH:DRIVER"
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
    let mut precompile: Option<(String, i32)> = None;
    let mut only: Vec<String> = Vec::new();
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
            "--only" => match args.next() {
                Some(v) => only.extend(v.split(',').filter(|g| !g.is_empty()).map(String::from)),
                None => return usage("--only needs a comma-separated list of case groups"),
            },
            "--json" => match args.next() {
                Some(v) => json = Some(PathBuf::from(v)),
                None => return usage("--json needs a file"),
            },
            "--precompile" => {
                match args
                    .next()
                    .as_deref()
                    .and_then(|v| v.split_once(':'))
                    .and_then(|(arch, drv)| Some((arch.to_string(), drv.parse::<i32>().ok()?)))
                {
                    Some(v) => precompile = Some(v),
                    None => return usage("--precompile needs ARCH:DRIVER, e.g. sm_90a:13000"),
                }
            }
            "-h" | "--help" => return usage("help"),
            other => return usage(&format!("unknown argument {other}")),
        }
    }
    if let Some((arch, driver)) = precompile {
        let Some(dir) = cache else {
            return usage("--precompile needs --cubin-cache DIR");
        };
        return precompile_all(&dir, &arch, driver);
    }
    if let Some(g) = only
        .iter()
        .find(|g| !gates::kernel_check::GROUPS.contains(&g.as_str()))
    {
        return usage(&format!(
            "unknown case group {g} (groups: {})",
            gates::kernel_check::GROUPS.join(", ")
        ));
    }
    let mut cfg = KernelCheckConfig {
        seed,
        only,
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

/// Compile every kernel family for `arch` into the cubin cache `dir`, keyed for a driver
/// of version `driver` (see the module doc).
fn precompile_all(dir: &std::path::Path, arch: &str, driver: i32) -> ExitCode {
    use engine::cuda::nvrtc::{CubinCache, nvrtc_available};
    use engine::cuda::sources::Family;
    if !nvrtc_available() {
        println!("SKIPPED: libnvrtc cannot be loaded here");
        return ExitCode::from(2);
    }
    let cache = CubinCache::new(Some(dir.to_path_buf()));
    let mut failed = false;
    for family in Family::ALL {
        let t0 = std::time::Instant::now();
        match cache.get_or_compile(family, arch, driver) {
            Ok((cubin, origin)) => println!(
                "{:<16} {arch} driver {driver}: {:?}, {} bytes, {:.1}s",
                family.file(),
                origin,
                cubin.len(),
                t0.elapsed().as_secs_f64()
            ),
            Err(e) => {
                failed = true;
                println!("FAIL {} {arch}: {e}", family.file());
            }
        }
    }
    if failed {
        ExitCode::from(1)
    } else {
        println!(
            "cubin cache {} filled for {arch}, driver {driver}",
            dir.display()
        );
        ExitCode::SUCCESS
    }
}
