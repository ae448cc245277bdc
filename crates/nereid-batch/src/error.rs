//! Why a job could not run (a failed record is not an error: it is
//! written beside the others).

use std::path::{Path, PathBuf};

/// A job that cannot start or cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// The model: not found, failed to load, or not one a batch job runs.
    #[error("{0}")]
    Model(String),
    /// The input files: missing, unreadable, or not matching the model.
    #[error("input {}: {message}", path.display())]
    Input { path: PathBuf, message: String },
    /// The output: unwritable, or holding something else than this job's.
    #[error("output {}: {message}", path.display())]
    Output { path: PathBuf, message: String },
    /// The flags, before anything is read.
    #[error("{0}")]
    Usage(String),
}

impl BatchError {
    pub fn input(path: &Path, message: impl std::fmt::Display) -> BatchError {
        BatchError::Input {
            path: path.to_path_buf(),
            message: message.to_string(),
        }
    }

    pub fn output(path: &Path, message: impl std::fmt::Display) -> BatchError {
        BatchError::Output {
            path: path.to_path_buf(),
            message: message.to_string(),
        }
    }
}
