//! The worker's answers as tensors: their outputs read out of the
//! worker's files, or viewed there.

use std::sync::Arc;

use nereid_core::{BackendError, Tensor};

use crate::message::Entry;
use crate::shm::{Hold, WorkerFiles};

/// Reads the worker's files; errors name `label`, the worker.
pub(crate) struct Reader<'a> {
    pub(crate) files: &'a mut WorkerFiles,
    pub(crate) label: &'a str,
    /// Holds the message being read while views of its outputs live;
    /// without one, outputs are copied.
    pub(crate) hold: Option<Arc<Hold>>,
}

impl Reader<'_> {
    fn fail(&self, message: impl std::fmt::Display) -> BackendError {
        BackendError::Execute(format!("{}: {message}", self.label))
    }

    /// The outputs of a binary response entry, copied out of the worker's
    /// files or viewed there (see `shm::VIEW_MIN`), or the error it
    /// carries.
    pub(crate) fn entry(&mut self, entry: Entry) -> Result<Vec<Tensor>, BackendError> {
        let outputs = entry.map_err(BackendError::Request)?;
        outputs
            .into_iter()
            .map(|(name, datatype, shape, region)| {
                let data = self
                    .files
                    .bytes(&region, self.hold.as_ref())
                    .map_err(|e| self.fail(format_args!("output '{name}': {e}")))?;
                Ok(Tensor {
                    name,
                    datatype,
                    shape,
                    data,
                })
            })
            .collect()
    }
}
