//! Queue state under a paused clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nereid_core::Error;
use tokio::time::{Instant, advance};

use crate::policy::{BatcherConfig, LevelPolicy, TimeoutAction};
use crate::{Pending, QueueState};

#[derive(Debug)]
pub(crate) struct Req {
    pub(crate) id: u32,
    size: u64,
    key: u64,
    priority: u64,
    timeout: Option<Duration>,
    gone: Arc<AtomicBool>,
    /// Where `reject` reports the request's id, if anywhere.
    pub(crate) rejected: Option<crossbeam_channel::Sender<u32>>,
}

pub(crate) fn req(id: u32) -> Req {
    Req {
        id,
        size: 1,
        key: 0,
        priority: 0,
        timeout: None,
        gone: Arc::new(AtomicBool::new(false)),
        rejected: None,
    }
}

impl Pending for Req {
    fn batch_size(&self) -> u64 {
        self.size
    }
    fn shape_key(&self) -> u64 {
        self.key
    }
    fn priority(&self) -> u64 {
        self.priority
    }
    fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
    fn is_abandoned(&self) -> bool {
        self.gone.load(Ordering::SeqCst)
    }
    fn reject(self, _: Error) {
        if let Some(to) = &self.rejected {
            let _ = to.send(self.id);
        }
    }
    fn cancel(self) {}
}

pub(crate) fn config(max: u64, delay_us: u64) -> BatcherConfig {
    BatcherConfig {
        model: "m".into(),
        max_batch_size: max,
        preferred_batch_sizes: Vec::new(),
        max_queue_delay: Duration::from_micros(delay_us),
        preserve_ordering: false,
        levels: vec![LevelPolicy::default()],
        default_level: 0,
        latency_target: None,
    }
}

fn ids(batch: Option<Vec<Req>>) -> Vec<u32> {
    batch.unwrap_or_default().iter().map(|r| r.id).collect()
}

fn queue(config: BatcherConfig, reqs: impl IntoIterator<Item = Req>) -> QueueState<Req> {
    let mut q = QueueState::new(config);
    for r in reqs {
        q.push(r, Instant::now()).unwrap();
    }
    q
}

#[tokio::test(start_paused = true)]
async fn waits_out_the_delay_while_another_instance_is_busy() {
    let mut q = queue(config(8, 1000), [req(1), req(2)]);
    let step = q.step(Instant::now(), 1, 1);
    assert!(step.dispatch.is_none());
    assert_eq!(
        step.wake_at,
        Some(Instant::now() + Duration::from_micros(1000))
    );
    advance(Duration::from_micros(999)).await;
    assert!(q.step(Instant::now(), 1, 1).dispatch.is_none());
    advance(Duration::from_micros(1)).await;
    assert_eq!(ids(q.step(Instant::now(), 1, 1).dispatch), [1, 2]);
}

#[tokio::test(start_paused = true)]
async fn an_idle_model_dispatches_at_once() {
    let mut q = queue(config(8, 100_000), [req(1)]);
    assert_eq!(ids(q.step(Instant::now(), 2, 0).dispatch), [1]);
    assert!(q.is_empty());
}

/// A config that names a preferred size below the largest batch holds a
/// lone request on an idle model, so that a burst reaching the size goes
/// as one batch, as in Triton; a request that stays alone waits the delay.
#[tokio::test(start_paused = true)]
async fn a_named_preferred_size_holds_a_lone_request_for_its_burst() {
    let mut c = config(8, 600_000);
    c.preferred_batch_sizes = vec![4];
    let mut q = queue(c, [req(1)]);
    let step = q.step(Instant::now(), 1, 0);
    assert!(step.dispatch.is_none());
    assert_eq!(
        step.wake_at,
        Some(Instant::now() + Duration::from_millis(600))
    );
    for id in 2..=4 {
        q.push(req(id), Instant::now()).unwrap();
    }
    assert_eq!(ids(q.step(Instant::now(), 1, 0).dispatch), [1, 2, 3, 4]);
    q.push(req(5), Instant::now()).unwrap();
    assert!(q.step(Instant::now(), 1, 0).dispatch.is_none());
    advance(Duration::from_millis(600)).await;
    assert_eq!(ids(q.step(Instant::now(), 1, 0).dispatch), [5]);
}

