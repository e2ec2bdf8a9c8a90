//! Tool calling: OpenAI `tools` / `tool_choice` and tool-bearing `messages` validated and
//! rendered through the model's chat template, a grammar that forces a valid call when the
//! choice is `required` or a named function, and a streaming parser, chosen per template
//! family, that splits generated text into plain content and `tool_calls`.
//!
//! Families ([`Family`]): Hermes / Qwen (`<tool_call>{"name", "arguments"}</tool_call>`),
//! Llama 3.1 JSON (`{"name", "parameters"}`, optionally after `<|python_tag|>`), Mistral
//! (`[TOOL_CALLS][{"name", "arguments"}]` or `[TOOL_CALLS]name[ARGS]{...}`).
//!
//! A template that takes `tools` renders them itself ([`ToolFormat::native`]); for one that
//! ignores them (e.g. SmolLM2's), the tool list goes into the system message in our own
//! words and the Hermes syntax is asked for and parsed, so tools are never silently dropped.

use serde_json::{Map, Value, json};

use super::constrain::GrammarSpec;
use crate::tokenizer::Tokenizer;

/// `(param, message)` of a refused field.
pub type FieldError = (String, String);

fn ferr(param: impl Into<String>, msg: impl Into<String>) -> FieldError {
    (param.into(), msg.into())
}

/// One function tool.
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// JSON schema of the arguments (`{"type": "object"}` when none given).
    pub parameters: Value,
    /// OpenAI's `strict`: objects in `parameters` take no extra properties.
    pub strict: bool,
}

/// `tool_choice`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    Auto,
    None,
    Required,
    Named(String),
}

/// The tools of a request.
#[derive(Clone, Debug, PartialEq)]
pub struct Tools {
    pub tools: Vec<Tool>,
    pub choice: ToolChoice,
}

impl Tools {
    /// The tools in OpenAI's wire shape (what templates receive as `tools`).
    pub fn as_json(&self) -> Value {
        Value::Array(
            self.tools
                .iter()
                .map(|t| {
                    let mut f = Map::new();
                    f.insert("name".into(), json!(t.name));
                    if let Some(d) = &t.description {
                        f.insert("description".into(), json!(d));
                    }
                    f.insert("parameters".into(), t.parameters.clone());
                    json!({"type": "function", "function": f})
                })
                .collect(),
        )
    }

    /// Whether the model may call tools at all (`tool_choice` other than `none`).
    pub fn active(&self) -> bool {
        self.choice != ToolChoice::None && !self.tools.is_empty()
    }
}

