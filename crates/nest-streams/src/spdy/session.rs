//! A SPDY/3.1 connection's streams, the server's side (what `moby/spdystream`'s `Connection` is to the kubelet):
//! the peer opens streams, each with headers; every one is answered with a SYN_REPLY at once and handed to the
//! caller ([`Connection::accept`]) as a [`Reader`] of the peer's bytes and a [`Writer`] of this side's. PINGs are
//! echoed; WINDOW_UPDATE and SETTINGS are read and ignored (spdystream has no flow control, so the peer's
//! writes are held back only by this side not reading the connection).
//!
//! Bounds: at most [`MAX_STREAMS`] streams alive at once (a flood ends the connection with a GOAWAY), at most
//! [`MAX_BUFFERED`] bytes received and not yet taken by the caller (the connection is not read beyond that), frames
//! as [`super`] bounds them. A protocol error ends the connection that made it, and only that one.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, watch};

use super::{Decoder, Encoder, Error, Frame, Headers, status};

/// The most streams alive at once on one connection (a forwarded port's connection takes two).
pub const MAX_STREAMS: usize = 256;
/// The most bytes received and not yet taken by the caller.
pub const MAX_BUFFERED: usize = 4 << 20;
/// The largest data frame this side writes.
pub const MAX_WRITE: usize = 32 << 10;
/// How long a connection that has said GOAWAY is still read (what arrives is dropped) before it is closed, unless
/// the peer closes it first. A socket closed with bytes unread answers the peer with a reset, which may overtake the
/// GOAWAY and discard it from the peer's buffers unread; read to the end, the peer sees the GOAWAY, then the close.
pub const DRAIN_GRACE: Duration = Duration::from_secs(2);

/// A stream the peer opened.
pub struct Stream {
    /// Its identifier.
    pub id: u32,
    /// The headers it was opened with.
    pub headers: Headers,
    /// The peer's bytes.
    pub reader: Reader,
    /// This side's.
    pub writer: Writer,
}

/// A stream's bytes from the peer.
pub struct Reader {
    data: mpsc::UnboundedReceiver<Chunk>,
    _alive: Arc<Alive>,
}

impl Reader {
    /// The next bytes; `None` once the peer has finished the stream (FIN), reset it, or the connection ended.
    pub async fn read(&mut self) -> Option<Bytes> {
        self.data.recv().await.map(|chunk| chunk.data)
    }
}

/// Bytes received, holding their share of [`MAX_BUFFERED`] until taken.
struct Chunk {
    data: Bytes,
    _budget: OwnedSemaphorePermit,
}

