//! The latency-target planner under a paused clock: the batch size and
//! wait it chooses from a learnt cost, shedding, and the AIMD budget.

use std::time::Duration;

use tokio::time::{Instant, advance};

use super::controller::DECREASE;
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
        back_until: None,
    }
}

#[tokio::test(start_paused = true)]
async fn a_model_without_measurements_sends_at_once_and_takes_everything() {
    let planner = Planner::new(target(50), 32);
    let now = Instant::now();
    let c = Candidate {
        back_until: Some(now + ms(10)),
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
    assert!(
        (snapshot.per_inference_us - 1000.0).abs() < 1.0,
        "{snapshot:?}"
    );
    // Budget 80 ms (0.8 of the target): 5 + b <= 80.
    assert_eq!(snapshot.batch_limit, 75);
    assert_eq!(planner.batch_limit(), 75);
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
    // The next arrival is due within two gaps of the last (1 ms ago).
    assert_eq!(
        planner.decide(now, c),
        Decision::Wait { until: now + ms(1) }
    );
    // Clients expected back for long: at most until the latest start of a
    // batch of 3, 80 ms - (5 + 3) ms.
    let back = Candidate {
        back_until: Some(now + ms(200)),
        ..c
    };
    assert_eq!(
        planner.decide(now, back),
        Decision::Wait {
            until: now + ms(72)
        }
    );
    // A stream that stopped: no wait.
    advance(ms(2)).await;
    assert_eq!(
        planner.decide(Instant::now(), c),
        Decision::Go { limit: 64 }
    );
    // Past that start, it goes with what it has, whoever is expected (the
    // limit is the most it may take).
    advance(ms(71)).await;
    assert_eq!(
        planner.decide(Instant::now(), back),
        Decision::Go { limit: 64 }
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
        Decision::Go { limit: 64 }
    );
    // A client just answered is expected back: worth waiting for.
    let c = Candidate {
        back_until: Some(now + ms(5)),
        ..candidate(1, due)
    };
    assert_eq!(
        planner.decide(now, c),
        Decision::Wait { until: now + ms(5) }
    );
}

#[tokio::test(start_paused = true)]
async fn a_full_batch_goes_at_once_and_whole() {
    let mut planner = Planner::new(target(50), 64);
    teach(&mut planner, &[1, 2, 4, 8]).await;
    let now = Instant::now();
    // Budget 40 ms: batches of at most 35.
    assert_eq!(
        planner.decide(now, candidate(64, now + ms(40))),
        Decision::Go { limit: 35 }
    );
    // An oldest request with little time left does not shrink the batch:
    // the ones behind it were admitted counting on full batches.
    assert_eq!(
        planner.decide(now, candidate(64, now + ms(3))),
        Decision::Go { limit: 35 }
    );
    // Nor does a batch that cannot grow wait.
    let stuck = Candidate {
        can_grow: false,
        back_until: Some(now + ms(5)),
        ..candidate(3, now + ms(40))
    };
    assert_eq!(planner.decide(now, stuck), Decision::Go { limit: 35 });
}

#[tokio::test(start_paused = true)]
async fn sheds_what_the_queue_ahead_cannot_serve_in_time() {
    let mut planner = Planner::new(target(100), 8);
    teach(&mut planner, &[1, 2, 4, 8]).await;
    let now = Instant::now();
    let budget = planner.budget(None);
    assert_eq!(budget, ms(80));
    // Batches of 8 cost 13 ms: behind 47 queued inferences a request is
    // in the 6th full batch (78 ms), behind 48 in a 7th of 1 (84 ms).
    assert_eq!(planner.admit(now, 1, 47, budget, 1), Ok(()));
    assert_eq!(planner.admit(now, 1, 48, budget, 1), Err(ms(4)));
    // Two instances share the queue: 11 full batches and one of 3 end by
    // 73 ms.
    assert_eq!(planner.admit(now, 1, 90, budget, 2), Ok(()));
    // What runs now counts: a batch of 8 sent 1 ms ago ends in 12 ms.
    planner.dispatched(now - ms(1), 8, vec![now; 8]);
    assert_eq!(planner.admit(now, 1, 39, budget, 1), Ok(()));
    assert_eq!(planner.admit(now, 1, 40, budget, 1), Err(ms(3)));
    // A request's own shorter timeout is its deadline.
    assert_eq!(planner.budget(Some(ms(20))), ms(16));
    assert!(planner.admit(now, 1, 8, ms(16), 1).is_err());
}

/// Noisy costs widen the margin once for the whole queue, not once per
/// batch in it.
#[tokio::test(start_paused = true)]
async fn noise_adds_one_margin_to_a_queue_of_batches() {
    let mut planner = Planner::new(target(100), 8);
    // Batches cost 5 + size ms, give or take 2 ms.
    for i in 0..60u64 {
        let size = [1, 2, 4, 8][(i % 4) as usize];
        let now = Instant::now();
        let id = planner.dispatched(now, size, vec![now; size as usize]);
        advance(ms(if (i / 4) % 2 == 0 { 7 } else { 3 } + size)).await;
        planner.executed(id, Instant::now());
    }
    let fit = planner.cost.fit().unwrap();
    assert!((fit.spread_us - 2000.0).abs() < 300.0, "{fit:?}");
    let margin = planner.cost.margin().unwrap();
    // Four full batches (52 ms expected) and the margin fit 80 ms; with a
    // margin on each batch they would not (68 ms and more).
    let now = Instant::now();
    assert_eq!(planner.admit(now, 1, 31, ms(80), 1), Ok(()));
    let finish = planner.predicted_finish(now, 32, 1);
    assert!(
        finish >= ms(52) + margin - ms(1) && finish <= ms(52) + margin + ms(1),
        "{finish:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn misses_past_the_allowance_shrink_the_budget_and_good_batches_grow_it() {
    let mut planner = Planner::new(target(20), 64);
    teach(&mut planner, &[1, 2]).await;
    assert_eq!(planner.budget(None), ms(16));
    // A batch of 4 whose requests waited 30 ms: 4 misses (past 18 ms, 90 %
    // of the target), more than the 2 forgiven.
    let now = Instant::now();
    let id = planner.dispatched(now, 4, vec![now - ms(30); 4]);
    advance(ms(9)).await;
    planner.executed(id, Instant::now());
    let cut = planner.budget(None);
    assert!(cut < ms(14), "{cut:?}");
    // The batch limit stays that of the largest budget: 5 + b <= 16.
    assert_eq!(planner.batch_limit(), 11);
    assert_eq!(planner.gauges().snapshot().budget_scale, 0.8 * DECREASE);
    // Good batches give it back, a step each.
    teach(&mut planner, &[1; 100]).await;
    assert_eq!(planner.budget(None), ms(16));
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
    assert_eq!(planner.budget(None), ms(16));
}

/// Runs the model's first batch, its warm-up, which teaches no cost, and
/// lets a pause longer than any target here pass after it.
async fn warm_up(q: &mut QueueState<crate::queue::tests::Req>) {
    q.push(req(0), Instant::now()).unwrap();
    let batch = q.step(Instant::now(), 1, 0).batch.unwrap();
    advance(ms(500)).await;
    q.executed(batch, Instant::now());
    advance(ms(2000)).await;
}

#[tokio::test(start_paused = true)]
async fn the_first_batch_is_a_warm_up_and_teaches_no_cost() {
    let mut q = QueueState::new(target_config(4, 50));
    let gauges = q.target_gauges().unwrap();
    warm_up(&mut q).await;
    assert_eq!(gauges.snapshot().intercept_us, 0.0);
    assert_eq!(gauges.snapshot().per_inference_us, 0.0);
    // Its 500 ms would have refused this one behind a running batch.
    q.push(req(1), Instant::now()).unwrap();
    let batch = q.step(Instant::now(), 1, 0).batch.unwrap();
    q.push(req(2), Instant::now()).unwrap();
    advance(ms(10)).await;
    q.executed(batch, Instant::now());
    assert!((gauges.snapshot().per_inference_us - 10_000.0).abs() < 1.0);
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
    warm_up(&mut q).await;
    q.push(req(1), Instant::now()).unwrap();
    let step = q.step(Instant::now(), 1, 0);
    assert_eq!(step.dispatch.map(|d| d.len()), Some(1));
    let batch = step.batch.unwrap();
    advance(ms(20)).await;
    q.executed(batch, Instant::now());
    assert!((gauges.snapshot().per_inference_us - 20_000.0).abs() < 1.0);
    // A batch of 4 is predicted at 80 ms: over the 40 ms budget, so the
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
    assert!(
        error.message().contains("latency target of 50 ms"),
        "{error}"
    );
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
    warm_up(&mut q).await;
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
    warm_up(&mut q).await;
    q.push(req(1), Instant::now()).unwrap();
    let batch = q.step(Instant::now(), 1, 0).batch.unwrap();
    advance(ms(1)).await;
    q.executed(batch, Instant::now());
    q.answered(1, Instant::now());
    // Its client comes back 3 ms after its answer: clients are expected
    // back for 12 ms after one.
    advance(ms(3)).await;
    q.push(req(2), Instant::now()).unwrap();
    // Another client was answered and is expected back: it waits, but no
    // longer than the configured 5 ms.
    q.answered(1, Instant::now());
    let step = q.step(Instant::now(), 1, 0);
    assert!(step.dispatch.is_none());
    assert_eq!(step.wake_at, Some(Instant::now() + ms(5)));
    advance(ms(5)).await;
    assert_eq!(
        q.step(Instant::now(), 1, 0).dispatch.map(|d| d.len()),
        Some(1)
    );
}

/// A client expected back that went away holds a batch only as long as
/// clients usually take to come back (four times that), not the budget.
#[tokio::test(start_paused = true)]
async fn a_client_that_went_away_is_waited_for_briefly() {
    let mut q = QueueState::new(target_config(8, 1000));
    q.push(req(1), Instant::now()).unwrap();
    let batch = q.step(Instant::now(), 1, 0).batch.unwrap();
    advance(ms(10)).await;
    q.executed(batch, Instant::now());
    q.answered(1, Instant::now());
    advance(ms(2)).await;
    q.push(req(2), Instant::now()).unwrap();
    // Answered; two clients expected back, one returns 2 ms later, the
    // other never does.
    let batch = q.step(Instant::now(), 1, 0).batch.unwrap();
    advance(ms(10)).await;
    q.executed(batch, Instant::now());
    q.answered(2, Instant::now());
    advance(ms(2)).await;
    q.push(req(3), Instant::now()).unwrap();
    let step = q.step(Instant::now(), 1, 0);
    assert!(step.dispatch.is_none());
    // Returns take 2 ms: forgotten 8 ms after the answer, 6 ms from now.
    assert_eq!(step.wake_at, Some(Instant::now() + ms(6)));
    advance(ms(6)).await;
    let ids: Vec<u32> = q
        .step(Instant::now(), 1, 0)
        .dispatch
        .unwrap()
        .iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(ids, [3]);
}

/// A pause in arrivals longer than the target does not count as a slow
/// stream worth waiting for: after it, a burst's own gaps set the rate.
#[tokio::test(start_paused = true)]
async fn a_pause_in_arrivals_is_not_a_slow_stream() {
    let mut planner = Planner::new(target(100), 64);
    teach(&mut planner, &[1, 2, 4]).await;
    planner.arrived(Instant::now(), false);
    advance(Duration::from_secs(5)).await;
    for _ in 0..3 {
        planner.arrived(Instant::now(), false);
        advance(ms(1)).await;
    }
    // Gaps of 1 ms: the next is due 1 ms from now, not seconds.
    let now = Instant::now();
    let c = candidate(3, now + ms(90));
    assert_eq!(
        planner.decide(now, c),
        Decision::Wait { until: now + ms(1) }
    );
    advance(ms(1)).await;
    assert_eq!(
        planner.decide(Instant::now(), c),
        Decision::Go { limit: 64 }
    );
}

/// Arrivals further apart than a batch's fixed cost are not waited for:
/// the wait would cost more than the execution it saves.
#[tokio::test(start_paused = true)]
async fn a_sparse_stream_is_not_waited_for() {
    let mut planner = Planner::new(target(100), 64);
    // 5 ms per batch, 1 ms per inference.
    teach(&mut planner, &[1, 2, 4]).await;
    for _ in 0..5 {
        planner.arrived(Instant::now(), false);
        advance(ms(8)).await;
    }
    let now = Instant::now();
    assert_eq!(
        planner.decide(now, candidate(1, now + ms(80))),
        Decision::Go { limit: 64 }
    );
    for _ in 0..30 {
        planner.arrived(Instant::now(), false);
        advance(ms(3)).await;
    }
    let now = Instant::now();
    // A 3 ms gap (the mean still carries some of the 8 ms ones).
    assert!(matches!(
        planner.decide(now, candidate(1, now + ms(80))),
        Decision::Wait { .. }
    ));
}

/// A model whose learnt cost says even a lone request is late still takes
/// a request when nothing is queued or running: refusing it helps nobody,
/// and its execution is what corrects the cost.
#[tokio::test(start_paused = true)]
async fn an_idle_model_takes_a_request_its_costs_call_late() {
    let mut planner = Planner::new(target(20), 8);
    // Batches that took 50 ms, under a load that has since gone.
    for size in [1, 2] {
        let now = Instant::now();
        let id = planner.dispatched(now, size, vec![now; size as usize]);
        advance(ms(50)).await;
        planner.executed(id, Instant::now());
    }
    let now = Instant::now();
    let budget = planner.budget(None);
    assert_eq!(planner.admit(now, 1, 0, budget, 1), Ok(()));
    assert!(planner.admit(now, 1, 1, budget, 1).is_err());
    // A request's own deadline, shorter than the target's, still counts.
    assert!(
        planner
            .admit(now, 1, 0, planner.budget(Some(ms(10))), 1)
            .is_err()
    );
    let id = planner.dispatched(now, 1, vec![now]);
    assert!(planner.admit(now, 1, 0, budget, 1).is_err());
    advance(ms(2)).await;
    planner.executed(id, Instant::now());
}

/// In a steady stream a batch large enough to keep up with it goes at
/// once, instead of waiting out the budget for a larger one: the next
/// gathers while it runs.
#[tokio::test(start_paused = true)]
async fn a_batch_that_keeps_up_with_the_stream_goes_without_waiting() {
    let mut planner = Planner::new(target(100), 64);
    // 5 ms per batch, 1 ms per inference.
    teach(&mut planner, &[1, 2, 4, 8]).await;
    // An arrival every 2 ms: a batch of 5 costs 10 ms, the time 5 take
    // to arrive; a smaller one falls behind.
    for _ in 0..60 {
        planner.arrived(Instant::now(), false);
        advance(ms(2)).await;
    }
    let now = Instant::now();
    assert_eq!(planner.keep_up_size(now), 5);
    assert!(matches!(
        planner.decide(now, candidate(3, now + ms(80))),
        Decision::Wait { .. }
    ));
    assert_eq!(
        planner.decide(now, candidate(5, now + ms(80))),
        Decision::Go { limit: 64 }
    );
    // Clients expected back still hold it while they come back together
    // (closed loop: one returns within 1 ms of an answer, less than the
    // 2 ms spacing)...
    let back = Candidate {
        back_until: Some(now + ms(3)),
        ..candidate(5, now + ms(80))
    };
    planner.returned(ms(1));
    assert_eq!(
        planner.decide(now, back),
        Decision::Wait { until: now + ms(3) }
    );
    // ... but not arrivals that only followed an answer, the n-th n
    // spacings later (open loop).
    for n in 1..=30 {
        planner.returned(ms(2 * n));
    }
    assert_eq!(planner.decide(now, back), Decision::Go { limit: 64 });
    // Arrivals faster than an inference's cost: nothing keeps up, so the
    // largest batch is the one to wait for.
    for _ in 0..200 {
        planner.arrived(Instant::now(), true);
        advance(Duration::from_micros(500)).await;
    }
    assert_eq!(planner.keep_up_size(Instant::now()), 64);
}
