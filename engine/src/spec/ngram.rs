//! N-gram prompt lookup: draft the tokens that followed the latest earlier occurrence of
//! the context's last n tokens (n from `max_n` down to `min_n`). No extra model; strong on
//! code edits and agentic prompts that repeat their context.

use super::{Draft, DraftMode, Proposer, SpecError};

/// Prompt-lookup proposer.
#[derive(Clone, Debug)]
pub struct NgramProposer {
    /// Longest suffix tried first.
    pub max_n: usize,
    /// Shortest suffix tried.
    pub min_n: usize,
}

impl Default for NgramProposer {
    fn default() -> Self {
        Self { max_n: 4, min_n: 1 }
    }
}

impl NgramProposer {
    /// Up to `k` tokens after the latest earlier occurrence of the longest matching suffix.
    pub fn lookup(&self, context: &[u32], k: usize) -> Vec<u32> {
        let len = context.len();
        if k == 0 || len < 2 {
            return Vec::new();
        }
        let max_n = self.max_n.min(len - 1);
        for n in (self.min_n.max(1)..=max_n).rev() {
            let suffix = &context[len - n..];
            // Latest occurrence that ends before the suffix starts... or overlaps it: any
            // start s < len - n works, the continuation is context[s + n..].
            for s in (0..len - n).rev() {
                if &context[s..s + n] == suffix {
                    let from = s + n;
                    let to = (from + k).min(len);
                    return context[from..to].to_vec();
                }
            }
        }
        Vec::new()
    }
}

impl Proposer for NgramProposer {
    fn name(&self) -> String {
        "ngram".into()
    }

    fn propose(&mut self, context: &[u32], k: usize, _mode: DraftMode) -> Result<Draft, SpecError> {
        Ok(Draft {
            tokens: self.lookup(context, k),
            dists: None,
        })
    }

    fn is_free(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_latest_longest_match() {
        let p = NgramProposer::default();
        // ... 1 2 3 [9 9] ... 1 2 3 [7 8] ... 1 2 3 -> latest match of "1 2 3" continues 7 8
        let ctx = [1, 2, 3, 9, 9, 5, 1, 2, 3, 7, 8, 6, 1, 2, 3];
        assert_eq!(p.lookup(&ctx, 2), vec![7, 8]);
        assert_eq!(p.lookup(&ctx, 5), vec![7, 8, 6, 1, 2]);
        // no match at all
        assert!(p.lookup(&[1, 2, 3, 4], 3).is_empty());
        // the continuation stops at the end of the context
        assert_eq!(p.lookup(&[4, 5, 4], 8), vec![5, 4]);
        assert!(p.lookup(&ctx, 0).is_empty());
    }
}
