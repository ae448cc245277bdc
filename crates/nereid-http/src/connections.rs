//! Serving HTTP/1.1 connections with hyper directly rather than through
//! `axum::serve`, which has no timer: without one, a client that sends
//! half a request head (or opens a connection and sends nothing) holds its
//! connection, and a slot under `--http-max-connections`, for ever. Here
//! every request head must arrive within the read timeout; the body is
//! bounded by the same timeout in `body_timeout`. Each connection is served
//! on one of the connection threads (`threads.rs`) when it can move there.
//!
//! Stopping never drops a request whose bytes reached the server. hyper's
//! graceful shutdown closes a keep-alive connection it sees idle, and a
//! request already in the socket's buffer but not yet parsed looks idle:
//! its client got a bare close. So the endpoint stops in two phases. First
//! ([`Phase::Closing`]) the listener stops, after accepting what the kernel
//! had already queued, and for [`CLOSE_GRACE`] every connection is still
//! read: a request that comes is answered (503 while the engine drains)
//! with `Connection: close`. Then ([`Phase::Closed`]) the connections still
//! open are closed, each after a last look for bytes already received,
//! which get a 503 of their own. Every close is lingering: the server
//! stops writing and reads what the client still sends for a moment, so
//! that an early answer (a 413 from the header, a 503) is not lost to a
//! reset.

use std::convert::Infallible;
use std::future::poll_fn;
use std::pin::pin;
use std::time::Duration;

use axum::Router;
use axum::response::Response;
use axum::serve::Listener;
use bytes::Bytes;
use http::{HeaderValue, header};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;
use tower::ServiceExt;
use tower::util::BoxCloneService;

use super::threads::{ConnectionThreads, Placed, Portable};

/// How long connections are still read once the endpoint stops.
const CLOSE_GRACE: Duration = Duration::from_millis(500);
/// How long the listener is still accepted from once the endpoint stops:
/// enough for connections the kernel completed before to come out.
const BACKLOG_WINDOW: Duration = Duration::from_millis(20);
/// How long a connection closed at the end of the grace waits for bytes
/// the reactor has not reported yet.
const LAST_LOOK: Duration = Duration::from_millis(10);
/// How long a closed connection reads and discards what its client still
/// sends, at most.
const LINGER: Duration = Duration::from_secs(2);

/// What a request the server read no further than the socket is answered.
const STOPPING_BODY: &str = r#"{"error":"the server is shutting down"}"#;

/// How far the endpoint's stop has come; connections watch it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Serving,
    /// Not accepting; requests are answered with `Connection: close`.
    Closing,
    /// Connections still open close.
    Closed,
}

type Service = TowerToHyperService<BoxCloneService<http::Request<Incoming>, Response, Infallible>>;

/// Serves `app` on the connections `listener` accepts until `shutdown`
/// completes, then stops as the module says and stops the connection
/// threads.
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
    let mut http1 = http1::Builder::new();
    http1
        .timer(TokioTimer::new())
        .header_read_timeout(head_timeout);
    let (phase, _) = watch::channel(Phase::Serving);
    let mut endpoint = Endpoint {
        app,
        http1,
        threads: &mut threads,
        phase: &phase,
    };
    let mut shutdown = pin!(shutdown);
    loop {
        let io = tokio::select! {
            (io, _addr) = listener.accept() => io,
            () = &mut shutdown => break,
        };
        endpoint.start(io);
    }
    phase.send_replace(Phase::Closing);
    let mut window = pin!(tokio::time::sleep(BACKLOG_WINDOW));
    loop {
        tokio::select! {
            biased;
            (io, _addr) = listener.accept() => endpoint.start(io),
            () = &mut window => break,
        }
    }
    drop(listener);
    // Each connection holds a receiver until it has closed.
    let _ = tokio::time::timeout(CLOSE_GRACE, phase.closed()).await;
    phase.send_replace(Phase::Closed);
    phase.closed().await;
    drop(threads);
}

/// What starting a connection needs.
struct Endpoint<'a> {
    app: Router,
    http1: http1::Builder,
    threads: &'a mut ConnectionThreads,
    phase: &'a watch::Sender<Phase>,
}

