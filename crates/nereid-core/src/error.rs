//! The protocol-neutral error every layer returns. Frontends map
//! [`ErrorKind`] to an HTTP status and a gRPC code in one place each.

use std::fmt;
use std::time::Duration;

/// What kind of failure, in Triton's terms (`TRITONSERVER_Error_Code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The request is malformed or does not fit the model.
    InvalidArgument,
    /// The model, version, region or input named does not exist.
    NotFound,
    /// The model exists but cannot serve now (not ready, queue full, shutting down).
    Unavailable,
    /// The feature or extension is not implemented.
    Unsupported,
    /// The thing to create is already there.
    AlreadyExists,
    /// The client cancelled or went away.
    Cancelled,
    /// A fault inside the server or a backend.
    Internal,
}

/// An error with its kind and a message meant for the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    /// When the client may try again with a chance of success (an
    /// overloaded model's hint); HTTP sends it as `Retry-After`, gRPC as
    /// `retry-after` metadata.
    retry_after: Option<Duration>,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            retry_after: None,
        }
    }

    /// The same error with a hint of when to try again.
    pub fn with_retry_after(mut self, after: Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// The retry hint in whole seconds, as `Retry-After` takes it: rounded
    /// up, at least 1.
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after
            .map(|d| d.as_secs() + u64::from(d.subsec_nanos() > 0))
            .map(|secs| secs.max(1))
    }

    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::InvalidArgument, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::NotFound, message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Unavailable, message)
    }

    pub fn unsupported(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Unsupported, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Internal, message)
    }

    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

/// `error` and each of its sources, joined with ": ". Some errors keep
/// their reason only in a source (libloading says "dlopen failed" and
/// keeps the loader's "file not found" as its source).
pub fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        text = format!("{text}: {c}");
        cause = c.source();
    }
    text
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Outer(std::io::Error);

    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("dlopen failed")
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn an_error_reads_with_its_causes() {
        let inner = std::io::Error::new(std::io::ErrorKind::NotFound, "file not found");
        assert_eq!(with_causes(&Outer(inner)), "dlopen failed: file not found");
    }
}
