//! Serving HTTP/1.1 connections with hyper directly rather than through
//! `axum::serve`, which has no timer: without one, a client that sends
//! half a request head (or opens a connection and sends nothing) holds its
//! connection, and a slot under `--http-max-connections`, for ever. Here
//! every request head must arrive within the read timeout; the body is
//! bounded by the same timeout in `body_timeout`. At shutdown the listener
//! closes, idle connections close, and busy ones finish their request.
//! Each connection is served on one of the connection threads
//! (`threads.rs`) when it can move there.

use std::time::Duration;

use axum::Router;
use axum::serve::Listener;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tower::ServiceExt;

use super::threads::{ConnectionThreads, Placed, Portable};

/// Serves `app` on the connections `listener` accepts until `shutdown`
/// completes, then waits for the open connections to finish and stops the
/// connection threads.
pub(super) async fn serve<L>(
    mut listener: L,
    app: Router,
    head_timeout: Duration,
    mut threads: ConnectionThreads,
    shutdown: impl Future<Output = ()> + Send + 'static,
) where
    L: Listener,
    L::Io: Portable + Send + 'static,
{
    let mut http1 = hyper::server::conn::http1::Builder::new();
    http1
        .timer(TokioTimer::new())
        .header_read_timeout(head_timeout);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let io = tokio::select! {
            (io, _addr) = listener.accept() => io,
            () = &mut shutdown => break,
        };
        let service = TowerToHyperService::new(
            app.clone()
                .map_request(|request: http::Request<Incoming>| request.map(axum::body::Body::new)),
        );
        let (io, thread) = match threads.next() {
            None => (io, None),
            Some(thread) => match io.rehome(thread) {
                Ok(Placed::Moved(io)) => (io, Some(thread)),
                Ok(Placed::Stayed(io)) => (io, None),
                Err(e) => {
                    tracing::warn!(error = %e, "an HTTP connection was lost moving to its thread");
                    continue;
                }
            },
        };
        let connection = graceful.watch(http1.serve_connection(TokioIo::new(io), service));
        let connection = async move {
            if let Err(e) = connection.await {
                // A client that went away or timed out: its own business.
                tracing::debug!(error = %e, "an HTTP connection ended with an error");
            }
        };
        match thread {
            Some(thread) => drop(thread.spawn(connection)),
            None => drop(tokio::spawn(connection)),
        }
    }
    drop(listener);
    graceful.shutdown().await;
    drop(threads);
}
