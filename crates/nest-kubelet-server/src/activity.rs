//! When a connection last moved a byte, and how many of its requests are open ([`Activity`]): what the idle timeout
//! reads. [`Watched`] notes the bytes, [`OpenRequest`] (carried by a [`Held`] body) the requests.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::Frame;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::Body;

/// When a connection last moved a byte, and how many of its requests are open: what the idle timeout reads.
#[derive(Debug)]
pub(crate) struct Activity {
    since: Instant,
    /// Milliseconds after `since`.
    last: AtomicU64,
    open_requests: AtomicUsize,
}

impl Activity {
    pub(crate) fn new() -> Arc<Activity> {
        Arc::new(Activity { since: Instant::now(), last: AtomicU64::new(0), open_requests: AtomicUsize::new(0) })
    }

    fn touch(&self) {
        let elapsed = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(elapsed, Ordering::Relaxed);
    }

    /// Whether nothing has moved for `timeout` and no request is open.
    fn idle_for(&self, timeout: Duration) -> bool {
        let quiet = self.since.elapsed().saturating_sub(Duration::from_millis(self.last.load(Ordering::Relaxed)));
        self.open_requests.load(Ordering::SeqCst) == 0 && quiet >= timeout
    }

    /// Returns once the connection has been idle for `timeout`.
    pub(crate) async fn until_idle(&self, timeout: Duration) {
        let tick = (timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
        loop {
            tokio::time::sleep(tick).await;
            if self.idle_for(timeout) {
                return;
            }
        }
    }
}

/// Held while a request's response is being sent on a connection.
pub(crate) struct OpenRequest(Arc<Activity>);

impl OpenRequest {
    pub(crate) fn new(activity: &Arc<Activity>) -> OpenRequest {
        activity.open_requests.fetch_add(1, Ordering::SeqCst);
        activity.touch();
        OpenRequest(activity.clone())
    }
}

impl Drop for OpenRequest {
    fn drop(&mut self) {
        self.0.touch();
        self.0.open_requests.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response body that keeps its request open (see [`OpenRequest`]) until it is sent or dropped; its size as the
/// body's, so that a short answer keeps its `content-length`.
pub(crate) struct Held {
    pub(crate) body: Body,
    pub(crate) _open: OpenRequest,
}

impl hyper::body::Body for Held {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// A connection's byte stream, noting in its [`Activity`] when bytes move.
pub(crate) struct Watched<T> {
    pub(crate) inner: T,
    pub(crate) activity: Arc<Activity>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_with_an_open_request_is_never_idle() {
        let activity = Activity::new();
        let open = OpenRequest::new(&activity);
        assert!(!activity.idle_for(Duration::ZERO));
        drop(open);
        assert!(activity.idle_for(Duration::ZERO));
        assert!(!activity.idle_for(Duration::from_secs(60)));
    }
}
