//! `harness bench`: run the cells of `boards/*.toml` on the hardware present. Warm-up runs
//! are discarded, N >= 5 timed runs are kept raw with their median / min / max, and every
//! decode cell records its physical limit (bytes per token over the bandwidth measured in
//! this run) and the achieved fraction. One receipt row per cell (`research/bench.jsonl`).
//!
//! Files: [`cells`] (board definitions), [`roofline`] (bytes per token, bandwidth),
//! [`runner`] (the CPU reference arm), [`gpu`] (the CUDA arm, device bandwidth).

pub mod cells;
pub mod gpu;
pub mod roofline;
pub mod runner;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use engine::model_file::GgufModel;
use gates::Verdict;
use gates::model_facts::model_facts;
use gates::receipt::{Arm, Kind, Receipt, Stats, Workload, append};
use gates::stamp::Stamp;

use crate::env::{EnvArgs, under};
use cells::{Cell, DeviceKind, Mode, load_boards};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Only the cells of this board.
    #[arg(long)]
    pub board: Option<String>,
    /// Only these cells (comma-separated ids).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Timed runs per cell (at least 5; default: the cell's).
    #[arg(long)]
    pub runs: Option<usize>,
    /// Receipt file to append to (relative to the root).
    #[arg(long, default_value = "research/bench.jsonl")]
    pub receipts: PathBuf,
    /// Write no receipt.
    #[arg(long)]
    pub no_receipt: bool,
    /// CPU threads for the reference executor (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Bytes copied to measure host bandwidth (CPU cells).
    #[arg(long, default_value_t = 512 << 20)]
    pub memcpy_bytes: usize,
    /// Bytes copied device-to-device to measure GPU bandwidth (GPU cells).
    #[arg(long, default_value_t = 4 << 30)]
    pub copy_bytes: usize,
}

/// The model file of a cell.
fn model_path(env: &EnvArgs, cell: &Cell) -> Result<(String, PathBuf)> {
    let dir = env.models_dir()?;
    if let Some(name) = &cell.model {
        let p =
            engine::catalog::resolve(name, &dir).with_context(|| format!("cell {}", cell.id))?;
        return Ok((name.clone(), p));
    }
    let Some(s) = &cell.synth else {
        bail!("cell {} names no model", cell.id);
    };
    let p = dir.join("synth").join(s.file_name());
    if !p.exists() {
        println!("{:<36} making {} (harness synth)", cell.id, p.display());
        crate::synth::run(
            env,
            &crate::synth::SynthArgs {
                arch: <crate::synth::shapes::Arch as clap::ValueEnum>::from_str(&s.arch, true)
                    .map_err(anyhow::Error::msg)?,
                shape: s.shape.clone(),
                quant: s.quant.clone(),
                seed: s.seed,
                out: p.clone(),
                donor: None,
                no_safetensors: true,
            },
        )
        .with_context(|| format!("cell {}: making its synthetic checkpoint", cell.id))?;
    }
    Ok((s.file_name().trim_end_matches(".gguf").to_owned(), p))
}

/// Why a cell cannot run here, if it cannot.
fn skip_reason(cell: &Cell, gpu: bool) -> Option<String> {
    (cell.device == DeviceKind::Gpu && !gpu).then(|| "no GPU (nvidia-smi reports no device)".into())
}

/// What a bench run opens once and shares between cells.
#[derive(Default)]
struct Shared {
    gpu: Option<std::sync::Arc<engine::cuda::Gpu>>,
    host_bw: Option<(f64, String)>,
    gpu_bw: Option<(f64, String)>,
}

