//! Structured output and tool grammars on the real tokenizers of the test models: random
//! walks through the token masks (every step picks a random allowed token) must always end
//! in text that parses and validates against the schema; a token outside the mask is
//! refused; an unimplemented schema keyword is an error naming it; tool-call grammars
//! produce text the family's parser turns into a call.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::sync::Arc;

use engine::api::constrain::{ConstrainError, Constrained, GrammarEnv, GrammarSpec};
use engine::api::tools::{self, Family, Parsed, ToolFormat, ToolParser};
use engine::model_file::GgufModel;
use engine::tokenizer::{ChatTemplate, Tokenizer};
use serde_json::{Value, json};

const MODELS: [&str; 2] = [
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    "Qwen2.5-Coder-0.5B-Instruct.gguf",
];

fn models_dir() -> PathBuf {
    match std::env::var_os("ASSAY_MODELS_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/assay/models")
        }
    }
}

fn load(name: &str) -> Option<(Arc<Tokenizer>, ChatTemplate)> {
    let path = models_dir().join(name);
    if !path.exists() {
        println!("SKIP: {} not found", path.display());
        return None;
    }
    let m = GgufModel::open(&path).unwrap();
    let tok = Tokenizer::from_gguf(m.header()).unwrap();
    let tmpl = ChatTemplate::for_model(m.header()).unwrap();
    Some((Arc::new(tok), tmpl))
}

/// splitmix64
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Walk the grammar picking random allowed tokens; returns the tokens before the end.
fn walk(c: &mut Constrained, tok: &Tokenizer, rng: &mut Rng, max: usize) -> Vec<u32> {
    let mut out = Vec::new();
    for _ in 0..max {
        let mask = c.mask().unwrap();
        let allowed: Vec<u32> = (0..mask.words().len() as u32 * 32)
            .filter(|&t| mask.allows(t))
            .collect();
        assert!(!allowed.is_empty());
        let t = allowed[(rng.next() % allowed.len() as u64) as usize];
        c.commit(t).unwrap();
        if tok.is_eog(t) {
            assert!(c.is_stopped(), "EOG accepted but the grammar did not stop");
            return out;
        }
        out.push(t);
        if c.is_stopped() {
            // complete: only end-of-generation ids may follow
            let m = c.mask().unwrap();
            assert!(m.allows(tok.eog_ids()[0]));
            assert!(!m.allows(t) || tok.is_eog(t));
            return out;
        }
    }
    panic!(
        "the grammar did not end within {max} tokens: {:?}",
        tok.decode(&out).unwrap()
    );
}

/// A validator for the subset of JSON schema the tests use.
fn valid(schema: &Value, v: &Value) -> Result<(), String> {
    if let Some(e) = schema.get("enum").and_then(Value::as_array) {
        return if e.contains(v) {
            Ok(())
        } else {
            Err(format!("{v} not in {e:?}"))
        };
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => {
            let o = v.as_object().ok_or(format!("{v} is not an object"))?;
            let props = schema["properties"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            for r in schema["required"].as_array().into_iter().flatten() {
                if !o.contains_key(r.as_str().unwrap()) {
                    return Err(format!("missing {r} in {v}"));
                }
            }
            for (k, x) in o {
                match props.get(k) {
                    Some(s) => valid(s, x)?,
                    None if schema["additionalProperties"] == json!(false) => {
                        return Err(format!("extra property {k}"));
                    }
                    None => {}
                }
            }
            Ok(())
        }
        Some("array") => {
            let a = v.as_array().ok_or(format!("{v} is not an array"))?;
            if let Some(m) = schema["maxItems"].as_u64()
                && a.len() as u64 > m
            {
                return Err(format!("{v}: more than {m} items"));
            }
            a.iter().try_for_each(|x| valid(&schema["items"], x))
        }
        Some("string") => {
            let s = v.as_str().ok_or(format!("{v} is not a string"))?;
            match schema["maxLength"].as_u64() {
                Some(m) if s.chars().count() as u64 > m => Err(format!("{v} longer than {m}")),
                _ => Ok(()),
            }
        }
        Some("integer") => {
            let i = v.as_i64().ok_or(format!("{v} is not an integer"))?;
            let lo = schema["minimum"].as_i64().unwrap_or(i64::MIN);
            let hi = schema["maximum"].as_i64().unwrap_or(i64::MAX);
            if (lo..=hi).contains(&i) {
                Ok(())
            } else {
                Err(format!("{i} outside {lo}..={hi}"))
            }
        }
        Some("boolean") => v
            .as_bool()
            .map(|_| ())
            .ok_or(format!("{v} is not a boolean")),
        _ => Ok(()),
    }
}

fn pet_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 8},
            "kind": {"enum": ["cat", "dog", "bird"]},
            "age": {"type": "integer", "minimum": 0, "maximum": 30},
            "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3},
            "owner": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 6}, "vip": {"type": "boolean"}},
                "required": ["city", "vip"]
            }
        },
        "required": ["name", "kind", "age", "tags", "owner"]
    })
}

