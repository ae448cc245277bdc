//! Inference calls: the unary one, and `ModelStreamInfer`, where every
//! request of the incoming stream runs concurrently and gets its answers
//! as they come: one for most models, any number for a decoupled model,
//! each marked with Triton's `triton_final_response` parameter. A failed
//! request is answered in `error_message` with its id; the stream stays
//! open. Answers of different requests interleave in completion order;
//! one request's answers keep their order, and the requests of one
//! sequence are answered in the order they came.

use futures::stream::{BoxStream, SelectAll};
use futures::{Stream, StreamExt};
use std::collections::HashMap;
use std::time::Instant;

use nereid_core::{Activity, Error, Trace};
use nereid_engine::{Answer, Engine};
use nereid_protocol::grpc as wire;
use nereid_protocol::inference::infer_parameter::ParameterChoice;
use nereid_protocol::inference::{
    InferParameter, ModelInferRequest, ModelInferResponse, ModelStreamInferResponse,
};
use tokio::sync::{oneshot, watch};
use tonic::{Request, Status, Streaming};
use tracing::Instrument;

use super::trace::{Arrived, traceparent};
use crate::trace::Tracer;

/// What Triton answers a unary call on a decoupled model.
const DECOUPLED_UNARY: &str =
    "ModelInfer RPC doesn't support models with decoupled transaction policy";

/// Decodes, runs and encodes one request, traced when `trace` is given,
/// with the sticky `routing_key` its call's metadata gave.
pub async fn infer(
    engine: &Engine,
    request: ModelInferRequest,
    trace: Option<Trace>,
    routing_key: Option<String>,
) -> Result<ModelInferResponse, Error> {
    let span = tracing::debug_span!("grpc_infer", model = %request.model_name, id = %request.id);
    async {
        let mut request = wire::decode_infer_request(request)?;
        request.trace = trace.clone();
        if let Some(key) = routing_key {
            request.routing.routing_key.get_or_insert(key);
        }
        let (model, version) = (request.model_name.clone(), request.routing.version.clone());
        let response = engine.infer(request).await.map_err(|e| {
            let decoupled = engine
                .version_number(&model, &version)
                .and_then(|version| engine.model(&model, version))
                .is_ok_and(|m| m.is_decoupled());
            if decoupled {
                Error::unsupported(DECOUPLED_UNARY)
            } else {
                e
            }
        })?;
        if let Some(trace) = &trace {
            trace.record(Activity::InferResponseComplete);
        }
        Ok(wire::encode_infer_response(response))
    }
    .instrument(span)
    .await
}

/// One answer on the stream, with the trace of its request.
type Traced = (ModelStreamInferResponse, Option<Trace>);

/// Where a request stands among the requests of its sequence on one
/// stream: its answers wait until `after` (the previous request's turn)
/// ends, and its own `turn` ends with its last answer.
#[derive(Default)]
struct Turn {
    after: Option<oneshot::Receiver<()>>,
    turn: Option<oneshot::Sender<()>>,
}

/// Keeps the answers of each sequence on one stream in the order its
/// requests came. The engine runs a sequence's steps in order, but their
/// answers may be picked up from the engine in another order when the
/// stream is busy; Triton's clients read a sequence's answers in order.
#[derive(Default)]
struct SequenceTurns {
    /// The turn of the latest request of each sequence, by model and id.
    latest: HashMap<(String, String, String), oneshot::Receiver<()>>,
    /// How many sequences to hold before dropping those whose turns ended.
    prune_at: usize,
}

impl SequenceTurns {
    /// The turn of `request`: none unless it belongs to a sequence.
    fn take(&mut self, request: &ModelInferRequest) -> Turn {
        let id = match request.parameters.get("sequence_id") {
            Some(InferParameter {
                parameter_choice: Some(ParameterChoice::Int64Param(0)),
            }) => return Turn::default(),
            Some(InferParameter {
                parameter_choice: Some(ParameterChoice::Int64Param(id)),
            }) => id.to_string(),
            Some(InferParameter {
                parameter_choice: Some(ParameterChoice::StringParam(id)),
            }) if !id.is_empty() => format!("'{id}'"),
            _ => return Turn::default(),
        };
        if self.latest.len() >= self.prune_at {
            self.latest
                .retain(|_, turn| turn.try_recv() == Err(oneshot::error::TryRecvError::Empty));
            self.prune_at = (2 * self.latest.len()).max(64);
        }
        let (turn, ended) = oneshot::channel();
        let key = (
            request.model_name.clone(),
            request.model_version.clone(),
            id,
        );
        Turn {
            after: self.latest.insert(key, ended),
            turn: Some(turn),
        }
    }
}

