//! Anthropic Messages (`POST /v1/messages`): the request translated onto the OpenAI chat
//! request the core serves (system, content blocks `text` / `tool_use` / `tool_result`,
//! tools and `tool_choice`, `stop_sequences`, sampling fields), and the result translated
//! back: one message body, or the streaming events in Anthropic's order (`message_start`,
//! per block `content_block_start` / `content_block_delta`s / `content_block_stop`,
//! `message_delta` with the stop reason and usage, `message_stop`).

use serde_json::{Map, Value, json};

use super::tools::Parsed;
use super::{FieldError, Outcome, Stop};

fn ferr(param: impl Into<String>, msg: impl Into<String>) -> FieldError {
    (param.into(), msg.into())
}

/// Fields a request may carry that do not change the output.
const IGNORED: [&str; 2] = ["metadata", "service_tier"];

fn blocks_text(v: &Value, param: &str) -> Result<String, FieldError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(a) => {
            let mut s = String::new();
            for (i, b) in a.iter().enumerate() {
                match (b.get("type").and_then(Value::as_str), b.get("text")) {
                    (Some("text"), Some(Value::String(t))) => s.push_str(t),
                    _ => {
                        return Err(ferr(
                            format!("{param}[{i}]"),
                            format!("`{param}[{i}]`: only text blocks are supported here"),
                        ));
                    }
                }
            }
            Ok(s)
        }
        _ => Err(ferr(
            param,
            format!("`{param}` must be a string or an array of text blocks"),
        )),
    }
}

fn message(i: usize, m: &Value, out: &mut Vec<Value>) -> Result<(), FieldError> {
    let p = format!("messages[{i}]");
    let Some(o) = m.as_object() else {
        return Err(ferr(&p, format!("`{p}` must be an object")));
    };
    for k in o.keys() {
        if k != "role" && k != "content" {
            return Err(ferr(
                format!("{p}.{k}"),
                format!("`{p}.{k}` is not supported"),
            ));
        }
    }
    let role = match o.get("role").and_then(Value::as_str) {
        Some(r @ ("user" | "assistant")) => r,
        _ => {
            return Err(ferr(
                format!("{p}.role"),
                format!("`{p}.role` must be \"user\" or \"assistant\""),
            ));
        }
    };
    let blocks = match o.get("content") {
        Some(Value::String(s)) => {
            out.push(json!({"role": role, "content": s}));
            return Ok(());
        }
        Some(Value::Array(a)) => a,
        _ => {
            return Err(ferr(
                format!("{p}.content"),
                format!("`{p}.content` must be a string or an array of content blocks"),
            ));
        }
    };
    let mut text = String::new();
    let mut calls = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        let q = format!("{p}.content[{j}]");
        match b.get("type").and_then(Value::as_str) {
            Some("text") => match b.get("text") {
                Some(Value::String(t)) => text.push_str(t),
                _ => {
                    return Err(ferr(
                        format!("{q}.text"),
                        format!("`{q}.text` must be a string"),
                    ));
                }
            },
            Some("tool_use") if role == "assistant" => {
                let (Some(id), Some(name), Some(input)) = (
                    b.get("id").and_then(Value::as_str),
                    b.get("name").and_then(Value::as_str),
                    b.get("input").filter(|v| v.is_object()),
                ) else {
                    return Err(ferr(
                        &q,
                        format!("`{q}` (tool_use) needs `id`, `name` and an object `input`"),
                    ));
                };
                calls.push(json!({"id": id, "type": "function",
                                  "function": {"name": name, "arguments": input.to_string()}}));
            }
            Some("tool_result") if role == "user" => {
                let Some(id) = b.get("tool_use_id").and_then(Value::as_str) else {
                    return Err(ferr(
                        format!("{q}.tool_use_id"),
                        format!("`{q}.tool_use_id` must be a string"),
                    ));
                };
                let mut content = match b.get("content") {
                    None | Some(Value::Null) => String::new(),
                    Some(c) => blocks_text(c, &format!("{q}.content"))?,
                };
                if b.get("is_error") == Some(&Value::Bool(true)) {
                    content = format!("Error: {content}");
                }
                if !text.is_empty() {
                    out.push(json!({"role": "user", "content": std::mem::take(&mut text)}));
                }
                out.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
            }
            Some(t) => {
                return Err(ferr(
                    format!("{q}.type"),
                    format!("content block type {t:?} is not supported in a {role} message"),
                ));
            }
            None => return Err(ferr(format!("{q}.type"), format!("`{q}.type` is required"))),
        }
    }
    if role == "assistant" {
        let mut m = json!({"role": "assistant", "content": text});
        if !calls.is_empty() {
            m["tool_calls"] = Value::Array(calls);
        }
        out.push(m);
    } else if !text.is_empty() || out.last().is_none_or(|l| l["role"] != "tool") {
        out.push(json!({"role": "user", "content": text}));
    }
    Ok(())
}

