//! A request on its way through a scheduler to an instance: the validated
//! request, where its answer goes, and what the batcher needs to know.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nereid_core::{Error, InferResponse};
use nereid_scheduler::{CorrelationId, OrderTicket, Pending, Placement, SequenceStep};
use tokio::sync::{mpsc, oneshot};

use crate::sequence::SequenceRequest;
use crate::stats::{ComputeTimes, FailureReason, ModelStats, PendingMark};
use crate::validate::ValidatedRequest;

/// One response of a stream: a response or an error, or neither when the
/// model sent the final flag alone; `last` ends the stream.
#[derive(Debug)]
pub struct Streamed {
    pub response: Option<Result<InferResponse, Error>>,
    pub last: bool,
}

/// Where a job's answer goes: one response, or a decoupled model's stream.
#[derive(Debug)]
pub enum Reply {
    Once(oneshot::Sender<Result<InferResponse, Error>>),
    Stream(mpsc::UnboundedSender<Streamed>),
}

impl Reply {
    fn is_closed(&self) -> bool {
        match self {
            Reply::Once(reply) => reply.is_closed(),
            Reply::Stream(stream) => stream.is_closed(),
        }
    }

    /// Sends `result` as the whole answer (on a stream: the last response).
    fn send(self, result: Result<InferResponse, Error>) {
        match self {
            Reply::Once(reply) => {
                let _ = reply.send(result);
            }
            Reply::Stream(stream) => {
                let _ = stream.send(Streamed {
                    response: Some(result),
                    last: true,
                });
            }
        }
    }
}

/// A validated request waiting for an instance.
#[derive(Debug)]
pub struct Job {
    pub request: ValidatedRequest,
    pub enqueued: Instant,
    reply: Reply,
    order: Option<OrderTicket>,
    stats: Arc<ModelStats>,
    /// The request's `priority` parameter (0: the default level).
    priority: u64,
    /// The request's `timeout` parameter.
    timeout: Option<Duration>,
    /// Counts the job as pending until it starts executing.
    waiting: Option<PendingMark>,
    /// Its place in a sequence, for a model with `sequence_batching`.
    pub sequence: Option<SequenceRequest>,
    /// Sent by the server, not a client (a reaped sequence's last step):
    /// nobody waits for its answer and the statistics leave it out.
    pub detached: bool,
    /// The request's span (the engine's `infer` span where it entered),
    /// which its batch's span follows from and which gets its queue and
    /// compute times.
    pub span: tracing::Span,
}

impl Job {
    pub fn new(
        request: ValidatedRequest,
        reply: Reply,
        stats: Arc<ModelStats>,
        order: Option<OrderTicket>,
    ) -> Result<Job, Error> {
        let routing = &request.request.routing;
        let (priority, timeout) = (routing.priority, routing.timeout);
        Ok(Job {
            request,
            enqueued: Instant::now(),
            reply,
            order,
            waiting: Some(stats.mark_pending()),
            stats,
            priority,
            timeout,
            sequence: None,
            detached: false,
            span: tracing::Span::current(),
        })
    }

    /// The step that tells a model its sequence `id` ends because it was
    /// idle too long: `request` (the model's inputs as zeros) with the END
    /// flag and the sequence's parameters, answered to nobody.
    pub fn farewell(
        mut request: ValidatedRequest,
        id: CorrelationId,
        stats: Arc<ModelStats>,
    ) -> Job {
        let (reply, _) = oneshot::channel();
        let reply = Reply::Once(reply);
        request.request.routing.sequence = nereid_core::Sequence {
            id: id.clone(),
            start: false,
            end: true,
        };
        Job {
            request,
            enqueued: Instant::now(),
            reply,
            order: None,
            stats,
            priority: 0,
            timeout: None,
            waiting: None,
            sequence: Some(SequenceRequest {
                id,
                start: false,
                end: true,
                placement: None,
            }),
            detached: true,
            span: tracing::Span::none(),
        }
    }

    /// Gives the request's span its time in the queue and in compute.
    pub fn record_times(&self, queue: Duration, compute: &ComputeTimes) {
        let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.span.record("queue_us", micros(queue));
        let total = compute.input + compute.infer + compute.output;
        self.span.record("compute_us", micros(total));
    }

    /// The job leaves the pending count: an instance runs it now.
    pub fn start(&mut self) {
        self.waiting = None;
    }

    /// Whether the client stopped waiting (connection closed, RPC cancelled).
    pub fn is_abandoned(&self) -> bool {
        !self.detached && self.reply.is_closed()
    }

    /// Sends the answer, after every earlier answer when the model
    /// preserves ordering.
    pub fn answer(self, result: Result<InferResponse, Error>) {
        let reply = self.reply;
        match self.order {
            Some(ticket) => ticket.deliver(move || reply.send(result)),
            None => reply.send(result),
        }
    }

    /// Where a decoupled model's responses to this job go; `None` when the
    /// job waits for one answer.
    pub fn stream(&self) -> Option<&mpsc::UnboundedSender<Streamed>> {
        match &self.reply {
            Reply::Stream(stream) => Some(stream),
            Reply::Once(_) => None,
        }
    }
}

impl Pending for Job {
    fn batch_size(&self) -> u64 {
        self.request.batch_size
    }

    fn shape_key(&self) -> u64 {
        let mut hasher = DefaultHasher::new();
        let mut inputs: Vec<_> = self.request.request.inputs.iter().collect();
        inputs.sort_by(|a, b| a.name.cmp(&b.name));
        for input in inputs {
            input.name.hash(&mut hasher);
            input.datatype.wire_name().hash(&mut hasher);
            input.shape.get(1..).unwrap_or_default().hash(&mut hasher);
        }
        hasher.finish()
    }

    fn priority(&self) -> u64 {
        self.priority
    }

    fn timeout(&self) -> Option<Duration> {
        self.timeout
    }

    fn is_abandoned(&self) -> bool {
        Job::is_abandoned(self)
    }

    fn reject(self, error: Error) {
        if !self.detached {
            self.stats
                .record_failure_for(self.enqueued.elapsed(), FailureReason::Rejected);
        }
        self.answer(Err(error));
    }

    fn cancel(self) {
        self.stats.record_cancelled();
    }
}

/// A job without a sequence (never sent to a sequence batcher) reads as
/// correlation ID 0.
static NO_SEQUENCE: CorrelationId = CorrelationId::Int(0);

impl SequenceStep for Job {
    fn correlation_id(&self) -> &CorrelationId {
        self.sequence.as_ref().map_or(&NO_SEQUENCE, |s| &s.id)
    }

    fn is_start(&self) -> bool {
        self.sequence.as_ref().is_some_and(|s| s.start)
    }

    fn is_end(&self) -> bool {
        self.sequence.as_ref().is_some_and(|s| s.end)
    }

    fn place(&mut self, placement: Placement) {
        if let Some(sequence) = &mut self.sequence {
            sequence.placement = Some(placement);
        }
    }

    fn reject(self, error: Error) {
        Pending::reject(self, error);
    }
}
