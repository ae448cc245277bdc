//! `POST /v2/models/{m}[/versions/{v}]/infer`: JSON and binary tensor data.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use nereid_engine::Engine;
use nereid_protocol::rest::{HEADER_CONTENT_LENGTH, decode_infer_request, encode_infer_response};

use super::{ApiError, ModelPath};

pub async fn infer(
    State(engine): State<Engine>,
    path: ModelPath,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let header_length = headers
        .get(HEADER_CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok());
    let decoded = decode_infer_request(&path.model, path.version, body, header_length)?;
    // Dropping this future (the client went away) abandons the request.
    let response = engine.infer(decoded.request).await?;
    let encoded = encode_infer_response(&response, &decoded.encoding)?;
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
    Ok(http)
}
