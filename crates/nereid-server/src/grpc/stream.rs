//! Inference calls: the unary one, and `ModelStreamInfer`, where every
//! request of the incoming stream runs concurrently and gets exactly one
//! `ModelStreamInferResponse`, in completion order. A failed request is
//! answered in `error_message` with its id; the stream stays open.

use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt};
use nereid_core::Error;
use nereid_engine::Engine;
use nereid_protocol::grpc as wire;
use nereid_protocol::inference::{ModelInferRequest, ModelInferResponse, ModelStreamInferResponse};
use tokio::sync::watch;
use tonic::{Status, Streaming};
use tracing::Instrument;

/// Decodes, runs and encodes one request.
pub async fn infer(
    engine: &Engine,
    request: ModelInferRequest,
) -> Result<ModelInferResponse, Error> {
    let span = tracing::debug_span!("grpc_infer", model = %request.model_name, id = %request.id);
    async {
        let request = wire::decode_infer_request(request)?;
        let response = engine.infer(request).await?;
        Ok(wire::encode_infer_response(response))
    }
    .instrument(span)
    .await
}

/// One request's answer on the stream, success or error.
async fn stream_answer(engine: Engine, request: ModelInferRequest) -> ModelStreamInferResponse {
    let id = request.id.clone();
    let model = request.model_name.clone();
    let version = request.model_version.clone();
    match infer(&engine, request).await {
        Ok(response) => ModelStreamInferResponse {
            error_message: String::new(),
            infer_response: Some(response),
        },
        Err(e) => wire::stream_error_response(id, model, version, e.message()),
    }
}

/// What the stream loop saw next.
enum Event {
    Request(Box<ModelInferRequest>),
    Answer(ModelStreamInferResponse),
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
/// status after the pending answers.
pub fn answers(
    engine: Engine,
    mut requests: Streaming<ModelInferRequest>,
    mut stop: watch::Receiver<bool>,
) -> impl Stream<Item = Result<ModelStreamInferResponse, Status>> + Send {
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
                Some(answer) = pending.next(), if !pending.is_empty() => Event::Answer(answer),
                _ = stop.wait_for(|&s| s), if reading => Event::EndOfRequests,
                else => Event::Done,
            };
            match event {
                Event::Request(request) => pending.push(stream_answer(engine.clone(), *request)),
                Event::Answer(answer) => yield Ok(answer),
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
