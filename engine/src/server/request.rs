//! Parsing and validating OpenAI request bodies by hand from JSON values, so every bad
//! field gets a 400 naming it, and every field that would change the output but is not
//! supported (e.g. `logit_bias`, `n > 1`) is refused rather than ignored.

use serde_json::{Map, Value};

use super::error::ApiError;
use crate::api::constrain::{self, ConstrainError, GrammarSpec};
use crate::api::logprobs::{self, LogprobsRequest};
use crate::api::tools::{self, Tools};
use crate::sampling::SamplerConfig;
use crate::tokenizer::ChatMessage;

/// Which endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Chat,
    Completion,
}

/// The prompt as given.
#[derive(Clone, Debug, PartialEq)]
pub enum Prompt {
    Messages(Vec<ChatMessage>),
    /// Messages carrying tool calls or tool results, normalized for the chat template.
    ChatJson(Vec<Value>),
    Text(String),
    Tokens(Vec<u32>),
}

/// A validated generation request.
#[derive(Clone, Debug, PartialEq)]
pub struct GenParams {
    pub model: String,
    pub prompt: Prompt,
    pub max_tokens: Option<usize>,
    pub sampling: SamplerConfig,
    pub stop: Vec<String>,
    pub stream: bool,
    pub include_usage: bool,
    /// Extension: return the generated token ids.
    pub return_token_ids: bool,
    /// Extension (as llama-server and vLLM): keep generating past end-of-generation tokens
    /// until `max_tokens` (fixed-length load tests).
    pub ignore_eos: bool,
    /// `response_format` other than text: enforced by a grammar.
    pub response_format: Option<GrammarSpec>,
    /// `tools` / `tool_choice` (chat).
    pub tools: Option<Tools>,
    /// `logprobs` / `top_logprobs`.
    pub logprobs: Option<LogprobsRequest>,
    /// Extension (vLLM's field): the logprobs name every token `token_id:N` rather than by
    /// its text, which may be shared by several tokens (or empty).
    pub return_tokens_as_token_ids: bool,
}

/// A [`ConstrainError`] as a 400.
pub fn constrain_error(e: ConstrainError) -> ApiError {
    match e {
        ConstrainError::BadFormat { param, message } => ApiError::bad_field(&param, message),
        ConstrainError::Unsupported(m) => ApiError::bad_field("response_format", m),
        e => ApiError::bad_request(e.to_string()),
    }
}

fn field_error((param, message): (String, String)) -> ApiError {
    ApiError::bad_field(&param, message)
}

/// Fields accepted that do not change the output.
const IGNORED: [&str; 5] = [
    "user",
    "metadata",
    "store",
    "service_tier",
    "parallel_tool_calls",
];
/// Roles accepted in `messages`.
const ROLES: [&str; 5] = ["system", "developer", "user", "assistant", "tool"];

fn num(obj: &Map<String, Value>, k: &str, lo: f64, hi: f64) -> Result<Option<f64>, ApiError> {
    match obj.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(x) if x.is_finite() && (lo..=hi).contains(&x) => Ok(Some(x)),
            _ => Err(ApiError::bad_field(
                k,
                format!("`{k}` must be a number between {lo} and {hi}"),
            )),
        },
        Some(_) => Err(ApiError::bad_field(k, format!("`{k}` must be a number"))),
    }
}

fn uint(obj: &Map<String, Value>, k: &str, lo: u64) -> Result<Option<u64>, ApiError> {
    match obj.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(x) if x >= lo => Ok(Some(x)),
            _ => Err(ApiError::bad_field(
                k,
                format!("`{k}` must be an integer >= {lo} (got {n})"),
            )),
        },
        Some(_) => Err(ApiError::bad_field(k, format!("`{k}` must be an integer"))),
    }
}

fn boolean(obj: &Map<String, Value>, k: &str) -> Result<Option<bool>, ApiError> {
    match obj.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(ApiError::bad_field(k, format!("`{k}` must be a boolean"))),
    }
}

fn unsupported(k: &str, why: &str) -> ApiError {
    ApiError::unsupported(k, format!("`{k}` is not supported by this server: {why}"))
}

