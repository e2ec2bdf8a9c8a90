//! The streaming tool-call parser (per [`Family`]) that splits generated text into plain
//! content and calls, and the OpenAI shapes (streamed `delta`, whole `message`) of what it
//! found.

use serde_json::{Value, json};

use super::Family;

/// One parsed call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as a JSON text (OpenAI's shape).
    pub arguments: String,
}

/// What the parser found in the generated text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    Content(String),
    Call { index: usize, call: ToolCall },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Streaming content.
    Text,
    /// Inside `<tool_call>` (Hermes).
    InCall,
    /// Undecided start (Llama JSON: whitespace so far).
    Start,
    /// Everything from here is held to the end (Llama JSON, Mistral calls).
    Held,
}

/// Streaming tool-call parser.
#[derive(Debug)]
pub struct ToolParser {
    family: Family,
    id_prefix: String,
    buf: String,
    state: State,
    calls: usize,
}

const OPEN: &str = "<tool_call>";
const CLOSE: &str = "</tool_call>";
const PY_TAG: &str = "<|python_tag|>";
const MISTRAL: &str = "[TOOL_CALLS]";

/// Length of the longest suffix of `s` that is a proper prefix of `pat`.
fn partial_suffix(s: &str, pat: &str) -> usize {
    (1..pat.len().min(s.len() + 1))
        .rev()
        .find(|&n| s.is_char_boundary(s.len() - n) && pat.starts_with(&s[s.len() - n..]))
        .unwrap_or(0)
}

fn parse_call_object(v: &Value) -> Option<(String, String)> {
    let o = v.as_object()?;
    let name = o.get("name")?.as_str()?.to_owned();
    let args = o.get("arguments").or_else(|| o.get("parameters"));
    let args = match args {
        None | Some(Value::Null) => "{}".to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    };
    Some((name, args))
}

impl ToolParser {
    /// A parser for `family`; call ids are `{id_prefix}_{n}`.
    pub fn new(family: Family, id_prefix: &str) -> ToolParser {
        ToolParser {
            family,
            id_prefix: id_prefix.to_owned(),
            buf: String::new(),
            state: match family {
                Family::Llama3Json => State::Start,
                _ => State::Text,
            },
            calls: 0,
        }
    }

    fn call(&mut self, name: String, arguments: String) -> Parsed {
        let index = self.calls;
        self.calls += 1;
        Parsed::Call {
            index,
            call: ToolCall {
                id: format!("{}_{index}", self.id_prefix),
                name,
                arguments,
            },
        }
    }

    /// Calls found so far.
    pub fn calls(&self) -> usize {
        self.calls
    }

    /// Feed generated text; returns what can be emitted now.
    pub fn push(&mut self, text: &str) -> Vec<Parsed> {
        self.buf.push_str(text);
        let mut out = Vec::new();
        loop {
            match self.state {
                State::Held => return out,
                State::Start => {
                    let t = self.buf.trim_start();
                    if t.is_empty() || (PY_TAG.starts_with(t) && t.len() < PY_TAG.len()) {
                        return out;
                    }
                    self.state = if t.starts_with('{') || t.starts_with(PY_TAG) {
                        State::Held
                    } else {
                        State::Text
                    };
                }
                State::Text => {
                    let pat = match self.family {
                        Family::Hermes => OPEN,
                        Family::Mistral => MISTRAL,
                        Family::Llama3Json => {
                            let all = std::mem::take(&mut self.buf);
                            if !all.is_empty() {
                                out.push(Parsed::Content(all));
                            }
                            return out;
                        }
                    };
                    if self.calls > 0 {
                        let t = self.buf.trim_start().len();
                        self.buf.drain(..self.buf.len() - t);
                    }
                    if let Some(at) = self.buf.find(pat) {
                        let before: String = self.buf.drain(..at).collect();
                        self.buf.drain(..pat.len());
                        if !before.trim().is_empty() || (self.calls == 0 && !before.is_empty()) {
                            out.push(Parsed::Content(before));
                        }
                        self.state = if self.family == Family::Hermes {
                            State::InCall
                        } else {
                            State::Held
                        };
                        continue;
                    }
                    let keep = partial_suffix(&self.buf, pat);
                    let emit: String = self.buf.drain(..self.buf.len() - keep).collect();
                    if !emit.is_empty() {
                        out.push(Parsed::Content(emit));
                    }
                    return out;
                }
                State::InCall => {
                    let Some(at) = self.buf.find(CLOSE) else {
                        return out;
                    };
                    let body: String = self.buf.drain(..at).collect();
                    self.buf.drain(..CLOSE.len());
                    match serde_json::from_str::<Value>(body.trim())
                        .ok()
                        .as_ref()
                        .and_then(parse_call_object)
                    {
                        Some((n, a)) => {
                            let c = self.call(n, a);
                            out.push(c);
                        }
                        None => out.push(Parsed::Content(format!("{OPEN}{body}{CLOSE}"))),
                    }
                    self.state = State::Text;
                }
            }
        }
    }

