//! Fuzz target: what the HTTP server does with a request body before the scheduler sees it.
//!
//! The route handlers (`engine/src/server/handlers.rs`, `surfaces.rs`) are private, so this
//! target runs the same public steps in the same order:
//!
//! 1. `serde_json::from_slice` of the body (`handlers::body_json`);
//! 2. for `/v1/messages` and `/v1/responses`: `api::anthropic::to_chat` /
//!    `api::responses::to_chat`;
//! 3. `server::request::parse` (all field validation, `response_format`, `tools`,
//!    `logprobs`);
//! 4. for an accepted request, `handlers::tokenize`'s steps: token-id range check, or
//!    `encode` of the text, or the chat template (`tools::prepare` when tools or
//!    tool-shaped messages are present, as `surfaces::render_with_tools`) then `encode`
//!    with special tokens parsed;
//! 5. `surfaces::constraint`'s steps: the `response_format` grammar or the forced tool-call
//!    grammar (`tools::grammar`), compiled by `GrammarEnv::compile`, and the first mask;
//! 6. the request's stop strings over its own prompt text (`server::stop::StopMatcher`),
//!    and, when tools are active, the tool-call parser over the last message's content
//!    (text a model can be prompted to echo).
//!
//! First byte: bits 0-1 the route (chat, completions, messages, responses), bit 2 the
//! model (SmolLM2: template without tools; Qwen2.5: native tool template), bit 3 splice
//! mode. Raw mode: the rest is the body. Splice mode: the second byte picks a field of a
//! valid body for the route, and the rest (as JSON, else as a string) becomes its value,
//! so mutations reach deep validation without having to rebuild a whole valid body.
//!
//! Properties: no panic anywhere; an accepted prompt tokenizes to in-range ids; the stop
//! matcher's output is the text up to a stop string (or all of it), never more.

#![no_main]

#[path = "common/models.rs"]
mod models;

use std::sync::OnceLock;

use engine::api::constrain::{self, GrammarEnv};
use engine::api::tools::{self, ToolFormat, ToolParser};
use engine::api::{anthropic, responses};
use engine::server::request::{self, GenParams, Kind, Prompt};
use engine::server::stop::StopMatcher;
use engine::tokenizer::{ChatTemplate, Tokenizer};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

struct Model {
    name: &'static str,
    tok: Tokenizer,
    template: Option<ChatTemplate>,
    grammar: OnceLock<GrammarEnv>,
}

fn models() -> &'static [Model] {
    static M: OnceLock<Vec<Model>> = OnceLock::new();
    M.get_or_init(|| {
        models::REQUIRED
            .iter()
            .filter_map(|name| models::open(name, true).map(|m| (*name, m)))
            .map(|(name, m)| {
                let h = m.header();
                let tok = Tokenizer::from_gguf(h)
                    .unwrap_or_else(|e| panic!("fuzz target: tokenizer of {name}: {e}"));
                let template = ChatTemplate::from_gguf(h)
                    .unwrap_or_else(|e| panic!("fuzz target: chat template of {name}: {e}"))
                    .map(|t| t.with_fixed_time(1_700_000_000));
                Model {
                    name,
                    tok,
                    template,
                    grammar: OnceLock::new(),
                }
            })
            .collect()
    })
}

#[derive(Clone, Copy)]
enum Route {
    Chat,
    Completions,
    Messages,
    Responses,
}

fn base_body(route: Route) -> Value {
    match route {
        Route::Chat => json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
        Route::Completions => json!({"model": "m", "prompt": "hi"}),
        Route::Messages => json!({"model": "m", "max_tokens": 16,
            "messages": [{"role": "user", "content": "hi"}]}),
        Route::Responses => json!({"model": "m", "input": "hi"}),
    }
}

/// Fields worth splicing a value into (JSON pointer-ish paths into the base body).
const SLOTS: &[&[&str]] = &[
    &["messages"],
    &["messages", "0"],
    &["messages", "0", "content"],
    &["messages", "0", "role"],
    &["prompt"],
    &["input"],
    &["tools"],
    &["tool_choice"],
    &["response_format"],
    &["response_format", "json_schema", "schema"],
    &["stop"],
    &["stop_sequences"],
    &["max_tokens"],
    &["temperature"],
    &["top_p"],
    &["top_k"],
    &["seed"],
    &["logprobs"],
    &["top_logprobs"],
    &["stream"],
    &["stream_options"],
    &["system"],
    &["instructions"],
    &["text"],
    &["model"],
];

