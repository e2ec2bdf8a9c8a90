//! OpenAI Responses (`POST /v1/responses`), stateless: `input` (a string or message /
//! `function_call` / `function_call_output` items), `instructions`, function `tools`,
//! `tool_choice`, `text.format` (text, json_object, json_schema), `max_output_tokens` and
//! sampling fields translated onto the OpenAI chat request the core serves; the result
//! translated back into a `response` object (output items `message` / `function_call`),
//! or the streaming events (`response.created` ... `response.completed`).
//!
//! Nothing is stored: `previous_response_id` and conversation state are refused with a
//! 400; `store` is accepted and has no effect (there is no retrieval endpoint).

use serde_json::{Map, Value, json};

use super::tools::Parsed;
use super::{FieldError, Outcome, Stop};

fn ferr(param: impl Into<String>, msg: impl Into<String>) -> FieldError {
    (param.into(), msg.into())
}

const IGNORED: [&str; 5] = [
    "store",
    "metadata",
    "user",
    "parallel_tool_calls",
    "service_tier",
];

fn content_text(v: &Value, param: &str) -> Result<String, FieldError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(a) => {
            let mut s = String::new();
            for (i, p) in a.iter().enumerate() {
                match (p.get("type").and_then(Value::as_str), p.get("text")) {
                    (Some("input_text" | "output_text" | "text"), Some(Value::String(t))) => {
                        s.push_str(t)
                    }
                    _ => {
                        return Err(ferr(
                            format!("{param}[{i}]"),
                            format!(
                                "`{param}[{i}]`: only input_text / output_text parts are supported"
                            ),
                        ));
                    }
                }
            }
            Ok(s)
        }
        _ => Err(ferr(
            param,
            format!("`{param}` must be a string or an array of text parts"),
        )),
    }
}

fn input_items(v: &Value, out: &mut Vec<Value>) -> Result<(), FieldError> {
    let items = match v {
        Value::String(s) => {
            out.push(json!({"role": "user", "content": s}));
            return Ok(());
        }
        Value::Array(a) if !a.is_empty() => a,
        _ => {
            return Err(ferr(
                "input",
                "`input` must be a string or a non-empty array of items",
            ));
        }
    };
    for (i, it) in items.iter().enumerate() {
        let p = format!("input[{i}]");
        let ty = it.get("type").and_then(Value::as_str);
        match ty {
            None | Some("message") => {
                let role = match it.get("role").and_then(Value::as_str) {
                    Some(r @ ("user" | "assistant" | "system" | "developer")) => r,
                    _ => {
                        return Err(ferr(
                            format!("{p}.role"),
                            format!("`{p}.role` must be user, assistant, system or developer"),
                        ));
                    }
                };
                let Some(c) = it.get("content") else {
                    return Err(ferr(
                        format!("{p}.content"),
                        format!("`{p}.content` is required"),
                    ));
                };
                let text = content_text(c, &format!("{p}.content"))?;
                let role = if role == "developer" { "system" } else { role };
                out.push(json!({"role": role, "content": text}));
            }
            Some("function_call") => {
                let (Some(id), Some(name), Some(args)) = (
                    it.get("call_id").and_then(Value::as_str),
                    it.get("name").and_then(Value::as_str),
                    it.get("arguments").and_then(Value::as_str),
                ) else {
                    return Err(ferr(
                        &p,
                        format!("`{p}` (function_call) needs `call_id`, `name` and `arguments`"),
                    ));
                };
                let call = json!({"id": id, "type": "function",
                                  "function": {"name": name, "arguments": args}});
                match out.last_mut() {
                    Some(last) if last["role"] == "assistant" => {
                        if let Some(a) = last.get_mut("tool_calls").and_then(Value::as_array_mut) {
                            a.push(call);
                        } else {
                            last["tool_calls"] = json!([call]);
                        }
                    }
                    _ => {
                        out.push(json!({"role": "assistant", "content": "", "tool_calls": [call]}))
                    }
                }
            }
            Some("function_call_output") => {
                let (Some(id), Some(output)) =
                    (it.get("call_id").and_then(Value::as_str), it.get("output"))
                else {
                    return Err(ferr(
                        &p,
                        format!("`{p}` (function_call_output) needs `call_id` and `output`"),
                    ));
                };
                let text = content_text(output, &format!("{p}.output"))?;
                out.push(json!({"role": "tool", "tool_call_id": id, "content": text}));
            }
            Some(t) => {
                return Err(ferr(
                    format!("{p}.type"),
                    format!("input item type {t:?} is not supported"),
                ));
            }
        }
    }
    Ok(())
}

