//! The sequence batcher's bookkeeping: each instance's slots and the
//! requests waiting in them, the backlog of sequences waiting for a slot,
//! and where each sequence that may still get requests is. Plain data,
//! changed only here and under the batcher's lock; the strategies read an
//! instance's slots through a shared reference to choose its next batch.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nereid_core::CorrelationId;

use super::types::{Farewell, Placement, SequenceState, SequenceStep};

/// A sequence that holds a slot.
pub(super) struct Live {
    id: CorrelationId,
    state: SequenceState,
    last_seen: Instant,
}

pub(super) struct Slot<T> {
    pub(super) sequence: Option<Live>,
    /// Requests with when they arrived.
    pub(super) pending: VecDeque<(T, Instant)>,
    /// When its sequence's last step was answered: its next one is
    /// expected soon.
    pub(super) answered: Option<Instant>,
}

impl<T> Slot<T> {
    fn is_free(&self) -> bool {
        self.sequence.is_none() && self.pending.is_empty()
    }
}

pub(super) struct Instance<T> {
    busy: bool,
    pub(super) slots: Vec<Slot<T>>,
    /// The slots whose requests the running batch holds.
    running: Vec<usize>,
}

impl<T> Instance<T> {
    pub(super) fn is_busy(&self) -> bool {
        self.busy
    }

    /// One more than the highest slot that holds a sequence or a request.
    pub(super) fn rows(&self) -> usize {
        self.slots
            .iter()
            .rposition(|s| !s.is_free())
            .map_or(0, |i| i + 1)
    }
}

/// A sequence that waits for a slot.
struct Waiting<T> {
    id: CorrelationId,
    items: VecDeque<(T, Instant)>,
    /// Its END request has arrived: it takes a slot only to run what it has.
    ended: bool,
    last_seen: Instant,
}

/// Where a sequence that may still get requests is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Where {
    Slot { instance: usize, slot: usize },
    Backlog,
}

/// Where a submitted request went.
pub(super) enum Admitted<T> {
    /// To a slot of this instance, which may have a batch ready now.
    Slot(usize),
    /// To the backlog.
    Backlog,
    /// Nowhere: its sequence holds no slot and it is not a START.
    NotStarted(T),
    /// Nowhere: it starts a sequence, every slot is taken and the backlog
    /// is full.
    BacklogFull(T),
}

pub(super) struct State<T> {
    instances: Vec<Instance<T>>,
    live: HashMap<CorrelationId, Where>,
    backlog: VecDeque<Waiting<T>>,
}

impl<T: SequenceStep> State<T> {
    /// `instances` instances with `slots` free slots each.
    pub(super) fn new(instances: usize, slots: usize) -> State<T> {
        let instances = (0..instances)
            .map(|_| Instance {
                busy: false,
                slots: (0..slots)
                    .map(|_| Slot {
                        sequence: None,
                        pending: VecDeque::new(),
                        answered: None,
                    })
                    .collect(),
                running: Vec::new(),
            })
            .collect();
        State {
            instances,
            live: HashMap::new(),
            backlog: VecDeque::new(),
        }
    }

    pub(super) fn instance_count(&self) -> usize {
        self.instances.len()
    }

    pub(super) fn instance(&self, instance: usize) -> &Instance<T> {
        &self.instances[instance]
    }

    /// Whether the sequence `id` holds a slot or waits for one.
    pub(super) fn is_live(&self, id: &CorrelationId) -> bool {
        self.live.contains_key(id)
    }

    /// Puts `item` behind its sequence's requests, in a free slot when it
    /// starts one, or in the backlog when every slot is taken.
    pub(super) fn admit(&mut self, item: T, now: Instant, max_backlog: usize) -> Admitted<T> {
        let id = item.correlation_id().clone();
        match self.live.get(&id).copied() {
            Some(at) => self.join(at, id, item, now),
            None if !item.is_start() => Admitted::NotStarted(item),
            None => self.begin(id, item, now, max_backlog),
        }
    }

    /// Puts `item` behind the requests of its sequence `id`, which is `at`.
    fn join(&mut self, at: Where, id: CorrelationId, item: T, now: Instant) -> Admitted<T> {
        let end = item.is_end();
        let admitted = match at {
            Where::Slot { instance, slot } => {
                let target = &mut self.instances[instance].slots[slot];
                if let Some(live) = &mut target.sequence {
                    live.last_seen = now;
                }
                target.pending.push_back((item, now));
                Admitted::Slot(instance)
            }
            Where::Backlog => {
                let waiting = self.backlog.iter_mut().find(|w| w.id == id && !w.ended);
                if let Some(waiting) = waiting {
                    waiting.items.push_back((item, now));
                    waiting.last_seen = now;
                    waiting.ended = end;
                }
                Admitted::Backlog
            }
        };
        if end {
            self.live.remove(&id);
        }
        admitted
    }

