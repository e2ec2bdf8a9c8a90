//! The vocabulary as a GGUF file describes it: token texts, scores and types, special token
//! ids, the `add_bos`/`add_eos`/space-prefix switches, end-of-generation tokens and the
//! special-token list that is matched in raw text.
//!
//! Everything is read from `tokenizer.*` metadata alone. Where a file leaves something out,
//! the defaults and text-based detections follow llama.cpp so that the same file tokenizes
//! the same way in both engines.

use std::collections::{BTreeSet, HashMap};

use crate::model_file::{GgufHeader, MetaArray, MetaValue};

use super::TokenizerError;
use super::hash::FxBuild;

/// Token attributes (a bit set).
pub mod attr {
    pub const UNKNOWN: u32 = 1 << 0;
    pub const UNUSED: u32 = 1 << 1;
    pub const NORMAL: u32 = 1 << 2;
    pub const CONTROL: u32 = 1 << 3;
    pub const USER_DEFINED: u32 = 1 << 4;
    pub const BYTE: u32 = 1 << 5;
    pub const LSTRIP: u32 = 1 << 7;
    pub const RSTRIP: u32 = 1 << 8;
    /// Tokens that render nothing unless special tokens are requested.
    pub const SPECIAL: u32 = UNKNOWN | CONTROL;
}

/// The tokenizer algorithm named by `tokenizer.ggml.model`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelKind {
    /// SentencePiece BPE with byte fallback (`llama`).
    Spm,
    /// Byte-level BPE with merges (`gpt2`), or SPM-style BPE on raw UTF-8 (`gemma4`).
    Bpe,
    /// WordPiece (`bert`).
    Wpm,
}

/// One vocabulary entry.
#[derive(Clone, Debug)]
pub struct TokenData {
    pub text: String,
    pub score: f32,
    pub attr: u32,
}

/// The loaded vocabulary and its switches.
pub struct Vocab {
    pub kind: ModelKind,
    pub model_name: String,
    pub pre_name: String,
    pub tokens: Vec<TokenData>,
    pub text_to_id: HashMap<String, u32, FxBuild>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub unk: Option<u32>,
    pub sep: Option<u32>,
    pub pad: Option<u32>,
    pub add_bos: bool,
    pub add_eos: bool,
    pub add_space_prefix: bool,
    /// Replace spaces by U+2581 before tokenizing (SPM, and SPM-style BPE).
    pub escape_whitespace: bool,
    pub eog: BTreeSet<u32>,
    /// Control, user-defined and unknown tokens, longest text first.
    pub special: Vec<u32>,
    pub max_token_len: usize,
    /// WordPiece normalizer switches.
    pub lowercase: bool,
    pub strip_accents: bool,
}

fn get<'a>(h: &'a GgufHeader, key: &str) -> Option<&'a MetaValue> {
    h.get(key)
}

fn get_str(h: &GgufHeader, key: &'static str) -> Result<Option<String>, TokenizerError> {
    match get(h, key) {
        None => Ok(None),
        Some(MetaValue::String(s)) => Ok(Some(s.clone())),
        Some(v) => Err(TokenizerError::WrongType {
            key,
            expected: "string",
            found: v.type_name(),
        }),
    }
}

