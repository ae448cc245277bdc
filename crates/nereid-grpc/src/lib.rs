//! The gRPC frontend: Triton's `inference.GRPCInferenceService` and the
//! standard `grpc.health.v1.Health` service on one port, served by tonic.
//! Handlers decode with `nereid_protocol::grpc`, call the engine, encode;
//! every error leaves through `nereid_edge::error::grpc_status`.
//!
//! Depends on the engine handle, the wire formats and what the network
//! frontends share (`nereid-edge`, `nereid-trace`): never on the
//! repository, the scheduler, a backend, the server or another frontend
//! (tests/python/test_architecture.py checks it).

mod convert;
mod health;
mod labels;
mod logging;
mod service;
mod shared_memory;
mod stream;
mod trace;

use anyhow::Context;
use nereid_engine::Engine;
use nereid_protocol::health::health_server::HealthServer;
use nereid_protocol::inference::grpc_inference_service_server::GrpcInferenceServiceServer;
use tokio::sync::watch;
use tonic::codec::CompressionEncoding;
use tonic::transport::Server;

use health::HealthService;
use nereid_edge::handshake::Handshaken;
use nereid_edge::handshake::TlsListener;
use nereid_edge::limits::Limits;
use nereid_edge::logging::LogControl;
use nereid_edge::restricted::{ApiGroup, Protocol, RestrictLayer, refusal};
use nereid_edge::{Endpoint, Frontend};
use nereid_trace::Tracer;
use service::InferenceService;

/// Largest message sent: Triton's INT32_MAX (what is received is
/// `--grpc-max-message-size`).
const MAX_SENT_BYTES: usize = i32::MAX as usize;

/// Serves gRPC on `endpoint` until `shutdown` completes, then lets
/// in-flight calls finish. Long-lived streams (`ModelStreamInfer`, health
/// `Watch`) end at shutdown once their pending answers are sent, so that
/// the graceful drain does not wait on clients that never hang up. With
/// TLS, the handshakes run beside the accepting.
pub async fn serve(
    frontend: Frontend,
    endpoint: Endpoint,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let Frontend {
        engine,
        log,
        tracer,
        limits,
        restrictions,
    } = frontend;
    let (stopping, stop) = watch::channel(false);
    let signal = async move {
        shutdown.await;
        stopping.send_replace(true);
    };
    let stamps = tower::ServiceBuilder::new()
        .map_request(trace::stamp_arrival)
        .map_response(trace::trace_send);
    let router = Server::builder()
        .http2_adaptive_window(Some(true))
        .max_concurrent_streams(Some(limits.grpc_max_concurrent_streams))
        .http2_max_header_list_size(Some(limits.grpc_max_header_list_bytes))
        .layer(stamps)
        .layer(RestrictLayer::new(
            restrictions,
            ApiGroup::of_grpc_path,
            refused,
        ))
        .add_service(inference_server(
            engine.clone(),
            log,
            tracer,
            &limits,
            stop.clone(),
        ))
        .add_service(health_server(engine, stop));
    let Endpoint {
        listener,
        connections,
        tls,
    } = endpoint;
    match tls {
        None => {
            // The limited listener sets TCP_NODELAY: small unary calls
            // would otherwise wait on Nagle and delayed ACKs.
            let incoming = Handshaken::h2_preface(connections.accept_from(listener))?;
            router
                .serve_with_incoming_shutdown(incoming.into_incoming(), signal)
                .await
        }
        Some(tls) => {
            // gRPC clients insist on h2 in ALPN.
            let incoming = TlsListener::new(connections.accept_from(listener), &tls, &[b"h2"])?;
            let incoming = incoming.into_incoming();
            router.serve_with_incoming_shutdown(incoming, signal).await
        }
    }
    .context("the gRPC server failed")
}

/// Compressed requests are accepted; answers go uncompressed, as Triton's
/// default (`--grpc-infer-response-compression-level=none`). gRPC clients
/// advertise gzip by default, and compressing every answer would cost far
/// more CPU than it saves on loopback and LAN links.
fn inference_server(
    engine: Engine,
    log: LogControl,
    tracer: Tracer,
    limits: &Limits,
    stop: watch::Receiver<bool>,
) -> GrpcInferenceServiceServer<InferenceService> {
    GrpcInferenceServiceServer::new(InferenceService::new(engine, log, tracer, stop))
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Deflate)
        .max_decoding_message_size(limits.grpc_max_message_bytes)
        .max_encoding_message_size(MAX_SENT_BYTES)
}

/// Triton answers a restricted protocol without its header UNAVAILABLE.
fn refused(header: &str) -> http::Response<tonic::body::Body> {
    tonic::Status::unavailable(refusal(Protocol::Grpc, header)).into_http()
}

fn health_server(engine: Engine, stop: watch::Receiver<bool>) -> HealthServer<HealthService> {
    HealthServer::new(HealthService::new(engine, stop))
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Deflate)
}