/// Counts a stream as alive while the caller holds any part of it.
struct Alive(Arc<AtomicUsize>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The stream is gone: the peer reset it, or the connection ended.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the stream is gone")]
pub struct Gone;

/// Writes one stream's bytes to the peer.
#[derive(Clone)]
pub struct Writer {
    id: u32,
    out: mpsc::Sender<Out>,
    reset: Arc<AtomicBool>,
    _alive: Arc<Alive>,
}

impl Writer {
    /// Sends `data`, in frames of at most [`MAX_WRITE`] bytes.
    pub async fn write(&self, data: &[u8]) -> Result<(), Gone> {
        for piece in data.chunks(MAX_WRITE) {
            self.frame(Frame::Data { stream: self.id, fin: false, data: Bytes::copy_from_slice(piece) }).await?;
        }
        Ok(())
    }

    /// Tells the peer this side writes no more (an empty data frame with FIN).
    pub async fn finish(&self) -> Result<(), Gone> {
        self.frame(Frame::Data { stream: self.id, fin: true, data: Bytes::new() }).await
    }

    /// Ends the stream abnormally (RST_STREAM, CANCEL).
    pub async fn reset(&self) {
        if !self.reset.swap(true, Ordering::Relaxed) {
            let _ = self.out.send(Out::Frame(Frame::RstStream { stream: self.id, status: status::CANCEL })).await;
        }
    }

    async fn frame(&self, frame: Frame) -> Result<(), Gone> {
        if self.reset.load(Ordering::Relaxed) {
            return Err(Gone);
        }
        self.out.send(Out::Frame(frame)).await.map_err(|_| Gone)
    }
}

/// What the writer task is asked to do.
enum Out {
    Frame(Frame),
    /// Write what is queued, then close the connection.
    Close,
}

/// A connection being served.
pub struct Connection {
    incoming: mpsc::Receiver<Stream>,
    out: mpsc::Sender<Out>,
    closed: watch::Receiver<bool>,
}

impl Connection {
    /// Serves the peer's SPDY on `io` (an upgraded connection, or a WebSocket tunnel's bytes), from tasks of its own.
    pub fn start<S: AsyncRead + AsyncWrite + Send + 'static>(io: S) -> Connection {
        let (read, write) = tokio::io::split(io);
        let (out, queue) = mpsc::channel(64);
        let (accepted, incoming) = mpsc::channel(16);
        let (closed_tx, closed) = watch::channel(false);
        let closed_tx = Arc::new(closed_tx);
        tokio::spawn(write_frames(write, queue, closed_tx.clone()));
        tokio::spawn(read_frames(read, accepted, out.clone(), closed_tx));
        Connection { incoming, out, closed }
    }

    /// The next stream the peer opens; `None` once the connection has ended.
    pub async fn accept(&mut self) -> Option<Stream> {
        tokio::select! {
            stream = self.incoming.recv() => stream,
            () = wait_closed(self.closed.clone()) => None,
        }
    }

    /// Returns once the connection has ended (the peer closed it, broke the protocol, or [`Connection::close`]).
    pub fn closed(&self) -> impl Future<Output = ()> + Send + 'static {
        wait_closed(self.closed.clone())
    }

    /// Writes what is queued, says GOAWAY, and closes the connection.
    pub async fn close(&self) {
        let _ = self.out.send(Out::Frame(Frame::GoAway { last_good: 0, status: 0 })).await;
        let _ = self.out.send(Out::Close).await;
    }
}

async fn wait_closed(mut closed: watch::Receiver<bool>) {
    let _ = closed.wait_for(|closed| *closed).await;
}

/// The writer task: frames from the queue to the peer until told to close, the queue ends, or a write fails.
async fn write_frames<W: AsyncWrite>(write: W, mut queue: mpsc::Receiver<Out>, closed: Arc<watch::Sender<bool>>) {
    tokio::pin!(write);
    let mut encoder = Encoder::default();
    let mut buffer = BytesMut::new();
    let mut ended = closed.subscribe();
    'frames: loop {
        let out = tokio::select! {
            out = queue.recv() => out,
            // The reader ended: what is queued still goes out, then the connection closes.
            _ = ended.wait_for(|c| *c) => queue.try_recv().ok(),
        };
        let Some(Out::Frame(frame)) = out else { break };
        let mut next = Some(frame);
        while let Some(frame) = next.take() {
            if encoder.encode(&frame, &mut buffer).is_err() {
                break 'frames;
            }
            if buffer.len() < 64 << 10
                && let Ok(Out::Frame(more)) = queue.try_recv()
            {
                next = Some(more);
            }
        }
        if write.write_all(&buffer).await.is_err() || write.flush().await.is_err() {
            break;
        }
        buffer.clear();
    }
    let _ = write.shutdown().await;
    closed.send_replace(true);
}

/// One open stream, as the reader task knows it.
struct Open {
    data: mpsc::UnboundedSender<Chunk>,
    reset: Arc<AtomicBool>,
}

/// The reader task's state.
struct ReadState {
    streams: std::collections::HashMap<u32, Open>,
    alive: Arc<AtomicUsize>,
    budget: Arc<Semaphore>,
    last_id: u32,
    gone_away: bool,
}