    /// End of generation: whatever is held, as calls if it parses, else as content.
    pub fn finish(mut self) -> Vec<Parsed> {
        let mut out = Vec::new();
        let buf = std::mem::take(&mut self.buf);
        match self.state {
            State::Text | State::Start => {
                if !buf.is_empty() && (self.calls == 0 || !buf.trim().is_empty()) {
                    out.push(Parsed::Content(buf));
                }
            }
            State::InCall => {
                match serde_json::from_str::<Value>(buf.trim())
                    .ok()
                    .as_ref()
                    .and_then(parse_call_object)
                {
                    Some((n, a)) => out.push(self.call(n, a)),
                    None => out.push(Parsed::Content(format!("{OPEN}{buf}"))),
                }
            }
            State::Held => {
                let calls = match self.family {
                    Family::Llama3Json => parse_llama(&buf),
                    Family::Mistral => parse_mistral(&buf),
                    Family::Hermes => None,
                };
                match calls {
                    Some(cs) if !cs.is_empty() => {
                        for (n, a) in cs {
                            out.push(self.call(n, a));
                        }
                    }
                    _ => {
                        let prefix = if self.family == Family::Mistral {
                            MISTRAL
                        } else {
                            ""
                        };
                        out.push(Parsed::Content(format!("{prefix}{buf}")));
                    }
                }
            }
        }
        out
    }
}

/// `{"name", "parameters"}` objects, optionally after `<|python_tag|>`, separated by `;`
/// or whitespace.
fn parse_llama(s: &str) -> Option<Vec<(String, String)>> {
    let s = s.trim();
    let s = s.strip_prefix(PY_TAG).unwrap_or(s);
    let mut out = Vec::new();
    let mut rest = s.trim();
    while !rest.is_empty() {
        let mut de = serde_json::Deserializer::from_str(rest).into_iter::<Value>();
        let v = de.next()?.ok()?;
        out.push(parse_call_object(&v)?);
        rest = rest[de.byte_offset()..]
            .trim_start()
            .trim_start_matches(';')
            .trim_start();
    }
    Some(out)
}

/// After `[TOOL_CALLS]`: a JSON array of calls, or `name[ARGS]{json}` (repeated with
/// `[TOOL_CALLS]` between).
fn parse_mistral(s: &str) -> Option<Vec<(String, String)>> {
    let t = s.trim();
    if t.starts_with('[') {
        let v: Value = serde_json::from_str(t).ok()?;
        return v.as_array()?.iter().map(parse_call_object).collect();
    }
    let mut out = Vec::new();
    for part in t.split(MISTRAL) {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let (name, args) = part.split_once("[ARGS]")?;
        let args: Value = serde_json::from_str(args.trim()).ok()?;
        out.push((name.trim().to_owned(), args.to_string()));
    }
    Some(out)
}

/// The OpenAI streamed `delta` for a parsed piece.
pub fn delta(p: &Parsed) -> Value {
    match p {
        Parsed::Content(s) => json!({"content": s}),
        Parsed::Call { index, call } => json!({"tool_calls": [{
            "index": index, "id": call.id, "type": "function",
            "function": {"name": call.name, "arguments": call.arguments}}]}),
    }
}

/// A non-streamed message from parsed pieces: `(content or null, tool_calls)`.
pub fn message(parts: &[Parsed]) -> Value {
    let mut content = String::new();
    let mut calls = Vec::new();
    for p in parts {
        match p {
            Parsed::Content(s) => content.push_str(s),
            Parsed::Call { call, .. } => calls.push(json!({"id": call.id, "type": "function",
                "function": {"name": call.name, "arguments": call.arguments}})),
        }
    }
    let mut m = json!({"role": "assistant", "content": content});
    if !calls.is_empty() {
        if content.trim().is_empty() {
            m["content"] = Value::Null;
        }
        m["tool_calls"] = Value::Array(calls);
    }
    m
}
