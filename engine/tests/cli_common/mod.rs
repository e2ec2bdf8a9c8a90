//! Shared by the CLI integration tests (generate_backend_cli.rs, serve_spec_cli.rs): the
//! SmolLM2 test model's path when fetched, and one run of the `assay` binary.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

pub const SMOL: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The SmolLM2 GGUF in `$ASSAY_MODELS_DIR` (default ~/.cache/assay/models), if fetched.
pub fn model() -> Option<String> {
    let dir = match std::env::var_os("ASSAY_MODELS_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/assay/models")
        }
    };
    let p = dir.join(SMOL);
    p.exists().then(|| p.to_str().unwrap().to_string())
}

/// Run `assay ARGS`: (success, stdout, stderr).
pub fn assay(args: &[&str]) -> (bool, String, String) {
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
