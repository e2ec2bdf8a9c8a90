//! Parity with llama.cpp's tokenizer test vectors.
//!
//! `tools/fetch-vocab` extracts `ggml-vocab-*.gguf` with their `.inp`/`.out` files (inputs
//! and the ids llama.cpp produces, `add_special = false`, `parse_special = false`) from the
//! `llama-cpp-python==0.3.36` sdist into `$ASSAY_VOCAB_DIR` (else `~/.cache/assay/vocab`).
//! Every vocabulary with test vectors must match exactly, except those listed in
//! [`UNSUPPORTED`] with the reason; those must fail to load with the named error, so the
//! list cannot go stale silently.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use engine::model_file::GgufModel;
use engine::tokenizer::{Tokenizer, TokenizerError};

/// Vocabularies whose tokenizer type Assay does not implement, and why.
const UNSUPPORTED: &[(&str, &str)] = &[(
    "nomic-bert-moe",
    "tokenizer.ggml.model = t5 (Unigram with a precompiled charsmap): no Assay model uses it",
)];

fn vocab_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("ASSAY_VOCAB_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache/assay/vocab"),
    };
    dir.is_dir().then_some(dir)
}

fn read_vectors(inp: &str, out: &str) -> Vec<(String, Vec<u32>)> {
    // Same reading as llama.cpp's test: a separator at the very end opens no new test.
    const SEP: &str = "\n__ggml_vocab_test__\n";
    let mut inputs: Vec<&str> = inp.split(SEP).collect();
    if inp.ends_with(SEP) {
        inputs.pop();
    }
    let outputs: Vec<&str> = out.lines().collect();
    assert_eq!(
        inputs.len(),
        outputs.len(),
        "input/output test counts differ"
    );
    inputs
        .iter()
        .zip(outputs)
        .map(|(i, o)| {
            let ids = o
                .split_whitespace()
                .map(|t| t.parse::<u32>().expect("id"))
                .collect();
            ((*i).to_owned(), ids)
        })
        .collect()
}

fn load(path: &std::path::Path) -> Result<Tokenizer, TokenizerError> {
    let model = GgufModel::open(path).expect("vocab GGUF opens");
    Tokenizer::from_gguf(model.header())
}

#[test]
fn llama_cpp_test_vectors() {
    let Some(dir) = vocab_dir() else {
        println!("SKIP: no vocab dir; run tools/fetch-vocab (CI does) or set ASSAY_VOCAB_DIR");
        return;
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("read vocab dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("ggml-vocab-") && n.ends_with(".gguf"))
        })
        .collect();
    files.sort();
    assert!(
        files.len() >= 15,
        "expected the llama.cpp vocab set in {}, found {} files",
        dir.display(),
        files.len()
    );

    let mut failures = Vec::new();
    let mut summary = Vec::new();
    let mut total_lines = 0;
    for path in &files {
        let fname = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let name = fname
            .trim_start_matches("ggml-vocab-")
            .trim_end_matches(".gguf");
        let inp = std::fs::read_to_string(path.with_extension("gguf.inp")).ok();
        let out = std::fs::read_to_string(path.with_extension("gguf.out")).ok();
        let unsupported = UNSUPPORTED.iter().find(|u| u.0 == name);
        let tok = load(path);
        if let Some((_, why)) = unsupported {
            assert!(
                matches!(tok, Err(TokenizerError::UnsupportedModel(_))),
                "{name} is listed as unsupported ({why}) but loads: update UNSUPPORTED"
            );
            summary.push(format!("{name}: unsupported ({why})"));
            continue;
        }
        let tok = tok.unwrap_or_else(|e| panic!("{name}: {e}"));
        let (Some(inp), Some(out)) = (inp, out) else {
            // No vectors: loading and a trivial round trip must still work.
            let ids = tok.encode("Hello world", false, false).expect("encode");
            assert!(!ids.is_empty(), "{name}: empty encoding");
            summary.push(format!("{name}: loads (no test vectors)"));
            continue;
        };
        let vectors = read_vectors(&inp, &out);
        let mut ok = 0;
        for (text, want) in &vectors {
            let got = tok.encode(text, false, false).expect("encode");
            if &got == want {
                ok += 1;
            } else {
                failures.push(format!(
                    "{name}: {text:?}\n   want {want:?}\n   got  {got:?}"
                ));
            }
        }
        total_lines += vectors.len();
        summary.push(format!("{name}: {ok}/{} test lines match", vectors.len()));
    }
    println!("{}", summary.join("\n"));
    println!("total test lines: {total_lines}");
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
