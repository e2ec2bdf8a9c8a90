//! `harness bench`: run the cells of `boards/*.toml` on the hardware present. Warm-up runs
//! are discarded, N >= 5 timed runs are kept raw with their median / min / max, and every
//! decode cell records its physical limit (bytes per token over the bandwidth measured in
//! this run) and the achieved fraction. One receipt row per cell (`research/bench.jsonl`).
//!
//! A cell with several arms (our engine, llama.cpp) times them one at a time in the same
//! run, interleaved ([`arms`]), and its receipt holds every arm's raw samples and roofline
//! fraction against the same limit.
//!
//! A prefill cell on the GPU also times the bf16 GEMM rate of its model's linear-layer
//! shapes after its arms, in the same run ([`gemm_ref`], torch), and records it with the
//! issue's target (half that rate over 2 x params FLOPs per token) in the same receipt.
//!
//! Files: [`cells`] (board definitions), [`roofline`] (bytes per token, bandwidth),
//! [`arms`] (arm selection, interleaving), [`runner`] (the CPU reference arm), [`gpu`]
//! (the CUDA arm, device bandwidth), [`gemm_ref`] (the bf16 GEMM reference of prefill
//! cells), [`llamacpp`] (the llama.cpp arm), [`llama_server`]
//! (llama-server start / readiness / stop, for pairings), [`serve_load`] (`assay serve`
//! under concurrent streamed load: TTFT, per-stream and aggregate tok/s).

pub mod arms;
pub mod cells;
pub mod gemm_ref;
pub mod gpu;
pub mod llamacpp;
// llama-server as the competitor of `harness pair` (issue 12); parts of it are used only there.
#[allow(dead_code)]
pub mod llama_server;
pub mod roofline;
pub mod runner;
pub mod serve_load;
pub mod spec_cells;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use engine::model_file::GgufModel;
use gates::Verdict;
use gates::model_facts::model_facts;
use gates::receipt::{Arm, Kind, Receipt, Stats, Workload, append};
use gates::stamp::Stamp;

use crate::env::{EnvArgs, under};
use arms::{ArmKind, ArmRun, Interleave};
use cells::{Cell, DeviceKind, Mode, load_boards};
use runner::Measured;

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
    /// Only these arms of each cell (comma-separated: assay, llama.cpp; default: all).
    #[arg(long, value_delimiter = ',')]
    pub arms: Vec<String>,
    /// How the arms' timed runs alternate: `rep` (A B A B, one llama-bench call per run)
    /// or `block` (all runs of each arm in one go: one llama-bench call per cell).
    #[arg(long, value_enum, default_value = "rep")]
    pub interleave: Interleave,
    /// Folder of the llama.cpp builds (`cpu/`, `cuda/`) that competitors/llama.cpp/build
    /// made (default: ~/.cache/assay/llama.cpp).
    #[arg(long, env = "ASSAY_LLAMA_CPP_HOME")]
    pub llama_cpp_home: Option<PathBuf>,
    /// Time a cell without an arm whose engine is not built here (the receipt says so),
    /// instead of failing the cell.
    #[arg(long)]
    pub skip_missing_arms: bool,
    /// Longest a competitor's call may run, in seconds.
    #[arg(long, default_value_t = 900)]
    pub arm_timeout_s: u64,
    /// The `assay` binary serve cells start (default: `assay` next to this harness).
    #[arg(long, env = "ASSAY_BIN")]
    pub assay_bin: Option<PathBuf>,
    /// Prefill cells on the GPU: do not time the bf16 GEMM reference after the arms (the
    /// receipt records it as absent, so the cell has no target).
    #[arg(long)]
    pub no_gemm_ref: bool,
    /// The Python (with torch and CUDA) that times the bf16 GEMM reference.
    #[arg(long, env = "ASSAY_TORCH_PYTHON", default_value = "python3")]
    pub torch_python: PathBuf,
}

/// Our engine on the cell's device.
enum Ours {
    Cpu(Box<runner::CpuArm>),
    /// A prompt text and/or speculative decoding (issue #10), CPU reference.
    Text(Box<spec_cells::TextArm>),
    Gpu(Box<gpu::GpuArm>),
    /// A prompt text and/or speculative decoding (issue #10), CUDA decoder.
    CudaText(Box<spec_cells::CudaTextArm>),
}

