//! The sequence batcher's slots, backlog and reaping, with instance queues
//! read by the test, on a paused clock: the batcher acts only inside the
//! test's own calls (a submission, a dropped permit, a tick), so every
//! batch is in its queue when the call returns and the tests never sleep.

use std::time::Duration;

use nereid_core::Error;

use super::*;
use crate::work_queue::{WorkReceiver, unbounded};

#[derive(Debug)]
struct Step {
    id: CorrelationId,
    n: u32,
    start: bool,
    end: bool,
    placed: Option<Placement>,
    rejected: crossbeam_channel::Sender<(u32, String)>,
}

impl SequenceStep for Step {
    fn correlation_id(&self) -> &CorrelationId {
        &self.id
    }
    fn is_start(&self) -> bool {
        self.start
    }
    fn is_end(&self) -> bool {
        self.end
    }
    fn place(&mut self, placement: Placement) {
        self.placed = Some(placement);
    }
    fn reject(self, error: Error) {
        let _ = self.rejected.send((self.n, error.message().to_string()));
    }
}

struct Rig {
    batcher: SequenceBatcher<Step>,
    clock: Arc<PausedClock>,
    queues: Vec<WorkReceiver<Dispatch<Step>>>,
    rejected: crossbeam_channel::Receiver<(u32, String)>,
    reject_to: crossbeam_channel::Sender<(u32, String)>,
}

fn rig(instances: usize, slots: usize, idle: Duration, max_backlog: usize) -> Rig {
    rig_with(direct(0, 0.0), instances, slots, idle, max_backlog)
}

fn direct(delay_ms: u64, minimum_slot_utilization: f32) -> Strategy {
    Strategy::Direct {
        max_queue_delay: Duration::from_millis(delay_ms),
        minimum_slot_utilization,
    }
}

fn oldest(max_batch_size: usize, preferred: &[usize], delay_ms: u64) -> Strategy {
    Strategy::Oldest {
        max_batch_size,
        preferred: preferred.to_vec(),
        max_queue_delay: Duration::from_millis(delay_ms),
    }
}

fn rig_with(
    strategy: Strategy,
    instances: usize,
    slots: usize,
    idle: Duration,
    max_backlog: usize,
) -> Rig {
    let (senders, queues): (Vec<_>, Vec<_>) = (0..instances).map(|_| unbounded()).unzip();
    let config = SequenceConfig {
        model: "acc".into(),
        strategy,
        slots_per_instance: slots,
        idle,
        max_backlog,
        reaped: Default::default(),
    };
    let (reject_to, rejected) = crossbeam_channel::unbounded();
    let clock = PausedClock::new();
    Rig {
        batcher: SequenceBatcher::start_paused(config, senders, None, Arc::clone(&clock)),
        clock,
        queues,
        rejected,
        reject_to,
    }
}

impl Rig {
    /// Submits a step a microsecond after the one before, so that arrival
    /// order is time order.
    fn send(&self, id: u64, n: u32, start: bool, end: bool) {
        self.clock.advance(Duration::from_micros(1));
        self.batcher
            .submit(Step {
                id: CorrelationId::Int(id),
                n,
                start,
                end,
                placed: None,
                rejected: self.reject_to.clone(),
            })
            .unwrap();
    }

    /// Moves the clock on by `ms` and lets the batcher act on it.
    fn wait(&self, ms: u64) {
        self.clock.advance(Duration::from_millis(ms));
        self.batcher.tick();
    }

    /// The refused request's step number and the error's words.
    fn refused(&self) -> (u32, String) {
        self.rejected.try_recv().expect("a refusal")
    }

    /// The batch `instance` has been sent: (step number, row, rows) per
    /// request.
    fn batch(&self, instance: usize) -> (Vec<(u32, usize, usize)>, Option<SlotPermit>) {
        let dispatch = self.queues[instance]
            .recv_timeout(Duration::ZERO)
            .expect("a batch");
        let rows = dispatch
            .items
            .iter()
            .map(|s| {
                let p = s.placed.as_ref().unwrap();
                (s.n, p.row, p.rows)
            })
            .collect();
        (rows, dispatch.permit)
    }

    fn nothing(&self, instance: usize) {
        assert!(self.queues[instance].recv_timeout(Duration::ZERO).is_err());
    }
}

const LONG: Duration = Duration::from_secs(600);

#[test]
fn sequences_share_a_batch_one_request_each_in_order() {
    let r = rig(1, 2, LONG, 8);
    r.send(7, 1, true, false);
    let (first, permit) = r.batch(0);
    assert_eq!(first, [(1, 0, 1)]);
    // While the instance runs, a second sequence starts and the first
    // sends two more: one request per sequence per batch.
    r.send(9, 10, true, false);
    r.send(7, 2, false, false);
    r.send(7, 3, false, true);
    r.nothing(0);
    drop(permit);
    let (second, permit) = r.batch(0);
    assert_eq!(second, [(2, 0, 2), (10, 1, 2)]);
    drop(permit);
    let (third, _permit) = r.batch(0);
    assert_eq!(third, [(3, 0, 2)]);
}

