//! `POST /v2/models/{m}[/versions/{v}]/infer`: JSON and binary tensor data.
//! A sampled request is traced from the moment its body starts arriving
//! until its answer has been sent.

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use nereid_core::{Activity, Trace};
use nereid_engine::Engine;
use nereid_protocol::rest::{HEADER_CONTENT_LENGTH, decode_infer_request, encode_infer_response};

use super::{ApiError, ModelPath};
use crate::trace::{TracedBody, Tracer};

/// What the infer route needs.
#[derive(Clone)]
pub struct InferState {
    pub engine: Engine,
    pub tracer: Tracer,
}

pub async fn infer(
    State(state): State<InferState>,
    path: ModelPath,
    request: Request,
) -> Result<Response, ApiError> {
    let trace = state
        .tracer
        .sample(&path.model, traceparent(request.headers()));
    if let Some(trace) = &trace {
        trace.record(Activity::HttpRecvStart);
    }
    let header_length = request
        .headers()
        .get(HEADER_CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = match Bytes::from_request(request, &()).await {
        Ok(body) => body,
        Err(rejection) => return Ok(rejection.into_response()),
    };
    let mut decoded =
        decode_infer_request(&path.model, path.version, body, header_length.as_deref())?;
    if let Some(trace) = &trace {
        trace.record(Activity::HttpRecvEnd);
    }
    decoded.request.trace = trace.clone();
    // Dropping this future (the client went away) abandons the request.
    let response = state.engine.infer(decoded.request).await?;
    if let Some(trace) = &trace {
        trace.record(Activity::InferResponseComplete);
    }
    let encoded = encode_infer_response(&response, &decoded.encoding)?;
    drop(response);
    let mut http = encoded.body.into_response();
    let headers = http.headers_mut();
    match encoded.header_length {
        Some(len) => {
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            headers.insert(HEADER_CONTENT_LENGTH, HeaderValue::from(len));
        }
        None => {
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
        }
    }
    Ok(match trace {
        Some(trace) => sent_traced(http, trace),
        None => http,
    })
}

/// The client's W3C trace context, for OpenTelemetry.
fn traceparent(headers: &HeaderMap) -> Option<&str> {
    headers.get("traceparent").and_then(|v| v.to_str().ok())
}

/// Records `HTTP_SEND_START` now and `HTTP_SEND_END` once the body is sent.
fn sent_traced(response: Response, trace: Trace) -> Response {
    trace.record(Activity::HttpSendStart);
    response.map(|body| Body::new(TracedBody::new(body, trace, Activity::HttpSendEnd)))
}
