//! Readers: each turns an input file into records, in file order, from a
//! given record on (a resumed job skips what its output already holds).
//! A record that cannot become a request (a malformed line, a null cell)
//! is an error of its own, written as a failed record; a file that cannot
//! be read at all is a [`BatchError`].

mod arrow;
mod columns;
mod jsonl;
mod npy;

pub use columns::arrow_type;

use std::path::{Path, PathBuf};

use nereid_core::InferRequest;

use crate::BatchError;
use crate::format::Format;
use crate::spec::ModelSpec;

/// One input record: a request, or why it could not be made.
pub type Record = Result<InferRequest, String>;

/// Records of one input, in order.
pub trait Source: Send {
    /// Records in the whole input, those skipped included.
    fn total(&self) -> u64;
    /// The next records in order; `None` at the end.
    fn next_chunk(&mut self) -> Result<Option<Vec<Record>>, BatchError>;
}

/// Where a job's records are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InputFiles {
    /// A file (or, for `.npy`, a folder of `<INPUT>.npy` files).
    Path(PathBuf),
    /// `.npy` files by input name (`--input NAME=FILE.npy`).
    Named(Vec<(String, PathBuf)>),
}

impl InputFiles {
    /// The path messages name.
    pub fn display_path(&self) -> PathBuf {
        match self {
            InputFiles::Path(p) => p.clone(),
            InputFiles::Named(files) => files.first().map(|(_, p)| p.clone()).unwrap_or_default(),
        }
    }
}

/// Opens `files` as `format` for `model`, skipping the first `start`
/// records.
pub fn open(
    files: &InputFiles,
    format: Format,
    model: &ModelSpec,
    start: u64,
    chunk_rows: usize,
) -> Result<Box<dyn Source>, BatchError> {
    let path = |files: &InputFiles| -> Result<PathBuf, BatchError> {
        match files {
            InputFiles::Path(p) => Ok(p.clone()),
            InputFiles::Named(_) => Err(BatchError::Usage(format!(
                "--input NAME=FILE is for .npy files, not {} input",
                format.name()
            ))),
        }
    };
    Ok(match format {
        Format::JsonLines => Box::new(jsonl::JsonLines::open(&path(files)?, model, start)?),
        Format::Npy => Box::new(npy::NpyArrays::open(files, model, start, chunk_rows)?),
        Format::Parquet => Box::new(arrow::parquet(&path(files)?, model, start, chunk_rows)?),
        Format::Arrow => Box::new(arrow::ipc(&path(files)?, model, start, chunk_rows)?),
    })
}

fn no_file(path: &Path, e: std::io::Error) -> BatchError {
    BatchError::input(path, format!("cannot open: {e}"))
}