#[test]
fn a_request_without_start_for_an_unknown_sequence_is_refused() {
    let r = rig(1, 1, LONG, 8);
    r.send(5, 1, false, false);
    let (n, message) = r.refused();
    assert_eq!(n, 1);
    assert_eq!(
        message,
        "inference request for sequence 5 to model 'acc' must specify the START flag on the first request of the sequence"
    );
    // After its END, a sequence is unknown again.
    r.send(6, 2, true, true);
    let (batch, _permit) = r.batch(0);
    assert_eq!(batch, [(2, 0, 1)]);
    r.send(6, 3, false, false);
    assert_eq!(r.refused().0, 3);
}

#[test]
fn a_waiting_sequence_takes_the_slot_its_predecessor_ends() {
    let r = rig(1, 1, LONG, 8);
    r.send(1, 1, true, false);
    let (batch, permit) = r.batch(0);
    assert_eq!(batch, [(1, 0, 1)]);
    r.send(2, 20, true, false);
    r.send(2, 21, false, true);
    r.send(1, 2, false, true);
    drop(permit);
    let (batch, permit) = r.batch(0);
    assert_eq!(batch, [(2, 0, 1)]);
    drop(permit);
    let (batch, permit) = r.batch(0);
    assert_eq!(batch, [(20, 0, 1)]);
    drop(permit);
    let (batch, _permit) = r.batch(0);
    assert_eq!(batch, [(21, 0, 1)]);
}

#[test]
fn sequences_spread_over_instances() {
    let r = rig(2, 4, LONG, 8);
    r.send(1, 1, true, false);
    r.send(2, 2, true, false);
    assert_eq!(r.batch(0).0, [(1, 0, 1)]);
    assert_eq!(r.batch(1).0, [(2, 0, 1)]);
}

#[test]
fn a_full_backlog_refuses_new_sequences_at_once() {
    let r = rig(1, 1, LONG, 1);
    r.send(1, 1, true, false);
    let _running = r.batch(0);
    r.send(2, 2, true, false);
    r.send(3, 3, true, false);
    let (n, message) = r.refused();
    assert_eq!(n, 3);
    assert!(message.contains("model 'acc' rejected"), "{message}");
}

#[test]
fn an_idle_sequence_loses_its_slot_to_a_waiting_one() {
    let r = rig(1, 1, Duration::from_millis(100), 8);
    r.send(1, 1, true, false);
    let (_, permit) = r.batch(0);
    drop(permit);
    r.send(2, 2, true, false);
    r.wait(99);
    r.nothing(0);
    assert_eq!(r.batcher.reaped(), 0);
    r.wait(1);
    assert_eq!(r.batch(0).0, [(2, 0, 1)]);
    assert_eq!(r.batcher.reaped(), 1);
    r.send(1, 3, false, false);
    assert_eq!(r.refused().0, 3);
}

#[test]
fn every_request_of_a_sequence_sees_the_same_state() {
    let r = rig(1, 1, LONG, 8);
    r.send(1, 1, true, false);
    let d = r.queues[0].recv_timeout(Duration::ZERO).unwrap();
    let state = d.items[0].placed.as_ref().unwrap().state.clone();
    *state.lock() = Some(Vec::new());
    drop(d);
    r.send(1, 2, false, true);
    let d = r.queues[0].recv_timeout(Duration::ZERO).unwrap();
    let again = &d.items[0].placed.as_ref().unwrap().state;
    assert!(Arc::ptr_eq(&state, again));
}

#[test]
fn oldest_batches_a_preferred_size_oldest_first() {
    let r = rig_with(oldest(4, &[2], 60_000), 1, 4, LONG, 8);
    // One sequence running keeps the instance busy while three start.
    r.send(1, 1, true, false);
    let (first, permit) = r.batch(0);
    assert_eq!(first, [(1, 0, 1)]);
    r.send(3, 30, true, false);
    r.send(2, 20, true, false);
    drop(permit);
    // Two of three live sequences have a request: the preferred size 2
    // goes at once, oldest first, rows in that order.
    assert_eq!(r.batch(0).0, [(30, 0, 2), (20, 1, 2)]);
}

#[test]
fn oldest_holds_a_batch_below_every_preferred_size_for_the_delay() {
    let r = rig_with(oldest(8, &[4], 200), 1, 8, LONG, 8);
    r.send(1, 1, true, false);
    let (_, permit) = r.batch(0);
    r.send(2, 2, true, false);
    drop(permit);
    // Sequence 2 has a request, sequence 1 none: one of two live, below
    // the preferred 4, so it waits for the delay, then goes.
    r.nothing(0);
    r.wait(199);
    r.nothing(0);
    r.wait(1);
    assert_eq!(r.batch(0).0, [(2, 0, 1)]);
}

#[test]
fn oldest_sends_at_once_when_every_sequence_is_ready() {
    let r = rig_with(oldest(8, &[4], 60_000), 1, 8, LONG, 8);
    r.send(1, 1, true, false);
    let (_, permit) = r.batch(0);
    r.send(2, 2, true, false);
    r.send(1, 3, false, false);
    drop(permit);
    // Both live sequences have a request: waiting cannot add a third.
    assert_eq!(r.batch(0).0, [(2, 0, 2), (3, 1, 2)]);
}

