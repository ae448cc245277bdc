//! The instance's line to its worker. While an `execute` runs, the
//! instance thread reads the worker's messages itself (no thread in between
//! on the common path). A decoupled model's requests may stay open after
//! their `execute` returned; between executes a drain thread reads their
//! responses, runs the BLS calls of the model's threads and tells the
//! worker of clients that went away. The two take turns: the instance
//! thread marks itself busy and wakes the drain thread, which gives the
//! line up at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::{Duration, Instant};

use nereid_core::{BackendError, Error, Tensor};
use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::bls::Bls;
use crate::message::{self, BadMessage, CANCEL, Out, RELEASE};
use crate::open::OpenRequests;
use crate::shm::{Hold, Holds, WorkerFiles};
use crate::tensors::Reader;
use crate::worker::{Incoming, Wake, Worker, WorkerError};

/// How long an instance that goes (unload, shutdown) waits for its open
/// requests to end before it asks the worker to cancel them, and then
/// before it fails those left.
const OPEN_GRACE: Duration = Duration::from_secs(30);
const CANCEL_GRACE: Duration = Duration::from_secs(5);

/// How often clients that went away are looked for while requests run.
pub(crate) const CANCEL_POLL: Duration = Duration::from_millis(20);

/// Output messages read before the drain thread tells the worker it may
/// reuse their memory, when more keep coming.
const RELEASE_EVERY: u64 = 16;

/// Batches between looks for worker files that are gone.
const PRUNE_EVERY: u64 = 64;

pub(crate) struct Link {
    io: Mutex<Io>,
    /// Set while the instance thread wants or holds `io`.
    busy: AtomicBool,
    /// Set while the drain thread waits for messages; `wake` ends the wait.
    polling: AtomicBool,
    wake: Wake,
    /// The drain thread waits here for open requests, or for its turn.
    changed: Condvar,
    /// The instance thread waits here for open requests to end.
    room: Condvar,
    stopping: AtomicBool,
    /// When the worker died, for the restart limit.
    pub(crate) deaths: Mutex<Vec<Instant>>,
}

/// What the reader of the worker's messages works with.
pub(crate) struct Io {
    pub(crate) worker: Worker,
    pub(crate) label: String,
    files: WorkerFiles,
    pub(crate) open: OpenRequests,
    pub(crate) bls: Arc<Bls>,
    /// Output messages (`response`, `responses`) read, their outputs copied
    /// out; and how many of those the worker knows of.
    pub(crate) read: u64,
    told: u64,
    /// The output messages whose regions outputs still view.
    holds: Holds,
    batches: u64,
}

/// A `response` message, its outputs read.
pub(crate) struct Response {
    pub(crate) id: u64,
    pub(crate) response: Option<Result<Vec<Tensor>, BackendError>>,
    pub(crate) last: bool,
}

impl Link {
    pub(crate) fn new(worker: Worker, label: String, bls: Arc<Bls>) -> std::io::Result<Self> {
        Ok(Link {
            io: Mutex::new(Io {
                worker,
                label,
                files: WorkerFiles::default(),
                open: OpenRequests::default(),
                bls,
                read: 0,
                told: 0,
                holds: Holds::default(),
                batches: 0,
            }),
            busy: AtomicBool::new(false),
            polling: AtomicBool::new(false),
            wake: Wake::new()?,
            changed: Condvar::new(),
            room: Condvar::new(),
            stopping: AtomicBool::new(false),
            deaths: Mutex::new(Vec::new()),
        })
    }