/// Refuse fields that would change the output.
fn refuse_unsupported(obj: &Map<String, Value>, kind: Kind) -> Result<(), ApiError> {
    let present = |k: &str| obj.get(k).is_some_and(|v| !v.is_null());
    if let Some(v) = obj.get("logit_bias")
        && !v.is_null()
        && v.as_object().is_none_or(|m| !m.is_empty())
    {
        return Err(unsupported(
            "logit_bias",
            "token biases are not implemented",
        ));
    }
    if let Some(n) = obj.get("n")
        && !n.is_null()
        && n.as_u64() != Some(1)
    {
        return Err(unsupported("n", "only n=1 is served"));
    }
    if let Some(n) = obj.get("best_of")
        && !n.is_null()
        && n.as_u64() != Some(1)
    {
        return Err(unsupported("best_of", "only best_of=1 is served"));
    }
    if kind == Kind::Completion {
        for k in ["tools", "tool_choice"] {
            if present(k) {
                return Err(unsupported(k, "tools are served on /v1/chat/completions"));
            }
        }
    }
    for k in [
        "suffix",
        "functions",
        "function_call",
        "prediction",
        "audio",
        "reasoning_effort",
        "web_search_options",
    ] {
        if present(k) {
            return Err(unsupported(k, "not implemented"));
        }
    }
    if boolean(obj, "echo")? == Some(true) {
        return Err(unsupported("echo", "echoing the prompt is not implemented"));
    }
    if let Some(m) = obj.get("modalities")
        && !m.is_null()
        && m.as_array()
            .is_none_or(|a| a.iter().any(|x| x.as_str() != Some("text")))
    {
        return Err(unsupported("modalities", "only text is served"));
    }
    Ok(())
}

fn known_field(k: &str, kind: Kind) -> bool {
    const COMMON: [&str; 29] = [
        "model",
        "max_tokens",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "seed",
        "stop",
        "stream",
        "stream_options",
        "n",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "best_of",
        "echo",
        "suffix",
        "tools",
        "tool_choice",
        "functions",
        "function_call",
        "response_format",
        "return_token_ids",
        "return_tokens_as_token_ids",
        "ignore_eos",
        "prediction",
    ];
    const MORE: [&str; 4] = [
        "audio",
        "reasoning_effort",
        "web_search_options",
        "modalities",
    ];
    COMMON.contains(&k)
        || MORE.contains(&k)
        || IGNORED.contains(&k)
        || match kind {
            Kind::Chat => k == "messages" || k == "max_completion_tokens",
            Kind::Completion => k == "prompt",
        }
}

fn content_text(v: &Value, i: usize) -> Result<String, ApiError> {
    let param = format!("messages[{i}].content");
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut s = String::new();
            for p in parts {
                match (p.get("type").and_then(Value::as_str), p.get("text")) {
                    (Some("text"), Some(Value::String(t))) => s.push_str(t),
                    _ => {
                        return Err(ApiError::unsupported(
                            &param,
                            format!(
                                "`{param}`: only text parts ({{\"type\": \"text\", \"text\": ...}}) are supported"
                            ),
                        ));
                    }
                }
            }
            Ok(s)
        }
        _ => Err(ApiError::bad_field(
            &param,
            format!("`{param}` must be a string or an array of text parts"),
        )),
    }
}

