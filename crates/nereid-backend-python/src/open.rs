//! A decoupled model's open requests: sent to the worker and not yet
//! ended by their final flag. As in Triton, such a request outlives the
//! `execute` that received it: the model answers it from other threads
//! while its instance runs the next batches, so the responders are kept
//! here, by the request's id in the protocol, until the final flag.

use std::collections::HashMap;
use std::sync::Arc;

use nereid_core::{Error, Responder, Tensor};

/// Keeps the input files of a batch unchanged while one of its requests
/// is open: the worker may still read a large input through its mapping.
pub(crate) type Lease = Arc<()>;

struct Open {
    responder: Arc<dyn Responder>,
    /// Whether the worker has been told that the client went away.
    told: bool,
    _inputs: Lease,
}

#[derive(Default)]
pub(crate) struct OpenRequests {
    requests: HashMap<u64, Open>,
}

impl OpenRequests {
    pub(crate) fn insert(&mut self, id: u64, responder: Arc<dyn Responder>, inputs: Lease) {
        let open = Open {
            responder,
            told: false,
            _inputs: inputs,
        };
        self.requests.insert(id, open);
    }

    pub(crate) fn len(&self) -> usize {
        self.requests.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.requests.is_empty()
    }

    /// Passes a response on to request `id`'s responder; the final flag
    /// closes it. False when no such request is open.
    pub(crate) fn send(
        &mut self,
        id: u64,
        response: Option<Result<Vec<Tensor>, Error>>,
        last: bool,
    ) -> bool {
        let Some(open) = self.requests.get(&id) else {
            return false;
        };
        open.responder.send(response, last);
        if last {
            self.requests.remove(&id);
        }
        true
    }

    /// Forgets request `id` without a word: its execution failed or it was
    /// rescheduled, and its answer goes through the execution's result.
    pub(crate) fn forget(&mut self, id: u64) {
        self.requests.remove(&id);
    }

    /// Ends every open request with `error` (the worker is gone).
    pub(crate) fn fail_all(&mut self, error: &Error) {
        for (_, open) in self.requests.drain() {
            open.responder.send(Some(Err(error.clone())), true);
        }
    }

    /// The ids of open requests whose clients went away and whose worker
    /// has not been told yet; from now on it counts as told.
    pub(crate) fn newly_cancelled(&mut self) -> Vec<u64> {
        self.requests
            .iter_mut()
            .filter(|(_, open)| !open.told && open.responder.is_cancelled())
            .map(|(id, open)| {
                open.told = true;
                *id
            })
            .collect()
    }

    /// The ids of every open request the worker has not been told to
    /// cancel yet, now told (the instance is going away).
    pub(crate) fn cancel_all(&mut self) -> Vec<u64> {
        self.requests
            .iter_mut()
            .filter(|(_, open)| !open.told)
            .map(|(id, open)| {
                open.told = true;
                *id
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use parking_lot::Mutex;

    use super::*;

    #[derive(Default)]
    struct Recorded {
        sent: Mutex<Vec<(bool, bool)>>,
        gone: AtomicBool,
    }

    impl Responder for Recorded {
        fn send(&self, response: Option<Result<Vec<Tensor>, Error>>, last: bool) {
            let ok = matches!(response, Some(Ok(_)));
            self.sent.lock().push((ok, last));
        }

        fn is_cancelled(&self) -> bool {
            self.gone.load(Ordering::Relaxed)
        }
    }

    #[test]
    fn a_request_stays_open_until_its_final_flag() {
        let mut open = OpenRequests::default();
        let responder = Arc::new(Recorded::default());
        let lease = Lease::default();
        open.insert(7, responder.clone(), lease.clone());
        assert_eq!(Arc::strong_count(&lease), 2, "the batch's inputs are held");
        assert!(open.send(7, Some(Ok(Vec::new())), false));
        assert!(open.send(7, None, true));
        assert!(!open.send(7, Some(Ok(Vec::new())), false), "closed");
        assert!(open.is_empty());
        assert_eq!(Arc::strong_count(&lease), 1, "and let go with the request");
        assert_eq!(*responder.sent.lock(), [(true, false), (false, true)]);
    }

    #[test]
    fn cancelled_clients_are_named_once_and_a_dead_worker_fails_the_rest() {
        let mut open = OpenRequests::default();
        let (a, b) = (Arc::new(Recorded::default()), Arc::new(Recorded::default()));
        open.insert(1, a.clone(), Lease::default());
        open.insert(2, b.clone(), Lease::default());
        assert!(open.newly_cancelled().is_empty());
        a.gone.store(true, Ordering::Relaxed);
        assert_eq!(open.newly_cancelled(), [1]);
        assert!(open.newly_cancelled().is_empty(), "told once");
        assert_eq!(open.cancel_all(), [2]);
        open.fail_all(&Error::internal("gone"));
        assert!(open.is_empty());
        assert_eq!(*b.sent.lock(), [(false, true)]);
    }
}
