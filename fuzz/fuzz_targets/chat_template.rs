//! Fuzz target: the small test models' own GGUF chat templates (minijinja, with the Hugging
//! Face globals of `engine::tokenizer::ChatTemplate`) rendered with hostile conversations.
//!
//! The first byte picks the model, the second the mode:
//!
//! * 0: up to 8 [`ChatMessage`]s built from the bytes (roles mostly the five the server
//!   accepts, sometimes arbitrary strings; arbitrary contents), `render`. On the ChatML
//!   templates (SmolLM2, Qwen2.5) every `user` content must appear verbatim in the output
//!   (both templates write `message.content` unchanged; this also catches any HTML
//!   autoescaping).
//! * 1: the rest as a JSON conversation text, `render_json` (the path that keeps key order).
//! * 2: the rest as a JSON value; `messages` (any JSON values) and `tools` go to `render`
//!   (the path the server takes for tool-shaped requests).
//!
//! Every mode: no panic; an error is a `TemplateError`, never a crash. Time is bounded by
//! libFuzzer's `-timeout`.

#![no_main]

#[path = "common/models.rs"]
mod models;

use std::sync::OnceLock;

use engine::tokenizer::{ChatMessage, ChatTemplate};
use libfuzzer_sys::arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

const ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];

fn templates() -> &'static [(&'static str, ChatTemplate)] {
    static T: OnceLock<Vec<(&'static str, ChatTemplate)>> = OnceLock::new();
    T.get_or_init(|| {
        models::headers()
            .into_iter()
            .map(|(name, h)| match ChatTemplate::for_model(&h) {
                Ok(t) => (name, t.with_fixed_time(1_700_000_000)),
                Err(e) => panic!("fuzz target: chat template of {name} does not load: {e}"),
            })
            .collect()
    })
}

fn messages(u: &mut Unstructured<'_>) -> Vec<ChatMessage> {
    let n = u.int_in_range(0..=8u8).unwrap_or(0);
    let mut out = Vec::new();
    for _ in 0..n {
        let r: u8 = u.arbitrary().unwrap_or(0);
        let role = match ROLES.get(r as usize % 6) {
            Some(x) => (*x).to_owned(),
            None => u.arbitrary::<String>().unwrap_or_default(),
        };
        let content = u.arbitrary::<String>().unwrap_or_default();
        out.push(ChatMessage { role, content });
    }
    out
}

fn chatml(name: &str) -> bool {
    name.starts_with("SmolLM2") || name.starts_with("Qwen2.5")
}

fuzz_target!(|data: &[u8]| {
    let ts = templates();
    let [sel, mode, rest @ ..] = data else {
        return;
    };
    let (name, t) = &ts[*sel as usize % ts.len()];
    let agp = mode & 0x80 != 0;
    match mode % 3 {
        0 => {
            let mut u = Unstructured::new(rest);
            let msgs = messages(&mut u);
            if let Ok(out) = t.render(&msgs, None, agp) {
                if chatml(name) {
                    for m in msgs.iter().filter(|m| m.role == "user") {
                        assert!(
                            out.contains(&m.content),
                            "{name}: user content {:?} missing from {out:?}",
                            m.content
                        );
                    }
                }
            }
        }
        1 => {
            let text = String::from_utf8_lossy(rest);
            let _ = t.render_json(&text, agp);
        }
        _ => {
            let Ok(v) = serde_json::from_slice::<Value>(rest) else {
                return;
            };
            let (msgs, tools) = match &v {
                Value::Array(a) => (a.clone(), None),
                Value::Object(o) => (
                    o.get("messages")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default(),
                    o.get("tools"),
                ),
                _ => (vec![v.clone()], None),
            };
            let _ = t.render(&msgs, tools, agp);
        }
    }
});
