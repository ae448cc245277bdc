//! `POST /v2/models/{m}[/versions/{v}]/infer`: JSON and binary tensor data,
//! or a raw body that is the data of the model's one input. A sampled
//! request is traced from the moment its body starts arriving until its
//! answer has been sent. The steps come in Triton's order: the model, the
//! body's encoding, the header length, then the body.

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use nereid_core::model_config::ModelConfig;
use nereid_core::routing::ROUTING_HEADER;
use nereid_core::{Activity, Error, Trace};
use nereid_engine::{Call, Engine};
use nereid_protocol::rest::{
    DecodedRequest, EncodedResponse, HEADER_CONTENT_LENGTH, decode_infer_request,
    decode_raw_infer_request, encode_infer_response, inference_header_length,
};

use super::compression::{Encoding, compress, refuse_unknown_encoding, response_encoding};
use super::{ApiError, ModelPath};
use nereid_trace::{TracedBody, Tracer};

/// What Triton answers an HTTP inference on a decoupled model.
const DECOUPLED: &str = "HTTP end point doesn't support models with decoupled transaction policy";

/// What the infer route needs.
#[derive(Clone, Debug)]
pub struct InferState {
    pub engine: Engine,
    pub tracer: Tracer,
}

impl axum::extract::FromRef<InferState> for Engine {
    fn from_ref(state: &InferState) -> Engine {
        state.engine.clone()
    }
}

pub async fn infer(
    State(state): State<InferState>,
    path: ModelPath,
    request: Request,
) -> Result<Response, ApiError> {
    let _kept = state.engine.load_on_request(&path.model, None).await?;
    let config = state.engine.model_config(&path.model, path.version)?;
    if config.model_transaction_policy.is_some_and(|p| p.decoupled) {
        return Err(nereid_core::Error::unsupported(DECOUPLED).into());
    }
    if let Some(refusal) = refuse_unknown_encoding(request.headers()) {
        return Ok(refusal);
    }
    let trace = state
        .tracer
        .sample(&path.model, traceparent(request.headers()));
    if let Some(trace) = &trace {
        trace.record(Activity::HttpRecvStart);
    }
    let encoding = response_encoding(request.headers());
    let routing_key = request
        .headers()
        .get(ROUTING_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut decoded = match read(&path, &config, request).await {
        Ok(decoded) => decoded,
        Err(refusal) => return Ok(refusal),
    };
    if let Some(trace) = &trace {
        trace.record(Activity::HttpRecvEnd);
    }
    decoded.request.trace = trace.clone();
    if let Some(key) = routing_key {
        decoded.request.routing.routing_key.get_or_insert(key);
    }
    // Dropping this future (the client went away) abandons the request.
    let call = Call::one_refusing(DECOUPLED);
    let response = state.engine.infer(decoded.request, call).await?.one()?;
    if let Some(trace) = &trace {
        trace.record(Activity::InferResponseComplete);
    }
    let encoded = encode_infer_response(&response, &decoded.encoding)?;
    drop(response);
    let http = respond(encoded, encoding);
    Ok(match trace {
        Some(trace) => sent_traced(http, trace),
        None => http,
    })
}

/// Reads and decodes the body: its first `Inference-Header-Content-Length`
/// bytes are JSON (all of it without the header); with none, the body is
/// raw data for the one input `config` names.
async fn read(
    path: &ModelPath,
    config: &ModelConfig,
    request: Request,
) -> Result<DecodedRequest, Response> {
    let header_length = request
        .headers()
        .get(HEADER_CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = Bytes::from_request(request, &())
        .await
        .map_err(IntoResponse::into_response)?;
    let decode = || -> Result<DecodedRequest, Error> {
        match inference_header_length(body.len(), header_length.as_deref())? {
            0 => decode_raw_infer_request(&path.model, path.named.clone(), body, config),
            json_len => decode_infer_request(&path.model, path.named.clone(), body, json_len),
        }
    };
    decode().map_err(|e| ApiError(e).into_response())
}

/// The HTTP response carrying `encoded`, compressed with `encoding`.
fn respond(encoded: EncodedResponse, encoding: Encoding) -> Response {
    let (body, content_encoding) = compress(encoded.body, encoding);
    let mut http = body.into_response();
    let headers = http.headers_mut();
    if let Some(content_encoding) = content_encoding {
        headers.insert(
            header::CONTENT_ENCODING,
            HeaderValue::from_static(content_encoding),
        );
    }
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
    http
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
