//! Inference calls: the unary one, and `ModelStreamInfer`, where every
//! request of the incoming stream runs concurrently and gets exactly one
//! `ModelStreamInferResponse`, in completion order. A failed request is
//! answered in `error_message` with its id; the stream stays open.

use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt};
use std::time::Instant;

use nereid_core::{Activity, Error, Trace};
use nereid_engine::Engine;
use nereid_protocol::grpc as wire;
use nereid_protocol::inference::{ModelInferRequest, ModelInferResponse, ModelStreamInferResponse};
use tokio::sync::watch;
use tonic::{Request, Status, Streaming};
use tracing::Instrument;

use super::trace::{Arrived, traceparent};
use crate::trace::Tracer;

/// Decodes, runs and encodes one request, traced when `trace` is given.
pub async fn infer(
    engine: &Engine,
    request: ModelInferRequest,
    trace: Option<Trace>,
) -> Result<ModelInferResponse, Error> {
    let span = tracing::debug_span!("grpc_infer", model = %request.model_name, id = %request.id);
    async {
        let mut request = wire::decode_infer_request(request)?;
        request.trace = trace.clone();
        let response = engine.infer(request).await?;
        if let Some(trace) = &trace {
            trace.record(Activity::InferResponseComplete);
        }
        Ok(wire::encode_infer_response(response))
    }
    .instrument(span)
    .await
}

/// One request's answer on the stream, success or error, with its trace.
async fn stream_answer(
    engine: Engine,
    request: ModelInferRequest,
    trace: Option<Trace>,
) -> (ModelStreamInferResponse, Option<Trace>) {
    let id = request.id.clone();
    let model = request.model_name.clone();
    let version = request.model_version.clone();
    let answer = match infer(&engine, request, trace.clone()).await {
        Ok(response) => ModelStreamInferResponse {
            error_message: String::new(),
            infer_response: Some(response),
        },
        Err(e) => wire::stream_error_response(id, model, version, e.message()),
    };
    if let Some(trace) = &trace {
        trace.record(Activity::GrpcSendStart);
    }
    (answer, trace)
}

/// What the stream loop saw next.
enum Event {
    Request(Box<ModelInferRequest>),
    Answer(ModelStreamInferResponse, Option<Trace>),
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
        let mut pending = FuturesUnordered::new();
        let mut reading = true;
        let mut failure = None;
        loop {
            let event = tokio::select! {
                next = requests.message(), if reading => match next {
                    Ok(Some(request)) => Event::Request(Box::new(request)),
                    Ok(None) => Event::EndOfRequests,
                    Err(status) => Event::ReadFailed(status),
                },
                Some((answer, trace)) = pending.next(), if !pending.is_empty() => Event::Answer(answer, trace),
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
                    pending.push(stream_answer(engine.clone(), *request, trace));
                }
                Event::Answer(answer, trace) => {
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
