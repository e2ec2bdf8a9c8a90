//! Streaming detokenizer: feed generated ids one at a time, get text pieces that never split
//! a UTF-8 code point and that, concatenated, equal [`Tokenizer::decode`] of the whole
//! sequence.
//!
//! Bytes are held back only while they could still become a valid character; a byte that
//! can no longer do so becomes U+FFFD at once, exactly where `String::from_utf8_lossy` puts
//! one, so the concatenation matches the whole-sequence decode byte for byte.

use super::{Tokenizer, TokenizerError};

/// Incremental decoder bound to one tokenizer.
pub struct StreamDecoder<'a> {
    tok: &'a Tokenizer,
    pending: Vec<u8>,
}

impl<'a> StreamDecoder<'a> {
    pub fn new(tok: &'a Tokenizer) -> StreamDecoder<'a> {
        StreamDecoder {
            tok,
            pending: Vec::new(),
        }
    }

    /// Add one token; returns the text that is now final (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String, TokenizerError> {
        self.pending.extend_from_slice(self.tok.token_to_piece(id)?);
        Ok(self.drain(false))
    }

    /// Bytes held back waiting for the rest of a character.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// End of the sequence: whatever is held back (an incomplete character becomes U+FFFD).
    pub fn finish(mut self) -> String {
        self.drain(true)
    }

    fn drain(&mut self, last: bool) -> String {
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, tail) = rest.split_at(e.valid_up_to());
                    out.push_str(std::str::from_utf8(valid).unwrap_or(""));
                    match e.error_len() {
                        Some(n) => {
                            out.push('\u{FFFD}');
                            rest = tail.get(n..).unwrap_or(&[]);
                        }
                        None if last => {
                            out.push('\u{FFFD}');
                            rest = &[];
                            break;
                        }
                        None => {
                            rest = tail;
                            break;
                        }
                    }
                }
            }
        }
        self.pending = rest.to_vec();
        out
    }
}
