//! Tokenizers built from a GGUF file's metadata alone, the streaming detokenizer, and chat
//! templates.
//!
//! Owns: BPE (`gpt2`, and `gemma4`'s SPM-style BPE) with the pre-tokenizer named by
//! `tokenizer.ggml.pre` ([`pretok`]), SentencePiece (`llama`) with byte fallback ([`spm`]),
//! WordPiece (`bert`, [`wpm`]), special and control tokens in raw text ([`special`]),
//! `add_bos`/`add_eos` from metadata, end-of-generation detection, decoding (byte tokens
//! included), [`StreamDecoder`] and [`ChatTemplate`].
//!
//! Encoding is exact against llama.cpp's own tokenizer test vectors (see
//! `engine/tests/tokenizer_parity.rs`). Anything a file can get wrong is a named
//! [`TokenizerError`]; an unknown pre-tokenizer is an error naming it, never a fallback.

mod bpe;
mod chat;
mod chat_json;
mod hash;
mod pretok;
mod special;
mod spm;
mod stream;
mod unicode;
mod unicode_data;
mod vocab;
mod wpm;

use std::borrow::Cow;

use crate::model_file::GgufHeader;

pub use chat::{ChatMessage, ChatTemplate, GEMMA_FALLBACK_TEMPLATE, TemplateError};
pub use stream::StreamDecoder;

use pretok::{Class, Cpts, Prefix, Step};
use special::{Fragment, SpecialTrie};
use unicode::{ByteMap, flags};
use vocab::{ModelKind, Vocab, attr};

/// Errors building or using a tokenizer.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("the model file has no tokenizer metadata key {0:?}")]
    MissingKey(&'static str),
    #[error("tokenizer metadata {key:?} has type {found}, expected {expected}")]
    WrongType {
        key: &'static str,
        expected: &'static str,
        found: &'static str,
    },
    #[error("tokenizer metadata {key:?} has {len} entries, the vocabulary has {expected}")]
    ArrayTooShort {
        key: &'static str,
        len: usize,
        expected: usize,
    },
    #[error("bad vocabulary size {0}")]
    BadVocabSize(usize),
    #[error("the model file has no vocabulary (tokenizer.ggml.model = {0:?})")]
    NoVocab(String),
    #[error(
        "unsupported tokenizer model {0:?} (supported: \"gpt2\" (BPE), \"llama\" (SentencePiece), \"gemma4\", \"bert\" (WordPiece))"
    )]
    UnsupportedModel(String),
    #[error(
        "unknown BPE pre-tokenizer {0:?} (tokenizer.ggml.pre); see `engine::tokenizer::SUPPORTED_PRE_TOKENIZERS`"
    )]
    UnknownPreTokenizer(String),
    #[error("BPE vocabulary without merges: tokenizer.ggml.merges is missing")]
    MissingMerges,
    #[error("token id {id} is out of range (vocabulary of {n} tokens)")]
    BadTokenId { id: u32, n: usize },
    #[error("the vocabulary has no token for byte 0x{0:02X} (byte fallback impossible)")]
    NoByteToken(u8),
    #[error("the model asks for a {0} token but defines none")]
    MissingSpecialToken(&'static str),
}

/// Every `tokenizer.ggml.pre` value a BPE vocabulary may name.
pub const SUPPORTED_PRE_TOKENIZERS: &[&str] = &[
    "default",
    "llama3",
    "llama-v3",
    "llama-bpe",
    "falcon3",
    "falcon-h1",
    "pixtral",
    "midm-2.0",
    "lfm2",
    "dbrx",
    "smaug-bpe",
    "deepseek-llm",
    "deepseek-coder",
    "falcon",
    "mpt",
    "starcoder",
    "refact",
    "command-r",
    "smollm",
    "codeshell",
    "exaone",
    "minerva-7b",
    "mellum2",
    "gpt-2",
    "phi-2",
    "olmo",
    "jais",
    "trillion",
    "granite-docling",
    "gigachat",
    "exaone4",
    "a.x-4.0",
    "mellum",
    "qwen2",
    "deepseek-r1-qwen",
    "kormo",
    "f2llmv2",
    "stablelm2",
    "hunyuan",
    "megrez",
    "solar-open",
    "qwen35",
    "poro-chat",
    "bloom",
    "gpt3-finnish",
    "viking",
    "gemma4",
];

