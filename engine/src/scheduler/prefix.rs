//! Prefix cache: the KV of finished sequences kept by their token prefix, per tenant (API
//! key), so a later request of the same tenant whose prompt starts with those tokens skips
//! their prefill. Entries hold KV blocks of the pool; the least recently used one is
//! evicted when the scheduler needs blocks (or when the entry count cap is reached).
//!
//! An entry also records how many of its leading positions were fed as PROMPT tokens
//! (`prompt_fed`); a hit shares at most those. A backend may compute prompt positions by
//! another path than generated ones (the CUDA decoder's tensor-core prompt pass), so a new
//! prompt that repeats an earlier request's generated tokens recomputes them as prompt:
//! the request's KV is then what it would be without the cache.

use crate::kv::blocks::BlockTable;

struct Entry<K> {
    tenant: String,
    tokens: Vec<u32>,
    /// Leading positions of `tokens` that were fed as prompt tokens.
    prompt_fed: usize,
    kv: K,
    blocks: BlockTable,
    last_used: u64,
}

/// A hit: which entry, and how many leading tokens it shares with the prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit {
    pub entry: usize,
    pub shared: usize,
}

/// The cache; generic over the executor's KV type.
pub struct PrefixCache<K> {
    entries: Vec<Entry<K>>,
    clock: u64,
    max_entries: usize,
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl<K> PrefixCache<K> {
    /// A cache of at most `max_entries` entries (0 = disabled).
    pub fn new(max_entries: usize) -> Self {
        Self {
            entries: Vec::new(),
            clock: 0,
            max_entries,
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the cache holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entry of `tenant` sharing the longest prefix with `prompt` (at least one token;
    /// only positions the entry was fed as prompt count), marked as used.
    pub fn lookup(&mut self, tenant: &str, prompt: &[u32]) -> Option<Hit> {
        let best = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.tenant == tenant)
            .map(|(i, e)| (i, common_prefix(&e.tokens, prompt).min(e.prompt_fed)))
            .filter(|&(_, n)| n > 0)
            .max_by_key(|&(i, n)| (n, std::cmp::Reverse(i)))?;
        self.clock += 1;
        if let Some(e) = self.entries.get_mut(best.0) {
            e.last_used = self.clock;
        }
        Some(Hit {
            entry: best.0,
            shared: best.1,
        })
    }

    /// The KV of entry `i`.
    pub fn kv(&self, i: usize) -> Option<&K> {
        self.entries.get(i).map(|e| &e.kv)
    }

    /// Keep `kv` (holding exactly `tokens`) for `tenant`. Returns the block tables the
    /// cache no longer needs (an entry this one supersedes, or this one when an existing
    /// entry already covers it, or the LRU entry past the count cap) for the caller to
    /// release.
    pub fn insert(
        &mut self,
        tenant: &str,
        tokens: Vec<u32>,
        kv: K,
        blocks: BlockTable,
    ) -> Vec<BlockTable> {
        let n = tokens.len();
        self.insert_fed(tenant, tokens, n, kv, blocks)
    }

    /// [`PrefixCache::insert`] of a sequence whose first `prompt_fed` positions were fed
    /// as prompt tokens (the rest generated).
    pub fn insert_fed(
        &mut self,
        tenant: &str,
        tokens: Vec<u32>,
        prompt_fed: usize,
        kv: K,
        blocks: BlockTable,
    ) -> Vec<BlockTable> {
        let mut freed = Vec::new();
        if self.max_entries == 0 || tokens.is_empty() {
            freed.push(blocks);
            return freed;
        }
        self.clock += 1;
        if let Some(e) = self
            .entries
            .iter_mut()
            .find(|e| e.tenant == tenant && e.tokens.starts_with(&tokens))
        {
            e.last_used = self.clock;
            freed.push(blocks);
            return freed;
        }
        let mut i = 0;
        while i < self.entries.len() {
            let e = &self.entries[i];
            if e.tenant == tenant && tokens.starts_with(&e.tokens) {
                freed.push(self.entries.swap_remove(i).blocks);
            } else {
                i += 1;
            }
        }
        self.entries.push(Entry {
            tenant: tenant.to_owned(),
            prompt_fed: prompt_fed.min(tokens.len()),
            tokens,
            kv,
            blocks,
            last_used: self.clock,
        });
        while self.entries.len() > self.max_entries {
            match self.evict_lru() {
                Some(b) => freed.push(b),
                None => break,
            }
        }
        freed
    }

    /// Drop the least recently used entry; returns its blocks.
    pub fn evict_lru(&mut self) -> Option<BlockTable> {
        let i = self
            .entries
            .iter()
            .enumerate()
            .min_by_key(|(_, e)| e.last_used)?
            .0;
        Some(self.entries.swap_remove(i).blocks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::blocks::BlockAllocator;

    #[test]
    fn longest_prefix_per_tenant_and_lru_eviction() {
        let mut a = BlockAllocator::new(100, 4).unwrap();
        let mut c: PrefixCache<&'static str> = PrefixCache::new(8);
        let t = |a: &mut BlockAllocator, n| a.allocate(n).unwrap();
        let b1 = t(&mut a, 4);
        assert!(c.insert("k1", vec![1, 2, 3, 4], "A", b1).is_empty());
        let b2 = t(&mut a, 6);
        assert!(c.insert("k1", vec![1, 2, 9, 9, 9, 9], "B", b2).is_empty());
        let b3 = t(&mut a, 4);
        assert!(c.insert("k2", vec![1, 2, 3, 4], "C", b3).is_empty());
        let h = c.lookup("k1", &[1, 2, 3, 7]).unwrap();
        assert_eq!(h.shared, 3);
        assert_eq!(c.kv(h.entry), Some(&"A"));
        let h2 = c.lookup("k2", &[1, 2, 3]).unwrap();
        assert_eq!(c.kv(h2.entry), Some(&"C"));
        assert_eq!(
            c.lookup("k3", &[1, 2, 3]),
            None,
            "no other tenant's entries"
        );
        assert_eq!(c.lookup("k1", &[5]), None);
        // A longer sequence supersedes the entry it extends.
        let b4 = t(&mut a, 6);
        let freed = c.insert("k1", vec![1, 2, 3, 4, 5, 6], "D", b4);
        assert_eq!(freed.len(), 1);
        assert_eq!(c.len(), 3);
        // A shorter one that an entry covers is not kept.
        let b5 = t(&mut a, 2);
        assert_eq!(c.insert("k1", vec![1, 2], "E", b5).len(), 1);
        // LRU: "B" was never looked up after insertion and is oldest.
        c.lookup("k2", &[1]);
        c.lookup("k1", &[1, 2, 3]);
        let lru = c.evict_lru().unwrap();
        assert_eq!(lru.len(), 2, "B held 6 tokens = 2 blocks");
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn a_hit_shares_only_positions_fed_as_prompt() {
        let mut a = BlockAllocator::new(100, 4).unwrap();
        let mut c: PrefixCache<u8> = PrefixCache::new(4);
        let b = a.allocate(8).unwrap();
        // 5 prompt tokens, 3 generated.
        assert!(
            c.insert_fed("k", vec![1, 2, 3, 4, 5, 6, 7, 8], 5, 1, b)
                .is_empty()
        );
        assert_eq!(
            c.lookup("k", &[1, 2, 3, 4, 5, 6, 7, 8, 9]).unwrap().shared,
            5
        );
        assert_eq!(c.lookup("k", &[1, 2, 3, 9]).unwrap().shared, 3);
    }

    #[test]
    fn count_cap_evicts_and_zero_disables() {
        let mut a = BlockAllocator::new(100, 4).unwrap();
        let mut c: PrefixCache<u8> = PrefixCache::new(1);
        let b = a.allocate(4).unwrap();
        assert!(c.insert("k", vec![1], 1, b).is_empty());
        let b = a.allocate(4).unwrap();
        assert_eq!(c.insert("k", vec![2], 2, b).len(), 1);
        assert_eq!(c.len(), 1);
        let mut off: PrefixCache<u8> = PrefixCache::new(0);
        let b = a.allocate(4).unwrap();
        assert_eq!(off.insert("k", vec![1], 1, b).len(), 1);
        assert!(off.is_empty());
    }
}
