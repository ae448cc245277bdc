//! The choice of an idle instance's next batch, per [`Strategy`]: which of
//! its slots' waiting requests go and at which rows, or until when to wait
//! for more. It reads the instance and changes nothing; the batcher takes
//! the requests chosen.

use std::time::{Duration, Instant};

use super::state::Instance;
use super::types::Strategy;

/// What an idle instance's strategy says.
pub(super) enum Choice {
    /// Send the next request of each slot, at its row: (slot, row) each,
    /// and the rows the batch has.
    Go {
        picked: Vec<(usize, usize)>,
        rows: usize,
    },
    /// Wait for more requests; look again at `until` at the latest.
    Wait { until: Instant },
    /// No request waits.
    Nothing,
}

pub(super) fn choose<T>(strategy: &Strategy, instance: &Instance<T>, now: Instant) -> Choice {
    match strategy {
        Strategy::Direct {
            max_queue_delay,
            minimum_slot_utilization,
        } => direct(instance, *max_queue_delay, *minimum_slot_utilization, now),
        Strategy::Oldest {
            max_batch_size,
            preferred,
            max_queue_delay,
        } => oldest(instance, *max_batch_size, preferred, *max_queue_delay, now),
    }
}

/// The slots whose sequence has a request waiting, with when the first of
/// them arrived.
fn waiting<T>(instance: &Instance<T>) -> impl Iterator<Item = (usize, Instant)> + '_ {
    instance
        .slots
        .iter()
        .enumerate()
        .filter(|(_, s)| s.sequence.is_some())
        .filter_map(|(i, s)| s.pending.front().map(|(_, at)| (i, *at)))
}

/// Every slot's next request, at the slot's row, once enough of the slots
/// have one or the oldest has waited the delay.
fn direct<T>(
    instance: &Instance<T>,
    max_queue_delay: Duration,
    minimum_slot_utilization: f32,
    now: Instant,
) -> Choice {
    let ready: Vec<(usize, Instant)> = waiting(instance).collect();
    let Some(oldest) = ready.iter().map(|(_, at)| *at).min() else {
        return Choice::Nothing;
    };
    let utilization = ready.len() as f32 / instance.slots.len().max(1) as f32;
    if utilization < minimum_slot_utilization
        && now.saturating_duration_since(oldest) < max_queue_delay
    {
        return Choice::Wait {
            until: oldest + max_queue_delay,
        };
    }
    Choice::Go {
        picked: ready.into_iter().map(|(i, _)| (i, i)).collect(),
        rows: instance.rows(),
    }
}

/// The next requests of the candidate sequences, oldest first, in rows
/// from 0: as many as there are (up to `max_batch_size`) once no more can
/// come or the oldest has waited the delay, else a preferred size the
/// batch reaches.
fn oldest<T>(
    instance: &Instance<T>,
    max_batch_size: usize,
    preferred: &[usize],
    max_queue_delay: Duration,
    now: Instant,
) -> Choice {
    let mut ready: Vec<(Instant, usize)> = waiting(instance).map(|(i, at)| (at, i)).collect();
    ready.sort_unstable();
    let Some(&(oldest, _)) = ready.first() else {
        return Choice::Nothing;
    };
    // When every sequence of the instance has a request here, waiting
    // cannot make the batch bigger.
    let live = instance
        .slots
        .iter()
        .filter(|s| s.sequence.is_some())
        .count();
    let take = if ready.len() >= max_batch_size.min(live)
        || max_queue_delay.is_zero()
        || now.saturating_duration_since(oldest) >= max_queue_delay
    {
        ready.len().min(max_batch_size)
    } else if let Some(size) = preferred_reached(
        instance,
        ready.len(),
        max_batch_size,
        preferred,
        max_queue_delay,
        now,
    ) {
        size
    } else {
        return Choice::Wait {
            until: look_again(instance, oldest, max_queue_delay, now),
        };
    };
    let picked: Vec<(usize, usize)> = ready
        .into_iter()
        .take(take)
        .enumerate()
        .map(|(row, (_, slot))| (slot, row))
        .collect();
    Choice::Go {
        rows: picked.len(),
        picked,
    }
}

/// The largest preferred size that `ready` requests reach, unless the
/// sequences expected back could make the batch reach a larger one.
/// Sequences whose last step was just answered send their next one soon:
/// the batch waits for them (within the delay) rather than leave them to
/// the next batch, where they and the rest would take turns in half-size
/// batches.
fn preferred_reached<T>(
    instance: &Instance<T>,
    ready: usize,
    max_batch_size: usize,
    preferred: &[usize],
    max_queue_delay: Duration,
    now: Instant,
) -> Option<usize> {
    let expected = instance
        .slots
        .iter()
        .filter(|s| s.sequence.is_some() && s.pending.is_empty())
        .filter(|s| {
            s.answered
                .is_some_and(|at| now.saturating_duration_since(at) < max_queue_delay)
        })
        .count();
    let reachable = (ready + expected).min(max_batch_size);
    let reached = preferred.iter().rev().find(|&&p| p <= ready).copied();
    let larger_reachable = preferred
        .iter()
        .any(|&p| p > reached.unwrap_or(0) && p <= reachable);
    reached.filter(|_| !larger_reachable)
}

/// When a waiting batch is looked at again: when its oldest request has
/// waited the delay, or before, when a sequence answered earlier stops
/// being expected back and a smaller preferred size may go without it.
fn look_again<T>(
    instance: &Instance<T>,
    oldest: Instant,
    max_queue_delay: Duration,
    now: Instant,
) -> Instant {
    let returning = instance
        .slots
        .iter()
        .filter_map(|s| s.answered)
        .map(|at| at + max_queue_delay)
        .filter(|&until| until > now)
        .min();
    let due = oldest + max_queue_delay;
    returning.map_or(due, |r| r.min(due))
}
