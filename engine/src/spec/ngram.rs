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
    /// Up to `k` tokens after the latest earlier occurrence of the longest matching suffix
    /// (n from `max_n` down to `min_n` tokens; an occurrence may overlap the suffix).
    ///
    /// One backward scan over the candidate ends `e` of an occurrence (`e < len - 1`): the
    /// match length at `e` is how many tokens ending at `e` equal the context's last ones
    /// (at most `max_n`). The answer is the longest length found and, for it, the latest
    /// end: the first `e` of the scan that reaches it, since no later end reached as much.
    /// The scan stops at the first end that matches `max_n` tokens. The drafts are those of
    /// a search per n (tests: `single_scan_equals_the_search_per_n`), in about one pass
    /// instead of up to `max_n` (the speed policy replays the proposer over plain tokens:
    /// research/notes/spec/).
    pub fn lookup(&self, context: &[u32], k: usize) -> Vec<u32> {
        if k == 0 {
            return Vec::new();
        }
        let Some(e) = self.occurrence(context) else {
            return Vec::new();
        };
        let from = e + 1;
        context[from..(from + k).min(context.len())].to_vec()
    }

    /// The proposal's own evidence: how many tokens ending at the occurrence
    /// [`NgramProposer::lookup`] drafts from equal the context's last ones, counted past
    /// `max_n` up to `cap` (0 when it has no occurrence). A long agreement means the text
    /// is copying a span it saw before, and copies go on (the speed policy's evidence
    /// rule, [`super::EvidencePolicy`]).
    pub fn match_len(&self, context: &[u32], cap: usize) -> usize {
        let Some(e) = self.occurrence(context) else {
            return 0;
        };
        let len = context.len();
        let mut l = 0;
        while l < cap && l <= e && context[e - l] == context[len - 1 - l] {
            l += 1;
        }
        l
    }

    /// End of the latest earlier occurrence of the longest matching suffix (see
    /// [`NgramProposer::lookup`]).
    fn occurrence(&self, context: &[u32]) -> Option<usize> {
        let len = context.len();
        if len < 2 {
            return None;
        }
        let max_n = self.max_n.min(len - 1);
        let min_n = self.min_n.max(1);
        if min_n > max_n {
            return None;
        }
        let last = context[len - 1];
        let mut best: Option<(usize, usize)> = None; // (match length, occurrence end)
        for e in (0..len - 1).rev() {
            if context[e] != last {
                continue;
            }
            let cap = max_n.min(e + 1);
            let mut l = 1;
            while l < cap && context[e - l] == context[len - 1 - l] {
                l += 1;
            }
            if l >= min_n && best.is_none_or(|(n, _)| l > n) {
                best = Some((l, e));
                if l == max_n {
                    break;
                }
            }
        }
        best.map(|(_, e)| e)
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

    fn evidence(&self, context: &[u32]) -> Option<usize> {
        Some(self.match_len(context, super::EVIDENCE_CAP))
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

    #[test]
    fn match_len_counts_past_max_n() {
        let p = NgramProposer::default();
        // "5 1 2 3 4 5 6" seen, context ends "5 1 2 3 4 5": 6 tokens agree (cap 32).
        let ctx = [9, 5, 1, 2, 3, 4, 5, 6, 7, 5, 1, 2, 3, 4, 5];
        assert_eq!(p.lookup(&ctx, 2), vec![6, 7]);
        assert_eq!(p.match_len(&ctx, 32), 6);
        assert_eq!(p.match_len(&ctx, 3), 3);
        // One token of agreement; none without an occurrence.
        assert_eq!(p.match_len(&[1, 7, 2, 7], 32), 1);
        assert_eq!(p.match_len(&[1, 2, 3], 32), 0);
        assert_eq!(p.match_len(&[1], 32), 0);
    }

    /// The search per n that [`NgramProposer::lookup`] replaced (its reference).
    fn lookup_per_n(p: &NgramProposer, context: &[u32], k: usize) -> Vec<u32> {
        let len = context.len();
        if k == 0 || len < 2 {
            return Vec::new();
        }
        let max_n = p.max_n.min(len - 1);
        for n in (p.min_n.max(1)..=max_n).rev() {
            let suffix = &context[len - n..];
            for s in (0..len - n).rev() {
                if &context[s..s + n] == suffix {
                    let from = s + n;
                    return context[from..(from + k).min(len)].to_vec();
                }
            }
        }
        Vec::new()
    }

    #[test]
    fn single_scan_equals_the_search_per_n() {
        // Small alphabets (many partial matches), every prefix of each context, several n
        // ranges and depths.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = |m: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % m) as u32
        };
        let mut compared = 0;
        for alphabet in [1, 2, 3, 5, 40] {
            for _ in 0..40 {
                let len = 1 + next(60) as usize;
                let ctx: Vec<u32> = (0..len).map(|_| next(alphabet)).collect();
                for (min_n, max_n) in [(1, 4), (2, 4), (1, 1), (3, 6), (0, 2), (5, 3), (1, 0)] {
                    let p = NgramProposer { max_n, min_n };
                    for end in 0..=len {
                        for k in [0, 1, 3, 8] {
                            assert_eq!(
                                p.lookup(&ctx[..end], k),
                                lookup_per_n(&p, &ctx[..end], k),
                                "{:?} n {min_n}..={max_n} k {k}",
                                &ctx[..end]
                            );
                            compared += 1;
                        }
                    }
                }
            }
        }
        assert!(compared > 10_000);
    }
}
