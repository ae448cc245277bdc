//! The latency-target planner under a paused clock: the batch size and
//! wait it chooses from a learnt cost, shedding, and the AIMD budget.

use std::time::Duration;

use tokio::time::{Instant, advance};

use super::*;
use crate::QueueState;
use crate::queue::tests::{config, req, with_timeout};

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn target(ms_: u64) -> LatencyTarget {
    LatencyTarget {
        target: ms(ms_),
        percentile_milli: 99_000,
    }
}

/// Runs batches of each size in `sizes`, each costing `5 + size` ms.
async fn teach(planner: &mut Planner, sizes: &[u64]) {
    for &size in sizes {
        let now = Instant::now();
        let id = planner.dispatched(now, size, vec![now; size as usize]);
        advance(ms(5 + size)).await;
        planner.executed(id, Instant::now());
    }
}

fn candidate(total: u64, due: Instant) -> Candidate {
    Candidate {
        total,
        due,
        can_grow: true,
        expected_back: 0,
    }
}

#[tokio::test(start_paused = true)]
async fn a_model_without_measurements_sends_at_once_and_takes_everything() {
    let planner = Planner::new(target(50), 32);
    let now = Instant::now();
    let c = Candidate {
        expected_back: 10,
        ..candidate(3, now + ms(45))
    };
    assert_eq!(planner.decide(now, c), Decision::Go { limit: 3 });
    assert_eq!(planner.admit(now, 1, 10_000, ms(45), 1), Ok(()));
}

#[tokio::test(start_paused = true)]
async fn the_batch_limit_is_the_largest_whose_cost_fits_the_budget() {
    let mut planner = Planner::new(target(100), 128);
    teach(&mut planner, &[1, 2, 4, 8, 16, 32]).await;
    let snapshot = planner.gauges().snapshot();
    assert!((snapshot.intercept_us - 5000.0).abs() < 1.0, "{snapshot:?}");
    assert!((snapshot.per_inference_us - 1000.0).abs() < 1.0, "{snapshot:?}");
    // Budget 90 ms (0.9 of the target): 5 + b <= 90.
    assert_eq!(snapshot.batch_limit, 85);
    assert_eq!(planner.batch_limit(), 85);
    let small = Planner::new(target(100), 16);
    assert_eq!(small.batch_limit(), 16);
}

#[tokio::test(start_paused = true)]
async fn waits_for_expected_arrivals_until_the_latest_start_then_goes() {
    let mut planner = Planner::new(target(100), 64);
    teach(&mut planner, &[1, 2, 4, 8]).await;
    // Unprompted arrivals every millisecond: more are coming.
    for _ in 0..20 {
        planner.arrived(Instant::now(), false);
        advance(ms(1)).await;
    }
    let now = Instant::now();
    let due = now + planner.budget(None);
    let c = candidate(2, due);
    // Latest start of a batch of 3: 90 ms - (5 + 3) ms.
    assert_eq!(planner.decide(now, c), Decision::Wait { until: now + ms(82) });
    // Later, past that start, it goes with what it has.
    advance(ms(83)).await;
    assert_eq!(
        planner.decide(Instant::now(), c),
        Decision::Go { limit: 2 }
    );
}

#[tokio::test(start_paused = true)]
async fn nobody_coming_means_no_wait() {
    let mut planner = Planner::new(target(100), 64);
    teach(&mut planner, &[1, 2, 4]).await;
    let now = Instant::now();
    let due = now + planner.budget(None);
    assert_eq!(
        planner.decide(now, candidate(1, due)),
        Decision::Go { limit: 1 }
    );
    // A client just answered is expected back: worth waiting for.
    let c = Candidate {
        expected_back: 1,
        ..candidate(1, due)
    };
    assert!(matches!(planner.decide(now, c), Decision::Wait { .. }));
}

#[tokio::test(start_paused = true)]
async fn a_full_batch_goes_at_once_trimmed_to_what_meets_the_oldest() {
    let mut planner = Planner::new(target(100), 64);
    teach(&mut planner, &[1, 2, 4, 8]).await;
    let now = Instant::now();
    assert_eq!(
        planner.decide(now, candidate(64, now + ms(90))),
        Decision::Go { limit: 64 }
    );
    // The oldest has 30 ms left: at most 25 inferences start in time.
    assert_eq!(
        planner.decide(now, candidate(64, now + ms(30))),
        Decision::Go { limit: 25 }
    );
    // Already late even alone: a full batch, for those behind it.
    assert_eq!(
        planner.decide(now, candidate(64, now + ms(3))),
        Decision::Go { limit: 64 }
    );
}

#[tokio::test(start_paused = true)]
async fn sheds_what_the_queue_ahead_cannot_serve_in_time() {
    let mut planner = Planner::new(target(100), 8);
    teach(&mut planner, &[1, 2, 4, 8]).await;
    let now = Instant::now();
    let budget = planner.budget(None);
    assert_eq!(budget, ms(90));
    // Batches of 8 cost 13 ms: behind 54 queued inferences a request is
    // in a 7th batch of 7 (6 x 13 + 12 = 90 ms), behind 55 in a 7th full
    // one (91 ms).
    assert_eq!(planner.admit(now, 1, 54, budget, 1), Ok(()));
    assert_eq!(planner.admit(now, 1, 55, budget, 1), Err(ms(1)));
    // Two instances halve the wait.
    assert_eq!(planner.admit(now, 1, 100, budget, 2), Ok(()));
    // What runs now counts: a batch of 8 sent 1 ms ago ends in 12 ms.
    planner.dispatched(now - ms(1), 8, vec![now; 8]);
    assert_eq!(planner.admit(now, 1, 47, budget, 1), Ok(()));
    assert_eq!(planner.admit(now, 1, 48, budget, 1), Err(ms(6)));
    // A request's own shorter timeout is its deadline.
    assert_eq!(planner.budget(Some(ms(20))), ms(18));
    assert!(planner.admit(now, 1, 8, ms(18), 1).is_err());
}

