//! One instance of a Python model: its worker, and the shared memory the
//! two exchange tensors through. A batch goes to the worker as its list of
//! requests (`execute(requests)`), and each request gets its own answer.
//! A decoupled model's request stays open past its `execute` until its
//! final flag, as in Triton: the instance takes its next batch meanwhile
//! (`link.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nereid_core::{
    BackendError, Batch, BatchRequest, InferRequest, ModelInstance, RequestWise, Tensor,
};
use parking_lot::MutexGuard;

use crate::bls::Bls;
use crate::link::{CANCEL_POLL, Io, Link};
use crate::message::{self, BadMessage, Body, EXECUTE, Out, Slot};
use crate::open::Lease;
use crate::service::Service;
use crate::shm::Arena;
use crate::streams::{Kept, reschedule_refused};
use crate::worker::{Incoming, Launch, Worker, WorkerError};

/// A worker that died this many times within [`DEATH_WINDOW`] is not
/// started again: the model's requests fail until it is reloaded.
const MAX_DEATHS: usize = 3;
const DEATH_WINDOW: Duration = Duration::from_secs(60);

/// How long a restarted worker may take to initialize.
const RESTART_TIMEOUT: Duration = Duration::from_secs(300);

/// How long one `execute` may take before the worker is given up on.
const EXECUTE_TIMEOUT: Duration = Duration::from_secs(3600);

/// How long a worker may go on with a batch whose every request was
/// cancelled (its clients went away or their time ran out) before it is
/// given up on: a model that never answers is stopped, not waited for.
const ABANDONED_GRACE: Duration = Duration::from_secs(5);

/// Room for the first batch's inputs; the arena grows past it as needed.
const ARENA_START: usize = 1 << 20;

pub struct PythonInstance {
    label: String,
    launch: Launch,
    link: Arc<Link>,
    drain: Option<JoinHandle<()>>,
    /// Input files; one is in use while a request whose inputs it holds
    /// is open.
    arenas: Vec<(Arena, Lease)>,
    next_id: u64,
    /// The most requests that may be open at once.
    max_open: usize,
    /// The worker was stopped by this instance (it broke the protocol or
    /// did not answer), and the batch's error says why.
    stopped: AtomicBool,
}

impl std::fmt::Debug for PythonInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PythonInstance")
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

impl PythonInstance {
    pub(crate) fn new(
        launch: Launch,
        worker: Worker,
        service: Service,
        max_open: usize,
    ) -> Result<Self, BackendError> {
        let label = launch.side.label.clone();
        let shm_error =
            |e| BackendError::Load(format!("{label}: cannot create shared memory: {e}"));
        let arena = Arena::new(ARENA_START).map_err(shm_error)?;
        let bls = Arc::new(Bls::new(service, label.clone()).map_err(shm_error)?);
        let link = Arc::new(Link::new(worker, label.clone(), bls).map_err(shm_error)?);
        let draining = Arc::clone(&link);
        let drain = std::thread::Builder::new()
            .name("py-drain".into())
            .spawn(move || draining.drain())
            .map_err(|e| BackendError::Load(format!("{label}: no drain thread: {e}")))?;
        Ok(PythonInstance {
            label,
            launch,
            link,
            drain: Some(drain),
            arenas: vec![(arena, Lease::default())],
            next_id: 0,
            max_open,
            stopped: AtomicBool::new(false),
        })
    }

    fn fail(&self, message: impl std::fmt::Display) -> BackendError {
        BackendError::Execute(format!("{}: {message}", self.label))
    }

    /// An input arena no open request holds, and its lease.
    fn free_arena(&mut self) -> Result<usize, BackendError> {
        // Keep one spare: a stream of batches with open requests reuses it.
        let mut spare = false;
        self.arenas.retain(|(_, lease)| {
            let free = Arc::strong_count(lease) == 1;
            let keep = !free || !spare;
            spare |= free;
            keep
        });
        if let Some(i) = self
            .arenas
            .iter()
            .position(|(_, lease)| Arc::strong_count(lease) == 1)
        {
            return Ok(i);
        }
        let arena = Arena::new(ARENA_START)
            .map_err(|e| self.fail(format_args!("cannot create shared memory: {e}")))?;
        self.arenas.push((arena, Lease::default()));
        Ok(self.arenas.len() - 1)
    }