impl Ours {
    fn measured(&self, samples: Vec<f64>) -> Measured {
        match self {
            Ours::Cpu(a) => a.measured(samples),
            Ours::Text(a) => a.measured(samples),
            Ours::Gpu(a) => a.measured(samples),
            Ours::CudaText(a) => a.measured(samples),
        }
    }
}

impl ArmRun for Ours {
    fn run(&mut self, n: usize) -> Result<Vec<f64>> {
        match self {
            Ours::Cpu(a) => a.run(n),
            Ours::Text(a) => a.run(n),
            Ours::Gpu(a) => a.run(n),
            Ours::CudaText(a) => a.run(n),
        }
    }
}

/// The model file of a cell.
pub(crate) fn model_path(env: &EnvArgs, cell: &Cell) -> Result<(String, PathBuf)> {
    let dir = env.models_dir()?;
    if let Some(name) = &cell.model {
        let p =
            engine::catalog::resolve(name, &dir).with_context(|| format!("cell {}", cell.id))?;
        return Ok((name.clone(), p));
    }
    let Some(s) = &cell.synth else {
        bail!("cell {} names no model", cell.id);
    };
    synth_path(env, &cell.id, s)
}

/// A synthetic checkpoint in the models folder's `synth/` (made by `harness synth` when
/// missing): its name and path.
fn synth_path(env: &EnvArgs, id: &str, s: &cells::SynthRef) -> Result<(String, PathBuf)> {
    let dir = env.models_dir()?;
    let p = dir.join("synth").join(s.file_name());
    if !p.exists() {
        println!("{:<36} making {} (harness synth)", id, p.display());
        s.make(env, &p, false)
            .with_context(|| format!("cell {id}: making its synthetic checkpoint"))?;
    }
    Ok((s.file_name().trim_end_matches(".gguf").to_owned(), p))
}

/// The draft model of a `spec = { proposer = "draft:..." }` cell: `draft:synth:<QUANT>` is
/// the cell's own synthetic checkpoint (same shape and seed) in another format, else a
/// catalog name or path.
pub(crate) fn draft_path(env: &EnvArgs, cell: &Cell) -> Result<Option<PathBuf>> {
    let Some(name) = cell
        .spec
        .as_ref()
        .and_then(|s| s.proposer.strip_prefix("draft:"))
    else {
        return Ok(None);
    };
    if let Some(quant) = name.strip_prefix("synth:") {
        let Some(s) = &cell.synth else {
            bail!("cell {}: draft:synth:{quant} needs a synth cell", cell.id);
        };
        let d = cells::SynthRef {
            quant: quant.to_owned(),
            ..s.clone()
        };
        return Ok(Some(synth_path(env, &cell.id, &d)?.1));
    }
    Ok(Some(resolve_draft(name, &env.models_dir()?)?))
}

/// A draft named by a catalog name or path, or `requant:<FORMAT>:<model>` (that model's
/// matrices re-quantized, made in the models folder on first use: crate::requant).
pub(crate) fn resolve_draft(name: &str, models_dir: &Path) -> Result<PathBuf> {
    match name.strip_prefix("requant:") {
        Some(spec) => crate::requant::resolve(spec, models_dir),
        None => Ok(engine::catalog::resolve(name, models_dir)?),
    }
}

/// A catalog model (the cell's, or its draft's) that is not in the models folder: GPU
/// speculative cells are skipped then (their checkpoints are staged by hand).
fn missing_model(env: &EnvArgs, cell: &Cell) -> Option<String> {
    if cell.device != DeviceKind::Gpu {
        return None;
    }
    let dir = env.models_dir().ok()?;
    let draft = cell
        .spec
        .as_ref()
        .and_then(|s| s.proposer.strip_prefix("draft:"))
        .filter(|d| !d.starts_with("synth:"))
        .map(|d| match d.strip_prefix("requant:") {
            // requant:<FORMAT>:<model>: the source model must be there.
            Some(r) => r.split_once(':').map_or(r, |(_, m)| m),
            None => d,
        });
    for name in cell.model.iter().map(String::as_str).chain(draft) {
        if engine::catalog::resolve(name, &dir).is_err() {
            return Some(format!(
                "model {name} is not in {} (stage it: tools/fetch-models)",
                dir.display()
            ));
        }
    }
    None
}

