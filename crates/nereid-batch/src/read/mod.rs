//! Readers: each turns an input file into records, in file order, from a
//! given record on (a resumed job skips what its output already holds).
//! Columnar readers put consecutive records that fit together (same
//! shapes, fixed-size elements, no nulls) into one request of several
//! rows, which the engine takes for the cost of one; JSON lines are one
//! request each. A record that cannot become a request (a malformed line,
//! a null cell) is an error of its own, written as a failed record; a file
//! that cannot be read at all is a [`BatchError`].

mod arrow;
mod columns;
mod jsonl;
mod npy;

pub use columns::arrow_type;

use std::path::{Path, PathBuf};

use nereid_core::{InferRequest, InputTensor};

use crate::BatchError;
use crate::format::Format;
use crate::spec::ModelSpec;

/// One input record: a request, or why it could not be made.
pub type Record = Result<InferRequest, String>;

/// Consecutive records that go to the model as one request, each input's
/// first dimension holding `rows` of them; a record that could not become
/// a request is a group of one.
#[derive(Debug)]
pub struct Group {
    pub rows: usize,
    pub request: Record,
}

impl Group {
    pub fn one(record: Record) -> Group {
        Group {
            rows: 1,
            request: record,
        }
    }
}

/// Records of one input, in order.
pub trait Source: Send {
    /// Records in the whole input, those skipped included.
    fn total(&self) -> u64;
    /// The next records in order; `None` at the end.
    fn next_chunk(&mut self) -> Result<Option<Vec<Group>>, BatchError>;
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

/// How a source reads its input.
#[derive(Debug, Clone, Copy)]
pub struct Reading {
    /// Records to skip (what the output already holds).
    pub start: u64,
    /// Records read at a time.
    pub chunk_rows: usize,
    /// Records in one request at most (columnar inputs).
    pub group_rows: usize,
}

/// Opens `files` as `format` for `model`.
pub fn open(
    files: &InputFiles,
    format: Format,
    model: &ModelSpec,
    reading: Reading,
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
        Format::JsonLines => Box::new(jsonl::JsonLines::open(&path(files)?, model, reading.start)?),
        Format::Npy => Box::new(npy::NpyArrays::open(files, model, reading)?),
        Format::Parquet => Box::new(arrow::parquet(&path(files)?, model, reading)?),
        Format::Arrow => Box::new(arrow::ipc(&path(files)?, model, reading)?),
    })
}

/// A request of `model` holding `inputs`, for every output.
pub(crate) fn request(model: &ModelSpec, inputs: Vec<InputTensor>) -> InferRequest {
    InferRequest {
        model_name: model.name.clone(),
        id: String::new(),
        routing: nereid_core::Routing {
            version: model.version.clone(),
            ..Default::default()
        },
        inputs,
        outputs: Vec::new(),
        parameters: Default::default(),
        trace: None,
    }
}

fn no_file(path: &Path, e: std::io::Error) -> BatchError {
    BatchError::input(path, format!("cannot open: {e}"))
}
