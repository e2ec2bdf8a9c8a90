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

mod parser;
mod render;
mod request;
#[cfg(test)]
mod tests;

use serde_json::{Map, Value, json};

pub use parser::{Parsed, ToolCall, ToolParser, delta, message};
pub use render::{Family, ToolFormat, grammar, prepare};
pub use request::{parse_messages, parse_tools};

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
