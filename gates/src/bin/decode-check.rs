//! `decode-check`: on synthetic checkpoints of every family and on the real GGUF models
//! given as arguments: (1) CUDA-graph replay vs eager CUDA decode (the `graph` gate's
//! engine), (2) eager and graphed decode timing of each real model, interleaved, then (3)
//! CUDA greedy decode vs the CPU reference (the `argmax` gate's engine; last, as the CPU
//! reference is the slow part).
//!
//! Usage: `decode-check [--tokens N] [--time-tokens N] [--reps N] [--prompt-tokens N] [--near-tie X]
//! [--rows N] [--skip-argmax] [--skip-synthetic] [--json FILE] [--cubin-cache DIR] [MODEL.gguf ...]`.
//! `--rows N` also times each given model's verification forward (speculative decoding's
//! K+1 rows, graphed) at 1 ..= N rows against its graphed one-token step (issue 10: what a
//! round costs; `graph_check::time_rows`).
//! `--skip-synthetic` checks and times only the given models (e.g. under a profiler, where
//! every launch of the synthetic families costs tens of milliseconds). Exit status: 0 green,
//! 1 red, 2 no GPU, 3 usage.

use engine::cuda::{CudaConfig, Gpu};
use engine::model_file::GgufModel;
use engine::tokenizer::Tokenizer;
use gates::Verdict;
use gates::decode_check::{DecodeCase, DecodeCheckConfig, check_model, synthetic_models, verdict};
use gates::graph_check::{self, GraphCheckConfig};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

const PROMPT: &str = "The history of the printing press begins in the fifteenth century, when";

fn usage(msg: &str) -> ExitCode {
    eprintln!(
        "decode-check: {msg}\nusage: decode-check [--tokens N] [--time-tokens N] [--reps N] [--prompt-tokens N] [--near-tie X] [--rows N] [--skip-argmax] [--skip-synthetic] [--json FILE] [--cubin-cache DIR] [MODEL.gguf ...]"
    );
    ExitCode::from(3)
}

