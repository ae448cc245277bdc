//! Iteration-level scheduling (continuous batching). Every step decodes one
//! token for each running sequence and feeds waiting prompts in chunks,
//! under a budget of tokens per step; a sequence that arrives joins at the
//! next step, and one that finishes, stops or is cancelled leaves at once.
//!
//! The rules, in the order a step applies them:
//! 1. running sequences that need one token (decoding) come first, oldest
//!    first; then running sequences still reading their prompt, a chunk
//!    each (at most a quarter of the budget) while the budget lasts;
//! 2. waiting sequences are admitted, oldest first (a preempted one goes
//!    back to the front), while a slot, a block and budget are free, and
//!    only in a step that preempted nobody; an admitted prompt first takes,
//!    by reference, the longest run of full blocks another sequence already
//!    computed; what budget is left then goes to this step's prompt chunks,
//!    in order;
//! 3. when a running sequence needs a block and none is free, blocks that
//!    only a finished sequence's cached prefix holds are given back first
//!    (oldest first); then the newest running sequence is preempted: its
//!    blocks are freed and it waits to be computed again, prompt and
//!    tokens so far. A sequence fails for lack of memory only when it is
//!    the only one left and still does not fit.
//!
//! What the runtime must do is returned as a [`Plan`]: cache operations to
//! apply in order, then the chunks of one batch.

use std::collections::{HashMap, VecDeque};

use crate::blocks::{BlockLedger, Slot};
pub use crate::plan::{Chunk, Counters, KvOp, Limits, Plan, Refusal, SeqId};

#[derive(Debug)]
struct Sequence {
    tokens: Vec<u32>,
    prompt: usize,
    computed: usize,
    slot: Option<Slot>,
}

/// The scheduler of one model instance.
#[derive(Debug)]
pub struct Scheduler {
    limits: Limits,
    ledger: BlockLedger,
    sequences: HashMap<SeqId, Sequence>,
    waiting: VecDeque<SeqId>,
    running: Vec<SeqId>,
    /// Slots of finished sequences that keep their cached prefix, oldest
    /// use first.
    parked: VecDeque<Slot>,
    free_slots: Vec<Slot>,
    /// Operations owed to the cache since the last plan.
    pending: Vec<KvOp>,
    next_id: u64,
    counters: Counters,
}

