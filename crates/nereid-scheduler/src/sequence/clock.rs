//! Time in the sequence batcher: where it reads the time ([`Clock`]), and
//! the thread that acts as time passes (releasing idle sequences, sending
//! batches whose queue delay ran out), which a [`Ticker`] wakes early. On
//! a paused clock no thread runs: a test moves the clock and acts itself.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nereid_core::Error;
use parking_lot::{Condvar, Mutex};

/// Where the batcher reads the time.
#[derive(Clone, Default)]
pub(super) enum Clock {
    /// The system's monotonic clock; a reaper thread acts on it.
    #[default]
    System,
    /// A clock that moves only when a test moves it; no reaper thread
    /// runs, the test ticks the batcher itself.
    #[cfg(test)]
    Paused(Arc<PausedClock>),
}

impl Clock {
    pub(super) fn now(&self) -> Instant {
        match self {
            Clock::System => Instant::now(),
            #[cfg(test)]
            Clock::Paused(clock) => clock.now(),
        }
    }
}

/// A paused clock for tests: it reads a fixed start plus the time it was
/// moved forward by.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct PausedClock {
    start: Instant,
    moved: Mutex<Duration>,
}

#[cfg(test)]
impl PausedClock {
    pub(crate) fn new() -> Arc<PausedClock> {
        Arc::new(PausedClock {
            start: Instant::now(),
            moved: Mutex::new(Duration::ZERO),
        })
    }

    pub(crate) fn now(&self) -> Instant {
        self.start + *self.moved.lock()
    }

    pub(crate) fn advance(&self, by: Duration) {
        *self.moved.lock() += by;
    }
}

/// Wakes the reaper thread early: when a batch must go at a time (the
/// oldest strategy's queue delay), and when the batcher is dropped.
#[derive(Default)]
pub(super) struct Ticker {
    due: Mutex<Option<Instant>>,
    wake: Condvar,
}

impl Ticker {
    /// Has the thread act at `when`, unless it acts earlier anyway.
    pub(super) fn at(&self, when: Instant) {
        let mut due = self.due.lock();
        if due.is_none_or(|d| when < d) {
            *due = Some(when);
            self.wake.notify_one();
        }
    }

    /// Has the thread act now: it finds the batcher gone and ends.
    pub(super) fn wake_now(&self) {
        self.wake.notify_all();
    }

    /// Waits until the time asked for, `period` at most.
    fn wait(&self, period: Duration) {
        let mut due = self.due.lock();
        let until = due.map_or(Instant::now() + period, |d| d.min(Instant::now() + period));
        if Instant::now() < until {
            self.wake.wait_until(&mut due, until);
        }
        *due = None;
    }
}

/// Starts the thread that calls `tick` every `period` and whenever
/// `ticker` asks, until `tick` says the batcher is gone.
pub(super) fn start_reaper(
    ticker: Arc<Ticker>,
    period: Duration,
    tick: impl Fn() -> bool + Send + 'static,
) -> Result<(), Error> {
    std::thread::Builder::new()
        .name("nereid-seq-reaper".into())
        .spawn(move || {
            loop {
                ticker.wait(period);
                if !tick() {
                    return;
                }
            }
        })
        .map(drop)
        .map_err(|e| Error::internal(format!("cannot start the sequence reaper: {e}")))
}
