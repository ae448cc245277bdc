//! The batcher's queue as plain state: pushing requests, expiring them by
//! their queue policy, and deciding when to dispatch which batch. No I/O,
//! no tasks: the actor in `batcher.rs` calls it, and tests drive it with a
//! paused clock.
//!
//! How a batch is chosen, given an idle instance:
//! 1. The head is the oldest request of the highest priority level
//!    (delayed requests come after every level). The batch takes, in that
//!    order, requests with the head's shape until `max_batch_size`.
//! 2. It goes at once, trimmed, when some of it reaches a preferred size:
//!    trimmed to the largest preferred size its requests reach in order,
//!    or, when it holds more than the largest preferred size, to the
//!    requests that fit in it (Triton's rule). Nothing below delays that.
//! 3. Otherwise it goes whole when it cannot grow (full, or a request of
//!    its shape no longer fits), when the queue delay is zero or its oldest
//!    request waited it out, or when every instance is idle and no client
//!    is expected back: then no running batch can free more work and
//!    waiting would only add latency ("waiting cannot make it bigger").
//!    Clients are expected back after a batch is answered: each answered
//!    request counts one expected arrival, each arrival cancels one, and
//!    what is still expected a queue delay after the last answer is
//!    forgotten. Without this, clients that wait for their answers split
//!    into two cohorts that take turns, each batch half what the load
//!    allows. This last reason does not apply when the config names a
//!    preferred size below `max_batch_size`: such a batch waits for that
//!    size or the delay, as in Triton, so that a burst reaching the size
//!    goes as one batch rather than its first request alone.
//! 4. Otherwise it waits for more requests, at most until its oldest
//!    request has waited `max_queue_delay`.
//!
//! A request's queue timeout counts from when it was submitted, and one
//! that has passed by the time the batcher looks is rejected (or delayed)
//! even on an idle model, as in Triton.
//!
//! With a latency target (`nereid.latency_target_ms`), rules 2 to 4 give
//! way to the planner in `target.rs`: it says how large a batch may be and
//! how long it may wait, and a request it cannot serve in time is refused
//! when it arrives. `max_queue_delay`, when set, still bounds the wait.

use std::collections::VecDeque;
use std::time::Duration;

use nereid_core::Error;
use tokio::time::Instant;

use crate::Pending;
use crate::policy::{BatcherConfig, TimeoutAction};
use crate::target::{self, Decision, Planner, TargetGauges};

struct Entry<T> {
    item: T,
    enqueued: Instant,
    deadline: Option<Instant>,
    /// When it must be answered to meet the latency target's budget.
    due: Option<Instant>,
    action: TimeoutAction,
    size: u64,
    key: u64,
}

/// The requests the next batch could hold.
struct Candidate {
    /// (queue, index) of each, in dispatch order.
    picked: Vec<(usize, usize)>,
    /// The batch size of each.
    sizes: Vec<u64>,
    total: u64,
    /// The oldest enqueue time among them.
    oldest: Option<Instant>,
    /// The earliest due time among them (latency target only).
    due: Option<Instant>,
    /// A request of the same shape was left out: it did not fit.
    overflow: bool,
}

/// What one call to [`QueueState::step`] decided.
#[derive(Debug)]
pub struct Step<T> {
    /// A batch for the idle instance, in queue order.
    pub dispatch: Option<Vec<T>>,
    /// When to look again even if nothing arrives (a delay or a timeout).
    pub wake_at: Option<Instant>,
    /// Requests whose queue timeout expired under a REJECT policy.
    pub expired: Vec<T>,
    /// Requests whose clients went away.
    pub abandoned: Vec<T>,
    /// The id the latency-target planner gave the dispatched batch; its
    /// permit reports it back through [`QueueState::executed`].
    pub batch: Option<u64>,
}

/// The queues of one model.
pub struct QueueState<T> {
    config: BatcherConfig,
    levels: Vec<VecDeque<Entry<T>>>,
    delayed: VecDeque<Entry<T>>,
    /// Requests answered whose clients have not (as far as arrivals tell)
    /// sent their next one, and when the last answer went.
    returning: usize,
    last_answer: Option<Instant>,
    /// Set when the config has a latency target.
    planner: Option<Planner>,
    /// Instances, as the last step saw them.
    instances: usize,
}

impl<T> std::fmt::Debug for QueueState<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueState")
            .field("model", &self.config.model)
            .finish_non_exhaustive()
    }
}