fn messages(obj: &Map<String, Value>) -> Result<Vec<ChatMessage>, ApiError> {
    let arr = match obj.get("messages") {
        None | Some(Value::Null) => {
            return Err(ApiError::bad_field("messages", "`messages` is required"));
        }
        Some(Value::Array(a)) => a,
        Some(_) => {
            return Err(ApiError::bad_field(
                "messages",
                "`messages` must be an array",
            ));
        }
    };
    if arr.is_empty() {
        return Err(ApiError::bad_field(
            "messages",
            "`messages` must not be empty",
        ));
    }
    let mut out = Vec::with_capacity(arr.len());
    for (i, m) in arr.iter().enumerate() {
        let Some(m) = m.as_object() else {
            return Err(ApiError::bad_field(
                &format!("messages[{i}]"),
                format!("`messages[{i}]` must be an object"),
            ));
        };
        for k in m.keys() {
            if k != "role" && k != "content" {
                return Err(ApiError::unsupported(
                    &format!("messages[{i}].{k}"),
                    format!("`messages[{i}].{k}` is not supported"),
                ));
            }
        }
        let role = match m.get("role") {
            Some(Value::String(r)) if ROLES.contains(&r.as_str()) => r.clone(),
            Some(Value::String(r)) => {
                return Err(ApiError::bad_field(
                    &format!("messages[{i}].role"),
                    format!("`messages[{i}].role` {r:?} is not one of {ROLES:?}"),
                ));
            }
            _ => {
                return Err(ApiError::bad_field(
                    &format!("messages[{i}].role"),
                    format!("`messages[{i}].role` must be a string"),
                ));
            }
        };
        let content = match m.get("content") {
            Some(c) => content_text(c, i)?,
            None => {
                return Err(ApiError::bad_field(
                    &format!("messages[{i}].content"),
                    format!("`messages[{i}].content` is required"),
                ));
            }
        };
        out.push(ChatMessage { role, content });
    }
    Ok(out)
}

fn prompt(obj: &Map<String, Value>) -> Result<Prompt, ApiError> {
    let bad = || {
        ApiError::bad_field(
            "prompt",
            "`prompt` must be a string, an array of one string, or an array of token ids",
        )
    };
    match obj.get("prompt") {
        None | Some(Value::Null) => Err(ApiError::bad_field("prompt", "`prompt` is required")),
        Some(Value::String(s)) => Ok(Prompt::Text(s.clone())),
        Some(Value::Array(a)) => match a.as_slice() {
            [Value::String(s)] => Ok(Prompt::Text(s.clone())),
            [] => Err(bad()),
            items if items.iter().all(Value::is_number) => items
                .iter()
                .map(|x| {
                    x.as_u64()
                        .and_then(|t| u32::try_from(t).ok())
                        .ok_or_else(bad)
                })
                .collect::<Result<Vec<u32>, _>>()
                .map(Prompt::Tokens),
            items if items.iter().all(Value::is_string) => Err(unsupported(
                "prompt",
                "several prompts in one request (batch) are not served; send one per request",
            )),
            _ => Err(bad()),
        },
        Some(_) => Err(bad()),
    }
}

fn stops(obj: &Map<String, Value>) -> Result<Vec<String>, ApiError> {
    let bad = || {
        ApiError::bad_field(
            "stop",
            "`stop` must be a string or an array of up to 4 strings",
        )
    };
    match obj.get("stop") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Array(a)) if a.len() <= 4 => a
            .iter()
            .map(|s| s.as_str().map(str::to_owned).ok_or_else(bad))
            .collect(),
        Some(_) => Err(bad()),
    }
}

