//! Round trips and the streaming detokenizer on the four test models.
//!
//! * `decode(encode(x)) == x` over a corpus of code, white-space runs, CJK, emoji, escapes,
//!   invalid-looking escapes and special tokens (parsed and unparsed).
//! * `StreamDecoder`: over random id sequences (byte-fallback and partial-UTF-8 byte-level
//!   tokens included) the pieces concatenate to `decode(all)`, every piece is whole UTF-8,
//!   and text whose UTF-8 is fed one byte token at a time comes out unchanged with no
//!   replacement characters.

#![allow(clippy::expect_used)]

use std::path::PathBuf;

use engine::model_file::GgufModel;
use engine::tokenizer::{StreamDecoder, Tokenizer};

const MODELS: [&str; 4] = [
    "SmolLM2-135M-Instruct.Q4_1.gguf",
    "Qwen2.5-Coder-0.5B-Instruct.gguf",
    "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf",
    "Gemma-3-270M.Q4_K_M.gguf",
];

fn models_dir() -> PathBuf {
    match std::env::var_os("ASSAY_MODELS_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/assay/models")
        }
    }
}

fn tokenizers() -> Vec<(&'static str, Tokenizer)> {
    let mut out = Vec::new();
    for name in MODELS {
        let path = models_dir().join(name);
        if !path.exists() {
            println!(
                "SKIP {name}: not in {} (run tools/fetch-models)",
                models_dir().display()
            );
            continue;
        }
        let model = GgufModel::open(&path).expect("open model");
        out.push((
            name,
            Tokenizer::from_gguf(model.header()).expect("tokenizer"),
        ));
    }
    out
}

const CORPUS: &[&str] = &[
    "",
    "Hello world",
    " leading space and trailing space ",
    "fn main() {\n    let v: Vec<u8> = vec![0x41, 0x42];\n\tprintln!(\"{:?}\", v);\n}\n",
    "def f(x):\n\treturn {'a': x ** 2}  # comment\r\n",
    "    four spaces, then tabs\t\t\tand    runs\n\n\n\n   \n",
    "中文分词测试，这是一个句子。日本語のテキスト、한국어 문장",
    "emoji 🦙🚀👍🏽👨‍👩‍👧‍👦 flags 🇫🇷 and keycaps 1️⃣",
    "escapes \\n \\t \\u00e9 \\x00 \\\\ %s %d {} {{}} $HOME ${x} `cmd`",
    "invalid-looking: \\xff\\xfe \\ud800 \u{fffd} <0xFF> <0x0A> Ġ ▁ Ċ",
    "combining e\u{301} a\u{308} and zero\u{200b}width\u{200d}joiner",
    "RTL: مرحبا بالعالم שלום עולם",
    "numbers 1234567890 3.14159 -42 1e-9 0b1010 1,000,000",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|><|im_end|> <start_of_turn>model\nhi<end_of_turn>\n<bos><eos>",
    "<s> </s> <unk> <pad> [INST] [/INST] <<SYS>>",
    "control chars \u{1}\u{7}\u{1b}[0m \u{7f} NUL\u{0}end",
    "mixed\u{3000}ideographic space\u{a0}nbsp\u{2028}line sep",
    "'s 't 're 've 'm 'll 'd 'S 'LL contractions don't won't y'all",
];

/// What a round trip gives back: the text itself, except that SentencePiece vocabularies
/// (Gemma) write spaces as U+2581, so a literal U+2581 in the input cannot be told from a
/// space and decodes as one (the same holds in llama.cpp and in SentencePiece itself).
fn expected(tok: &Tokenizer, text: &str) -> String {
    if tok.model_name() == "llama" {
        text.replace('\u{2581}', " ")
    } else {
        text.to_owned()
    }
}

#[test]
fn decode_inverts_encode() {
    let toks = tokenizers();
    let mut checked = 0;
    for (name, tok) in &toks {
        for parse_special in [false, true] {
            for text in CORPUS {
                let ids = tok.encode(text, false, parse_special).expect("encode");
                let back = tok.decode(&ids).expect("decode");
                assert_eq!(
                    back,
                    expected(tok, text),
                    "{name} (parse_special={parse_special}): {ids:?}"
                );
                checked += 1;
            }
        }
        // With BOS/EOS added, the text comes back behind the BOS text.
        let ids = tok.encode("Hello", true, false).expect("encode");
        if tok.add_bos() {
            assert_eq!(ids.first().copied(), tok.bos_id(), "{name}");
        }
        assert_eq!(
            tok.decode_skip_special(&ids).expect("decode"),
            "Hello",
            "{name}"
        );
    }
    println!("{checked} round trips on {} models", toks.len());
}

