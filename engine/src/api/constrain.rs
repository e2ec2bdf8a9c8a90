//! Structured output: `response_format` (`json_object`, `json_schema`) and tool-call
//! grammars compiled by the `llguidance` crate into a matcher that yields, before every
//! sampled token, the set of tokens the grammar allows.
//!
//! * [`GrammarEnv`] is built once per model from our [`Tokenizer`]: the bytes of every token
//!   id (control tokens marked as special, ids past the tokenizer's vocabulary up to the
//!   logits width present but never allowed) and the end-of-generation ids.
//! * [`GrammarEnv::compile`] turns a [`GrammarSpec`] into a [`Constrained`] matcher. A schema
//!   feature llguidance does not implement is an error naming it ([`ConstrainError`], a 400
//!   at the server), never ignored.
//! * Per step: [`Constrained::mask`] gives a [`TokenMask`], a `u32` bitset over the logits
//!   (bit `i % 32` of word `i / 32` = token `i` allowed), [`TokenMask::apply`] sets the
//!   logits of disallowed tokens to `-inf` before sampling (the CPU path), then
//!   [`Constrained::commit`] advances the grammar by the sampled token. The CUDA backend
//!   uploads the same words and applies them on the device (`kernels/mask.cu`,
//!   [`crate::cuda::CudaDecoder::set_mask`]).

use std::sync::Arc;

use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::{TokEnv, TokRxInfo, TokTrie, TokenId, TokenizerEnv};
use llguidance::{Matcher, ParserFactory};
use serde_json::{Value, json};

use crate::tokenizer::Tokenizer;

/// Errors compiling or running a grammar.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ConstrainError {
    /// The request's format is malformed (`param` names the field).
    #[error("{message}")]
    BadFormat { param: String, message: String },
    /// The grammar engine refused the schema (e.g. `Unimplemented keys: ["foo"]`).
    #[error("unsupported JSON schema: {0}")]
    Unsupported(String),
    /// The tokenizer cannot be turned into a grammar environment.
    #[error("cannot build the grammar environment: {0}")]
    Env(String),
    /// The matcher failed during generation (a sampled token the grammar refused, ...).
    #[error("grammar matcher: {0}")]
    Matcher(String),
}

/// What the output must match.
#[derive(Clone, Debug, PartialEq)]
pub enum GrammarSpec {
    /// Any JSON object.
    JsonObject,
    /// A JSON schema (`strict` = OpenAI's strict mode: objects take no extra properties
    /// unless the schema says otherwise).
    JsonSchema { schema: Value, strict: bool },
    /// A Lark grammar (llguidance syntax); used for tool calls.
    Lark(String),
}

fn bad(param: &str, message: impl Into<String>) -> ConstrainError {
    ConstrainError::BadFormat {
        param: param.to_owned(),
        message: message.into(),
    }
}

/// Parse OpenAI's `response_format`: `None` for absent or `{"type": "text"}`.
pub fn parse_response_format(v: Option<&Value>) -> Result<Option<GrammarSpec>, ConstrainError> {
    let v = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => v,
    };
    let Some(obj) = v.as_object() else {
        return Err(bad(
            "response_format",
            "`response_format` must be an object",
        ));
    };
    match obj.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(GrammarSpec::JsonObject)),
        Some("json_schema") => {
            let Some(js) = obj.get("json_schema").and_then(Value::as_object) else {
                return Err(bad(
                    "response_format.json_schema",
                    "`response_format.json_schema` must be an object with a `schema`",
                ));
            };
            if let Some(n) = js.get("name")
                && !n.is_string()
            {
                return Err(bad(
                    "response_format.json_schema.name",
                    "`response_format.json_schema.name` must be a string",
                ));
            }
            let schema = match js.get("schema") {
                Some(s @ (Value::Object(_) | Value::Bool(_))) => s.clone(),
                None | Some(Value::Null) => json!({}),
                Some(_) => {
                    return Err(bad(
                        "response_format.json_schema.schema",
                        "`response_format.json_schema.schema` must be a JSON schema object",
                    ));
                }
            };
            let strict = match js.get("strict") {
                None | Some(Value::Null) => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => {
                    return Err(bad(
                        "response_format.json_schema.strict",
                        "`response_format.json_schema.strict` must be a boolean",
                    ));
                }
            };
            Ok(Some(GrammarSpec::JsonSchema { schema, strict }))
        }
        Some(other) => Err(bad(
            "response_format.type",
            format!(
                "`response_format.type` {other:?} is not one of \"text\", \"json_object\", \"json_schema\""
            ),
        )),
        None => Err(bad(
            "response_format.type",
            "`response_format.type` is required",
        )),
    }
}