impl Scheduler {
    pub fn new(limits: Limits) -> Scheduler {
        let slots = u32::try_from(limits.slots.max(limits.max_running)).unwrap_or(u32::MAX);
        Scheduler {
            limits,
            ledger: BlockLedger::new(limits.block_size, limits.total_blocks),
            sequences: HashMap::new(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            parked: VecDeque::new(),
            free_slots: (0..slots).rev().collect(),
            pending: Vec::new(),
            next_id: 0,
            counters: Counters::default(),
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Queues a sequence whose prompt is `prompt`, or says why it can
    /// never be served.
    pub fn add(&mut self, prompt: Vec<u32>) -> Result<SeqId, Refusal> {
        self.limits.admits(prompt.len())?;
        let id = SeqId(self.next_id);
        self.next_id += 1;
        let sequence = Sequence {
            prompt: prompt.len(),
            tokens: prompt,
            computed: 0,
            slot: None,
        };
        self.sequences.insert(id, sequence);
        self.waiting.push_back(id);
        Ok(id)
    }

    /// The sequence's tokens: its prompt, then what it generated.
    pub fn tokens(&self, id: SeqId) -> &[u32] {
        self.sequences.get(&id).map_or(&[], |s| &s.tokens)
    }

    /// How many of its tokens are its prompt.
    pub fn prompt_len(&self, id: SeqId) -> usize {
        self.sequences.get(&id).map_or(0, |s| s.prompt)
    }

    /// Appends a token the sequence generated.
    pub fn push(&mut self, id: SeqId, token: u32) {
        if let Some(sequence) = self.sequences.get_mut(&id) {
            sequence.tokens.push(token);
        }
    }

    /// Whether the sequence fills the model's context (it can take no
    /// further token).
    pub fn context_full(&self, id: SeqId) -> bool {
        self.tokens(id).len() >= self.limits.context_length
    }

    /// Records that the runtime computed `chunk`.
    pub fn advance(&mut self, chunk: &Chunk) {
        let Some(sequence) = self.sequences.get_mut(&chunk.id) else {
            return;
        };
        sequence.computed = sequence.computed.max(chunk.start + chunk.len);
        let computed = &sequence.tokens[..sequence.computed];
        self.ledger.register(chunk.slot, computed);
    }

    /// Ends a sequence (finished, stopped or cancelled): it leaves now, and
    /// its full blocks stay cached for later prompts that begin the same
    /// way until their memory is needed.
    pub fn finish(&mut self, id: SeqId) {
        let Some(sequence) = self.sequences.remove(&id) else {
            return;
        };
        self.waiting.retain(|&w| w != id);
        self.running.retain(|&r| r != id);
        let Some(slot) = sequence.slot else {
            return;
        };
        let keep = self.ledger.registered(slot);
        self.ledger.truncate(slot, keep);
        let from = keep * self.limits.block_size;
        self.pending.push(KvOp::Remove { slot, from });
        match keep {
            0 => self.free_slots.push(slot),
            _ => self.parked.push_back(slot),
        }
    }

    pub fn running(&self) -> usize {
        self.running.len()
    }

    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Whether there is nothing to do.
    pub fn is_idle(&self) -> bool {
        self.running.is_empty() && self.waiting.is_empty()
    }

    /// The ids of every sequence it holds, running or waiting.
    pub fn ids(&self) -> impl Iterator<Item = SeqId> + '_ {
        self.running.iter().chain(self.waiting.iter()).copied()
    }

    pub fn total_blocks(&self) -> usize {
        self.ledger.total()
    }

    /// Blocks that running sequences hold (a block held only for the
    /// prefix cache is not in use: it is given back when needed).
    pub fn blocks_in_use(&self) -> usize {
        let mut held: Vec<_> = self
            .running
            .iter()
            .filter_map(|id| self.sequences.get(id)?.slot)
            .flat_map(|slot| self.ledger.table(slot).iter().copied())
            .collect();
        held.sort_unstable();
        held.dedup();
        held.len()
    }

    /// Blocks held for any reason, the prefix cache's included.
    pub fn blocks_held(&self) -> usize {
        self.ledger.in_use()
    }

    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// The next step's work.
    pub fn plan(&mut self) -> Plan {
        let mut plan = Plan {
            ops: std::mem::take(&mut self.pending),
            ..Plan::default()
        };
        let mut budget = self.limits.tokens_per_step;
        let preemptions = self.counters.preemptions;
        self.schedule_running(&mut plan, &mut budget, true);
        self.schedule_running(&mut plan, &mut budget, false);
        // A step that had to preempt has no room to admit (the preempted
        // would come straight back in and go out again).
        if self.counters.preemptions == preemptions {
            self.admit(&mut plan, &mut budget);
        }
        self.extend_prompts(&mut plan, &mut budget);
        plan
    }

    /// The most prompt tokens one sequence takes in a step before the
    /// others have had theirs: a long prompt does not hold back a short one
    /// behind it (rule 1's chunks, and rule 2's first ones).
    fn share(&self) -> usize {
        (self.limits.tokens_per_step / 4).max(1)
    }

    /// Gives what is left of the budget to the prompts of this step, in
    /// order, as far as blocks allow (cached prefixes are given back for
    /// it; no running sequence is preempted for it).
    fn extend_prompts(&mut self, plan: &mut Plan, budget: &mut usize) {
        for index in 0..plan.chunks.len() {
            let chunk = plan.chunks[index];
            let Some(sequence) = self.sequences.get(&chunk.id) else {
                continue;
            };
            let (end, total) = (chunk.start + chunk.len, sequence.tokens.len());
            let extra = (total - end).min(*budget);
            if chunk.logits || extra == 0 || !self.grow_evicting(chunk.slot, end + extra, plan) {
                continue;
            }
            let chunk = &mut plan.chunks[index];
            chunk.len += extra;
            chunk.logits = chunk.start + chunk.len == total;
            *budget -= extra;
        }
    }

    /// Grows `slot` to `positions`, giving back cached prefixes as needed;
    /// false when even that is not enough.
    fn grow_evicting(&mut self, slot: Slot, positions: usize, plan: &mut Plan) -> bool {
        while self.ledger.grow(slot, positions).is_err() {
            if !self.evict_parked(plan) {
                return false;
            }
        }
        true
    }

    /// Chunks for the running sequences that decode (`decoding`) or still
    /// read their prompt.
    fn schedule_running(&mut self, plan: &mut Plan, budget: &mut usize, decoding: bool) {
        let order = self.running.clone();
        for id in order {
            if *budget == 0 {
                return;
            }
            let Some(sequence) = self.sequences.get(&id) else {
                continue;
            };
            let remaining = sequence.tokens.len() - sequence.computed;
            if remaining == 0
                || (remaining == 1) != decoding
                || plan.chunks.iter().any(|c| c.id == id)
            {
                continue;
            }
            let (start, len) = (sequence.computed, remaining.min(*budget).min(self.share()));
            if self.reserve(id, start + len, plan, budget) {
                self.push_chunk(plan, id, start, len);
                *budget -= len;
            }
        }
    }

    /// Makes room for `positions` positions of running sequence `id`;
    /// false when it was preempted or failed instead.
    fn reserve(
        &mut self,
        id: SeqId,
        positions: usize,
        plan: &mut Plan,
        budget: &mut usize,
    ) -> bool {
        loop {
            let Some(slot) = self.sequences.get(&id).and_then(|s| s.slot) else {
                return false;
            };
            if self.ledger.grow(slot, positions).is_ok() {
                return true;
            }
            if self.evict_parked(plan) {
                continue;
            }
            let victim = *self.running.last().unwrap_or(&id);
            if victim != id {
                self.preempt(victim, plan, budget);
                continue;
            }
            if self.running.len() > 1 {
                self.preempt(id, plan, budget);
            } else {
                self.fail(id, self.limits.no_memory(positions), plan);
            }
            return false;
        }
    }

    /// Frees the running sequence `id`'s blocks; it waits, first in line,
    /// to be computed again.
    fn preempt(&mut self, id: SeqId, plan: &mut Plan, budget: &mut usize) {
        if let Some(index) = plan.chunks.iter().position(|c| c.id == id) {
            *budget += plan.chunks.remove(index).len;
        }
        self.vacate(id, plan);
        if let Some(sequence) = self.sequences.get_mut(&id) {
            sequence.computed = 0;
        }
        self.waiting.push_front(id);
        self.counters.preemptions += 1;
    }

    fn fail(&mut self, id: SeqId, refusal: Refusal, plan: &mut Plan) {
        self.vacate(id, plan);
        self.sequences.remove(&id);
        plan.failed.push((id, refusal));
    }

    /// Takes `id` out of the running set, its slot emptied and free.
    fn vacate(&mut self, id: SeqId, plan: &mut Plan) {
        self.running.retain(|&r| r != id);
        let Some(slot) = self.sequences.get_mut(&id).and_then(|s| s.slot.take()) else {
            return;
        };
        self.ledger.release(slot);
        plan.ops.push(KvOp::Remove { slot, from: 0 });
        self.free_slots.push(slot);
    }

    /// Gives back the oldest cached prefix; false when none is left.
    fn evict_parked(&mut self, plan: &mut Plan) -> bool {
        let Some(slot) = self.parked.pop_front() else {
            return false;
        };
        self.ledger.release(slot);
        plan.ops.push(KvOp::Remove { slot, from: 0 });
        self.free_slots.push(slot);
        true
    }

    fn take_slot(&mut self, plan: &mut Plan) -> Option<Slot> {
        if self.free_slots.is_empty() {
            self.evict_parked(plan);
        }
        self.free_slots.pop()
    }

    /// Admits waiting sequences while there is room.
    fn admit(&mut self, plan: &mut Plan, budget: &mut usize) {
        while *budget > 0 && self.running.len() < self.limits.max_running {
            let Some(&id) = self.waiting.front() else {
                return;
            };
            let Some(slot) = self.take_slot(plan) else {
                return;
            };
            if !self.start(id, slot, plan, budget) {
                return;
            }
        }
    }

    /// Starts waiting sequence `id` in `slot` with its first chunk; false
    /// (and it waits on) when the cache cannot take that chunk.
    fn start(&mut self, id: SeqId, slot: Slot, plan: &mut Plan, budget: &mut usize) -> bool {
        self.waiting.pop_front();
        self.running.push(id);
        if let Some(sequence) = self.sequences.get_mut(&id) {
            sequence.slot = Some(slot);
        }
        self.reuse_prefix(id, slot, plan);
        let Some(sequence) = self.sequences.get(&id) else {
            return false;
        };
        let start = sequence.computed;
        let len = (sequence.tokens.len() - start)
            .min(*budget)
            .min(self.share());
        if !self.grow_evicting(slot, start + len, plan) {
            self.vacate(id, plan);
            if let Some(sequence) = self.sequences.get_mut(&id) {
                sequence.computed = 0;
            }
            self.waiting.push_front(id);
            return false;
        }
        self.push_chunk(plan, id, start, len);
        *budget -= len;
        true
    }

    /// Lets a sequence that has computed nothing read the longest run of
    /// full blocks that begins its tokens, from whichever slot holds it.
    fn reuse_prefix(&mut self, id: SeqId, slot: Slot, plan: &mut Plan) {
        let Some(sequence) = self.sequences.get(&id) else {
            return;
        };
        if sequence.computed > 0 {
            return;
        }
        self.counters.prefix_queried += sequence.prompt as u64;
        // The last token is always computed: its logits give the next one.
        let usable = &sequence.tokens[..sequence.tokens.len() - 1];
        let Some((holder, blocks)) = self.ledger.longest_prefix(usable) else {
            return;
        };
        self.ledger.share(slot, holder, blocks);
        let positions = blocks * self.limits.block_size;
        plan.ops.push(KvOp::Copy {
            from: holder,
            to: slot,
            positions,
        });
        if let Some(index) = self.parked.iter().position(|&p| p == holder) {
            self.parked.remove(index);
            self.parked.push_back(holder);
        }
        let prompt = sequence.prompt;
        self.counters.prefix_hits += positions.min(prompt) as u64;
        if let Some(sequence) = self.sequences.get_mut(&id) {
            sequence.computed = positions;
        }
    }

    fn push_chunk(&self, plan: &mut Plan, id: SeqId, start: usize, len: usize) {
        let Some(sequence) = self.sequences.get(&id) else {
            return;
        };
        let Some(slot) = sequence.slot else {
            return;
        };
        plan.chunks.push(Chunk {
            id,
            slot,
            start,
            len,
            logits: start + len == sequence.tokens.len(),
        });
    }
}

#[cfg(test)]
#[path = "scheduler_tests.rs"]
mod tests;
