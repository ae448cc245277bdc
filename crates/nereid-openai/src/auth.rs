//! `--openai-api-key`: every route wants `Authorization: Bearer <key>`;
//! a missing or wrong key is answered 401 with OpenAI's error body.

use std::fmt;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

/// The key clients must send; its `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(Arc<str>);

impl ApiKey {
    pub fn new(key: impl Into<Arc<str>>) -> ApiKey {
        ApiKey(key.into())
    }

    /// Compares in time that does not depend on where the keys differ.
    fn matches(&self, given: &str) -> bool {
        let (want, given) = (self.0.as_bytes(), given.as_bytes());
        want.len() == given.len() && want.iter().zip(given).fold(0, |d, (a, b)| d | (a ^ b)) == 0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

/// Lets the request through when it carries the key.
pub async fn check(State(key): State<ApiKey>, request: Request, next: Next) -> Response {
    match refusal(&key, request.headers().get(header::AUTHORIZATION)) {
        Some(error) => error.into_response(),
        None => next.run(request).await,
    }
}

fn refusal(key: &ApiKey, header: Option<&header::HeaderValue>) -> Option<ApiError> {
    let Some(value) = header else {
        return Some(ApiError::unauthorized(
            "You didn't provide an API key. You need to provide your API key in an \
             Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).",
        ));
    };
    let given = value.to_str().ok().and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(given) if key.matches(given.trim()) => None,
        _ => Some(ApiError::unauthorized("Incorrect API key provided.")),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn only_the_bearer_key_passes() {
        let key = ApiKey::new("sk-right");
        let header = |v: &'static str| HeaderValue::from_static(v);
        assert_eq!(refusal(&key, Some(&header("Bearer sk-right"))), None);
        for wrong in [
            "Bearer sk-wrong",
            "Bearer sk-righ",
            "sk-right",
            "Basic sk-right",
        ] {
            let error = refusal(&key, Some(&header(wrong))).expect("refused");
            assert_eq!(error.message, "Incorrect API key provided.");
        }
        let missing = refusal(&key, None).expect("refused");
        assert_eq!(missing.status, axum::http::StatusCode::UNAUTHORIZED);
        assert!(!format!("{key:?}").contains("sk-right"));
    }
}
