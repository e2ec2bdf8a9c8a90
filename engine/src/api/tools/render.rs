//! Rendering for a template family: which tool-call syntax a chat template speaks, the
//! conversation and `tools` value it is given (tools written into the system message when
//! the template ignores them), and the grammar that forces one valid call.

use serde_json::{Value, json};

use super::{FieldError, Tool, ToolChoice, Tools};
use crate::api::constrain::{self, GrammarSpec};
use crate::tokenizer::Tokenizer;

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
                constrain::strictify(&mut params);
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
