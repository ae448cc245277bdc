//! What the scheduler works with and hands out: its limits, a step's plan
//! (cache operations, then chunks of tokens), why a sequence cannot be
//! served, and its counters.

use crate::blocks::Slot;

/// A sequence, as the scheduler knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeqId(pub u64);

/// What a scheduler may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Positions per KV block.
    pub block_size: usize,
    /// KV blocks in the cache.
    pub total_blocks: usize,
    /// Sequences decoded together at most.
    pub max_running: usize,
    /// Sequence ids of the runtime's cache: the running sequences' and
    /// those that keep a finished sequence's prefix for reuse.
    pub slots: usize,
    /// Tokens one step may compute.
    pub tokens_per_step: usize,
    /// Positions one sequence may have (the model's context).
    pub context_length: usize,
}

impl Limits {
    /// Whether a prompt of `prompt` tokens can ever be served: with room
    /// to generate a token in the context, and in the whole cache.
    pub fn admits(&self, prompt: usize) -> Result<(), Refusal> {
        let positions = prompt + 1;
        if positions > self.context_length {
            return Err(Refusal::TooLong {
                prompt,
                context: self.context_length,
            });
        }
        match positions.div_ceil(self.block_size) > self.total_blocks {
            true => Err(self.no_memory(positions)),
            false => Ok(()),
        }
    }

    /// Why a sequence of `positions` positions that has the whole cache to
    /// itself still does not fit.
    pub fn no_memory(&self, positions: usize) -> Refusal {
        Refusal::NoMemory {
            positions,
            needed: positions.div_ceil(self.block_size),
            total: self.total_blocks,
        }
    }
}

/// Why a sequence cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "the prompt has {prompt} tokens, which leaves no room to generate in the model's context of {context} tokens"
    )]
    TooLong { prompt: usize, context: usize },
    #[error(
        "the request needs {needed} KV blocks ({positions} positions), more than the whole KV cache holds ({total} blocks); raise the model's kv_cache_tokens"
    )]
    NoMemory {
        positions: usize,
        needed: usize,
        total: usize,
    },
}

/// An operation on the runtime's KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvOp {
    /// Forget `slot`'s positions from `from` on.
    Remove { slot: Slot, from: usize },
    /// Let `to` read `from`'s first `positions` positions (by reference).
    Copy {
        from: Slot,
        to: Slot,
        positions: usize,
    },
}

/// Tokens `start..start + len` of a sequence, computed at those positions
/// in `slot`; `logits` when the last of them is the sequence's last token
/// (the next one is sampled from it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    pub id: SeqId,
    pub slot: Slot,
    pub start: usize,
    pub len: usize,
    pub logits: bool,
}

/// One step's work.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub ops: Vec<KvOp>,
    pub chunks: Vec<Chunk>,
    /// Sequences that cannot go on, with why; the scheduler has dropped them.
    pub failed: Vec<(SeqId, Refusal)>,
}

/// Counts since the scheduler was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub preemptions: u64,
    /// Prompt tokens looked up in the prefix cache.
    pub prefix_queried: u64,
    /// Of those, the ones found there (not computed again).
    pub prefix_hits: u64,
}