/// Run one cell and make its receipt.
fn run_cell(
    env: &EnvArgs,
    args: &BenchArgs,
    stamp: &Stamp,
    board: &str,
    cell: &Cell,
    shared: &mut Shared,
) -> Result<Receipt> {
    let t0 = Instant::now();
    let (name, path) = model_path(env, cell)?;
    let model = GgufModel::open(&path).with_context(|| format!("opening {}", path.display()))?;
    let facts = model_facts(&name, &path, &model).context("hashing the model")?;
    let threads = args
        .threads
        .unwrap_or(stamp.device.cpu.logical_cores as usize);
    let runs = args.runs.unwrap_or(cell.runs).max(5);
    let measured = match cell.device {
        DeviceKind::Cpu => runner::measure_cpu(&path, cell, threads, runs)?,
        DeviceKind::Gpu => {
            if shared.gpu.is_none() {
                let cache = gates::kernel_check::default_cache_dir(
                    std::env::var_os("HOME").map(PathBuf::from),
                );
                shared.gpu = Some(gpu::open_gpu(cache)?);
            }
            let Some(g) = shared.gpu.clone() else {
                bail!("no GPU handle");
            };
            if shared.gpu_bw.is_none() && cell.mode == Mode::Decode {
                shared.gpu_bw = Some(gpu::d2d_bandwidth(&g, args.copy_bytes, 5)?);
            }
            gpu::measure_gpu(&g, &path, cell, runs)?
        }
    };
    let stats = Stats::of(&measured.samples);
    let mut r = stamp.receipt(Kind::Bench, &cell.id, Verdict::Green);
    r.model = Some(facts);
    r.workload = Workload {
        board: Some(board.to_owned()),
        mode: Some(cell.mode.name().into()),
        prompt_id: Some(runner::PROMPT_ID.into()),
        prompt_tokens: Some(cell.prompt_tokens as u64),
        gen_tokens: Some(cell.gen_tokens as u64),
        batch: Some(cell.batch as u64),
        k: None,
        sampling: Some("greedy".into()),
        threads: Some(threads as u64),
    };
    if cell.mode == Mode::Decode {
        let (bw, method) = match cell.device {
            DeviceKind::Cpu => shared
                .host_bw
                .get_or_insert_with(|| roofline::memcpy_bandwidth(args.memcpy_bytes, 5))
                .clone(),
            DeviceKind::Gpu => shared
                .gpu_bw
                .clone()
                .context("device bandwidth not measured")?,
        };
        let ctx = cell.prompt_tokens as f64 + cell.gen_tokens as f64 / 2.0;
        let bpt = roofline::bytes_per_token(&model, ctx, measured.kv_bytes);
        r.roofline = Some(roofline::roofline(bpt, bw, method));
    }
    let fraction = match (&r.roofline, stats) {
        (Some(roof), Some(s)) => Some(s.median / roof.limit_tokens_per_s),
        _ => None,
    };
    r.arms = vec![Arm {
        name: "assay".into(),
        engine: measured.engine.clone(),
        version: env!("CARGO_PKG_VERSION").into(),
        flags: measured.flags.clone(),
        unit: Some("tok/s".into()),
        samples: measured.samples.clone(),
        stats,
        roofline_fraction: fraction,
    }];
    r.detail = measured.detail.clone();
    let unwired: Vec<&str> = cell
        .arms
        .iter()
        .map(String::as_str)
        .filter(|a| *a != "assay")
        .collect();
    if !unwired.is_empty() {
        r.detail.push(format!(
            "arm(s) {} of this cell not wired yet: assay measured alone",
            unwired.join(", ")
        ));
    }
    r.wall_s = (t0.elapsed().as_secs_f64() * 1000.0).round() / 1000.0;
    Ok(r)
}

/// One printed line for a measured cell.
pub fn line(r: &Receipt) -> String {
    let mut s = format!("{:<36}", r.name);
    for a in &r.arms {
        if let Some(st) = a.stats {
            s += &format!(
                " {} {:.2} tok/s (min {:.2}, max {:.2}, N={})",
                a.name,
                st.median,
                st.min,
                st.max,
                a.samples.len()
            );
        }
        if let (Some(f), Some(roof)) = (a.roofline_fraction, &r.roofline) {
            s += &format!(
                ", {:.1}% of the {:.1} tok/s limit ({:.0} MB/token at {:.1} GB/s)",
                100.0 * f,
                roof.limit_tokens_per_s,
                roof.bytes_per_token / 1e6,
                roof.bandwidth_bytes_per_s / 1e9
            );
        }
    }
    s
}

pub fn run(env: &EnvArgs, args: &BenchArgs) -> Result<bool> {
    let root = env.root()?;
    let boards = load_boards(&root.join("boards"))?;
    if let Some(b) = &args.board
        && !boards.iter().any(|x| &x.name == b)
    {
        bail!("no board {b}");
    }
    let stamp = env.stamp(&root)?;
    let gpu = stamp.device.gpu().is_some();
    let receipts = under(&root, &args.receipts);
    let mut shared = Shared::default();
    let (mut ran, mut failed) = (0, 0);
    for b in &boards {
        if args.board.as_ref().is_some_and(|n| n != &b.name) {
            continue;
        }
        for cell in &b.cells {
            if !args.only.is_empty() && !args.only.contains(&cell.id) {
                continue;
            }
            if let Some(why) = skip_reason(cell, gpu) {
                println!("{:<36} skipped: {why}", cell.id);
                continue;
            }
            match run_cell(env, args, &stamp, &b.name, cell, &mut shared) {
                Ok(r) => {
                    println!("{}", line(&r));
                    if !args.no_receipt {
                        append(&receipts, &r).context("writing the receipt")?;
                    }
                    ran += 1;
                }
                Err(e) => {
                    println!("{:<36} FAILED: {e:#}", cell.id);
                    failed += 1;
                }
            }
        }
    }
    if ran > 0 && !args.no_receipt {
        println!("receipts: {}", receipts.display());
    }
    println!("{ran} cell(s) measured, {failed} failed");
    Ok(failed == 0)
}
