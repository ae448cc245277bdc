//! `--http-max-input-size` before the body: a request whose
//! `Content-Length` is already over it is answered 413 from its head, where
//! reading the body to the limit first cost the client the upload and the
//! server the memory. A body that only proves too long while it is read
//! (chunked, or compressed: the limit holds after decompression) is still
//! stopped by the body limit; either 413 carries the same words, after
//! Triton's for an input over the limit.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use super::error_response;

/// Answers 413 to a request that declares a body over `limit` bytes, and
/// puts the words into a 413 the body limit gave.
pub(super) async fn refuse_oversized(
    State(limit): State<usize>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(length) = declared_length(request.headers())
        && length > limit as u64
    {
        return too_large(Some(length), limit);
    }
    let response = next.run(request).await;
    if response.status() == StatusCode::PAYLOAD_TOO_LARGE && !is_json(response.headers()) {
        return too_large(None, limit);
    }
    response
}

/// The body's length as the head declares it, when that is its length on
/// arrival: a compressed body's limit is on what it inflates to.
fn declared_length(headers: &HeaderMap) -> Option<u64> {
    let encoded = headers
        .get(header::CONTENT_ENCODING)
        .is_some_and(|e| !e.as_bytes().eq_ignore_ascii_case(b"identity"));
    if encoded {
        return None;
    }
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/json"))
}

/// 413 with `{"error": ...}` naming the size when it is known.
fn too_large(length: Option<u64>, limit: usize) -> Response {
    let size = match length {
        Some(length) => format!("request size of {length} bytes"),
        None => "request size".to_string(),
    };
    error_response(
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!(
            "{size} exceeds the maximum allowed input size of {limit} bytes. Use --http-max-input-size to increase the limit."
        ),
    )
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::{Body, Bytes};
    use axum::extract::DefaultBodyLimit;
    use axum::routing::post;
    use futures::stream;
    use tower::ServiceExt;

    use super::*;

    fn app() -> Router {
        Router::new()
            .route("/echo", post(|body: Bytes| async move { body }))
            .layer(DefaultBodyLimit::max(8))
            .layer(axum::middleware::from_fn_with_state(8, refuse_oversized))
    }

    async fn call(request: Request) -> (StatusCode, String) {
        let response = app().oneshot(request).await.unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    /// A body that fails if it is ever read: the answer came from the head.
    fn unreadable() -> Body {
        Body::from_stream(stream::once(async {
            Err::<Bytes, _>(std::io::Error::other("the body was read"))
        }))
    }

    #[tokio::test]
    async fn a_declared_length_over_the_limit_is_413_without_reading_the_body() {
        let request = Request::post("/echo")
            .header(header::CONTENT_LENGTH, "9")
            .body(unreadable())
            .unwrap();
        let (status, body) = call(request).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(
            body,
            r#"{"error":"request size of 9 bytes exceeds the maximum allowed input size of 8 bytes. Use --http-max-input-size to increase the limit."}"#
        );
    }

    #[tokio::test]
    async fn a_body_that_proves_too_long_as_it_is_read_gets_the_same_words() {
        let chunks = stream::iter(["12345", "6789"].map(Ok::<_, std::io::Error>));
        let request = Request::post("/echo")
            .body(Body::from_stream(chunks))
            .unwrap();
        let (status, body) = call(request).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(
            body.starts_with(
                r#"{"error":"request size exceeds the maximum allowed input size of 8 bytes."#
            ),
            "{body}"
        );
    }

    #[tokio::test]
    async fn a_body_within_the_limit_or_compressed_is_read() {
        let fits = Request::post("/echo")
            .header(header::CONTENT_LENGTH, "8")
            .body(Body::from("12345678"))
            .unwrap();
        assert_eq!(call(fits).await, (StatusCode::OK, "12345678".to_string()));
        let gzip = Request::post("/echo")
            .header(header::CONTENT_LENGTH, "9")
            .header(header::CONTENT_ENCODING, "gzip")
            .body(Body::from("123456789"))
            .unwrap();
        // Over the limit once read: the head alone did not decide it.
        let (status, body) = call(gzip).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        assert!(
            body.starts_with(r#"{"error":"request size exceeds"#),
            "{body}"
        );
    }
}