fn get_bool(h: &GgufHeader, key: &'static str) -> Result<Option<bool>, TokenizerError> {
    match get(h, key) {
        None => Ok(None),
        Some(MetaValue::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(TokenizerError::WrongType {
            key,
            expected: "bool",
            found: v.type_name(),
        }),
    }
}

fn get_id(h: &GgufHeader, key: &'static str) -> Result<Option<u64>, TokenizerError> {
    match get(h, key) {
        None => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or(TokenizerError::WrongType {
            key,
            expected: "unsigned integer",
            found: v.type_name(),
        }),
    }
}

/// A numeric metadata array widened to f64, with its length checked against `n`.
fn get_numbers(
    h: &GgufHeader,
    key: &'static str,
    n: usize,
) -> Result<Option<Vec<f64>>, TokenizerError> {
    let Some(v) = get(h, key) else {
        return Ok(None);
    };
    let wrong = || TokenizerError::WrongType {
        key,
        expected: "numeric array",
        found: v.type_name(),
    };
    let MetaValue::Array(a) = v else {
        return Err(wrong());
    };
    let out: Vec<f64> = match a {
        MetaArray::F32(x) => x.iter().map(|&v| f64::from(v)).collect(),
        MetaArray::F64(x) => x.clone(),
        MetaArray::I32(x) => x.iter().map(|&v| f64::from(v)).collect(),
        MetaArray::U32(x) => x.iter().map(|&v| f64::from(v)).collect(),
        MetaArray::I8(x) => x.iter().map(|&v| f64::from(v)).collect(),
        MetaArray::U8(x) => x.iter().map(|&v| f64::from(v)).collect(),
        MetaArray::I16(x) => x.iter().map(|&v| f64::from(v)).collect(),
        MetaArray::U16(x) => x.iter().map(|&v| f64::from(v)).collect(),
        MetaArray::I64(x) => x.iter().map(|&v| v as f64).collect(),
        MetaArray::U64(x) => x.iter().map(|&v| v as f64).collect(),
        _ => return Err(wrong()),
    };
    if out.len() < n {
        return Err(TokenizerError::ArrayTooShort {
            key,
            len: out.len(),
            expected: n,
        });
    }
    Ok(Some(out))
}

/// A string array.
pub fn get_strings<'a>(
    h: &'a GgufHeader,
    key: &'static str,
) -> Result<Option<&'a [String]>, TokenizerError> {
    match get(h, key) {
        None => Ok(None),
        Some(MetaValue::Array(MetaArray::String(v))) => Ok(Some(v)),
        Some(v) => Err(TokenizerError::WrongType {
            key,
            expected: "string array",
            found: v.type_name(),
        }),
    }
}

/// Texts that mark end-of-turn / end-of-generation tokens in the vocabularies in the wild.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];
const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
/// Fill-in-the-middle pad / repo / file-separator tokens, which also end generation.
const FIM_EOG_TEXTS: [&[&str]; 3] = [
    &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"],
    &[
        "<|fim_repo|>",
        "<|repo_name|>",
        "<fim-repo>",
        "<REPO>",
        "<reponame>",
    ],
    &["<|file_sep|>"],
];
/// Other control-looking tokens whose attribute llama.cpp forces to CONTROL.
const CONTROL_TEXTS: &[&str] = &[
    "<|eom_id|>",
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];

