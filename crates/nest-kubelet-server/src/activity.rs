//! A response body that holds its request open ([`Held`]) until it is sent: the connection's idleness itself
//! ([`nest_streams::idle`]) is shared with the API server's port.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::Poll;

use bytes::Bytes;
use hyper::body::Frame;
use nest_streams::idle::OpenRequest;

use crate::Body;

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
