//! KV memory as a ledger of fixed-size blocks (vLLM's PagedAttention
//! bookkeeping). A block holds the keys and values of `block_size`
//! consecutive positions of one or more sequences; each *slot* (a sequence
//! id of the runtime's KV cache) has a table of the blocks it reads, in
//! order. A block is in use while some slot holds it, and free otherwise.
//!
//! Sharing: a full block is registered under the hash of its tokens and of
//! every token before it, so a new sequence whose prompt starts the same way
//! takes the same blocks by reference ([`BlockLedger::longest_prefix`],
//! [`BlockLedger::share`]) instead of computing them again. A match is
//! checked token by token against the blocks it would share, so a hash
//! collision can only cost a miss, never a wrong answer.
//!
//! The ledger owns no memory: the runtime's cache does. Its total is the
//! cache's size in blocks, so what the ledger grants always fits there.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

/// A sequence id of the runtime's KV cache.
pub type Slot = u32;

/// One block of the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId(u32);

#[derive(Debug, Default)]
struct Block {
    /// The slots whose tables hold this block.
    holders: Vec<Slot>,
    /// For a full block that is registered for sharing: its chain hash and
    /// its own tokens.
    full: Option<(u64, Vec<u32>)>,
}

/// A slot's blocks and how many of them are registered for sharing.
#[derive(Debug, Default)]
struct Table {
    blocks: Vec<BlockId>,
    registered: usize,
    /// The chain hash of the last registered block.
    last_hash: u64,
}

/// Not enough free blocks for what was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoRoom {
    pub needed: usize,
    pub free: usize,
}

/// The block ledger of one KV cache.
#[derive(Debug)]
pub struct BlockLedger {
    block_size: usize,
    blocks: Vec<Block>,
    free: Vec<BlockId>,
    by_hash: HashMap<u64, BlockId>,
    tables: HashMap<Slot, Table>,
}