impl Endpoint<'_> {
    /// Serves `io` on the next connection thread, or here when it cannot
    /// move.
    fn start<I>(&mut self, io: I)
    where
        I: Portable + AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (io, thread) = match self.threads.next() {
            None => (io, None),
            Some(thread) => match io.rehome(thread) {
                Ok(Placed::Moved(io)) => (io, Some(thread)),
                Ok(Placed::Stayed(io)) => (io, None),
                Err(e) => {
                    tracing::warn!(error = %e, "an HTTP connection was lost moving to its thread");
                    return;
                }
            },
        };
        let phase = self.phase.subscribe();
        let service = service(&self.app, phase.clone());
        let connection = drive(
            self.http1.serve_connection(TokioIo::new(io), service),
            phase,
        );
        match thread {
            Some(thread) => drop(thread.spawn(connection)),
            None => drop(tokio::spawn(connection)),
        }
    }
}

/// `app` for one connection: once the endpoint stops, every answer says
/// `Connection: close`, and hyper closes the connection after it.
fn service(app: &Router, phase: watch::Receiver<Phase>) -> Service {
    let app = app
        .clone()
        .map_request(|request: http::Request<Incoming>| request.map(axum::body::Body::new))
        .map_response(move |mut response: Response| {
            if *phase.borrow() != Phase::Serving {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            response
        });
    TowerToHyperService::new(BoxCloneService::new(app))
}

/// Runs one connection until it ends, shutting it down gracefully once the
/// endpoint is [`Phase::Closed`], then closes it as [`close`] says.
async fn drive<I>(
    mut connection: http1::Connection<TokioIo<I>, Service>,
    phase: watch::Receiver<Phase>,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut watch = phase.clone();
    let mut closed = pin!(async move {
        let _ = watch.wait_for(|p| *p == Phase::Closed).await;
    });
    let mut shut = false;
    let ended = poll_fn(|cx| {
        if !shut && closed.as_mut().poll(cx).is_ready() {
            std::pin::Pin::new(&mut connection).graceful_shutdown();
            shut = true;
        }
        connection.poll_without_shutdown(cx)
    })
    .await;
    match ended {
        Ok(()) => {
            let parts = connection.into_parts();
            let stopping = *phase.borrow() != Phase::Serving;
            close(parts.io.into_inner(), parts.read_buf, stopping).await;
        }
        // A client that went away or timed out: its own business.
        Err(e) => tracing::debug!(error = %e, "an HTTP connection ended with an error"),
    }
    // The endpoint waits for this receiver to go.
    drop(phase);
}

/// Closes a connection hyper is done with. While the endpoint stops, a
/// request it had not parsed (in `read_buf`, or still in the socket) is
/// answered 503 first. Then the server stops writing and lingers.
async fn close<I: AsyncRead + AsyncWrite + Unpin>(mut io: I, read_buf: Bytes, stopping: bool) {
    let closing = async {
        if stopping && (!read_buf.is_empty() || has_input(&mut io).await) {
            io.write_all(&stopping_response()).await?;
        }
        io.shutdown().await?;
        linger(&mut io).await;
        Ok::<(), std::io::Error>(())
    };
    // Out of time: the client reads or sends too slowly to wait for.
    if let Ok(Err(e)) = tokio::time::timeout(LINGER, closing).await {
        tracing::debug!(error = %e, "an HTTP connection failed while closing");
    }
}

/// Whether the client sent bytes hyper did not read: a request. A closed
/// connection (end of stream) has none.
async fn has_input<I: AsyncRead + Unpin>(io: &mut I) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(LAST_LOOK, io.read(&mut byte)).await,
        Ok(Ok(1..))
    )
}

/// Reads and discards until the client closes (or [`close`]'s time is up):
/// closing a socket with unread bytes would reset the connection, and the
/// client could lose the answer it has not read yet.
async fn linger<I: AsyncRead + Unpin>(io: &mut I) {
    let mut sink = [0u8; 16 * 1024];
    while let Ok(1..) = io.read(&mut sink).await {}
}

/// A whole HTTP/1.1 503 answer, as the engine's refusal reads over HTTP.
fn stopping_response() -> Vec<u8> {
    format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{STOPPING_BODY}",
        STOPPING_BODY.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests;