/// Translate a Responses request into the OpenAI chat request the core serves.
pub fn to_chat(body: &Value) -> Result<Value, FieldError> {
    let Some(obj) = body.as_object() else {
        return Err(ferr("", "the request body must be a JSON object"));
    };
    for (k, v) in obj {
        if v.is_null() {
            continue;
        }
        let known = matches!(
            k.as_str(),
            "model"
                | "input"
                | "instructions"
                | "tools"
                | "tool_choice"
                | "text"
                | "max_output_tokens"
                | "temperature"
                | "top_p"
                | "stream"
        ) || IGNORED.contains(&k.as_str())
            || (k == "truncation" && v == "disabled")
            || (k == "include" && v.as_array().is_some_and(Vec::is_empty));
        if !known {
            let why = match k.as_str() {
                "previous_response_id" | "conversation" => {
                    "this server is stateless: send the whole conversation in `input`"
                }
                _ => "unknown or unsupported field",
            };
            return Err(ferr(k, format!("`{k}`: {why}")));
        }
    }
    let mut chat = Map::new();
    match obj.get("model") {
        Some(m @ Value::String(_)) => {
            chat.insert("model".into(), m.clone());
        }
        _ => return Err(ferr("model", "`model` is required and must be a string")),
    }
    let mut messages = Vec::new();
    match obj.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => messages.push(json!({"role": "system", "content": s})),
        Some(_) => return Err(ferr("instructions", "`instructions` must be a string")),
    }
    let Some(input) = obj.get("input") else {
        return Err(ferr("input", "`input` is required"));
    };
    input_items(input, &mut messages)?;
    chat.insert("messages".into(), Value::Array(messages));
    if let Some(m) = obj.get("max_output_tokens").filter(|v| !v.is_null()) {
        chat.insert("max_tokens".into(), m.clone());
    }
    for k in ["temperature", "top_p", "stream", "tool_choice"] {
        if let Some(v) = obj.get(k).filter(|v| !v.is_null()) {
            let v = match (k, v.get("type").and_then(Value::as_str), v.get("name")) {
                ("tool_choice", Some("function"), Some(n)) => {
                    json!({"type": "function", "function": {"name": n}})
                }
                _ => v.clone(),
            };
            chat.insert(k.into(), v);
        }
    }
    if let Some(tools) = obj.get("tools").filter(|v| !v.is_null()) {
        let Some(a) = tools.as_array() else {
            return Err(ferr("tools", "`tools` must be an array"));
        };
        let mut out = Vec::with_capacity(a.len());
        for (i, t) in a.iter().enumerate() {
            if t.get("type").and_then(Value::as_str) != Some("function") {
                return Err(ferr(
                    format!("tools[{i}].type"),
                    "only function tools are served (no built-in tools)",
                ));
            }
            let mut f = Map::new();
            for k in ["name", "description", "parameters"] {
                if let Some(v) = t.get(k).filter(|v| !v.is_null()) {
                    f.insert(k.into(), v.clone());
                }
            }
            out.push(json!({"type": "function", "function": f}));
        }
        chat.insert("tools".into(), Value::Array(out));
    }
    if let Some(fmt) = obj
        .get("text")
        .and_then(|t| t.get("format"))
        .filter(|v| !v.is_null())
    {
        let rf = match fmt.get("type").and_then(Value::as_str) {
            Some("text") => json!({"type": "text"}),
            Some("json_object") => json!({"type": "json_object"}),
            Some("json_schema") => {
                let mut js = Map::new();
                for k in ["name", "schema", "strict"] {
                    if let Some(v) = fmt.get(k) {
                        js.insert(k.into(), v.clone());
                    }
                }
                if !js.contains_key("schema") {
                    return Err(ferr(
                        "text.format.schema",
                        "`text.format.schema` is required",
                    ));
                }
                json!({"type": "json_schema", "json_schema": js})
            }
            _ => {
                return Err(ferr(
                    "text.format.type",
                    "`text.format.type` must be text, json_object or json_schema",
                ));
            }
        };
        chat.insert("response_format".into(), rf);
    }
    Ok(Value::Object(chat))
}

