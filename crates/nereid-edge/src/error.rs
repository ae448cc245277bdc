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

/// A gRPC status carrying the error's message, and its retry hint as
/// `retry-after` metadata (whole seconds, as HTTP's header) when it has
/// one.
pub fn grpc_status(error: &Error) -> tonic::Status {
    let mut status = tonic::Status::new(grpc_code(error.kind()), error.message());
    if let Some(secs) = error.retry_after_secs() {
        status
            .metadata_mut()
            .insert(RETRY_AFTER, tonic::metadata::MetadataValue::from(secs));
    }
    status
}

/// The metadata key of a gRPC error's retry hint.
pub const RETRY_AFTER: &str = "retry-after";

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_retry_hint_becomes_whole_seconds_of_metadata() {
        let shed = Error::unavailable("later").with_retry_after(Duration::from_millis(1200));
        let status = grpc_status(&shed);
        assert_eq!(status.code(), tonic::Code::Unavailable);
        assert_eq!(status.message(), "later");
        assert_eq!(status.metadata().get(RETRY_AFTER).unwrap(), "2");
        let brief = Error::unavailable("soon").with_retry_after(Duration::from_millis(3));
        assert_eq!(
            grpc_status(&brief).metadata().get(RETRY_AFTER).unwrap(),
            "1"
        );
        assert!(
            grpc_status(&Error::unavailable("full"))
                .metadata()
                .is_empty()
        );
    }
}