impl BlockLedger {
    /// A ledger of `total` blocks of `block_size` positions each.
    pub fn new(block_size: usize, total: usize) -> BlockLedger {
        assert!(block_size > 0, "a block holds at least one position");
        let total = u32::try_from(total).unwrap_or(u32::MAX);
        BlockLedger {
            block_size,
            blocks: (0..total).map(|_| Block::default()).collect(),
            free: (0..total).rev().map(BlockId).collect(),
            by_hash: HashMap::new(),
            tables: HashMap::new(),
        }
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn total(&self) -> usize {
        self.blocks.len()
    }

    pub fn free(&self) -> usize {
        self.free.len()
    }

    pub fn in_use(&self) -> usize {
        self.total() - self.free()
    }

    /// Blocks needed to hold `positions` positions.
    pub fn blocks_for(&self, positions: usize) -> usize {
        positions.div_ceil(self.block_size)
    }

    /// How many blocks `slot`'s table holds.
    pub fn held(&self, slot: Slot) -> usize {
        self.tables.get(&slot).map_or(0, |t| t.blocks.len())
    }

    /// The blocks that `slot`'s table holds, in order.
    pub fn table(&self, slot: Slot) -> &[BlockId] {
        self.tables.get(&slot).map_or(&[], |t| &t.blocks)
    }

    /// Grows `slot`'s table to hold `positions` positions; all or nothing.
    pub fn grow(&mut self, slot: Slot, positions: usize) -> Result<(), NoRoom> {
        let needed = self.blocks_for(positions).saturating_sub(self.held(slot));
        if needed > self.free.len() {
            return Err(NoRoom {
                needed,
                free: self.free.len(),
            });
        }
        for _ in 0..needed {
            let id = self.free.pop().ok_or(NoRoom { needed, free: 0 })?;
            self.blocks[id.0 as usize].holders.push(slot);
            self.tables.entry(slot).or_default().blocks.push(id);
        }
        Ok(())
    }

    /// Registers, for sharing, the blocks of `slot` that `computed` (the
    /// tokens whose keys and values the cache now holds) fills.
    pub fn register(&mut self, slot: Slot, computed: &[u32]) {
        let Some(table) = self.tables.get_mut(&slot) else {
            return;
        };
        let full = (computed.len() / self.block_size).min(table.blocks.len());
        while table.registered < full {
            let index = table.registered;
            let tokens = &computed[index * self.block_size..(index + 1) * self.block_size];
            let hash = chain_hash(table.last_hash, tokens);
            let id = table.blocks[index];
            let block = &mut self.blocks[id.0 as usize];
            if block.full.is_none() {
                block.full = Some((hash, tokens.to_vec()));
            }
            self.by_hash.entry(hash).or_insert(id);
            table.last_hash = hash;
            table.registered += 1;
        }
    }

    /// The slot holding the longest run of registered blocks that begins
    /// `tokens`, and how many blocks that run has; `None` when not even
    /// the first block is held.
    pub fn longest_prefix(&self, tokens: &[u32]) -> Option<(Slot, usize)> {
        let mut parent = 0;
        let mut deepest = None;
        for (index, chunk) in tokens.chunks_exact(self.block_size).enumerate() {
            parent = chain_hash(parent, chunk);
            let Some(id) = self.by_hash.get(&parent) else {
                break;
            };
            deepest = Some((index + 1, *id));
        }
        let (blocks, id) = deepest?;
        let holder = *self.blocks[id.0 as usize].holders.first()?;
        let verified = self.matching(holder, tokens, blocks);
        (verified > 0).then_some((holder, verified))
    }

    /// How many of `slot`'s first `blocks` blocks hold exactly `tokens`'
    /// blocks, counted from the start.
    fn matching(&self, slot: Slot, tokens: &[u32], blocks: usize) -> usize {
        let table = self.table(slot);
        table
            .iter()
            .take(blocks)
            .zip(tokens.chunks_exact(self.block_size))
            .take_while(|(id, chunk)| {
                matches!(&self.blocks[id.0 as usize].full, Some((_, held)) if held == chunk)
            })
            .count()
    }

    /// Gives `to` (which holds nothing) the first `blocks` blocks of
    /// `from`, by reference.
    pub fn share(&mut self, to: Slot, from: Slot, blocks: usize) {
        let Some(source) = self.tables.get(&from) else {
            return;
        };
        let shared: Vec<BlockId> = source.blocks.iter().take(blocks).copied().collect();
        let last_hash = shared
            .last()
            .and_then(|id| self.blocks[id.0 as usize].full.as_ref())
            .map_or(0, |(hash, _)| *hash);
        for id in &shared {
            self.blocks[id.0 as usize].holders.push(to);
        }
        let registered = shared.len();
        self.tables.insert(
            to,
            Table {
                blocks: shared,
                registered,
                last_hash,
            },
        );
    }

    /// Keeps only the first `keep` blocks of `slot`'s table; a block no
    /// slot holds any more is free again.
    pub fn truncate(&mut self, slot: Slot, keep: usize) {
        let Some(table) = self.tables.get_mut(&slot) else {
            return;
        };
        let dropped: Vec<BlockId> = table.blocks.drain(keep.min(table.blocks.len())..).collect();
        table.registered = table.registered.min(keep);
        if table.blocks.is_empty() {
            self.tables.remove(&slot);
        }
        for id in dropped.into_iter().rev() {
            self.let_go(slot, id);
        }
    }

    /// Drops `slot`'s whole table.
    pub fn release(&mut self, slot: Slot) {
        self.truncate(slot, 0);
    }

    /// The number of `slot`'s blocks that are registered for sharing.
    pub fn registered(&self, slot: Slot) -> usize {
        self.tables.get(&slot).map_or(0, |t| t.registered)
    }

    fn let_go(&mut self, slot: Slot, id: BlockId) {
        let block = &mut self.blocks[id.0 as usize];
        block.holders.retain(|&h| h != slot);
        if !block.holders.is_empty() {
            return;
        }
        if let Some((hash, _)) = block.full.take()
            && self.by_hash.get(&hash) == Some(&id)
        {
            self.by_hash.remove(&hash);
        }
        self.free.push(id);
    }
}

/// The hash of a block's tokens after the blocks whose chain hash is
/// `parent`.
fn chain_hash(parent: u64, tokens: &[u32]) -> u64 {
    let mut hasher = DefaultHasher::new();
    parent.hash(&mut hasher);
    tokens.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(n: u32) -> Vec<u32> {
        (0..n).collect()
    }

    #[test]
    fn blocks_are_granted_as_a_sequence_grows_and_freed_when_it_ends() {
        let mut ledger = BlockLedger::new(4, 8);
        ledger.grow(1, 5).unwrap();
        assert_eq!((ledger.held(1), ledger.in_use()), (2, 2));
        ledger.grow(1, 8).unwrap();
        assert_eq!(ledger.held(1), 2, "8 positions still fit in 2 blocks");
        ledger.grow(1, 9).unwrap();
        assert_eq!(ledger.in_use(), 3);
        ledger.release(1);
        assert_eq!(ledger.in_use(), 0);
    }

    #[test]
    fn a_grant_is_all_or_nothing() {
        let mut ledger = BlockLedger::new(4, 3);
        ledger.grow(1, 8).unwrap();
        assert_eq!(ledger.grow(2, 8), Err(NoRoom { needed: 2, free: 1 }));
        assert_eq!(ledger.held(2), 0);
        assert_eq!(ledger.free(), 1);
    }

    #[test]
    fn a_shared_prefix_is_found_and_held_by_reference() {
        let mut ledger = BlockLedger::new(4, 8);
        let prompt = tokens(10);
        ledger.grow(1, 10).unwrap();
        ledger.register(1, &prompt);
        assert_eq!(ledger.registered(1), 2, "two full blocks");
        let mut other = tokens(8);
        other.extend([99, 98, 97]);
        assert_eq!(ledger.longest_prefix(&other), Some((1, 2)));
        ledger.share(2, 1, 2);
        assert_eq!(ledger.in_use(), 3, "shared blocks are not counted twice");
        ledger.release(1);
        assert_eq!(ledger.in_use(), 2, "the sharer keeps the prefix");
        assert_eq!(ledger.longest_prefix(&other), Some((2, 2)));
        ledger.release(2);
        assert_eq!(ledger.in_use(), 0);
        assert_eq!(ledger.longest_prefix(&other), None);
    }

    #[test]
    fn a_prefix_that_differs_in_its_first_block_is_a_miss() {
        let mut ledger = BlockLedger::new(4, 8);
        ledger.grow(1, 8).unwrap();
        ledger.register(1, &tokens(8));
        assert_eq!(ledger.longest_prefix(&[7, 1, 2, 3, 4, 5, 6, 7]), None);
        assert_eq!(
            ledger.longest_prefix(&[0, 1, 2, 3, 9, 9, 9, 9]),
            Some((1, 1))
        );
    }

    #[test]
    fn truncating_keeps_the_first_blocks_registered() {
        let mut ledger = BlockLedger::new(4, 8);
        ledger.grow(1, 11).unwrap();
        ledger.register(1, &tokens(11));
        ledger.truncate(1, 2);
        assert_eq!((ledger.held(1), ledger.in_use()), (2, 2));
        assert_eq!(ledger.longest_prefix(&tokens(9)), Some((1, 2)));
    }
}