    /// The `execute` message for `requests`, their inputs copied into a
    /// free arena, with the lease that keeps it so while they are open.
    fn execute_message(
        &mut self,
        requests: &[BatchRequest<'_>],
        read: u64,
    ) -> Result<(Vec<u8>, Lease), BackendError> {
        let index = self.free_arena()?;
        self.arenas[index].0.reset();
        let mut body = Body::default();
        body.out.len(requests.len());
        for r in requests {
            self.next_id += 1;
            self.request_entry(index, r, self.next_id, &mut body)?;
        }
        let mut head = Out::default();
        head.u64(read);
        let lease = Arc::clone(&self.arenas[index].1);
        Ok((body.finish(head), lease))
    }

    /// One request of an `execute` message (`python/README.md` has the
    /// layout), its inputs placed in arena `arena`.
    fn request_entry(
        &mut self,
        arena: usize,
        r: &BatchRequest<'_>,
        id: u64,
        body: &mut Body,
    ) -> Result<(), BackendError> {
        let request = r.request;
        // The request's timeout in microseconds, 0 for none, as Triton's
        // `timeout()` gives it.
        let timeout = request
            .routing
            .timeout
            .map_or(0, |t| u64::try_from(t.as_micros()).unwrap_or(u64::MAX));
        body.out
            .u64(id)
            .str(&request.id)
            .correlation_id(&request.routing.sequence.id)
            .u32(request.routing.sequence.flags())
            .u64(timeout)
            .parameters(&request.parameters)
            .len(r.outputs.len());
        for name in r.outputs {
            body.out.str(name);
        }
        body.out.len(request.inputs.len());
        for input in &request.inputs {
            let region = self.arenas[arena].0.push(&input.data).map_err(|e| {
                self.fail(format_args!(
                    "cannot place input '{}' in shared memory: {e}",
                    input.name
                ))
            })?;
            body.tensor(&input.name, input.datatype, &input.shape, &region);
        }
        Ok(())
    }

    /// Sends `requests` to the worker and reads its answer.
    fn run(
        &mut self,
        io: &mut Io,
        requests: &[BatchRequest<'_>],
    ) -> Result<Vec<Result<Vec<Tensor>, BackendError>>, BackendError> {
        io.prune_files();
        let read = io.told_read();
        let (message, lease) = self.execute_message(requests, read)?;
        let first_id = self.next_id + 1 - requests.len() as u64;
        for (id, r) in (first_id..).zip(requests) {
            if let Some(responder) = &r.responder {
                io.open
                    .insert(id, Arc::clone(responder), Arc::clone(&lease));
            }
        }
        let answered = io
            .worker
            .send_binary(EXECUTE, &message)
            .map_err(|e| self.fail(e))
            .and_then(|()| self.answers(io, requests, first_id));
        if answered.is_err() {
            // No responses come for them any more; the error answers them.
            (first_id..)
                .take(requests.len())
                .for_each(|id| io.open.forget(id));
        }
        answered
    }

    /// Reads the worker's answer to an execute of `requests`, the first of
    /// them `first_id`; meanwhile runs the worker's BLS calls, passes on
    /// the responses its response senders send, and tells it of requests
    /// whose clients stopped waiting.
    fn answers(
        &self,
        io: &mut Io,
        requests: &[BatchRequest<'_>],
        first_id: u64,
    ) -> Result<Vec<Result<Vec<Tensor>, BackendError>>, BackendError> {
        let count = requests.len();
        let mut told = vec![false; count];
        let mut kept = Kept::new(requests.iter().map(|r| r.responder.is_some()).collect());
        let deadline = Instant::now() + EXECUTE_TIMEOUT;
        // When every request of the batch was cancelled and told so.
        let mut abandoned: Option<Instant> = None;
        let payload = loop {
            let cancelled: Vec<u64> = (first_id..)
                .zip(requests)
                .zip(&mut told)
                .filter(|((_, r), told)| r.responder.is_none() && !**told && (r.cancelled)())
                .map(|((id, _), told)| {
                    *told = true;
                    id
                })
                .collect();
            io.tell_cancelled(&cancelled).map_err(|e| self.fail(e))?;
            if abandoned.is_none() && told.iter().all(|&t| t) {
                abandoned = Some(Instant::now());
            }
            let limit = abandoned.map_or(deadline, |at| deadline.min(at + ABANDONED_GRACE));
            let wait = CANCEL_POLL.min(limit.saturating_duration_since(Instant::now()));
            let message = match io.worker.next(wait) {
                Ok(message) => message,
                Err(e) if e.is_timeout() && Instant::now() < limit => continue,
                Err(e) if e.is_timeout() => return Err(self.give_up(io, abandoned.is_some())),
                Err(e) => return Err(self.fail(e)),
            };
            match message {
                Incoming::Responses(payload) => break payload,
                Incoming::Response(payload) => {
                    let r = io.response(&payload).map_err(|e| self.lose(io, e))?;
                    // A request of this batch whose model is not decoupled
                    // answers through its result; the others are open.
                    let kept_at =
                        r.id.checked_sub(first_id)
                            .map(|i| i as usize)
                            .filter(|&i| i < count && requests[i].responder.is_none());
                    match kept_at {
                        Some(index) => kept.keep(index, r.response),
                        None => io.pass_on(r),
                    }
                }
                Incoming::Bls(payload) => io.bls.call(&payload, &io.worker.to()),
                Incoming::BlsRelease => io.bls.released(),
                Incoming::Json(frame) => match frame["op"].as_str() {
                    Some("error") => {
                        return Err(self.fail(
                            frame["message"]
                                .as_str()
                                .unwrap_or("the worker refused the batch"),
                        ));
                    }
                    _ => {
                        return Err(self.fail(format_args!(
                            "the worker sent an unexpected message: {frame}"
                        )));
                    }
                },
            }
        };
        self.results(io, &payload, first_id, count, kept)
    }

    /// The worker did not answer in time: it is stopped (and started again
    /// for the next batch), and the batch fails saying why.
    fn give_up(&self, io: &mut Io, abandoned: bool) -> BackendError {
        tracing::error!(worker = %self.label, abandoned, "the Python worker did not answer; it is stopped");
        io.worker.kill();
        self.stopped.store(true, Ordering::Relaxed);
        match abandoned {
            true => self.fail(format_args!(
                "every request of the batch was cancelled, and the Python worker did not answer within {ABANDONED_GRACE:?} more; it was stopped and is started again for the next batch"
            )),
            false => self.fail(format_args!(
                "the Python worker did not answer within {EXECUTE_TIMEOUT:?} and was stopped; it is started again for the next batch"
            )),
        }
    }

    /// The worker broke the protocol: it is stopped (and started again for
    /// the next batch), and the batch fails with what it did.
    fn lose(&self, io: &mut Io, e: BadMessage) -> BackendError {
        tracing::error!(worker = %self.label, error = %e, "the Python worker broke the protocol; it is stopped");
        io.worker.kill();
        self.stopped.store(true, Ordering::Relaxed);
        self.fail(format_args!(
            "{e}; the worker was stopped and is started again for the next batch"
        ))
    }

    /// Each request's result from the worker's answer to their execute.
    fn results(
        &self,
        io: &mut Io,
        payload: &[u8],
        first_id: u64,
        count: usize,
        mut kept: Kept,
    ) -> Result<Vec<Result<Vec<Tensor>, BackendError>>, BackendError> {
        let hold = io.next_output();
        let slots = message::responses(payload).map_err(|e| self.lose(io, e))??;
        if slots.len() != count {
            return Err(self.fail(format_args!(
                "the worker answered {} of {count} requests",
                slots.len()
            )));
        }
        Ok(slots
            .into_iter()
            .enumerate()
            .map(|(i, slot)| match slot {
                Slot::Rescheduled => {
                    io.open.forget(first_id + i as u64);
                    Err(reschedule_refused())
                }
                Slot::Kept => kept.result(i),
                Slot::Answered(entry) => io.reader(Some(&hold)).entry(entry),
            })
            .collect())
    }
}

impl RequestWise for PythonInstance {
    fn execute_requests(
        &mut self,
        requests: &[BatchRequest<'_>],
    ) -> Vec<Result<Vec<Tensor>, BackendError>> {
        let link = Arc::clone(&self.link);
        let mut io = link.acquire(requests.len(), self.max_open);
        let answered = self.ensure_worker(&mut io).and_then(|()| {
            self.run(&mut io, requests)
                .map_err(|e| self.note_death(&mut io, e))
        });
        link.release(io);
        match answered {
            Ok(results) => results,
            Err(e) => requests.iter().map(|_| Err(e.clone())).collect(),
        }
    }
}

impl PythonInstance {
    /// Starts the worker again if it died, unless it keeps dying.
    fn ensure_worker(&mut self, io: &mut MutexGuard<'_, Io>) -> Result<(), BackendError> {
        if io.worker.is_alive() {
            return Ok(());
        }
        if let Some(reason) = self.failure() {
            return Err(BackendError::Execute(reason));
        }
        let error = io.lost(&WorkerError::Gone("exited".into()));
        tracing::warn!(worker = %self.label, reason = %error, "restarting the Python worker");
        match self.launch.start(RESTART_TIMEOUT) {
            Ok(worker) => {
                io.restarted(worker);
                Ok(())
            }
            Err(e) => {
                // A worker that cannot start again counts as one more death.
                self.link.deaths.lock().push(Instant::now());
                Err(self.fail(format_args!("the Python worker cannot be restarted: {e}")))
            }
        }
    }

    /// After a failed batch: if the worker is gone, counts its death and
    /// says so in the error.
    fn note_death(&mut self, io: &mut Io, error: BackendError) -> BackendError {
        let Some(status) = io.worker.status() else {
            return error;
        };
        self.link.deaths.lock().push(Instant::now());
        io.lost(&WorkerError::Gone(status.clone()));
        if self.stopped.swap(false, Ordering::Relaxed) {
            // Stopped here, and the error says why.
            return error;
        }
        tracing::error!(worker = %self.label, %status, "the Python worker died");
        self.fail(format_args!(
            "the Python worker {status} while running this batch; it is started again for the next one"
        ))
    }
}

impl Drop for PythonInstance {
    fn drop(&mut self) {
        self.link.close_open();
        self.link.stop();
        if let Some(drain) = self.drain.take() {
            let _ = drain.join();
        }
    }
}

impl ModelInstance for PythonInstance {
    fn as_request_wise(&mut self) -> Option<&mut dyn RequestWise> {
        Some(self)
    }

    fn failure(&self) -> Option<String> {
        let now = Instant::now();
        let mut deaths = self.link.deaths.lock();
        deaths.retain(|t| now.duration_since(*t) < DEATH_WINDOW);
        let recent = deaths.len();
        (recent >= MAX_DEATHS).then(|| {
            format!(
                "{}: the Python worker died {recent} times within {DEATH_WINDOW:?}; load the model again to restart it",
                self.label
            )
        })
    }

    /// A gathered batch runs as one request (the engine hands this backend
    /// its requests one by one instead, through `as_request_wise`).
    fn execute(&mut self, batch: &Batch) -> Result<Vec<Tensor>, BackendError> {
        let request = InferRequest {
            inputs: batch
                .inputs
                .iter()
                .map(|t| nereid_core::InputTensor {
                    name: t.name.clone(),
                    datatype: t.datatype,
                    shape: t.shape.clone(),
                    data: t.data.clone(),
                    parameters: Default::default(),
                })
                .collect(),
            ..Default::default()
        };
        let requests = [BatchRequest {
            request: &request,
            outputs: &batch.outputs,
            cancelled: &|| false,
            responder: None,
        }];
        self.execute_requests(&requests)
            .pop()
            .unwrap_or_else(|| Err(self.fail("no answer")))
    }
}