/// One request's answers on the stream, in order: its one answer, or a
/// decoupled model's responses; each says whether it is the last. A final
/// flag that comes alone is sent as an empty response only when the
/// request asks with `triton_enable_empty_final_response`.
fn request_answers(
    engine: Engine,
    request: ModelInferRequest,
    trace: Option<Trace>,
    turn: Turn,
) -> BoxStream<'static, Traced> {
    let id = request.id.clone();
    let model = request.model_name.clone();
    let version = request.model_version.clone();
    let empty_final = matches!(
        request.parameters.get("triton_enable_empty_final_response"),
        Some(InferParameter {
            parameter_choice: Some(ParameterChoice::BoolParam(true))
        })
    );
    let error = move |e: Error, last: bool| {
        let mut answer =
            wire::stream_error_response(id.clone(), model.clone(), version.clone(), e.message());
        if let Some(response) = &mut answer.infer_response {
            mark_final(response, last);
        }
        answer
    };
    let sent = |answer: ModelStreamInferResponse, trace: &Option<Trace>| {
        if let Some(trace) = trace {
            trace.record(Activity::GrpcSendStart);
        }
        (answer, trace.clone())
    };
    Box::pin(async_stream::stream! {
        let decoded = wire::decode_infer_request(request).map(|mut r| {
            r.trace = trace.clone();
            r
        });
        let answer = match decoded {
            Ok(request) => engine.infer_any(request).await,
            Err(e) => Err(e),
        };
        let Turn { after, mut turn } = turn;
        if let Some(after) = after {
            // Ended or dropped, the previous request has sent its last answer.
            let _ = after.await;
        }
        // Ending the turn as the last answer is yielded lets the next
        // request's answers follow it, not precede it: the stream loop
        // takes this answer before it polls that request again.
        match answer {
            Err(e) => {
                drop(turn.take());
                yield sent(error(e, true), &trace);
            }
            Ok(Answer::One(response)) => {
                if let Some(trace) = &trace {
                    trace.record(Activity::InferResponseComplete);
                }
                let mut response = wire::encode_infer_response(response);
                mark_final(&mut response, true);
                drop(turn.take());
                yield sent(ok(response), &trace);
            }
            Ok(Answer::Stream(mut responses)) => {
                while let Some(streamed) = responses.next().await {
                    let last = streamed.last;
                    if last {
                        drop(turn.take());
                    }
                    match streamed.response {
                        Some(Ok(response)) => {
                            let mut response = wire::encode_infer_response(response);
                            mark_final(&mut response, last);
                            yield sent(ok(response), &trace);
                        }
                        Some(Err(e)) => yield sent(error(e, last), &trace),
                        None if empty_final => {
                            let mut answer = error(Error::internal(""), true);
                            answer.error_message.clear();
                            yield sent(answer, &trace);
                        }
                        None => {}
                    }
                    if last {
                        break;
                    }
                }
                if let Some(trace) = &trace {
                    trace.record(Activity::InferResponseComplete);
                }
            }
        }
    })
}

fn ok(response: ModelInferResponse) -> ModelStreamInferResponse {
    ModelStreamInferResponse {
        error_message: String::new(),
        infer_response: Some(response),
    }
}

/// Marks a streamed response as Triton does: `triton_final_response` says
/// whether more follow for its request.
fn mark_final(response: &mut ModelInferResponse, last: bool) {
    response.parameters.insert(
        "triton_final_response".to_owned(),
        InferParameter {
            parameter_choice: Some(ParameterChoice::BoolParam(last)),
        },
    );
}

/// What the stream loop saw next.
enum Event {
    Request(Box<ModelInferRequest>),
    Answer(Traced),
    /// The client closed its side or the server is stopping: read no more.
    EndOfRequests,
    /// Reading the next request failed (bad message, client gone).
    ReadFailed(Status),
    Done,
}