    /// The line, for the instance thread, once fewer than `max` requests
    /// would be open with `wanted` more (or none is open).
    pub(crate) fn acquire(&self, wanted: usize, max: usize) -> MutexGuard<'_, Io> {
        loop {
            self.busy.store(true, SeqCst);
            if self.polling.load(SeqCst) {
                self.wake.wake();
            }
            let mut io = self.io.lock();
            if io.open.is_empty() || io.open.len() + wanted <= max {
                return io;
            }
            self.busy.store(false, SeqCst);
            self.changed.notify_one();
            self.room.wait(&mut io);
        }
    }

    /// Gives the line back; the drain thread takes it while requests are
    /// open.
    pub(crate) fn release(&self, io: MutexGuard<'_, Io>) {
        self.busy.store(false, SeqCst);
        let open = !io.open.is_empty();
        drop(io);
        if open {
            self.changed.notify_one();
        }
    }

    /// The line, for a look (the instance is idle).
    pub(crate) fn lock(&self) -> MutexGuard<'_, Io> {
        self.acquire(0, usize::MAX)
    }

    /// Waits for the open requests to end, as Triton's unload waits for a
    /// model's responses; after [`OPEN_GRACE`] asks the worker to cancel
    /// them, and after [`CANCEL_GRACE`] more fails those left.
    pub(crate) fn close_open(&self) {
        let started = Instant::now();
        let mut cancelled = false;
        loop {
            let mut io = self.lock();
            if io.open.is_empty() || !io.worker.is_alive() {
                break;
            }
            let waited = started.elapsed();
            if waited >= OPEN_GRACE + CANCEL_GRACE {
                tracing::warn!(worker = %io.label, open = io.open.len(), "the instance goes with requests still open; they fail");
                break;
            }
            if waited >= OPEN_GRACE && !cancelled {
                cancelled = true;
                io.cancel_open();
            }
            self.release(io);
            std::thread::sleep(CANCEL_POLL);
        }
        // A worker that died meanwhile leaves its requests to no one.
        let mut io = self.lock();
        let error = Error::unavailable(format!(
            "{}: the model instance was unloaded while the request was open",
            io.label
        ));
        io.open.fail_all(&error);
        self.release(io);
    }

    /// Ends the drain thread.
    pub(crate) fn stop(&self) {
        self.stopping.store(true, SeqCst);
        self.wake.wake();
        self.changed.notify_all();
    }

    /// The drain thread: reads the messages of open requests while the
    /// instance thread does not.
    pub(crate) fn drain(&self) {
        let mut io = self.io.lock();
        loop {
            while !self.stopping.load(SeqCst) && (io.open.is_empty() || self.busy.load(SeqCst)) {
                self.changed.wait(&mut io);
            }
            if self.stopping.load(SeqCst) {
                return;
            }
            self.polling.store(true, SeqCst);
            if self.busy.load(SeqCst) {
                self.polling.store(false, SeqCst);
                continue;
            }
            let next = io.worker.next_or_woken(CANCEL_POLL, Some(&self.wake));
            self.polling.store(false, SeqCst);
            let open = io.open.len();
            let handled = match next {
                Ok(Some(message)) => io.drained(message),
                Ok(None) => {
                    io.release(1);
                    Ok(())
                }
                Err(e) => Err(e),
            };
            if let Err(e) = handled {
                let error = io.lost(&e);
                tracing::error!(worker = %io.label, error = %error, "the Python worker died with requests open");
                self.deaths.lock().push(Instant::now());
            }
            if let Err(e) = io.tell_cancelled(&[]) {
                io.lost(&e);
            }
            if io.open.len() < open {
                self.room.notify_all();
            }
        }
    }
}

impl Io {
    /// Reads a `response` message's outputs, counting it.
    pub(crate) fn response(&mut self, payload: &[u8]) -> Result<Response, BadMessage> {
        let hold = self.next_output();
        let (id, last, entry) = message::response(payload)?;
        Ok(Response {
            id,
            response: entry.map(|entry| self.reader(Some(&hold)).entry(entry)),
            last,
        })
    }

    /// Counts an output message (`responses`, `response`) read; its
    /// regions are held while views of them live.
    pub(crate) fn next_output(&mut self) -> Arc<Hold> {
        self.read += 1;
        self.holds.hold(self.read - 1)
    }