fn message_item(id: &str, text: &str) -> Value {
    json!({"type": "message", "id": format!("msg_{id}"), "status": "completed", "role": "assistant",
           "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

fn call_item(call: &super::tools::ToolCall) -> Value {
    json!({"type": "function_call", "id": format!("fc_{}", call.id), "call_id": call.id,
           "name": call.name, "arguments": call.arguments, "status": "completed"})
}

fn output(o: &Outcome) -> Vec<Value> {
    let mut items = Vec::new();
    let mut text = String::new();
    for p in &o.parts {
        match p {
            Parsed::Content(s) => text.push_str(s),
            Parsed::Call { call, .. } => {
                if !text.trim().is_empty() {
                    items.push(message_item(&o.id, &std::mem::take(&mut text)));
                }
                text.clear();
                items.push(call_item(call));
            }
        }
    }
    if !text.is_empty() || items.is_empty() {
        items.push(message_item(&o.id, &text));
    }
    items
}

/// The `response` object.
pub fn response(o: &Outcome) -> Value {
    let (status, incomplete) = match o.stop {
        Stop::Length if !o.has_calls() => ("incomplete", json!({"reason": "max_output_tokens"})),
        _ => ("completed", Value::Null),
    };
    json!({
        "id": o.id, "object": "response", "created_at": o.created, "status": status,
        "model": o.model, "output": output(o), "incomplete_details": incomplete, "error": null,
        "parallel_tool_calls": false, "tool_choice": "auto", "tools": [], "metadata": {},
        "usage": {"input_tokens": o.prompt_tokens, "output_tokens": o.completion_tokens,
                  "total_tokens": o.prompt_tokens + o.completion_tokens,
                  "input_tokens_details": {"cached_tokens": o.cached_tokens},
                  "output_tokens_details": {"reasoning_tokens": 0}},
    })
}

/// Streaming events, fed with parsed pieces as they come.
#[derive(Debug, Default)]
pub struct EventStream {
    seq: u64,
    /// Output index of the open message item, if any.
    open: Option<usize>,
    text: String,
    items: usize,
    id: String,
}

impl EventStream {
    pub fn new(id: &str) -> EventStream {
        EventStream {
            id: id.to_owned(),
            ..EventStream::default()
        }
    }

    fn ev(&mut self, mut data: Value) -> String {
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        let name = data["type"].as_str().unwrap_or("").to_owned();
        format!("event: {name}\ndata: {data}\n\n")
    }

    /// `response.created` and `response.in_progress` (the response so far: no output).
    pub fn start(&mut self, model: &str, created: u64) -> Vec<String> {
        let r = json!({"id": self.id, "object": "response", "created_at": created,
                       "status": "in_progress", "model": model, "output": [], "error": null,
                       "incomplete_details": null, "tools": [], "tool_choice": "auto",
                       "parallel_tool_calls": false, "metadata": {}});
        vec![
            self.ev(json!({"type": "response.created", "response": r})),
            self.ev(json!({"type": "response.in_progress", "response": r})),
        ]
    }

    fn close(&mut self, out: &mut Vec<String>) {
        if let Some(i) = self.open.take() {
            let text = std::mem::take(&mut self.text);
            let item_id = format!("msg_{}", self.id);
            let e = self.ev(
                json!({"type": "response.output_text.done", "item_id": item_id,
                                   "output_index": i, "content_index": 0, "text": text}),
            );
            out.push(e);
            let e = self.ev(
                json!({"type": "response.content_part.done", "item_id": item_id,
                "output_index": i, "content_index": 0,
                "part": {"type": "output_text", "text": text, "annotations": []}}),
            );
            out.push(e);
            let item = message_item(&self.id, &text);
            let e = self
                .ev(json!({"type": "response.output_item.done", "output_index": i, "item": item}));
            out.push(e);
        }
    }

    fn open_message(&mut self, out: &mut Vec<String>) -> usize {
        if let Some(i) = self.open {
            return i;
        }
        let item_id = format!("msg_{}", self.id);
        let i = self.items;
        self.items += 1;
        self.open = Some(i);
        let e = self.ev(
            json!({"type": "response.output_item.added", "output_index": i,
            "item": {"type": "message", "id": item_id, "status": "in_progress",
                     "role": "assistant", "content": []}}),
        );
        out.push(e);
        let e = self.ev(
            json!({"type": "response.content_part.added", "item_id": item_id,
            "output_index": i, "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": []}}),
        );
        out.push(e);
        i
    }

    /// Events for one parsed piece.
    pub fn piece(&mut self, p: &Parsed) -> Vec<String> {
        let mut out = Vec::new();
        match p {
            Parsed::Content(s) if s.is_empty() => {}
            Parsed::Content(s) => {
                let item_id = format!("msg_{}", self.id);
                let i = self.open_message(&mut out);
                self.text.push_str(s);
                let e = self.ev(
                    json!({"type": "response.output_text.delta", "item_id": item_id,
                                       "output_index": i, "content_index": 0, "delta": s}),
                );
                out.push(e);
            }
            Parsed::Call { call, .. } => {
                self.close(&mut out);
                let i = self.items;
                self.items += 1;
                let mut item = call_item(call);
                let item_id = item["id"].clone();
                item["arguments"] = json!("");
                item["status"] = json!("in_progress");
                let e = self.ev(
                    json!({"type": "response.output_item.added", "output_index": i, "item": item}),
                );
                out.push(e);
                let e = self.ev(json!({"type": "response.function_call_arguments.delta",
                    "item_id": item_id, "output_index": i, "delta": call.arguments}));
                out.push(e);
                let e = self.ev(json!({"type": "response.function_call_arguments.done",
                    "item_id": item_id, "output_index": i, "arguments": call.arguments}));
                out.push(e);
                let e = self.ev(
                    json!({"type": "response.output_item.done", "output_index": i,
                                       "item": call_item(call)}),
                );
                out.push(e);
            }
        }
        out
    }

    /// Close the open item and send `response.completed` (or `response.incomplete`).
    pub fn finish(&mut self, o: &Outcome) -> Vec<String> {
        let mut out = Vec::new();
        if self.items == 0 {
            self.open_message(&mut out);
        }
        self.close(&mut out);
        let r = response(o);
        let kind = if r["status"] == "incomplete" {
            "response.incomplete"
        } else {
            "response.completed"
        };
        let e = self.ev(json!({"type": kind, "response": r}));
        out.push(e);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::tools::ToolCall;

    #[test]
    fn request_translates_items_tools_and_format() {
        let c = to_chat(&json!({
            "model": "m", "instructions": "Be brief.", "max_output_tokens": 32, "store": false,
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
                {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            ],
            "tools": [{"type": "function", "name": "w", "parameters": {"type": "object"}, "strict": true}],
            "tool_choice": {"type": "function", "name": "w"},
            "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}, "strict": true}},
        }))
        .unwrap();
        assert_eq!(c["max_tokens"], 32);
        let m = c["messages"].as_array().unwrap();
        assert_eq!(m[0], json!({"role": "system", "content": "Be brief."}));
        assert_eq!(m[1], json!({"role": "user", "content": "Weather?"}));
        assert_eq!(m[2]["tool_calls"][0]["id"], "c1");
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "c1", "content": "sunny"})
        );
        assert_eq!(c["tools"][0]["function"]["name"], "w");
        assert_eq!(
            c["tool_choice"],
            json!({"type": "function", "function": {"name": "w"}})
        );
        assert_eq!(c["response_format"]["json_schema"]["strict"], true);
        let c = to_chat(&json!({"model": "m", "input": "hi"})).unwrap();
        assert_eq!(c["messages"], json!([{"role": "user", "content": "hi"}]));
    }

    #[test]
    fn refusals_name_the_field() {
        for (body, param) in [
            (
                json!({"model": "m", "input": "x", "previous_response_id": "r"}),
                "previous_response_id",
            ),
            (
                json!({"model": "m", "input": "x", "reasoning": {"effort": "low"}}),
                "reasoning",
            ),
            (json!({"model": "m"}), "input"),
            (json!({"model": "m", "input": []}), "input"),
            (
                json!({"model": "m", "input": [{"type": "image"}]}),
                "input[0].type",
            ),
            (
                json!({"model": "m", "input": "x", "tools": [{"type": "web_search"}]}),
                "tools[0].type",
            ),
            (
                json!({"model": "m", "input": "x", "text": {"format": {"type": "yaml"}}}),
                "text.format.type",
            ),
        ] {
            assert_eq!(to_chat(&body).unwrap_err().0, param, "{body}");
        }
    }

    fn outcome(parts: Vec<Parsed>, stop: Stop) -> Outcome {
        Outcome {
            id: "resp_1".into(),
            model: "m".into(),
            created: 1,
            parts,
            stop,
            prompt_tokens: 3,
            cached_tokens: 0,
            completion_tokens: 4,
        }
    }

    #[test]
    fn response_and_stream_shapes() {
        let call = Parsed::Call {
            index: 0,
            call: ToolCall {
                id: "call_1".into(),
                name: "w".into(),
                arguments: "{}".into(),
            },
        };
        let o = outcome(
            vec![Parsed::Content("ok".into()), call.clone()],
            Stop::EndTurn,
        );
        let r = response(&o);
        assert_eq!(r["status"], "completed");
        assert_eq!(r["output"][0]["content"][0]["text"], "ok");
        assert_eq!(r["output"][1]["type"], "function_call");
        assert_eq!(r["usage"]["total_tokens"], 7);
        let r = response(&outcome(vec![Parsed::Content("x".into())], Stop::Length));
        assert_eq!(r["status"], "incomplete");

        let mut s = EventStream::new("resp_1");
        let mut ev = s.start("m", 1);
        ev.extend(s.piece(&Parsed::Content("o".into())));
        ev.extend(s.piece(&Parsed::Content("k".into())));
        ev.extend(s.piece(&call));
        ev.extend(s.finish(&o));
        let types: Vec<Value> = ev
            .iter()
            .map(|e| {
                serde_json::from_str::<Value>(
                    e.lines().nth(1).unwrap().trim_start_matches("data: "),
                )
                .unwrap()
            })
            .collect();
        let names: Vec<&str> = types.iter().map(|t| t["type"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        for (i, t) in types.iter().enumerate() {
            assert_eq!(t["sequence_number"], i as u64);
        }
        assert_eq!(types[6]["text"], "ok");
    }
}
