//! What one client may take: request sizes, how long it may take to send
//! a body, gRPC streams per connection, and connections per endpoint (a
//! connection past the limit waits in the listen backlog until one closes;
//! the open connections are counted for the shutdown log).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The limits of the HTTP and gRPC endpoints (flags in `cli/limits.rs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest HTTP request body, after gzip/deflate decompression.
    pub http_max_input_bytes: usize,
    /// Longest wait for a whole HTTP request head (also the longest a
    /// connection may stay idle), and for the next piece of a body.
    pub http_read_timeout: Duration,
    pub http_max_connections: usize,
    /// Threads that serve HTTP connections (`http/threads.rs`); 0 serves
    /// them on the server's shared runtime.
    pub http_threads: usize,
    /// Largest gRPC message received.
    pub grpc_max_message_bytes: usize,
    pub grpc_max_concurrent_streams: u32,
    pub grpc_max_header_list_bytes: u32,
    pub grpc_max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            // tritonserver's --http-max-input-size default.
            http_max_input_bytes: 64 * 1024 * 1024,
            http_read_timeout: Duration::from_secs(60),
            http_max_connections: 500,
            http_threads: std::thread::available_parallelism().map_or(1, usize::from),
            grpc_max_message_bytes: 1024 * 1024 * 1024,
            grpc_max_concurrent_streams: 1024,
            grpc_max_header_list_bytes: 1024 * 1024,
            grpc_max_connections: 500,
        }
    }
}

/// The connections one endpoint may have open.
#[derive(Debug, Clone)]
pub struct ConnectionLimit {
    slots: Arc<Semaphore>,
    max: usize,
}

impl ConnectionLimit {
    pub fn new(max: usize) -> ConnectionLimit {
        ConnectionLimit {
            slots: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.max - self.slots.available_permits()
    }

    /// Waits for a free slot; `None` once the limit is closed.
    async fn slot(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.slots).acquire_owned().await.ok()
    }

    /// Accepts connections from `listener`, one slot each.
    pub fn accept_from(&self, listener: TcpListener) -> LimitedListener {
        LimitedListener {
            listener,
            limit: self.clone(),
        }
    }
}

/// A listener for axum that takes a slot per connection.
#[derive(Debug)]
pub struct LimitedListener {
    listener: TcpListener,
    limit: ConnectionLimit,
}

impl axum::serve::Listener for LimitedListener {
    type Io = Counted<TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Some(slot) = self.limit.slot().await else {
                // Never closed while the endpoint serves; wait for shutdown.
                std::future::pending::<()>().await;
                continue;
            };
            match self.listener.accept().await {
                Ok((io, addr)) => {
                    if let Err(e) = io.set_nodelay(true) {
                        tracing::warn!(error = %e, "cannot set TCP_NODELAY");
                    }
                    return (Counted { io, _slot: slot }, addr);
                }
                // Too many open files and the like: wait and go on, as
                // axum's own listener does.
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.listener.local_addr()
    }
}

/// A connection holding its slot until it closes.
#[derive(Debug)]
pub struct Counted<T> {
    io: T,
    _slot: OwnedSemaphorePermit,
}

impl<T> Counted<T> {
    pub fn get_ref(&self) -> &T {
        &self.io
    }

    /// The connection and its slot, apart.
    pub fn into_parts(self) -> (T, OwnedSemaphorePermit) {
        (self.io, self._slot)
    }

    pub fn from_parts(io: T, slot: OwnedSemaphorePermit) -> Counted<T> {
        Counted { io, _slot: slot }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for Counted<TcpStream> {
    type ConnectInfo = <TcpStream as tonic::transport::server::Connected>::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_connection_past_the_limit_waits_for_a_slot() {
        let limit = ConnectionLimit::new(1);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut limited = limit.accept_from(listener);
        let mut first = TcpStream::connect(addr).await.unwrap();
        let mut second = TcpStream::connect(addr).await.unwrap();
        let (mut a, _) = axum::serve::Listener::accept(&mut limited).await;
        assert_eq!(limit.open(), 1);
        let waiting = tokio::time::timeout(
            std::time::Duration::from_millis(100),
            axum::serve::Listener::accept(&mut limited),
        )
        .await;
        assert!(
            waiting.is_err(),
            "the second connection was served past the limit"
        );
        first.write_all(b"x").await.unwrap();
        let mut byte = [0u8; 1];
        a.read_exact(&mut byte).await.unwrap();
        drop(a);
        let (mut b, _) = axum::serve::Listener::accept(&mut limited).await;
        second.write_all(b"y").await.unwrap();
        b.read_exact(&mut byte).await.unwrap();
        assert_eq!(&byte, b"y");
        assert_eq!(limit.open(), 1);
    }
}
