//! The one place where a protocol-neutral [`ErrorKind`] becomes an HTTP
//! status or a gRPC code. Exhaustive on purpose: a new kind must be mapped
//! here before anything compiles.

use http::StatusCode;
use nereid_core::{Error, ErrorKind};

/// HTTP status for an error kind, as Triton maps it.
pub fn http_status(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::InvalidArgument | ErrorKind::AlreadyExists | ErrorKind::Cancelled => {
            StatusCode::BAD_REQUEST
        }
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Unsupported => StatusCode::NOT_IMPLEMENTED,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// gRPC code for an error kind, as Triton maps it.
pub fn grpc_code(kind: ErrorKind) -> tonic::Code {
    match kind {
        ErrorKind::InvalidArgument => tonic::Code::InvalidArgument,
        ErrorKind::NotFound => tonic::Code::NotFound,
        ErrorKind::Unavailable => tonic::Code::Unavailable,
        ErrorKind::Unsupported => tonic::Code::Unimplemented,
        ErrorKind::AlreadyExists => tonic::Code::AlreadyExists,
        ErrorKind::Cancelled => tonic::Code::Cancelled,
        ErrorKind::Internal => tonic::Code::Internal,
    }
}

/// A gRPC status carrying the error's message.
pub fn grpc_status(error: &Error) -> tonic::Status {
    tonic::Status::new(grpc_code(error.kind()), error.message())
}
