//! Byte-pair encoding over pre-tokenized words, with merges ranked by their order in
//! `tokenizer.ggml.merges`.
//!
//! Merge strings are interned once at load into symbol ids, so the inner loop works on
//! `(u32, u32) -> (rank, merged symbol)` lookups and never builds strings. In byte-level mode
//! (GPT-2 style vocabularies) every input byte starts as the symbol of its printable stand-in
//! character; in raw mode (Gemma 4 style) every UTF-8 character starts as a symbol, and
//! symbols that fall out of the vocabulary are spelled with `<0xXX>` byte tokens.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use super::TokenizerError;
use super::hash::FxBuild;
use super::unicode::ByteMap;
use super::vocab::{Vocab, get_strings};

const NO_SYM: u32 = u32::MAX;
const NO_TOKEN: u32 = u32::MAX;

/// The merge table and symbol space of one BPE vocabulary.
pub struct Bpe {
    /// true: GPT-2 byte-level alphabet; false: raw UTF-8 characters.
    byte_level: bool,
    /// Whole words found in the vocabulary skip merging (LLaMA-3 style).
    pub ignore_merges: bool,
    /// (left symbol, right symbol) -> (rank, merged symbol).
    pairs: HashMap<u64, (u32, u32), FxBuild>,
    sym_text: Vec<String>,
    sym_token: Vec<u32>,
    /// Symbol of each byte's stand-in character (byte-level mode).
    byte_sym: [u32; 256],
    /// Symbol of each single character that appears in the merges (raw mode).
    char_sym: HashMap<char, u32, FxBuild>,
    /// Raw bytes of every token whose text is in the byte-level alphabet (for
    /// `ignore_merges`).
    raw_to_id: HashMap<Box<[u8]>, u32, FxBuild>,
}

#[derive(Clone, Copy)]
struct Sym {
    sid: u32,
    start: u32,
    end: u32,
    prev: i32,
    next: i32,
}

/// Reusable scratch space for encoding words.
#[derive(Default)]
pub struct Scratch {
    syms: Vec<Sym>,
    heap: BinaryHeap<Reverse<(u32, u32, u32, u32)>>,
    buf: String,
}

impl Bpe {
    /// Build from the vocabulary and `tokenizer.ggml.merges`.
    pub fn load(
        h: &crate::model_file::GgufHeader,
        vocab: &Vocab,
        byte_level: bool,
        ignore_merges: bool,
    ) -> Result<Bpe, TokenizerError> {
        let merges =
            get_strings(h, "tokenizer.ggml.merges")?.ok_or(TokenizerError::MissingMerges)?;
        let mut ids: HashMap<String, u32, FxBuild> = HashMap::default();
        let mut sym_text: Vec<String> = Vec::new();
        let mut intern = |s: &str, sym_text: &mut Vec<String>| -> u32 {
            if let Some(&i) = ids.get(s) {
                return i;
            }
            let i = sym_text.len() as u32;
            ids.insert(s.to_owned(), i);
            sym_text.push(s.to_owned());
            i
        };
        let map = ByteMap::get();
        let mut byte_sym = [NO_SYM; 256];
        if byte_level {
            for (b, slot) in byte_sym.iter_mut().enumerate() {
                *slot = intern(map.to_char[b].encode_utf8(&mut [0; 4]), &mut sym_text);
            }
        }
        let mut pairs: HashMap<u64, (u32, u32), FxBuild> = HashMap::default();
        pairs.reserve(merges.len());
        for (rank, m) in merges.iter().enumerate() {
            // Split at the first space after the first character (a merge part may be " ").
            let split = m
                .char_indices()
                .skip(1)
                .find(|&(_, c)| c == ' ')
                .map(|(i, _)| i);
            let (a, b) = match split {
                Some(i) => (&m[..i], &m[i + 1..]),
                None => ("", ""),
            };
            let la = intern(a, &mut sym_text);
            let lb = intern(b, &mut sym_text);
            let merged = format!("{a}{b}");
            let lm = intern(&merged, &mut sym_text);
            pairs
                .entry(u64::from(la) << 32 | u64::from(lb))
                .or_insert((rank as u32, lm));
        }
        let sym_token = sym_text
            .iter()
            .map(|t| vocab.id(t).unwrap_or(NO_TOKEN))
            .collect();
        let mut char_sym = HashMap::default();
        if !byte_level {
            for (i, t) in sym_text.iter().enumerate() {
                let mut cs = t.chars();
                if let (Some(c), None) = (cs.next(), cs.next()) {
                    char_sym.insert(c, i as u32);
                }
            }
        }
        let mut raw_to_id = HashMap::default();
        if byte_level && ignore_merges {
            for (i, t) in vocab.tokens.iter().enumerate() {
                let raw: Option<Vec<u8>> = t.text.chars().map(|c| map.to_byte(c)).collect();
                if let Some(raw) = raw {
                    raw_to_id.insert(raw.into_boxed_slice(), i as u32);
                }
            }
        }
        Ok(Bpe {
            byte_level,
            ignore_merges,
            pairs,
            sym_text,
            sym_token,
            byte_sym,
            char_sym,
            raw_to_id,
        })
    }

