//! Exec and attach over SPDY/3.1, the kubelet's side (`pkg/kubelet/cri/streaming/remotecommand/httpstream.go`,
//! 1.33), what client-go's SPDY executor speaks when WebSocket is off or fails: after the upgrade the client opens
//! one stream per channel, each named by its `streamType` header (`error`, then `stdin`, `stdout`, `stderr`, and
//! `resize` with a terminal from v3 on); the process's output goes out on its streams, each finished (FIN) when the
//! output ends, and the error stream carries how the process ended ([`crate::remotecommand::status_message`])
//! before it is finished too.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::mpsc;

use super::session::{Connection, Reader, Stream, Writer};
use crate::channel::Protocol;
use crate::remotecommand::{Ended, Options, Outcome, Process, TerminalSize, status_message};

/// The SPDY stream protocols of exec and attach, most preferred first (`X-Stream-Protocol-Version`).
pub const PROTOCOLS: &[&str] = &["v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io"];

/// How long the client has to open its streams (the kubelet's default `streamCreationTimeout`).
pub const STREAM_CREATION_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the client has, once told how the process ended, to close the connection itself.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The header naming a stream's channel.
pub const STREAM_TYPE: &str = "streamType";

/// The streams of a session, as the client opened them.
#[derive(Default)]
struct Streams {
    error: Option<Stream>,
    stdin: Option<Stream>,
    stdout: Option<Stream>,
    stderr: Option<Stream>,
    resize: Option<Stream>,
}

impl Streams {
    /// Whether every stream `options` need (with `version`'s resize stream) is there.
    fn complete(&self, options: &Options, version: u8) -> bool {
        self.error.is_some()
            && (!options.stdin || self.stdin.is_some())
            && (!options.stdout || self.stdout.is_some())
            && (!options.stderr || options.tty || self.stderr.is_some())
            && (!(options.tty && version >= 3) || self.resize.is_some())
    }

    /// Waits for the client's streams; `None` when it closes first, or opens a stream of no known type.
    async fn wait(connection: &mut Connection, options: &Options, version: u8) -> Option<Streams> {
        let mut streams = Streams::default();
        while !streams.complete(options, version) {
            let stream = connection.accept().await?;
            let slot = match stream.headers.get(STREAM_TYPE) {
                Some("error") => &mut streams.error,
                Some("stdin") => &mut streams.stdin,
                Some("stdout") => &mut streams.stdout,
                Some("stderr") => &mut streams.stderr,
                Some("resize") => &mut streams.resize,
                other => {
                    tracing::debug!(?other, "an exec's client opened a stream of no known type");
                    stream.writer.reset().await;
                    return None;
                }
            };
            *slot = Some(stream);
        }
        Some(streams)
    }
}

/// Runs a session on an upgraded connection `io` for the negotiated `protocol` (one of [`PROTOCOLS`], or empty for
/// a client that named none): the client's streams to and from `process` until `ended` resolves and the output has
/// been sent, or until the client goes away.
pub async fn serve<S>(
    io: S,
    protocol: &'static str,
    options: Options,
    process: Process,
    ended: impl Future<Output = Outcome>,
) -> Ended
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let protocol = Protocol::negotiate([protocol].into_iter().filter(|p| !p.is_empty()), PROTOCOLS)
        .unwrap_or(Protocol { name: "", version: 1, base64: false });
    let mut connection = Connection::start(io);
    let waited =
        tokio::time::timeout(STREAM_CREATION_TIMEOUT, Streams::wait(&mut connection, &options, protocol.version));
    let Ok(Some(streams)) = waited.await else {
        connection.close().await;
        return Ended::ClientGone;
    };
    let Process { stdin, stdout, stderr, resize } = process;
    if let (Some(writer), Some(stream)) = (stdin, streams.stdin) {
        tokio::spawn(copy_stdin(stream.reader, writer));
    }
    if let (Some(sizes), Some(stream)) = (resize, streams.resize) {
        tokio::spawn(read_sizes(stream.reader, sizes));
    }
    let writers = |stream: Option<Stream>| stream.map(|s| s.writer);
    let (out, err) = (writers(streams.stdout), writers(streams.stderr));
    // The output is sent while the process runs (an interactive shell's prompt, an attached container's lines),
    // and all of it before how the process ended.
    let pumps = futures_util::future::join(pump(stdout, out), pump(stderr, err));
    let finished = async { futures_util::future::join(ended, pumps).await.0 };
    let gone = connection.closed();
    tokio::pin!(finished, gone);
    let outcome = tokio::select! {
        outcome = &mut finished => outcome,
        () = &mut gone => return Ended::ClientGone,
    };
    if let Some(error) = streams.error.map(|s| s.writer) {
        if let Some(message) = status_message(&protocol, &outcome) {
            let _ = error.write(&message).await;
        }
        let _ = error.finish().await;
    }
    // The client reads to the end of every stream, then closes the connection; one that does not is closed on.
    let _ = tokio::time::timeout(CLOSE_GRACE, connection.closed()).await;
    connection.close().await;
    Ended::Told(outcome)
}

/// Sends what `source` yields on `stream` until it ends, then finishes the stream. Output no stream takes is read
/// and dropped, so that the process never blocks on it.
async fn pump(source: Option<Pin<Box<dyn AsyncRead + Send>>>, stream: Option<Writer>) {
    let mut buffer = vec![0u8; super::session::MAX_WRITE];
    if let Some(mut source) = source {
        let mut stream = stream.clone();
        while let Ok(n @ 1..) = source.read(&mut buffer).await {
            if let Some(writer) = &stream
                && writer.write(&buffer[..n]).await.is_err()
            {
                stream = None;
            }
        }
    }
    if let Some(stream) = stream {
        let _ = stream.finish().await;
    }
}