/// Parse `tools` and `tool_choice` (`None` when there are no tools).
pub fn parse_tools(obj: &Map<String, Value>) -> Result<Option<Tools>, FieldError> {
    let tools = match obj.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => {
            let mut out: Vec<Tool> = Vec::with_capacity(a.len());
            for (i, t) in a.iter().enumerate() {
                let p = format!("tools[{i}]");
                if t.get("type").and_then(Value::as_str) != Some("function") {
                    return Err(ferr(
                        format!("{p}.type"),
                        format!("`{p}.type` must be \"function\" (the only tool type served)"),
                    ));
                }
                let Some(f) = t.get("function").and_then(Value::as_object) else {
                    return Err(ferr(
                        format!("{p}.function"),
                        format!("`{p}.function` must be an object"),
                    ));
                };
                let name = match f.get("name").and_then(Value::as_str) {
                    Some(n)
                        if !n.is_empty()
                            && n.len() <= 64
                            && n.chars()
                                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') =>
                    {
                        n.to_owned()
                    }
                    _ => {
                        return Err(ferr(
                            format!("{p}.function.name"),
                            format!(
                                "`{p}.function.name` must be 1-64 characters of a-z, A-Z, 0-9, _ or -"
                            ),
                        ));
                    }
                };
                if out.iter().any(|o| o.name == name) {
                    return Err(ferr(
                        format!("{p}.function.name"),
                        format!("tool name {name:?} is given twice"),
                    ));
                }
                let description = match f.get("description") {
                    None | Some(Value::Null) => None,
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(_) => {
                        return Err(ferr(
                            format!("{p}.function.description"),
                            format!("`{p}.function.description` must be a string"),
                        ));
                    }
                };
                let parameters = match f.get("parameters") {
                    None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
                    Some(v @ Value::Object(_)) => v.clone(),
                    Some(_) => {
                        return Err(ferr(
                            format!("{p}.function.parameters"),
                            format!("`{p}.function.parameters` must be a JSON schema object"),
                        ));
                    }
                };
                let strict = match f.get("strict") {
                    None | Some(Value::Null) => false,
                    Some(Value::Bool(b)) => *b,
                    Some(_) => {
                        return Err(ferr(
                            format!("{p}.function.strict"),
                            format!("`{p}.function.strict` must be a boolean"),
                        ));
                    }
                };
                out.push(Tool {
                    name,
                    description,
                    parameters,
                    strict,
                });
            }
            out
        }
        Some(_) => return Err(ferr("tools", "`tools` must be an array")),
    };
    let choice = match obj.get("tool_choice") {
        None | Some(Value::Null) => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" => ToolChoice::Required,
            other => {
                return Err(ferr(
                    "tool_choice",
                    format!(
                        "`tool_choice` {other:?} is not one of \"auto\", \"none\", \"required\" or a function"
                    ),
                ));
            }
        },
        Some(Value::Object(o)) => {
            let name = o
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str);
            match (o.get("type").and_then(Value::as_str), name) {
                (Some("function"), Some(n)) => ToolChoice::Named(n.to_owned()),
                _ => {
                    return Err(ferr(
                        "tool_choice",
                        "`tool_choice` object must be {\"type\": \"function\", \"function\": {\"name\": ...}}",
                    ));
                }
            }
        }
        Some(_) => {
            return Err(ferr(
                "tool_choice",
                "`tool_choice` must be a string or an object",
            ));
        }
    };
    if tools.is_empty() {
        return match choice {
            ToolChoice::Auto | ToolChoice::None => Ok(None),
            _ => Err(ferr(
                "tool_choice",
                "`tool_choice` requires a non-empty `tools`",
            )),
        };
    }
    if let ToolChoice::Named(n) = &choice
        && !tools.iter().any(|t| &t.name == n)
    {
        return Err(ferr(
            "tool_choice",
            format!("`tool_choice` names {n:?}, which is not in `tools`"),
        ));
    }
    Ok(Some(Tools { tools, choice }))
}

const ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];

