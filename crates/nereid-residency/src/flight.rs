//! Loads on first request: one load per model however many requests wait
//! for it, at most a set number of loads at once, and a failed load not
//! tried again until its back-off has passed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use nereid_core::Error;
use parking_lot::Mutex;
use tokio::sync::Semaphore;

/// The first wait after a failed load; it doubles with each failure in a
/// row, up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
const MAX_BACKOFF: Duration = Duration::from_secs(60);

type Flight = Shared<BoxFuture<'static, Result<(), Error>>>;

/// The loads in progress and the failures being backed off from.
#[derive(Debug, Clone)]
pub(crate) struct Flights {
    state: Arc<Mutex<State>>,
    /// One permit per load that may run at once.
    slots: Arc<Semaphore>,
}

#[derive(Default)]
struct State {
    flying: HashMap<String, Flight>,
    failed: HashMap<String, Failure>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("flying", &self.flying.keys().collect::<Vec<_>>())
            .field("failed", &self.failed)
            .finish()
    }
}

#[derive(Debug, Clone)]
struct Failure {
    error: Error,
    /// Failures in a row.
    count: u32,
    retry_at: Instant,
}

/// How a request that needed its model came by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// It started the load.
    Started,
    /// It joined a load another request had started.
    Joined,
}

impl Flights {
    pub(crate) fn new(limit: usize) -> Flights {
        Flights {
            state: Arc::default(),
            slots: Arc::new(Semaphore::new(limit.max(1))),
        }
    }

    /// Waits until `model` is loaded: by the load in progress, or by a new
    /// one made by `load`, which starts (on the runtime, whether or not
    /// anyone still waits) once fewer than the limit are loading. Refused
    /// at once while a failed load of the model is being backed off from;
    /// a wait that passes `deadline` is refused, and the load goes on.
    pub(crate) async fn wait(
        &self,
        model: &str,
        deadline: Option<Instant>,
        load: impl FnOnce() -> BoxFuture<'static, Result<(), Error>>,
    ) -> Result<Waited, Error> {
        let (flight, waited) = {
            let mut state = self.state.lock();
            if let Some(failure) = state.failed.get(model)
                && Instant::now() < failure.retry_at
            {
                return Err(backing_off(model, failure));
            }
            match state.flying.get(model) {
                Some(flight) => (flight.clone(), Waited::Joined),
                None => {
                    let flight = self.start(model, load());
                    state.flying.insert(model.to_string(), flight.clone());
                    (flight, Waited::Started)
                }
            }
        };
        let landed = match deadline {
            None => flight.await,
            Some(deadline) => tokio::time::timeout_at(deadline, flight)
                .await
                .map_err(|_| {
                    Error::unavailable(format!(
                        "the request's timeout passed while model '{model}' was loading; it goes on loading"
                    ))
                })?,
        };
        landed.map(|()| waited)
    }

    /// The load of `model`, spawned so that it finishes even when every
    /// request waiting for it gave up.
    fn start(&self, model: &str, load: BoxFuture<'static, Result<(), Error>>) -> Flight {
        let state = Arc::clone(&self.state);
        let slots = Arc::clone(&self.slots);
        let name = model.to_string();
        let task = tokio::spawn(async move {
            let result = match slots.acquire_owned().await {
                Ok(_slot) => load.await,
                Err(_) => Err(Error::unavailable("the server is shutting down")),
            };
            let mut state = state.lock();
            state.flying.remove(&name);
            match &result {
                Ok(()) => {
                    state.failed.remove(&name);
                }
                Err(error) => {
                    let count = state.failed.get(&name).map_or(1, |f| f.count + 1);
                    let backoff = backoff(count);
                    state.failed.insert(
                        name.clone(),
                        Failure {
                            error: error.clone(),
                            count,
                            retry_at: Instant::now() + backoff,
                        },
                    );
                    return Err(with_retry(error, &name, backoff));
                }
            }
            result
        });
        task.map(|joined| {
            joined.unwrap_or_else(|e| Err(Error::internal(format!("a model load failed: {e}"))))
        })
        .boxed()
        .shared()
    }

    /// Forgets the failures of `model`: an operator's load or a change in
    /// its files is a new start.
    pub(crate) fn forget_failure(&self, model: &str) {
        self.state.lock().failed.remove(model);
    }

    /// Models loading now.
    pub(crate) fn loading(&self) -> usize {
        self.state.lock().flying.len()
    }
}

