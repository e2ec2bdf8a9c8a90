//! `assay tokenize` end to end on a test model: ids, `--decode`, `--pieces`, `--chat`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

fn model() -> Option<PathBuf> {
    let dir = match std::env::var_os("ASSAY_MODELS_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/assay/models")
        }
    };
    let p = dir.join("Qwen2.5-Coder-0.5B-Instruct.gguf");
    if p.exists() {
        Some(p)
    } else {
        println!("SKIP: {} not present (run tools/fetch-models)", p.display());
        None
    }
}

fn assay(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_assay"))
        .arg("tokenize")
        .args(args)
        .output()
        .expect("run assay");
    assert!(
        out.status.success(),
        "assay tokenize {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

#[test]
fn tokenize_decode_and_chat() {
    let Some(m) = model() else { return };
    let m = m.to_str().expect("path");
    let ids = assay(&[m, "Hello world<|im_end|>"]);
    // Qwen2: "Hello" " world" then the parsed control token; no BOS (add_bos_token = false).
    assert_eq!(ids.trim(), "[9707,1879,151645]");
    let plain = assay(&[m, "--no-parse-special", "<|im_end|>"]);
    assert_ne!(plain.trim(), "[151645]");
    assert_eq!(
        assay(&[m, "--decode", "[9707, 1879, 151645]"]),
        "Hello world<|im_end|>\n"
    );
    assert_eq!(
        assay(&[m, "--decode", "--json", "9707 1879"]),
        "\"Hello world\"\n"
    );
    assert_eq!(
        assay(&[m, "--pieces", "Hi there"]),
        "[[13048,\"Hi\"],[1052,\" there\"]]\n"
    );

    let conv = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/chat/conversations/tool_call.json"
    );
    let golden = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/chat/golden/Qwen2.5-Coder-0.5B-Instruct/tool_call.txt"
    ))
    .expect("golden");
    assert_eq!(
        assay(&[m, "--chat", conv, "--json"]),
        format!("{}\n", serde_json::to_string(&golden).expect("json"))
    );
    let ids: Vec<u32> = serde_json::from_str(&assay(&[m, "--chat", conv, "--ids"])).expect("ids");
    assert_eq!(
        ids.first(),
        Some(&151644),
        "prompt starts with <|im_start|>"
    );
}
