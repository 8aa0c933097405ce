//! Port-forward, the kubelet's side (`pkg/kubelet/cri/streaming/portforward`, 1.33), in its three transports:
//!
//! - SPDY/3.1 ([`serve_spdy`]): per forwarded connection the client opens two streams with the same `requestID`
//!   header, `streamType: error` and `streamType: data`, each with the `port` header; the data stream carries the
//!   connection's bytes both ways, the error stream a message if forwarding fails;
//! - the same SPDY tunnelled in a WebSocket (`SPDY/3.1+portforward.k8s.io`, what kubectl 1.33 asks for first):
//!   [`crate::tunnel::Tunnel`] under [`serve_spdy`];
//! - the channel protocol over WebSocket ([`serve_channels`], the Python client's): the ports in the query, a data
//!   channel (2i) and an error channel (2i+1) per port, each opened by a message holding the port (two bytes, little
//!   endian).
//!
//! Where a port's connection goes is the caller's ([`Forwarder::dial`]): the node connects to localhost inside the
//! pod's network namespace and nowhere else.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::{SinkExt as _, StreamExt as _};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use crate::channel::{Frame, Protocol};
use crate::spdy::session::{Connection, Reader, Stream, Writer};

/// The SPDY stream protocol of port-forward (`X-Stream-Protocol-Version`).
pub const SPDY_PROTOCOL: &str = "portforward.k8s.io";
/// The WebSocket subprotocol that tunnels port-forward's SPDY (KEP-4006).
pub const TUNNEL_PROTOCOL: &str = "SPDY/3.1+portforward.k8s.io";
/// The WebSocket subprotocols of port-forward, most preferred first: the tunnel, then the channel protocols.
pub const WEBSOCKET_PROTOCOLS: &[&str] =
    &[TUNNEL_PROTOCOL, "v4.channel.k8s.io", "v4.base64.channel.k8s.io", "channel.k8s.io", "base64.channel.k8s.io"];
/// The most ports one channel-protocol request may forward (a channel number is a byte, two per port).
pub const MAX_PORTS: usize = 64;

/// How much of a forwarded connection is read at once.
const CHUNK: usize = 32 << 10;

/// Makes a port's connection.
pub type Dial =
    Arc<dyn Fn(u16) -> Pin<Box<dyn Future<Output = std::io::Result<TcpStream>> + Send>> + Send + Sync + 'static>;

/// Where forwarded connections go.
#[derive(Clone)]
pub struct Forwarder {
    /// The pod, as error messages name it (`<name>, uid <uid>`).
    pub pod: String,
    /// Connects to a port of the pod.
    pub dial: Dial,
}

impl Forwarder {
    fn failure(&self, port: u16, error: &std::io::Error) -> String {
        format!("error forwarding port {port} to pod {}: {error}", self.pod)
    }
}

/// A port as a request names it: a number in 1..=65535 (upstream's messages for the rest).
pub fn parse_port(text: &str) -> Result<u16, String> {
    let port: u16 = text.parse().map_err(|error| format!("unable to parse {text:?} as a port: {error}"))?;
    if port == 0 {
        return Err(format!("port {text:?} must be > 0"));
    }
    Ok(port)
}

// === impl SPDY ===

/// Serves port-forward's SPDY on `io` (an upgraded connection, or a [`crate::tunnel::Tunnel`]) until the client
/// closes it.
pub async fn serve_spdy<S>(io: S, forwarder: Forwarder)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let mut connection = Connection::start(io);
    let mut pairs: HashMap<String, Pair> = HashMap::new();
    while let Some(stream) = connection.accept().await {
        let kind = stream.headers.get("streamType").map(str::to_string);
        // Clients before requestID paired an error stream with the data stream opened next (two identifiers on).
        let request = match (stream.headers.get("requestID"), kind.as_deref()) {
            (Some(id), _) => id.to_string(),
            (None, Some("data")) => stream.id.saturating_sub(2).to_string(),
            (None, _) => stream.id.to_string(),
        };
        expire(&mut pairs).await;
        let pair = pairs.entry(request.clone()).or_insert_with(Pair::new);
        match kind.as_deref() {
            Some("data") => pair.data = Some(stream),
            Some("error") => pair.error = Some(stream),
            other => {
                tracing::debug!(?other, "a port-forward stream of no known type is reset");
                stream.writer.reset().await;
                continue;
            }
        }
        if pair.data.is_some() && pair.error.is_some() {
            let Some(Pair { data: Some(data), error: Some(error), .. }) = pairs.remove(&request) else { continue };
            tokio::spawn(forward_pair(data, error, forwarder.clone()));
        }
    }
}