fn text_content(v: Option<&Value>, param: &str, allow_null: bool) -> Result<String, FieldError> {
    match v {
        Some(Value::String(s)) => Ok(s.clone()),
        None | Some(Value::Null) if allow_null => Ok(String::new()),
        Some(Value::Array(parts)) => {
            let mut s = String::new();
            for p in parts {
                match (p.get("type").and_then(Value::as_str), p.get("text")) {
                    (Some("text"), Some(Value::String(t))) => s.push_str(t),
                    _ => {
                        return Err(ferr(
                            param,
                            format!(
                                "`{param}`: only text parts ({{\"type\": \"text\", \"text\": ...}}) are supported"
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

/// Validate OpenAI chat `messages` that may carry tool calls and tool results, and
/// normalize them for a chat template: content as a string, `developer` as `system`,
/// each call's `arguments` parsed from its JSON string into an object (the convention
/// Hugging Face templates expect).
pub fn parse_messages(arr: &[Value]) -> Result<Vec<Value>, FieldError> {
    if arr.is_empty() {
        return Err(ferr("messages", "`messages` must not be empty"));
    }
    let mut out = Vec::with_capacity(arr.len());
    for (i, m) in arr.iter().enumerate() {
        let p = format!("messages[{i}]");
        let Some(m) = m.as_object() else {
            return Err(ferr(&p, format!("`{p}` must be an object")));
        };
        let role = match m.get("role").and_then(Value::as_str) {
            Some(r) if ROLES.contains(&r) => r,
            Some(r) => {
                return Err(ferr(
                    format!("{p}.role"),
                    format!("`{p}.role` {r:?} is not one of {ROLES:?}"),
                ));
            }
            None => {
                return Err(ferr(
                    format!("{p}.role"),
                    format!("`{p}.role` must be a string"),
                ));
            }
        };
        for k in m.keys() {
            let ok = matches!(k.as_str(), "role" | "content" | "name")
                || (role == "assistant" && matches!(k.as_str(), "tool_calls" | "refusal"))
                || (role == "tool" && k == "tool_call_id");
            if !ok {
                return Err(ferr(
                    format!("{p}.{k}"),
                    format!("`{p}.{k}` is not supported for role {role:?}"),
                ));
            }
        }
        let has_calls = m.get("tool_calls").is_some_and(|v| !v.is_null());
        let content = text_content(
            m.get("content"),
            &format!("{p}.content"),
            role == "assistant",
        )?;
        let mut o = Map::new();
        o.insert(
            "role".into(),
            json!(if role == "developer" { "system" } else { role }),
        );
        o.insert("content".into(), json!(content));
        if has_calls {
            let Some(calls) = m.get("tool_calls").and_then(Value::as_array) else {
                return Err(ferr(
                    format!("{p}.tool_calls"),
                    format!("`{p}.tool_calls` must be an array"),
                ));
            };
            let mut norm = Vec::with_capacity(calls.len());
            for (j, c) in calls.iter().enumerate() {
                let q = format!("{p}.tool_calls[{j}]");
                let f = c.get("function");
                let name = f.and_then(|f| f.get("name")).and_then(Value::as_str);
                let args = f.and_then(|f| f.get("arguments"));
                let (Some(name), Some(args)) = (name, args) else {
                    return Err(ferr(
                        format!("{q}.function"),
                        format!("`{q}.function` must have a `name` and `arguments`"),
                    ));
                };
                let args = match args {
                    Value::String(s) => serde_json::from_str::<Value>(s).map_err(|e| {
                        ferr(
                            format!("{q}.function.arguments"),
                            format!("`{q}.function.arguments` is not valid JSON: {e}"),
                        )
                    })?,
                    v @ Value::Object(_) => v.clone(),
                    _ => {
                        return Err(ferr(
                            format!("{q}.function.arguments"),
                            format!("`{q}.function.arguments` must be a JSON string"),
                        ));
                    }
                };
                let id = c.get("id").and_then(Value::as_str).unwrap_or("");
                norm.push(json!({"id": id, "type": "function",
                                 "function": {"name": name, "arguments": args}}));
            }
            o.insert("tool_calls".into(), Value::Array(norm));
        }
        if role == "tool" {
            match m.get("tool_call_id") {
                Some(Value::String(id)) => {
                    o.insert("tool_call_id".into(), json!(id));
                }
                _ => {
                    return Err(ferr(
                        format!("{p}.tool_call_id"),
                        format!("`{p}.tool_call_id` is required for role \"tool\""),
                    ));
                }
            }
        }
        if let Some(Value::String(n)) = m.get("name") {
            o.insert("name".into(), json!(n));
        }
        out.push(Value::Object(o));
    }
    Ok(out)
}

/// A template family's tool-call syntax.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Hermes,
    Llama3Json,
    Mistral,
}

/// How a model's template handles tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolFormat {
    pub family: Family,
    /// The template renders `tools` itself; else we write them into the system message.
    pub native: bool,
}

impl ToolFormat {
    /// Detect from the template source.
    pub fn detect(template: &str) -> ToolFormat {
        let native = template.contains("tools");
        let family = if template.contains("[TOOL_CALLS]") {
            Family::Mistral
        } else if template.contains("<tool_call>") {
            Family::Hermes
        } else if template.contains("<|python_tag|>") || template.contains("ipython") {
            Family::Llama3Json
        } else {
            return ToolFormat {
                family: Family::Hermes,
                native: false,
            };
        };
        ToolFormat { family, native }
    }
}

fn call_text(name: &str, args: &Value) -> String {
    json!({"name": name, "arguments": args}).to_string()
}

/// The conversation and `tools` value to render for `fmt`. Native templates get the
/// messages and tools as they are; otherwise the tool list is written into the system
/// message and past calls and results become Hermes-syntax text.
pub fn prepare(
    messages: Vec<Value>,
    tools: Option<&Tools>,
    fmt: ToolFormat,
) -> (Vec<Value>, Option<Value>) {
    let active = tools.filter(|t| t.active());
    if fmt.native {
        return (messages, active.map(Tools::as_json));
    }
    let mut out: Vec<Value> = Vec::with_capacity(messages.len() + 1);
    if let Some(t) = active {
        let mut sys = String::from(
            "You can call the functions listed below (one JSON signature per line).\n<tools>\n",
        );
        for f in t.as_json().as_array().into_iter().flatten() {
            sys.push_str(&f.to_string());
            sys.push('\n');
        }
        sys.push_str(
            "</tools>\nTo call a function, reply with <tool_call>{\"name\": \"NAME\", \"arguments\": {...}}</tool_call>, one per call.",
        );
        match messages.first() {
            Some(m) if m.get("role").and_then(Value::as_str) == Some("system") => {
                let first = m.get("content").and_then(Value::as_str).unwrap_or("");
                out.push(json!({"role": "system", "content": format!("{first}\n\n{sys}")}));
            }
            _ => out.push(json!({"role": "system", "content": sys})),
        }
    }
    let skip_first = active.is_some()
        && messages
            .first()
            .is_some_and(|m| m.get("role").and_then(Value::as_str) == Some("system"));
    for (i, m) in messages.into_iter().enumerate() {
        if i == 0 && skip_first {
            continue;
        }
        let role = m.get("role").and_then(Value::as_str).unwrap_or("user");
        let content = m.get("content").and_then(Value::as_str).unwrap_or("");
        match role {
            "assistant" => {
                let mut text = content.to_owned();
                for c in m
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let f = &c["function"];
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    text.push_str("<tool_call>");
                    text.push_str(&call_text(
                        f["name"].as_str().unwrap_or(""),
                        &f["arguments"],
                    ));
                    text.push_str("</tool_call>");
                }
                out.push(json!({"role": "assistant", "content": text}));
            }
            "tool" => out.push(json!({"role": "user",
                "content": format!("<tool_response>\n{content}\n</tool_response>")})),
            _ => out.push(json!({"role": role, "content": content})),
        }
    }
    (out, None)
}

/// The grammar forcing one valid call when `tool_choice` is `required` or a named function
/// (`None` for `auto` / `none`).
pub fn grammar(
    tools: &Tools,
    fmt: ToolFormat,
    tok: &Tokenizer,
) -> Result<Option<GrammarSpec>, FieldError> {
    let allowed: Vec<&Tool> = match &tools.choice {
        ToolChoice::Auto | ToolChoice::None => return Ok(None),
        ToolChoice::Required => tools.tools.iter().collect(),
        ToolChoice::Named(n) => tools.tools.iter().filter(|t| &t.name == n).collect(),
    };
    let args_key = if fmt.family == Family::Llama3Json {
        "parameters"
    } else {
        "arguments"
    };
    let alts: Vec<Value> = allowed
        .iter()
        .map(|t| {
            let mut params = t.parameters.clone();
            if t.strict {
                super::constrain::strictify(&mut params);
            }
            json!({"type": "object",
                   "properties": {"name": {"const": t.name}, args_key: params},
                   "required": ["name", args_key], "additionalProperties": false})
        })
        .collect();
    let mut schema = if alts.len() == 1 {
        alts.into_iter().next().unwrap_or_default()
    } else {
        json!({"anyOf": alts})
    };
    if let Value::Object(m) = &mut schema {
        m.insert(
            "x-guidance".into(),
            json!({"whitespace_flexible": false, "lenient": false}),
        );
    }
    let call = format!("call: %json {schema}");
    let start = match fmt.family {
        Family::Hermes => "start: \"<tool_call>\\n\" call \"\\n</tool_call>\"".to_owned(),
        Family::Llama3Json => "start: call".to_owned(),
        Family::Mistral => match tok.token_id("[TOOL_CALLS]") {
            Some(id) => format!("start: <[{id}]> \"[\" call \"]\""),
            None => "start: \"[TOOL_CALLS][\" call \"]\"".to_owned(),
        },
    };
    Ok(Some(GrammarSpec::Lark(format!("{start}\n{call}\n"))))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn run(family: Family, chunks: &[&str]) -> Vec<Parsed> {
        let mut p = ToolParser::new(family, "call_x");
        let mut out = Vec::new();
        for c in chunks {
            out.extend(p.push(c));
        }
        out.extend(p.finish());
        // merge adjacent content for comparison
        let mut merged: Vec<Parsed> = Vec::new();
        for x in out {
            match (merged.last_mut(), x) {
                (Some(Parsed::Content(a)), Parsed::Content(b)) => a.push_str(&b),
                (_, x) => merged.push(x),
            }
        }
        merged
    }

    fn call(index: usize, name: &str, args: &str) -> Parsed {
        Parsed::Call {
            index,
            call: ToolCall {
                id: format!("call_x_{index}"),
                name: name.into(),
                arguments: args.into(),
            },
        }
    }

    #[test]
    fn hermes_split_across_chunks() {
        let text = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>";
        let want = vec![
            Parsed::Content("Let me check.\n".into()),
            call(0, "get_weather", r#"{"city":"Paris"}"#),
            call(1, "b", "{}"),
        ];
        // every split point, one and two characters at a time
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let refs: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(run(Family::Hermes, &refs), want);
        assert_eq!(run(Family::Hermes, &[text]), want);
        for cut in 1..text.len() {
            if text.is_char_boundary(cut) {
                assert_eq!(
                    run(Family::Hermes, &[&text[..cut], &text[cut..]]),
                    want,
                    "{cut}"
                );
            }
        }
    }

    #[test]
    fn hermes_plain_text_and_broken_calls_stay_content() {
        assert_eq!(
            run(Family::Hermes, &["a <tool", "_ca", "t> b"]),
            vec![Parsed::Content("a <tool_cat> b".into())]
        );
        assert_eq!(
            run(Family::Hermes, &["<tool_call>{not json</tool_call>"]),
            vec![Parsed::Content("<tool_call>{not json</tool_call>".into())]
        );
        // unterminated but complete JSON (stopped at EOS) is a call
        assert_eq!(
            run(
                Family::Hermes,
                &["<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n"]
            ),
            vec![call(0, "f", r#"{"a":1}"#)]
        );
        assert_eq!(
            run(Family::Hermes, &["<tool_call>\n{\"name\": \"f\""]),
            vec![Parsed::Content("<tool_call>\n{\"name\": \"f\"".into())]
        );
    }

    #[test]
    fn llama_json_calls() {
        assert_eq!(
            run(
                Family::Llama3Json,
                &["  {\"name\": \"f\", ", "\"parameters\": {\"x\": [1]}}"]
            ),
            vec![call(0, "f", r#"{"x":[1]}"#)]
        );
        assert_eq!(
            run(
                Family::Llama3Json,
                &[
                    "<|python",
                    "_tag|>{\"name\": \"f\", \"parameters\": {}}; {\"name\": \"g\", \"parameters\": {}}"
                ]
            ),
            vec![call(0, "f", "{}"), call(1, "g", "{}")]
        );
        assert_eq!(
            run(Family::Llama3Json, &[" Hello", " {world}"]),
            vec![Parsed::Content(" Hello {world}".into())]
        );
        assert_eq!(
            run(Family::Llama3Json, &["{not a call}"]),
            vec![Parsed::Content("{not a call}".into())]
        );
    }

    #[test]
    fn mistral_calls() {
        assert_eq!(
            run(
                Family::Mistral,
                &[
                    "Sure",
                    "[TOOL_",
                    "CALLS][{\"name\": \"f\", \"arguments\": {\"a\": \"b\"}}]"
                ]
            ),
            vec![Parsed::Content("Sure".into()), call(0, "f", r#"{"a":"b"}"#)]
        );
        assert_eq!(
            run(
                Family::Mistral,
                &["[TOOL_CALLS]f[ARGS]{\"a\": 1}[TOOL_CALLS]g[ARGS]{}"]
            ),
            vec![call(0, "f", r#"{"a":1}"#), call(1, "g", "{}")]
        );
        assert_eq!(
            run(Family::Mistral, &["[TOOL_CALLS]garbage"]),
            vec![Parsed::Content("[TOOL_CALLS]garbage".into())]
        );
    }

    #[test]
    fn tools_and_choice_parse() {
        let o = |v: Value| v.as_object().unwrap().clone();
        let f = json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]);
        let t = parse_tools(&o(json!({"tools": f, "tool_choice": "required"})))
            .unwrap()
            .unwrap();
        assert_eq!(t.choice, ToolChoice::Required);
        assert_eq!(t.tools[0].name, "f");
        assert!(parse_tools(&o(json!({}))).unwrap().is_none());
        for (v, param) in [
            (json!({"tools": 1}), "tools"),
            (json!({"tools": [{"type": "code"}]}), "tools[0].type"),
            (
                json!({"tools": [{"type": "function", "function": {"name": "a b"}}]}),
                "tools[0].function.name",
            ),
            (json!({"tools": f, "tool_choice": "maybe"}), "tool_choice"),
            (
                json!({"tools": f, "tool_choice": {"type": "function", "function": {"name": "g"}}}),
                "tool_choice",
            ),
            (json!({"tool_choice": "required"}), "tool_choice"),
        ] {
            assert_eq!(parse_tools(&o(v.clone())).unwrap_err().0, param, "{v}");
        }
    }

    #[test]
    fn messages_with_calls_normalize() {
        let m = parse_messages(&[
            json!({"role": "developer", "content": [{"type": "text", "text": "be brief"}]}),
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                   "function": {"name": "f", "arguments": "{\"a\": 1}"}}]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "42"}),
        ])
        .unwrap();
        assert_eq!(m[0]["role"], "system");
        assert_eq!(
            m[1]["tool_calls"][0]["function"]["arguments"],
            json!({"a": 1})
        );
        assert_eq!(m[2]["tool_call_id"], "c1");
        for (v, param) in [
            (
                json!({"role": "tool", "content": "x"}),
                "messages[0].tool_call_id",
            ),
            (
                json!({"role": "user", "content": "x", "tool_calls": []}),
                "messages[0].tool_calls",
            ),
            (
                json!({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}),
                "messages[0].tool_calls[0].function.arguments",
            ),
            (
                json!({"role": "wizard", "content": "x"}),
                "messages[0].role",
            ),
        ] {
            assert_eq!(
                parse_messages(std::slice::from_ref(&v)).unwrap_err().0,
                param,
                "{v}"
            );
        }
    }

    #[test]
    fn detect_and_inject() {
        assert_eq!(
            ToolFormat::detect("{% if tools %}<tool_call>{% endif %}"),
            ToolFormat {
                family: Family::Hermes,
                native: true
            }
        );
        assert_eq!(
            ToolFormat::detect("[TOOL_CALLS] tools").family,
            Family::Mistral
        );
        assert_eq!(
            ToolFormat::detect("<|python_tag|> tools").family,
            Family::Llama3Json
        );
        let plain = ToolFormat::detect("{{ messages }}");
        assert!(!plain.native);
        let tools = Tools {
            tools: vec![Tool {
                name: "f".into(),
                description: None,
                parameters: json!({"type": "object"}),
                strict: false,
            }],
            choice: ToolChoice::Auto,
        };
        let (msgs, t) = prepare(
            vec![
                json!({"role": "system", "content": "S"}),
                json!({"role": "user", "content": "U"}),
                json!({"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]}),
                json!({"role": "tool", "tool_call_id": "1", "content": "R"}),
            ],
            Some(&tools),
            plain,
        );
        assert!(t.is_none());
        let sys = msgs[0]["content"].as_str().unwrap();
        assert!(
            sys.starts_with("S\n\n")
                && sys.contains("\"name\":\"f\"")
                && sys.contains("<tool_call>")
        );
        assert_eq!(msgs.len(), 4);
        assert_eq!(
            msgs[2]["content"],
            "<tool_call>{\"name\":\"f\",\"arguments\":{\"a\":1}}</tool_call>"
        );
        assert_eq!(msgs[3]["role"], "user");
        let (_, t) = prepare(
            vec![json!({"role": "user", "content": "U"})],
            Some(&tools),
            ToolFormat {
                family: Family::Hermes,
                native: true,
            },
        );
        assert_eq!(t.unwrap()[0]["function"]["name"], "f");
    }

    #[test]
    fn message_and_delta_shapes() {
        let parts = vec![Parsed::Content(" ".into()), call(0, "f", "{}")];
        let m = message(&parts);
        assert_eq!(m["content"], Value::Null);
        assert_eq!(m["tool_calls"][0]["function"]["name"], "f");
        assert_eq!(delta(&parts[1])["tool_calls"][0]["index"], 0);
        assert_eq!(message(&[Parsed::Content("hi".into())])["content"], "hi");
    }
}
