//! `assay inspect` on the four real test models against golden facts produced by the `gguf`
//! Python package (tools/golden/inspect_golden.py): architecture, tensor count, quant census,
//! and per-tensor first values / sum / L2 within 1e-6 relative.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn models_dir() -> PathBuf {
    match std::env::var_os("ASSAY_MODELS_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/assay/models"),
    }
}

fn fixtures() -> Vec<Value> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/inspect");
    let mut out: Vec<Value> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| {
            serde_json::from_str(&std::fs::read_to_string(e.unwrap().path()).unwrap()).unwrap()
        })
        .collect();
    out.sort_by_key(|v| v["model"].as_str().unwrap().to_owned());
    assert_eq!(out.len(), 4, "one fixture per catalog model");
    out
}

fn assay(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_assay"))
        .args(args)
        .env("ASSAY_MODELS_DIR", models_dir())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// True when the model file is there; otherwise prints why the test is skipped.
fn present(name: &str) -> bool {
    let ok = engine::catalog::resolve(name, &models_dir()).is_ok();
    if !ok {
        eprintln!("skipping {name}: not fetched (run tools/fetch-models)");
    }
    ok
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * a.abs().max(b.abs()).max(1e-30)
}

#[test]
fn inspect_json_matches_gguf_python_for_every_model() {
    for fx in fixtures() {
        let name = fx["model"].as_str().unwrap();
        if !present(name) {
            continue;
        }
        let (ok, stdout, stderr) = assay(&["inspect", name, "--json"]);
        assert!(ok, "{name}: {stderr}");
        let got: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(got["architecture"], fx["architecture"], "{name}");
        assert_eq!(got["tensor_count"], fx["tensor_count"], "{name}");
        let census = got["quant_census"].as_object().unwrap();
        let want = fx["quant_census_bytes"].as_object().unwrap();
        assert_eq!(
            census.len(),
            want.len(),
            "{name}: formats {census:?} vs {want:?}"
        );
        let mut total = 0;
        for (fmt, bytes) in want {
            assert_eq!(census[fmt]["bytes"], *bytes, "{name} {fmt}");
            total += bytes.as_u64().unwrap();
        }
        assert_eq!(got["weight_bytes"].as_u64().unwrap(), total, "{name}");
        assert!(got["parameters"].as_u64().unwrap() > 100_000_000, "{name}");
        for key in ["metadata", "hyperparameters", "tokenizer"] {
            assert!(got[key].is_object(), "{name}: {key}");
        }
    }
}

#[test]
fn inspect_tensor_values_match_gguf_dequantize() {
    for fx in fixtures() {
        let name = fx["model"].as_str().unwrap();
        if !present(name) {
            continue;
        }
        for t in fx["tensors"].as_array().unwrap() {
            let tname = t["name"].as_str().unwrap();
            let (ok, stdout, stderr) = assay(&["inspect", name, "--tensor", tname, "--json"]);
            assert!(ok, "{name} {tname}: {stderr}");
            let got: Value = serde_json::from_str(&stdout).unwrap();
            let ctx = format!("{name} {tname} ({})", t["type"]);
            assert_eq!(got["name"], t["name"], "{ctx}");
            assert_eq!(got["type"], t["type"], "{ctx}");
            assert_eq!(got["shape"], t["shape"], "{ctx}");
            let first = got["first"].as_array().unwrap();
            let want_first = t["first"].as_array().unwrap();
            assert_eq!(first.len(), want_first.len(), "{ctx}");
            for (i, (a, b)) in first.iter().zip(want_first).enumerate() {
                let (a, b) = (a.as_f64().unwrap(), b.as_f64().unwrap());
                assert!(
                    close(a, b, 1e-6) || (a - b).abs() < 1e-12,
                    "{ctx} first[{i}]: {a} vs {b}"
                );
            }
            // The sum may cancel; compare it relative to the L2 mass of the tensor.
            let (sum, l2) = (got["sum"].as_f64().unwrap(), got["l2"].as_f64().unwrap());
            let (wsum, wl2) = (t["sum"].as_f64().unwrap(), t["l2"].as_f64().unwrap());
            assert!(close(l2, wl2, 1e-6), "{ctx} l2: {l2} vs {wl2}");
            assert!(
                close(sum, wsum, 1e-6) || (sum - wsum).abs() <= 1e-9 * wl2,
                "{ctx} sum: {sum} vs {wsum}"
            );
        }
    }
}

#[test]
fn inspect_errors_are_clear() {
    let (ok, _, stderr) = assay(&["inspect", "no-such-model"]);
    assert!(!ok);
    assert!(stderr.contains("known models"), "{stderr}");
    let bogus =
        std::env::temp_dir().join(format!("assay-inspect-bogus-{}.gguf", std::process::id()));
    std::fs::write(&bogus, b"this is not a model file at all").unwrap();
    let (ok, _, stderr) = assay(&["inspect", bogus.to_str().unwrap()]);
    std::fs::remove_file(&bogus).unwrap();
    assert!(!ok);
    assert!(
        stderr.contains("bad magic") || stderr.contains("unrecognized"),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
    if present("SmolLM2-135M-Instruct") {
        let (ok, _, stderr) = assay(&["inspect", "SmolLM2-135M-Instruct", "--tensor", "nope"]);
        assert!(!ok);
        assert!(stderr.contains("no tensor named"), "{stderr}");
    }
}

#[test]
fn inspect_reads_safetensors_folders() {
    let dir = std::env::temp_dir().join(format!("assay-inspect-st-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let header = br#"{"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}"#;
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header);
    for v in [1f32, -2.0, 3.0, 0.5, 0.25, -4.0] {
        file.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(dir.join("model.safetensors"), &file).unwrap();
    std::fs::write(dir.join("config.json"), br#"{"model_type": "qwen3"}"#).unwrap();
    let (ok, stdout, stderr) = assay(&["inspect", dir.to_str().unwrap(), "--json"]);
    assert!(ok, "{stderr}");
    let got: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(got["architecture"], "qwen3");
    assert_eq!(got["tensor_count"], 1);
    assert_eq!(got["parameters"], 6);
    assert_eq!(got["quant_census"]["F32"]["bytes"], 24);
    let (ok, stdout, stderr) =
        assay(&["inspect", dir.to_str().unwrap(), "--tensor", "w", "--json"]);
    assert!(ok, "{stderr}");
    let got: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(got["shape"], serde_json::json!([2, 3]));
    assert_eq!(got["sum"], -1.25);
    assert!((got["l2"].as_f64().unwrap() - 30.3125f64.sqrt()).abs() < 1e-12);
    std::fs::remove_dir_all(&dir).unwrap();
}