/// A forwarded connection's streams, as they arrive.
struct Pair {
    data: Option<Stream>,
    error: Option<Stream>,
    /// When its first stream arrived.
    since: std::time::Instant,
}

impl Pair {
    fn new() -> Pair {
        Pair { data: None, error: None, since: std::time::Instant::now() }
    }
}

/// Resets the streams of pairs whose other half has not come within the kubelet's `streamCreationTimeout`.
async fn expire(pairs: &mut HashMap<String, Pair>) {
    let timeout = crate::spdy::remotecommand::STREAM_CREATION_TIMEOUT;
    let expired: Vec<String> =
        pairs.iter().filter(|(_, pair)| pair.since.elapsed() >= timeout).map(|(id, _)| id.clone()).collect();
    for id in expired {
        if let Some(pair) = pairs.remove(&id) {
            for stream in [pair.data, pair.error].into_iter().flatten() {
                stream.writer.reset().await;
            }
        }
    }
}

/// One forwarded connection: its port's connection, spliced to the data stream; a failure on the error stream.
async fn forward_pair(data: Stream, error: Stream, forwarder: Forwarder) {
    let port = data.headers.get("port").map(parse_port);
    let dialled = match port {
        Some(Ok(port)) => (forwarder.dial)(port).await.map_err(|e| forwarder.failure(port, &e)),
        Some(Err(message)) => Err(message),
        None => Err("port header is required".to_string()),
    };
    match dialled {
        Ok(socket) => splice(data.reader, data.writer, socket).await,
        Err(message) => {
            let _ = error.writer.write(message.as_bytes()).await;
            let _ = data.writer.finish().await;
        }
    }
    let _ = error.writer.finish().await;
}

/// Copies a data stream and a connection both ways: each direction's end is passed on (FIN, or the socket's write
/// side shut down), and the splice ends when both have ended.
async fn splice(mut reader: Reader, writer: Writer, socket: TcpStream) {
    let (mut from_pod, mut to_pod) = socket.into_split();
    let up = async move {
        while let Some(data) = reader.read().await {
            if to_pod.write_all(&data).await.is_err() {
                break;
            }
        }
        let _ = to_pod.shutdown().await;
    };
    let down = async move {
        let mut buffer = vec![0u8; CHUNK];
        while let Ok(n @ 1..) = from_pod.read(&mut buffer).await {
            if writer.write(&buffer[..n]).await.is_err() {
                return;
            }
        }
        let _ = writer.finish().await;
    };
    futures_util::future::join(up, down).await;
}

// === impl the channel protocol ===

