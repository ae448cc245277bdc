//! One Python worker process: spawned with the unpacked sources on its
//! PYTHONPATH and its channel (`channel.rs`) as fd 4, its stderr copied to
//! the log line by line. The instance thread talks to it directly: it
//! publishes a message, then reads the worker's messages itself, waiting
//! with `poll` on the doorbell for a timeout, so no thread sits between
//! the two. A pipe, the worker's fd 3, carries what the worker asks at any
//! time (log lines, custom metrics, model control) to a thread of its own
//! (`side.rs`), which answers on the channel too: the down ring is shared,
//! one message at a time.

use std::io::{self, BufRead, BufReader};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::channel::{Channel, Receiver, SendError};
use crate::frame::{ToWorker, log_frame, send_json};
use crate::message::{BLS, BLS_RELEASE, JSON, RESPONSE, RESPONSES};
use crate::side::{self, SideContext};

/// The worker's descriptor for side frames (`NEREID_SIDE_FD`).
const SIDE_FD: RawFd = 3;
/// The worker's descriptor for its channel (`NEREID_CHANNEL_FD`).
const CHANNEL_FD: RawFd = 4;

/// How long a worker may take to finish after `finalize` before it is killed.
const FINALIZE_GRACE: Duration = Duration::from_secs(10);

/// Interrupts a wait for the worker's messages from another thread.
#[derive(Debug)]
pub(crate) struct Wake {
    fd: OwnedFd,
}

impl Wake {
    pub(crate) fn new() -> io::Result<Self> {
        use rustix::event::{EventfdFlags, eventfd};
        let fd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        Ok(Wake { fd })
    }

    /// Ends the current (or the next) wait.
    pub(crate) fn wake(&self) {
        let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
    }

    fn clear(&self) {
        let mut count = [0u8; 8];
        let _ = rustix::io::read(&self.fd, &mut count);
    }
}

/// Why talking to a worker failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WorkerError {
    #[error("cannot start the Python worker with '{python}': {source}")]
    Spawn { python: String, source: io::Error },
    #[error("the Python worker {0}")]
    Gone(String),
    #[error("the Python worker did not answer within {0:?}")]
    Timeout(Duration),
    #[error("cannot write to the Python worker: {0}")]
    Write(SendError),
}

impl From<WorkerError> for nereid_core::BackendError {
    fn from(e: WorkerError) -> Self {
        nereid_core::BackendError::Execute(e.to_string())
    }
}

impl WorkerError {
    pub(crate) fn is_timeout(&self) -> bool {
        matches!(self, WorkerError::Timeout(_))
    }
}

/// What starting an instance's worker takes, kept to start it again.
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    pub(crate) python: std::path::PathBuf,
    pub(crate) sources: std::path::PathBuf,
    /// The `initialize` message.
    pub(crate) initialize: Value,
    /// The model and label of the instance, and the server.
    pub(crate) side: SideContext,
}

impl Launch {
    /// Spawns a worker and initializes the model in it.
    pub(crate) fn start(&self, timeout: Duration) -> Result<Worker, String> {
        let (worker, _) = Worker::start(
            &self.python,
            &self.sources,
            &self.side,
            &self.initialize,
            "ready",
            timeout,
        )?;
        Ok(worker)
    }
}

/// A message from the worker.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// A JSON message (`bls`, `error`, `ready`, ...).
    Json(Value),
    /// The binary answer to an `execute`.
    Responses(Vec<u8>),
    /// A binary `response` from a response sender.
    Response(Vec<u8>),
    /// A BLS call.
    Bls(Vec<u8>),
    /// The worker copied a BLS answer's outputs.
    BlsRelease,
}

impl Incoming {
    /// The message's op, for the log.
    fn op(&self) -> &str {
        match self {
            Incoming::Json(v) => v["op"].as_str().unwrap_or("?"),
            Incoming::Responses(_) => "responses",
            Incoming::Response(_) => "response",
            Incoming::Bls(_) => "bls",
            Incoming::BlsRelease => "bls_release",
        }
    }
}

#[derive(Debug)]
pub(crate) struct Worker {
    child: Child,
    to: ToWorker,
    from: Receiver,
    /// The doorbell reached its end: the worker is gone.
    closed: bool,
    /// "model 'm' version 1 instance 0", for the log.
    label: String,
}

