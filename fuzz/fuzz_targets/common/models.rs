//! Shared by the tokenizer, chat-template and request targets: the small test models,
//! loaded once per fuzzing process.
//!
//! Models come from `$ASSAY_MODELS_DIR`, else `~/.cache/assay/models` (where
//! `tools/fetch-models` puts them). A missing required model stops the target at start-up
//! with a message naming the file, never a silent skip: a fuzz run that quietly loaded
//! nothing would report clean campaigns over no code.

#![allow(dead_code)]

use std::path::PathBuf;

use engine::model_file::{GgufHeader, GgufModel};

/// Always loaded (the target panics at start-up without them).
pub const REQUIRED: [&str; 2] = [
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    "Qwen2.5-Coder-0.5B-Instruct.gguf",
];
/// Loaded when present (SentencePiece coverage); its absence is printed once.
pub const OPTIONAL: [&str; 1] = ["Gemma-3-270M.Q4_K_M.gguf"];

pub fn models_dir() -> PathBuf {
    match std::env::var_os("ASSAY_MODELS_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/assay/models")
        }
    }
}

/// Open `name` from the models folder; `None` only when it is missing and `required` is
/// false.
pub fn open(name: &str, required: bool) -> Option<GgufModel> {
    let path = models_dir().join(name);
    if !path.exists() {
        assert!(
            !required,
            "fuzz target needs the model file {} (set ASSAY_MODELS_DIR or run tools/fetch-models)",
            path.display()
        );
        eprintln!(
            "fuzz target: optional model {} not found, continuing without it",
            path.display()
        );
        return None;
    }
    match GgufModel::open(&path) {
        Ok(m) => Some(m),
        Err(e) => panic!("fuzz target: cannot open {}: {e}", path.display()),
    }
}

/// Headers of the required models, then of the optional ones that are present, with names.
pub fn headers() -> Vec<(&'static str, GgufHeader)> {
    let mut out = Vec::new();
    for name in REQUIRED {
        if let Some(m) = open(name, true) {
            out.push((name, m.header().clone()));
        }
    }
    for name in OPTIONAL {
        if let Some(m) = open(name, false) {
            out.push((name, m.header().clone()));
        }
    }
    out
}