impl Vocab {
    /// Read the vocabulary from GGUF metadata. `pre_name` has already been resolved by the
    /// caller (it decides BPE switches such as `add_bos`).
    pub fn load(
        h: &GgufHeader,
        kind: ModelKind,
        model_name: &str,
        pre_name: &str,
    ) -> Result<Vocab, TokenizerError> {
        let texts = get_strings(h, "tokenizer.ggml.tokens")?
            .ok_or(TokenizerError::MissingKey("tokenizer.ggml.tokens"))?;
        let n = texts.len();
        if n == 0 || n > u32::MAX as usize / 2 {
            return Err(TokenizerError::BadVocabSize(n));
        }
        let scores = get_numbers(h, "tokenizer.ggml.scores", n)?;
        let types = get_numbers(h, "tokenizer.ggml.token_type", n)?;

        let mut tokens = Vec::with_capacity(n);
        let mut text_to_id = HashMap::with_capacity_and_hasher(n, FxBuild::default());
        let mut max_token_len = 0;
        for (i, t) in texts.iter().enumerate() {
            let text = if t.is_empty() {
                format!("[EMPTY_{i}]")
            } else {
                t.clone()
            };
            max_token_len = max_token_len.max(text.len());
            let attr = match types.as_ref().and_then(|v| v.get(i)).map(|&x| x as i64) {
                None | Some(1) => attr::NORMAL,
                Some(2) => attr::UNKNOWN,
                Some(3) => attr::CONTROL,
                Some(4) => attr::USER_DEFINED,
                Some(5) => attr::UNUSED,
                Some(6) => attr::BYTE,
                Some(_) => 0,
            };
            let score = scores
                .as_ref()
                .and_then(|v| v.get(i))
                .map_or(0.0, |&s| s as f32);
            text_to_id.insert(text.clone(), i as u32);
            tokens.push(TokenData { text, score, attr });
        }

        // Defaults per model kind, then the switches the file states.
        let (mut bos, mut eos, mut unk, mut sep, mut pad) = match kind {
            ModelKind::Spm => (Some(1), Some(2), Some(0), None, None),
            ModelKind::Wpm => (Some(101), None, Some(100), Some(102), Some(0)),
            ModelKind::Bpe if model_name == "gemma4" => (None, None, None, None, None),
            ModelKind::Bpe => (Some(11), Some(11), None, None, None),
        };
        let (mut add_bos, mut add_eos, mut add_space_prefix) = match kind {
            ModelKind::Spm => (true, false, true),
            ModelKind::Wpm => (true, false, false),
            ModelKind::Bpe => (
                matches!(
                    pre_name,
                    "llama3"
                        | "llama-v3"
                        | "llama-bpe"
                        | "falcon3"
                        | "falcon-h1"
                        | "pixtral"
                        | "midm-2.0"
                        | "lfm2"
                        | "tekken"
                        | "chameleon"
                ),
                false,
                false,
            ),
        };
        let escape_whitespace =
            kind == ModelKind::Spm || (kind == ModelKind::Bpe && model_name == "gemma4");
        let valid = |id: Option<u64>| id.filter(|&i| (i as usize) < n).map(|i| i as u32);
        for slot in [&mut bos, &mut eos, &mut unk, &mut sep, &mut pad] {
            if slot.is_some_and(|i| i as usize >= n) {
                *slot = None;
            }
        }
        let keyed = |key: &'static str, cur: Option<u32>| -> Result<Option<u32>, TokenizerError> {
            Ok(match get_id(h, key)? {
                Some(id) => valid(Some(id)).or(cur),
                None => cur,
            })
        };
        bos = keyed("tokenizer.ggml.bos_token_id", bos)?;
        eos = keyed("tokenizer.ggml.eos_token_id", eos)?;
        let mut eot = keyed("tokenizer.ggml.eot_token_id", None)?;
        let mut eom = keyed("tokenizer.ggml.eom_token_id", None)?;
        unk = keyed("tokenizer.ggml.unknown_token_id", unk)?;
        sep = keyed("tokenizer.ggml.seperator_token_id", sep)?;
        pad = keyed("tokenizer.ggml.padding_token_id", pad)?;
        let mut fim = [
            keyed("tokenizer.ggml.fim_pad_token_id", None)?,
            keyed("tokenizer.ggml.fim_rep_token_id", None)?,
            keyed("tokenizer.ggml.fim_sep_token_id", None)?,
        ];
        if let Some(b) = get_bool(h, "tokenizer.ggml.add_space_prefix")? {
            add_space_prefix = b;
        }
        if let Some(b) = get_bool(h, "tokenizer.ggml.add_bos_token")? {
            add_bos = b;
        }
        if let Some(b) = get_bool(h, "tokenizer.ggml.add_eos_token")? {
            add_eos = b;
        }
        if model_name == "gemma4" {
            add_bos = true;
        }
        let lowercase = get_bool(h, "tokenizer.ggml.normalizer.lowercase")?.unwrap_or(true);
        let strip_accents =
            get_bool(h, "tokenizer.ggml.normalizer.strip_accents")?.unwrap_or(lowercase);

