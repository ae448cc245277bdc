//! Wire formats only: the KServe v2 / Triton gRPC messages and service
//! traits (generated from `proto/`), the REST JSON bodies, the binary tensor
//! data extension, and conversions between them and `nereid_core` types.
//!
//! This crate depends on `nereid-core` alone: it knows nothing of the
//! engine, the repository or any backend, and does no I/O.

pub mod grpc;
mod parameters;
pub mod rest;
pub mod routing;

/// Generated gRPC types of package `inference` (Triton's `grpc_service.proto`).
pub mod inference {
    #![allow(clippy::all, missing_debug_implementations, reason = "generated code")]
    tonic::include_proto!("inference");
}

/// Generated types of the standard `grpc.health.v1` service.
pub mod health {
    #![allow(clippy::all, missing_debug_implementations, reason = "generated code")]
    tonic::include_proto!("grpc.health.v1");
}