/// In strict mode every object schema without `additionalProperties` gets `false`
/// (OpenAI's strict structured outputs).
pub(crate) fn strictify(v: &mut Value) {
    match v {
        Value::Object(m) => {
            let is_object = m.get("type").and_then(Value::as_str) == Some("object")
                || m.contains_key("properties");
            if is_object && !m.contains_key("additionalProperties") {
                m.insert("additionalProperties".into(), Value::Bool(false));
            }
            for (_, x) in m.iter_mut() {
                strictify(x);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(strictify),
        _ => {}
    }
}

/// Our vocabulary as llguidance sees it. Grammar literals are tokenized greedily on the
/// trie (masks are computed on token bytes, so this never changes what is allowed).
struct Env {
    trie: TokTrie,
}

impl TokenizerEnv for Env {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    fn tokenize_bytes(&self, s: &[u8]) -> Vec<TokenId> {
        self.trie.greedy_tokenize(s)
    }
}

/// The grammar environment of one model (build once, compile per request).
pub struct GrammarEnv {
    factory: ParserFactory,
    n_vocab: usize,
    eog: Arc<[u32]>,
}

impl std::fmt::Debug for GrammarEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrammarEnv")
            .field("n_vocab", &self.n_vocab)
            .finish()
    }
}

impl GrammarEnv {
    /// Build from a tokenizer and the width of the model's logits (`>=` the vocabulary).
    pub fn new(tok: &Tokenizer, n_vocab: usize) -> Result<GrammarEnv, ConstrainError> {
        let n_tok = tok.vocab_size();
        if n_vocab < n_tok || n_vocab == 0 || u32::try_from(n_vocab).is_err() {
            return Err(ConstrainError::Env(format!(
                "logits width {n_vocab} is smaller than the vocabulary ({n_tok})"
            )));
        }
        let eog = tok.eog_ids();
        let Some(&eos) = tok
            .eot_id()
            .or(tok.eos_id())
            .as_ref()
            .or_else(|| eog.first())
        else {
            return Err(ConstrainError::Env(
                "the vocabulary has no end-of-generation token".into(),
            ));
        };
        let mut words: Vec<Vec<u8>> = Vec::with_capacity(n_vocab);
        for id in 0..n_vocab as u32 {
            if (id as usize) >= n_tok {
                words.push(Vec::new());
                continue;
            }
            let piece = tok.token_to_piece(id).unwrap_or_default();
            if tok.is_special(id) || tok.is_eog(id) {
                let mut w = Vec::with_capacity(piece.len() + 1);
                w.push(TokTrie::SPECIAL_TOKEN_MARKER);
                w.extend_from_slice(piece);
                words.push(w);
            } else {
                words.push(piece.to_vec());
            }
        }
        let info = TokRxInfo {
            vocab_size: n_vocab as u32,
            tok_eos: eos,
            tok_bos: tok.bos_id(),
            tok_pad: tok.pad_id(),
            tok_unk: None,
            tok_end_of_turn: tok.eot_id(),
        };
        let mut eos_all = vec![eos];
        eos_all.extend(eog.iter().copied().filter(|&e| e != eos));
        let trie = TokTrie::from(&info, &words).with_eos_tokens(&eos_all);
        let env: TokEnv = Arc::new(Env { trie });
        let mut factory =
            ParserFactory::new_simple(&env).map_err(|e| ConstrainError::Env(format!("{e:#}")))?;
        factory.quiet();
        Ok(GrammarEnv {
            factory,
            n_vocab,
            eog: eos_all.into(),
        })
    }

