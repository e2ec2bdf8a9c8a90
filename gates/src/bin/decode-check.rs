//! `decode-check`: CUDA greedy decode vs the CPU reference (the `argmax` gate's engine) on
//! synthetic checkpoints of every family and on the real GGUF models given as arguments,
//! then a first eager decode timing of each real model.
//!
//! Usage: `decode-check [--tokens N] [--time-tokens N] [--near-tie X] [--json FILE]
//! [--cubin-cache DIR] [MODEL.gguf ...]`. Exit status: 0 green, 1 red, 2 no GPU, 3 usage.

use engine::cuda::{CudaConfig, Gpu};
use engine::model_file::GgufModel;
use engine::tokenizer::Tokenizer;
use gates::Verdict;
use gates::decode_check::{
    DecodeCase, DecodeCheckConfig, check_model, synthetic_models, time_decode, verdict,
};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

const PROMPT: &str = "The history of the printing press begins in the fifteenth century, when";

fn usage(msg: &str) -> ExitCode {
    eprintln!(
        "decode-check: {msg}\nusage: decode-check [--tokens N] [--time-tokens N] [--near-tie X] [--json FILE] [--cubin-cache DIR] [MODEL.gguf ...]"
    );
    ExitCode::from(3)
}

fn main() -> ExitCode {
    let mut cfg = DecodeCheckConfig::default();
    let mut time_tokens = 128usize;
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
    let mut cases = match synthetic_models() {
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
                let prompt = tok.encode(PROMPT, true, false).map_err(|e| e.to_string())?;
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
    let mut lines = Vec::new();
    for c in &cases {
        let t0 = std::time::Instant::now();
        let l = check_model(&gpu, c, &cfg);
        println!("{}  ({:.1}s)", l.render(), t0.elapsed().as_secs_f64());
        lines.push(l);
    }
    let v = verdict(&lines);
    match &v {
        Verdict::Green => println!("ALL GREEN ({} models)", lines.len()),
        Verdict::Red { failures } => {
            println!("FAILED {} of {}:", failures.len(), lines.len());
            for f in failures {
                println!("  {f}");
            }
        }
        Verdict::Skipped { reason } => println!("SKIPPED: {reason}"),
    }
    let mut timings = Vec::new();
    if time_tokens > 0 {
        println!(
            "\neager decode timing (no CUDA graph yet), {time_tokens} tokens after the prompt:"
        );
        println!(
            "{:<44} {:>7} {:>10} {:>10} {:>12}",
            "model", "prompt", "prefill s", "tok/s", "weights MB"
        );
        for c in cases.iter().skip(n_synth) {
            match time_decode(&gpu, c, time_tokens, cfg.capacity) {
                Ok(t) => {
                    println!(
                        "{:<44} {:>7} {:>10.4} {:>10.1} {:>12.1}",
                        t.name,
                        t.prompt_tokens,
                        t.prefill_s,
                        t.decode_tok_s,
                        t.weight_bytes as f64 / 1e6
                    );
                    timings.push(t);
                }
                Err(e) => println!("{:<44} error: {e}", c.name),
            }
        }
    }
    if let Some(path) = json {
        let doc = serde_json::json!({ "lines": lines, "timings": timings, "verdict": v });
        if let Err(e) = std::fs::write(&path, doc.to_string()) {
            eprintln!("decode-check: cannot write {}: {e}", path.display());
        }
    }
    if matches!(v, Verdict::Red { .. }) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
