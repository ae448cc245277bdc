//! Accepting connections that must first prove they are clients: a TLS
//! handshake, or on plain gRPC the HTTP/2 connection preface. Each runs in
//! a task of its own with a deadline, so a client that connects and says
//! nothing holds up no one else, and holds its connection slot only until
//! the deadline (hyper's HTTP/2 server would wait for a preface for ever).
//! A failed handshake (a plain-text client on TLS, a client without the
//! certificate mutual TLS asks for) closes that connection only.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;

use crate::limits::{Counted, LimitedListener};
use crate::tls::ServerTls;

/// How long a client may take to finish its handshake or send its preface.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections past their handshake that the server has not taken yet.
const READY_BACKLOG: usize = 32;

/// What every HTTP/2 connection opens with (RFC 9113, 3.4).
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A connection past its TLS handshake, holding its connection slot.
pub type TlsConnection = TlsStream<Counted<TcpStream>>;

/// Hands on the connections whose handshake succeeded; an axum listener,
/// or a stream for tonic through [`Handshaken::into_incoming`]. Dropping
/// it stops accepting and abandons the handshakes under way.
#[derive(Debug)]
pub struct Handshaken<Io> {
    ready: mpsc::Receiver<(Io, SocketAddr)>,
    local_addr: SocketAddr,
}

/// Connections that finished a TLS handshake.
pub type TlsListener = Handshaken<TlsConnection>;

impl TlsListener {
    /// Starts accepting from `listener`, offering `protocols` in ALPN.
    pub fn new(
        listener: LimitedListener,
        tls: &ServerTls,
        protocols: &[&[u8]],
    ) -> io::Result<TlsListener> {
        TlsListener::with_timeout(listener, tls.acceptor(protocols), HANDSHAKE_TIMEOUT)
    }

    fn with_timeout(
        listener: LimitedListener,
        acceptor: TlsAcceptor,
        timeout: Duration,
    ) -> io::Result<TlsListener> {
        Handshaken::spawn(listener, timeout, move |io| acceptor.clone().accept(io))
    }
}

impl Handshaken<Counted<TcpStream>> {
    /// Plain-text HTTP/2 connections whose preface has arrived.
    pub fn h2_preface(listener: LimitedListener) -> io::Result<Self> {
        Handshaken::h2_preface_within(listener, HANDSHAKE_TIMEOUT)
    }

    fn h2_preface_within(listener: LimitedListener, timeout: Duration) -> io::Result<Self> {
        Handshaken::spawn(listener, timeout, wait_for_preface)
    }
}

impl<Io: Send + 'static> Handshaken<Io> {
    fn spawn<F, Fut>(listener: LimitedListener, timeout: Duration, handshake: F) -> io::Result<Self>
    where
        F: Fn(Counted<TcpStream>) -> Fut + Send + 'static,
        Fut: Future<Output = io::Result<Io>> + Send + 'static,
    {
        let local_addr = axum::serve::Listener::local_addr(&listener)?;
        let (sender, ready) = mpsc::channel(READY_BACKLOG);
        tokio::spawn(accept_loop(listener, handshake, timeout, sender));
        Ok(Handshaken { ready, local_addr })
    }

    /// The connections as tonic takes them.
    pub fn into_incoming(self) -> impl Stream<Item = io::Result<Io>> {
        ReceiverStream::new(self.ready).map(|(io, _)| Ok(io))
    }
}

impl<Io> axum::serve::Listener for Handshaken<Io>
where
    Io: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Io = Io;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(connection) => connection,
            // The accepting task only ends once this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local_addr)
    }
}

/// Accepts until the [`Handshaken`] is dropped; dropping the handshakes
/// under way then closes their connections.
async fn accept_loop<Io, F, Fut>(
    mut listener: LimitedListener,
    handshake: F,
    timeout: Duration,
    ready: mpsc::Sender<(Io, SocketAddr)>,
) where
    Io: Send + 'static,
    F: Fn(Counted<TcpStream>) -> Fut,
    Fut: Future<Output = io::Result<Io>> + Send + 'static,
{
    let mut handshakes = JoinSet::new();
    loop {
        tokio::select! {
            (io, peer) = axum::serve::Listener::accept(&mut listener) => {
                handshakes.spawn(finish(handshake(io), peer, timeout, ready.clone()));
            }
            Some(_) = handshakes.join_next(), if !handshakes.is_empty() => {}
            () = ready.closed() => return,
        }
    }
}

async fn finish<Io>(
    handshake: impl Future<Output = io::Result<Io>>,
    peer: SocketAddr,
    timeout: Duration,
    ready: mpsc::Sender<(Io, SocketAddr)>,
) {
    match tokio::time::timeout(timeout, handshake).await {
        // A send fails only when the endpoint is stopping.
        Ok(Ok(io)) => drop(ready.send((io, peer)).await),
        // rustls' own errors: not TLS, no or a bad client certificate...
        Ok(Err(e)) if e.kind() == io::ErrorKind::InvalidData => {
            tracing::info!(%peer, error = %e, "handshake failed");
        }
        // Closed or reset before the handshake ended, as port probes do.
        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "handshake failed"),
        Err(_) => tracing::info!(%peer, ?timeout, "handshake timed out"),
    }
}

/// Waits until the whole HTTP/2 preface can be read, without reading it
/// (hyper does). A client that is not HTTP/2 is let through for hyper to
/// answer.
async fn wait_for_preface(io: Counted<TcpStream>) -> io::Result<Counted<TcpStream>> {
    let mut seen = [0u8; H2_PREFACE.len()];
    loop {
        io.get_ref().readable().await?;
        let n = io.get_ref().peek(&mut seen).await?;
        if n == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        if n == seen.len() || seen[..n] != H2_PREFACE[..n] {
            return Ok(io);
        }
        // Part of the preface: peek sees the same bytes until more come.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[cfg(test)]
mod tests;
