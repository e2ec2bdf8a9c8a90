//! Fuzz target: the tokenizers of the small test models on arbitrary text and arbitrary
//! token ids.
//!
//! The first byte picks the model; the rest is the input, read twice:
//!
//! * as text (lossy UTF-8): `encode` with and without special-token parsing, and with
//!   BOS/EOS added, never panics; without BOS/EOS, `decode(encode(x)) == x` (the promise in
//!   `Tokenizer::decode`'s docs and `engine/tests/tokenizer_roundtrip.rs`: for vocabularies
//!   that add no space prefix, and with U+2581 reading back as a space for SentencePiece
//!   ones), except that bytes a byte-level BPE vocabulary has no token for are dropped (see
//!   [`unencodable`]); the streaming detokenizer over those ids concatenates to the same
//!   text.
//! * as little-endian `u32` token ids (every other one folded into the vocabulary, the rest
//!   raw, so both in-range and out-of-range ids occur): `decode` fails exactly when an id is
//!   out of range, and for in-range ids `StreamDecoder` pieces concatenate to `decode`
//!   (its module docs' promise), and `decode_skip_special` never panics.

#![no_main]

#[path = "common/models.rs"]
mod models;

use std::sync::OnceLock;

use engine::tokenizer::{StreamDecoder, Tokenizer};
use libfuzzer_sys::fuzz_target;

struct Tok {
    name: &'static str,
    tok: Tokenizer,
    /// Bytes the vocabulary cannot encode (see [`unencodable`]).
    dropped: [bool; 256],
}

fn tokenizers() -> &'static [Tok] {
    static TOKS: OnceLock<Vec<Tok>> = OnceLock::new();
    TOKS.get_or_init(|| {
        models::headers()
            .into_iter()
            .map(|(name, h)| match Tokenizer::from_gguf(&h) {
                Ok(tok) => {
                    let dropped = unencodable(&tok);
                    let n = dropped.iter().filter(|&&d| d).count();
                    if n > 0 {
                        eprintln!("fuzz target: {name} has no token for {n} byte values");
                    }
                    Tok { name, tok, dropped }
                }
                Err(e) => panic!("fuzz target: tokenizer of {name} does not load: {e}"),
            })
            .collect()
    })
}

/// GPT-2's printable stand-in character of each byte (`bytes_to_unicode`).
fn gpt2_stand_in(b: u8) -> char {
    let direct = |x: u8| (b'!'..=b'~').contains(&x) || (0xA1..=0xAC).contains(&x) || x >= 0xAE;
    if direct(b) {
        return char::from(b);
    }
    let k = (0..b).filter(|&x| !direct(x)).count() as u32;
    char::from_u32(256 + k).unwrap_or('?')
}

/// Bytes a byte-level BPE vocabulary has no single-byte token for. The engine, like
/// llama.cpp (`llm_tokenizer_bpe_session::tokenize`: a symbol missing from the vocabulary
/// is spelled with the single-character tokens of its bytes, and bytes without one are
/// skipped), drops them silently, so they cannot round-trip. SmolLM2's vocabulary lacks 21 of the 256 (0x04, 0x06, 0x13, 0x14,
/// 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2, 0xF5-0xFF); Qwen2.5's lacks none.
fn unencodable(tok: &Tokenizer) -> [bool; 256] {
    let mut out = [false; 256];
    if tok.model_name() == "gpt2" {
        for b in 0..=255u8 {
            out[b as usize] = tok.token_id(&gpt2_stand_in(b).to_string()).is_none();
        }
    }
    out
}

/// What `decode(encode(text))` gives back (see `engine/tests/tokenizer_roundtrip.rs`):
/// the text, with U+2581 read back as a space by SentencePiece vocabularies and without
/// the bytes the vocabulary cannot encode.
fn expected(t: &Tok, text: &str) -> String {
    let kept: Vec<u8> = text.bytes().filter(|&b| !t.dropped[b as usize]).collect();
    let text = String::from_utf8_lossy(&kept);
    if t.tok.model_name() == "llama" {
        text.replace('\u{2581}', " ")
    } else {
        text.into_owned()
    }
}

fn stream(tok: &Tokenizer, ids: &[u32]) -> String {
    let mut d = StreamDecoder::new(tok);
    let mut out = String::new();
    for &id in ids {
        match d.push(id) {
            Ok(s) => out.push_str(&s),
            Err(e) => panic!("StreamDecoder refused in-range id {id}: {e}"),
        }
    }
    out.push_str(&d.finish());
    out
}

fn check_text(t: &Tok, text: &str) {
    let (name, tok) = (t.name, &t.tok);
    for parse_special in [false, true] {
        let ids = match tok.encode(text, false, parse_special) {
            Ok(ids) => ids,
            Err(e) => panic!("{name}: encode failed (parse_special={parse_special}): {e}"),
        };
        let n = tok.vocab_size();
        assert!(
            ids.iter().all(|&i| (i as usize) < n),
            "{name}: encode produced an id outside the vocabulary: {ids:?}"
        );
        let back = match tok.decode(&ids) {
            Ok(s) => s,
            Err(e) => panic!("{name}: decode of encode output failed: {e}"),
        };
        if !tok.add_space_prefix() {
            assert_eq!(
                back,
                expected(t, text),
                "{name}: round trip (parse_special={parse_special}) ids {ids:?}"
            );
        }
        assert_eq!(
            stream(tok, &ids),
            back,
            "{name}: StreamDecoder differs from decode"
        );
        // BOS/EOS as the metadata says: may only fail for a missing special token.
        let _ = tok.encode(text, true, parse_special);
    }
}

fn check_ids(name: &str, tok: &Tokenizer, raw: &[u8]) {
    let n = tok.vocab_size();
    let ids: Vec<u32> = raw
        .chunks_exact(4)
        .enumerate()
        .map(|(i, c)| {
            let x = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            // Half folded into the vocabulary (plus a few past its end), half raw.
            if i % 2 == 0 { x % (n as u32 + 8) } else { x }
        })
        .collect();
    let in_range = ids.iter().all(|&i| (i as usize) < n);
    match tok.decode(&ids) {
        Ok(s) => {
            assert!(
                in_range,
                "{name}: decode accepted an out-of-range id {ids:?}"
            );
            assert_eq!(stream(tok, &ids), s, "{name}: StreamDecoder differs");
        }
        Err(_) => assert!(!in_range, "{name}: decode refused in-range ids {ids:?}"),
    }
    let _ = tok.decode_skip_special(&ids);
    for &id in ids.iter().take(64) {
        let _ = tok.token_to_piece(id);
        let _ = tok.token_text(id);
        let _ = tok.is_special(id);
        let _ = tok.is_eog(id);
    }
    // The in-range part alone always decodes.
    let valid: Vec<u32> = ids.iter().copied().filter(|&i| (i as usize) < n).collect();
    match tok.decode(&valid) {
        Ok(s) => assert_eq!(stream(tok, &valid), s, "{name}: StreamDecoder differs"),
        Err(e) => panic!("{name}: decode refused in-range ids: {e}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let toks = tokenizers();
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let t = &toks[sel as usize % toks.len()];
    let text = String::from_utf8_lossy(rest);
    check_text(t, &text);
    check_ids(t.name, &t.tok, rest);
});