fn splice(body: &mut Value, path: &[&str], v: Value) {
    // The schema slot needs its `response_format` envelope.
    if path.len() > 1 && path[0] == "response_format" {
        body["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "x"}});
    }
    let mut cur = body;
    for (i, k) in path.iter().enumerate() {
        let next = match k.parse::<usize>() {
            Ok(n) => match cur.as_array_mut().and_then(|a| a.get_mut(n)) {
                Some(x) => x,
                None => return,
            },
            Err(_) => {
                if !cur.is_object() {
                    return;
                }
                &mut cur[*k]
            }
        };
        if i + 1 == path.len() {
            *next = v;
            return;
        }
        cur = next;
    }
}

/// `handlers::tokenize`, from its public parts.
fn tokenize(m: &Model, p: &GenParams) -> Option<Vec<u32>> {
    let tok = &m.tok;
    let ids = match &p.prompt {
        Prompt::Tokens(t) => {
            if t.iter().any(|&x| x as usize >= tok.vocab_size()) {
                return None;
            }
            t.clone()
        }
        Prompt::Text(s) => tok.encode(s, true, false).ok()?,
        Prompt::Messages(_) | Prompt::ChatJson(_) => {
            let t = m.template.as_ref()?;
            let rendered = match &p.prompt {
                Prompt::Messages(msgs) if p.tools.is_none() => t.render(msgs, None, true),
                _ => {
                    // `surfaces::render_with_tools`.
                    let msgs: Vec<Value> = match &p.prompt {
                        Prompt::Messages(ms) => ms
                            .iter()
                            .map(|x| json!({"role": x.role, "content": x.content}))
                            .collect(),
                        Prompt::ChatJson(v) => v.clone(),
                        _ => Vec::new(),
                    };
                    let fmt = ToolFormat::detect(t.source());
                    let (msgs, tools) = tools::prepare(msgs, p.tools.as_ref(), fmt);
                    t.render(&msgs, tools.as_ref(), true)
                }
            };
            let text = rendered.ok()?;
            let starts_with_bos = tok
                .bos_id()
                .and_then(|b| tok.token_text(b))
                .is_some_and(|b| !b.is_empty() && text.starts_with(b));
            tok.encode(&text, !starts_with_bos, true).ok()?
        }
    };
    let n = tok.vocab_size();
    assert!(
        ids.iter().all(|&i| (i as usize) < n),
        "{}: prompt ids outside the vocabulary",
        m.name
    );
    Some(ids)
}

/// `surfaces::constraint`, from its public parts, plus the first mask.
fn constraint(m: &Model, p: &GenParams) {
    let fmt = m.template.as_ref().map(|t| ToolFormat::detect(t.source()));
    let spec = match (&p.response_format, &p.tools, fmt) {
        (Some(spec), _, _) => Some(spec.clone()),
        (None, Some(t), Some(fmt)) => match tools::grammar(t, fmt, &m.tok) {
            Ok(s) => s,
            Err(_) => return,
        },
        _ => None,
    };
    let Some(spec) = spec else { return };
    let env = m.grammar.get_or_init(|| {
        GrammarEnv::new(&m.tok, m.tok.vocab_size())
            .unwrap_or_else(|e| panic!("{}: grammar env: {e}", m.name))
    });
    if let Ok(mut c) = env.compile(&spec) {
        let _ = c.mask();
    }
}

fn prompt_text(p: &GenParams) -> String {
    match &p.prompt {
        Prompt::Messages(ms) => ms.last().map(|m| m.content.clone()).unwrap_or_default(),
        Prompt::ChatJson(v) => v
            .last()
            .and_then(|m| m.get("content"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
        Prompt::Text(s) => s.clone(),
        Prompt::Tokens(_) => String::new(),
    }
}

/// Feed `text` in pieces of up to 3 characters.
fn pieces(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    for (k, (i, _)) in text.char_indices().enumerate() {
        if k % 3 == 0 && i > start {
            out.push(&text[start..i]);
            start = i;
        }
    }
    out.push(&text[start..]);
    out
}

fn check_stops(p: &GenParams, text: &str) {
    let mut sm = StopMatcher::new(&p.stop);
    let mut out = String::new();
    let mut stopped = false;
    for piece in pieces(text) {
        let (t, s) = sm.push(piece);
        out.push_str(&t);
        if s {
            stopped = true;
            break;
        }
    }
    if stopped {
        let rest = text.get(out.len()..);
        assert!(
            text.starts_with(&out)
                && rest.is_some_and(|r| p
                    .stop
                    .iter()
                    .any(|s| !s.is_empty() && r.starts_with(s.as_str()))),
            "stop matcher output {out:?} is not the text {text:?} up to a stop {:?}",
            p.stop
        );
    } else {
        out.push_str(&sm.finish());
        assert_eq!(
            out, text,
            "stop matcher changed text with stops {:?}",
            p.stop
        );
    }
}

fn check_tool_parser(m: &Model, p: &GenParams, text: &str) {
    let Some(t) = &m.template else { return };
    if !p.tools.as_ref().is_some_and(tools::Tools::active) {
        return;
    }
    let fmt = ToolFormat::detect(t.source());
    let mut tp = ToolParser::new(fmt.family, "call_fuzz");
    for piece in pieces(text) {
        let _ = tp.push(piece);
    }
    let _ = tp.finish();
}

fuzz_target!(|data: &[u8]| {
    let ms = models();
    let Some((&ctl, rest)) = data.split_first() else {
        return;
    };
    let route = match ctl & 3 {
        0 => Route::Chat,
        1 => Route::Completions,
        2 => Route::Messages,
        _ => Route::Responses,
    };
    let m = &ms[((ctl >> 2) & 1) as usize % ms.len()];
    let body = if ctl & 8 == 0 {
        match serde_json::from_slice::<Value>(rest) {
            Ok(v) => v,
            Err(_) => return,
        }
    } else {
        let Some((&slot, val)) = rest.split_first() else {
            return;
        };
        let v = serde_json::from_slice::<Value>(val)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(val).into_owned()));
        let mut b = base_body(route);
        splice(&mut b, SLOTS[slot as usize % SLOTS.len()], v);
        b
    };
    let chat = match route {
        Route::Chat | Route::Completions => body,
        Route::Messages => match anthropic::to_chat(&body) {
            Ok(c) => c,
            Err(_) => return,
        },
        Route::Responses => match responses::to_chat(&body) {
            Ok(c) => c,
            Err(_) => return,
        },
    };
    let kind = match route {
        Route::Completions => Kind::Completion,
        _ => Kind::Chat,
    };
    let Ok(p) = request::parse(&chat, kind, 0) else {
        return;
    };
    let _ = tokenize(m, &p);
    constraint(m, &p);
    let text = prompt_text(&p);
    check_stops(&p, &text);
    check_tool_parser(m, &p, &text);
    // `constrain_error` formats every refusal; make sure it never panics either.
    if let Err(e) = constrain::parse_response_format(chat.get("response_format")) {
        let _ = request::constrain_error(e);
    }
});