#[test]
fn random_walks_through_a_schema_always_validate() {
    for name in MODELS {
        let Some((tok, _)) = load(name) else { continue };
        // a logits row wider than the vocabulary (padded embedding) keeps the pad masked
        let n_vocab = tok.vocab_size() + 37;
        let env = GrammarEnv::new(&tok, n_vocab).unwrap();
        let schema = pet_schema();
        let spec = GrammarSpec::JsonSchema {
            schema: schema.clone(),
            strict: true,
        };
        let mut strict_schema = schema.clone();
        strict_schema["additionalProperties"] = json!(false);
        strict_schema["properties"]["owner"]["additionalProperties"] = json!(false);
        let mut rng = Rng(7);
        for i in 0..25 {
            let mut c = env.compile(&spec).unwrap();
            let first = c.mask().unwrap();
            assert!(
                (tok.vocab_size() as u32..n_vocab as u32).all(|t| !first.allows(t)),
                "padding ids allowed"
            );
            let toks = walk(&mut c, &tok, &mut rng, 400);
            let text = tok.decode(&toks).unwrap();
            let v: Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{name} walk {i}: {text:?} does not parse: {e}"));
            valid(&strict_schema, &v).unwrap_or_else(|e| panic!("{name} walk {i}: {text}: {e}"));
        }
        // json_object: any object
        let mut c = env.compile(&GrammarSpec::JsonObject).unwrap();
        let mut m = c.mask().unwrap();
        let open = tok.encode("{", false, false).unwrap()[0];
        assert!(m.allows(open));
        let letter = tok.encode("a", false, false).unwrap()[0];
        assert!(!m.allows(letter), "json_object allows a bare letter first");
        // a planted fault: committing a masked-out token is refused
        let err = c.commit(letter).unwrap_err();
        assert!(matches!(err, ConstrainError::Matcher(_)), "{err:?}");
        let mut logits = vec![0.0f32; n_vocab];
        m = env
            .compile(&GrammarSpec::JsonObject)
            .unwrap()
            .mask()
            .unwrap();
        m.apply(&mut logits);
        assert_eq!(logits[letter as usize], f32::NEG_INFINITY);
        assert_eq!(logits[open as usize], 0.0);
    }
}

#[test]
fn unimplemented_schema_keywords_are_named() {
    let Some((tok, _)) = load(MODELS[0]) else {
        return;
    };
    let env = GrammarEnv::new(&tok, tok.vocab_size()).unwrap();
    for (schema, word) in [
        (
            json!({"type": "array", "items": {"type": "integer"}, "uniqueItems": true}),
            "uniqueItems",
        ),
        (json!({"type": "object", "not": {"required": ["a"]}}), "not"),
    ] {
        let e = env
            .compile(&GrammarSpec::JsonSchema {
                schema: schema.clone(),
                strict: false,
            })
            .unwrap_err();
        match e {
            ConstrainError::Unsupported(m) => assert!(m.contains(word), "{schema}: {m}"),
            other => panic!("{schema}: {other:?}"),
        }
    }
    assert!(GrammarEnv::new(&tok, tok.vocab_size() - 1).is_err());
}

