//! Triton's sequence batcher. Every instance has sequence slots:
//! `max_batch_size` of them with the direct strategy (one for a model
//! without batching), `max_candidate_sequences` with the oldest. A sequence
//! takes a free slot with its START request and keeps it until its END
//! request has been sent to the instance, or until it has been idle for
//! `max_sequence_idle_microseconds`; sequences that find every slot taken
//! wait in a bounded backlog and take slots as they free. An idle instance
//! gets one batch holding at most one request per sequence, so a sequence's
//! requests run one after another, in order:
//! - direct: the next request of each of its slots that has one, each at
//!   its slot's row;
//! - oldest: the next requests of its candidate sequences, oldest first, up
//!   to `max_batch_size`, as the dynamic batcher forms batches: at once when
//!   they reach a preferred size, else when the oldest has waited
//!   `max_queue_delay_microseconds` (at once when that is 0).
//!
//! Where a request runs is told to it ([`Placement`]): its slot's row in the
//! batch, the rows the batch has (rows of slots without a request are the
//! engine's to fill, with READY false), and the sequence's state, which
//! lives as long as the sequence does.
//!
//! The state (`state.rs`: slots, backlog, live sequences) is plain data
//! behind a mutex: submission, the answer of a batch (its permit) and the
//! reaper each lock it briefly; nothing waits while holding it. Each
//! strategy's choice of a batch (`strategy.rs`) only reads it. Every
//! decision reads the time from the batcher's [`Clock`] (`clock.rs`, with
//! the reaper thread), which tests pause and move by hand. This file ties
//! them together: it routes each request, sends the batches chosen and
//! looks for the next when one is answered or time passes. What the
//! engine sees of the batcher besides [`SequenceBatcher`] is in
//! `types.rs`.

mod clock;
mod state;
mod strategy;
mod types;

use std::sync::Arc;
use std::time::{Duration, Instant};

use nereid_core::Error;
use parking_lot::Mutex;

use crate::work_queue::WorkSender;
use crate::{Dispatch, SlotPermit};
#[cfg(test)]
use clock::PausedClock;
use clock::{Clock, Ticker};
use state::{Admitted, State};
use strategy::Choice;

pub use nereid_core::CorrelationId;
pub use types::{
    DEFAULT_MAX_BACKLOG, Farewell, Placement, SequenceConfig, SequenceState, SequenceStep, Strategy,
};

struct Shared<T> {
    config: SequenceConfig,
    state: Mutex<State<T>>,
    queues: Vec<WorkSender<Dispatch<T>>>,
    ticker: Arc<Ticker>,
    farewell: Option<Farewell<T>>,
    clock: Clock,
}

/// The sending side of a model's sequence batcher.
pub struct SequenceBatcher<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Drop for SequenceBatcher<T> {
    fn drop(&mut self) {
        self.shared.ticker.wake_now();
    }
}

impl<T> std::fmt::Debug for SequenceBatcher<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SequenceBatcher")
            .field("model", &self.shared.config.model)
            .finish_non_exhaustive()
    }
}

/// A batch to send, found under the lock and sent after it.
type Outgoing<T> = (usize, Vec<T>);

impl<T: SequenceStep> SequenceBatcher<T> {
    /// A batcher sending each instance's batches to its own queue in
    /// `queues`; starts the thread that reaps idle sequences.
    pub fn start(
        config: SequenceConfig,
        queues: Vec<WorkSender<Dispatch<T>>>,
    ) -> Result<SequenceBatcher<T>, Error> {
        Self::start_with(config, queues, None)
    }

    /// As [`SequenceBatcher::start`]; a sequence reaped for being idle is
    /// sent the step `farewell` makes before its slot is released, so that
    /// the model learns it ended (Triton tells it nothing).
    pub fn start_with(
        config: SequenceConfig,
        queues: Vec<WorkSender<Dispatch<T>>>,
        farewell: Option<Farewell<T>>,
    ) -> Result<SequenceBatcher<T>, Error> {
        Self::start_on(config, queues, farewell, Clock::System)
    }

    /// As [`SequenceBatcher::start_with`], on a paused clock: nothing
    /// happens by itself as time passes; [`SequenceBatcher::tick`] acts.
    #[cfg(test)]
    pub(crate) fn start_paused(
        config: SequenceConfig,
        queues: Vec<WorkSender<Dispatch<T>>>,
        farewell: Option<Farewell<T>>,
        clock: Arc<PausedClock>,
    ) -> SequenceBatcher<T> {
        Self::start_on(config, queues, farewell, Clock::Paused(clock))
            .expect("no thread to start on a paused clock")
    }

    fn start_on(
        config: SequenceConfig,
        queues: Vec<WorkSender<Dispatch<T>>>,
        farewell: Option<Farewell<T>>,
        clock: Clock,
    ) -> Result<SequenceBatcher<T>, Error> {
        let state = State::new(queues.len(), config.slots_per_instance.max(1));
        let shared = Arc::new(Shared {
            config,
            state: Mutex::new(state),
            queues,
            ticker: Arc::default(),
            farewell,
            clock,
        });
        if matches!(shared.clock, Clock::System) {
            start_reaper(&shared)?;
        }
        Ok(SequenceBatcher { shared })
    }