#[tokio::test(start_paused = true)]
async fn misses_past_the_allowance_shrink_the_budget_and_good_batches_grow_it() {
    let mut planner = Planner::new(target(20), 64);
    teach(&mut planner, &[1, 2]).await;
    assert_eq!(planner.budget(None), ms(18));
    // A batch of 4 whose requests waited 30 ms: 4 misses, more than the
    // 2 forgiven.
    let now = Instant::now();
    let id = planner.dispatched(now, 4, vec![now - ms(30); 4]);
    advance(ms(9)).await;
    planner.executed(id, Instant::now());
    let cut = planner.budget(None);
    assert!(cut < ms(16), "{cut:?}");
    assert_eq!(planner.gauges().snapshot().budget_scale, 0.9 * DECREASE);
    // Good batches give it back, a step each.
    teach(&mut planner, &[1; 100]).await;
    assert_eq!(planner.budget(None), ms(18));
}

#[tokio::test(start_paused = true)]
async fn one_miss_within_the_allowance_is_forgiven() {
    let mut planner = Planner::new(target(20), 64);
    teach(&mut planner, &[1]).await;
    let now = Instant::now();
    let mut submitted = vec![now; 99];
    submitted.push(now - ms(30));
    let id = planner.dispatched(now, 100, submitted);
    advance(ms(1)).await;
    planner.executed(id, Instant::now());
    assert_eq!(planner.budget(None), ms(18));
}

fn target_config(max: u64, ms_: u64) -> crate::BatcherConfig {
    let mut c = config(max, 0);
    c.latency_target = Some(target(ms_));
    c
}

/// Through the queue: the first request goes at once, its batch's cost is
/// learnt from the permit's report, and a request the queue cannot serve
/// in time is refused on arrival with a retry hint and counted.
#[tokio::test(start_paused = true)]
async fn the_queue_learns_costs_and_sheds_on_arrival() {
    let mut q = QueueState::new(target_config(4, 50));
    let gauges = q.target_gauges().unwrap();
    q.push(req(1), Instant::now()).unwrap();
    let step = q.step(Instant::now(), 1, 0);
    assert_eq!(step.dispatch.map(|d| d.len()), Some(1));
    let batch = step.batch.unwrap();
    advance(ms(20)).await;
    q.executed(batch, Instant::now());
    assert!((gauges.snapshot().per_inference_us - 20_000.0).abs() < 1.0);
    // A batch of 4 is predicted at 80 ms: over the 45 ms budget, so the
    // limit is 2 (40 ms), and a third request in the queue cannot be
    // served in time behind a running batch.
    assert_eq!(gauges.snapshot().batch_limit, 2);
    for id in 2..=3 {
        q.push(req(id), Instant::now()).unwrap();
    }
    let step = q.step(Instant::now(), 1, 0);
    assert_eq!(step.dispatch.map(|d| d.len()), Some(2));
    let (refused, error) = q.push(req(4), Instant::now()).unwrap_err();
    assert_eq!(refused.id, 4);
    assert_eq!(error.kind(), nereid_core::ErrorKind::Unavailable);
    assert!(error.message().contains("latency target of 50 ms"), "{error}");
    assert_eq!(error.retry_after_secs(), Some(1));
    assert_eq!(gauges.snapshot().shed, 1);
    // Once it is back, a request fits again.
    advance(ms(40)).await;
    q.executed(step.batch.unwrap(), Instant::now());
    q.push(req(5), Instant::now()).unwrap();
}

/// A request whose own timeout is shorter than the target is refused
/// where one without would be taken.
#[tokio::test(start_paused = true)]
async fn a_short_request_timeout_is_its_deadline() {
    let mut q = QueueState::new(target_config(4, 100));
    q.push(req(1), Instant::now()).unwrap();
    let batch = q.step(Instant::now(), 1, 0).batch.unwrap();
    advance(ms(20)).await;
    q.executed(batch, Instant::now());
    assert!(q.push(with_timeout(2, ms(10)), Instant::now()).is_err());
    q.push(req(3), Instant::now()).unwrap();
}

/// A configured `max_queue_delay` bounds the planner's wait.
#[tokio::test(start_paused = true)]
async fn a_configured_delay_bounds_the_wait() {
    let mut c = target_config(8, 1000);
    c.max_queue_delay = ms(5);
    let mut q = QueueState::new(c);
    q.push(req(1), Instant::now()).unwrap();
    let batch = q.step(Instant::now(), 1, 0).batch.unwrap();
    advance(ms(1)).await;
    q.executed(batch, Instant::now());
    q.answered(1, Instant::now());
    q.push(req(2), Instant::now()).unwrap();
    // Its client's peer was answered and is expected back: it waits, but
    // no longer than the configured 5 ms.
    q.answered(1, Instant::now());
    let step = q.step(Instant::now(), 1, 0);
    assert!(step.dispatch.is_none());
    assert_eq!(step.wake_at, Some(Instant::now() + ms(5)));
    advance(ms(5)).await;
    assert_eq!(q.step(Instant::now(), 1, 0).dispatch.map(|d| d.len()), Some(1));
}
