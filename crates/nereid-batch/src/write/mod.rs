//! Writers: results in input order, in the output's format, committed as
//! they go so that an interrupted job can resume after the last record
//! that reached the disk whole.
//!
//! - JSON lines are appended to the output itself; on resume a last line
//!   cut short is dropped.
//! - Parquet, Arrow and `.npy` outputs are staged: committed rows go into
//!   numbered Arrow IPC files in `<OUTPUT>.parts/` (each written under a
//!   temporary name and renamed, so a part is whole or absent); when every
//!   record is in, the parts become the output (written under a temporary
//!   name and renamed) and the folder is removed.

mod columns;
mod finish;
mod jsonl;
mod staged;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nereid_core::InferResponse;

use crate::BatchError;
use crate::format::Format;
use crate::spec::ModelSpec;

pub use columns::{ERROR_COLUMN, output_schema};

/// What an output already holds when a job starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Recovered {
    /// Records written whole, from the first input record on.
    pub records: u64,
    /// Of those, the failed ones.
    pub failures: u64,
    /// The output is a finished one (not parts or a cut-off file).
    pub finished: bool,
}

/// Where results go, in input order.
pub trait Sink: Send {
    /// Writes the next record's result; returns whether it is a failure
    /// (a result the format cannot hold becomes one).
    fn write(&mut self, result: Result<InferResponse, String>) -> Result<bool, BatchError>;
    /// Whether enough was written since the last commit to commit again.
    fn wants_commit(&self) -> bool;
    /// Makes every record written so far survive an interruption.
    fn commit(&mut self) -> Result<(), BatchError>;
    /// Commits, then makes the finished output.
    fn finish(self: Box<Self>) -> Result<(), BatchError>;
}

/// When to commit: after this many rows, bytes or seconds.
#[derive(Debug, Clone, Copy)]
pub struct CommitPolicy {
    pub rows: usize,
    pub bytes: usize,
    pub interval: Duration,
}

impl Default for CommitPolicy {
    fn default() -> Self {
        CommitPolicy {
            rows: 65_536,
            bytes: 256 << 20,
            interval: Duration::from_secs(10),
        }
    }
}

impl CommitPolicy {
    fn due(&self, rows: usize, bytes: usize, since: Instant) -> bool {
        rows >= self.rows || bytes >= self.bytes || (rows > 0 && since.elapsed() >= self.interval)
    }
}

/// The folder an output is staged in.
pub fn parts_dir(output: &Path) -> PathBuf {
    let mut name = output.as_os_str().to_owned();
    name.push(".parts");
    PathBuf::from(name)
}

/// Checks what `output` holds and keeps its valid prefix: a cut-off
/// JSON line, a half-written part, are removed here.
pub fn recover(output: &Path, format: Format) -> Result<Recovered, BatchError> {
    match format {
        Format::JsonLines => jsonl::recover(output),
        _ => staged::recover(output, format),
    }
}

/// Removes `output` and its staging folder, for a job that starts over.
pub fn remove(output: &Path) -> Result<(), BatchError> {
    let gone = |path: &Path| -> Result<(), BatchError> {
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(path)
        } else {
            std::fs::remove_file(path)
        };
        match removed {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(BatchError::output(path, format!("cannot remove: {e}")))
            }
            _ => Ok(()),
        }
    };
    gone(output)?;
    gone(&parts_dir(output))
}

/// A writer of `format` that appends to what `recovered` found.
pub fn open(
    output: &Path,
    format: Format,
    model: &ModelSpec,
    recovered: Recovered,
    policy: CommitPolicy,
) -> Result<Box<dyn Sink>, BatchError> {
    Ok(match format {
        Format::JsonLines => Box::new(jsonl::JsonLinesSink::open(output, policy)?),
        _ => Box::new(staged::Staged::open(
            output, format, model, recovered, policy,
        )?),
    })
}

/// Checks, before anything runs, that `format` can hold `model`'s outputs.
pub fn check_outputs(format: Format, model: &ModelSpec) -> Result<(), BatchError> {
    match format {
        Format::JsonLines => Ok(()),
        Format::Npy => finish::check_npy(model).map_err(BatchError::Usage),
        Format::Parquet | Format::Arrow => {
            output_schema(model).map(drop).map_err(BatchError::Usage)
        }
    }
}
