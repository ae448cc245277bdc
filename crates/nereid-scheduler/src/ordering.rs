//! `preserve_ordering`: answers leave in the order their requests arrived,
//! whichever instance finished first. Each request takes a ticket when it
//! is queued; an answer is held until every earlier ticket is done. A
//! ticket dropped without an answer (a rejected or abandoned request) counts
//! as done, so it never blocks those behind it.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;

type Delivery = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct State {
    next_ticket: u64,
    next_release: u64,
    done: BTreeMap<u64, Option<Delivery>>,
}

/// The order of one model's answers.
#[derive(Clone, Default)]
pub struct ResponseOrder {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for ResponseOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.state.lock();
        f.debug_struct("ResponseOrder")
            .field("next_release", &state.next_release)
            .finish_non_exhaustive()
    }
}

impl ResponseOrder {
    /// The next place in line.
    pub fn ticket(&self) -> OrderTicket {
        let mut state = self.state.lock();
        let seq = state.next_ticket;
        state.next_ticket += 1;
        OrderTicket {
            seq,
            order: Some(self.clone()),
        }
    }

    fn complete(&self, seq: u64, delivery: Option<Delivery>) {
        let mut state = self.state.lock();
        state.done.insert(seq, delivery);
        // Deliveries are cheap, non-blocking sends; running them under the
        // lock keeps their order exact.
        loop {
            let next = state.next_release;
            let Some(delivery) = state.done.remove(&next) else {
                break;
            };
            state.next_release += 1;
            if let Some(deliver) = delivery {
                deliver();
            }
        }
    }
}

/// One request's place in line.
pub struct OrderTicket {
    seq: u64,
    order: Option<ResponseOrder>,
}

impl std::fmt::Debug for OrderTicket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrderTicket")
            .field("seq", &self.seq)
            .finish()
    }
}

impl OrderTicket {
    /// Runs `deliver` once every earlier ticket is done.
    pub fn deliver(mut self, deliver: impl FnOnce() + Send + 'static) {
        if let Some(order) = self.order.take() {
            order.complete(self.seq, Some(Box::new(deliver)));
        }
    }
}

impl Drop for OrderTicket {
    fn drop(&mut self) {
        if let Some(order) = self.order.take() {
            order.complete(self.seq, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_leave_in_ticket_order() {
        let order = ResponseOrder::default();
        let log = Arc::new(Mutex::new(Vec::new()));
        let tickets: Vec<OrderTicket> = (0..4).map(|_| order.ticket()).collect();
        let mut tickets: Vec<Option<OrderTicket>> = tickets.into_iter().map(Some).collect();
        let push = |n: u32| {
            let log = Arc::clone(&log);
            move || log.lock().push(n)
        };
        tickets[2].take().unwrap().deliver(push(2));
        tickets[3].take().unwrap().deliver(push(3));
        assert!(log.lock().is_empty());
        drop(tickets[1].take()); // rejected: no answer, but not blocking
        assert!(log.lock().is_empty());
        tickets[0].take().unwrap().deliver(push(0));
        assert_eq!(*log.lock(), [0, 2, 3]);
    }
}
