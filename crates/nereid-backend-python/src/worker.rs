//! One Python worker process: spawned with the unpacked sources on its
//! PYTHONPATH, its stderr copied to the log line by line, its stdout read
//! by a thread into a channel of frames, so the server never blocks on a
//! worker that writes while the server writes.

use std::io::{self, BufRead, BufReader};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::frame::{read_frame, write_frame};

/// How long a worker may take to finish after `finalize` before it is killed.
const FINALIZE_GRACE: Duration = Duration::from_secs(10);

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
    Write(io::Error),
}

/// What starting an instance's worker takes, kept to start it again.
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    pub(crate) python: std::path::PathBuf,
    pub(crate) sources: std::path::PathBuf,
    pub(crate) label: String,
    /// The `initialize` frame.
    pub(crate) initialize: Value,
}

impl Launch {
    /// Spawns a worker and initializes the model in it.
    pub(crate) fn start(&self, timeout: Duration) -> Result<Worker, String> {
        let (worker, _) = Worker::start(
            &self.python,
            &self.sources,
            &self.label,
            &self.initialize,
            "ready",
            timeout,
        )?;
        Ok(worker)
    }
}

#[derive(Debug)]
pub(crate) struct Worker {
    child: Child,
    stdin: ChildStdin,
    frames: crossbeam_channel::Receiver<io::Result<Value>>,
    /// "model 'm' version 1 instance 0", for the log.
    label: String,
}

impl Worker {
    pub(crate) fn spawn(python: &Path, sources: &Path, label: &str) -> Result<Self, WorkerError> {
        let mut child = Command::new(python)
            .arg(crate::sources::worker_program(sources))
            .env("PYTHONPATH", sources)
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| WorkerError::Spawn {
                python: python.display().to_string(),
                source,
            })?;
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(WorkerError::Gone("started without its pipes".into()));
        };
        let (tx, frames) = crossbeam_channel::unbounded();
        let mut stdout = BufReader::new(stdout);
        std::thread::Builder::new()
            .name(format!("py-out-{}", child.id()))
            .spawn(move || {
                while let Some(frame) = read_frame(&mut stdout).transpose() {
                    let failed = frame.is_err();
                    if tx.send(frame).is_err() || failed {
                        break;
                    }
                }
            })
            .map_err(|e| WorkerError::Gone(format!("has no reader thread: {e}")))?;
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
            stdin,
            frames,
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
        label: &str,
        first: &Value,
        expect: &str,
        timeout: Duration,
    ) -> Result<(Self, Value), String> {
        let mut worker =
            Worker::spawn(python, sources, label).map_err(|e| format!("{label}: {e}"))?;
        worker.send(first).map_err(|e| format!("{label}: {e}"))?;
        let answer = worker.next(timeout).map_err(|e| format!("{label}: {e}"))?;
        if answer["op"] == expect {
            return Ok((worker, answer));
        }
        Err(answer["message"].as_str().map_or_else(
            || format!("{label}: unexpected answer {answer}"),
            str::to_owned,
        ))
    }

    pub(crate) fn send(&mut self, message: &Value) -> Result<(), WorkerError> {
        write_frame(&mut self.stdin, message).map_err(|e| match self.status() {
            Some(status) => WorkerError::Gone(status),
            None => WorkerError::Write(e),
        })
    }

    /// The next frame other than a `log` (logged here), waiting at most
    /// `timeout`.
    pub(crate) fn next(&mut self, timeout: Duration) -> Result<Value, WorkerError> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.frames.recv_timeout(left) {
                Ok(Ok(frame)) if frame["op"] == "log" => self.log(&frame),
                Ok(Ok(frame)) => return Ok(frame),
                Ok(Err(e)) => return Err(WorkerError::Gone(format!("sent a broken frame: {e}"))),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    return Err(WorkerError::Timeout(timeout));
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    let status = self.wait_status(Duration::from_secs(2));
                    return Err(WorkerError::Gone(status));
                }
            }
        }
    }

    fn log(&self, frame: &Value) {
        let message = frame["message"].as_str().unwrap_or_default();
        let at = format!(
            "{}:{}",
            frame["file"].as_str().unwrap_or("?"),
            frame["line"].as_u64().unwrap_or(0)
        );
        let worker = &self.label;
        match frame["level"].as_str() {
            Some("error") => tracing::error!(target: "nereid::python", worker, at, "{message}"),
            Some("warn") => tracing::warn!(target: "nereid::python", worker, at, "{message}"),
            Some("verbose") => tracing::debug!(target: "nereid::python", worker, at, "{message}"),
            _ => tracing::info!(target: "nereid::python", worker, at, "{message}"),
        }
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
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        remove_leftovers(self.child.id());
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.shut_down();
    }
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
