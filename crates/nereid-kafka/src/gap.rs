//! The check that a broker skips no offset unseen, as a plain struct: each
//! partition's next expected offset against the one served. A record past
//! it means the broker skipped offsets. Kafka does so only where no record
//! is (compaction, transaction markers); tansu 0.6.0 also does when a
//! fetch starts inside a record batch (it answers with the next batch, or
//! with nothing when the batch is the last), which every pause, restart
//! and rebalance can cause. So a jump first reads again from before it,
//! stepping further back while the broker still jumps; only a jump that a
//! read from before it also makes is a gap.

/// How far before the expected offset the first read again starts; each
/// further one starts twice as far back.
const FIRST_STEP: i64 = 64;
/// How far back the start of the last read may be and still be where a
/// read again starts first (with tansu it is a batch's first record, so
/// that read finds the batch in one step).
const ANCHOR_REACH: i64 = 4096;

/// One partition's read, from the consumer's side.
#[derive(Debug, Default)]
pub struct Stream {
    /// The offset the next record should have; unknown until the group's
    /// committed position or the first record says.
    expected: Option<i64>,
    /// The read started again from before `expected`, looking for skipped
    /// records.
    reread: Option<Reread>,
    /// The first offset the latest read that did not jump served: a
    /// position the broker serves from (with tansu, a batch's first record).
    anchor: Option<i64>,
    /// The read started (again) and has served nothing yet.
    fresh: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Reread {
    from: i64,
    /// A record below the expected offset came since: the read now runs
    /// from before the missing offsets.
    below: bool,
}

/// What to do with a record the broker served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// The record expected: take it.
    Take,
    /// A record taken before (a read again passes it): drop it.
    Seen,
    /// Offsets were skipped: read again from this offset (seek).
    ReadFrom(i64),
    /// Offsets `first` to `last` are not there: account for them, then
    /// take the record.
    Gap { first: i64, last: i64 },
}

/// Why a partition with records left serves none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stall {
    /// Read again from this offset (seek).
    ReadFrom(i64),
    /// A read from before `first` came up to it and stopped, though the
    /// broker says it has offsets up to `last`: none of them is a record
    /// it serves (transaction markers, aborted records), or it does not
    /// serve them.
    Unreadable { first: i64, last: i64 },
}

impl Stream {
    /// A read that resumes from the group's committed `position` (none: the
    /// first record served sets it).
    pub fn start(position: Option<i64>) -> Stream {
        Stream {
            expected: position,
            fresh: true,
            ..Stream::default()
        }
    }

    /// The read starts again (a resume, a seek): its first record is an
    /// anchor.
    pub fn restarted(&mut self) {
        self.fresh = true;
    }

    pub fn expected(&self) -> Option<i64> {
        self.expected
    }

    /// The record at `offset` came. `recover`: read again on a jump (else
    /// every jump is a gap at once); `floor`: the partition's first offset
    /// (no read starts before it).
    pub fn arrive(&mut self, offset: i64, recover: bool, floor: i64) -> Arrival {
        if std::mem::take(&mut self.fresh) && self.expected.is_none_or(|e| offset <= e) {
            self.anchor = Some(offset);
        }
        let Some(expected) = self.expected else {
            self.expected = Some(offset + 1);
            return Arrival::Take;
        };
        if offset < expected {
            if let Some(reread) = &mut self.reread {
                reread.below = true;
            }
            return Arrival::Seen;
        }
        if offset > expected && recover {
            let confirmed = self.reread.is_some_and(|r| r.below);
            if let Some(from) = (!confirmed).then(|| self.read_again(floor)).flatten() {
                return Arrival::ReadFrom(from);
            }
        }
        self.reread = None;
        self.expected = Some(offset + 1);
        match offset > expected {
            true => Arrival::Gap {
                first: expected,
                last: offset - 1,
            },
            false => Arrival::Take,
        }
    }

    /// The partition served nothing for a while; the broker says its
    /// offsets end before `high`. None: nothing is missing.
    pub fn stalled(&mut self, high: i64, floor: i64) -> Option<Stall> {
        let expected = self.expected.filter(|&e| e < high)?;
        let unreadable = Stall::Unreadable {
            first: expected,
            last: high - 1,
        };
        if self.reread.is_some_and(|r| r.below) {
            return Some(unreadable);
        }
        Some(self.read_again(floor).map_or(unreadable, Stall::ReadFrom))
    }