    /// Routes `item` to its sequence's slot, a free slot (a START) or the
    /// backlog, and sends whatever batch that makes ready.
    pub fn submit(&self, item: T) -> Result<(), Error> {
        Shared::submit(&self.shared, item, self.shared.clock.now())
    }

    /// Sequences released for being idle, since the start.
    pub fn reaped(&self) -> u64 {
        self.shared
            .config
            .reaped
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Releases the sequences idle now and sends the batches whose queue
    /// delay has passed, as the reaper thread does now and then.
    pub fn tick(&self) {
        Shared::reap(&self.shared, self.shared.clock.now());
    }
}

impl<T: SequenceStep> Shared<T> {
    fn submit(this: &Arc<Self>, item: T, now: Instant) -> Result<(), Error> {
        let model = &this.config.model;
        let id = item.correlation_id().clone();
        let mut state = this.state.lock();
        if item.is_start() && state.is_live(&id) {
            tracing::warn!(model = %model, sequence = %id, "a sequence started again before it ended; the previous one ends early");
        }
        let out = match state.admit(item, now, this.config.max_backlog) {
            Admitted::Slot(instance) => this.next_batch(&mut state, instance, now),
            Admitted::Backlog => None,
            Admitted::NotStarted(item) => {
                drop(state);
                item.reject(Error::invalid_argument(format!(
                    "inference request for sequence {id} to model '{model}' must specify the START flag on the first request of the sequence"
                )));
                return Ok(());
            }
            Admitted::BacklogFull(item) => {
                drop(state);
                item.reject(Error::unavailable(format!(
                    "inference request for sequence {id} to model '{model}' rejected: {} sequences already wait for a sequence slot",
                    this.config.max_backlog
                )));
                return Ok(());
            }
        };
        drop(state);
        this.send(out);
        Ok(())
    }

    /// The next batch of `instance` when it is idle and its strategy says
    /// one goes now; marks it busy. Slots freed by an END request go to the
    /// backlog's oldest sequences.
    fn next_batch(
        &self,
        state: &mut State<T>,
        instance: usize,
        now: Instant,
    ) -> Option<Outgoing<T>> {
        if state.instance(instance).is_busy() {
            return None;
        }
        match strategy::choose(&self.config.strategy, state.instance(instance), now) {
            Choice::Go { picked, rows } => {
                let items = state.take(instance, picked, rows)?;
                Some((instance, items))
            }
            Choice::Wait { until } => {
                self.ticker.at(until);
                None
            }
            Choice::Nothing => None,
        }
    }

    fn send(self: &Arc<Self>, out: Option<Outgoing<T>>) {
        let Some((instance, items)) = out else {
            return;
        };
        let weak = Arc::downgrade(self);
        let permit = SlotPermit::on_release(move || {
            if let Some(shared) = weak.upgrade() {
                Shared::finished(&shared, instance);
            }
        });
        let dispatch = Dispatch {
            items,
            permit: Some(permit),
        };
        if let Err(e) = self.queues[instance].send(dispatch) {
            // The instance is gone (the model is unloading): its requests
            // are answered with that.
            for item in e.0.items {
                item.reject(crate::unloading(&self.config.model));
            }
        }
    }

    /// `instance` finished its batch: it takes the next one.
    fn finished(this: &Arc<Self>, instance: usize) {
        let now = this.clock.now();
        let mut state = this.state.lock();
        state.finished(instance, now);
        let out = this.next_batch(&mut state, instance, now);
        drop(state);
        this.send(out);
    }

    /// Releases the sequences idle for the configured time, and sends the
    /// batches that are due.
    fn reap(this: &Arc<Self>, now: Instant) {
        let idle = this.config.idle;
        let mut state = this.state.lock();
        for (id, told) in state.release_idle(now, idle, this.farewell.as_ref()) {
            tracing::warn!(model = %this.config.model, sequence = %id, idle_ms = idle.as_millis() as u64, told, "a sequence was idle longer than max_sequence_idle_microseconds; its slot is released (after an END step tells the model, when told) and a later request for it needs START");
            this.config
                .reaped
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        // Every idle instance looks again: a queue delay may have passed.
        let batches: Vec<_> = (0..state.instance_count())
            .filter_map(|instance| this.next_batch(&mut state, instance, now))
            .collect();
        drop(state);
        for batch in batches {
            this.send(Some(batch));
        }
    }
}

/// Reaps idle sequences now and then, and sends batches whose queue delay
/// passed, until the batcher is gone.
fn start_reaper<T: SequenceStep>(shared: &Arc<Shared<T>>) -> Result<(), Error> {
    let period = (shared.config.idle / 4).clamp(Duration::from_millis(5), Duration::from_secs(1));
    let weak = Arc::downgrade(shared);
    clock::start_reaper(Arc::clone(&shared.ticker), period, move || {
        let Some(shared) = weak.upgrade() else {
            return false;
        };
        Shared::reap(&shared, shared.clock.now());
        true
    })
}

#[cfg(test)]
#[path = "sequence_tests.rs"]
mod tests;
