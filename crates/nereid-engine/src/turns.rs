//! The order of a sequence's answers on one stream. A frontend that runs
//! the requests of one stream concurrently (gRPC `ModelStreamInfer`) takes
//! a [`Turn`] for each: the engine runs a sequence's steps in order, but
//! their answers may be picked up in another order while the stream is
//! busy, and Triton's clients read a sequence's answers in the order its
//! requests came.

use std::collections::HashMap;

use nereid_core::{CorrelationId, InferRequest, ModelVersion};
use tokio::sync::oneshot;

/// Where a request stands among the requests of its sequence on one
/// stream: its answers wait until the previous request's turn ends, and
/// its own turn ends with its last answer (or when it is dropped).
#[derive(Debug, Default)]
pub struct Turn {
    after: Option<oneshot::Receiver<()>>,
    turn: Option<oneshot::Sender<()>>,
}

impl Turn {
    /// Waits until the previous request of the sequence sent its last
    /// answer (or was dropped).
    pub async fn wait(&mut self) {
        if let Some(after) = self.after.take() {
            let _ = after.await;
        }
    }

    /// Ends the turn: the next request's answers may follow.
    pub fn end(&mut self) {
        self.turn = None;
    }
}

/// The turns of the sequences on one stream.
#[derive(Debug, Default)]
pub struct SequenceTurns {
    /// The turn of the latest request of each sequence, by model, version
    /// as named, and ID.
    latest: HashMap<(String, ModelVersion, CorrelationId), oneshot::Receiver<()>>,
    /// How many sequences to hold before dropping those whose turns ended.
    prune_at: usize,
}

impl SequenceTurns {
    /// The turn of `request`: none unless it belongs to a sequence.
    pub fn take(&mut self, request: &InferRequest) -> Turn {
        let sequence = &request.routing.sequence;
        if sequence.id.is_none() {
            return Turn::default();
        }
        if self.latest.len() >= self.prune_at {
            self.latest
                .retain(|_, turn| turn.try_recv() == Err(oneshot::error::TryRecvError::Empty));
            self.prune_at = (2 * self.latest.len()).max(64);
        }
        let (turn, ended) = oneshot::channel();
        let key = (
            request.model_name.clone(),
            request.routing.version.clone(),
            sequence.id.clone(),
        );
        Turn {
            after: self.latest.insert(key, ended),
            turn: Some(turn),
        }
    }
}

#[cfg(test)]
mod tests {
    use nereid_core::{Routing, Sequence};

    use super::*;

    fn step(model: &str, id: CorrelationId) -> InferRequest {
        InferRequest {
            model_name: model.to_owned(),
            routing: Routing {
                sequence: Sequence {
                    id,
                    ..Sequence::default()
                },
                ..Routing::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_sequences_requests_wait_one_for_another() {
        let mut turns = SequenceTurns::default();
        let first = turns.take(&step("acc", CorrelationId::Int(7)));
        assert!(first.after.is_none());
        let mut second = turns.take(&step("acc", CorrelationId::Int(7)));
        let mut after = second.after.take().expect("waits for the first");
        assert_eq!(after.try_recv(), Err(oneshot::error::TryRecvError::Empty));
        drop(first);
        assert_eq!(after.try_recv(), Err(oneshot::error::TryRecvError::Closed));
        // Another sequence, another model, or a string id that reads the
        // same as a number are other chains.
        for other in [
            step("acc", CorrelationId::Int(8)),
            step("other", CorrelationId::Int(7)),
            step("acc", CorrelationId::Str("7".into())),
        ] {
            assert!(turns.take(&other).after.is_none());
        }
    }

    #[test]
    fn requests_outside_a_sequence_wait_for_none() {
        let mut turns = SequenceTurns::default();
        for id in [CorrelationId::Int(0), CorrelationId::Str(String::new())] {
            let request = step("acc", id);
            let (first, second) = (turns.take(&request), turns.take(&request));
            assert!(first.turn.is_none() && second.after.is_none());
        }
        assert!(turns.latest.is_empty());
    }

    #[test]
    fn ended_sequences_are_forgotten() {
        let mut turns = SequenceTurns::default();
        let live: Vec<Turn> = (1..=40)
            .map(|id| turns.take(&step("acc", CorrelationId::Int(id))))
            .collect();
        for id in 41..=200 {
            drop(turns.take(&step("acc", CorrelationId::Int(id))));
        }
        // The ended ones went at each pruning; the 40 live ones stayed.
        assert!(turns.latest.len() < 40 + 64, "{}", turns.latest.len());
        assert!((1..=40).all(|id| turns.latest.contains_key(&(
            "acc".into(),
            ModelVersion::Latest,
            CorrelationId::Int(id)
        ))));
        drop(live);
    }
}
