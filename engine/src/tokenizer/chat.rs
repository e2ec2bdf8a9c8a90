//! Chat templates: render a model's own `tokenizer.chat_template` (Hugging Face Jinja) with
//! minijinja and the globals Hugging Face's `apply_chat_template` provides.
//!
//! The environment matches Hugging Face's: `trim_blocks` and `lstrip_blocks` on, loop
//! controls, Python string/dict methods (`.strip()`, `.items()` ... via minijinja-contrib's
//! pycompat), `raise_exception(msg)`, `strftime_now(fmt)` (UTC), and `tojson` with Python
//! `json.dumps` output (`", "` / `": "` separators, no HTML escaping, non-ASCII kept,
//! `indent`, `separators` and `sort_keys` arguments). The context holds `messages`, `tools`,
//! `add_generation_prompt`, `bos_token` and `eos_token`.
//!
//! Gemma-family files converted without a template get a built-in Gemma turn format
//! (`templates/gemma.jinja`, our own wording of the `<start_of_turn>role ... <end_of_turn>`
//! layout); any other file without one yields `Ok(None)` from [`ChatTemplate::from_gguf`] and
//! [`TemplateError::NoTemplate`] from [`ChatTemplate::for_model`].

use minijinja::value::Kwargs;
use minijinja::{Environment, ErrorKind, State, Value};

use crate::model_file::{GgufHeader, MetaArray, MetaValue};

use super::chat_json::{self as python_json, strftime};

/// The built-in template for Gemma-family files that carry none.
pub const GEMMA_FALLBACK_TEMPLATE: &str = include_str!("templates/gemma.jinja");

/// One chat message (the common subset; pass `serde_json::Value`s for tool calls).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

/// Errors loading or rendering a chat template.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error(
        "the model has no chat template (tokenizer.chat_template) and no built-in one for architecture {arch:?}"
    )]
    NoTemplate { arch: String },
    #[error("metadata {key:?} has type {found}, expected string")]
    WrongType {
        key: &'static str,
        found: &'static str,
    },
    #[error("chat template does not parse: {0:#}")]
    Syntax(minijinja::Error),
    #[error("chat template raised an exception: {0}")]
    Raised(String),
    #[error("chat template failed to render: {0:#}")]
    Render(minijinja::Error),
    #[error("conversation is not valid JSON: {0}")]
    BadConversation(String),
}

/// A compiled chat template and the special-token strings it may use.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    bos_token: String,
    eos_token: String,
    fixed_time: Option<i64>,
}

/// Marker put in the error detail by `raise_exception`, to tell raised errors apart.
const RAISED: &str = "raise_exception: ";

fn raise_exception(msg: String) -> Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(
        ErrorKind::InvalidOperation,
        format!("{RAISED}{msg}"),
    ))
}

fn strftime_now(state: &State, fmt: String) -> Result<String, minijinja::Error> {
    let now = match state.lookup("__assay_now").and_then(|v| v.as_i64()) {
        Some(t) => t,
        None => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64),
    };
    Ok(strftime(&fmt, now))
}

fn tojson(value: Value, kwargs: Kwargs) -> Result<String, minijinja::Error> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let separators: Option<Value> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match (v.as_i64(), v.as_str()) {
            (Some(n), _) => Some(" ".repeat(n.max(0) as usize)),
            (None, Some(s)) => Some(s.to_owned()),
            _ => {
                return Err(minijinja::Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: bad indent",
                ));
            }
        },
    };
    let seps = match separators {
        Some(v) if !v.is_none() => {
            let a = v.get_item_by_index(0)?;
            let b = v.get_item_by_index(1)?;
            (
                a.as_str().unwrap_or(",").to_owned(),
                b.as_str().unwrap_or(":").to_owned(),
            )
        }
        _ if indent.is_some() => (",".to_owned(), ": ".to_owned()),
        _ => (", ".to_owned(), ": ".to_owned()),
    };
    let opts = python_json::Options {
        indent,
        item_sep: seps.0,
        key_sep: seps.1,
        sort_keys: sort_keys.unwrap_or(false),
        ensure_ascii: ensure_ascii.unwrap_or(false),
    };
    python_json::dumps(&value, &opts)
}