/// The largest batch as the only preferred size (what autofill gives a
/// config that names none) keeps the idle model's early dispatch.
#[tokio::test(start_paused = true)]
async fn the_default_preferred_size_keeps_the_early_dispatch() {
    let mut c = config(8, 600_000);
    c.preferred_batch_sizes = vec![8];
    let mut q = queue(c, [req(1)]);
    assert_eq!(ids(q.step(Instant::now(), 1, 0).dispatch), [1]);
}

#[tokio::test(start_paused = true)]
async fn nothing_leaves_without_an_idle_instance() {
    let mut q = queue(config(8, 0), [req(1)]);
    assert!(q.step(Instant::now(), 0, 2).dispatch.is_none());
    assert_eq!(ids(q.step(Instant::now(), 1, 1).dispatch), [1]);
}

#[tokio::test(start_paused = true)]
async fn a_preferred_size_is_chosen() {
    let mut c = config(8, 100_000);
    c.preferred_batch_sizes = vec![2, 4];
    let mut q = queue(c, (1..=7).map(req));
    assert_eq!(ids(q.step(Instant::now(), 1, 1).dispatch), [1, 2, 3, 4]);
    // Three left: they reach the preferred size 2, which goes at once...
    assert_eq!(ids(q.step(Instant::now(), 1, 1).dispatch), [5, 6]);
    // ...and the last one waits for the delay, then goes as it is.
    assert!(q.step(Instant::now(), 1, 1).dispatch.is_none());
    advance(Duration::from_millis(100)).await;
    assert_eq!(ids(q.step(Instant::now(), 1, 1).dispatch), [7]);
}

#[tokio::test(start_paused = true)]
async fn a_batch_that_waited_out_the_delay_goes_whole() {
    let mut c = config(8, 1000);
    c.preferred_batch_sizes = vec![4];
    let big = |id| Req { size: 3, ..req(id) };
    let mut q = queue(c, [big(1), big(2)]);
    // 6 holds more than the preferred 4: the 3 that fit go at once.
    assert_eq!(ids(q.step(Instant::now(), 1, 1).dispatch), [1]);
    q.push(big(3), Instant::now()).unwrap();
    advance(Duration::from_micros(1000)).await;
    // Once the delay is over Triton sends everything that fits.
    assert_eq!(ids(q.step(Instant::now(), 1, 1).dispatch), [2, 3]);
}

#[tokio::test(start_paused = true)]
async fn a_preferred_size_goes_at_once_while_clients_are_expected() {
    let mut c = config(16, 100_000);
    c.preferred_batch_sizes = vec![4, 8];
    let mut q = queue(c, []);
    // A burst of 16 was just answered: those clients are expected back.
    q.answered(16, Instant::now());
    for id in 1..=3 {
        q.push(req(id), Instant::now()).unwrap();
        assert!(q.step(Instant::now(), 1, 0).dispatch.is_none());
    }
    q.push(req(4), Instant::now()).unwrap();
    assert_eq!(ids(q.step(Instant::now(), 1, 0).dispatch), [1, 2, 3, 4]);
}

#[tokio::test(start_paused = true)]
async fn a_full_batch_goes_at_once_while_clients_are_expected() {
    let mut q = queue(config(4, 100_000), []);
    q.answered(16, Instant::now());
    for id in 1..=4 {
        q.push(req(id), Instant::now()).unwrap();
    }
    assert_eq!(ids(q.step(Instant::now(), 1, 0).dispatch), [1, 2, 3, 4]);
}

#[tokio::test(start_paused = true)]
async fn the_maximum_is_never_exceeded() {
    let big = |id| Req { size: 3, ..req(id) };
    let mut q = queue(config(8, 0), (1..=5).map(big));
    let mut sizes = Vec::new();
    while !q.is_empty() {
        let batch = q.step(Instant::now(), 1, 0).dispatch.unwrap();
        sizes.push(batch.iter().map(|r| r.size).sum::<u64>());
    }
    assert_eq!(sizes, [6, 6, 3]);
}