#[test]
fn direct_waits_for_the_slot_utilization_at_most_the_delay() {
    // Four slots, at least half with a request, at most 200 ms.
    let r = rig_with(direct(200, 0.5), 1, 4, LONG, 8);
    r.send(1, 1, true, false);
    r.wait(150);
    r.nothing(0);
    r.send(2, 2, true, false);
    // Two of four slots: the batch goes.
    assert_eq!(r.batch(0).0, [(1, 0, 2), (2, 1, 2)]);
}

#[test]
fn direct_sends_below_the_utilization_once_the_delay_passed() {
    let r = rig_with(direct(100, 0.75), 1, 4, LONG, 8);
    r.send(1, 1, true, false);
    r.wait(99);
    r.nothing(0);
    r.wait(1);
    assert_eq!(r.batch(0).0, [(1, 0, 1)]);
}

#[test]
fn oldest_waits_for_answered_sequences_to_reach_a_larger_preferred_size() {
    let r = rig_with(oldest(4, &[2, 4], 60_000), 1, 4, LONG, 8);
    for id in 1..=4 {
        r.send(id, id as u32, true, false);
    }
    // The first arrives alone on the idle instance: one of one live.
    let (first, permit) = r.batch(0);
    assert_eq!(first, [(1, 0, 1)]);
    drop(permit);
    // Three wait: the preferred size 2 is reached, but sequence 1 was just
    // answered and with it the preferred size 4 is in reach.
    r.nothing(0);
    r.send(1, 11, false, false);
    let (second, permit) = r.batch(0);
    assert_eq!(
        second.iter().map(|s| s.0).collect::<Vec<_>>(),
        [2, 3, 4, 11]
    );
    drop(permit);
    // All four answered; two come back, then the other two.
    r.send(2, 12, false, false);
    r.send(3, 13, false, false);
    r.nothing(0);
    r.send(4, 14, false, false);
    r.send(1, 15, false, false);
    let (third, _permit) = r.batch(0);
    assert_eq!(
        third.iter().map(|s| s.0).collect::<Vec<_>>(),
        [12, 13, 14, 15]
    );
}

#[test]
fn a_reaped_sequence_gets_its_farewell_before_the_slot_goes() {
    let (sender, queue) = unbounded();
    let (reject_to, _rejected) = crossbeam_channel::unbounded();
    let config = SequenceConfig {
        model: "acc".into(),
        strategy: direct(0, 0.0),
        slots_per_instance: 1,
        idle: Duration::from_millis(100),
        max_backlog: 8,
        reaped: Default::default(),
    };
    let to = reject_to.clone();
    let farewell: Farewell<Step> = Box::new(move |id| {
        Some(Step {
            id: id.clone(),
            n: 999,
            start: false,
            end: true,
            placed: None,
            rejected: to.clone(),
        })
    });
    let clock = PausedClock::new();
    let batcher =
        SequenceBatcher::start_paused(config, vec![sender], Some(farewell), Arc::clone(&clock));
    let step = |id, n, start| Step {
        id: CorrelationId::Int(id),
        n,
        start,
        end: false,
        placed: None,
        rejected: reject_to.clone(),
    };
    batcher.submit(step(1, 1, true)).unwrap();
    drop(queue.recv_timeout(Duration::ZERO).unwrap());
    batcher.submit(step(2, 2, true)).unwrap();
    clock.advance(Duration::from_millis(100));
    batcher.tick();
    // Sequence 1's END step goes first, then sequence 2 takes the slot.
    let farewell = queue.recv_timeout(Duration::ZERO).unwrap();
    let ids: Vec<_> = farewell.items.iter().map(|s| (s.n, s.end)).collect();
    assert_eq!(ids, [(999, true)]);
    drop(farewell);
    let next = queue.recv_timeout(Duration::ZERO).unwrap();
    assert_eq!(next.items.iter().map(|s| s.n).collect::<Vec<_>>(), [2]);
    assert_eq!(batcher.reaped(), 1);
}

#[test]
fn requests_from_many_threads_while_the_instance_runs_join_its_next_batch() {
    // A slot for the running sequence and one for each thread's.
    let r = rig(1, 9, LONG, 8);
    r.send(1, 0, true, false);
    let (_, permit) = r.batch(0);
    // Eight threads each start a sequence while the one batch runs.
    std::thread::scope(|scope| {
        for id in 2..10u64 {
            let r = &r;
            scope.spawn(move || {
                r.batcher
                    .submit(Step {
                        id: CorrelationId::Int(id),
                        n: id as u32,
                        start: true,
                        end: false,
                        placed: None,
                        rejected: r.reject_to.clone(),
                    })
                    .unwrap();
            });
        }
    });
    r.nothing(0);
    drop(permit);
    let (next, _permit) = r.batch(0);
    let mut steps: Vec<u32> = next.iter().map(|(n, _, _)| *n).collect();
    steps.sort_unstable();
    assert_eq!(
        steps,
        (2..10).collect::<Vec<u32>>(),
        "one batch of all eight"
    );
}
