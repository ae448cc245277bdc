//! The queue between a model's scheduler and its instance threads: bounded,
//! many senders and many receivers, and a receiver that finds it empty
//! sleeps at once on a condition variable.
//!
//! crossbeam's channel, used here before, spins and then calls
//! `sched_yield` in a loop before it sleeps. With more threads than cores
//! (two instance threads, the tokio workers and ONNX Runtime's pool on two
//! cores) each yield is a context switch that finds other work: measured
//! on `simple` at concurrency 8, the instance threads' yields took about 8 %
//! of the server's CPU (docs/benchmarks.md). A request waits microseconds
//! longer for a sleeping thread; the CPU it saves goes to the requests.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

/// Why `try_send` gave the item back.
#[derive(Debug, PartialEq, Eq)]
pub enum TrySendError<T> {
    Full(T),
    /// Every receiver is gone.
    Disconnected(T),
}

/// Every receiver is gone; the item comes back.
#[derive(Debug, PartialEq, Eq)]
pub struct SendError<T>(pub T);

/// Empty, and every sender is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvTimeoutError {
    Timeout,
    Disconnected,
}

struct State<T> {
    items: VecDeque<T>,
    capacity: usize,
    senders: usize,
    receivers: usize,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    /// Signalled when an item arrives or the last sender leaves.
    filled: Condvar,
    /// Signalled when an item leaves or the last receiver leaves.
    emptied: Condvar,
}

/// A queue of at most `capacity` items (at least one).
pub fn bounded<T>(capacity: usize) -> (WorkSender<T>, WorkReceiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            items: VecDeque::new(),
            capacity: capacity.max(1),
            senders: 1,
            receivers: 1,
        }),
        filled: Condvar::new(),
        emptied: Condvar::new(),
    });
    (
        WorkSender {
            shared: Arc::clone(&shared),
        },
        WorkReceiver { shared },
    )
}

/// A queue without a bound.
pub fn unbounded<T>() -> (WorkSender<T>, WorkReceiver<T>) {
    bounded(usize::MAX)
}

pub struct WorkSender<T> {
    shared: Arc<Shared<T>>,
}

pub struct WorkReceiver<T> {
    shared: Arc<Shared<T>>,
}

impl<T> std::fmt::Debug for WorkSender<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkSender").finish_non_exhaustive()
    }
}

impl<T> std::fmt::Debug for WorkReceiver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkReceiver").finish_non_exhaustive()
    }
}

impl<T> WorkSender<T> {
    /// Whether nothing waits in the queue (it may change at once).
    pub fn is_empty(&self) -> bool {
        self.shared.state.lock().items.is_empty()
    }

    /// Queues `item` unless the queue is full or has no receiver.
    pub fn try_send(&self, item: T) -> Result<(), TrySendError<T>> {
        let mut state = self.shared.state.lock();
        if state.receivers == 0 {
            return Err(TrySendError::Disconnected(item));
        }
        if state.items.len() >= state.capacity {
            return Err(TrySendError::Full(item));
        }
        state.items.push_back(item);
        drop(state);
        self.shared.filled.notify_one();
        Ok(())
    }

    /// Queues `item`, waiting for room while the queue is full.
    pub fn send(&self, item: T) -> Result<(), SendError<T>> {
        let mut state = self.shared.state.lock();
        loop {
            if state.receivers == 0 {
                return Err(SendError(item));
            }
            if state.items.len() < state.capacity {
                state.items.push_back(item);
                drop(state);
                self.shared.filled.notify_one();
                return Ok(());
            }
            self.shared.emptied.wait(&mut state);
        }
    }
}

impl<T> WorkReceiver<T> {
    /// The next item, sleeping while there is none; an error once the queue
    /// is empty and every sender is gone.
    pub fn recv(&self) -> Result<T, RecvError> {
        let mut state = self.shared.state.lock();
        loop {
            if let Some(item) = self.take(&mut state) {
                return Ok(item);
            }
            if state.senders == 0 {
                return Err(RecvError);
            }
            self.shared.filled.wait(&mut state);
        }
    }

    /// As [`WorkReceiver::recv`], waiting at most `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.state.lock();
        loop {
            if let Some(item) = self.take(&mut state) {
                return Ok(item);
            }
            if state.senders == 0 {
                return Err(RecvTimeoutError::Disconnected);
            }
            if self
                .shared
                .filled
                .wait_until(&mut state, deadline)
                .timed_out()
            {
                return self.take(&mut state).ok_or(RecvTimeoutError::Timeout);
            }
        }
    }

    fn take(&self, state: &mut State<T>) -> Option<T> {
        let item = state.items.pop_front()?;
        self.shared.emptied.notify_one();
        Some(item)
    }
}

impl<T> Clone for WorkSender<T> {
    fn clone(&self) -> Self {
        self.shared.state.lock().senders += 1;
        WorkSender {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T> Clone for WorkReceiver<T> {
    fn clone(&self) -> Self {
        self.shared.state.lock().receivers += 1;
        WorkReceiver {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<T> Drop for WorkSender<T> {
    fn drop(&mut self) {
        let mut state = self.shared.state.lock();
        state.senders -= 1;
        if state.senders == 0 {
            drop(state);
            self.shared.filled.notify_all();
        }
    }
}

impl<T> Drop for WorkReceiver<T> {
    fn drop(&mut self) {
        let mut state = self.shared.state.lock();
        state.receivers -= 1;
        if state.receivers == 0 {
            drop(state);
            self.shared.emptied.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_arrive_in_order_and_a_full_queue_refuses() {
        let (tx, rx) = bounded(2);
        tx.try_send(1).unwrap();
        tx.send(2).unwrap();
        assert_eq!(tx.try_send(3), Err(TrySendError::Full(3)));
        assert_eq!(rx.recv(), Ok(1));
        tx.try_send(3).unwrap();
        assert_eq!(rx.recv(), Ok(2));
        assert_eq!(rx.recv(), Ok(3));
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(10)),
            Err(RecvTimeoutError::Timeout)
        );
    }

    #[test]
    fn receivers_drain_then_see_the_senders_gone() {
        let (tx, rx) = bounded(4);
        let tx2 = tx.clone();
        tx.try_send(1).unwrap();
        drop(tx);
        tx2.try_send(2).unwrap();
        drop(tx2);
        assert_eq!(rx.recv(), Ok(1));
        assert_eq!(rx.recv(), Ok(2));
        assert_eq!(rx.recv(), Err(RecvError));
    }

    #[test]
    fn senders_see_the_receivers_gone() {
        let (tx, rx) = bounded::<u8>(1);
        let rx2 = rx.clone();
        drop(rx);
        tx.try_send(1).unwrap();
        drop(rx2);
        assert_eq!(tx.try_send(2), Err(TrySendError::Disconnected(2)));
        assert_eq!(tx.send(3), Err(SendError(3)));
    }

    #[test]
    fn a_sleeping_receiver_wakes_for_an_item_and_a_full_sender_for_room() {
        let (tx, rx) = bounded(1);
        let rx2 = rx.clone();
        let worker = std::thread::spawn(move || (rx2.recv(), rx2.recv()));
        std::thread::sleep(Duration::from_millis(20));
        tx.send(1).unwrap();
        tx.send(2).unwrap();
        assert_eq!(worker.join().unwrap(), (Ok(1), Ok(2)));
        tx.send(3).unwrap();
        let sender = std::thread::spawn(move || tx.send(4));
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(rx.recv(), Ok(3));
        assert_eq!(sender.join().unwrap(), Ok(()));
        assert_eq!(rx.recv(), Ok(4));
    }
}
