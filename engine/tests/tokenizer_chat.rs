//! Chat templates rendered by minijinja equal those rendered by the reference Jinja engine.
//!
//! `tools/golden/chat_golden.py` renders every conversation in
//! `fixtures/chat/conversations/` with `jinja2` and Hugging Face's template globals from each
//! test model's own template and writes `fixtures/chat/golden/<model>/<conversation>.txt`;
//! here the same inputs go through `ChatTemplate::render_json` and must match byte for byte
//! (`!!ERROR` golden files mean the reference raised, so we must fail too).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use engine::model_file::GgufModel;
use engine::tokenizer::{ChatTemplate, TemplateError};

/// Must equal FIXED_TIME in tools/golden/chat_golden.py.
const FIXED_TIME: i64 = 1_718_452_800;

const MODELS: [&str; 4] = [
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    "Qwen2.5-Coder-0.5B-Instruct.gguf",
    "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf",
    "Gemma-3-270M.Q4_K_M.gguf",
];

fn models_dir() -> PathBuf {
    match std::env::var_os("ASSAY_MODELS_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/assay/models")
        }
    }
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat")
}

#[test]
fn templates_match_jinja2_goldens() {
    let mut convs: Vec<PathBuf> = std::fs::read_dir(fixtures().join("conversations"))
        .expect("conversations dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    convs.sort();
    assert!(convs.len() >= 6, "conversation fixtures missing");
    let mut checked = 0;
    let mut failures = Vec::new();
    for name in MODELS {
        let path = models_dir().join(name);
        if !path.exists() {
            println!(
                "SKIP {name}: not in {} (run tools/fetch-models)",
                models_dir().display()
            );
            continue;
        }
        let model = GgufModel::open(&path).expect("open model");
        let tmpl = ChatTemplate::for_model(model.header())
            .expect("template")
            .with_fixed_time(FIXED_TIME);
        let stem = name.trim_end_matches(".gguf");
        for conv in &convs {
            let text = std::fs::read_to_string(conv).expect("read conversation");
            let v: serde_json::Value = serde_json::from_str(&text).expect("json");
            let agp = v
                .get("add_generation_prompt")
                .and_then(|b| b.as_bool())
                .unwrap_or(true);
            let golden_path = fixtures()
                .join("golden")
                .join(stem)
                .join(conv.with_extension("txt").file_name().expect("name"));
            let golden = std::fs::read_to_string(&golden_path).unwrap_or_else(|e| {
                panic!(
                    "{}: {e} (run tools/golden/chat_golden.py)",
                    golden_path.display()
                )
            });
            let got = tmpl.render_json(&text, agp);
            let ok = match (&got, golden == "!!ERROR\n") {
                (Err(_), true) => true,
                (Ok(s), false) => *s == golden,
                _ => false,
            };
            if !ok {
                failures.push(format!(
                    "{stem}/{}:\n--- jinja2\n{golden}\n--- minijinja\n{got:?}",
                    conv.display()
                ));
            }
            checked += 1;
        }
    }
    println!("{checked} rendered prompts compared");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn templates_are_loaded_from_the_models() {
    for name in MODELS {
        let path = models_dir().join(name);
        if !path.exists() {
            println!("SKIP {name}: not present");
            continue;
        }
        let model = GgufModel::open(&path).expect("open model");
        let t = ChatTemplate::from_gguf(model.header())
            .expect("parse")
            .expect("a template");
        if name.starts_with("Gemma") {
            assert_eq!(
                t.source(),
                engine::tokenizer::GEMMA_FALLBACK_TEMPLATE,
                "Gemma GGUF has no template"
            );
        } else {
            assert!(t.source().contains("<|im_start|>"));
        }
    }
}

#[test]
fn missing_template_is_a_named_error() {
    let path = models_dir().join(MODELS[0]);
    if !path.exists() {
        println!("SKIP: {} not present", path.display());
        return;
    }
    let model = GgufModel::open(&path).expect("open model");
    let mut header = model.header().clone();
    header.metadata.remove("tokenizer.chat_template");
    assert!(ChatTemplate::from_gguf(&header).expect("ok").is_none());
    let err = ChatTemplate::for_model(&header).err().expect("error");
    assert!(
        matches!(err, TemplateError::NoTemplate { ref arch } if arch == "llama"),
        "{err}"
    );
}