/// The reader task: frames from the peer until it closes the connection or breaks the protocol.
async fn read_frames<R: AsyncRead>(
    read: R,
    accepted: mpsc::Sender<Stream>,
    out: mpsc::Sender<Out>,
    closed: Arc<watch::Sender<bool>>,
) {
    tokio::pin!(read);
    let mut decoder = Decoder::default();
    let mut buffer = BytesMut::with_capacity(64 << 10);
    let mut state = ReadState {
        streams: Default::default(),
        alive: Arc::new(AtomicUsize::new(0)),
        budget: Arc::new(Semaphore::new(MAX_BUFFERED)),
        last_id: 0,
        gone_away: false,
    };
    let mut ended = closed.subscribe();
    let mut peer_closed = false;
    let outcome = loop {
        let frame = match decoder.decode(&mut buffer) {
            Ok(Some(frame)) => frame,
            Ok(None) => {
                let read = tokio::select! {
                    read = read.read_buf(&mut buffer) => read,
                    _ = ended.wait_for(|c| *c) => break Ok(()),
                };
                match read {
                    Ok(0) | Err(_) => {
                        peer_closed = true;
                        break Ok(());
                    }
                    Ok(_) => continue,
                }
            }
            Err(error) => break Err(SessionError::from(error)),
        };
        if let Err(error) = state.handle(frame, &accepted, &out).await {
            break Err(error);
        }
    };
    if let Err(error) = outcome {
        tracing::debug!(%error, "a SPDY peer broke the protocol; its connection ends");
        let goaway = Frame::GoAway { last_good: state.last_id, status: status::PROTOCOL_ERROR };
        let _ = out.send(Out::Frame(goaway)).await;
    }
    let _ = out.send(Out::Close).await;
    closed.send_replace(true);
    if !peer_closed {
        drop(buffer);
        drain(read).await;
    }
}

/// Reads `read` and drops what arrives, until the peer closes it or [`DRAIN_GRACE`] has passed.
async fn drain<R: AsyncRead>(read: std::pin::Pin<&mut R>) {
    let mut read = read;
    let mut scratch = vec![0u8; 16 << 10];
    let reading = async { while let Ok(1..) = read.read(&mut scratch).await {} };
    let _ = tokio::time::timeout(DRAIN_GRACE, reading).await;
}

impl ReadState {
    async fn handle(
        &mut self,
        frame: Frame,
        accepted: &mpsc::Sender<Stream>,
        out: &mpsc::Sender<Out>,
    ) -> Result<(), SessionError> {
        match frame {
            Frame::SynStream { stream, fin, headers, .. } => self.open(stream, fin, headers, accepted, out).await?,
            Frame::Data { stream, fin, data } => {
                if !data.is_empty()
                    && let Some(open) = self.streams.get(&stream)
                {
                    let size = u32::try_from(data.len()).map_err(|_| Error::TooLarge(data.len()))?;
                    // The budget is never closed; were it, the bytes would be dropped rather than held unbounded.
                    let Ok(budget) = self.budget.clone().acquire_many_owned(size).await else { return Ok(()) };
                    // A caller that dropped its reader drops what arrives (and the budget with it).
                    let _ = open.data.send(Chunk { data, _budget: budget });
                }
                if fin {
                    self.streams.remove(&stream);
                }
            }
            Frame::RstStream { stream, .. } => {
                if let Some(open) = self.streams.remove(&stream) {
                    open.reset.store(true, Ordering::Relaxed);
                }
            }
            Frame::Ping { id } if !id.is_multiple_of(2) => {
                let _ = out.send(Out::Frame(Frame::Ping { id })).await;
            }
            Frame::GoAway { .. } => self.gone_away = true,
            _ => {}
        }
        Ok(())
    }