/// Why a cell cannot run here, if it cannot.
fn skip_reason(cell: &Cell, gpu: bool) -> Option<String> {
    if !cell.vs.is_empty() {
        return Some(format!(
            "a pairing cell (harness pair --vs {} --cells <its board>)",
            cell.vs.join("|")
        ));
    }
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
    let kinds = arms::select(&cell.arms, &args.arms)?;
    let (name, path) = model_path(env, cell)?;
    let model = GgufModel::open(&path).with_context(|| format!("opening {}", path.display()))?;
    let facts = model_facts(&name, &path, &model).context("hashing the model")?;
    let threads = args
        .threads
        .unwrap_or(stamp.device.cpu.logical_cores as usize);
    let runs = args.runs.unwrap_or(cell.runs).max(5);
    if cell.mode == Mode::Serve {
        // A prompt file's ids (the same prompt for every request; no logits width needed).
        let text = match cell.prompt_file {
            Some(_) => Some(spec_cells::model_prompt(&env.root()?, &model, 0, cell)?),
            None => None,
        };
        return serve_cell(args, stamp, board, cell, &path, text, facts, runs, t0);
    }
    let mut notes = Vec::new();
    // The competitor first: a missing build fails (or skips) before our engine loads.
    let mut llama = None;
    if kinds.contains(&ArmKind::LlamaCpp) {
        let home = args
            .llama_cpp_home
            .clone()
            .or_else(llamacpp::default_home)
            .context("no llama.cpp home (HOME unset; pass --llama-cpp-home)")?;
        match llamacpp::locate(&home, cell.device) {
            Ok(i) => {
                llama = Some(llamacpp::LlamaArm::new(
                    i,
                    cell,
                    &path,
                    threads,
                    Duration::from_secs(args.arm_timeout_s),
                ))
            }
            Err(e) if args.skip_missing_arms => {
                notes.push(format!("arm llama.cpp skipped (not measured): {e:#}"));
            }
            Err(e) => return Err(e.context(format!("cell {}: arm llama.cpp", cell.id))),
        }
    }
    if cell.device == DeviceKind::Gpu && shared.gpu.is_none() {
        let cache =
            gates::kernel_check::default_cache_dir(std::env::var_os("HOME").map(PathBuf::from));
        shared.gpu = Some(gpu::open_gpu(cache)?);
    }
    if cell.device == DeviceKind::Gpu && shared.gpu_bw.is_none() && cell.mode == Mode::Decode {
        let Some(g) = shared.gpu.clone() else {
            bail!("no GPU handle");
        };
        shared.gpu_bw = Some(gpu::d2d_bandwidth(&g, args.copy_bytes, 5)?);
    }
    let mut ours = match (kinds.contains(&ArmKind::Assay), cell.device) {
        (false, _) => None,
        (true, DeviceKind::Cpu) if cell.prompt_file.is_some() || cell.spec.is_some() => {
            Some(Ours::Text(Box::new(spec_cells::TextArm::new(
                &env.root()?,
                &env.models_dir()?,
                &path,
                cell,
                threads,
            )?)))
        }
        (true, DeviceKind::Cpu) => Some(Ours::Cpu(Box::new(runner::CpuArm::new(
            &path, cell, threads,
        )?))),
        (true, DeviceKind::Gpu) if cell.prompt_file.is_some() || cell.spec.is_some() => {
            let Some(g) = shared.gpu.clone() else {
                bail!("no GPU handle");
            };
            Some(Ours::CudaText(Box::new(spec_cells::CudaTextArm::new(
                &g,
                &env.root()?,
                &path,
                draft_path(env, cell)?.as_deref(),
                cell,
            )?)))
        }
        (true, DeviceKind::Gpu) => {
            let Some(g) = shared.gpu.clone() else {
                bail!("no GPU handle");
            };
            Some(Ours::Gpu(Box::new(gpu::GpuArm::new(
                &g,
                &path,
                cell,
                &env.root()?,
            )?)))
        }
    };
    let mut list: Vec<&mut dyn ArmRun> = Vec::new();
    if let Some(o) = ours.as_mut() {
        list.push(o);
    }
    if let Some(l) = llama.as_mut() {
        list.push(l);
    }
    if list.is_empty() {
        bail!("cell {}: no arm left to run", cell.id);
    }
    let n_arms = list.len();
    let mut samples = arms::interleave(&mut list, cell.warmup, runs, args.interleave)?;
    drop(list);
    if n_arms > 1 {
        notes.push(format!(
            "arms timed one at a time in this run: {} warm-up run(s) of each discarded, then {}",
            cell.warmup,
            match args.interleave {
                Interleave::Rep => format!(
                    "A B A B ... ({runs} rounds; llama-bench cannot pause between its \
                     repetitions, so each llama.cpp run is its own call with -r 1)"
                ),
                Interleave::Block => format!("all {runs} runs of each arm in turn (block)"),
            }
        ));
    }
    let mut measured: Vec<(String, Measured)> = Vec::new();
    if let Some(o) = &ours {
        measured.push((ArmKind::Assay.name().into(), o.measured(samples.remove(0))));
    }
    if let Some(l) = &llama {
        let reps = match args.interleave {
            Interleave::Rep => 1,
            Interleave::Block => runs,
        };
        let mut flags = l.flags(reps);
        flags.push(format!("interleave={}", args.interleave.name()));
        measured.push((
            ArmKind::LlamaCpp.name().into(),
            Measured {
                samples: samples.remove(0),
                engine: "llama-bench".into(),
                version: l.install.info.version(),
                flags,
                detail: l.detail(),
                kv_bytes: l.kv_bytes(),
            },
        ));
    }
    // The arms are done: free their device memory before the GEMM reference runs.
    drop(ours);
    drop(llama);
    let gemm_ref = (cell.mode == Mode::Prefill && cell.device == DeviceKind::Gpu).then(|| {
        let req = gemm_ref::Request::of_model(model.header(), cell.prompt_tokens as u64, runs);
        if args.no_gemm_ref {
            req.absent("not measured: --no-gemm-ref".into())
        } else {
            req.measure_cached(
                args.torch_python.as_os_str(),
                Duration::from_secs(args.arm_timeout_s),
            )
        }
    });
    let mut r = stamp.receipt(Kind::Bench, &cell.id, Verdict::Green);
    r.target_tok_s = gemm_ref.as_ref().and_then(gemm_ref::target);
    r.gemm_ref = gemm_ref;
    r.model = Some(facts);
    r.workload = Workload {
        board: Some(board.to_owned()),
        mode: Some(cell.mode.name().into()),
        prompt_id: Some(cell.prompt_file.clone().unwrap_or(runner::PROMPT_ID.into())),
        prompt_tokens: Some(cell.prompt_tokens as u64),
        gen_tokens: Some(cell.gen_tokens as u64),
        batch: Some(cell.batch as u64),
        k: cell.spec.as_ref().map(|s| s.k as u64),
        sampling: Some(match &cell.json_schema {
            Some(f) => format!("greedy, json_schema {f}"),
            None => "greedy".into(),
        }),
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
        // Both engines keep an f16 KV cache here; the first arm's is the one charged.
        let kv_bytes = measured.first().map_or(2.0, |(_, m)| m.kv_bytes);
        let mut bpt = roofline::bytes_per_token(&model, ctx, kv_bytes);
        if cell.batch > 1 {
            // A batched step reads the weights once for all its sequences and each
            // sequence's own KV cache.
            let weights = roofline::bytes_per_token(&model, ctx, 0.0);
            bpt = weights / cell.batch as f64 + (bpt - weights);
        }
        r.roofline = Some(roofline::roofline(bpt, bw, method));
    }
    for (arm, m) in measured {
        let stats = Stats::of(&m.samples);
        let fraction = match (&r.roofline, stats) {
            (Some(roof), Some(s)) => Some(s.median / roof.limit_tokens_per_s),
            _ => None,
        };
        r.detail.extend(m.detail.iter().map(|d| {
            if arm == ArmKind::Assay.name() {
                d.clone()
            } else {
                format!("[{arm}] {d}")
            }
        }));
        r.arms.push(Arm {
            name: arm,
            engine: m.engine,
            version: m.version,
            flags: m.flags,
            unit: Some("tok/s".into()),
            samples: m.samples,
            stats,
            roofline_fraction: fraction,
        });
    }
    r.detail.extend(notes);
    if let Ok(l) = std::fs::read_to_string("/proc/loadavg") {
        // Other processes on a shared machine move CPU numbers: say how busy it was.
        let l: Vec<&str> = l.split_whitespace().take(3).collect();
        r.detail.push(format!(
            "host load average at the end of the cell (1, 5, 15 min): {}",
            l.join(", ")
        ));
    }
    r.wall_s = (t0.elapsed().as_secs_f64() * 1000.0).round() / 1000.0;
    Ok(r)
}