/// Pre-tokenizer steps for `pre`, and whether whole words found in the vocabulary skip
/// merging.
fn pre_tokenizer(pre: &str) -> Result<(Vec<Step>, bool), TokenizerError> {
    use Step::*;
    let gpt2_digits = vec![Single(Class::Number), Gpt2];
    Ok(match pre {
        "default" => (
            vec![
                Run(Class::PunctDefault),
                Gpt2,
                Run(Class::Number),
                ThreeDigits,
            ],
            false,
        ),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0"
        | "lfm2" => (vec![Llama3 { max_digits: 3 }], true),
        "dbrx" | "smaug-bpe" => (vec![Llama3 { max_digits: 3 }], false),
        "deepseek-llm" => (
            vec![
                Single(Class::CrLf),
                PrefixedRun(Prefix::Space, Class::DeepseekLatin),
                PrefixedRun(Prefix::Space, Class::DeepseekPunct),
                TrailingSpace,
                Run(Class::DeepseekCjk),
                Run(Class::Number),
            ],
            false,
        ),
        "deepseek-coder" => (
            vec![
                Single(Class::CrLf),
                PrefixedRun(Prefix::Space, Class::Letter),
                PrefixedRun(Prefix::Space, Class::Punct),
                Run(Class::DeepseekCjk),
                Single(Class::Number),
            ],
            false,
        ),
        "falcon" => (vec![Run(Class::PunctFalcon), Gpt2, ThreeDigits], false),
        "starcoder" | "refact" | "command-r" | "smollm" | "codeshell" | "exaone" | "minerva-7b"
        | "mellum2" => (gpt2_digits, false),
        "mpt" | "gpt-2" | "phi-2" | "olmo" | "jais" | "trillion" | "granite-docling"
        | "gigachat" | "exaone4" | "a.x-4.0" | "mellum" => (vec![Gpt2], false),
        "qwen2" | "deepseek-r1-qwen" | "kormo" | "f2llmv2" | "stablelm2" | "hunyuan" | "megrez"
        | "solar-open" => (vec![Llama3 { max_digits: 1 }], false),
        "qwen35" => (vec![Qwen35], false),
        "poro-chat" | "bloom" | "gpt3-finnish" => {
            (vec![PrefixedRun(Prefix::Blank, Class::BloomWord)], false)
        }
        "viking" => (
            vec![
                PrefixedRun(Prefix::Blank, Class::BloomWord),
                Single(Class::Number),
            ],
            false,
        ),
        "gemma4" => (vec![Newlines], false),
        other => return Err(TokenizerError::UnknownPreTokenizer(other.to_owned())),
    })
}

enum Algo {
    Spm,
    Bpe {
        bpe: Box<bpe::Bpe>,
        steps: Vec<Step>,
    },
    Wpm,
}

/// A tokenizer built from GGUF metadata.
pub struct Tokenizer {
    vocab: Vocab,
    algo: Algo,
    trie: SpecialTrie,
    /// Bytes each token renders to (special tokens as their text).
    pieces: Vec<Box<[u8]>>,
}

fn render_piece(vocab: &Vocab, t: &vocab::TokenData) -> Vec<u8> {
    if t.attr & (attr::SPECIAL | attr::USER_DEFINED) != 0 {
        return t.text.as_bytes().to_vec();
    }
    if t.attr & attr::BYTE != 0 {
        let hex = t.text.get(3..5).unwrap_or("");
        return vec![u8::from_str_radix(hex, 16).unwrap_or(0)];
    }
    if t.attr & attr::NORMAL == 0 {
        return Vec::new();
    }
    if vocab.kind != ModelKind::Bpe || vocab.escape_whitespace {
        return t.text.replace('\u{2581}', " ").into_bytes();
    }
    // Byte-level BPE: map the stand-in characters back to bytes.
    let map = ByteMap::get();
    let mut out = Vec::with_capacity(t.text.len());
    for c in t.text.chars() {
        match map.to_byte(c) {
            Some(b) => out.push(b),
            None => {
                // Same marker llama.cpp writes for a character outside the byte alphabet.
                out.extend_from_slice(b"[UNK_BYTE_0x");
                for b in c.encode_utf8(&mut [0; 4]).bytes() {
                    out.extend_from_slice(format!("{b:02x}").as_bytes());
                }
                out.extend_from_slice(t.text.as_bytes());
                out.push(b']');
            }
        }
    }
    out
}

