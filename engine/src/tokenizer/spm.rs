//! SentencePiece-style BPE (`tokenizer.ggml.model = llama`): characters are merged greedily
//! by the score of the token the merge forms (highest first, leftmost on ties); pieces that
//! are not tokens fall back to `<0xXX>` byte tokens.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::TokenizerError;
use super::vocab::Vocab;

#[derive(Clone, Copy)]
struct Sym {
    start: u32,
    end: u32,
    prev: i32,
    next: i32,
}

#[derive(Clone, Copy)]
struct Bigram {
    score: f32,
    left: u32,
    right: u32,
    size: u32,
}

impl PartialEq for Bigram {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Bigram {
    /// Max-heap order: higher score first, then the leftmost pair.
    fn cmp(&self, o: &Self) -> Ordering {
        self.score
            .total_cmp(&o.score)
            .then_with(|| o.left.cmp(&self.left))
    }
}

/// Reusable scratch space.
#[derive(Default)]
pub struct Scratch {
    syms: Vec<Sym>,
    heap: BinaryHeap<Bigram>,
}

fn try_pair(
    vocab: &Vocab,
    text: &str,
    syms: &[Sym],
    heap: &mut BinaryHeap<Bigram>,
    left: i32,
    right: i32,
) {
    if left < 0 || right < 0 {
        return;
    }
    let (Some(l), Some(r)) = (syms.get(left as usize), syms.get(right as usize)) else {
        return;
    };
    let Some(piece) = text.get(l.start as usize..r.end as usize) else {
        return;
    };
    let Some(id) = vocab.id(piece) else { return };
    let score = vocab.tokens.get(id as usize).map_or(0.0, |t| t.score);
    heap.push(Bigram {
        score,
        left: left as u32,
        right: right as u32,
        size: (r.end - l.start),
    });
}

/// Tokenize `text` (already whitespace-escaped) and append to `out`.
pub fn encode(
    vocab: &Vocab,
    text: &str,
    scratch: &mut Scratch,
    out: &mut Vec<u32>,
) -> Result<(), TokenizerError> {
    let syms = &mut scratch.syms;
    syms.clear();
    for (i, c) in text.char_indices() {
        syms.push(Sym {
            start: i as u32,
            end: (i + c.len_utf8()) as u32,
            prev: 0,
            next: 0,
        });
    }
    let n = syms.len();
    for (i, s) in syms.iter_mut().enumerate() {
        s.prev = i as i32 - 1;
        s.next = if i + 1 == n { -1 } else { i as i32 + 1 };
    }
    let heap = &mut scratch.heap;
    heap.clear();
    for i in 1..n {
        try_pair(vocab, text, syms, heap, i as i32 - 1, i as i32);
    }
    while let Some(b) = heap.pop() {
        let (Some(&l), Some(&r)) = (syms.get(b.left as usize), syms.get(b.right as usize)) else {
            continue;
        };
        let (ln, rn) = (l.end - l.start, r.end - r.start);
        if ln == 0 || rn == 0 || ln + rn != b.size {
            continue;
        }
        if let Some(s) = syms.get_mut(b.left as usize) {
            s.end = r.end;
            s.next = r.next;
        }
        if let Some(s) = syms.get_mut(b.right as usize) {
            s.end = s.start;
        }
        if r.next >= 0 {
            if let Some(s) = syms.get_mut(r.next as usize) {
                s.prev = b.left as i32;
            }
        }
        try_pair(vocab, text, syms, heap, l.prev, b.left as i32);
        try_pair(vocab, text, syms, heap, b.left as i32, r.next);
    }
    let mut i = if n == 0 { -1 } else { 0 };
    while i >= 0 {
        let Some(&s) = syms.get(i as usize) else {
            break;
        };
        let piece = text.get(s.start as usize..s.end as usize).unwrap_or("");
        match vocab.id(piece) {
            Some(id) => out.push(id),
            None => {
                for b in piece.bytes() {
                    out.push(vocab.byte_token(b).ok_or(TokenizerError::NoByteToken(b))?);
                }
            }
        }
        i = s.next;
    }
    Ok(())
}
