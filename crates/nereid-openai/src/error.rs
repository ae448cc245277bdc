//! OpenAI's error shape: `{"error": {"message", "type", "param", "code"}}`
//! with a fitting status. The words are those of Triton's OpenAI frontend
//! where it refuses the same thing.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use nereid_core::Error;
use serde::Serialize;

/// A refused or failed OpenAI request.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    kind: &'static str,
    param: Option<&'static str>,
    code: Option<&'static str>,
}

#[derive(Serialize)]
struct Body<'a> {
    error: Fields<'a>,
}

#[derive(Serialize)]
struct Fields<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    param: Option<&'a str>,
    code: Option<&'a str>,
}

impl ApiError {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
        }
    }

    /// 400: the request asks for something this frontend cannot do.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "invalid_request_error", message)
    }

    /// 400 naming the request field at fault.
    pub fn invalid_param(param: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            param: Some(param),
            ..ApiError::invalid(message)
        }
    }

    /// 404 for a model that is not served, in OpenAI's words and with its
    /// code, which the `openai` client raises as `NotFoundError`.
    pub fn model_not_found(name: &str) -> ApiError {
        ApiError::unusable_model(format!("The model `{name}` does not exist."), true)
    }

    /// 404 for a model that cannot be used here, saying why; OpenAI
    /// answers a model used on the wrong route with 404 too. `missing`:
    /// whether OpenAI's code `model_not_found` fits (the model is not
    /// there, rather than there but of another kind).
    pub fn unusable_model(message: impl Into<String>, missing: bool) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            code: missing.then_some("model_not_found"),
            ..ApiError::invalid_param("model", message)
        }
    }

    /// 404 for a path this frontend does not serve.
    pub fn no_route(method: &str, path: &str) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("Unknown request URL: {method} {path}"),
        )
    }

    /// 401: the API key is missing or wrong.
    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError {
            code: Some("invalid_api_key"),
            ..ApiError::new(StatusCode::UNAUTHORIZED, "invalid_request_error", message)
        }
    }

    /// 500: the model answered in a way this frontend cannot use.
    pub fn server(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", message)
    }

    /// An engine error, with the status Nereid gives its kind everywhere.
    pub fn engine(error: &Error) -> ApiError {
        let status = nereid_edge::error::http_status(error.kind());
        let kind = if status.is_server_error() {
            "server_error"
        } else {
            "invalid_request_error"
        };
        ApiError::new(status, kind, error.message())
    }

    /// The JSON body, also sent as a server-sent event when a stream fails.
    pub fn to_json(&self) -> String {
        let body = Body {
            error: Fields {
                message: &self.message,
                kind: self.kind,
                param: self.param,
                code: self.code,
            },
        };
        serde_json::to_string(&body).unwrap_or_default()
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (
            self.status,
            [(header::CONTENT_TYPE, "application/json")],
            self.to_json(),
        )
            .into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_have_openais_shape() {
        let missing = ApiError::model_not_found("gpt");
        assert_eq!(missing.status, StatusCode::NOT_FOUND);
        let body: serde_json::Value = serde_json::from_str(&missing.to_json()).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"error": {
                "message": "The model `gpt` does not exist.",
                "type": "invalid_request_error",
                "param": "model",
                "code": "model_not_found",
            }})
        );
        let other = ApiError::unusable_model("not a text model", false);
        assert_eq!(other.status, StatusCode::NOT_FOUND);
        let body: serde_json::Value = serde_json::from_str(&other.to_json()).unwrap();
        assert_eq!(body["error"]["code"], serde_json::Value::Null);
        assert_eq!(body["error"]["param"], "model");
        let body: serde_json::Value =
            serde_json::from_str(&ApiError::server("x").to_json()).unwrap();
        assert_eq!(body["error"]["param"], serde_json::Value::Null);
        assert_eq!(body["error"]["type"], "server_error");
    }

    #[test]
    fn engine_errors_keep_their_status() {
        let error = ApiError::engine(&Error::unavailable("busy"));
        assert_eq!(error.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(error.message, "busy");
    }
}
