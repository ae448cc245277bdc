//! The protocol-neutral error every layer returns. Frontends map
//! [`ErrorKind`] to an HTTP status and a gRPC code in one place each.

use std::fmt;

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
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
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

pub type Result<T, E = Error> = std::result::Result<T, E>;