/// Serves the channel protocol for `ports` until the client closes the WebSocket, or every port's connection has
/// ended.
pub async fn serve_channels<S>(ws: WebSocketStream<S>, protocol: Protocol, ports: Vec<u16>, forwarder: Forwarder)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sink, mut incoming) = ws.split();
    // One bounded queue to one writer: a client that does not read stalls the pod's sockets, not this node.
    let (out, mut queue) = mpsc::channel::<Message>(16);
    let writer = tokio::spawn(async move {
        while let Some(message) = queue.recv().await {
            if sink.send(message).await.is_err() {
                return;
            }
        }
        let normal = CloseFrame { code: CloseCode::Normal, reason: "".into() };
        let _ = sink.send(Message::Close(Some(normal))).await;
        let _ = sink.close().await;
    });
    let mut to_pod = Vec::with_capacity(ports.len());
    let mut readers = Vec::new();
    for (index, port) in ports.iter().enumerate() {
        let (data, error) = channels_of(index);
        for channel in [data, error] {
            let _ = out.send(protocol.encode(channel, &port.to_le_bytes())).await;
        }
        match (forwarder.dial)(*port).await {
            Ok(socket) => {
                let (from_pod, writer) = socket.into_split();
                to_pod.push(Some(writer));
                readers.push(pump(from_pod, data, protocol, out.clone()));
            }
            Err(failure) => {
                to_pod.push(None);
                let message = forwarder.failure(*port, &failure);
                let _ = out.send(protocol.encode(error, message.as_bytes())).await;
            }
        }
    }
    let ended = futures_util::future::join_all(readers);
    let from_client = async {
        while let Some(Ok(message)) = incoming.next().await {
            match protocol.decode(message) {
                Ok(Some(Frame::Data { channel, data })) if channel % 2 == 0 => {
                    let port = to_pod.get_mut(usize::from(channel / 2)).and_then(Option::as_mut);
                    if let Some(socket) = port
                        && socket.write_all(&data).await.is_err()
                    {
                        to_pod[usize::from(channel / 2)] = None;
                    }
                }
                // Error channels are the server's to write; a v5 close names nothing here.
                Ok(_) => {}
                Err(_) => return,
            }
        }
    };
    let client_left = tokio::select! {
        _ = ended => false,
        () = from_client => true,
    };
    drop(out);
    let _ = writer.await;
    if !client_left {
        // The closing handshake: the client's last messages are read (and dropped) until its own close, so that
        // closing on bytes unread does not reset the connection and lose what was sent it.
        let drain = async {
            while let Some(Ok(message)) = incoming.next().await {
                if message.is_close() {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(CLOSE_GRACE, drain).await;
    }
}

/// How long a client has to answer the server's close.
const CLOSE_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// The data and error channels of the `index`th port.
fn channels_of(index: usize) -> (u8, u8) {
    let data = u8::try_from(index * 2).unwrap_or(u8::MAX - 1);
    (data, data.saturating_add(1))
}

/// Sends what the pod writes on `channel` until its connection ends.
async fn pump(
    mut from_pod: tokio::net::tcp::OwnedReadHalf,
    channel: u8,
    protocol: Protocol,
    out: mpsc::Sender<Message>,
) {
    let mut buffer = vec![0u8; CHUNK];
    while let Ok(n @ 1..) = from_pod.read(&mut buffer).await {
        if out.send(protocol.encode(channel, &buffer[..n])).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};
    use tokio::io::DuplexStream;

    use super::*;
    use crate::spdy::{Decoder, Encoder, Headers, status};

    /// A SPDY client of the test's own, over an in-memory connection.
    struct Client {
        io: DuplexStream,
        encoder: Encoder,
        decoder: Decoder,
        buffer: BytesMut,
    }

    impl Client {
        async fn send(&mut self, frame: crate::spdy::Frame) {
            let mut bytes = BytesMut::new();
            self.encoder.encode(&frame, &mut bytes).unwrap();
            let _ = self.io.write_all(&bytes).await;
        }

        async fn open(&mut self, stream: u32, pairs: &[(&str, &str)]) {
            let headers = Headers(pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect());
            let frame = crate::spdy::Frame::SynStream {
                stream,
                associated: 0,
                priority: 0,
                fin: false,
                unidirectional: false,
                headers,
            };
            self.send(frame).await;
        }

        async fn next(&mut self) -> Option<crate::spdy::Frame> {
            loop {
                if let Some(frame) = self.decoder.decode(&mut self.buffer).unwrap() {
                    return Some(frame);
                }
                if self.io.read_buf(&mut self.buffer).await.unwrap_or(0) == 0 {
                    return None;
                }
            }
        }

        /// Every frame until the server closes the connection, the bytes of each stream joined.
        async fn rest(&mut self) -> (Vec<crate::spdy::Frame>, HashMap<u32, Vec<u8>>) {
            let (mut frames, mut bytes) = (Vec::new(), HashMap::<u32, Vec<u8>>::new());
            while let Some(frame) = tokio::time::timeout(std::time::Duration::from_secs(10), self.next()).await.unwrap()
            {
                if let crate::spdy::Frame::Data { stream, data, .. } = &frame {
                    bytes.entry(*stream).or_default().extend_from_slice(data);
                }
                frames.push(frame);
            }
            (frames, bytes)
        }
    }

    /// A port-forward server over SPDY whose ports are this machine's loopback ports.
    fn server() -> Client {
        let (client, server) = tokio::io::duplex(1 << 16);
        let dial: Dial = Arc::new(|port| Box::pin(TcpStream::connect(("127.0.0.1", port))));
        tokio::spawn(serve_spdy(server, Forwarder { pod: "p, uid u".into(), dial }));
        Client { io: client, encoder: Encoder::default(), decoder: Decoder::default(), buffer: BytesMut::new() }
    }

    /// A one-shot echo server on loopback.
    async fn echo() -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let (mut read, mut write) = socket.split();
            let _ = tokio::io::copy(&mut read, &mut write).await;
        });
        port
    }

    #[tokio::test]
    async fn a_pair_of_streams_forwards_a_connection_both_ways_and_passes_its_end_on() {
        let port = echo().await.to_string();
        let mut client = server();
        client.open(1, &[("streamType", "error"), ("port", &port), ("requestID", "0")]).await;
        client.open(3, &[("streamType", "data"), ("port", &port), ("requestID", "0")]).await;
        let data = |fin, data: &'static [u8]| crate::spdy::Frame::Data { stream: 3, fin, data: Bytes::from(data) };
        client.send(data(false, b"hello ")).await;
        client.send(data(true, b"there")).await;
        let mut replies = 0;
        let mut echoed = Vec::new();
        // The echo server closes once it has read the end: then the data stream, and the error stream, finish.
        let (mut data_done, mut error_done) = (false, false);
        while !(data_done && error_done) {
            match tokio::time::timeout(std::time::Duration::from_secs(10), client.next()).await.unwrap().unwrap() {
                crate::spdy::Frame::SynReply { .. } => replies += 1,
                crate::spdy::Frame::Data { stream: 3, fin, data } => {
                    echoed.extend_from_slice(&data);
                    data_done |= fin;
                }
                crate::spdy::Frame::Data { stream: 1, fin, data } => {
                    assert!(data.is_empty(), "an error: {data:?}");
                    error_done |= fin;
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!((replies, echoed.as_slice()), (2, &b"hello there"[..]));
    }

    #[tokio::test]
    async fn ports_that_are_no_ports_or_refuse_are_told_on_the_error_stream() {
        let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
        for (port, said) in [
            ("0".to_string(), "port \"0\" must be > 0".to_string()),
            ("70000".into(), "unable to parse \"70000\" as a port".into()),
            (closed.to_string(), format!("error forwarding port {closed} to pod p, uid u")),
        ] {
            let mut client = server();
            client.open(1, &[("streamType", "error"), ("port", &port), ("requestID", "7")]).await;
            client.open(3, &[("streamType", "data"), ("port", &port), ("requestID", "7")]).await;
            let mut bytes = Vec::new();
            loop {
                let frame = tokio::time::timeout(std::time::Duration::from_secs(10), client.next()).await.unwrap();
                match frame.unwrap() {
                    crate::spdy::Frame::Data { stream: 1, fin, data } => {
                        bytes.extend_from_slice(&data);
                        if fin {
                            break;
                        }
                    }
                    _ => continue,
                }
            }
            let message = String::from_utf8(bytes).unwrap();
            assert!(message.starts_with(&said), "{port}: {message}");
        }
    }

    #[tokio::test]
    async fn a_flood_of_streams_ends_the_connection_with_a_goaway() {
        let mut client = server();
        for i in 0..(crate::spdy::session::MAX_STREAMS as u32 + 10) {
            let id = i.to_string();
            client.open(2 * i + 1, &[("streamType", "data"), ("port", "1"), ("requestID", &id)]).await;
        }
        let (frames, _) = client.rest().await;
        let replies = frames.iter().filter(|f| matches!(f, crate::spdy::Frame::SynReply { .. })).count();
        assert_eq!(replies, crate::spdy::session::MAX_STREAMS);
        assert!(matches!(frames.last(), Some(crate::spdy::Frame::GoAway { status: status::PROTOCOL_ERROR, .. })));
    }

    #[tokio::test]
    async fn an_oversized_frame_or_a_stream_id_out_of_order_ends_the_connection() {
        let mut client = server();
        let _ = client.io.write_all(&[0x80, 0x03, 0x00, 0x06, 0x00, 0xff, 0xff, 0xff]).await;
        let (frames, _) = client.rest().await;
        assert!(matches!(frames.as_slice(), [crate::spdy::Frame::GoAway { status: status::PROTOCOL_ERROR, .. }]));
        let mut client = server();
        client.open(5, &[("streamType", "error")]).await;
        client.open(3, &[("streamType", "error")]).await;
        let (frames, _) = client.rest().await;
        assert!(matches!(frames.last(), Some(crate::spdy::Frame::GoAway { status: status::PROTOCOL_ERROR, .. })));
    }

    #[tokio::test]
    async fn pings_are_echoed() {
        let mut client = server();
        client.send(crate::spdy::Frame::Ping { id: 1 }).await;
        assert_eq!(client.next().await, Some(crate::spdy::Frame::Ping { id: 1 }));
    }
}
