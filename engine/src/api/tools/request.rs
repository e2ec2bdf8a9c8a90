//! The request side of tool calling: `tools` / `tool_choice` and tool-bearing `messages`
//! validated (each refusal names its field) and normalized for a chat template.

use serde_json::{Map, Value, json};

use super::{FieldError, Tool, ToolChoice, Tools, ferr};

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
