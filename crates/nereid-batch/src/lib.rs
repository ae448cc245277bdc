//! `nereid batch`: a model run over the records of a file, through the
//! same [`nereid_engine::Engine`] (schedulers, dynamic batcher, backends)
//! that serves online requests. Records go in concurrently, several rows
//! to a request where the input is columnar, so the model's batcher forms
//! batches; results come out in input order, one per record, a failed
//! record carrying its error beside the others.
//!
//! Inputs: JSON lines of KServe v2 infer bodies (decoded by the REST
//! frontend's decoder), `.npy` arrays, Parquet and Arrow IPC files with a
//! column per input. Outputs follow the input's format. Output is
//! committed as the job goes, so an interrupted job resumes where the
//! output ends ([`write`] says how each format does it).
//!
//! This crate must not know a backend, a frontend or the CLI: it is handed
//! an engine with the model loaded.

mod error;
pub mod format;
mod job;
pub mod npy;
mod progress;
pub mod read;
pub mod spec;
mod split;
#[cfg(test)]
mod testing;
pub mod write;

pub use error::BatchError;
pub use format::Format;
pub use job::{Job, Summary, run};
pub use read::InputFiles;
pub use write::CommitPolicy;