impl Tokenizer {
    /// Build the tokenizer a GGUF file describes.
    pub fn from_gguf(header: &GgufHeader) -> Result<Tokenizer, TokenizerError> {
        let model = match header.get("tokenizer.ggml.model") {
            None => return Err(TokenizerError::MissingKey("tokenizer.ggml.model")),
            Some(v) => v.as_str().ok_or(TokenizerError::WrongType {
                key: "tokenizer.ggml.model",
                expected: "string",
                found: v.type_name(),
            })?,
        };
        let pre = match header.get("tokenizer.ggml.pre") {
            None => None,
            Some(v) => Some(v.as_str().ok_or(TokenizerError::WrongType {
                key: "tokenizer.ggml.pre",
                expected: "string",
                found: v.type_name(),
            })?),
        };
        let (kind, pre_name) = match model {
            "llama" => (ModelKind::Spm, pre.unwrap_or("default")),
            "bert" => (ModelKind::Wpm, pre.unwrap_or("default")),
            "gemma4" => (ModelKind::Bpe, "gemma4"),
            "gpt2" => match pre {
                Some(p) => (ModelKind::Bpe, p),
                None => {
                    tracing::warn!(
                        "BPE vocabulary without tokenizer.ggml.pre: using the \"default\" pre-tokenizer"
                    );
                    (ModelKind::Bpe, "default")
                }
            },
            "no_vocab" | "none" => return Err(TokenizerError::NoVocab(model.to_owned())),
            other => return Err(TokenizerError::UnsupportedModel(other.to_owned())),
        };
        // Resolve the pre-tokenizer before the (large) vocabulary is read.
        let bpe_pre = if kind == ModelKind::Bpe {
            Some(pre_tokenizer(pre_name)?)
        } else {
            None
        };
        let vocab = Vocab::load(header, kind, model, pre_name)?;
        let algo = match (kind, bpe_pre) {
            (ModelKind::Spm, _) => Algo::Spm,
            (ModelKind::Wpm, _) => Algo::Wpm,
            (ModelKind::Bpe, pre) => {
                let (steps, ignore_merges) = pre.unwrap_or((vec![Step::Gpt2], false));
                let bpe = bpe::Bpe::load(header, &vocab, model != "gemma4", ignore_merges)?;
                Algo::Bpe {
                    bpe: Box::new(bpe),
                    steps,
                }
            }
        };
        let trie = SpecialTrie::build(&vocab);
        let pieces = vocab
            .tokens
            .iter()
            .map(|t| render_piece(&vocab, t).into_boxed_slice())
            .collect();
        Ok(Tokenizer {
            vocab,
            algo,
            trie,
            pieces,
        })
    }