        let id_of = |t: &str| text_to_id.get(t).copied();
        let mut force_control = Vec::new();
        if eot.is_none() {
            eot = EOT_TEXTS.iter().filter_map(|t| id_of(t)).min();
            force_control.extend(eot);
        }
        if eom.is_none() {
            eom = id_of("<|eom_id|>");
        }
        for (slot, texts) in fim.iter_mut().zip(FIM_EOG_TEXTS) {
            if slot.is_none() {
                *slot = texts.iter().find_map(|t| id_of(t));
                force_control.extend(*slot);
            }
        }
        force_control.extend(CONTROL_TEXTS.iter().filter_map(|t| id_of(t)));
        let mut eog: BTreeSet<u32> = fim.iter().flatten().copied().collect();
        for t in EOG_TEXTS {
            if let Some(id) = id_of(t) {
                eog.insert(id);
                force_control.push(id);
            }
        }
        for id in force_control {
            if let Some(t) = tokens.get_mut(id as usize) {
                t.attr |= attr::CONTROL;
            }
        }
        for t in tokens.iter_mut() {
            if t.attr & attr::CONTROL != 0 && t.text.contains("unused") {
                t.attr |= attr::UNUSED;
            }
            if matches!(
                t.text.as_str(),
                "<|channel|>" | "<|message|>" | "<|start|>" | "<|constrain|>"
            ) {
                t.attr = attr::USER_DEFINED;
            }
        }
        eog.extend(eos);
        eog.extend(eot);
        eog.extend(eom);
        // Harmony-style vocabularies: `<|end|>` ends a message, not the generation.
        let has = |eog: &BTreeSet<u32>, t: &str| id_of(t).is_some_and(|id| eog.contains(&id));
        if (has(&eog, "<|return|>") && has(&eog, "<|call|>")
            || has(&eog, "<|calls|>") && has(&eog, "<|flush|>"))
            && has(&eog, "<|end|>")
        {
            if let Some(id) = id_of("<|end|>") {
                eog.remove(&id);
                if let Some(t) = tokens.get_mut(id as usize) {
                    t.attr = attr::USER_DEFINED;
                }
            }
        }
        // Gemma 4 / PLaMo: `</s>` is an ordinary token there.
        if (has(&eog, "<|tool_response>") || has(&eog, "<|plamo:eos|>")) && has(&eog, "</s>") {
            if let Some(id) = id_of("</s>") {
                eog.remove(&id);
                if let Some(t) = tokens.get_mut(id as usize) {
                    t.attr = attr::NORMAL;
                }
            }
        }

        let mut special: Vec<u32> = (0..n as u32)
            .filter(|&i| {
                tokens.get(i as usize).is_some_and(|t| {
                    t.attr & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0
                })
            })
            .collect();
        special.sort_by_key(|&i| {
            std::cmp::Reverse(tokens.get(i as usize).map_or(0, |t| t.text.len()))
        });

        // Phi-3 GGUFs strip white space to the right of their special tokens.
        let general_name = get_str(h, "general.name")?
            .unwrap_or_default()
            .to_lowercase();
        if general_name.contains("phi-3") || general_name.contains("phi3") {
            for &id in &special {
                if let Some(t) = tokens.get_mut(id as usize) {
                    t.attr |= attr::RSTRIP;
                }
            }
            for (text, on) in [
                ("</s>", true),
                ("<unk>", false),
                ("<s>", false),
                ("<|endoftext|>", false),
            ] {
                if let Some(t) = id_of(text).and_then(|id| tokens.get_mut(id as usize)) {
                    t.attr = if on {
                        t.attr | attr::RSTRIP
                    } else {
                        t.attr & !attr::RSTRIP
                    };
                }
            }
        }

        Ok(Vocab {
            kind,
            model_name: model_name.to_owned(),
            pre_name: pre_name.to_owned(),
            tokens,
            text_to_id,
            bos,
            eos,
            eot,
            unk,
            sep,
            pad,
            add_bos,
            add_eos,
            add_space_prefix,
            escape_whitespace,
            eog,
            special,
            max_token_len,
            lowercase,
            strip_accents,
        })
    }

    /// Token id of an exact text.
    #[inline]
    pub fn id(&self, text: &str) -> Option<u32> {
        self.text_to_id.get(text).copied()
    }

    /// Attributes of a token (0 for an id out of range).
    #[inline]
    pub fn attr(&self, id: u32) -> u32 {
        self.tokens.get(id as usize).map_or(0, |t| t.attr)
    }

    /// The token for one byte in SPM-style vocabularies: `<0xXX>`, else the byte itself.
    pub fn byte_token(&self, b: u8) -> Option<u32> {
        self.id(&format!("<0x{b:02X}>")).or_else(|| {
            if b.is_ascii() {
                let s = [b];
                std::str::from_utf8(&s).ok().and_then(|s| self.id(s))
            } else {
                None
            }
        })
    }
}