    /// Starts the sequence `id` with `item` in a free slot, or in the
    /// backlog while it has room.
    fn begin(
        &mut self,
        id: CorrelationId,
        item: T,
        now: Instant,
        max_backlog: usize,
    ) -> Admitted<T> {
        let end = item.is_end();
        let (at, admitted) = match free_slot(&self.instances) {
            Some((instance, slot)) => {
                let target = &mut self.instances[instance].slots[slot];
                target.sequence = Some(Live {
                    id: id.clone(),
                    state: SequenceState::default(),
                    last_seen: now,
                });
                target.pending.push_back((item, now));
                (Where::Slot { instance, slot }, Admitted::Slot(instance))
            }
            None if self.backlog.len() >= max_backlog => return Admitted::BacklogFull(item),
            None => {
                self.backlog.push_back(Waiting {
                    id: id.clone(),
                    items: VecDeque::from([(item, now)]),
                    ended: end,
                    last_seen: now,
                });
                (Where::Backlog, Admitted::Backlog)
            }
        };
        if !end {
            self.live.insert(id, at);
        }
        admitted
    }

    /// Takes the next request of each `picked` (slot, row) of `instance`
    /// for a batch of `rows` rows, tells each where it runs and marks the
    /// instance busy; `None` when there is nothing to take. Slots freed by
    /// an END request go to the backlog's oldest sequences.
    pub(super) fn take(
        &mut self,
        instance: usize,
        picked: Vec<(usize, usize)>,
        rows: usize,
    ) -> Option<Vec<T>> {
        let mut items = Vec::with_capacity(picked.len());
        let mut freed = Vec::new();
        let mut sent = Vec::with_capacity(picked.len());
        for (index, row) in picked {
            let slot = &mut self.instances[instance].slots[index];
            let (Some(live), Some((mut item, _))) = (&slot.sequence, slot.pending.pop_front())
            else {
                continue;
            };
            item.place(Placement {
                row,
                rows,
                state: Arc::clone(&live.state),
            });
            slot.answered = None;
            if item.is_end() && slot.pending.is_empty() {
                slot.sequence = None;
                freed.push(index);
            } else {
                sent.push(index);
            }
            items.push(item);
        }
        for slot in freed {
            self.fill(instance, slot);
        }
        if items.is_empty() {
            return None;
        }
        let target = &mut self.instances[instance];
        target.busy = true;
        target.running = sent;
        Some(items)
    }

    /// `instance` answered its batch: it is idle, and the sequences whose
    /// steps it ran are expected back.
    pub(super) fn finished(&mut self, instance: usize, now: Instant) {
        let target = &mut self.instances[instance];
        target.busy = false;
        for slot in std::mem::take(&mut target.running) {
            if let Some(slot) = target.slots.get_mut(slot)
                && slot.sequence.is_some()
            {
                slot.answered = Some(now);
            }
        }
    }

    /// Releases the slots of sequences that have had no request for
    /// `idle` and have nothing left to run; their slots go to waiting
    /// sequences. Returns each sequence released and whether the step
    /// `farewell` made for it tells the model.
    pub(super) fn release_idle(
        &mut self,
        now: Instant,
        idle: Duration,
        farewell: Option<&Farewell<T>>,
    ) -> Vec<(CorrelationId, bool)> {
        let mut released = Vec::new();
        for (i, instance) in self.instances.iter_mut().enumerate() {
            for (s, slot) in instance.slots.iter_mut().enumerate() {
                let stale = slot.pending.is_empty()
                    && slot
                        .sequence
                        .as_ref()
                        .is_some_and(|live| now.duration_since(live.last_seen) >= idle);
                if !stale {
                    continue;
                }
                // With a farewell the slot keeps its sequence until that
                // END step has gone; without, it is free now.
                let step = slot
                    .sequence
                    .as_ref()
                    .and_then(|live| farewell.and_then(|make| make(&live.id)));
                match step {
                    Some(step) => {
                        if let Some(live) = &slot.sequence {
                            released.push((i, s, live.id.clone(), false));
                        }
                        slot.pending.push_back((step, now));
                    }
                    None => {
                        if let Some(live) = slot.sequence.take() {
                            released.push((i, s, live.id, true));
                        }
                    }
                }
            }
        }
        let mut told = Vec::with_capacity(released.len());
        for (instance, slot, id, freed) in released {
            if self.live.get(&id) == Some(&Where::Slot { instance, slot }) {
                self.live.remove(&id);
            }
            if freed {
                self.fill(instance, slot);
            }
            told.push((id, !freed));
        }
        told
    }

    /// Gives a free slot to the oldest waiting sequence.
    fn fill(&mut self, instance: usize, slot: usize) {
        let Some(waiting) = self.backlog.pop_front() else {
            return;
        };
        if !waiting.ended {
            self.live
                .insert(waiting.id.clone(), Where::Slot { instance, slot });
        }
        let target = &mut self.instances[instance].slots[slot];
        target.sequence = Some(Live {
            id: waiting.id,
            state: SequenceState::default(),
            last_seen: waiting.last_seen,
        });
        target.pending = waiting.items;
        target.answered = None;
    }
}

/// A free slot on the instance with the fewest sequences (the lowest slot
/// there), so that sequences spread over instances.
fn free_slot<T>(instances: &[Instance<T>]) -> Option<(usize, usize)> {
    instances
        .iter()
        .enumerate()
        .filter_map(|(i, instance)| {
            let used = instance.slots.iter().filter(|s| !s.is_free()).count();
            let free = instance.slots.iter().position(Slot::is_free)?;
            Some((used, i, free))
        })
        .min()
        .map(|(_, i, slot)| (i, slot))
}
