//! Accepting TLS connections. Each handshake runs in a task of its own
//! with a deadline, so a client that connects and says nothing holds up
//! no one else, and holds its connection slot only until the deadline. A
//! failed handshake (a plain-text client, a client without the
//! certificate mutual TLS asks for) closes that connection only.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;

use super::ServerTls;
use crate::limits::{Counted, LimitedListener};

/// How long a client may take to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections past their handshake that the server has not taken yet.
const READY_BACKLOG: usize = 32;

/// A connection past its TLS handshake, holding its connection slot.
pub type TlsConnection = TlsStream<Counted<TcpStream>>;

/// Hands on the connections whose TLS handshake succeeded; an axum
/// listener, or a stream for tonic through [`TlsListener::into_incoming`].
/// Dropping it stops accepting and abandons the handshakes under way.
#[derive(Debug)]
pub struct TlsListener {
    ready: mpsc::Receiver<(TlsConnection, SocketAddr)>,
    local_addr: SocketAddr,
}

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
        let local_addr = axum::serve::Listener::local_addr(&listener)?;
        let (sender, ready) = mpsc::channel(READY_BACKLOG);
        tokio::spawn(accept_loop(listener, acceptor, timeout, sender));
        Ok(TlsListener { ready, local_addr })
    }

    /// The connections as tonic takes them.
    pub fn into_incoming(self) -> impl Stream<Item = io::Result<TlsConnection>> {
        ReceiverStream::new(self.ready).map(|(io, _)| Ok(io))
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsConnection;
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

/// Accepts until the [`TlsListener`] is dropped; dropping the handshakes
/// under way then closes their connections.
async fn accept_loop(
    mut listener: LimitedListener,
    acceptor: TlsAcceptor,
    timeout: Duration,
    ready: mpsc::Sender<(TlsConnection, SocketAddr)>,
) {
    let mut handshakes = JoinSet::new();
    loop {
        tokio::select! {
            (io, peer) = axum::serve::Listener::accept(&mut listener) => {
                let handshake = handshake(acceptor.clone(), io, peer, timeout, ready.clone());
                handshakes.spawn(handshake);
            }
            Some(_) = handshakes.join_next(), if !handshakes.is_empty() => {}
            () = ready.closed() => return,
        }
    }
}

async fn handshake(
    acceptor: TlsAcceptor,
    io: Counted<TcpStream>,
    peer: SocketAddr,
    timeout: Duration,
    ready: mpsc::Sender<(TlsConnection, SocketAddr)>,
) {
    match tokio::time::timeout(timeout, acceptor.accept(io)).await {
        // A send fails only when the endpoint is stopping.
        Ok(Ok(tls)) => drop(ready.send((tls, peer)).await),
        // rustls' own errors: not TLS, no or a bad client certificate...
        Ok(Err(e)) if e.kind() == io::ErrorKind::InvalidData => {
            tracing::info!(%peer, error = %e, "TLS handshake failed");
        }
        // Closed or reset before the handshake ended, as port probes do.
        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
        Err(_) => tracing::info!(%peer, ?timeout, "TLS handshake timed out"),
    }
}

#[cfg(test)]
mod tests;
