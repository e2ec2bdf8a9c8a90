//! Log-probabilities: the log-softmax of a row of raw logits (before penalties, temperature
//! and grammar masks; accumulated in f64), the chosen token's value and the `top_logprobs`
//! most likely alternatives, in OpenAI's chat (`logprobs.content[]`) and completions
//! (`tokens` / `token_logprobs` / `top_logprobs` / `text_offset`) shapes, the tokens named by
//! their text or, on request, by their ids ([`TokenNames`]).

use serde_json::{Map, Value, json};

use crate::tokenizer::Tokenizer;

/// Most alternatives a request may ask for (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

/// The log-softmax of `logits`: `(x_i - max) - ln(sum_j exp(x_j - max))`, summed in f64.
/// Non-finite inputs: NaN counts as `-inf`; a row that is all `-inf` gives all `-inf`.
pub fn log_softmax(logits: &[f32]) -> Vec<f64> {
    let clean = |x: f32| {
        if x.is_nan() {
            f64::NEG_INFINITY
        } else {
            x as f64
        }
    };
    let max = logits
        .iter()
        .map(|&x| clean(x))
        .fold(f64::NEG_INFINITY, f64::max);
    if !max.is_finite() {
        return vec![f64::NEG_INFINITY; logits.len()];
    }
    let sum: f64 = logits.iter().map(|&x| (clean(x) - max).exp()).sum();
    let ln_sum = sum.ln();
    logits.iter().map(|&x| (clean(x) - max) - ln_sum).collect()
}

/// One generated token's log-probability and the best alternatives.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub token: u32,
    pub logprob: f64,
    /// The `n` most likely tokens, most likely first (ties: lower id first).
    pub top: Vec<(u32, f64)>,
}

// The values come from `log_softmax`, which never yields NaN, so equality is total.
impl Eq for TokenLogprob {}

/// The log-probability of `token` under `logits` and the `top_n` best tokens.
pub fn token_logprob(logits: &[f32], token: u32, top_n: usize) -> TokenLogprob {
    let lp = log_softmax(logits);
    let logprob = lp.get(token as usize).copied().unwrap_or(f64::NEG_INFINITY);
    let n = top_n.min(lp.len());
    let mut idx: Vec<u32> = (0..lp.len() as u32).collect();
    let order = |a: &u32, b: &u32| lp[*b as usize].total_cmp(&lp[*a as usize]).then(a.cmp(b));
    if n > 0 && n < idx.len() {
        idx.select_nth_unstable_by(n - 1, order);
        idx.truncate(n);
    }
    idx.sort_by(order);
    idx.truncate(n);
    let top = idx.into_iter().map(|t| (t, lp[t as usize])).collect();
    TokenLogprob {
        token,
        logprob,
        top,
    }
}

/// What a request asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogprobsRequest {
    /// Alternatives per token (0..=20).
    pub top: usize,
}

/// Errors of the `logprobs` fields: `(param, message)`.
pub type FieldError = (String, String);

fn field_err(param: &str, msg: impl Into<String>) -> FieldError {
    (param.to_owned(), msg.into())
}

fn top_field(obj: &Map<String, Value>, key: &str) -> Result<Option<usize>, FieldError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(k) if k as usize <= MAX_TOP_LOGPROBS => Ok(Some(k as usize)),
            _ => Err(field_err(
                key,
                format!("`{key}` must be an integer between 0 and {MAX_TOP_LOGPROBS}"),
            )),
        },
        Some(_) => Err(field_err(key, format!("`{key}` must be an integer"))),
    }
}

/// Chat: `logprobs: bool` and `top_logprobs: 0..=20` (which needs `logprobs: true`).
pub fn parse_chat(obj: &Map<String, Value>) -> Result<Option<LogprobsRequest>, FieldError> {
    let on = match obj.get("logprobs") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(field_err("logprobs", "`logprobs` must be a boolean")),
    };
    let top = top_field(obj, "top_logprobs")?;
    if top.is_some() && !on {
        return Err(field_err(
            "top_logprobs",
            "`top_logprobs` requires `logprobs: true`",
        ));
    }
    Ok(on.then_some(LogprobsRequest {
        top: top.unwrap_or(0),
    }))
}

/// Completions: `logprobs: 0..=20` (the number of alternatives; 0 = only the chosen token).
pub fn parse_completion(obj: &Map<String, Value>) -> Result<Option<LogprobsRequest>, FieldError> {
    if obj.get("top_logprobs").is_some_and(|v| !v.is_null()) {
        return Err(field_err(
            "top_logprobs",
            "`top_logprobs` is a chat field; completions take `logprobs: N`",
        ));
    }
    Ok(top_field(obj, "logprobs")?.map(|top| LogprobsRequest { top }))
}

/// How the logprobs name tokens.
///
/// By text (OpenAI's shape) two tokens with the same text cannot be told apart, and the
/// completions `top_logprobs` object, keyed by that text, keeps only the likelier of them.
/// `Ids` (the request field `return_tokens_as_token_ids`, as vLLM names it) writes every
/// token as `token_id:N` instead; chat's `bytes` still hold the token's own bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TokenNames {
    #[default]
    Pieces,
    Ids,
}

