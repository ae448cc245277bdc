//! What the requests of a running batch get besides the execute answer:
//! the responses their response senders send (passed on to a decoupled
//! model's responders as they come, kept for a model that is not
//! decoupled), and the answer to a request the model rescheduled.

use nereid_core::{BackendError, BatchRequest, Responder, Tensor};
use serde_json::Value;

/// The batch's requests (by index) that the model released with
/// `TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`, named by id in the answer's
/// `rescheduled`.
pub(crate) fn rescheduled(answer: &Value, first_id: u64, count: usize) -> Vec<usize> {
    answer["rescheduled"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|id| id.as_str()?.parse::<u64>().ok()?.checked_sub(first_id))
        .filter_map(|i| usize::try_from(i).ok())
        .filter(|&i| i < count)
        .collect()
}

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

/// The responses a batch's requests get through response senders: passed
/// on to a decoupled model's responders as they come, kept for a model
/// that is not decoupled (its one response, sent instead of returned).
pub(crate) struct Streams<'a> {
    responders: Vec<Option<&'a dyn Responder>>,
    finals: Vec<bool>,
    kept: Vec<Option<Result<Vec<Tensor>, BackendError>>>,
}

impl<'a> Streams<'a> {
    pub(crate) fn new(requests: &[BatchRequest<'a>]) -> Self {
        Streams {
            responders: requests.iter().map(|r| r.responder).collect(),
            finals: vec![false; requests.len()],
            kept: requests.iter().map(|_| None).collect(),
        }
    }

    pub(crate) fn send(
        &mut self,
        index: usize,
        response: Option<Result<Vec<Tensor>, BackendError>>,
        last: bool,
    ) {
        if self.finals[index] {
            return;
        }
        self.finals[index] = last;
        match self.responders[index] {
            Some(responder) => responder.send(
                response.map(|r| r.map_err(BackendError::into_request_error)),
                last,
            ),
            None => {
                if self.kept[index].is_none() {
                    self.kept[index] = response;
                }
            }
        }
    }

    /// The requests the model rescheduled: their execution is over without
    /// a final flag, and later responses to them are dropped.
    pub(crate) fn release(&mut self, indices: &[usize]) {
        for &index in indices {
            self.finals[index] = true;
        }
    }

    /// Whether every request a responder waits on has had its final flag.
    pub(crate) fn all_final(&self) -> bool {
        self.responders
            .iter()
            .zip(&self.finals)
            .all(|(responder, last)| responder.is_none() || *last)
    }

    /// What request `index` returns when its execute entry is empty: a
    /// decoupled request has had its responses; another, the one it sent.
    pub(crate) fn result(&mut self, index: usize) -> Result<Vec<Tensor>, BackendError> {
        if self.responders[index].is_some() {
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
    use serde_json::json;

    use super::*;

    #[test]
    fn rescheduled_ids_name_requests_of_the_batch() {
        let answer = json!({"rescheduled": ["11", "13", "9", "x", "14", 12]});
        assert_eq!(rescheduled(&answer, 10, 4), [1, 3]);
        assert!(rescheduled(&json!({"responses": []}), 10, 4).is_empty());
        let error = reschedule_refused().into_request_error();
        assert_eq!(error.kind(), nereid_core::ErrorKind::InvalidArgument);
        assert!(error.message().starts_with(
            "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to handle such a flag."
        ));
    }
}
