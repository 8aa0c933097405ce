//! Connections a handler takes over after answering `101 Switching Protocols` (exec, attach and port-forward
//! streams): [`take`] hands the handler the upgraded byte stream, which keeps its connection's slot in
//! [`crate::Connections`] for as long as it lives and is closed when nothing has moved for
//! [`STREAM_IDLE_TIMEOUT`].

use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::limits::ConnectionSlot;
use nest_streams::idle::{Activity, Watched};

/// How long an upgraded stream may move no byte before it is closed: the kubelet's default
/// `--streaming-connection-idle-timeout` (4 hours).
pub const STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(4 * 60 * 60);

/// The connection's slot, as a request extension: what an upgraded stream keeps (held, never read: its drop frees
/// the slot).
#[derive(Clone)]
pub(crate) struct Slot(#[allow(dead_code)] pub(crate) Arc<ConnectionSlot>);

/// Why a request's connection could not be taken over.
#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    /// The request cannot be upgraded (HTTP/2, or it was already taken).
    #[error("the connection cannot be upgraded")]
    NotUpgradable,
    /// The connection failed before the upgrade completed.
    #[error("upgrading the connection: {0}")]
    Failed(#[from] hyper::Error),
}

/// What a handler needs to take over `request`'s connection once its `101` is sent: call before answering, await
/// [`Pending::stream`] after (in a task of its own).
pub fn take<B>(request: &mut hyper::Request<B>) -> Result<Pending, UpgradeError> {
    let slot = request.extensions_mut().remove::<Slot>();
    let on = request.extensions_mut().remove::<OnUpgrade>().ok_or(UpgradeError::NotUpgradable)?;
    Ok(Pending { on, slot })
}

/// A connection about to be taken over.
pub struct Pending {
    on: OnUpgrade,
    slot: Option<Slot>,
}

impl Pending {
    /// The upgraded byte stream, once the `101` has been sent.
    pub async fn stream(self) -> Result<Stream, UpgradeError> {
        let upgraded = self.on.await?;
        let activity = Activity::new();
        let watched = Watched::new(TokioIo::new(upgraded), activity.clone());
        Ok(Stream { inner: watched, activity, _slot: self.slot })
    }
}

/// An upgraded connection's bytes, counted against the server's connections while it lives.
pub struct Stream {
    inner: Watched<TokioIo<Upgraded>>,
    activity: Arc<Activity>,
    _slot: Option<Slot>,
}

impl Stream {
    /// When the stream last moved a byte: select on [`Idle::elapsed`] beside the session.
    pub fn idle(&self) -> Idle {
        Idle(self.activity.clone())
    }
}

/// When an upgraded stream last moved a byte.
pub struct Idle(Arc<Activity>);

impl Idle {
    /// Returns once nothing has moved on the stream for [`STREAM_IDLE_TIMEOUT`].
    pub async fn elapsed(self) {
        self.0.until_idle(STREAM_IDLE_TIMEOUT).await;
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