#[test]
fn special_tokens_are_parsed_only_on_request() {
    for (name, tok) in tokenizers() {
        let marker = if name.starts_with("Gemma") {
            "<start_of_turn>"
        } else {
            "<|im_start|>"
        };
        let id = tok.token_id(marker).expect("marker token");
        let text = format!("a{marker}b");
        let parsed = tok.encode(&text, false, true).expect("encode");
        let unparsed = tok.encode(&text, false, false).expect("encode");
        assert!(parsed.contains(&id), "{name}: {parsed:?}");
        assert!(!unparsed.contains(&id), "{name}: {unparsed:?}");
        assert!(tok.is_eog(tok.eos_id().expect("eos")), "{name}");
        let eot = if name.starts_with("Gemma") {
            "<end_of_turn>"
        } else {
            "<|im_end|>"
        };
        assert!(
            tok.is_eog(tok.token_id(eot).expect("eot")),
            "{name}: {eot} must end generation"
        );
        assert!(!tok.is_eog(id), "{name}: {marker} must not end generation");
    }
}

/// xorshift64*: deterministic randomness without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn stream(tok: &Tokenizer, ids: &[u32]) -> Vec<String> {
    let mut d = StreamDecoder::new(tok);
    let mut pieces: Vec<String> = ids.iter().map(|&id| d.push(id).expect("push")).collect();
    pieces.push(d.finish());
    pieces
}

/// Ids whose piece is a single byte that is not valid UTF-8 alone (lead or continuation).
fn partial_byte_tokens(tok: &Tokenizer) -> Vec<u32> {
    (0..tok.vocab_size() as u32)
        .filter(|&id| {
            tok.token_to_piece(id)
                .is_ok_and(|p| p.len() == 1 && p[0] >= 0x80)
        })
        .collect()
}

#[test]
fn stream_pieces_concatenate_to_decode() {
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    for (name, tok) in tokenizers() {
        let partial = partial_byte_tokens(&tok);
        assert!(!partial.is_empty(), "{name}: expected single-byte tokens");
        let n = tok.vocab_size();
        for case in 0..300 {
            let len = rng.below(40);
            let ids: Vec<u32> = (0..len)
                .map(|_| match rng.below(3) {
                    0 => partial[rng.below(partial.len())],
                    _ => rng.below(n) as u32,
                })
                .collect();
            let pieces = stream(&tok, &ids);
            let whole = tok.decode(&ids).expect("decode");
            assert_eq!(pieces.concat(), whole, "{name} case {case}: {ids:?}");
        }
    }
}

#[test]
fn stream_never_splits_a_code_point() {
    let mut rng = Rng(0xC0DE_F00D_0000_0042);
    for (name, tok) in tokenizers() {
        // The token that renders as exactly byte b (byte-fallback `<0xXX>` or byte-level).
        let mut byte_tok = [None; 256];
        for id in 0..tok.vocab_size() as u32 {
            if let Ok([b]) = tok.token_to_piece(id) {
                byte_tok[*b as usize].get_or_insert(id);
            }
        }
        for text in CORPUS {
            // Real encodings, streamed: every piece is a prefix-closed part of the text.
            let ids = tok.encode(text, false, true).expect("encode");
            assert_eq!(stream(&tok, &ids).concat(), expected(&tok, text), "{name}");
            // The text's bytes as one byte token each, in random groups: nothing is lost,
            // no U+FFFD appears, and each piece ends on a character boundary of the text.
            let Some(byte_ids) = text
                .bytes()
                .map(|b| byte_tok[b as usize])
                .collect::<Option<Vec<u32>>>()
            else {
                continue;
            };
            let mut d = StreamDecoder::new(&tok);
            let mut got = String::new();
            let mut fed = 0;
            while fed < byte_ids.len() {
                let k = 1 + rng.below(4);
                for &id in byte_ids.iter().skip(fed).take(k) {
                    let piece = d.push(id).expect("push");
                    assert!(
                        !piece.contains('\u{fffd}') || text.contains('\u{fffd}'),
                        "{name}: {piece:?}"
                    );
                    got.push_str(&piece);
                    assert!(
                        text.is_char_boundary(got.len()) && text.starts_with(&got),
                        "{name}: {got:?}"
                    );
                }
                fed += k;
            }
            got.push_str(&d.finish());
            assert_eq!(got, *text, "{name}");
        }
    }
}