fn weather_tools(choice: Value) -> tools::Tools {
    let obj = json!({"tools": [
        {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "maxLength": 10},
                "unit": {"enum": ["celsius", "fahrenheit"]}},
                "required": ["city", "unit"]}, "strict": true}},
        {"type": "function", "function": {"name": "get_time",
            "parameters": {"type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}},
                "required": ["zone"]}, "strict": true}}
    ], "tool_choice": choice});
    tools::parse_tools(obj.as_object().unwrap())
        .unwrap()
        .unwrap()
}

#[test]
fn tool_grammars_force_parseable_calls_per_family() {
    let Some((tok, tmpl)) = load(MODELS[1]) else {
        return;
    };
    let fmt = ToolFormat::detect(tmpl.source());
    assert_eq!(
        fmt,
        ToolFormat {
            family: Family::Hermes,
            native: true
        }
    );
    let env = GrammarEnv::new(&tok, tok.vocab_size()).unwrap();
    let mut rng = Rng(11);
    for family in [Family::Hermes, Family::Llama3Json, Family::Mistral] {
        let f = ToolFormat {
            family,
            native: true,
        };
        for (choice, names) in [
            (json!("required"), vec!["get_weather", "get_time"]),
            (
                json!({"type": "function", "function": {"name": "get_time"}}),
                vec!["get_time"],
            ),
        ] {
            let t = weather_tools(choice);
            let spec = tools::grammar(&t, f, &tok).unwrap().unwrap();
            for _ in 0..6 {
                let mut c = env.compile(&spec).unwrap();
                let toks = walk(&mut c, &tok, &mut rng, 300);
                let text = tok.decode(&toks).unwrap();
                let mut p = ToolParser::new(family, "call");
                let mut parts = p.push(&text);
                parts.extend(p.finish());
                let [Parsed::Call { call, .. }] = parts.as_slice() else {
                    panic!("{family:?}: {text:?} gave {parts:?}");
                };
                assert!(names.contains(&call.name.as_str()), "{family:?}: {text:?}");
                let args: Value = serde_json::from_str(&call.arguments).unwrap();
                assert!(args.is_object(), "{text:?}");
            }
        }
    }
    assert!(
        tools::grammar(&weather_tools(json!("auto")), fmt, &tok)
            .unwrap()
            .is_none()
    );
}

#[test]
fn tools_render_natively_or_injected() {
    let t = weather_tools(json!("auto"));
    let msgs = tools::parse_messages(&[
        json!({"role": "user", "content": "Weather in Paris?"}),
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
               "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"celsius\"}"}}]}),
        json!({"role": "tool", "tool_call_id": "c1", "content": "sunny"}),
    ])
    .unwrap();
    if let Some((_, tmpl)) = load(MODELS[1]) {
        let fmt = ToolFormat::detect(tmpl.source());
        let (m, tv) = tools::prepare(msgs.clone(), Some(&t), fmt);
        let text = tmpl.render(&m, tv.as_ref(), true).unwrap();
        assert!(
            text.contains("<tools>") && text.contains("\"name\": \"get_weather\""),
            "{text}"
        );
        assert!(
            text.contains(
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\""
            ),
            "{text}"
        );
        assert!(
            text.contains("<tool_response>\nsunny\n</tool_response>"),
            "{text}"
        );
    }
    if let Some((_, tmpl)) = load(MODELS[0]) {
        let fmt = ToolFormat::detect(tmpl.source());
        assert!(!fmt.native, "SmolLM2's template does not take tools");
        let (m, tv) = tools::prepare(msgs, Some(&t), fmt);
        let text = tmpl.render(&m, tv.as_ref(), true).unwrap();
        assert!(text.contains("<tools>\n{\"type\":\"function\""), "{text}");
        assert!(
            text.contains("<tool_call>{\"name\":\"get_weather\""),
            "{text}"
        );
        assert!(
            text.contains("<tool_response>\nsunny\n</tool_response>"),
            "{text}"
        );
    }
}
