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
use std::time::Instant;

use nereid_core::{Activity, Error, InferResponse, Trace};
use nereid_engine::turns::{SequenceTurns, Turn};
use nereid_engine::{Answer, Call, Engine};
use nereid_protocol::grpc as wire;
use nereid_protocol::inference::infer_parameter::ParameterChoice;
use nereid_protocol::inference::{
    InferParameter, ModelInferRequest, ModelInferResponse, ModelStreamInferResponse,
};
use tokio::sync::watch;
use tonic::{Request, Status, Streaming};
use tracing::Instrument;

use super::trace::{Arrived, traceparent};
use nereid_trace::Tracer;

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
        let call = Call::one_refusing(DECOUPLED_UNARY);
        let response = engine.infer(request, call).await?.one()?;
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

/// One request's answers on the stream, in order: its one answer, or a
/// decoupled model's responses; each says whether it is the last. A final
/// flag that comes alone is sent as an empty response only when the
/// request asks with `triton_enable_empty_final_response`.
fn request_answers(
    engine: Engine,
    request: ModelInferRequest,
    trace: Option<Trace>,
    turns: &mut SequenceTurns,
) -> BoxStream<'static, Traced> {
    let replies = Replies::of(&request, trace.clone());
    let decoded = wire::decode_infer_request(request).map(|mut r| {
        r.trace = trace;
        r
    });
    let mut turn = match &decoded {
        Ok(request) => turns.take(request),
        Err(_) => Turn::default(),
    };
    Box::pin(async_stream::stream! {
        let answer = match decoded {
            Ok(request) => engine.infer(request, Call::stream()).await,
            Err(e) => Err(e),
        };
        // Ended or dropped, the previous request has sent its last answer.
        turn.wait().await;
        // Ending the turn as the last answer is yielded lets the next
        // request's answers follow it, not precede it: the stream loop
        // takes this answer before it polls that request again.
        match answer {
            Err(e) => {
                turn.end();
                yield replies.error(&e, true);
            }
            Ok(Answer::One(response)) => {
                replies.complete();
                turn.end();
                yield replies.ok(response, true);
            }
            Ok(Answer::Stream(mut responses)) => {
                while let Some(streamed) = responses.next().await {
                    let last = streamed.last;
                    if last {
                        turn.end();
                    }
                    match streamed.response {
                        Some(Ok(response)) => yield replies.ok(response, last),
                        Some(Err(e)) => yield replies.error(&e, last),
                        None if replies.empty_final => yield replies.empty_final(),
                        None => {}
                    }
                    if last {
                        break;
                    }
                }
                replies.complete();
            }
        }
    })
}

/// What every answer to one request on the stream repeats, and its trace.
struct Replies {
    id: String,
    model: String,
    version: String,
    /// A final flag that comes alone is sent as an empty response.
    empty_final: bool,
    trace: Option<Trace>,
}

impl Replies {
    fn of(request: &ModelInferRequest, trace: Option<Trace>) -> Replies {
        Replies {
            id: request.id.clone(),
            model: request.model_name.clone(),
            version: request.model_version.clone(),
            empty_final: matches!(
                request.parameters.get("triton_enable_empty_final_response"),
                Some(InferParameter {
                    parameter_choice: Some(ParameterChoice::BoolParam(true))
                })
            ),
            trace,
        }
    }

    fn ok(&self, response: InferResponse, last: bool) -> Traced {
        let mut response = wire::encode_infer_response(response);
        mark_final(&mut response, last);
        self.sent(ok(response))
    }

    fn error(&self, e: &Error, last: bool) -> Traced {
        let mut answer = wire::stream_error_response(
            self.id.clone(),
            self.model.clone(),
            self.version.clone(),
            e.message(),
        );
        if let Some(response) = &mut answer.infer_response {
            mark_final(response, last);
        }
        self.sent(answer)
    }

    /// The empty response that carries a final flag sent alone.
    fn empty_final(&self) -> Traced {
        let (mut answer, trace) = self.error(&Error::internal(""), true);
        answer.error_message.clear();
        (answer, trace)
    }

    fn sent(&self, answer: ModelStreamInferResponse) -> Traced {
        if let Some(trace) = &self.trace {
            trace.record(Activity::GrpcSendStart);
        }
        (answer, self.trace.clone())
    }

    /// The request's last answer is made.
    fn complete(&self) {
        if let Some(trace) = &self.trace {
            trace.record(Activity::InferResponseComplete);
        }
    }
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
                    pending.push(request_answers(engine.clone(), *request, trace, &mut sequences));
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