/// The response stream of one `ModelStreamInfer` call. Answers in flight
/// are polled with the stream, so dropping it (the client went away)
/// drops them and the engine abandons their requests. It ends once the
/// requests have ended (client half-close, or server shutdown) and every
/// answer has been sent; a failure to read a request ends it with that
/// status after the pending answers. A traced request's wait and read
/// span from the previous request's arrival (or the call's) to its own.
pub fn answers(
    engine: Engine,
    tracer: Tracer,
    call: Request<Streaming<ModelInferRequest>>,
    mut stop: watch::Receiver<bool>,
) -> impl Stream<Item = Result<ModelStreamInferResponse, Status>> + Send {
    let traceparent = traceparent(call.metadata()).map(str::to_owned);
    let mut waiting_since = call
        .extensions()
        .get::<Arrived>()
        .map_or_else(Instant::now, |a| a.0);
    let mut requests = call.into_inner();
    async_stream::stream! {
        let mut pending: SelectAll<BoxStream<'static, Traced>> = SelectAll::new();
        let mut sequences = SequenceTurns::default();
        let mut reading = true;
        let mut failure = None;
        loop {
            let event = tokio::select! {
                next = requests.message(), if reading => match next {
                    Ok(Some(request)) => Event::Request(Box::new(request)),
                    Ok(None) => Event::EndOfRequests,
                    Err(status) => Event::ReadFailed(status),
                },
                Some(answer) = pending.next(), if !pending.is_empty() => Event::Answer(answer),
                _ = stop.wait_for(|&s| s), if reading => Event::EndOfRequests,
                else => Event::Done,
            };
            match event {
                Event::Request(request) => {
                    let trace = tracer.sample(&request.model_name, traceparent.as_deref());
                    if let Some(trace) = &trace {
                        trace.record_at(Activity::GrpcWaitreadStart, waiting_since);
                        trace.record(Activity::GrpcWaitreadEnd);
                    }
                    waiting_since = Instant::now();
                    let turn = sequences.take(&request);
                    pending.push(request_answers(engine.clone(), *request, trace, turn));
                }
                Event::Answer((answer, trace)) => {
                    yield Ok(answer);
                    // The transport took the answer.
                    if let Some(trace) = trace {
                        trace.record(Activity::GrpcSendEnd);
                    }
                }
                Event::EndOfRequests => reading = false,
                Event::ReadFailed(status) => {
                    reading = false;
                    failure = Some(status);
                }
                Event::Done => break,
            }
        }
        if let Some(status) = failure {
            yield Err(status);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(model: &str, id: Option<ParameterChoice>) -> ModelInferRequest {
        let mut request = ModelInferRequest {
            model_name: model.to_owned(),
            ..Default::default()
        };
        if let Some(id) = id {
            let id = InferParameter {
                parameter_choice: Some(id),
            };
            request.parameters.insert("sequence_id".to_owned(), id);
        }
        request
    }

    #[test]
    fn a_sequences_requests_wait_one_for_another() {
        let mut turns = SequenceTurns::default();
        let first = turns.take(&step("acc", Some(ParameterChoice::Int64Param(7))));
        assert!(first.after.is_none());
        let mut second = turns.take(&step("acc", Some(ParameterChoice::Int64Param(7))));
        let mut after = second.after.take().expect("waits for the first");
        assert_eq!(after.try_recv(), Err(oneshot::error::TryRecvError::Empty));
        drop(first);
        assert_eq!(after.try_recv(), Err(oneshot::error::TryRecvError::Closed));
        // Another sequence, another model, or a string id that reads the
        // same as a number are other chains.
        for other in [
            step("acc", Some(ParameterChoice::Int64Param(8))),
            step("other", Some(ParameterChoice::Int64Param(7))),
            step("acc", Some(ParameterChoice::StringParam("7".into()))),
        ] {
            assert!(turns.take(&other).after.is_none());
        }
    }

    #[test]
    fn requests_outside_a_sequence_wait_for_none() {
        let mut turns = SequenceTurns::default();
        for id in [None, Some(ParameterChoice::Int64Param(0))] {
            let request = step("acc", id.clone());
            let (first, second) = (turns.take(&request), turns.take(&request));
            assert!(first.turn.is_none() && second.after.is_none());
        }
        assert!(turns.latest.is_empty());
    }

    #[test]
    fn ended_sequences_are_forgotten() {
        let mut turns = SequenceTurns::default();
        let live: Vec<Turn> = (1..=40)
            .map(|id| turns.take(&step("acc", Some(ParameterChoice::Int64Param(id)))))
            .collect();
        for id in 41..=200 {
            drop(turns.take(&step("acc", Some(ParameterChoice::Int64Param(id)))));
        }
        // The ended ones went at each pruning; the 40 live ones stayed.
        assert!(turns.latest.len() < 40 + 64, "{}", turns.latest.len());
        assert!((1..=40).all(|id| turns.latest.contains_key(&(
            "acc".into(),
            String::new(),
            id.to_string()
        ))));
        drop(live);
    }
}