#[tokio::test(start_paused = true)]
async fn only_equal_shapes_share_a_batch() {
    let shaped = |id, key| Req { key, ..req(id) };
    let mut q = queue(config(8, 0), [shaped(1, 7), shaped(2, 9), shaped(3, 7)]);
    assert_eq!(ids(q.step(Instant::now(), 1, 0).dispatch), [1, 3]);
    assert_eq!(ids(q.step(Instant::now(), 1, 0).dispatch), [2]);
}

fn two_levels() -> BatcherConfig {
    let mut c = config(1, 0);
    c.levels = vec![LevelPolicy::default(), LevelPolicy::default()];
    c.default_level = 1;
    c
}

#[tokio::test(start_paused = true)]
async fn higher_priority_goes_first() {
    let prio = |id, priority| Req {
        priority,
        ..req(id)
    };
    let mut q = queue(two_levels(), [prio(1, 2), prio(2, 0), prio(3, 1)]);
    let order: Vec<u32> = (0..3)
        .flat_map(|_| ids(q.step(Instant::now(), 1, 0).dispatch))
        .collect();
    assert_eq!(order, [3, 1, 2]);
}

#[tokio::test(start_paused = true)]
async fn timeouts_reject() {
    let mut c = config(8, 0);
    c.levels[0].default_timeout = Some(Duration::from_micros(100));
    let mut q = queue(c, [req(1)]);
    let step = q.step(Instant::now(), 0, 1);
    assert_eq!(
        step.wake_at,
        Some(Instant::now() + Duration::from_micros(100))
    );
    advance(Duration::from_micros(100)).await;
    let step = q.step(Instant::now(), 0, 1);
    assert_eq!(step.expired.iter().map(|r| r.id).collect::<Vec<_>>(), [1]);
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn timeouts_delay_behind_the_rest() {
    let mut c = config(1, 0);
    c.levels[0].timeout_action = TimeoutAction::Delay;
    c.levels[0].allow_timeout_override = true;
    c.levels[0].default_timeout = Some(Duration::from_secs(1));
    let hurried = Req {
        timeout: Some(Duration::from_micros(50)),
        ..req(1)
    };
    let mut q = queue(c, [hurried, req(2)]);
    advance(Duration::from_micros(60)).await;
    let step = q.step(Instant::now(), 1, 0);
    assert!(step.expired.is_empty());
    assert_eq!(ids(step.dispatch), [2]);
    assert_eq!(ids(q.step(Instant::now(), 1, 0).dispatch), [1]);
}

#[tokio::test(start_paused = true)]
async fn a_full_level_refuses_at_once() {
    let mut c = config(8, 0);
    c.levels[0].max_queue_size = 2;
    let mut q = queue(c, [req(1), req(2)]);
    let (back, error) = q.push(req(3), Instant::now()).unwrap_err();
    assert_eq!(back.id, 3);
    assert_eq!(error.kind(), nereid_core::ErrorKind::Unavailable);
    assert!(error.message().contains("full"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn abandoned_requests_are_dropped_before_batching() {
    let gone = req(1);
    gone.gone.store(true, Ordering::SeqCst);
    let mut q = queue(config(8, 0), [gone, req(2)]);
    let step = q.step(Instant::now(), 1, 0);
    assert_eq!(step.abandoned.iter().map(|r| r.id).collect::<Vec<_>>(), [1]);
    assert_eq!(ids(step.dispatch), [2]);
}

#[tokio::test(start_paused = true)]
async fn an_idle_model_waits_for_the_clients_it_just_answered() {
    let mut q = queue(config(8, 1000), []);
    q.answered(4, Instant::now());
    for id in 1..=3 {
        q.push(req(id), Instant::now()).unwrap();
        let step = q.step(Instant::now(), 1, 0);
        assert!(step.dispatch.is_none(), "{id} of 4 clients back");
        assert_eq!(
            step.wake_at,
            Some(Instant::now() + Duration::from_micros(1000))
        );
    }
    advance(Duration::from_micros(300)).await;
    q.push(req(4), Instant::now()).unwrap();
    assert_eq!(ids(q.step(Instant::now(), 1, 0).dispatch), [1, 2, 3, 4]);
}

#[tokio::test(start_paused = true)]
async fn a_lone_client_is_not_kept_waiting_by_its_own_answer() {
    let mut q = queue(config(8, 100_000), []);
    q.answered(1, Instant::now());
    q.push(req(1), Instant::now()).unwrap();
    assert_eq!(ids(q.step(Instant::now(), 1, 0).dispatch), [1]);
}

#[tokio::test(start_paused = true)]
async fn clients_that_do_not_come_back_are_forgotten_after_the_delay() {
    let mut q = queue(config(8, 1000), []);
    q.answered(4, Instant::now());
    q.push(req(1), Instant::now()).unwrap();
    assert!(q.step(Instant::now(), 1, 0).dispatch.is_none());
    advance(Duration::from_micros(1000)).await;
    assert_eq!(ids(q.step(Instant::now(), 1, 0).dispatch), [1]);
    // Forgotten for good: the next lone request goes at once.
    q.push(req(2), Instant::now()).unwrap();
    assert_eq!(ids(q.step(Instant::now(), 1, 0).dispatch), [2]);
}

pub(crate) fn with_timeout(id: u32, timeout: Duration) -> Req {
    Req {
        timeout: Some(timeout),
        ..req(id)
    }
}

pub(crate) fn overridable(default: Duration) -> BatcherConfig {
    let mut c = config(8, 0);
    c.levels[0].default_timeout = Some(default);
    c.levels[0].allow_timeout_override = true;
    c
}

fn expired(step: &crate::Step<Req>) -> Vec<u32> {
    step.expired.iter().map(|r| r.id).collect()
}

#[tokio::test(start_paused = true)]
async fn a_request_timeout_never_extends_the_default() {
    let long = with_timeout(1, Duration::from_secs(10));
    let mut q = queue(overridable(Duration::from_micros(100)), [long]);
    advance(Duration::from_micros(100)).await;
    assert_eq!(expired(&q.step(Instant::now(), 0, 1)), [1]);
}

#[tokio::test(start_paused = true)]
async fn a_request_timeout_shortens_the_default() {
    let short = with_timeout(1, Duration::from_micros(10));
    let mut q = queue(overridable(Duration::from_secs(1)), [short]);
    advance(Duration::from_micros(10)).await;
    assert_eq!(expired(&q.step(Instant::now(), 0, 1)), [1]);
}

#[tokio::test(start_paused = true)]
async fn without_a_default_timeout_request_timeouts_are_ignored() {
    let mut c = config(8, 0);
    c.levels[0].allow_timeout_override = true;
    let mut q = queue(c, [with_timeout(1, Duration::from_micros(1))]);
    advance(Duration::from_secs(1)).await;
    let step = q.step(Instant::now(), 1, 0);
    assert!(step.expired.is_empty());
    assert_eq!(ids(step.dispatch), [1]);
}

#[tokio::test(start_paused = true)]
async fn a_timeout_passed_before_the_batcher_looks_is_rejected_on_an_idle_model() {
    let mut q = QueueState::new(overridable(Duration::from_secs(1)));
    let submitted = Instant::now();
    advance(Duration::from_micros(1)).await;
    q.push(with_timeout(1, Duration::from_micros(1)), submitted)
        .unwrap();
    let step = q.step(Instant::now(), 2, 0);
    assert_eq!(expired(&step), [1]);
    assert!(step.dispatch.is_none());
}

#[tokio::test(start_paused = true)]
async fn with_no_delay_a_batch_still_goes_at_its_preferred_size() {
    let mut c = config(8, 0);
    c.preferred_batch_sizes = vec![1];
    let mut q = queue(c, [req(1), req(2)]);
    assert_eq!(ids(q.step(Instant::now(), 1, 0).dispatch), [1]);
    assert_eq!(ids(q.step(Instant::now(), 1, 0).dispatch), [2]);
}
