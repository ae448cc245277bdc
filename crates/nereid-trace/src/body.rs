//! A response body that records on its trace when it has been sent.

use std::pin::Pin;
use std::task::{Context, Poll};

use http_body::{Body, Frame, SizeHint};
use nereid_core::{Activity, Trace};

/// Wraps a response body; once the server is done with it (sent, or the
/// connection dropped), `activity` (`HTTP_SEND_END`, `GRPC_SEND_END`) is
/// recorded on the trace.
#[derive(Debug)]
pub struct TracedBody<B> {
    inner: B,
    trace: Trace,
    activity: Activity,
}

impl<B> TracedBody<B> {
    pub fn new(inner: B, trace: Trace, activity: Activity) -> TracedBody<B> {
        TracedBody {
            inner,
            trace,
            activity,
        }
    }
}

impl<B: Body + Unpin> Body for TracedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Drop for TracedBody<B> {
    fn drop(&mut self) {
        self.trace.record(self.activity);
    }
}