impl Worker {
    pub(crate) fn spawn(
        python: &Path,
        sources: &Path,
        context: &SideContext,
    ) -> Result<Self, WorkerError> {
        let spawn_error = |source| WorkerError::Spawn {
            python: python.display().to_string(),
            source,
        };
        let (side_in, side_out) = io::pipe().map_err(spawn_error)?;
        let side_fd = side_out.as_raw_fd();
        let channel = Channel::create().map_err(spawn_error)?;
        let channel_fd = channel.raw_fd();
        let mut command = Command::new(python);
        command
            .arg(crate::sources::worker_program(sources))
            .env("PYTHONPATH", sources)
            .env("PYTHONUNBUFFERED", "1")
            .env("NEREID_SIDE_FD", SIDE_FD.to_string())
            .env("NEREID_CHANNEL_FD", CHANNEL_FD.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // SAFETY: the hook runs in the child between fork and exec and
        // only makes system calls (dup2, fcntl), which is allowed there.
        #[expect(
            unsafe_code,
            reason = "handing the side pipe and the channel to the child"
        )]
        unsafe {
            command.pre_exec(move || {
                give_fd(side_fd, SIDE_FD)?;
                give_fd(channel_fd, CHANNEL_FD)
            });
        }
        let mut child = command.spawn().map_err(spawn_error)?;
        // The child has its copy; ours would keep the pipe open after it exits.
        drop(side_out);
        let label = &context.label;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(WorkerError::Gone("started without its pipes".into()));
        };
        let (to, from) = channel.ends(stdin, stdout);
        let to = Arc::new(Mutex::new(to));
        side::serve(side_in, Arc::clone(&to), context.clone(), child.id())
            .map_err(|e| WorkerError::Gone(format!("has no side channel thread: {e}")))?;
        let log_label = label.to_owned();
        std::thread::Builder::new()
            .name(format!("py-err-{}", child.id()))
            .spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    tracing::info!(target: "nereid::python", worker = %log_label, "{line}");
                }
            })
            .map_err(|e| WorkerError::Gone(format!("has no log thread: {e}")))?;
        Ok(Worker {
            child,
            to,
            from,
            closed: false,
            label: label.to_owned(),
        })
    }

    /// Spawns a worker, sends it `first` and waits for an answer of op
    /// `expect`. The error is the reason: the model's own (the traceback's
    /// last line) when the worker answered `error`, else what went wrong
    /// with the worker, naming `label`.
    pub(crate) fn start(
        python: &Path,
        sources: &Path,
        context: &SideContext,
        first: &Value,
        expect: &str,
        timeout: Duration,
    ) -> Result<(Self, Value), String> {
        let label = &context.label;
        let mut worker =
            Worker::spawn(python, sources, context).map_err(|e| format!("{label}: {e}"))?;
        worker.send(first).map_err(|e| format!("{label}: {e}"))?;
        let answer = match worker.next(timeout).map_err(|e| format!("{label}: {e}"))? {
            Incoming::Json(answer) => answer,
            other => return Err(format!("{label}: unexpected answer '{}'", other.op())),
        };
        if answer["op"] == expect {
            return Ok((worker, answer));
        }
        Err(answer["message"].as_str().map_or_else(
            || format!("{label}: unexpected answer {answer}"),
            str::to_owned,
        ))
    }

    /// Sends a JSON message.
    pub(crate) fn send(&mut self, message: &Value) -> Result<(), WorkerError> {
        let sent = send_json(&self.to, message);
        sent.map_err(|e| self.send_failed(e))
    }

    /// Sends a binary message of `kind`.
    pub(crate) fn send_binary(&mut self, kind: u32, payload: &[u8]) -> Result<(), WorkerError> {
        let sent = self.to.lock().send(kind, payload);
        sent.map_err(|e| self.send_failed(e))
    }

    fn send_failed(&mut self, e: SendError) -> WorkerError {
        if matches!(e, SendError::Stuck) {
            // Its channel is out of step from here on.
            self.kill();
        }
        match self.status() {
            Some(status) => WorkerError::Gone(status),
            None => WorkerError::Write(e),
        }
    }

    /// The next message other than a `log` (logged here), waiting at most
    /// `timeout`. A timeout loses nothing: the next call goes on reading.
    pub(crate) fn next(&mut self, timeout: Duration) -> Result<Incoming, WorkerError> {
        match self.next_or_woken(timeout, None)? {
            Some(message) => Ok(message),
            None => Err(WorkerError::Timeout(timeout)),
        }
    }

    /// As [`Worker::next`], but `None` after `timeout`, or as soon as
    /// `wake` (an eventfd) is signalled.
    pub(crate) fn next_or_woken(
        &mut self,
        timeout: Duration,
        wake: Option<&Wake>,
    ) -> Result<Option<Incoming>, WorkerError> {
        let deadline = Instant::now() + timeout;
        let broken =
            |e: &dyn std::fmt::Display| WorkerError::Gone(format!("sent a broken message: {e}"));
        loop {
            if let Some((kind, payload)) = self.from.take().map_err(|e| broken(&e))? {
                match kind {
                    RESPONSES => return Ok(Some(Incoming::Responses(payload))),
                    RESPONSE => return Ok(Some(Incoming::Response(payload))),
                    BLS => return Ok(Some(Incoming::Bls(payload))),
                    BLS_RELEASE => return Ok(Some(Incoming::BlsRelease)),
                    JSON => {}
                    kind => return Err(broken(&format_args!("a record of unknown kind {kind}"))),
                }
                let frame: Value = serde_json::from_slice(&payload).map_err(|e| broken(&e))?;
                if !frame.is_object() {
                    return Err(broken(&"a JSON message is not an object"));
                }
                if frame["op"] == "log" {
                    log_frame(&self.label, &frame);
                    continue;
                }
                return Ok(Some(Incoming::Json(frame)));
            }
            if self.closed {
                let status = self.wait_status(Duration::from_secs(2));
                return Err(WorkerError::Gone(status));
            }
            if self.from.arm() {
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let rung = self.readable(left, wake);
            self.from.disarm();
            if !rung.map_err(|e| broken(&e))? {
                return Ok(None);
            }
            if !self.from.answer_doorbell().map_err(|e| broken(&e))? {
                // The worker is gone; what it published before is read first.
                self.closed = true;
            }
        }
    }

    /// Waits up to `timeout` for the doorbell to ring (or the worker to
    /// go): false after the timeout, or when `wake` was signalled first.
    fn readable(&self, timeout: Duration, wake: Option<&Wake>) -> io::Result<bool> {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let timeout = Timespec::try_from(timeout).unwrap_or(Timespec {
            tv_sec: i64::MAX,
            tv_nsec: 0,
        });
        let doorbell = self.from.doorbell();
        let other = wake.map_or(doorbell, |wake| wake.fd.as_fd());
        let mut fds = [
            PollFd::new(&doorbell, PollFlags::IN),
            PollFd::new(&other, PollFlags::IN),
        ];
        let watched = if wake.is_some() { 2 } else { 1 };
        loop {
            match poll(&mut fds[..watched], Some(&timeout)) {
                Ok(0) => return Ok(false),
                Ok(_) => {
                    if let Some(wake) = wake
                        && !fds[1].revents().is_empty()
                    {
                        wake.clear();
                        if fds[0].revents().is_empty() {
                            return Ok(false);
                        }
                    }
                    return Ok(true);
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The way to the worker, for writers on other threads.
    pub(crate) fn to(&self) -> ToWorker {
        Arc::clone(&self.to)
    }

    /// Kills the worker (after a timeout its stream is out of step).
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether the process still runs.
    pub(crate) fn is_alive(&mut self) -> bool {
        self.status().is_none()
    }

    /// How the process ended, if it has.
    pub(crate) fn status(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(format!("exited ({status})")),
            Ok(None) => None,
            Err(e) => Some(format!("cannot be waited for: {e}")),
        }
    }

    fn wait_status(&mut self, within: Duration) -> String {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.status() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        "closed its output".to_owned()
    }

    /// Asks the worker to finalize and waits for it, killing it when it
    /// takes too long; then removes any shared-memory file it left.
    pub(crate) fn shut_down(&mut self) {
        if self.status().is_none() && self.send(&json!({"op": "finalize"})).is_ok() {
            let _ = self.next(FINALIZE_GRACE);
        }
        if self.wait_status(FINALIZE_GRACE).starts_with("closed") {
            self.kill();
        }
        remove_leftovers(self.child.id());
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// In a child process, between fork and exec: puts `fd` at `target`, left
/// open across exec (every descriptor Rust opens closes on exec).
fn give_fd(fd: RawFd, target: RawFd) -> io::Result<()> {
    // SAFETY: `fd` is the parent's open pipe end, inherited by the child
    // and open until exec; `target` is not one of the child's descriptors
    // that anything else owns (0 to 2 are the standard streams).
    #[expect(unsafe_code, reason = "descriptors named by number in a forked child")]
    let (source, mut slot) = unsafe { (BorrowedFd::borrow_raw(fd), OwnedFd::from_raw_fd(target)) };
    let result = if fd == target {
        rustix::io::fcntl_setfd(source, rustix::io::FdFlags::empty())
    } else {
        rustix::io::dup2(source, &mut slot)
    };
    // The slot is the child's fd 3 from now on: never close it here.
    std::mem::forget(slot);
    result.map_err(io::Error::from)
}

/// The worker names its files `/dev/shm/nereid-py-<pid>-<n>`; after a crash
/// nobody else removes them.
fn remove_leftovers(pid: u32) {
    let prefix = format!("nereid-py-{pid}-");
    let Ok(entries) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}