impl<T: Pending> QueueState<T> {
    pub fn new(config: BatcherConfig) -> Self {
        let levels = config.levels.iter().map(|_| VecDeque::new()).collect();
        let planner = config
            .latency_target
            .map(|t| Planner::new(t, config.max_batch_size));
        QueueState {
            config,
            levels,
            delayed: VecDeque::new(),
            returning: 0,
            last_answer: None,
            planner,
            instances: 1,
        }
    }

    /// The latency-target planner's gauges, when the config has a target.
    pub fn target_gauges(&self) -> Option<std::sync::Arc<TargetGauges>> {
        self.planner.as_ref().map(Planner::gauges)
    }

    /// A batch the planner numbered `batch` came back from its instance at
    /// `at`.
    pub fn executed(&mut self, batch: u64, at: Instant) {
        if let Some(planner) = &mut self.planner {
            planner.executed(batch, at);
        }
    }

    pub fn config(&self) -> &BatcherConfig {
        &self.config
    }

    /// Requests waiting, all levels together.
    pub fn len(&self) -> usize {
        self.levels.iter().map(VecDeque::len).sum::<usize>() + self.delayed.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queues `item`, or hands it back with the error to answer it with
    /// when its level is full.
    pub fn push(&mut self, item: T, now: Instant) -> Result<(), (T, Error)> {
        let level = self.config.level_of(item.priority());
        let policy = &self.config.levels[level];
        if self.levels[level].len() >= policy.max_queue_size {
            let error = Error::unavailable(format!(
                "inference request for model '{}' rejected: the queue of priority level {} is full ({} requests)",
                self.config.model,
                level + 1,
                policy.max_queue_size
            ));
            return Err((item, error));
        }
        let deadline = policy.timeout(item.timeout()).map(|t| now + t);
        let size = item.batch_size().max(1);
        // An arrival while answered clients have not all come back is one
        // of them, even one later than they were waited for.
        let prompted = self.returning > 0;
        let due = match &mut self.planner {
            None => None,
            Some(planner) => {
                let budget = planner.budget(item.timeout());
                let ahead: u64 = self.levels[..=level].iter().flatten().map(|e| e.size).sum();
                if let Err(late) = planner.admit(now, size, ahead, budget, self.instances) {
                    planner.shed();
                    let error = target::shed_error(&self.config.model, planner.target(), late);
                    return Err((item, error));
                }
                if let (true, Some(at)) = (prompted, self.last_answer) {
                    planner.returned(now.saturating_duration_since(at));
                }
                planner.arrived(now, prompted);
                Some(now + budget)
            }
        };
        let entry = Entry {
            size,
            key: item.shape_key(),
            action: policy.timeout_action,
            item,
            enqueued: now,
            deadline,
            due,
        };
        self.levels[level].push_back(entry);
        self.returning = self.returning.saturating_sub(1);
        Ok(())
    }

    /// Records that `requests` were answered at `now`: their clients may be
    /// about to send more.
    pub fn answered(&mut self, requests: usize, now: Instant) {
        self.returning = self.expected_back(now) + requests;
        self.last_answer = Some(now);
    }

    /// Arrivals still expected from answered clients; forgotten once a
    /// queue delay has passed since the last answer.
    fn expected_back(&self, now: Instant) -> usize {
        match self.last_answer {
            Some(at) if now < at + self.return_horizon() => self.returning,
            _ => 0,
        }
    }

    /// How long after an answer its client is still expected back: the
    /// queue delay, or with a latency target, what the planner learnt of
    /// how soon clients come back.
    fn return_horizon(&self) -> Duration {
        self.planner
            .as_ref()
            .map_or(self.config.max_queue_delay, Planner::return_horizon)
    }

    /// Expires and prunes the queue, then decides whether to dispatch a
    /// batch given `idle` and `busy` instance counts.
    pub fn step(&mut self, now: Instant, idle: usize, busy: usize) -> Step<T> {
        let (expired, abandoned) = self.prune(now);
        let mut step = Step {
            dispatch: None,
            wake_at: self.earliest_deadline(),
            expired,
            abandoned,
            batch: None,
        };
        self.instances = (idle + busy).max(1);
        if idle == 0 || self.is_empty() {
            return step;
        }
        let candidate = self.candidate();
        if self.planner.is_some() {
            self.step_to_target(now, candidate, &mut step);
            return step;
        }
        let oldest = candidate.oldest.unwrap_or(now);
        // As Triton, a zero delay is never "waited out": such a batch
        // still goes at its preferred size.
        let delay = self.config.max_queue_delay;
        let delay_over = !delay.is_zero() && now >= oldest + delay;
        // As Triton: a batch that reached a preferred size (or cannot grow
        // past the largest one) goes at once, trimmed to it, unless its
        // oldest request already waited out the delay; then everything
        // that fits goes. Waiting for clients never holds such a batch.
        let limit = match self.preferred_cut(&candidate) {
            Some(cut) if !delay_over => Some(cut),
            _ => {
                let nobody_coming =
                    self.may_skip_delay() && busy == 0 && self.expected_back(now) == 0;
                let go = candidate.overflow
                    || candidate.total >= self.max_preferred()
                    || self.config.max_queue_delay.is_zero()
                    || delay_over
                    || nobody_coming;
                go.then_some(candidate.total)
            }
        };
        if let Some(limit) = limit {
            step.dispatch = Some(self.take(&candidate.picked, limit));
            step.wake_at = self.earliest_deadline();
        } else {
            let mut due = oldest + self.config.max_queue_delay;
            if busy == 0 && self.may_skip_delay() {
                // Expected clients are forgotten at this point.
                let forget = self.last_answer.map(|at| at + self.config.max_queue_delay);
                due = forget.map_or(due, |f| f.min(due));
            }
            step.wake_at = Some(step.wake_at.map_or(due, |w| w.min(due)));
        }
        step
    }

    /// Rules 2 to 4 with a latency target: the planner decides.
    fn step_to_target(&mut self, now: Instant, candidate: Candidate, step: &mut Step<T>) {
        let Some(planner) = &self.planner else {
            return;
        };
        let oldest = candidate.oldest.unwrap_or(now);
        let delay = self.config.max_queue_delay;
        let view = target::Candidate {
            total: candidate.total,
            due: candidate.due.unwrap_or(now),
            can_grow: !candidate.overflow && candidate.total < self.config.max_batch_size,
            back_until: (self.expected_back(now) > 0)
                .then(|| self.last_answer.map(|at| at + self.return_horizon()))
                .flatten(),
        };
        let decision = match planner.decide(now, view) {
            // A configured delay still bounds the wait.
            Decision::Wait { .. } if !delay.is_zero() && now >= oldest + delay => Decision::Go {
                limit: candidate.total,
            },
            Decision::Wait { until } if !delay.is_zero() => Decision::Wait {
                until: until.min(oldest + delay),
            },
            other => other,
        };
        match decision {
            Decision::Go { limit } => {
                let (items, submitted) = self.take_with_times(&candidate.picked, limit);
                let inferences = items.iter().map(|i| i.batch_size().max(1)).sum();
                if let Some(planner) = &mut self.planner {
                    step.batch = Some(planner.dispatched(now, inferences, submitted));
                }
                step.dispatch = Some(items);
                step.wake_at = self.earliest_deadline();
            }
            Decision::Wait { until } => {
                step.wake_at = Some(step.wake_at.map_or(until, |w| w.min(until)));
            }
        }
    }

    /// Whether a batch below every preferred size may go before the delay
    /// when waiting cannot make it bigger (rule 3). Not when the config
    /// names a preferred size below the largest batch: it asked for
    /// batches of that size and agreed to wait the delay for them, and,
    /// as in Triton, a burst that reaches it goes as one batch instead of
    /// its first request going alone.
    fn may_skip_delay(&self) -> bool {
        self.config
            .preferred_batch_sizes
            .first()
            .is_none_or(|&smallest| smallest >= self.config.max_batch_size)
    }

    /// Removes timed-out (REJECT) and abandoned requests; moves timed-out
    /// DELAY requests behind every other.
    fn prune(&mut self, now: Instant) -> (Vec<T>, Vec<T>) {
        let (mut expired, mut abandoned) = (Vec::new(), Vec::new());
        let mut delayed = Vec::new();
        for queue in self
            .levels
            .iter_mut()
            .chain(std::iter::once(&mut self.delayed))
        {
            let mut kept = VecDeque::with_capacity(queue.len());
            for mut entry in queue.drain(..) {
                if entry.item.is_abandoned() {
                    abandoned.push(entry.item);
                } else if entry.deadline.is_some_and(|d| d <= now) {
                    match entry.action {
                        TimeoutAction::Reject => expired.push(entry.item),
                        TimeoutAction::Delay => {
                            entry.deadline = None;
                            delayed.push(entry);
                        }
                    }
                } else {
                    kept.push_back(entry);
                }
            }
            *queue = kept;
        }
        self.delayed.extend(delayed);
        (expired, abandoned)
    }

    fn earliest_deadline(&self) -> Option<Instant> {
        self.ordered().filter_map(|(_, _, e)| e.deadline).min()
    }

    /// Every entry in dispatch order, with its queue and position.
    fn ordered(&self) -> impl Iterator<Item = (usize, usize, &Entry<T>)> {
        self.levels
            .iter()
            .chain(std::iter::once(&self.delayed))
            .enumerate()
            .flat_map(|(q, queue)| queue.iter().enumerate().map(move |(i, e)| (q, i, e)))
    }

    /// The requests the next batch would hold, in dispatch order: those
    /// with the head's shape, while they fit in `max_batch_size`.
    fn candidate(&self) -> Candidate {
        let mut c = Candidate {
            picked: Vec::new(),
            sizes: Vec::new(),
            total: 0,
            oldest: None,
            due: None,
            overflow: false,
        };
        let mut key = None;
        for (q, i, entry) in self.ordered() {
            let head = *key.get_or_insert(entry.key);
            if entry.key != head {
                continue;
            }
            // The head always goes, even if it alone exceeds the maximum.
            if !c.picked.is_empty() && c.total + entry.size > self.config.max_batch_size {
                c.overflow = true;
                continue;
            }
            c.picked.push((q, i));
            c.sizes.push(entry.size);
            c.total += entry.size;
            c.oldest = Some(
                c.oldest
                    .map_or(entry.enqueued, |o: Instant| o.min(entry.enqueued)),
            );
            if let Some(due) = entry.due {
                c.due = Some(c.due.map_or(due, |d: Instant| d.min(due)));
            }
            if c.total >= self.config.max_batch_size {
                break;
            }
        }
        c
    }

    /// The largest preferred size among the candidate's prefixes, or, when
    /// it holds more than the largest preferred size, the longest prefix
    /// within it (Triton's "best preferred batch size").
    fn preferred_cut(&self, candidate: &Candidate) -> Option<u64> {
        let max_preferred = self.max_preferred();
        let mut best = None;
        let mut total = 0;
        for &size in &candidate.sizes {
            if total > 0 && total + size > max_preferred {
                return best.or(Some(total));
            }
            total += size;
            if self.config.preferred_batch_sizes.contains(&total) {
                best = Some(total);
            }
        }
        best
    }

    /// The size past which a batch need not grow: the largest preferred
    /// size, or `max_batch_size` when none is set.
    fn max_preferred(&self) -> u64 {
        self.config
            .preferred_batch_sizes
            .last()
            .copied()
            .unwrap_or(self.config.max_batch_size)
    }

    /// Removes the picked entries, in order, while they fit in `limit`.
    fn take(&mut self, picked: &[(usize, usize)], limit: u64) -> Vec<T> {
        self.take_with_times(picked, limit).0
    }

    /// As [`Self::take`], with when each was submitted.
    fn take_with_times(&mut self, picked: &[(usize, usize)], limit: u64) -> (Vec<T>, Vec<Instant>) {
        let mut chosen = Vec::new();
        let mut total = 0;
        for &(q, i) in picked {
            let size = self.queue(q)[i].size;
            if total > 0 && total + size > limit {
                break;
            }
            total += size;
            chosen.push((q, i));
        }
        // Remove from the back so earlier indices stay valid.
        let mut items: Vec<(usize, T, Instant)> = Vec::with_capacity(chosen.len());
        for (n, &(q, i)) in chosen.iter().enumerate().rev() {
            if let Some(entry) = self.queue_mut(q).remove(i) {
                items.push((n, entry.item, entry.enqueued));
            }
        }
        items.sort_by_key(|(n, _, _)| *n);
        items.into_iter().map(|(_, item, at)| (item, at)).unzip()
    }

    fn queue(&self, q: usize) -> &VecDeque<Entry<T>> {
        self.levels.get(q).unwrap_or(&self.delayed)
    }

    fn queue_mut(&mut self, q: usize) -> &mut VecDeque<Entry<T>> {
        if q < self.levels.len() {
            &mut self.levels[q]
        } else {
            &mut self.delayed
        }
    }
}

#[cfg(test)]
#[path = "queue_tests.rs"]
pub(crate) mod tests;