    /// Reads outputs, as views held by `hold` where they are large.
    pub(crate) fn reader(&mut self, hold: Option<&Arc<Hold>>) -> Reader<'_> {
        Reader {
            files: &mut self.files,
            label: &self.label,
            hold: hold.cloned(),
        }
    }

    /// A message the drain thread read.
    /// A worker that broke the protocol is stopped, and is the error.
    fn drained(&mut self, message: Incoming) -> Result<(), WorkerError> {
        match message {
            Incoming::Response(payload) => {
                let response = self.response(&payload).map_err(|e| {
                    self.worker.kill();
                    WorkerError::Gone(e.to_string())
                })?;
                self.pass_on(response);
                self.release(RELEASE_EVERY);
            }
            Incoming::Bls(payload) => self.bls.call_on_thread(payload, self.worker.to()),
            Incoming::BlsRelease => self.bls.released(),
            other => {
                tracing::warn!(worker = %self.label, message = ?other, "the worker sent an unexpected message between executes; dropped")
            }
        }
        Ok(())
    }

    /// Passes a response on to its open request; one for a request that
    /// is not open is dropped with a warning.
    pub(crate) fn pass_on(&mut self, r: Response) {
        let id = r.id;
        let response = r
            .response
            .map(|r| r.map_err(BackendError::into_request_error));
        if !self.open.send(id, response, r.last) {
            tracing::warn!(worker = %self.label, id, "a response for a request that is not open was dropped");
        }
    }

    /// Tells the worker it may reuse the memory of the output messages
    /// read and not held, once at least `at_least` are new.
    fn release(&mut self, at_least: u64) {
        if self.read >= self.told + at_least {
            let mut release = Out::default();
            release.u64(self.holds.releasable(self.read));
            if self.worker.send_binary(RELEASE, &release.0).is_ok() {
                self.told = self.read;
            }
        }
    }

    /// The `read` an execute message carries: the worker may reuse the
    /// memory of that many output messages.
    pub(crate) fn told_read(&mut self) -> u64 {
        self.told = self.read;
        self.holds.releasable(self.read)
    }

    /// Tells the worker of the open requests whose clients went away, and
    /// of `more` (requests of the running batch).
    pub(crate) fn tell_cancelled(&mut self, more: &[u64]) -> Result<(), WorkerError> {
        let mut ids = self.open.newly_cancelled();
        ids.extend_from_slice(more);
        self.send_cancel(&ids)
    }

    /// Asks the worker to cancel every open request (the instance goes).
    pub(crate) fn cancel_open(&mut self) {
        let ids = self.open.cancel_all();
        let _ = self.send_cancel(&ids);
    }

    /// A `cancel` message naming `ids`, unless there are none.
    fn send_cancel(&mut self, ids: &[u64]) -> Result<(), WorkerError> {
        if ids.is_empty() {
            return Ok(());
        }
        let mut cancel = Out::default();
        cancel.len(ids.len());
        for &id in ids {
            cancel.u64(id);
        }
        self.worker.send_binary(CANCEL, &cancel.0)
    }

    /// The worker cannot be talked to any more: its open requests fail
    /// with the reason, which is returned.
    pub(crate) fn lost(&mut self, e: &WorkerError) -> Error {
        let status = self.worker.status().unwrap_or_else(|| e.to_string());
        self.worker.kill();
        let error = Error::unavailable(format!(
            "{}: the Python worker {status} while the request was open; it is started again for the next batch",
            self.label
        ));
        self.open.fail_all(&error);
        error
    }

    /// A new worker: nothing it knows of the old one's messages.
    pub(crate) fn restarted(&mut self, worker: Worker) {
        self.worker = worker;
        self.read = 0;
        self.told = 0;
        // Views of the old worker's files keep their mappings; its numbers
        // mean nothing to the new one.
        self.holds = Holds::default();
        self.files.prune();
        self.bls.restarted();
    }

    /// Drops the mappings of worker files that are gone, every
    /// [`PRUNE_EVERY`] batches (each look is a system call per file).
    pub(crate) fn prune_files(&mut self) {
        self.batches += 1;
        if self.batches.is_multiple_of(PRUNE_EVERY) {
            self.files.prune();
        }
    }
}
