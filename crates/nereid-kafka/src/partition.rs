//! One input partition's bookkeeping, as plain structs: which offsets were
//! taken and not yet delivered (what may be committed), and the lanes that
//! put answers back in input order. No I/O here; the consumer and the
//! producer callbacks call these under one lock.

use std::collections::{BTreeSet, HashMap, VecDeque};

/// Offsets taken from a partition and not yet done (their output or dead
/// letter acknowledged by the broker). The commit position is the lowest
/// offset not done: every record below it is done.
#[derive(Debug, Default)]
pub struct Offsets {
    outstanding: BTreeSet<i64>,
    /// One past the highest offset taken.
    next: Option<i64>,
    /// The position the broker confirmed last.
    committed: Option<i64>,
    /// The position of the commit on its way, if any.
    requested: Option<i64>,
}

impl Offsets {
    pub fn take(&mut self, offset: i64) {
        self.outstanding.insert(offset);
        self.next = Some(self.next.map_or(offset + 1, |n| n.max(offset + 1)));
    }

    pub fn done(&mut self, offset: i64) {
        self.outstanding.remove(&offset);
    }

    /// Records taken and not done.
    pub fn in_flight(&self) -> usize {
        self.outstanding.len()
    }

    /// The offset to commit: the next record to read after a restart.
    pub fn position(&self) -> Option<i64> {
        self.outstanding.first().copied().or(self.next)
    }

    /// The position to commit now, when it moved past what was committed
    /// or asked for; marks it asked for.
    pub fn take_commit(&mut self) -> Option<i64> {
        let position = self.position()?;
        let known = self.requested.max(self.committed);
        if known.is_some_and(|k| k >= position) {
            return None;
        }
        self.requested = Some(position);
        Some(position)
    }

    /// The broker's answer to a commit of `position`.
    pub fn commit_result(&mut self, position: i64, ok: bool) {
        if ok {
            self.committed = Some(self.committed.map_or(position, |c| c.max(position)));
        } else if self.requested == Some(position) {
            self.requested = self.committed;
        }
    }

    #[cfg(test)]
    pub fn committed(&self) -> Option<i64> {
        self.committed
    }
}

/// Answers waiting to be sent in input order. A lane is a partition (every
/// record in one lane) or a key within it; a slot leaves its lane only when
/// every slot before it has its outcome.
#[derive(Debug)]
pub struct Lanes<T> {
    lanes: HashMap<u64, VecDeque<Slot<T>>>,
}

#[derive(Debug)]
struct Slot<T> {
    offset: i64,
    outcome: Option<T>,
}

impl<T> Default for Lanes<T> {
    fn default() -> Self {
        Lanes {
            lanes: HashMap::new(),
        }
    }
}

impl<T> Lanes<T> {
    /// Queues the record at `offset` behind those taken before it in `lane`.
    pub fn push(&mut self, lane: u64, offset: i64) {
        self.lanes.entry(lane).or_default().push_back(Slot {
            offset,
            outcome: None,
        });
    }

    /// Gives the record at `offset` its outcome and returns what may be sent
    /// now, in order: this outcome and those after it already there, once
    /// nothing before them is still running.
    pub fn complete(&mut self, lane: u64, offset: i64, outcome: T) -> Vec<T> {
        let Some(queue) = self.lanes.get_mut(&lane) else {
            return Vec::new();
        };
        if let Some(slot) = queue.iter_mut().find(|s| s.offset == offset) {
            slot.outcome = Some(outcome);
        }
        let mut ready = Vec::new();
        while let Some(outcome) = queue.front_mut().and_then(|s| s.outcome.take()) {
            queue.pop_front();
            ready.push(outcome);
        }
        if queue.is_empty() {
            self.lanes.remove(&lane);
        }
        ready
    }

    /// Records queued and not yet sent.
    #[cfg(test)]
    pub fn waiting(&self) -> usize {
        self.lanes.values().map(VecDeque::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_position_waits_for_the_lowest_record_not_done() {
        let mut offsets = Offsets::default();
        assert_eq!(offsets.position(), None);
        for offset in 10..14 {
            offsets.take(offset);
        }
        assert_eq!(offsets.position(), Some(10));
        offsets.done(11);
        offsets.done(12);
        assert_eq!(offsets.position(), Some(10), "10 still runs");
        assert_eq!(offsets.in_flight(), 2);
        offsets.done(10);
        assert_eq!(offsets.position(), Some(13));
        offsets.done(13);
        assert_eq!(offsets.position(), Some(14), "all done: the next to read");
    }

    #[test]
    fn a_position_is_committed_once_and_again_after_a_failure() {
        let mut offsets = Offsets::default();
        offsets.take(0);
        assert_eq!(offsets.take_commit(), Some(0), "nothing committed yet");
        assert_eq!(offsets.take_commit(), None, "asked for already");
        offsets.done(0);
        assert_eq!(offsets.take_commit(), Some(1));
        offsets.commit_result(1, false);
        assert_eq!(
            offsets.take_commit(),
            Some(1),
            "the failed commit is retried"
        );
        offsets.commit_result(1, true);
        assert_eq!(offsets.committed(), Some(1));
        assert_eq!(offsets.take_commit(), None);
        offsets.take(1);
        offsets.done(1);
        assert_eq!(offsets.take_commit(), Some(2));
    }

    #[test]
    fn a_late_answer_holds_back_those_after_it_in_its_lane_only() {
        let mut lanes = Lanes::default();
        for offset in 0..3 {
            lanes.push(7, offset);
        }
        lanes.push(8, 3);
        assert_eq!(lanes.complete(7, 1, "b"), Vec::<&str>::new());
        assert_eq!(lanes.complete(7, 2, "c"), Vec::<&str>::new());
        assert_eq!(lanes.complete(8, 3, "d"), vec!["d"], "another lane goes on");
        assert_eq!(lanes.waiting(), 3);
        assert_eq!(lanes.complete(7, 0, "a"), vec!["a", "b", "c"]);
        assert_eq!(lanes.waiting(), 0);
    }
}