impl TokenNames {
    /// `Ids` when `as_ids`.
    pub fn ids_if(as_ids: bool) -> TokenNames {
        if as_ids {
            TokenNames::Ids
        } else {
            TokenNames::Pieces
        }
    }

    /// How this naming writes token `id` whose text is `text`.
    fn name(self, id: u32, text: String) -> String {
        match self {
            TokenNames::Pieces => text,
            TokenNames::Ids => format!("token_id:{id}"),
        }
    }
}

fn piece(tok: &Tokenizer, id: u32) -> (String, Vec<u8>) {
    let b = tok
        .token_to_piece(id)
        .map(<[u8]>::to_vec)
        .unwrap_or_default();
    (String::from_utf8_lossy(&b).into_owned(), b)
}

/// One entry of a chat `logprobs.content` array.
pub fn chat_entry(tok: &Tokenizer, lp: &TokenLogprob, names: TokenNames) -> Value {
    let (text, bytes) = piece(tok, lp.token);
    let top: Vec<Value> = lp
        .top
        .iter()
        .map(|&(t, l)| {
            let (s, b) = piece(tok, t);
            json!({"token": names.name(t, s), "logprob": finite(l), "bytes": b})
        })
        .collect();
    json!({"token": names.name(lp.token, text), "logprob": finite(lp.logprob), "bytes": bytes,
           "top_logprobs": top})
}

/// OpenAI clamps impossible tokens to a large negative number (JSON has no `-inf`).
fn finite(x: f64) -> f64 {
    if x.is_finite() { x } else { -9999.0 }
}

/// A chat choice's `logprobs` object.
pub fn chat_logprobs(tok: &Tokenizer, lps: &[TokenLogprob], names: TokenNames) -> Value {
    let content: Vec<Value> = lps.iter().map(|l| chat_entry(tok, l, names)).collect();
    json!({"content": content, "refusal": null})
}

/// A completions choice's `logprobs` object; `offset` is the text offset of the first token
/// (offsets count the tokens' text whatever `names`).
pub fn completion_logprobs(
    tok: &Tokenizer,
    lps: &[TokenLogprob],
    offset: usize,
    names: TokenNames,
) -> Value {
    let mut tokens = Vec::new();
    let mut token_logprobs = Vec::new();
    let mut top = Vec::new();
    let mut text_offset = Vec::new();
    let mut at = offset;
    for l in lps {
        let (s, _) = piece(tok, l.token);
        text_offset.push(at);
        at += s.len();
        tokens.push(Value::String(names.name(l.token, s)));
        token_logprobs.push(json!(finite(l.logprob)));
        let mut m = Map::new();
        for &(t, v) in &l.top {
            let (s, _) = piece(tok, t);
            // Most likely first: of two tokens with the same text, the likelier keeps it.
            m.entry(names.name(t, s)).or_insert(json!(finite(v)));
        }
        top.push(Value::Object(m));
    }
    json!({"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top,
           "text_offset": text_offset})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_softmax_normalizes_in_f64() {
        let l = [1.0f32, 2.0, 3.0, f32::NEG_INFINITY, f32::NAN];
        let lp = log_softmax(&l);
        let total: f64 = lp.iter().map(|x| x.exp()).sum();
        assert!((total - 1.0).abs() < 1e-12, "{total}");
        let z = (1f64.exp() + 2f64.exp() + 3f64.exp()).ln();
        assert!((lp[2] - (3.0 - z)).abs() < 1e-12);
        assert_eq!(lp[3], f64::NEG_INFINITY);
        assert_eq!(lp[4], f64::NEG_INFINITY);
        // Large logits do not overflow.
        let big = log_softmax(&[1e30, 1e30]);
        assert!((big[0] - (0.5f64).ln()).abs() < 1e-12);
        assert!(
            log_softmax(&[f32::NEG_INFINITY; 3])
                .iter()
                .all(|x| *x == f64::NEG_INFINITY)
        );
    }

    #[test]
    fn top_alternatives_sorted_with_ties_by_id() {
        let l = [0.5f32, 3.0, 3.0, -1.0, 2.0];
        let t = token_logprob(&l, 4, 3);
        assert_eq!(t.top.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 2, 4]);
        assert_eq!(t.logprob, t.top[2].1);
        assert_eq!(token_logprob(&l, 0, 0).top, vec![]);
        assert_eq!(token_logprob(&l, 0, 50).top.len(), 5);
        assert_eq!(token_logprob(&l, 99, 1).logprob, f64::NEG_INFINITY);
    }

    #[test]
    fn request_fields() {
        let o = |v: Value| v.as_object().unwrap().clone();
        assert_eq!(parse_chat(&o(json!({}))).unwrap(), None);
        assert_eq!(
            parse_chat(&o(json!({"logprobs": true, "top_logprobs": 5}))).unwrap(),
            Some(LogprobsRequest { top: 5 })
        );
        assert_eq!(
            parse_chat(&o(json!({"top_logprobs": 5}))).unwrap_err().0,
            "top_logprobs"
        );
        assert_eq!(
            parse_chat(&o(json!({"logprobs": true, "top_logprobs": 21})))
                .unwrap_err()
                .0,
            "top_logprobs"
        );
        assert_eq!(
            parse_chat(&o(json!({"logprobs": 1}))).unwrap_err().0,
            "logprobs"
        );
        assert_eq!(
            parse_completion(&o(json!({"logprobs": 2}))).unwrap(),
            Some(LogprobsRequest { top: 2 })
        );
        assert_eq!(
            parse_completion(&o(json!({"logprobs": -1}))).unwrap_err().0,
            "logprobs"
        );
    }
}

