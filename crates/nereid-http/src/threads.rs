//! HTTP connection threads: a few OS threads, each running a
//! single-threaded tokio runtime, among which the accepted connections are
//! dealt in turn. A connection's requests are read, run and answered on
//! its thread, and a short compute-only model runs there too
//! (`nereid_engine`'s inline execution), so a request costs no hand-off
//! between threads.
//!
//! On tokio's shared multi-threaded runtime every HTTP/1 request woke a
//! second worker for nothing: hyper's request body signals the connection's
//! own task, which tokio takes for a yield and answers by waking a parked
//! worker, which finds no work and sleeps again (a futex wake, two context
//! switches; docs/benchmarks.md, "Where the server's CPU goes"). On a
//! single-threaded runtime that signal is a push onto a local queue.

use std::net::TcpStream as StdTcpStream;
use std::thread::JoinHandle;

use tokio::net::TcpStream;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

use nereid_edge::handshake::TlsConnection;
use nereid_edge::limits::Counted;

/// The threads; they stop when this is dropped (their connections must
/// have finished: anything still running on them is dropped).
#[derive(Debug)]
pub(crate) struct ConnectionThreads {
    handles: Vec<Handle>,
    next: usize,
    stops: Vec<oneshot::Sender<()>>,
    threads: Vec<JoinHandle<()>>,
}

impl ConnectionThreads {
    /// Starts `count` threads named `nereid-http-<i>`; none when `count` is
    /// zero (connections then run on the calling runtime).
    pub(crate) fn start(count: usize) -> std::io::Result<ConnectionThreads> {
        let mut threads = ConnectionThreads {
            handles: Vec::with_capacity(count),
            next: 0,
            stops: Vec::with_capacity(count),
            threads: Vec::with_capacity(count),
        };
        for index in 0..count {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let (stop, stopped) = oneshot::channel::<()>();
            threads.handles.push(runtime.handle().clone());
            threads.stops.push(stop);
            threads.threads.push(
                std::thread::Builder::new()
                    .name(format!("nereid-http-{index}"))
                    .spawn(move || {
                        let _ = runtime.block_on(stopped);
                        // A model load a request started may still run on
                        // the blocking pool; it is not waited for.
                        runtime.shutdown_background();
                    })?,
            );
        }
        Ok(threads)
    }

    /// The runtime the next connection goes to, in turn; `None` when there
    /// are no threads.
    pub(crate) fn next(&mut self) -> Option<&Handle> {
        if self.handles.is_empty() {
            return None;
        }
        let handle = &self.handles[self.next % self.handles.len()];
        self.next = self.next.wrapping_add(1);
        Some(handle)
    }
}

impl Drop for ConnectionThreads {
    fn drop(&mut self) {
        self.stops.clear();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// Where a connection is served.
pub(crate) enum Placed<T> {
    /// On the runtime it was moved to.
    Moved(T),
    /// On the runtime that accepted it.
    Stayed(T),
}

/// A connection that can move to another thread's runtime.
pub(crate) trait Portable: Sized {
    /// Registers the connection with the runtime of `handle` instead of
    /// the one that accepted it, or leaves it where it is; an error when
    /// moving it failed halfway and the socket is gone.
    fn rehome(self, handle: &Handle) -> std::io::Result<Placed<Self>>;
}

impl Portable for Counted<TcpStream> {
    fn rehome(self, handle: &Handle) -> std::io::Result<Placed<Self>> {
        let (io, slot) = self.into_parts();
        let std: StdTcpStream = io.into_std()?;
        let _entered = handle.enter();
        let io = TcpStream::from_std(std)?;
        Ok(Placed::Moved(Counted::from_parts(io, slot)))
    }
}

/// A TLS connection keeps its session state with its stream: it is served
/// on the runtime that accepted it.
impl Portable for TlsConnection {
    fn rehome(self, _handle: &Handle) -> std::io::Result<Placed<Self>> {
        Ok(Placed::Stayed(self))
    }
}