/// Parse a request body (already JSON) for `kind`; `seed` is used when none is given.
pub fn parse(body: &Value, kind: Kind, default_seed: u64) -> Result<GenParams, ApiError> {
    let Some(obj) = body.as_object() else {
        return Err(ApiError::bad_request(
            "the request body must be a JSON object",
        ));
    };
    for k in obj.keys() {
        if !known_field(k, kind) {
            return Err(ApiError::unsupported(
                k,
                format!("unknown or unsupported field `{k}`"),
            ));
        }
    }
    refuse_unsupported(obj, kind)?;
    let model = match obj.get("model") {
        Some(Value::String(m)) => m.clone(),
        None | Some(Value::Null) => {
            return Err(ApiError::bad_field("model", "`model` is required"));
        }
        Some(_) => return Err(ApiError::bad_field("model", "`model` must be a string")),
    };
    let prompt = match kind {
        Kind::Chat => {
            let tool_shaped = obj
                .get("messages")
                .and_then(Value::as_array)
                .is_some_and(|a| {
                    a.iter().any(|m| {
                        m.as_object()
                            .is_some_and(|o| o.keys().any(|k| k != "role" && k != "content"))
                            || m.get("content").is_some_and(Value::is_null)
                    })
                });
            match obj.get("messages").and_then(Value::as_array) {
                Some(a) if tool_shaped => {
                    Prompt::ChatJson(tools::parse_messages(a).map_err(field_error)?)
                }
                _ => Prompt::Messages(messages(obj)?),
            }
        }
        Kind::Completion => prompt(obj)?,
    };
    let mut max_tokens = uint(obj, "max_tokens", 1)?;
    if kind == Kind::Chat
        && let Some(m) = uint(obj, "max_completion_tokens", 1)?
    {
        max_tokens = Some(m);
    }
    let max_tokens = max_tokens.map(|m| usize::try_from(m).unwrap_or(usize::MAX));
    let stream = boolean(obj, "stream")?.unwrap_or(false);
    let include_usage = match obj.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(o)) => {
            if !stream {
                return Err(ApiError::bad_field(
                    "stream_options",
                    "`stream_options` is only allowed when `stream` is true",
                ));
            }
            for k in o.keys() {
                if k != "include_usage" {
                    return Err(ApiError::unsupported(
                        &format!("stream_options.{k}"),
                        format!("`stream_options.{k}` is not supported"),
                    ));
                }
            }
            boolean(o, "include_usage")?.unwrap_or(false)
        }
        Some(_) => {
            return Err(ApiError::bad_field(
                "stream_options",
                "`stream_options` must be an object",
            ));
        }
    };
    let seed = match obj.get("seed") {
        None | Some(Value::Null) => default_seed,
        Some(Value::Number(n)) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => u,
            (None, Some(i)) => i as u64,
            _ => return Err(ApiError::bad_field("seed", "`seed` must be an integer")),
        },
        Some(_) => return Err(ApiError::bad_field("seed", "`seed` must be an integer")),
    };
    let sampling = SamplerConfig {
        temperature: num(obj, "temperature", 0.0, 2.0)?.unwrap_or(1.0) as f32,
        top_p: num(obj, "top_p", 0.0, 1.0)?.unwrap_or(1.0) as f32,
        top_k: uint(obj, "top_k", 0)?.map_or(0, |k| usize::try_from(k).unwrap_or(usize::MAX)),
        min_p: num(obj, "min_p", 0.0, 1.0)?.unwrap_or(0.0) as f32,
        presence_penalty: num(obj, "presence_penalty", -2.0, 2.0)?.unwrap_or(0.0) as f32,
        frequency_penalty: num(obj, "frequency_penalty", -2.0, 2.0)?.unwrap_or(0.0) as f32,
        repeat_penalty: num(obj, "repetition_penalty", 0.01, 10.0)?.unwrap_or(1.0) as f32,
        seed,
        ..SamplerConfig::default()
    };
    if sampling.top_p <= 0.0 && obj.get("top_p").is_some_and(|v| !v.is_null()) {
        return Err(ApiError::bad_field(
            "top_p",
            "`top_p` must be greater than 0",
        ));
    }
    let response_format =
        constrain::parse_response_format(obj.get("response_format")).map_err(constrain_error)?;
    let tools = match kind {
        Kind::Chat => tools::parse_tools(obj).map_err(field_error)?,
        Kind::Completion => None,
    };
    if response_format.is_some() && tools.as_ref().is_some_and(Tools::active) {
        return Err(ApiError::bad_field(
            "response_format",
            "`response_format` cannot be combined with `tools` (unless `tool_choice` is \"none\")",
        ));
    }
    let logprobs = match kind {
        Kind::Chat => logprobs::parse_chat(obj),
        Kind::Completion => logprobs::parse_completion(obj),
    }
    .map_err(field_error)?;
    Ok(GenParams {
        model,
        prompt,
        max_tokens,
        sampling,
        stop: stops(obj)?,
        stream,
        include_usage,
        return_token_ids: boolean(obj, "return_token_ids")?.unwrap_or(false),
        ignore_eos: boolean(obj, "ignore_eos")?.unwrap_or(false),
        response_format,
        tools,
        logprobs,
        return_tokens_as_token_ids: boolean(obj, "return_tokens_as_token_ids")?.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err(v: Value, kind: Kind) -> ApiError {
        parse(&v, kind, 0).unwrap_err()
    }

    #[test]
    fn chat_request_parses_with_defaults() {
        let p = parse(
            &json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
                    "max_completion_tokens": 5, "temperature": 0, "stop": "x", "user": "u", "seed": -1}),
            Kind::Chat,
            7,
        )
        .unwrap();
        assert_eq!(p.max_tokens, Some(5));
        assert_eq!(p.sampling.temperature, 0.0);
        assert_eq!(p.sampling.seed, u64::MAX);
        assert_eq!(p.stop, vec!["x".to_owned()]);
        assert_eq!(
            p.prompt,
            Prompt::Messages(vec![ChatMessage {
                role: "user".into(),
                content: "hi".into()
            }])
        );
        let p = parse(
            &json!({"model": "m", "prompt": [1, 2, 3]}),
            Kind::Completion,
            7,
        )
        .unwrap();
        assert_eq!(p.prompt, Prompt::Tokens(vec![1, 2, 3]));
        assert_eq!((p.sampling.temperature, p.sampling.seed), (1.0, 7));
        assert!(!p.return_tokens_as_token_ids);
        let p = parse(
            &json!({"model": "m", "prompt": [1], "logprobs": 5, "return_tokens_as_token_ids": true}),
            Kind::Completion,
            7,
        )
        .unwrap();
        assert!(p.return_tokens_as_token_ids);
        assert_eq!(p.logprobs, Some(LogprobsRequest { top: 5 }));
    }

    #[test]
    fn unsupported_and_bad_fields_are_named() {
        let chat = |extra: Value| {
            let mut v = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
            for (k, x) in extra.as_object().unwrap() {
                v[k] = x.clone();
            }
            err(v, Kind::Chat)
        };
        for (extra, param) in [
            (json!({"logit_bias": {"1": 5}}), "logit_bias"),
            (json!({"n": 2}), "n"),
            (json!({"logprobs": 1}), "logprobs"),
            (json!({"top_logprobs": 2}), "top_logprobs"),
            (
                json!({"return_tokens_as_token_ids": "yes"}),
                "return_tokens_as_token_ids",
            ),
            (json!({"tools": {}}), "tools"),
            (json!({"tool_choice": "required"}), "tool_choice"),
            (
                json!({"response_format": {"type": "xml"}}),
                "response_format.type",
            ),
            (json!({"frobnicate": 1}), "frobnicate"),
            (json!({"max_tokens": -1}), "max_tokens"),
            (json!({"max_tokens": 0}), "max_tokens"),
            (json!({"max_tokens": 1e300}), "max_tokens"),
            (json!({"max_tokens": "10"}), "max_tokens"),
            (json!({"temperature": 3}), "temperature"),
            (
                json!({"stream_options": {"include_usage": true}}),
                "stream_options",
            ),
            (json!({"stop": [1]}), "stop"),
            (
                json!({"messages": [{"role": "wizard", "content": "x"}]}),
                "messages[0].role",
            ),
            (
                json!({"messages": [{"role": "user"}]}),
                "messages[0].content",
            ),
            (json!({"messages": []}), "messages"),
            (json!({"messages": null}), "messages"),
            (json!({"model": 5}), "model"),
        ] {
            let e = chat(extra.clone());
            assert_eq!(e.status, 400, "{extra}");
            assert_eq!(e.param.as_deref(), Some(param), "{extra}: {}", e.message);
        }
        assert_eq!(err(json!([1]), Kind::Chat).status, 400);
        assert_eq!(
            err(
                json!({"model": "m", "prompt": ["a", "b"]}),
                Kind::Completion
            )
            .param
            .as_deref(),
            Some("prompt")
        );
        assert_eq!(
            err(json!({"model": "m", "prompt": [1, -2]}), Kind::Completion)
                .param
                .as_deref(),
            Some("prompt")
        );
    }
}