    /// Width of the masks (the logits row).
    pub fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    /// Compile `spec` into a fresh matcher.
    pub fn compile(&self, spec: &GrammarSpec) -> Result<Constrained, ConstrainError> {
        let compact = json!({"whitespace_flexible": false, "lenient": false});
        let grammar = match spec {
            GrammarSpec::JsonObject => {
                TopLevelGrammar::from_json_schema(json!({"type": "object", "x-guidance": compact}))
            }
            GrammarSpec::JsonSchema { schema, strict } => {
                let mut s = schema.clone();
                if *strict {
                    strictify(&mut s);
                }
                match &mut s {
                    Value::Object(m) => {
                        if m.contains_key("x-guidance") {
                            return Err(bad(
                                "response_format.json_schema.schema",
                                "`x-guidance` is reserved by the server",
                            ));
                        }
                        m.insert("x-guidance".into(), compact);
                    }
                    Value::Bool(true) => s = json!({"x-guidance": compact}),
                    _ => {
                        return Err(ConstrainError::Unsupported(
                            "the schema `false` matches nothing".into(),
                        ));
                    }
                }
                TopLevelGrammar::from_json_schema(s)
            }
            GrammarSpec::Lark(src) => TopLevelGrammar::from_lark(src.clone()),
        };
        let parser = self
            .factory
            .create_parser(grammar)
            .map_err(|e| ConstrainError::Unsupported(format!("{e:#}")))?;
        Ok(Constrained {
            matcher: Matcher::new(Ok(parser)),
            n_vocab: self.n_vocab,
            eog: self.eog.clone(),
        })
    }
}

/// A bitset over the logits: bit `i % 32` of word `i / 32` set = token `i` allowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenMask {
    words: Vec<u32>,
    n_vocab: usize,
}

impl TokenMask {
    /// A mask from its words (extra bits past `n_vocab` are ignored).
    pub fn from_words(mut words: Vec<u32>, n_vocab: usize) -> TokenMask {
        words.resize(n_vocab.div_ceil(32), 0);
        TokenMask { words, n_vocab }
    }

    /// The bitset, `ceil(n_vocab / 32)` words (what a device kernel reads).
    pub fn words(&self) -> &[u32] {
        &self.words
    }

    /// Is token `t` allowed?
    pub fn allows(&self, t: u32) -> bool {
        let i = t as usize;
        i < self.n_vocab
            && self
                .words
                .get(i / 32)
                .is_some_and(|w| w >> (i % 32) & 1 == 1)
    }

    /// Number of allowed tokens.
    pub fn count(&self) -> usize {
        (0..self.n_vocab as u32).filter(|&t| self.allows(t)).count()
    }

    /// Set the logits of every disallowed token to `-inf` (the CPU path).
    pub fn apply(&self, logits: &mut [f32]) {
        for (i, l) in logits.iter_mut().enumerate() {
            if !self.allows(i as u32) {
                *l = f32::NEG_INFINITY;
            }
        }
    }
}

/// One request's grammar state.
pub struct Constrained {
    matcher: Matcher,
    n_vocab: usize,
    eog: Arc<[u32]>,
}

impl std::fmt::Debug for Constrained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constrained")
            .field("stopped", &self.matcher.is_stopped())
            .finish()
    }
}

impl Constrained {
    fn err(&self, e: impl std::fmt::Display) -> ConstrainError {
        let detail = self.matcher.get_error().unwrap_or_else(|| e.to_string());
        ConstrainError::Matcher(detail)
    }