#[cfg(test)]
mod names_tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::model_file::{GgufHeader, MetaArray, MetaValue};

    /// Byte-level BPE tokens `a`, `b`, then two padding tokens (type UNUSED) whose text is
    /// empty, as on the synthetic checkpoints' padded vocabularies.
    fn tok() -> Tokenizer {
        let mut m = BTreeMap::new();
        let s = |v: &str| MetaValue::String(v.to_owned());
        m.insert("tokenizer.ggml.model".to_owned(), s("gpt2"));
        m.insert("tokenizer.ggml.pre".to_owned(), s("gpt-2"));
        m.insert(
            "tokenizer.ggml.tokens".to_owned(),
            MetaValue::Array(MetaArray::String(
                ["a", "b", "<|pad_2|>", "<|pad_3|>"]
                    .map(String::from)
                    .to_vec(),
            )),
        );
        m.insert(
            "tokenizer.ggml.token_type".to_owned(),
            MetaValue::Array(MetaArray::I32(vec![1, 1, 5, 5])),
        );
        m.insert(
            "tokenizer.ggml.merges".to_owned(),
            MetaValue::Array(MetaArray::String(Vec::new())),
        );
        let h = GgufHeader {
            version: 3,
            metadata: m,
            tensors: Vec::new(),
            alignment: 32,
            data_offset: 0,
        };
        Tokenizer::from_gguf(&h).unwrap()
    }

    #[test]
    fn ids_tell_apart_tokens_whose_text_is_the_same() {
        let t = tok();
        assert_eq!(t.token_to_piece(2).unwrap(), b"");
        assert_eq!(t.token_to_piece(3).unwrap(), b"");
        // Tokens 2 and 3 (both empty text) are the two best, then `a`.
        let lp = token_logprob(&[1.0, -2.0, 3.0, 2.9], 3, 3);
        assert_eq!(
            lp.top.iter().map(|x| x.0).collect::<Vec<_>>(),
            vec![2, 3, 0]
        );

        // By text the two empty tokens share one key: the likelier (2) keeps it.
        let v = completion_logprobs(&t, std::slice::from_ref(&lp), 0, TokenNames::Pieces);
        let top = v["top_logprobs"][0].as_object().unwrap();
        assert_eq!(top.len(), 2, "{v}");
        assert_eq!(top[""], json!(lp.top[0].1));
        assert_eq!(v["tokens"][0], "");

        // By id every candidate is there under its own key, the values unchanged.
        let v = completion_logprobs(&t, std::slice::from_ref(&lp), 5, TokenNames::Ids);
        let top = v["top_logprobs"][0].as_object().unwrap();
        assert_eq!(top.len(), 3, "{v}");
        for (id, l) in &lp.top {
            assert_eq!(top[&format!("token_id:{id}")], json!(l), "{v}");
        }
        assert_eq!(v["tokens"][0], "token_id:3");
        assert_eq!(v["token_logprobs"][0], json!(lp.logprob));
        // Offsets still count the tokens' text.
        let two = [token_logprob(&[5.0, 0.0, 0.0, 0.0], 0, 1), lp.clone()];
        let v = completion_logprobs(&t, &two, 5, TokenNames::Ids);
        assert_eq!(v["text_offset"], json!([5, 6]));
        assert_eq!(v["tokens"], json!(["token_id:0", "token_id:3"]));

        // Chat: `token` names the id, `bytes` keep the token's own bytes.
        let a = token_logprob(&[5.0, 4.0, 0.0, 0.0], 0, 2);
        let c = chat_logprobs(&t, &[a], TokenNames::Ids);
        let e = &c["content"][0];
        assert_eq!(e["token"], "token_id:0");
        assert_eq!(e["bytes"], json!([b'a']));
        assert_eq!(e["top_logprobs"][1]["token"], "token_id:1");
        assert_eq!(e["top_logprobs"][1]["bytes"], json!([b'b']));
        let c = chat_logprobs(&t, &[lp], TokenNames::Pieces);
        let e = &c["content"][0];
        assert_eq!(e["token"], "");
        assert_eq!(e["top_logprobs"].as_array().unwrap().len(), 3);
    }
}