/// Translate a Messages request into the OpenAI chat request the core serves.
pub fn to_chat(body: &Value) -> Result<Value, FieldError> {
    let Some(obj) = body.as_object() else {
        return Err(ferr("", "the request body must be a JSON object"));
    };
    let mut chat = Map::new();
    for k in obj.keys() {
        let known = matches!(
            k.as_str(),
            "model"
                | "messages"
                | "system"
                | "max_tokens"
                | "stop_sequences"
                | "temperature"
                | "top_p"
                | "top_k"
                | "stream"
                | "tools"
                | "tool_choice"
        ) || IGNORED.contains(&k.as_str());
        if !known {
            return Err(ferr(k, format!("unknown or unsupported field `{k}`")));
        }
    }
    match obj.get("model") {
        Some(m @ Value::String(_)) => {
            chat.insert("model".into(), m.clone());
        }
        _ => return Err(ferr("model", "`model` is required and must be a string")),
    }
    match obj.get("max_tokens") {
        Some(Value::Number(n)) if n.as_u64().is_some_and(|x| x >= 1) => {
            chat.insert("max_tokens".into(), json!(n));
        }
        _ => {
            return Err(ferr(
                "max_tokens",
                "`max_tokens` is required, an integer >= 1",
            ));
        }
    }
    let mut messages = Vec::new();
    match obj.get("system") {
        None | Some(Value::Null) => {}
        Some(s) => {
            let text = blocks_text(s, "system")?;
            messages.push(json!({"role": "system", "content": text}));
        }
    }
    let Some(msgs) = obj.get("messages").and_then(Value::as_array) else {
        return Err(ferr(
            "messages",
            "`messages` is required and must be an array",
        ));
    };
    if msgs.is_empty() {
        return Err(ferr("messages", "`messages` must not be empty"));
    }
    for (i, m) in msgs.iter().enumerate() {
        message(i, m, &mut messages)?;
    }
    chat.insert("messages".into(), Value::Array(messages));
    if let Some(t) = obj.get("temperature").filter(|v| !v.is_null()) {
        match t.as_f64() {
            Some(x) if (0.0..=1.0).contains(&x) => {
                chat.insert("temperature".into(), t.clone());
            }
            _ => {
                return Err(ferr(
                    "temperature",
                    "`temperature` must be a number between 0 and 1",
                ));
            }
        }
    }
    for k in ["top_p", "top_k", "stream"] {
        if let Some(v) = obj.get(k).filter(|v| !v.is_null()) {
            chat.insert(k.into(), v.clone());
        }
    }
    match obj.get("stop_sequences") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => {
            if !a.is_empty() {
                chat.insert("stop".into(), Value::Array(a.clone()));
            }
        }
        Some(_) => {
            return Err(ferr(
                "stop_sequences",
                "`stop_sequences` must be an array of strings",
            ));
        }
    }
    if let Some(tools) = obj.get("tools").filter(|v| !v.is_null()) {
        let Some(a) = tools.as_array() else {
            return Err(ferr("tools", "`tools` must be an array"));
        };
        let mut out = Vec::with_capacity(a.len());
        for (i, t) in a.iter().enumerate() {
            if let Some(ty) = t.get("type").and_then(Value::as_str)
                && ty != "custom"
            {
                return Err(ferr(
                    format!("tools[{i}].type"),
                    format!("server tool {ty:?} is not supported; only client tools"),
                ));
            }
            let (Some(name), Some(schema)) = (
                t.get("name").and_then(Value::as_str),
                t.get("input_schema").filter(|s| s.is_object()),
            ) else {
                return Err(ferr(
                    format!("tools[{i}]"),
                    format!("`tools[{i}]` needs a `name` and an object `input_schema`"),
                ));
            };
            let mut f = json!({"name": name, "parameters": schema});
            if let Some(d) = t.get("description").and_then(Value::as_str) {
                f["description"] = json!(d);
            }
            out.push(json!({"type": "function", "function": f}));
        }
        chat.insert("tools".into(), Value::Array(out));
    }
    if let Some(tc) = obj.get("tool_choice").filter(|v| !v.is_null()) {
        let choice = match tc.get("type").and_then(Value::as_str) {
            Some("auto") => json!("auto"),
            Some("any") => json!("required"),
            Some("none") => json!("none"),
            Some("tool") => match tc.get("name").and_then(Value::as_str) {
                Some(n) => json!({"type": "function", "function": {"name": n}}),
                None => return Err(ferr("tool_choice.name", "`tool_choice.name` is required")),
            },
            _ => {
                return Err(ferr(
                    "tool_choice",
                    "`tool_choice.type` must be \"auto\", \"any\", \"tool\" or \"none\"",
                ));
            }
        };
        chat.insert("tool_choice".into(), choice);
    }
    Ok(Value::Object(chat))
}