/// A serve cell: `assay serve` (CUDA on a GPU cell, else CPU) on the cell's model, loaded
/// by `batch` concurrent streams ([`serve_load`]), with the cell's prompt file (`text`) or
/// distinct ids, and `assay serve --spec` for a `spec` cell (n-gram lookup; the receipt
/// then carries the server's speculation counters). Arms: aggregate tok/s per wave,
/// per-stream decode tok/s and TTFT (ms) per request.
#[allow(clippy::too_many_arguments)]
fn serve_cell(
    args: &BenchArgs,
    stamp: &Stamp,
    board: &str,
    cell: &Cell,
    path: &std::path::Path,
    text: Option<Vec<u32>>,
    facts: gates::receipt::ModelFacts,
    runs: usize,
    t0: Instant,
) -> Result<Receipt> {
    let bin = assay_bin(args.assay_bin.as_ref())?;
    let backend = match cell.device {
        DeviceKind::Gpu => "cuda",
        DeviceKind::Cpu => "cpu",
    };
    let mut flags =
        serve_load::serve_flags(backend, cell.prompt_tokens, cell.gen_tokens, cell.batch);
    flags.extend(cell.serve_flags.iter().cloned());
    if let Some(sp) = &cell.spec {
        flags.extend(serve_load::spec_flags(sp, None)?);
    }
    if let Some(t) = args.threads {
        flags.extend(["--threads".into(), t.to_string()]);
    }
    let log = std::env::temp_dir().join(format!("assay-serve-{}.log", cell.id));
    let mut server = serve_load::AssayServer::start(
        &bin,
        path,
        &flags,
        &log,
        Duration::from_secs(args.arm_timeout_s),
    )?;
    let m = serve_load::measure(
        &server.target(),
        cell.batch,
        text.as_deref(),
        cell.prompt_tokens,
        cell.gen_tokens,
        cell.warmup,
        runs,
    );
    let spec = cell.spec.as_ref().map(|_| {
        serve_load::get_metrics(server.target().addr, Duration::from_secs(30)).map_or_else(
            |e| format!("speculation counters: /metrics unreadable: {e}"),
            |m| {
                serve_load::spec_summary(&m)
                    .unwrap_or_else(|| "speculation counters: none in /metrics".into())
            },
        )
    });
    server.stop();
    let m = m.with_context(|| {
        format!(
            "cell {}: load on assay serve (log {})",
            cell.id,
            server.log.display()
        )
    })?;
    let mut r = stamp.receipt(Kind::Bench, &cell.id, Verdict::Green);
    r.model = Some(facts);
    r.workload = serve_workload(board, cell, args.threads.map(|t| t as u64));
    let engine = format!("assay-serve-{backend}");
    let version = env!("CARGO_PKG_VERSION").to_string();
    let mut arm_flags = vec![format!("bin={}", bin.display())];
    arm_flags.extend(server.flags.iter().cloned());
    for (name, unit, samples) in [
        ("assay aggregate", "tok/s", m.aggregate),
        ("assay per-stream", "tok/s/stream", m.stream_tok_s),
        ("assay TTFT", "ms", m.ttft_ms),
    ] {
        r.arms.push(Arm {
            name: name.into(),
            engine: engine.clone(),
            version: version.clone(),
            flags: arm_flags.clone(),
            unit: Some(unit.into()),
            stats: Stats::of(&samples),
            samples,
            roofline_fraction: None,
        });
    }
    r.detail.extend(m.detail);
    r.detail.extend(spec);
    r.detail.push(format!(
        "server ready {:.1} s after start (weights uploaded, warm-up step run)",
        server.ready_s
    ));
    r.wall_s = (t0.elapsed().as_secs_f64() * 1000.0).round() / 1000.0;
    Ok(r)
}

