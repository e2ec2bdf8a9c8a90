//! `assay generate --backend auto|cpu|cuda` on a machine without a CUDA driver (CI): `auto`
//! says so in exactly one line and gives the CPU reference's tokens, greedy and seeded
//! sampling alike; `cuda` is a clear error, never a panic. On a machine with a driver the
//! checks that need its absence are skipped with a printed reason (the GPU runs of
//! `--backend cuda` live in tools/gpu/run).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::Command;

const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
const NO_DRIVER: &str = "no CUDA driver found; using the CPU backend";

fn model() -> Option<String> {
    let dir = match std::env::var_os("ASSAY_MODELS_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/assay/models")
        }
    };
    let p = dir.join(SMOL);
    p.exists().then(|| p.to_str().unwrap().to_string())
}

fn assay(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_assay"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn tokens(stdout: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    v["tokens"].clone()
}

#[test]
fn auto_without_a_driver_falls_back_to_the_cpu_in_one_line() {
    if engine::cuda::driver_present() {
        println!("SKIP: this machine has a CUDA driver; auto picks the GPU here");
        return;
    }
    let Some(model) = model() else {
        println!("SKIP: {SMOL} not found");
        return;
    };
    let runs: [&[&str]; 2] = [
        &["-n", "6"],
        &[
            "-n",
            "6",
            "--temperature",
            "0.8",
            "--top-k",
            "40",
            "--top-p",
            "0.9",
            "--seed",
            "3",
        ],
    ];
    for extra in runs {
        let base = [
            "generate",
            &model,
            "--prompt",
            "The capital of France is",
            "--json",
        ];
        let mut auto: Vec<&str> = base.to_vec();
        auto.extend_from_slice(extra);
        let mut cpu = auto.clone();
        cpu.extend_from_slice(&["--backend", "cpu"]);
        let (ok_a, out_a, err_a) = assay(&auto);
        let (ok_c, out_c, err_c) = assay(&cpu);
        assert!(ok_a && ok_c, "{err_a}\n{err_c}");
        let lines: Vec<&str> = err_a.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines, vec![NO_DRIVER], "auto must say it once: {err_a:?}");
        assert!(!err_c.contains(NO_DRIVER), "{err_c}");
        let (ta, tc) = (tokens(&out_a), tokens(&out_c));
        assert_eq!(ta, tc, "auto and cpu differ for {extra:?}");
        assert_eq!(ta.as_array().unwrap().len(), 6);
        let v: serde_json::Value = serde_json::from_str(out_a.trim()).unwrap();
        assert_eq!(v["backend"], "cpu");
    }
    // Streaming (not --json): the text on stdout, the stats line on stderr after the
    // fallback line.
    let (ok, out, err) = assay(&["generate", &model, "--prompt", "Hello", "-n", "3"]);
    assert!(ok, "{err}");
    assert!(!out.trim().is_empty());
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.first(), Some(&NO_DRIVER), "{err}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("tok/s") && l.contains("backend: cpu")),
        "{err}"
    );
}

#[test]
fn cuda_without_a_driver_is_a_clear_error() {
    if engine::cuda::driver_present() {
        println!("SKIP: this machine has a CUDA driver");
        return;
    }
    // The backend is resolved before the model is opened: no model needed.
    let (ok, out, err) = assay(&[
        "generate",
        "/nonexistent/model.gguf",
        "--prompt",
        "hi",
        "--backend",
        "cuda",
    ]);
    assert!(!ok);
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("--backend cuda: no CUDA driver found on this machine"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(!err.contains(NO_DRIVER), "cuda must not fall back: {err}");
}

/// `assay serve --backend cuda` without a driver fails at once with the same clear message
/// as `generate` (before loading anything), and `--backend` rejects unknown values.
#[test]
fn serve_backend_cuda_without_a_driver_is_a_clear_error() {
    if engine::cuda::driver_present() {
        println!("SKIP: this machine has a CUDA driver");
        return;
    }
    let (ok, _, err) = assay(&[
        "serve",
        "--backend",
        "cuda",
        "--model",
        "/nonexistent.gguf",
        "--port",
        "0",
    ]);
    assert!(!ok);
    assert!(
        err.contains("--backend cuda: no CUDA driver found on this machine"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    let (ok, _, err) = assay(&["serve", "--backend", "tpu", "--port", "0"]);
    assert!(!ok);
    assert!(err.contains("tpu"), "{err}");
}