fn stop_reason(o: &Outcome) -> (&'static str, Value) {
    match &o.stop {
        _ if o.has_calls() => ("tool_use", Value::Null),
        Stop::EndTurn => ("end_turn", Value::Null),
        Stop::Length => ("max_tokens", Value::Null),
        Stop::StopSequence(s) => ("stop_sequence", json!(s)),
    }
}

fn usage(o: &Outcome) -> Value {
    json!({"input_tokens": o.prompt_tokens, "output_tokens": o.completion_tokens,
           "cache_read_input_tokens": o.cached_tokens, "cache_creation_input_tokens": 0})
}

fn input_of(arguments: &str) -> Value {
    serde_json::from_str(arguments).unwrap_or_else(|_| json!({}))
}

/// The blocking response body.
pub fn response(o: &Outcome) -> Value {
    let mut content = Vec::new();
    let mut text = String::new();
    for p in &o.parts {
        match p {
            Parsed::Content(s) => text.push_str(s),
            Parsed::Call { call, .. } => {
                if !text.trim().is_empty() {
                    content.push(json!({"type": "text", "text": std::mem::take(&mut text)}));
                }
                text.clear();
                content.push(json!({"type": "tool_use", "id": call.id, "name": call.name,
                                    "input": input_of(&call.arguments)}));
            }
        }
    }
    if !text.is_empty() || content.is_empty() {
        content.push(json!({"type": "text", "text": text}));
    }
    let (reason, seq) = stop_reason(o);
    json!({"id": o.id, "type": "message", "role": "assistant", "model": o.model,
           "content": content, "stop_reason": reason, "stop_sequence": seq, "usage": usage(o)})
}

/// An Anthropic-shaped error body.
pub fn error_body(status: u16, message: &str) -> Value {
    let kind = match status {
        400 | 413 | 422 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        _ => "api_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": message}})
}

