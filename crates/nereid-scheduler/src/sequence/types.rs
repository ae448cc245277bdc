//! What the sequence batcher shares with the engine and what its parts
//! share with each other: a request of a sequence ([`SequenceStep`]), where
//! it runs ([`Placement`]) and a model's settings ([`SequenceConfig`]). Apart
//! from the batcher so that its state and its strategies reach these
//! without reaching into the batcher that drives them.

use std::sync::Arc;
use std::time::Duration;

use nereid_core::{CorrelationId, Error, Tensor};
use parking_lot::Mutex;

/// The implicit state of one sequence: the state outputs of its last step,
/// `None` before its first (the initial state then applies).
pub type SequenceState = Arc<Mutex<Option<Vec<Tensor>>>>;

/// Where a request of a sequence runs.
#[derive(Debug, Clone)]
pub struct Placement {
    /// Its row in the batch: its slot on the instance.
    pub row: usize,
    /// Rows in the batch: one more than the highest slot of the instance
    /// that holds a sequence.
    pub rows: usize,
    pub state: SequenceState,
}

/// A request of a sequence, as the sequence batcher sees it.
pub trait SequenceStep: Send + 'static {
    fn correlation_id(&self) -> &CorrelationId;
    fn is_start(&self) -> bool;
    fn is_end(&self) -> bool;
    /// Tells the request where it runs, just before it is sent.
    fn place(&mut self, placement: Placement);
    /// Answers it with `error` without running it.
    fn reject(self, error: Error);
}

/// How an instance's batch is formed from its slots.
#[derive(Debug, Clone, PartialEq)]
pub enum Strategy {
    /// A batch waits, at most `max_queue_delay`, until at least
    /// `minimum_slot_utilization` of the instance's slots have a request
    /// (0 and 0: it goes at once).
    Direct {
        max_queue_delay: Duration,
        minimum_slot_utilization: f32,
    },
    Oldest {
        max_batch_size: usize,
        /// Ascending.
        preferred: Vec<usize>,
        max_queue_delay: Duration,
    },
}

/// What the sequence batcher needs to know about one model.
#[derive(Debug, Clone)]
pub struct SequenceConfig {
    pub model: String,
    pub strategy: Strategy,
    pub slots_per_instance: usize,
    /// How long a sequence may go without a request before its slot is
    /// taken back.
    pub idle: Duration,
    /// Sequences that may wait for a slot; more are refused at once.
    pub max_backlog: usize,
    /// Counts the sequences released for being idle (the model's
    /// statistics hold it).
    pub reaped: Arc<std::sync::atomic::AtomicU64>,
}

/// Sequences waiting for a slot beyond which new ones are refused (Triton
/// has no bound).
pub const DEFAULT_MAX_BACKLOG: usize = 4096;

/// Makes the step that tells a model a sequence ends because it was idle
/// too long (an END request without a client); `None` to release it
/// silently.
pub type Farewell<T> = Box<dyn Fn(&CorrelationId) -> Option<T> + Send + Sync>;
