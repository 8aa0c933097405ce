//! A WebSocket carrying another protocol's bytes (KEP-4006's `SPDY/3.1+portforward.k8s.io`): each binary message is
//! the next bytes of the stream, in order (client-go's `TunnelingConnection`). [`Tunnel`] reads and writes the bytes
//! as one byte stream, so that the SPDY session runs over it as over an upgraded TCP connection.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::{Buf as _, Bytes};
use futures_util::{Sink as _, Stream as _};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

/// A WebSocket read and written as a byte stream (messages as [`crate::handshake::websocket`] bounds them).
pub struct Tunnel<S> {
    ws: WebSocketStream<S>,
    /// What is left of the message being read.
    pending: Bytes,
    /// Whether the closing message has been queued.
    closing: bool,
}

impl<S> Tunnel<S> {
    /// The byte stream of `ws`.
    pub fn new(ws: WebSocketStream<S>) -> Tunnel<S> {
        Tunnel { ws, pending: Bytes::new(), closing: false }
    }
}

fn broken(error: impl std::error::Error + Send + Sync + 'static) -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, error)
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Tunnel<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            if !self.pending.is_empty() {
                let n = self.pending.len().min(buf.remaining());
                buf.put_slice(&self.pending[..n]);
                self.pending.advance(n);
                return Poll::Ready(Ok(()));
            }
            match ready!(Pin::new(&mut self.ws).poll_next(cx)) {
                Some(Ok(Message::Binary(data))) => self.pending = data,
                // The peer's end: the byte stream's end.
                Some(Ok(Message::Close(_))) | None => return Poll::Ready(Ok(())),
                Some(Ok(Message::Text(_))) => {
                    return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, "a text message in a tunnel")));
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                Some(Err(error)) => return Poll::Ready(Err(broken(error))),
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Tunnel<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        ready!(Pin::new(&mut self.ws).poll_ready(cx)).map_err(broken)?;
        // One message per write, no larger than the peer's limit for one.
        let n = data.len().min(crate::handshake::MAX_MESSAGE);
        Pin::new(&mut self.ws).start_send(Message::binary(Bytes::copy_from_slice(&data[..n]))).map_err(broken)?;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.ws).poll_flush(cx).map_err(broken)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if !self.closing {
            ready!(Pin::new(&mut self.ws).poll_ready(cx)).map_err(broken)?;
            // A normal closure, with its code: client-go reads anything else as an error, not the stream's end.
            let normal = CloseFrame { code: CloseCode::Normal, reason: "".into() };
            Pin::new(&mut self.ws).start_send(Message::Close(Some(normal))).map_err(broken)?;
            self.closing = true;
        }
        Pin::new(&mut self.ws).poll_close(cx).map_err(broken)
    }
}

#[cfg(test)]
mod tests {
    use futures_util::SinkExt as _;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio_tungstenite::tungstenite::protocol::Role;

    use super::*;

    /// Bytes written into one end of a tunnel come out of the other, across messages, and a shutdown (a normal
    /// closure) is the other end's end of stream.
    #[tokio::test]
    async fn a_tunnel_carries_bytes_both_ways_and_its_end() {
        let (client_io, server_io) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(async move {
            let mut tunnel = Tunnel::new(crate::handshake::websocket(server_io).await);
            let mut received = [0u8; 11];
            tunnel.read_exact(&mut received).await.unwrap();
            tunnel.write_all(&received).await.unwrap();
            tunnel.shutdown().await.unwrap();
        });
        let mut client = Tunnel::new(WebSocketStream::from_raw_socket(client_io, Role::Client, None).await);
        client.write_all(b"hello ").await.unwrap();
        client.write_all(b"there").await.unwrap();
        client.flush().await.unwrap();
        let mut echoed = Vec::new();
        client.read_to_end(&mut echoed).await.unwrap();
        assert_eq!(echoed, b"hello there");
        server.await.unwrap();
    }

    #[tokio::test]
    async fn a_text_message_in_a_tunnel_is_an_error() {
        let (client_io, server_io) = tokio::io::duplex(1 << 16);
        let mut client = WebSocketStream::from_raw_socket(client_io, Role::Client, None).await;
        client.send(Message::text("not bytes")).await.unwrap();
        let mut tunnel = Tunnel::new(crate::handshake::websocket(server_io).await);
        let error = tunnel.read(&mut [0u8; 16]).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
    }
}