    /// The tokens allowed next (only end-of-generation ids once the grammar is complete).
    pub fn mask(&mut self) -> Result<TokenMask, ConstrainError> {
        let v = self
            .matcher
            .compute_mask_or_eos()
            .map_err(|e| self.err(e))?;
        let mask = TokenMask::from_words(v.as_slice().to_vec(), self.n_vocab);
        if mask.words.iter().all(|&w| w == 0) {
            return Err(ConstrainError::Matcher(
                "the grammar allows no token here".into(),
            ));
        }
        Ok(mask)
    }

    /// Mask `logits` in place (compute the mask and apply it).
    pub fn constrain(&mut self, logits: &mut [f32]) -> Result<(), ConstrainError> {
        self.mask()?.apply(logits);
        Ok(())
    }

    /// Advance the grammar by the sampled token. An end-of-generation token after the
    /// grammar completed is accepted and changes nothing.
    pub fn commit(&mut self, token: u32) -> Result<(), ConstrainError> {
        if self.matcher.is_stopped() && self.eog.contains(&token) {
            return Ok(());
        }
        self.matcher.consume_token(token).map_err(|e| self.err(e))
    }

    /// The grammar is complete: nothing can follow (generation should end here), either
    /// because the grammar admits no extension or it accepted an end-of-generation token.
    pub fn is_stopped(&self) -> bool {
        self.matcher.is_stopped()
    }

    /// Could the output end here?
    pub fn is_accepting(&mut self) -> bool {
        self.matcher.is_accepting().unwrap_or(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_format_parses_and_refuses_bad_shapes() {
        assert_eq!(parse_response_format(None).unwrap(), None);
        assert_eq!(
            parse_response_format(Some(&json!({"type": "text"}))).unwrap(),
            None
        );
        assert_eq!(
            parse_response_format(Some(&json!({"type": "json_object"}))).unwrap(),
            Some(GrammarSpec::JsonObject)
        );
        assert_eq!(
            parse_response_format(Some(&json!({"type": "json_schema", "json_schema":
                {"name": "x", "schema": {"type": "integer"}, "strict": true}})))
            .unwrap(),
            Some(GrammarSpec::JsonSchema {
                schema: json!({"type": "integer"}),
                strict: true
            })
        );
        for (v, param) in [
            (json!("json"), "response_format"),
            (json!({"type": "xml"}), "response_format.type"),
            (json!({}), "response_format.type"),
            (
                json!({"type": "json_schema"}),
                "response_format.json_schema",
            ),
            (
                json!({"type": "json_schema", "json_schema": {"schema": 3}}),
                "response_format.json_schema.schema",
            ),
            (
                json!({"type": "json_schema", "json_schema": {"schema": {}, "strict": "yes"}}),
                "response_format.json_schema.strict",
            ),
        ] {
            match parse_response_format(Some(&v)) {
                Err(ConstrainError::BadFormat { param: p, .. }) => assert_eq!(p, param, "{v}"),
                other => panic!("{v}: {other:?}"),
            }
        }
    }

    #[test]
    fn strict_mode_closes_objects() {
        let mut s = json!({"type": "object", "properties": {"a": {"type": "object", "properties": {}}},
                           "additionalProperties": true});
        strictify(&mut s);
        assert_eq!(s["additionalProperties"], json!(true));
        assert_eq!(s["properties"]["a"]["additionalProperties"], json!(false));
    }

    #[test]
    fn mask_bits_and_apply() {
        let m = TokenMask::from_words(vec![0b1010, 1], 33);
        assert!(!m.allows(0) && m.allows(1) && !m.allows(2) && m.allows(3));
        assert!(m.allows(32) && !m.allows(33) && !m.allows(1000));
        assert_eq!(m.count(), 3);
        let mut l = vec![1.0f32; 33];
        m.apply(&mut l);
        assert_eq!(l[1], 1.0);
        assert_eq!(l[0], f32::NEG_INFINITY);
        assert_eq!(l[32], 1.0);
    }
}