    async fn open(
        &mut self,
        id: u32,
        fin: bool,
        headers: Headers,
        accepted: &mpsc::Sender<Stream>,
        out: &mpsc::Sender<Out>,
    ) -> Result<(), SessionError> {
        if id.is_multiple_of(2) || id <= self.last_id {
            return Err(SessionError::StreamId(id));
        }
        self.last_id = id;
        if self.gone_away {
            let _ = out.send(Out::Frame(Frame::RstStream { stream: id, status: status::REFUSED_STREAM })).await;
            return Ok(());
        }
        if self.streams.len() >= MAX_STREAMS {
            // Streams whose caller let go of the reader, and the peer has not finished.
            self.streams.retain(|_, open| !open.data.is_closed());
        }
        if self.alive.load(Ordering::Relaxed) >= MAX_STREAMS || self.streams.len() >= MAX_STREAMS {
            return Err(SessionError::TooManyStreams);
        }
        self.alive.fetch_add(1, Ordering::Relaxed);
        let alive = Arc::new(Alive(self.alive.clone()));
        let reply = Frame::SynReply { stream: id, fin: false, headers: Headers::default() };
        let _ = out.send(Out::Frame(reply)).await;
        let (data, receiver) = mpsc::unbounded_channel();
        let reset = Arc::new(AtomicBool::new(false));
        if !fin {
            self.streams.insert(id, Open { data, reset: reset.clone() });
        }
        let writer = Writer { id, out: out.clone(), reset, _alive: alive.clone() };
        let stream = Stream { id, headers, reader: Reader { data: receiver, _alive: alive }, writer };
        let _ = accepted.send(stream).await;
        Ok(())
    }
}

/// Why the reader ends a connection.
#[derive(Debug, thiserror::Error)]
enum SessionError {
    /// A frame that breaks the protocol or a bound.
    #[error(transparent)]
    Frame(#[from] Error),
    /// A SYN_STREAM whose identifier is even (a server's) or not above the last one.
    #[error("a stream opened with identifier {0}")]
    StreamId(u32),
    /// More streams alive than [`MAX_STREAMS`].
    #[error("more than {MAX_STREAMS} streams at once")]
    TooManyStreams,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer that breaks the protocol and goes on writing: the connection answers with a GOAWAY and then closes
    /// cleanly (the peer reads the GOAWAY, then the end of the stream), never with a reset — over a real socket,
    /// where closing with bytes unread would be one.
    #[tokio::test]
    async fn a_connection_that_says_goaway_reads_on_until_the_peer_has_it() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let served = tokio::spawn(async move {
            let (socket, _) = listener.accept().await.unwrap();
            let mut connection = Connection::start(socket);
            while connection.accept().await.is_some() {}
        });
        let client = tokio::net::TcpStream::connect(address).await.unwrap();
        let (mut read, mut write) = client.into_split();
        let mut encoder = Encoder::default();
        let mut bytes = BytesMut::new();
        // An even stream identifier is a server's: a protocol error.
        let opened = Frame::SynStream {
            stream: 2,
            associated: 0,
            priority: 0,
            fin: false,
            unidirectional: false,
            headers: Headers::default(),
        };
        encoder.encode(&opened, &mut bytes).unwrap();
        write.write_all(&bytes).await.unwrap();
        let writing = tokio::spawn(async move {
            for id in 0..50u32 {
                let mut ping = BytesMut::new();
                encoder.encode(&Frame::Ping { id: 2 * id + 1 }, &mut ping).unwrap();
                if write.write_all(&ping).await.is_err() {
                    return false;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            true
        });
        let (mut decoder, mut received, mut frames) = (Decoder::default(), BytesMut::new(), Vec::new());
        let end = loop {
            match read.read_buf(&mut received).await {
                Ok(0) => break Ok(()),
                Ok(_) => {}
                Err(error) => break Err(error.kind()),
            }
        };
        while let Ok(Some(frame)) = decoder.decode(&mut received) {
            frames.push(frame);
        }
        assert_eq!(end, Ok(()), "the connection was reset: {frames:?}");
        assert!(frames.iter().any(|f| matches!(f, Frame::GoAway { status: status::PROTOCOL_ERROR, .. })), "{frames:?}");
        assert!(writing.await.unwrap(), "the peer's writes after the GOAWAY were refused");
        served.await.unwrap();
    }
}
