//! WordPiece (`tokenizer.ggml.model = bert`): BERT normalization (lowercase, accents
//! stripped to the first code point of the canonical decomposition, control characters
//! dropped), words split at white space, punctuation and CJK ideographs, then greedy
//! longest-match with a `▁` word-start marker; a word with no full match becomes `[UNK]`.

use super::unicode::{flags, nfd_first, to_lower};
use super::vocab::Vocab;

fn is_cjk(c: u32) -> bool {
    matches!(
        c,
        0x4E00..=0x9FFF
            | 0x3400..=0x4DBF
            | 0x20000..=0x2A6DF
            | 0x2A700..=0x2B73F
            | 0x2B740..=0x2B81F
            | 0x2B920..=0x2CEAF
            | 0xF900..=0xFAFF
            | 0x2F800..=0x2FA1F
    )
}

/// Normalize and split into words.
fn words(vocab: &Vocab, text: &str) -> Vec<String> {
    let mut words = vec![String::new()];
    for ch in text.chars() {
        let mut c = ch as u32;
        if vocab.strip_accents {
            c = nfd_first(c);
        }
        let f = flags(c);
        if f.is_whitespace() {
            if words.last().is_some_and(|w| !w.is_empty()) {
                words.push(String::new());
            }
            continue;
        }
        if c == 0 || c == 0xFFFD || f.is_control() || (vocab.strip_accents && f.is_mark()) {
            continue;
        }
        let out =
            char::from_u32(if vocab.lowercase { to_lower(c) } else { c }).unwrap_or('\u{FFFD}');
        if f.is_punct() || (c < 0x7F && f.is_symbol()) || is_cjk(c) {
            if words.last().is_some_and(|w| !w.is_empty()) {
                words.push(String::new());
            }
            if let Some(w) = words.last_mut() {
                w.push(out);
            }
            words.push(String::new());
        } else if let Some(w) = words.last_mut() {
            w.push(out);
        }
    }
    words
}

/// Tokenize `text` and append to `out`.
pub fn encode(vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
    for word in words(vocab, text) {
        if word.is_empty() {
            continue;
        }
        let w = format!("\u{2581}{word}");
        let bytes = w.as_bytes();
        let before = out.len();
        let mut i = 0;
        let mut ok = true;
        while i < bytes.len() {
            let mut found = None;
            let mut j = bytes.len().min(i + vocab.max_token_len + 1);
            while j > i {
                if let Some(id) = w.get(i..j).and_then(|p| vocab.id(p)) {
                    found = Some((id, j));
                    break;
                }
                j -= 1;
            }
            match found {
                Some((id, j)) => {
                    out.push(id);
                    i = j;
                }
                None => {
                    ok = false;
                    break;
                }
            }
        }
        if !ok {
            out.truncate(before);
        }
        if out.len() == before {
            out.extend(vocab.unk);
        }
    }
}
