//! Paged KV block allocator: the KV memory budget cut into fixed-size blocks of
//! `block_tokens` positions, handed out to whoever holds KV (a running sequence, a
//! prefix-cache entry) as a [`BlockTable`] and returned when it is dropped.
//!
//! The scheduler asks [`BlockAllocator::can_allocate`] ("can I admit N more tokens?")
//! before admitting a request, grows a table with [`BlockAllocator::grow`] and gives
//! blocks back with [`BlockAllocator::release`]. The CPU reference keeps each sequence's
//! rows contiguous in its [`super::SeqKv`]; there the allocator is the accounting that
//! bounds memory (a table's blocks cover at least the positions its cache holds). A
//! device backend maps the same block ids onto pages of one preallocated pool.

/// Index of one block in the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId(pub u32);

/// Errors of the allocator.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BlockError {
    #[error("out of KV blocks: {needed} needed, {free} free")]
    OutOfBlocks { needed: usize, free: usize },
    #[error("block {0} released twice or never allocated")]
    NotAllocated(u32),
    #[error("a block holds no positions (block size 0)")]
    ZeroBlockSize,
}

/// The blocks held by one owner, in position order.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct BlockTable {
    blocks: Vec<BlockId>,
}

impl BlockTable {
    /// Blocks held.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Whether no block is held.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// The block ids, in position order.
    pub fn ids(&self) -> &[BlockId] {
        &self.blocks
    }
}

/// A pool of `total` blocks of `block_tokens` positions each.
#[derive(Debug)]
pub struct BlockAllocator {
    block_tokens: usize,
    free: Vec<BlockId>,
    allocated: Vec<bool>,
}

impl BlockAllocator {
    /// A pool of `total` blocks of `block_tokens` positions.
    pub fn new(total: usize, block_tokens: usize) -> Result<Self, BlockError> {
        if block_tokens == 0 {
            return Err(BlockError::ZeroBlockSize);
        }
        let total = total.min(u32::MAX as usize);
        // Pop from the end: low ids first.
        let free = (0..total as u32).rev().map(BlockId).collect();
        Ok(Self {
            block_tokens,
            free,
            allocated: vec![false; total],
        })
    }

    /// A pool covering `budget_bytes` of KV at `bytes_per_token`.
    pub fn for_budget(
        budget_bytes: usize,
        bytes_per_token: usize,
        block_tokens: usize,
    ) -> Result<Self, BlockError> {
        let per_block = bytes_per_token.max(1).saturating_mul(block_tokens.max(1));
        Self::new(budget_bytes / per_block, block_tokens)
    }

    /// Positions per block.
    pub fn block_tokens(&self) -> usize {
        self.block_tokens
    }

    /// Blocks in the pool.
    pub fn total(&self) -> usize {
        self.allocated.len()
    }

    /// Free blocks.
    pub fn free_blocks(&self) -> usize {
        self.free.len()
    }

    /// Blocks held by someone.
    pub fn used_blocks(&self) -> usize {
        self.total() - self.free_blocks()
    }

    /// Blocks needed to hold `tokens` positions.
    pub fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.block_tokens)
    }

    /// Extra blocks `table` needs to hold `tokens` positions in all.
    pub fn extra_for(&self, table: &BlockTable, tokens: usize) -> usize {
        self.blocks_for(tokens).saturating_sub(table.len())
    }

    /// Whether `n_blocks` more blocks can be handed out now.
    pub fn can_allocate(&self, n_blocks: usize) -> bool {
        n_blocks <= self.free.len()
    }

    /// Whether a new owner of `tokens` positions fits now.
    pub fn can_admit(&self, tokens: usize) -> bool {
        self.can_allocate(self.blocks_for(tokens))
    }

    /// Grow `table` so it covers `tokens` positions; all or nothing.
    pub fn grow(&mut self, table: &mut BlockTable, tokens: usize) -> Result<(), BlockError> {
        let need = self.extra_for(table, tokens);
        if need > self.free.len() {
            return Err(BlockError::OutOfBlocks {
                needed: need,
                free: self.free.len(),
            });
        }
        for _ in 0..need {
            let Some(b) = self.free.pop() else {
                return Err(BlockError::OutOfBlocks {
                    needed: need,
                    free: 0,
                });
            };
            if let Some(a) = self.allocated.get_mut(b.0 as usize) {
                *a = true;
            }
            table.blocks.push(b);
        }
        Ok(())
    }

    /// A new table covering `tokens` positions.
    pub fn allocate(&mut self, tokens: usize) -> Result<BlockTable, BlockError> {
        let mut t = BlockTable::default();
        self.grow(&mut t, tokens)?;
        Ok(t)
    }

    /// Shrink `table` to the blocks needed for `tokens` positions, returning the rest.
    pub fn shrink(&mut self, table: &mut BlockTable, tokens: usize) -> Result<(), BlockError> {
        let keep = self.blocks_for(tokens);
        while table.blocks.len() > keep {
            let Some(b) = table.blocks.pop() else { break };
            self.put_back(b)?;
        }
        Ok(())
    }

    /// Return every block of `table` to the pool.
    pub fn release(&mut self, table: &mut BlockTable) -> Result<(), BlockError> {
        self.shrink(table, 0)
    }

    fn put_back(&mut self, b: BlockId) -> Result<(), BlockError> {
        match self.allocated.get_mut(b.0 as usize) {
            Some(a) if *a => {
                *a = false;
                self.free.push(b);
                Ok(())
            }
            _ => Err(BlockError::NotAllocated(b.0)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounting_grow_shrink_release() {
        let mut a = BlockAllocator::new(10, 16).unwrap();
        assert_eq!((a.total(), a.free_blocks(), a.used_blocks()), (10, 10, 0));
        assert!(a.can_admit(160));
        assert!(!a.can_admit(161));
        let mut t = a.allocate(17).unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t.ids(), &[BlockId(0), BlockId(1)]);
        a.grow(&mut t, 32).unwrap();
        assert_eq!(t.len(), 2, "32 positions fit in 2 blocks of 16");
        a.grow(&mut t, 33).unwrap();
        assert_eq!((t.len(), a.used_blocks()), (3, 3));
        assert_eq!(
            a.grow(&mut t, 1000),
            Err(BlockError::OutOfBlocks {
                needed: 60,
                free: 7
            })
        );
        assert_eq!(t.len(), 3, "a failed grow takes nothing");
        a.shrink(&mut t, 5).unwrap();
        assert_eq!((t.len(), a.free_blocks()), (1, 9));
        a.release(&mut t).unwrap();
        assert!(t.is_empty());
        assert_eq!(a.free_blocks(), 10);
    }

    #[test]
    fn double_release_is_an_error_and_budget_sizes_the_pool() {
        let mut a = BlockAllocator::new(2, 4).unwrap();
        let mut t = a.allocate(4).unwrap();
        let mut forged = BlockTable {
            blocks: t.ids().to_vec(),
        };
        a.release(&mut t).unwrap();
        assert_eq!(a.release(&mut forged), Err(BlockError::NotAllocated(0)));
        assert_eq!(a.free_blocks(), 2);
        assert!(BlockAllocator::new(1, 0).is_err());
        let b = BlockAllocator::for_budget(1 << 20, 1024, 16).unwrap();
        assert_eq!(b.total(), 64);
    }
}
