//! A connection's idleness, for the servers that close idle connections (the API server's port and the kubelet
//! API's): [`Activity`] records when a byte last moved and how many requests are open, [`Watched`] wraps the
//! connection's byte stream to note its bytes, and an [`OpenRequest`] is held while a response is being sent. A
//! connection is idle when nothing has moved for the timeout and no request is open, so a quiet watch or a long log
//! stream is never cut while its response is still being sent.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// When a connection last moved a byte, and how many of its requests are open: what the idle timeout reads.
#[derive(Debug)]
pub struct Activity {
    since: Instant,
    /// Milliseconds after `since`.
    last: AtomicU64,
    open_requests: AtomicUsize,
}

impl Activity {
    /// A connection's, as it is accepted.
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity { since: Instant::now(), last: AtomicU64::new(0), open_requests: AtomicUsize::new(0) })
    }

    fn touch(&self) {
        let elapsed = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(elapsed, Ordering::Relaxed);
    }

    /// How many of the connection's requests are open.
    pub fn open_requests(&self) -> usize {
        self.open_requests.load(Ordering::SeqCst)
    }

    /// Whether nothing has moved for `timeout` and no request is open.
    pub fn idle_for(&self, timeout: Duration) -> bool {
        let quiet = self.since.elapsed().saturating_sub(Duration::from_millis(self.last.load(Ordering::Relaxed)));
        self.open_requests() == 0 && quiet >= timeout
    }

    /// Returns once the connection has been idle for `timeout` (the server then closes it).
    pub async fn until_idle(&self, timeout: Duration) {
        let tick = (timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
        loop {
            tokio::time::sleep(tick).await;
            if self.idle_for(timeout) {
                return;
            }
        }
    }
}

/// Held while a request's response is being sent on a connection: the connection is not idle meanwhile.
#[derive(Debug)]
pub struct OpenRequest(Arc<Activity>);

impl OpenRequest {
    /// A request of `activity`'s connection, open until this is dropped.
    pub fn new(activity: &Arc<Activity>) -> OpenRequest {
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

/// A connection's byte stream, noting in its [`Activity`] when bytes move.
#[derive(Debug)]
pub struct Watched<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T> Watched<T> {
    /// `inner`, its bytes noted in `activity`.
    pub fn new(inner: T, activity: Arc<Activity>) -> Watched<T> {
        Watched { inner, activity }
    }

    /// The stream beneath.
    pub fn get_ref(&self) -> &T {
        &self.inner
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    #[test]
    fn a_connection_with_an_open_request_is_never_idle() {
        let activity = Activity::new();
        let open = OpenRequest::new(&activity);
        assert!(!activity.idle_for(Duration::ZERO));
        drop(open);
        assert!(activity.idle_for(Duration::ZERO));
        assert!(!activity.idle_for(Duration::from_secs(60)), "closing a request is activity");
    }

    #[tokio::test]
    async fn bytes_either_way_keep_a_connection_from_idling_and_silence_ends_it() {
        let (near, mut far) = tokio::io::duplex(64);
        let activity = Activity::new();
        let mut watched = Watched::new(near, activity.clone());
        tokio::time::sleep(Duration::from_millis(120)).await;
        assert!(activity.idle_for(Duration::from_millis(100)));
        watched.write_all(b"x").await.unwrap();
        assert!(!activity.idle_for(Duration::from_millis(100)), "a write moved a byte");
        tokio::time::sleep(Duration::from_millis(120)).await;
        far.write_all(b"y").await.unwrap();
        let mut byte = [0u8; 1];
        watched.read_exact(&mut byte).await.unwrap();
        assert!(!activity.idle_for(Duration::from_millis(100)), "a read moved a byte");
        let started = Instant::now();
        activity.until_idle(Duration::from_millis(100)).await;
        assert!(started.elapsed() >= Duration::from_millis(100));
    }
}