/// The client's standard input to the process, closed when the client finishes the stream.
async fn copy_stdin(mut reader: Reader, mut stdin: Pin<Box<dyn AsyncWrite + Send>>) {
    while let Some(data) = reader.read().await {
        if stdin.write_all(&data).await.is_err() || stdin.flush().await.is_err() {
            // The process closed its input: what the client sends after is dropped.
            return;
        }
    }
    let _ = stdin.shutdown().await;
}

/// Terminal sizes from the resize stream: JSON objects one after another (Go's `json.Encoder`, one a line).
async fn read_sizes(mut reader: Reader, sizes: mpsc::Sender<TerminalSize>) {
    let mut pending = Vec::new();
    while let Some(data) = reader.read().await {
        pending.extend_from_slice(&data);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            if let Some(size) = TerminalSize::parse(&pending[..end]) {
                let _ = sizes.try_send(size);
            }
            pending.drain(..=end);
        }
        // A size is a few dozen bytes; more without a line's end is no size.
        if pending.len() > 4096 {
            pending.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};

    use super::*;
    use crate::spdy::{Decoder, Encoder, Frame, Headers};

    async fn send(io: &mut tokio::io::DuplexStream, encoder: &mut Encoder, frame: Frame) {
        let mut bytes = BytesMut::new();
        encoder.encode(&frame, &mut bytes).unwrap();
        io.write_all(&bytes).await.unwrap();
    }

    fn open(stream: u32, kind: &str) -> Frame {
        let headers = Headers(vec![(STREAM_TYPE.to_ascii_lowercase(), kind.to_string())]);
        Frame::SynStream { stream, associated: 0, priority: 0, fin: false, unidirectional: false, headers }
    }

    /// client-go's SPDY executor's side, by hand: error, stdin and stdout streams; stdin echoed by the "process",
    /// which exits 3 once its input ends.
    #[tokio::test]
    async fn a_session_reads_its_streams_by_type_and_ends_with_the_exit_status() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let (process_stdout, process_stdin) = tokio::io::simplex(1 << 16);
        let process = Process {
            stdin: Some(Box::pin(process_stdin)),
            stdout: Some(Box::pin(process_stdout)),
            stderr: None,
            resize: None,
        };
        let options = Options { stdin: true, stdout: true, ..Options::default() };
        // The process ends at once; its output is still sent in full before the status.
        let session = tokio::spawn(serve(server, "v4.channel.k8s.io", options, process, async { Outcome::Exited(3) }));
        let (mut encoder, mut decoder) = (Encoder::default(), Decoder::default());
        send(&mut client, &mut encoder, open(1, "error")).await;
        send(&mut client, &mut encoder, open(3, "stdin")).await;
        send(&mut client, &mut encoder, open(5, "stdout")).await;
        send(&mut client, &mut encoder, Frame::Data { stream: 3, fin: true, data: Bytes::from_static(b"hi") }).await;
        let (mut buffer, mut stdout, mut error, mut finished) = (BytesMut::new(), Vec::new(), Vec::new(), Vec::new());
        while finished.len() < 2 {
            let frame = loop {
                if let Some(frame) = decoder.decode(&mut buffer).unwrap() {
                    break frame;
                }
                assert!(client.read_buf(&mut buffer).await.unwrap() > 0, "closed early");
            };
            if let Frame::Data { stream, fin, data } = frame {
                if stream == 5 {
                    stdout.extend_from_slice(&data)
                } else {
                    error.extend_from_slice(&data)
                }
                if fin {
                    finished.push(stream);
                }
            }
        }
        assert_eq!(stdout, b"hi");
        let status: serde_json::Value = serde_json::from_slice(&error).unwrap();
        assert_eq!(
            (status["reason"].as_str(), status["details"]["causes"][0]["message"].as_str()),
            (Some("NonZeroExitCode"), Some("3"))
        );
        drop(client);
        assert_eq!(session.await.unwrap(), Ended::Told(Outcome::Exited(3)));
    }

    /// An interactive shell's prompt (an attached container's lines) reaches the client while the process runs,
    /// not only once it has ended.
    #[tokio::test]
    async fn output_is_sent_while_the_process_runs() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let (process_stdout, mut shell) = tokio::io::simplex(1 << 16);
        let process = Process { stdin: None, stdout: Some(Box::pin(process_stdout)), stderr: None, resize: None };
        let options = Options { stdout: true, ..Options::default() };
        let session = tokio::spawn(serve(server, "v4.channel.k8s.io", options, process, std::future::pending()));
        let (mut encoder, mut decoder) = (Encoder::default(), Decoder::default());
        send(&mut client, &mut encoder, open(1, "error")).await;
        send(&mut client, &mut encoder, open(3, "stdout")).await;
        shell.write_all(b"/ # ").await.unwrap();
        let mut buffer = BytesMut::new();
        let prompt = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                while let Some(frame) = decoder.decode(&mut buffer).unwrap() {
                    if let Frame::Data { stream: 3, data, .. } = frame {
                        return data;
                    }
                }
                assert!(client.read_buf(&mut buffer).await.unwrap() > 0, "closed early");
            }
        });
        assert_eq!(prompt.await.expect("no output while the process runs"), Bytes::from_static(b"/ # "));
        drop(client);
        assert_eq!(session.await.unwrap(), Ended::ClientGone);
    }

    #[tokio::test]
    async fn a_stream_of_no_known_type_ends_the_session() {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let options = Options { stdout: true, ..Options::default() };
        let session =
            tokio::spawn(serve(server, "v4.channel.k8s.io", options, Process::default(), std::future::pending()));
        send(&mut client, &mut Encoder::default(), open(1, "bogus")).await;
        assert_eq!(session.await.unwrap(), Ended::ClientGone);
    }
}