fn main() -> ExitCode {
    let mut cfg = DecodeCheckConfig::default();
    let mut time_tokens = 128usize;
    let mut reps = 5usize;
    let mut skip_argmax = false;
    let mut skip_synthetic = false;
    let mut max_rows = 0usize;
    let mut prompt_tokens: Option<usize> = None;
    let mut json: Option<PathBuf> = None;
    let mut cuda = CudaConfig {
        ordinal: 0,
        cubin_cache_dir: std::env::var_os("HOME")
            .map(|h| PathBuf::from(h).join(".cache/assay/cubins")),
    };
    let mut models = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |what: &str| {
            args.next()
                .and_then(|v| v.parse::<f64>().ok())
                .ok_or(what.to_string())
        };
        match a.as_str() {
            "--tokens" => match num("--tokens needs a number") {
                Ok(v) => cfg.n_tokens = v as usize,
                Err(e) => return usage(&e),
            },
            "--time-tokens" => match num("--time-tokens needs a number") {
                Ok(v) => time_tokens = v as usize,
                Err(e) => return usage(&e),
            },
            "--reps" => match num("--reps needs a number") {
                Ok(v) => reps = (v as usize).max(1),
                Err(e) => return usage(&e),
            },
            "--prompt-tokens" => match num("--prompt-tokens needs a number") {
                Ok(v) if v >= 1.0 => prompt_tokens = Some(v as usize),
                _ => return usage("--prompt-tokens needs a number >= 1"),
            },
            "--rows" => match num("--rows needs a number") {
                Ok(v) if (1.0..=64.0).contains(&v) => max_rows = v as usize,
                _ => return usage("--rows needs a number from 1 to 64"),
            },
            "--skip-argmax" => skip_argmax = true,
            "--skip-synthetic" => skip_synthetic = true,
            "--near-tie" => match num("--near-tie needs a number") {
                Ok(v) => cfg.near_tie = v as f32,
                Err(e) => return usage(&e),
            },
            "--json" => match args.next() {
                Some(v) => json = Some(PathBuf::from(v)),
                None => return usage("--json needs a file"),
            },
            "--cubin-cache" => match args.next() {
                Some(v) => cuda.cubin_cache_dir = Some(PathBuf::from(v)),
                None => return usage("--cubin-cache needs a directory"),
            },
            "-h" | "--help" => return usage("help"),
            p if p.starts_with("--") => return usage(&format!("unknown flag {p}")),
            p => models.push(PathBuf::from(p)),
        }
    }
    if let Some(n) = prompt_tokens {
        // Long-context timing: the model prompts are repeated to n tokens; the decoder's
        // KV capacity grows to hold them and the timed tokens.
        cfg.capacity = cfg.capacity.max(n + time_tokens.max(cfg.n_tokens) + 64);
    }
    if skip_synthetic && models.is_empty() {
        return usage("--skip-synthetic needs at least one MODEL.gguf");
    }
    let gpu = match Gpu::open(&cuda) {
        Ok(g) => Arc::new(g),
        Err(e) => {
            println!("SKIPPED: {e}");
            return ExitCode::from(2);
        }
    };
    println!(
        "decode-check on {} ({}), kernel identity {}; {} greedy steps, near-tie <= {} logits",
        gpu.info().name,
        gpu.info().arch,
        engine::cuda::kernel_identity(),
        cfg.n_tokens,
        cfg.near_tie
    );
    let synthetic = if skip_synthetic {
        Ok(Vec::new())
    } else {
        synthetic_models()
    };
    let mut cases = match synthetic {
        Ok(c) => c,
        Err(e) => {
            println!("FAIL cannot build synthetic models: {e}");
            return ExitCode::from(1);
        }
    };
    let n_synth = cases.len();
    for path in &models {
        let name = path.file_name().map_or_else(
            || path.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let loaded = GgufModel::open(path)
            .map_err(|e| e.to_string())
            .and_then(|m| {
                let tok = Tokenizer::from_gguf(m.header()).map_err(|e| e.to_string())?;
                let mut prompt = tok.encode(PROMPT, true, false).map_err(|e| e.to_string())?;
                if let Some(n) = prompt_tokens {
                    prompt = prompt.iter().copied().cycle().take(n).collect();
                }
                Ok((m, prompt))
            });
        match loaded {
            Ok((m, prompt)) => cases.push(DecodeCase {
                name,
                model: Arc::new(m),
                prompt,
            }),
            Err(e) => println!("FAIL {name}: cannot load: {e}"),
        }
    }
    let gcfg = GraphCheckConfig {
        n_tokens: cfg.n_tokens,
        capacity: cfg.capacity,
    };
    println!(
        "\n[graph] CUDA-graph replay vs eager decode, {} tokens",
        gcfg.n_tokens
    );
    let mut glines = Vec::new();
    for c in &cases {
        let t0 = std::time::Instant::now();
        let l = graph_check::check_model(&gpu, c, &gcfg);
        println!("{}  ({:.1}s)", l.render(), t0.elapsed().as_secs_f64());
        glines.push(l);
    }
    let gv = graph_check::verdict(&glines);
    report("graph", &gv, glines.len());
    let mut timings = Vec::new();
    if time_tokens > 0 {
        println!(
            "\n[timing] greedy decode, {time_tokens} tokens after the prompt, eager and graphed interleaved, {reps} reps (median [min-max] tok/s)"
        );
        println!(
            "{:<40} {:>6} {:>24} {:>24} {:>7} {:>10} {:>6}",
            "model", "prompt", "eager tok/s", "graphed tok/s", "speedup", "weights MB", "nodes"
        );
        let span = |v: &[f64]| {
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(0f64, f64::max);
            format!("{:.1} [{:.1}-{:.1}]", graph_check::median(v), lo, hi)
        };
        for c in cases.iter().skip(n_synth) {
            match graph_check::time_pair(&gpu, c, time_tokens, reps, cfg.capacity) {
                Ok(t) => {
                    println!(
                        "{:<40} {:>6} {:>24} {:>24} {:>6.2}x {:>10.1} {:>6}",
                        t.name,
                        t.prompt_tokens,
                        span(&t.eager_tok_s),
                        span(&t.graphed_tok_s),
                        t.graphed_median() / t.eager_median().max(1e-9),
                        t.weight_bytes as f64 / 1e6,
                        t.graph_nodes
                    );
                    timings.push(t);
                }
                Err(e) => println!("{:<40} error: {e}", c.name),
            }
        }
    }
    let mut rows_timings = Vec::new();
    if max_rows > 0 {
        println!(
            "\n[rows] verification forward of 1..={max_rows} rows (graphed, rolled back) vs the graphed one-token step, {reps} reps (median [min-max] ms)"
        );
        for c in cases.iter().skip(n_synth) {
            match graph_check::time_rows(&gpu, c, max_rows, reps, cfg.capacity) {
                Ok(t) => {
                    let step =
                        t.ms.first()
                            .map_or(f64::NAN, |(_, v)| graph_check::median(v));
                    println!("{} ({} prompt tokens)", t.name, t.prompt_tokens);
                    for (rows, v) in &t.ms {
                        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
                        let hi = v.iter().copied().fold(0f64, f64::max);
                        let m = graph_check::median(v);
                        let what = if *rows == 0 {
                            "step".to_string()
                        } else {
                            format!("{rows} rows")
                        };
                        println!(
                            "  {what:>8}: {m:>8.3} ms [{lo:.3}-{hi:.3}]  {:>5.2}x the step, {:>7.3} ms per row",
                            m / step,
                            m / (*rows).max(1) as f64
                        );
                    }
                    rows_timings.push(t);
                }
                Err(e) => println!("{:<40} error: {e}", c.name),
            }
        }
    }
    let mut lines = Vec::new();
    if !skip_argmax {
        println!("\n[argmax] CUDA greedy vs CPU reference greedy (teacher-forced)");
        for c in &cases {
            let t0 = std::time::Instant::now();
            let l = check_model(&gpu, c, &cfg);
            println!("{}  ({:.1}s)", l.render(), t0.elapsed().as_secs_f64());
            lines.push(l);
        }
    }
    let v = if skip_argmax {
        Verdict::skipped("--skip-argmax")
    } else {
        verdict(&lines)
    };
    report("argmax", &v, lines.len());
    if let Some(path) = json {
        let doc = serde_json::json!({
            "argmax": { "lines": lines, "verdict": v },
            "graph": { "lines": glines, "verdict": gv },
            "timings": timings,
            "rows": rows_timings,
        });
        if let Err(e) = std::fs::write(&path, doc.to_string()) {
            eprintln!("decode-check: cannot write {}: {e}", path.display());
        }
    }
    if v.is_red() || gv.is_red() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn report(section: &str, v: &Verdict, n: usize) {
    match v {
        Verdict::Green => println!("{section}: ALL GREEN ({n} models)"),
        Verdict::Red { failures } => {
            println!("{section}: FAILED {} of {n}:", failures.len());
            for f in failures {
                println!("  {f}");
            }
        }
        Verdict::Skipped { reason } => println!("{section}: SKIPPED: {reason}"),
    }
}
