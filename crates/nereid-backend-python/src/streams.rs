//! What the requests of a running batch get besides the execute answer:
//! the one response a model that is not decoupled sent through a response
//! sender, and the answer to a request the model rescheduled.

use nereid_core::{BackendError, Tensor};

/// The answer of a request its model rescheduled. Triton core refuses to
/// release a request so unless its model has `sequence_batching {
/// iterative_sequence: true }` (logging this message and leaving the
/// client waiting); Nereid loads no such model yet, so the client gets the
/// message.
pub(crate) fn reschedule_refused() -> BackendError {
    BackendError::Request(nereid_core::Error::invalid_argument(
        "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not \
         configured to handle such a flag. (Rescheduling needs sequence_batching { \
         iterative_sequence: true }, which Nereid does not support yet.)",
    ))
}

/// The responses that requests of a model that is not decoupled send
/// through their response senders instead of returning them (at most one
/// each), kept until the execute's answer.
pub(crate) struct Kept {
    kept: Vec<Option<Result<Vec<Tensor>, BackendError>>>,
    decoupled: Vec<bool>,
}

impl Kept {
    /// For a batch whose requests are decoupled or not, in order.
    pub(crate) fn new(decoupled: Vec<bool>) -> Self {
        Kept {
            kept: decoupled.iter().map(|_| None).collect(),
            decoupled,
        }
    }

    /// Keeps request `index`'s first response (the final flag alone is
    /// `None`).
    pub(crate) fn keep(
        &mut self,
        index: usize,
        response: Option<Result<Vec<Tensor>, BackendError>>,
    ) {
        if self.kept[index].is_none() {
            self.kept[index] = response;
        }
    }

    /// What request `index` returns when its execute entry is empty: a
    /// decoupled request has had (or will have) its responses through its
    /// responder; another, the one it sent.
    pub(crate) fn result(&mut self, index: usize) -> Result<Vec<Tensor>, BackendError> {
        if self.decoupled[index] {
            return Ok(Vec::new());
        }
        self.kept[index].take().unwrap_or_else(|| {
            Err(BackendError::Execute(
                "the model returned no response for a request and sent none".to_owned(),
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rescheduled_request_gets_tritons_release_error() {
        let error = reschedule_refused().into_request_error();
        assert_eq!(error.kind(), nereid_core::ErrorKind::InvalidArgument);
        assert!(error.message().starts_with(
            "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to handle such a flag."
        ));
    }
}