    /// Token ids for `text`. `add_special` adds BOS/EOS as the model's metadata asks;
    /// `parse_special` lets control tokens written in the text (`<|im_start|>`) become their
    /// ids (user-defined tokens are always recognised).
    pub fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        let v = &self.vocab;
        let frags = special::partition(v, &self.trie, text, parse_special);
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        let bos = |out: &mut Vec<u32>| -> Result<(), TokenizerError> {
            out.push(v.bos.ok_or(TokenizerError::MissingSpecialToken("BOS"))?);
            Ok(())
        };
        match &self.algo {
            Algo::Spm => {
                if add_special && v.add_bos {
                    bos(&mut out)?;
                }
                let mut scratch = spm::Scratch::default();
                let mut prev_special = true;
                for f in &frags {
                    match *f {
                        Fragment::Token(id) => {
                            out.push(id);
                            prev_special = true;
                        }
                        Fragment::Text(a, b) => {
                            let raw = text.get(a..b).unwrap_or("");
                            let prefixed: Cow<'_, str> = if v.add_space_prefix && prev_special {
                                format!(" {raw}").into()
                            } else {
                                raw.into()
                            };
                            let escaped = prefixed.replace(' ', "\u{2581}");
                            spm::encode(v, &escaped, &mut scratch, &mut out)?;
                            prev_special = false;
                        }
                    }
                }
            }
            Algo::Bpe { bpe, steps } => {
                if add_special && v.add_bos {
                    bos(&mut out)?;
                }
                let mut scratch = bpe::Scratch::default();
                let mut cache = bpe::WordCache::default();
                let mut cpts = Vec::new();
                let mut fl = Vec::new();
                let mut offs = Vec::new();
                for f in &frags {
                    match *f {
                        Fragment::Token(id) => out.push(id),
                        Fragment::Text(a, b) => {
                            let raw = text.get(a..b).unwrap_or("");
                            let escaped: Cow<'_, str> = if v.escape_whitespace {
                                raw.replace(' ', "\u{2581}").into()
                            } else {
                                raw.into()
                            };
                            cpts.clear();
                            fl.clear();
                            offs.clear();
                            for (i, c) in escaped.char_indices() {
                                cpts.push(c as u32);
                                fl.push(flags(c as u32));
                                offs.push(i);
                            }
                            offs.push(escaped.len());
                            let lens = pretok::split(
                                &Cpts {
                                    cpt: &cpts,
                                    flags: &fl,
                                },
                                steps,
                            );
                            let mut at = 0;
                            for len in lens {
                                let (s, e) = (
                                    offs.get(at).copied().unwrap_or(0),
                                    offs.get(at + len).copied().unwrap_or(0),
                                );
                                at += len;
                                if let Some(word) = escaped.get(s..e) {
                                    cache.encode(bpe, v, word, &mut scratch, &mut out);
                                }
                            }
                        }
                    }
                }
            }
            Algo::Wpm => {
                if add_special {
                    bos(&mut out)?;
                }
                for f in &frags {
                    match *f {
                        Fragment::Token(id) => out.push(id),
                        Fragment::Text(a, b) => {
                            wpm::encode(v, text.get(a..b).unwrap_or(""), &mut out)
                        }
                    }
                }
                if add_special {
                    out.push(v.sep.ok_or(TokenizerError::MissingSpecialToken("SEP"))?);
                }
                return Ok(out);
            }
        }
        if add_special && v.add_eos {
            out.push(v.eos.ok_or(TokenizerError::MissingSpecialToken("EOS"))?);
        }
        Ok(out)
    }

    /// The bytes token `id` renders to. Control tokens render as their text; byte tokens as
    /// their byte (which may be part of a multi-byte UTF-8 character).
    pub fn token_to_piece(&self, id: u32) -> Result<&[u8], TokenizerError> {
        self.pieces
            .get(id as usize)
            .map(|p| &p[..])
            .ok_or(TokenizerError::BadTokenId {
                id,
                n: self.pieces.len(),
            })
    }

    /// Concatenated bytes of `ids`; control tokens are skipped when `skip_special` is set.
    pub fn decode_bytes(&self, ids: &[u32], skip_special: bool) -> Result<Vec<u8>, TokenizerError> {
        let mut out = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            if skip_special && self.is_special(id) {
                continue;
            }
            out.extend_from_slice(self.token_to_piece(id)?);
        }
        Ok(out)
    }

    /// Text of `ids`, special tokens included as their text. Bytes that do not form valid
    /// UTF-8 become U+FFFD, exactly as [`String::from_utf8_lossy`] replaces them. No space is
    /// stripped or cleaned up, so `decode(encode(x)) == x` for every vocabulary that does not
    /// add a space prefix.
    pub fn decode(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        Ok(String::from_utf8_lossy(&self.decode_bytes(ids, false)?).into_owned())
    }

    /// Like [`Tokenizer::decode`], but control and unknown tokens render as nothing.
    pub fn decode_skip_special(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        Ok(String::from_utf8_lossy(&self.decode_bytes(ids, true)?).into_owned())
    }

    /// Beginning-of-sequence token, if the vocabulary has one.
    pub fn bos_id(&self) -> Option<u32> {
        self.vocab.bos
    }
    /// End-of-sequence token, if the vocabulary has one.
    pub fn eos_id(&self) -> Option<u32> {
        self.vocab.eos
    }
    /// Padding token, if the vocabulary has one.
    pub fn pad_id(&self) -> Option<u32> {
        self.vocab.pad
    }
    /// End-of-turn token (`<|im_end|>`, `<end_of_turn>`, `<|eot_id|>` ...), if detected.
    pub fn eot_id(&self) -> Option<u32> {
        self.vocab.eot
    }
    /// Does generation stop at `id`? (EOS, end-of-turn, end-of-message, FIM pad/sep ...)
    pub fn is_eog(&self, id: u32) -> bool {
        self.vocab.eog.contains(&id)
    }
    /// All end-of-generation tokens, ascending.
    pub fn eog_ids(&self) -> Vec<u32> {
        self.vocab.eog.iter().copied().collect()
    }
    /// Is `id` a control or unknown token (rendered only on request)?
    pub fn is_special(&self, id: u32) -> bool {
        self.vocab.attr(id) & attr::SPECIAL != 0
    }
    /// Number of tokens.
    pub fn vocab_size(&self) -> usize {
        self.vocab.tokens.len()
    }
    /// Whether `encode(.., add_special = true, ..)` prepends BOS / appends EOS.
    pub fn add_bos(&self) -> bool {
        self.vocab.add_bos
    }
    /// See [`Tokenizer::add_bos`].
    pub fn add_eos(&self) -> bool {
        self.vocab.add_eos
    }
    /// Whether SentencePiece encoding prepends a space to text at the start and after
    /// special tokens.
    pub fn add_space_prefix(&self) -> bool {
        self.vocab.add_space_prefix
    }
    /// The vocabulary text of a token (`Ġhello`, `▁hello`, `<|im_end|>`).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.vocab.tokens.get(id as usize).map(|t| t.text.as_str())
    }
    /// The id of a token given its vocabulary text.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.id(text)
    }
    /// `tokenizer.ggml.model` (`gpt2`, `llama`, ...).
    pub fn model_name(&self) -> &str {
        &self.vocab.model_name
    }
    /// The pre-tokenizer in use (`tokenizer.ggml.pre`, or `default`).
    pub fn pre_name(&self) -> &str {
        &self.vocab.pre_name
    }
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("model", &self.vocab.model_name)
            .field("pre", &self.vocab.pre_name)
            .field("vocab_size", &self.vocab.tokens.len())
            .field("bos", &self.vocab.bos)
            .field("eos", &self.vocab.eos)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::model_file::{MetaArray, MetaValue};

    fn strings(v: &[&str]) -> MetaValue {
        MetaValue::Array(MetaArray::String(
            v.iter().map(|s| (*s).to_owned()).collect(),
        ))
    }

    /// A tiny byte-level BPE vocabulary: bytes a, b, c, space (as `Ġ`), merges `a b`, `ab c`,
    /// `Ġ ab`, plus one control token.
    fn bpe_header(pre: Option<&str>, merges: bool) -> GgufHeader {
        let mut m = BTreeMap::new();
        m.insert(
            "tokenizer.ggml.model".to_owned(),
            MetaValue::String("gpt2".to_owned()),
        );
        if let Some(p) = pre {
            m.insert(
                "tokenizer.ggml.pre".to_owned(),
                MetaValue::String(p.to_owned()),
            );
        }
        m.insert(
            "tokenizer.ggml.tokens".to_owned(),
            strings(&["a", "b", "c", "Ġ", "ab", "abc", "Ġab", "<|end|>"]),
        );
        m.insert(
            "tokenizer.ggml.token_type".to_owned(),
            MetaValue::Array(MetaArray::I32(vec![1, 1, 1, 1, 1, 1, 1, 3])),
        );
        if merges {
            m.insert(
                "tokenizer.ggml.merges".to_owned(),
                strings(&["a b", "ab c", "Ġ ab"]),
            );
        }
        m.insert("tokenizer.ggml.eos_token_id".to_owned(), MetaValue::U32(7));
        GgufHeader {
            version: 3,
            metadata: m,
            tensors: Vec::new(),
            alignment: 32,
            data_offset: 0,
        }
    }

    #[test]
    fn tiny_bpe_encodes_and_decodes() {
        let t = Tokenizer::from_gguf(&bpe_header(Some("gpt-2"), true)).expect("loads");
        assert_eq!(t.encode("abc ab", false, false).expect("encode"), [5, 6]);
        assert_eq!(
            t.encode("ba<|end|>", false, true).expect("encode"),
            [1, 0, 7]
        );
        assert_eq!(t.decode(&[5, 6, 7]).expect("decode"), "abc ab<|end|>");
        assert_eq!(t.decode_skip_special(&[5, 6, 7]).expect("decode"), "abc ab");
        assert!(t.is_eog(7) && !t.is_eog(5));
        assert!(matches!(
            t.decode(&[99]),
            Err(TokenizerError::BadTokenId { id: 99, n: 8 })
        ));
    }

    #[test]
    fn unknown_pre_tokenizer_is_named() {
        let e =
            Tokenizer::from_gguf(&bpe_header(Some("klingon-v2"), true)).expect_err("unknown pre");
        assert!(matches!(e, TokenizerError::UnknownPreTokenizer(ref p) if p == "klingon-v2"));
        assert!(e.to_string().contains("\"klingon-v2\""), "{e}");
    }

    #[test]
    fn missing_merges_is_named() {
        let e = Tokenizer::from_gguf(&bpe_header(Some("gpt-2"), false)).expect_err("no merges");
        assert!(matches!(e, TokenizerError::MissingMerges), "{e}");
    }

    #[test]
    fn unsupported_model_and_missing_keys_are_named() {
        let mut h = bpe_header(Some("gpt-2"), true);
        h.metadata.insert(
            "tokenizer.ggml.model".to_owned(),
            MetaValue::String("rwkv".to_owned()),
        );
        assert!(
            matches!(Tokenizer::from_gguf(&h), Err(TokenizerError::UnsupportedModel(ref m)) if m == "rwkv")
        );
        h.metadata.remove("tokenizer.ggml.model");
        assert!(matches!(
            Tokenizer::from_gguf(&h),
            Err(TokenizerError::MissingKey("tokenizer.ggml.model"))
        ));
        let mut h = bpe_header(Some("gpt-2"), true);
        h.metadata.remove("tokenizer.ggml.tokens");
        assert!(matches!(
            Tokenizer::from_gguf(&h),
            Err(TokenizerError::MissingKey("tokenizer.ggml.tokens"))
        ));
        let mut h = bpe_header(Some("gpt-2"), true);
        h.metadata.insert(
            "tokenizer.ggml.token_type".to_owned(),
            MetaValue::Array(MetaArray::I32(vec![1])),
        );
        assert!(matches!(
            Tokenizer::from_gguf(&h),
            Err(TokenizerError::ArrayTooShort { .. })
        ));
    }

    #[test]
    fn every_listed_pre_tokenizer_resolves() {
        for p in SUPPORTED_PRE_TOKENIZERS {
            assert!(pre_tokenizer(p).is_ok(), "{p}");
        }
    }

    #[test]
    fn tiny_spm_uses_scores_and_byte_fallback() {
        let mut m = BTreeMap::new();
        m.insert(
            "tokenizer.ggml.model".to_owned(),
            MetaValue::String("llama".to_owned()),
        );
        let mut toks = vec!["<unk>", "<s>", "</s>", "▁", "a", "b", "▁a", "ab", "▁ab"];
        let bytes: Vec<String> = (0..=255u8).map(|b| format!("<0x{b:02X}>")).collect();
        toks.extend(bytes.iter().map(String::as_str));
        let mut types = vec![2, 3, 3, 1, 1, 1, 1, 1, 1];
        types.extend(std::iter::repeat_n(6, 256));
        let mut scores = vec![0.0, 0.0, 0.0, -1.0, -2.0, -2.0, -1.5, -3.0, -0.5];
        scores.extend(std::iter::repeat_n(0.0, 256));
        m.insert("tokenizer.ggml.tokens".to_owned(), strings(&toks));
        m.insert(
            "tokenizer.ggml.token_type".to_owned(),
            MetaValue::Array(MetaArray::I32(types)),
        );
        m.insert(
            "tokenizer.ggml.scores".to_owned(),
            MetaValue::Array(MetaArray::F32(scores)),
        );
        let h = GgufHeader {
            version: 3,
            metadata: m,
            tensors: Vec::new(),
            alignment: 32,
            data_offset: 0,
        };
        let t = Tokenizer::from_gguf(&h).expect("loads");
        // "ab" -> "▁ab" (space prefix); "é" is not in the vocabulary -> its two UTF-8 bytes.
        assert_eq!(t.encode("ab", true, false).expect("encode"), [1, 8]);
        assert_eq!(
            t.encode("é", false, false).expect("encode"),
            [3, 9 + 0xC3, 9 + 0xA9]
        );
        assert_eq!(t.decode(&[8, 9 + 0xC3, 9 + 0xA9]).expect("decode"), " abé");
    }
}
