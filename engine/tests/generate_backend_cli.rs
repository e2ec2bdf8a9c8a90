//! `assay generate --backend auto|cpu|cuda` on a machine without a CUDA driver (CI): `auto`
//! says so in exactly one line and gives the CPU reference's tokens, greedy and seeded
//! sampling alike; `cuda` is a clear error, never a panic. On a machine with a driver the
//! checks that need its absence are skipped with a printed reason (the GPU runs of
//! `--backend cuda` live in tools/gpu/run).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod cli_common;
use cli_common::{SMOL, assay, model};
const NO_DRIVER: &str = "no CUDA driver found; using the CPU backend";

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

#[test]
fn json_schema_constrains_the_cpu_output_and_bad_schemas_are_errors() {
    let Some(model) = model() else {
        println!("SKIP: {SMOL} not found");
        return;
    };
    let dir = std::env::temp_dir().join(format!("assay-json-schema-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let schema = dir.join("s.json");
    std::fs::write(
        &schema,
        r#"{"type": "object", "properties": {"kind": {"enum": ["cat", "dog"]},
            "n": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["kind", "n"]}"#,
    )
    .unwrap();
    let schema = schema.to_str().unwrap();
    let (ok, out, err) = assay(&[
        "generate",
        &model,
        "-p",
        "A pet:",
        "-n",
        "40",
        "--backend",
        "cpu",
        "--threads",
        "2",
        "--json-schema",
        schema,
        "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["stop"], "grammar", "{v}");
    let c = &v["constrained"];
    assert_eq!(c["grammar"], "json_schema");
    assert_eq!(c["parses"], true, "{v}");
    let value: serde_json::Value = serde_json::from_str(v["text"].as_str().unwrap()).unwrap();
    assert!(
        ["cat", "dog"].contains(&value["kind"].as_str().unwrap()),
        "{value}"
    );
    assert!((0..=9).contains(&value["n"].as_i64().unwrap()), "{value}");
    assert_eq!(
        value.as_object().unwrap().len(),
        2,
        "strict: no extra keys: {value}"
    );
    assert_eq!(
        c["masks"].as_u64().unwrap(),
        v["tokens"].as_array().unwrap().len() as u64
    );
    // A schema that is not JSON, or one llguidance refuses, is a clear error.
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{not json").unwrap();
    let (ok, _, err) = assay(&[
        "generate",
        &model,
        "-p",
        "x",
        "--backend",
        "cpu",
        "--json-schema",
        bad.to_str().unwrap(),
    ]);
    assert!(!ok && err.contains("is not JSON"), "{err}");
    std::fs::write(&bad, r#"{"type": "string", "format": "no-such-format"}"#).unwrap();
    let (ok, _, err) = assay(&[
        "generate",
        &model,
        "-p",
        "x",
        "--backend",
        "cpu",
        "--json-schema",
        bad.to_str().unwrap(),
    ]);
    assert!(!ok && !err.contains("panicked"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
