//! Unit tests of tool calling: parsing, rendering, the streaming parsers.

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
    let f =
        json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]);
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
        sys.starts_with("S\n\n") && sys.contains("\"name\":\"f\"") && sys.contains("<tool_call>")
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