/// One printed line for a measured cell.
pub fn line(r: &Receipt) -> String {
    let mut s = format!("{:<36}", r.name);
    for a in &r.arms {
        if let Some(st) = a.stats {
            s += &format!(
                " {} {:.2} {} (min {:.2}, max {:.2}, N={})",
                a.name,
                st.median,
                a.unit.as_deref().unwrap_or("tok/s"),
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
    s + &gemm_ref::line_suffix(r)
}

/// The cells run so far by `bench` or `pair`, counted as their outcomes are recorded.
#[derive(Default)]
pub struct Tally {
    ran: usize,
    failed: usize,
}

impl Tally {
    /// Print cell `id`'s outcome (its line, and its detail lines when `detail`), append its
    /// receipt to `receipts` (none: receipts are not written), and count it. Errs only when
    /// the receipt cannot be written.
    pub fn record(
        &mut self,
        id: &str,
        outcome: Result<Receipt>,
        detail: bool,
        receipts: Option<&Path>,
    ) -> Result<()> {
        match outcome {
            Ok(r) => {
                println!("{}", line(&r));
                if detail {
                    for d in &r.detail {
                        println!("    {d}");
                    }
                }
                if let Some(receipts) = receipts {
                    append(receipts, &r).context("writing the receipt")?;
                }
                self.ran += 1;
            }
            Err(e) => {
                println!("{:<36} FAILED: {e:#}", id);
                self.failed += 1;
            }
        }
        Ok(())
    }

    /// Print where the receipts went (when any were written) and the count (`what`: what was
    /// done to a cell, "measured"); whether no cell failed.
    pub fn finish(&self, receipts: Option<&Path>, what: &str) -> bool {
        if let Some(receipts) = receipts
            && self.ran > 0
        {
            println!("receipts: {}", receipts.display());
        }
        println!("{} cell(s) {what}, {} failed", self.ran, self.failed);
        self.failed == 0
    }
}

pub fn run(env: &EnvArgs, args: &BenchArgs) -> Result<bool> {
    let root = env.root()?;
    let boards = load_boards(&root.join("boards"))?;
    if let Some(b) = &args.board
        && !boards.iter().any(|x| &x.name == b)
    {
        bail!("no board {b}");
    }
    let stamp = env.measurement_stamp(&root)?;
    let gpu = stamp.device.gpu().is_some();
    let receipts = under(&root, &args.receipts);
    let receipts = (!args.no_receipt).then_some(receipts.as_path());
    let mut shared = Shared::default();
    let mut tally = Tally::default();
    for b in &boards {
        if args.board.as_ref().is_some_and(|n| n != &b.name) {
            continue;
        }
        for cell in &b.cells {
            if !args.only.is_empty() && !args.only.contains(&cell.id) {
                continue;
            }
            if let Some(why) = skip_reason(cell, gpu).or_else(|| missing_model(env, cell)) {
                println!("{:<36} skipped: {why}", cell.id);
                continue;
            }
            let outcome = run_cell(env, args, &stamp, &b.name, cell, &mut shared);
            tally.record(&cell.id, outcome, false, receipts)?;
        }
    }
    Ok(tally.finish(receipts, "measured"))
}

/// The `assay` binary a served cell starts: the given one, else the one next to the harness.
pub(crate) fn assay_bin(given: Option<&std::path::PathBuf>) -> Result<std::path::PathBuf> {
    match given {
        Some(b) => Ok(b.clone()),
        None => Ok(std::env::current_exe()
            .context("locating the harness binary")?
            .with_file_name("assay")),
    }
}

/// The workload of a served cell's receipt (bench `mode = "serve"` and pairings): the
/// deterministic prompt ids, greedy.
pub(crate) fn serve_workload(board: &str, cell: &Cell, threads: Option<u64>) -> Workload {
    Workload {
        board: Some(board.to_owned()),
        mode: Some(cell.mode.name().into()),
        prompt_id: Some("serve-ids-v1".into()),
        prompt_tokens: Some(cell.prompt_tokens as u64),
        gen_tokens: Some(cell.gen_tokens as u64),
        batch: Some(cell.batch as u64),
        k: None,
        sampling: Some("greedy".into()),
        threads,
    }
}