    /// Where the next read again starts: the last read's start when it is
    /// near, else `FIRST_STEP` back, then twice as far back as the read
    /// before; None once a read from `floor` jumped too.
    fn read_again(&mut self, floor: i64) -> Option<i64> {
        let expected = self.expected?;
        let from = match self.reread {
            Some(r) if r.from <= floor => return None,
            Some(r) => expected - 2 * (expected - r.from),
            None => self
                .anchor
                .filter(|&a| a < expected && expected - a <= ANCHOR_REACH)
                .unwrap_or(expected - FIRST_STEP),
        }
        .max(floor);
        if from >= expected {
            return None;
        }
        self.reread = Some(Reread { from, below: false });
        self.fresh = true;
        Some(from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_in_order_are_taken() {
        let mut stream = Stream::start(Some(10));
        assert_eq!(stream.arrive(10, true, 0), Arrival::Take);
        assert_eq!(stream.arrive(11, true, 0), Arrival::Take);
        assert_eq!(stream.expected(), Some(12));
        let mut fresh = Stream::start(None);
        assert_eq!(
            fresh.arrive(500, true, 0),
            Arrival::Take,
            "no position: the first sets it"
        );
        assert_eq!(fresh.expected(), Some(501));
    }

    #[test]
    fn a_jump_reads_again_from_further_back_until_the_records_come() {
        // tansu: a fetch from 100 (inside the batch 0..=119) serves 120.
        let mut stream = Stream::start(Some(100));
        assert_eq!(stream.arrive(120, true, 0), Arrival::ReadFrom(36));
        // From 36, inside the same batch, it serves 120 again: further back.
        assert_eq!(stream.arrive(120, true, 0), Arrival::ReadFrom(0));
        // From 0: every record before 100 again, then 100.
        assert_eq!(stream.arrive(0, true, 0), Arrival::Seen);
        assert_eq!(stream.arrive(99, true, 0), Arrival::Seen);
        assert_eq!(stream.arrive(100, true, 0), Arrival::Take);
        assert_eq!(stream.arrive(101, true, 0), Arrival::Take);
    }

    #[test]
    fn a_jump_that_a_read_from_before_it_makes_too_is_a_gap() {
        // Compaction: nothing at 100..=104.
        let mut stream = Stream::start(Some(100));
        assert_eq!(stream.arrive(105, true, 0), Arrival::ReadFrom(36));
        assert_eq!(stream.arrive(36, true, 0), Arrival::Seen);
        assert_eq!(stream.arrive(99, true, 0), Arrival::Seen);
        assert_eq!(
            stream.arrive(105, true, 0),
            Arrival::Gap {
                first: 100,
                last: 104
            }
        );
        assert_eq!(stream.arrive(106, true, 0), Arrival::Take);
    }

    #[test]
    fn records_before_the_partitions_start_are_a_gap_once_read_from_it() {
        // Retention removed 0..=499 below a position of 10.
        let mut stream = Stream::start(Some(10));
        assert_eq!(
            stream.arrive(500, true, 500),
            Arrival::Gap {
                first: 10,
                last: 499
            }
        );
        let mut stream = Stream::start(Some(100));
        assert_eq!(stream.arrive(700, true, 50), Arrival::ReadFrom(50));
        assert_eq!(
            stream.arrive(700, true, 50),
            Arrival::Gap {
                first: 100,
                last: 699
            }
        );
    }

    #[test]
    fn without_recovery_a_jump_is_a_gap_at_once() {
        let mut stream = Stream::start(Some(7));
        assert_eq!(
            stream.arrive(9, false, 0),
            Arrival::Gap { first: 7, last: 8 }
        );
        assert_eq!(stream.arrive(10, false, 0), Arrival::Take);
    }

    #[test]
    fn the_next_read_again_starts_at_the_last_reads_first_record() {
        let mut stream = Stream::start(Some(100));
        assert_eq!(stream.arrive(120, true, 0), Arrival::ReadFrom(36));
        assert_eq!(stream.arrive(120, true, 0), Arrival::ReadFrom(0));
        assert_eq!(stream.arrive(0, true, 0), Arrival::Seen);
        for offset in 1..=150 {
            stream.arrive(offset, true, 0);
        }
        // Paused, resumed at 151 inside the same batch: served 200.
        stream.restarted();
        assert_eq!(stream.arrive(200, true, 0), Arrival::ReadFrom(0));
    }

    #[test]
    fn a_silent_partition_is_read_again_then_said_unreadable() {
        // tansu: a fetch from inside the last batch serves nothing.
        let mut stream = Stream::start(Some(100));
        assert_eq!(stream.stalled(100, 0), None, "nothing is missing");
        assert_eq!(stream.stalled(130, 0), Some(Stall::ReadFrom(36)));
        assert_eq!(stream.stalled(130, 0), Some(Stall::ReadFrom(0)));
        assert_eq!(
            stream.stalled(130, 0),
            Some(Stall::Unreadable {
                first: 100,
                last: 129
            }),
            "a read from the start served nothing either"
        );
        // Transaction markers at the end: records up to 99 came again,
        // then nothing.
        let mut stream = Stream::start(Some(100));
        assert_eq!(stream.stalled(102, 0), Some(Stall::ReadFrom(36)));
        assert_eq!(stream.arrive(99, true, 0), Arrival::Seen);
        assert_eq!(
            stream.stalled(102, 0),
            Some(Stall::Unreadable {
                first: 100,
                last: 101
            })
        );
    }
}
