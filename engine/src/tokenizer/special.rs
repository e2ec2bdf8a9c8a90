//! Special tokens in raw text: cut the input into text fragments and special-token ids
//! before the tokenizer proper runs.
//!
//! Semantics follow llama.cpp's partitioning: special tokens are tried longest first; each
//! one splits every remaining text fragment at all its occurrences (left to right, non
//! overlapping), trimming white space on the side its `LSTRIP`/`RSTRIP` attribute names.
//! Control and unknown tokens take part only when `parse_special` is set; user-defined
//! tokens always do. A byte trie finds in one pass which special tokens occur at all, so
//! vocabularies with thousands of special tokens do not cost one scan per token.

use super::vocab::{Vocab, attr};

/// A piece of the input after partitioning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fragment {
    /// Raw text `[start, end)` (byte offsets into the input).
    Text(usize, usize),
    /// A special token.
    Token(u32),
}

#[derive(Default)]
struct Node {
    /// Sorted by byte.
    children: Vec<(u8, u32)>,
    /// Index into `Vocab::special` of the token ending here.
    terminal: Option<u32>,
}

/// Trie over the texts of the special tokens.
pub struct SpecialTrie {
    nodes: Vec<Node>,
    first: [bool; 256],
}

impl SpecialTrie {
    pub fn build(vocab: &Vocab) -> SpecialTrie {
        let mut nodes = vec![Node::default()];
        let mut first = [false; 256];
        for (k, &id) in vocab.special.iter().enumerate() {
            let Some(t) = vocab.tokens.get(id as usize) else {
                continue;
            };
            let mut cur = 0usize;
            for (i, &b) in t.text.as_bytes().iter().enumerate() {
                if i == 0 {
                    first[b as usize] = true;
                }
                let next = nodes.get(cur).and_then(|n| {
                    n.children
                        .binary_search_by_key(&b, |c| c.0)
                        .ok()
                        .and_then(|j| n.children.get(j))
                        .map(|c| c.1)
                });
                cur = match next {
                    Some(nx) => nx as usize,
                    None => {
                        let nx = nodes.len();
                        nodes.push(Node::default());
                        if let Some(n) = nodes.get_mut(cur) {
                            let pos = n.children.partition_point(|c| c.0 < b);
                            n.children.insert(pos, (b, nx as u32));
                        }
                        nx
                    }
                };
            }
            if let Some(n) = nodes.get_mut(cur) {
                n.terminal.get_or_insert(k as u32);
            }
        }
        SpecialTrie { nodes, first }
    }

    /// Which entries of `Vocab::special` occur somewhere in `text` (by index).
    fn present(&self, text: &[u8], n_special: usize) -> Vec<bool> {
        let mut seen = vec![false; n_special];
        for start in 0..text.len() {
            if !text.get(start).is_some_and(|&b| self.first[b as usize]) {
                continue;
            }
            let mut cur = 0usize;
            for &b in text.get(start..).unwrap_or(&[]) {
                let Some(node) = self.nodes.get(cur) else {
                    break;
                };
                match node.children.binary_search_by_key(&b, |c| c.0) {
                    Ok(j) => cur = node.children.get(j).map_or(0, |c| c.1 as usize),
                    Err(_) => break,
                }
                if let Some(k) = self.nodes.get(cur).and_then(|n| n.terminal) {
                    if let Some(s) = seen.get_mut(k as usize) {
                        *s = true;
                    }
                }
            }
        }
        seen
    }
}

#[inline]
fn c_isspace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
}

/// Split `text` into fragments (see the module docs).
pub fn partition(
    vocab: &Vocab,
    trie: &SpecialTrie,
    text: &str,
    parse_special: bool,
) -> Vec<Fragment> {
    let bytes = text.as_bytes();
    let mut frags = Vec::new();
    if bytes.is_empty() {
        return frags;
    }
    frags.push(Fragment::Text(0, bytes.len()));
    let present = trie.present(bytes, vocab.special.len());
    for (k, &id) in vocab.special.iter().enumerate() {
        if !present.get(k).copied().unwrap_or(false) {
            continue;
        }
        let Some(tok) = vocab.tokens.get(id as usize) else {
            continue;
        };
        if !parse_special && tok.attr & (attr::CONTROL | attr::UNKNOWN) != 0 {
            continue;
        }
        let needle = tok.text.as_bytes();
        let mut next = Vec::with_capacity(frags.len() + 2);
        for f in &frags {
            let Fragment::Text(mut off, end) = *f else {
                next.push(*f);
                continue;
            };
            loop {
                let hay = bytes.get(off..end).unwrap_or(&[]);
                let Some(m) = find(hay, needle).map(|p| p + off) else {
                    if end > off {
                        next.push(Fragment::Text(off, end));
                    }
                    break;
                };
                let mut left_end = m;
                if tok.attr & attr::LSTRIP != 0 {
                    while left_end > off && bytes.get(left_end - 1).is_some_and(|&b| c_isspace(b)) {
                        left_end -= 1;
                    }
                }
                if left_end > off {
                    next.push(Fragment::Text(off, left_end));
                }
                next.push(Fragment::Token(id));
                off = m + needle.len();
                if tok.attr & attr::RSTRIP != 0 {
                    while off < end && bytes.get(off).is_some_and(|&b| c_isspace(b)) {
                        off += 1;
                    }
                }
                if off >= end {
                    break;
                }
            }
        }
        frags = next;
    }
    frags
}

/// First occurrence of `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, rest) = needle.split_first()?;
    let mut i = 0;
    while i + needle.len() <= hay.len() {
        let p = hay.get(i..)?.iter().position(|&b| b == first)? + i;
        if p + needle.len() > hay.len() {
            return None;
        }
        if hay.get(p + 1..p + needle.len()) == Some(rest) {
            return Some(p);
        }
        i = p + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::find;

    #[test]
    fn find_substrings() {
        assert_eq!(find(b"hello <|x|> world", b"<|x|>"), Some(6));
        assert_eq!(find(b"aaab", b"ab"), Some(2));
        assert_eq!(find(b"ab", b"abc"), None);
        assert_eq!(find(b"", b"a"), None);
    }
}