/// One server-sent event: `event: NAME\ndata: JSON\n\n`.
pub fn sse(name: &str, data: &Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Open {
    None,
    Text,
}

/// Streaming events in Anthropic's order, fed with parsed pieces as they come.
#[derive(Debug)]
pub struct EventStream {
    index: usize,
    open: Open,
    started: bool,
}

impl Default for EventStream {
    fn default() -> Self {
        Self::new()
    }
}

impl EventStream {
    pub fn new() -> EventStream {
        EventStream {
            index: 0,
            open: Open::None,
            started: false,
        }
    }

    /// `message_start` (usage holds the prompt tokens; output tokens come at the end).
    pub fn start(
        &mut self,
        id: &str,
        model: &str,
        prompt_tokens: usize,
        cached: usize,
    ) -> Vec<String> {
        self.started = true;
        vec![sse(
            "message_start",
            &json!({"type": "message_start", "message": {
                "id": id, "type": "message", "role": "assistant", "model": model, "content": [],
                "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": prompt_tokens, "output_tokens": 0,
                          "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0}}}),
        )]
    }

    fn close(&mut self, out: &mut Vec<String>) {
        if self.open != Open::None {
            out.push(sse(
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": self.index}),
            ));
            self.index += 1;
            self.open = Open::None;
        }
    }

    /// Events for one parsed piece.
    pub fn piece(&mut self, p: &Parsed) -> Vec<String> {
        let mut out = Vec::new();
        match p {
            Parsed::Content(s) if s.is_empty() => {}
            Parsed::Content(s) => {
                if self.open != Open::Text {
                    out.push(sse(
                        "content_block_start",
                        &json!({"type": "content_block_start", "index": self.index,
                                "content_block": {"type": "text", "text": ""}}),
                    ));
                    self.open = Open::Text;
                }
                out.push(sse(
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": self.index,
                            "delta": {"type": "text_delta", "text": s}}),
                ));
            }
            Parsed::Call { call, .. } => {
                self.close(&mut out);
                out.push(sse(
                    "content_block_start",
                    &json!({"type": "content_block_start", "index": self.index,
                            "content_block": {"type": "tool_use", "id": call.id,
                                              "name": call.name, "input": {}}}),
                ));
                out.push(sse(
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": self.index,
                            "delta": {"type": "input_json_delta",
                                      "partial_json": input_of(&call.arguments).to_string()}}),
                ));
                out.push(sse(
                    "content_block_stop",
                    &json!({"type": "content_block_stop", "index": self.index}),
                ));
                self.index += 1;
            }
        }
        out
    }

    /// Close the open block, then `message_delta` and `message_stop`.
    pub fn finish(&mut self, o: &Outcome) -> Vec<String> {
        let mut out = Vec::new();
        if self.index == 0 && self.open == Open::None {
            // An empty answer is still one (empty) text block.
            out.push(sse(
                "content_block_start",
                &json!({"type": "content_block_start", "index": 0,
                        "content_block": {"type": "text", "text": ""}}),
            ));
            self.open = Open::Text;
        }
        self.close(&mut out);
        let (reason, seq) = stop_reason(o);
        out.push(sse(
            "message_delta",
            &json!({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": seq},
                    "usage": {"output_tokens": o.completion_tokens}}),
        ));
        out.push(sse("message_stop", &json!({"type": "message_stop"})));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::tools::ToolCall;

    #[test]
    fn request_translates_blocks_tools_and_sampling() {
        let body = json!({
        "model": "m", "max_tokens": 64, "system": [{"type": "text", "text": "Be brief."}],
        "temperature": 0.5, "top_k": 40, "stop_sequences": ["END"], "stream": true,
        "tools": [{"name": "get_weather", "description": "d", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any"},
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [{"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "tu1", "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu1",
                "content": [{"type": "text", "text": "sunny"}]}, {"type": "text", "text": "And?"}]}
        ]});
        let c = to_chat(&body).unwrap();
        assert_eq!(c["max_tokens"], 64);
        assert_eq!(c["stop"], json!(["END"]));
        assert_eq!(c["tool_choice"], "required");
        assert_eq!(
            c["tools"][0]["function"]["parameters"],
            json!({"type": "object"})
        );
        let m = c["messages"].as_array().unwrap();
        assert_eq!(m[0], json!({"role": "system", "content": "Be brief."}));
        assert_eq!(
            m[2]["tool_calls"][0]["function"]["arguments"],
            "{\"city\":\"Paris\"}"
        );
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "tu1", "content": "sunny"})
        );
        assert_eq!(m[4], json!({"role": "user", "content": "And?"}));
        assert_eq!(m.len(), 5);
    }

    #[test]
    fn bad_requests_name_the_field() {
        let ok =
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]});
        assert!(to_chat(&ok).is_ok());
        for (patch, param) in [
            (json!({"max_tokens": null}), "max_tokens"),
            (json!({"max_tokens": 0}), "max_tokens"),
            (json!({"temperature": 1.5}), "temperature"),
            (json!({"thinking": {"type": "enabled"}}), "thinking"),
            (json!({"messages": []}), "messages"),
            (
                json!({"messages": [{"role": "system", "content": "x"}]}),
                "messages[0].role",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "image"}]}]}),
                "messages[0].content[0].type",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "b", "input": {}}]}]}),
                "messages[0].content[0].type",
            ),
            (
                json!({"tools": [{"type": "web_search_20250305", "name": "w"}]}),
                "tools[0].type",
            ),
            (json!({"tool_choice": {"type": "tool"}}), "tool_choice.name"),
        ] {
            let mut b = ok.clone();
            for (k, v) in patch.as_object().unwrap() {
                b[k] = v.clone();
            }
            assert_eq!(to_chat(&b).unwrap_err().0, param, "{patch}");
        }
    }

    fn outcome(parts: Vec<Parsed>, stop: Stop) -> Outcome {
        Outcome {
            id: "msg_1".into(),
            model: "m".into(),
            created: 0,
            parts,
            stop,
            prompt_tokens: 10,
            cached_tokens: 0,
            completion_tokens: 7,
        }
    }

    fn call() -> Parsed {
        Parsed::Call {
            index: 0,
            call: ToolCall {
                id: "toolu_1".into(),
                name: "f".into(),
                arguments: "{\"a\":1}".into(),
            },
        }
    }

    #[test]
    fn response_body_and_stop_reasons() {
        let r = response(&outcome(vec![Parsed::Content("hi".into())], Stop::Length));
        assert_eq!(r["stop_reason"], "max_tokens");
        assert_eq!(r["content"], json!([{"type": "text", "text": "hi"}]));
        assert_eq!(r["usage"]["output_tokens"], 7);
        let r = response(&outcome(
            vec![Parsed::Content("Let me.".into()), call()],
            Stop::EndTurn,
        ));
        assert_eq!(r["stop_reason"], "tool_use");
        assert_eq!(
            r["content"][1],
            json!({"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}})
        );
        let r = response(&outcome(vec![], Stop::StopSequence(Some("END".into()))));
        assert_eq!(
            (r["stop_reason"].as_str(), r["stop_sequence"].as_str()),
            (Some("stop_sequence"), Some("END"))
        );
    }

    fn names(events: &[String]) -> Vec<String> {
        events
            .iter()
            .map(|e| {
                e.lines()
                    .next()
                    .unwrap()
                    .trim_start_matches("event: ")
                    .to_owned()
            })
            .collect()
    }

    #[test]
    fn stream_events_in_anthropic_order() {
        let mut s = EventStream::new();
        let mut ev = s.start("msg_1", "m", 10, 0);
        ev.extend(s.piece(&Parsed::Content("He".into())));
        ev.extend(s.piece(&Parsed::Content("llo".into())));
        ev.extend(s.piece(&call()));
        let o = outcome(vec![], Stop::EndTurn);
        ev.extend(s.finish(&o));
        assert_eq!(
            names(&ev),
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        let data = |i: usize| -> Value {
            serde_json::from_str(ev[i].lines().nth(1).unwrap().trim_start_matches("data: "))
                .unwrap()
        };
        assert_eq!(data(5)["index"], 1);
        assert_eq!(data(6)["delta"]["partial_json"], "{\"a\":1}");
        assert_eq!(data(8)["delta"]["stop_reason"], "end_turn");
        // an empty answer still opens and closes one text block
        let mut s = EventStream::new();
        let mut ev = s.start("m", "m", 1, 0);
        ev.extend(s.finish(&o));
        assert_eq!(
            names(&ev),
            [
                "message_start",
                "content_block_start",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
    }
}
