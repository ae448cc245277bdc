//! Triton's generate extension: `POST /v2/models/{m}[/versions/{v}]/generate`
//! answers a model's one response as a flat JSON object, and
//! `/generate_stream` answers every response as a server-sent event
//! (`data: {json}`), errors included (`data: {"error": ...}`), until the
//! final flag. Both take a flat JSON object (`nereid_protocol::rest`'s
//! generate mapping). Decoupled models stream here over HTTP, which
//! Triton's `/infer` refuses. As in Triton, a request the model never
//! sees (an unknown model, a bad body, a missing input, a wrong shape) is
//! answered with a plain JSON error on both routes, before any event.

use std::convert::Infallible;
use std::pin::Pin;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use nereid_core::{DataType, Error, InferResponse};
use nereid_engine::{Answer, Call, Engine, ResponseStream};
use nereid_protocol::rest::{GenerateInput, decode_generate_request, encode_generate_response};

use super::{ApiError, ModelPath, error_response};

/// What Triton answers `/generate` for a model that gave other than one
/// response.
const NOT_ONE: &str = "generate expects model to produce exactly 1 response, use generate stream for model that generates various number of responses";

pub async fn generate(
    State(engine): State<Engine>,
    path: ModelPath,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let answer = start(&engine, &path, &headers, &body).await?;
    let responses = match answer {
        Answer::One(response) => vec![Ok(response)],
        Answer::Stream(stream) => collect(stream).await,
    };
    // As in Triton: the first response sets the status; anything but one
    // response is an error in the body.
    let status = match responses.first() {
        Some(Err(e)) => nereid_edge::error::http_status(e.kind()),
        _ => StatusCode::OK,
    };
    let body = match responses.as_slice() {
        [Ok(response)] => encode_generate_response(response),
        [Err(e)] => Err(e.clone()),
        _ => Err(Error::internal(NOT_ONE)),
    };
    Ok(match body {
        Ok(body) => (status, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => error_response(status, e.message()),
    })
}

pub async fn generate_stream(
    State(engine): State<Engine>,
    path: ModelPath,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let answer = start(&engine, &path, &headers, &body).await?;
    let mut events = match answer {
        Answer::One(response) => futures::stream::once(async move { Ok(response) }).boxed(),
        Answer::Stream(stream) => stream.responses().boxed(),
    }
    .peekable();
    // The first response sets the status, as in Triton; a model that sends
    // the final flag alone gets 200 and no event. `Peekable` fuses the
    // stream, which must not be polled again once it has ended.
    let status = match Pin::new(&mut events).peek().await {
        Some(Err(e)) => nereid_edge::error::http_status(e.kind()),
        _ => StatusCode::OK,
    };
    let events = events.map(|event| Ok::<_, Infallible>(event_frame(event)));
    let mut response = (status, Body::from_stream(events)).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    Ok(response)
}

/// Decodes the request and starts it on the engine.
async fn start(
    engine: &Engine,
    path: &ModelPath,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Answer, Error> {
    let _kept = engine.load_on_request(&path.model, None).await?;
    let metadata = engine.model_metadata(&path.model, path.version)?;
    if headers
        .get(header::CONTENT_ENCODING)
        .is_some_and(|e| e.as_bytes() != b"identity")
    {
        return Err(Error::invalid_argument(
            "Unsupported content-encoding, only 'identity' is supported.",
        ));
    }
    let inputs: Vec<GenerateInput> = metadata
        .inputs
        .iter()
        .filter_map(|t| {
            Some(GenerateInput {
                name: t.name.clone(),
                datatype: DataType::from_wire_name(&t.datatype)?,
                dims: t.shape.clone(),
            })
        })
        .collect();
    let request = decode_generate_request(&path.model, path.named.clone(), body, &inputs)?;
    engine.infer(request, Call::stream()).await
}

async fn collect(stream: ResponseStream) -> Vec<Result<InferResponse, Error>> {
    stream.responses().collect().await
}

/// One server-sent event: the response's JSON object, or its error.
fn event_frame(response: Result<InferResponse, Error>) -> Bytes {
    let json = response
        .and_then(|r| encode_generate_response(&r))
        .unwrap_or_else(|e| {
            serde_json::json!({ "error": e.message() })
                .to_string()
                .into_bytes()
        });
    let mut frame = Vec::with_capacity(json.len() + 8);
    frame.extend_from_slice(b"data: ");
    frame.extend_from_slice(&json);
    frame.extend_from_slice(b"\n\n");
    Bytes::from(frame)
}