    /// Encode one pre-tokenized word (raw text) and append its tokens to `out`.
    pub fn encode_word(
        &self,
        vocab: &Vocab,
        word: &str,
        scratch: &mut Scratch,
        out: &mut Vec<u32>,
    ) {
        if word.is_empty() {
            return;
        }
        if self.ignore_merges {
            let whole = if self.byte_level {
                self.raw_to_id.get(word.as_bytes()).copied()
            } else {
                vocab.id(word)
            };
            if let Some(id) = whole {
                out.push(id);
                return;
            }
        }
        // Gemma 4: a run of newlines that is itself a token is taken whole.
        if !self.byte_level && word.bytes().all(|b| b == b'\n') {
            if let Some(id) = vocab.id(word) {
                out.push(id);
                return;
            }
        }
        let syms = &mut scratch.syms;
        syms.clear();
        if self.byte_level {
            for (i, &b) in word.as_bytes().iter().enumerate() {
                syms.push(Sym {
                    sid: self.byte_sym[b as usize],
                    start: i as u32,
                    end: i as u32 + 1,
                    prev: 0,
                    next: 0,
                });
            }
        } else {
            for (i, c) in word.char_indices() {
                let sid = self.char_sym.get(&c).copied().unwrap_or(NO_SYM);
                syms.push(Sym {
                    sid,
                    start: i as u32,
                    end: (i + c.len_utf8()) as u32,
                    prev: 0,
                    next: 0,
                });
            }
        }
        let n = syms.len();
        for (i, s) in syms.iter_mut().enumerate() {
            s.prev = i as i32 - 1;
            s.next = if i + 1 == n { -1 } else { i as i32 + 1 };
        }
        let heap = &mut scratch.heap;
        heap.clear();
        for i in 1..n {
            self.push_pair(syms, heap, i - 1, i as i32);
        }
        while let Some(Reverse((_, left, lsid, rsid))) = heap.pop() {
            let l = left as usize;
            let Some(&ls) = syms.get(l) else { continue };
            if ls.sid != lsid || ls.end == ls.start || ls.next < 0 {
                continue;
            }
            let r = ls.next as usize;
            let Some(&rs) = syms.get(r) else { continue };
            if rs.sid != rsid || rs.end == rs.start {
                continue;
            }
            let key = u64::from(lsid) << 32 | u64::from(rsid);
            let Some(&(_, merged)) = self.pairs.get(&key) else {
                continue;
            };
            if let Some(s) = syms.get_mut(l) {
                s.sid = merged;
                s.end = rs.end;
                s.next = rs.next;
            }
            if let Some(s) = syms.get_mut(r) {
                s.end = s.start;
            }
            if rs.next >= 0 {
                if let Some(s) = syms.get_mut(rs.next as usize) {
                    s.prev = left as i32;
                }
            }
            if ls.prev >= 0 {
                self.push_pair(syms, heap, ls.prev as usize, left as i32);
            }
            let next = syms.get(l).map_or(-1, |s| s.next);
            if next >= 0 {
                self.push_pair(syms, heap, l, next);
            }
        }
        let mut i = 0i32;
        while i >= 0 {
            let Some(&s) = syms.get(i as usize) else {
                break;
            };
            self.emit(vocab, word, &s, &mut scratch.buf, out);
            i = s.next;
        }
    }

    #[inline]
    fn push_pair(
        &self,
        syms: &[Sym],
        heap: &mut BinaryHeap<Reverse<(u32, u32, u32, u32)>>,
        left: usize,
        right: i32,
    ) {
        let (Some(l), Some(r)) = (syms.get(left), syms.get(right as usize)) else {
            return;
        };
        if l.sid == NO_SYM || r.sid == NO_SYM {
            return;
        }
        if let Some(&(rank, _)) = self.pairs.get(&(u64::from(l.sid) << 32 | u64::from(r.sid))) {
            heap.push(Reverse((rank, left as u32, l.sid, r.sid)));
        }
    }

    fn emit(&self, vocab: &Vocab, word: &str, s: &Sym, buf: &mut String, out: &mut Vec<u32>) {
        let tok = match self.sym_token.get(s.sid as usize) {
            Some(&t) if t != NO_TOKEN => Some(t),
            Some(_) => None,
            None => word
                .get(s.start as usize..s.end as usize)
                .and_then(|t| vocab.id(t)),
        };
        if let Some(t) = tok {
            out.push(t);
            return;
        }
        if self.byte_level {
            // Only single-byte (ASCII) pieces of the spelling can be tokens of their own.
            let text = self.sym_text.get(s.sid as usize).map_or("", String::as_str);
            for b in text.bytes().filter(u8::is_ascii) {
                buf.clear();
                buf.push(b as char);
                out.extend(vocab.id(buf));
            }
        } else if let Some(raw) = word.get(s.start as usize..s.end as usize) {
            for b in raw.bytes() {
                out.extend(vocab.byte_token(b));
            }
        }
    }
}

/// Tokens of words already encoded during one `encode` call (natural text repeats words a
/// lot; BPE of a word depends on the word alone).
#[derive(Default)]
pub struct WordCache {
    map: HashMap<Box<str>, (u32, u32), FxBuild>,
    tokens: Vec<u32>,
}

impl WordCache {
    /// Words longer than this are encoded without caching.
    const MAX_WORD: usize = 64;
    /// Stop adding entries past this many (bounds memory on huge inputs).
    const MAX_ENTRIES: usize = 1 << 16;

    /// Encode `word` through the cache.
    pub fn encode(
        &mut self,
        bpe: &Bpe,
        vocab: &Vocab,
        word: &str,
        scratch: &mut Scratch,
        out: &mut Vec<u32>,
    ) {
        if word.len() > Self::MAX_WORD {
            bpe.encode_word(vocab, word, scratch, out);
            return;
        }
        if let Some(&(s, n)) = self.map.get(word) {
            if let Some(t) = self.tokens.get(s as usize..(s + n) as usize) {
                out.extend_from_slice(t);
                return;
            }
        }
        let before = out.len();
        bpe.encode_word(vocab, word, scratch, out);
        if self.map.len() < Self::MAX_ENTRIES {
            let new = out.get(before..).unwrap_or(&[]);
            self.map
                .insert(word.into(), (self.tokens.len() as u32, new.len() as u32));
            self.tokens.extend_from_slice(new);
        }
    }
}