fn meta_str(h: &GgufHeader, key: &'static str) -> Result<Option<String>, TemplateError> {
    match h.get(key) {
        None => Ok(None),
        Some(MetaValue::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(TemplateError::WrongType {
            key,
            found: v.type_name(),
        }),
    }
}

fn token_text(h: &GgufHeader, id_key: &str) -> String {
    let id = h.get(id_key).and_then(MetaValue::as_u64);
    match (id, h.get("tokenizer.ggml.tokens")) {
        (Some(id), Some(MetaValue::Array(MetaArray::String(t)))) => {
            t.get(id as usize).cloned().unwrap_or_default()
        }
        _ => String::new(),
    }
}

impl ChatTemplate {
    /// Compile a template source with the given BOS/EOS strings.
    pub fn new(
        source: &str,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<ChatTemplate, TemplateError> {
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(TemplateError::Syntax)?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned("chat", source.to_owned())
            .map_err(TemplateError::Syntax)?;
        Ok(ChatTemplate {
            env,
            source: source.to_owned(),
            bos_token: bos_token.to_owned(),
            eos_token: eos_token.to_owned(),
            fixed_time: None,
        })
    }

    /// The model's template: `tokenizer.chat_template`, else the built-in Gemma format for
    /// Gemma-family architectures, else `None`.
    pub fn from_gguf(h: &GgufHeader) -> Result<Option<ChatTemplate>, TemplateError> {
        let source = match meta_str(h, "tokenizer.chat_template")? {
            Some(s) => s,
            None if h.architecture().is_some_and(|a| a.starts_with("gemma")) => {
                GEMMA_FALLBACK_TEMPLATE.to_owned()
            }
            None => return Ok(None),
        };
        let bos = token_text(h, "tokenizer.ggml.bos_token_id");
        let eos = token_text(h, "tokenizer.ggml.eos_token_id");
        ChatTemplate::new(&source, &bos, &eos).map(Some)
    }

    /// Like [`ChatTemplate::from_gguf`], but a missing template is an error.
    pub fn for_model(h: &GgufHeader) -> Result<ChatTemplate, TemplateError> {
        ChatTemplate::from_gguf(h)?.ok_or_else(|| TemplateError::NoTemplate {
            arch: h.architecture().unwrap_or("?").to_owned(),
        })
    }

    /// Render with `strftime_now` frozen at `unix_seconds` (for reproducible output).
    pub fn with_fixed_time(mut self, unix_seconds: i64) -> ChatTemplate {
        self.fixed_time = Some(unix_seconds);
        self
    }

    /// The template source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Render `messages` (any serializable message type, e.g. [`ChatMessage`] or
    /// `serde_json::Value`) and optional `tools`. Object keys keep the order the values
    /// serialize in; use [`ChatTemplate::render_json`] to keep the order of a JSON text.
    pub fn render<M: serde::Serialize>(
        &self,
        messages: &[M],
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        let tools = tools.map(|t| Value::from(minijinja::value::Serde(t)));
        self.render_values(
            Value::from(minijinja::value::Serde(messages)),
            tools,
            add_generation_prompt,
        )
    }

    /// Render a conversation given as JSON text, keeping object keys in their written order
    /// (as Python's `json.loads` does): either `{"messages": [...], "tools": [...]}` or a bare
    /// message array.
    pub fn render_json(
        &self,
        conversation: &str,
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        let v: Value = serde_json::from_str(conversation)
            .map_err(|e| TemplateError::BadConversation(e.to_string()))?;
        let (messages, tools) = if v.kind() == minijinja::value::ValueKind::Seq {
            (v, None)
        } else {
            let m = v.get_attr("messages").map_err(TemplateError::Render)?;
            if m.is_undefined() {
                return Err(TemplateError::BadConversation(
                    "no \"messages\" array".to_owned(),
                ));
            }
            let t = v.get_attr("tools").map_err(TemplateError::Render)?;
            (m, (!t.is_undefined() && !t.is_none()).then_some(t))
        };
        self.render_values(messages, tools, add_generation_prompt)
    }

    fn render_values(
        &self,
        messages: Value,
        tools: Option<Value>,
        add_generation_prompt: bool,
    ) -> Result<String, TemplateError> {
        let tmpl = self
            .env
            .get_template("chat")
            .map_err(TemplateError::Syntax)?;
        let ctx = minijinja::context! {
            messages => messages,
            tools => tools,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
            __assay_now => self.fixed_time,
        };
        tmpl.render(ctx).map_err(|e| {
            let raised = e
                .detail()
                .and_then(|d| d.strip_prefix(RAISED))
                .map(str::to_owned);
            match raised {
                Some(msg) => TemplateError::Raised(msg),
                None => TemplateError::Render(e),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hf_globals_and_filters() {
        let t = ChatTemplate::new(
            "{{ bos_token }}{% for m in messages %}{{ m.role | upper }}: {{ m.content.strip() }}\n{% endfor %}\
             {{ tools | tojson }}|{{ {'a': [1, 2.5, none, true]} | tojson(indent=2) }}|{{ strftime_now('%Y-%m-%d %b') }}",
            "<s>",
            "</s>",
        )
        .expect("compiles")
        .with_fixed_time(1_700_000_000);
        let msgs = [ChatMessage {
            role: "user".into(),
            content: "  hi <b>ü</b> ".into(),
        }];
        let tools = serde_json::json!([{"name": "f", "x": "é\"\n"}]);
        let out = t.render(&msgs, Some(&tools), false).expect("renders");
        assert_eq!(
            out,
            "<s>USER: hi <b>ü</b>\n[{\"name\": \"f\", \"x\": \"é\\\"\\n\"}]|{\n  \"a\": [\n    1,\n    2.5,\n    null,\n    true\n  ]\n}|2023-11-14 Nov"
        );
    }

    #[test]
    fn raise_exception_is_a_named_error() {
        let t = ChatTemplate::new("{{ raise_exception('roles must alternate') }}", "", "")
            .expect("compiles");
        let e = t
            .render::<ChatMessage>(&[], None, true)
            .expect_err("raises");
        assert!(
            matches!(e, TemplateError::Raised(ref m) if m == "roles must alternate"),
            "{e}"
        );
    }

    #[test]
    fn syntax_errors_are_named() {
        let e = ChatTemplate::new("{% for x in %}", "", "")
            .err()
            .expect("syntax error");
        assert!(matches!(e, TemplateError::Syntax(_)), "{e}");
    }

    #[test]
    fn json_conversations_keep_key_order() {
        let t = ChatTemplate::new(
            "{{ messages[0] | tojson }}{% if tools %}{{ tools[0] | tojson }}{% endif %}",
            "",
            "",
        )
        .expect("compiles");
        let out = t
            .render_json(r#"{"messages": [{"z": 1, "a": {"y": 2, "b": 3}}], "tools": [{"k": 1.0, "c": 1e20}]}"#, true)
            .expect("renders");
        assert_eq!(
            out,
            r#"{"z": 1, "a": {"y": 2, "b": 3}}{"k": 1.0, "c": 1e+20}"#
        );
    }
}