fn backoff(failures: u32) -> Duration {
    FIRST_BACKOFF
        .saturating_mul(1 << failures.saturating_sub(1).min(16))
        .min(MAX_BACKOFF)
}

fn with_retry(error: &Error, model: &str, wait: Duration) -> Error {
    Error::new(
        error.kind(),
        format!(
            "{}; a request for '{model}' loads it again after {} s",
            error.message(),
            wait.as_secs()
        ),
    )
}

fn backing_off(model: &str, failure: &Failure) -> Error {
    let left = failure.retry_at.saturating_duration_since(Instant::now());
    Error::unavailable(format!(
        "model '{model}' failed to load ({}); it is tried again on a request after {:.1} s",
        failure.error.message(),
        left.as_secs_f64()
    ))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn counted(
        loads: &Arc<AtomicUsize>,
        result: Result<(), Error>,
        delay_ms: u64,
    ) -> impl FnOnce() -> BoxFuture<'static, Result<(), Error>> {
        let loads = Arc::clone(loads);
        move || {
            async move {
                loads.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                result
            }
            .boxed()
        }
    }

    #[tokio::test]
    async fn concurrent_requests_share_one_load() {
        let flights = Flights::new(4);
        let loads = Arc::new(AtomicUsize::new(0));
        let waits: Vec<_> = (0..20)
            .map(|_| flights.wait("m", None, counted(&loads, Ok(()), 50)))
            .collect();
        let results = futures::future::join_all(waits).await;
        assert_eq!(loads.load(Ordering::SeqCst), 1);
        assert_eq!(
            results
                .iter()
                .filter(|r| **r == Ok(Waited::Started))
                .count(),
            1
        );
        assert!(results.iter().all(Result::is_ok));
        assert_eq!(flights.loading(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_load_answers_every_waiter_and_backs_off() {
        let flights = Flights::new(4);
        let loads = Arc::new(AtomicUsize::new(0));
        let bad = || Err(Error::internal("bad file"));
        let waits: Vec<_> = (0..3)
            .map(|_| flights.wait("m", None, counted(&loads, bad(), 10)))
            .collect();
        for result in futures::future::join_all(waits).await {
            let message = result.unwrap_err().message().to_string();
            assert!(
                message.contains("bad file") && message.contains("after 1 s"),
                "{message}"
            );
        }
        let refused = flights
            .wait("m", None, counted(&loads, Ok(()), 10))
            .await
            .unwrap_err();
        assert!(
            refused.message().contains("tried again on a request after"),
            "{refused:?}"
        );
        assert_eq!(loads.load(Ordering::SeqCst), 1, "no load while backing off");
        tokio::time::sleep(Duration::from_millis(1100)).await;
        flights
            .wait("m", None, counted(&loads, bad(), 10))
            .await
            .unwrap_err();
        let message = flights
            .wait("m", None, counted(&loads, Ok(()), 10))
            .await
            .unwrap_err()
            .message()
            .to_string();
        assert!(
            message.contains("after 2.0 s") || message.contains("after 1.9"),
            "{message}"
        );
        assert_eq!(backoff(10), MAX_BACKOFF);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_is_bounded_by_its_deadline_and_the_load_goes_on() {
        let flights = Flights::new(1);
        let loads = Arc::new(AtomicUsize::new(0));
        let deadline = Instant::now() + Duration::from_millis(20);
        let error = flights
            .wait("m", Some(deadline), counted(&loads, Ok(()), 100))
            .await
            .unwrap_err();
        assert!(error.message().contains("timeout passed"), "{error:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(flights.loading(), 0, "the load finished without waiters");
    }

    #[tokio::test(start_paused = true)]
    async fn loads_beyond_the_limit_wait_for_a_slot() {
        let flights = Flights::new(2);
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let names: Vec<String> = (0..6).map(|i| format!("m{i}")).collect();
        let waits: Vec<_> = names
            .iter()
            .map(|name| {
                let (running, most) = (Arc::clone(&running), Arc::clone(&most));
                flights.wait(name, None, move || {
                    async move {
                        let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        running.fetch_sub(1, Ordering::SeqCst);
                        Ok(())
                    }
                    .boxed()
                })
            })
            .collect();
        assert!(
            futures::future::join_all(waits)
                .await
                .iter()
                .all(Result::is_ok)
        );
        assert_eq!(most.load(Ordering::SeqCst), 2);
    }
}
