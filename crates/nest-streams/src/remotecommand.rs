//! Exec and attach over a channel-protocol WebSocket, the kubelet's side (`pkg/kubelet/cri/streaming/remotecommand`,
//! 1.33): stdin (0) goes to the process, its stdout (1) and stderr (2) come back, resize (4) messages resize its
//! terminal, and when it ends the error channel (3) says how — a `Status` from v4 on (`Success`, or `Failure` with
//! reason `NonZeroExitCode` and an `ExitCode` cause, which kubectl turns into its own exit code), plain text before.
//!
//! The caller starts the process and hands its pipes over as a [`Process`]; [`serve`] pumps bytes until the process
//! has ended and its output is sent, or the client has gone.

use std::future::Future;
use std::pin::Pin;

use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use crate::channel::{Frame, Protocol};

/// The channels of exec and attach.
pub mod channels {
    /// The process's standard input.
    pub const STDIN: u8 = 0;
    /// Its standard output.
    pub const STDOUT: u8 = 1;
    /// Its standard error.
    pub const STDERR: u8 = 2;
    /// How it ended.
    pub const ERROR: u8 = 3;
    /// Terminal size changes (v4 and later), as `{"Width": w, "Height": h}`.
    pub const RESIZE: u8 = 4;
}

/// How much of the process's output is read at once: one message's worth.
const CHUNK: usize = 32 << 10;

/// What the client asked to be connected to (`stdin`, `stdout`, `stderr`, `tty` of the request).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    /// Whether the client sends standard input.
    pub stdin: bool,
    /// Whether it wants standard output.
    pub stdout: bool,
    /// Whether it wants standard error (never with a terminal, which merges it into standard output).
    pub stderr: bool,
    /// Whether the process gets a terminal.
    pub tty: bool,
}

/// A terminal's size, as a resize message gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TerminalSize {
    /// Columns.
    pub width: u16,
    /// Rows.
    pub height: u16,
}

impl TerminalSize {
    /// The size a resize message (`{"Width":…,"Height":…}`) gives; `None` for anything else, numbers out of range
    /// included.
    pub fn parse(data: &[u8]) -> Option<TerminalSize> {
        let value: serde_json::Value = serde_json::from_slice(data).ok()?;
        let field = |name: &str| value.get(name)?.as_u64().and_then(|n| u16::try_from(n).ok());
        Some(TerminalSize { width: field("Width")?, height: field("Height")? })
    }
}

/// The process a session connects to: the ends of its pipes (or of its terminal) the caller holds, each present
/// when the client asked for it.
#[derive(Default)]
pub struct Process {
    /// Where the client's standard input goes; closed (shut down) when the client closes it.
    pub stdin: Option<Pin<Box<dyn AsyncWrite + Send>>>,
    /// The process's standard output (with a terminal: the terminal's output).
    pub stdout: Option<Pin<Box<dyn AsyncRead + Send>>>,
    /// The process's standard error.
    pub stderr: Option<Pin<Box<dyn AsyncRead + Send>>>,
    /// Where terminal sizes go.
    pub resize: Option<mpsc::Sender<TerminalSize>>,
}

/// How a process ended, for the error channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It exited with this code (a process killed by a signal: 128 plus the signal, as a shell reports it).
    Exited(i32),
    /// It could not be run, or could not be waited for.
    Failed(String),
}

/// What a session ended with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ended {
    /// The process ended and the client was told how.
    Told(Outcome),
    /// The client went away (or broke the protocol) first; the process may still run, for the caller to stop.
    ClientGone,
}

/// The error channel's message for `outcome`: for v4 and later a `Status` (`metav1.Status` encoded as the kubelet
/// encodes it, without kind and apiVersion); before, text on failure and nothing on success.
pub fn status_message(protocol: &Protocol, outcome: &Outcome) -> Option<Vec<u8>> {
    let failure = match outcome {
        Outcome::Exited(0) if protocol.status_errors() => {
            return Some(br#"{"metadata":{},"status":"Success"}"#.to_vec());
        }
        Outcome::Exited(0) => return None,
        Outcome::Exited(code) => {
            let message = format!("command terminated with non-zero exit code: exit status {code}");
            if !protocol.status_errors() {
                return Some(message.into_bytes());
            }
            json!({"metadata": {}, "status": "Failure", "message": message, "reason": "NonZeroExitCode",
                   "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]}})
        }
        Outcome::Failed(why) => {
            if !protocol.status_errors() {
                return Some(why.clone().into_bytes());
            }
            json!({"metadata": {}, "status": "Failure", "message": format!("Internal error occurred: {why}"),
                   "reason": "InternalError", "details": {"causes": [{"message": why}]}, "code": 500})
        }
    };
    Some(failure.to_string().into_bytes())
}

/// Runs a session: the client's channels to and from `process` until `ended` resolves and the process's output has
/// been sent (then the error channel says how it ended and the WebSocket closes), or until the client goes away.
pub async fn serve<S>(
    ws: WebSocketStream<S>,
    protocol: Protocol,
    options: Options,
    process: Process,
    ended: impl Future<Output = Outcome>,
) -> Ended
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sink, mut incoming) = ws.split();
    // Everything sent goes through one bounded queue to one writer: a client that does not read stalls the
    // process's output pipes, never this node's memory.
    let (out, mut queue) = mpsc::channel::<Message>(16);
    let writer = tokio::spawn(async move {
        while let Some(message) = queue.recv().await {
            if sink.send(message).await.is_err() {
                return None;
            }
        }
        Some(sink)
    });
    // The kubelet's readiness signal: an empty message on the first channel the client reads.
    let first = if options.stdout {
        channels::STDOUT
    } else if options.stderr {
        channels::STDERR
    } else {
        channels::ERROR
    };
    let _ = out.send(protocol.encode(first, &[])).await;
    let Process { stdin, stdout, stderr, resize } = process;
    let pumps = futures_util::future::join(
        pump(stdout, channels::STDOUT, protocol, out.clone()),
        pump(stderr, channels::STDERR, protocol, out.clone()),
    );
    // The output is sent while the process runs (an interactive shell's prompt, an attached container's lines),
    // and all of it before how the process ended.
    let finished = async { futures_util::future::join(ended, pumps).await.0 };
    let from_client = read_client(&mut incoming, protocol, stdin, resize);
    tokio::pin!(finished, from_client);
    let outcome = tokio::select! {
        outcome = &mut finished => outcome,
        () = &mut from_client => {
            // The client is gone or broke the protocol: nothing more is sent to it.
            writer.abort();
            return Ended::ClientGone;
        }
    };
    if let Some(message) = status_message(&protocol, &outcome) {
        let _ = out.send(protocol.encode(channels::ERROR, &message)).await;
    }
    drop(out);
    if let Ok(Some(mut sink)) = writer.await {
        // A normal closure, with its code: client-go takes a close without one (1005) for an error.
        let normal = CloseFrame { code: CloseCode::Normal, reason: "".into() };
        let _ = sink.send(Message::Close(Some(normal))).await;
        let _ = sink.close().await;
    }
    Ended::Told(outcome)
}

/// Sends what `source` yields on `channel` until it ends.
async fn pump(
    source: Option<Pin<Box<dyn AsyncRead + Send>>>,
    channel: u8,
    protocol: Protocol,
    out: mpsc::Sender<Message>,
) {
    let Some(mut source) = source else { return };
    let mut buffer = vec![0u8; CHUNK];
    loop {
        match source.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if out.send(protocol.encode(channel, &buffer[..n])).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Reads the client's messages until it goes away: stdin to the process (closed when the client closes it), sizes
/// to the terminal. Returns when the connection ends or a message breaks the protocol.
async fn read_client<S>(
    incoming: &mut futures_util::stream::SplitStream<WebSocketStream<S>>,
    protocol: Protocol,
    mut stdin: Option<Pin<Box<dyn AsyncWrite + Send>>>,
    resize: Option<mpsc::Sender<TerminalSize>>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    while let Some(Ok(message)) = incoming.next().await {
        match protocol.decode(message) {
            Ok(None) => {}
            Ok(Some(Frame::Data { channel: channels::STDIN, data })) => {
                if let Some(writer) = stdin.as_mut()
                    && (writer.write_all(&data).await.is_err() || writer.flush().await.is_err())
                {
                    // The process closed its input: what the client sends after is dropped, as upstream's pipe does.
                    stdin = None;
                }
            }
            Ok(Some(Frame::Data { channel: channels::RESIZE, data })) => {
                if let (Some(resize), Some(size)) = (&resize, TerminalSize::parse(&data)) {
                    let _ = resize.try_send(size);
                }
            }
            // Other channels are the server's to write; upstream drops what a client sends on them.
            Ok(Some(Frame::Data { .. })) => {}
            Ok(Some(Frame::Close(channel))) => {
                if channel == channels::STDIN
                    && let Some(mut writer) = stdin.take()
                {
                    let _ = writer.shutdown().await;
                }
            }
            Err(error) => {
                tracing::debug!(%error, "a remote command's client");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::channel::REMOTE_COMMAND;

    fn protocol(name: &str) -> Protocol {
        Protocol::negotiate([name], REMOTE_COMMAND).unwrap()
    }

    #[test]
    fn exit_codes_are_upstreams_status_from_v4_on() {
        let v5 = protocol("v5.channel.k8s.io");
        assert_eq!(status_message(&v5, &Outcome::Exited(0)).unwrap(), br#"{"metadata":{},"status":"Success"}"#);
        let failed: serde_json::Value =
            serde_json::from_slice(&status_message(&v5, &Outcome::Exited(3)).unwrap()).unwrap();
        assert_eq!(failed["status"], "Failure");
        assert_eq!(failed["reason"], "NonZeroExitCode");
        assert_eq!(failed["details"]["causes"][0], json!({"reason": "ExitCode", "message": "3"}));
        let v2 = protocol("v2.channel.k8s.io");
        assert_eq!(status_message(&v2, &Outcome::Exited(0)), None);
        assert!(
            String::from_utf8(status_message(&v2, &Outcome::Exited(3)).unwrap()).unwrap().contains("exit status 3")
        );
    }

    #[test]
    fn sizes_out_of_range_are_no_sizes() {
        assert_eq!(TerminalSize::parse(br#"{"Width":80,"Height":24}"#), Some(TerminalSize { width: 80, height: 24 }));
        assert_eq!(TerminalSize::parse(br#"{"Width":70000,"Height":24}"#), None);
        assert_eq!(TerminalSize::parse(br#"{"Width":-1,"Height":24}"#), None);
        assert_eq!(TerminalSize::parse(b"garbage"), None);
    }

    /// A session over a real WebSocket on loopback: `cat` as the process (a duplex pipe standing in for it).
    #[tokio::test]
    async fn a_session_echoes_stdin_and_reports_the_exit_code() {
        use tokio_tungstenite::tungstenite::protocol::Role;
        let (client_io, server_io) = tokio::io::duplex(1 << 16);
        let v5 = protocol("v5.channel.k8s.io");
        // The "process": what goes to its stdin comes back on its stdout, and it exits 7 once stdin closes.
        let (process_stdout, process_stdin) = tokio::io::simplex(1 << 16);
        let (closed_tx, closed_rx) = tokio::sync::oneshot::channel::<()>();
        struct Closing<W> {
            inner: W,
            closed: Option<tokio::sync::oneshot::Sender<()>>,
        }
        impl<W: AsyncWrite + Unpin> AsyncWrite for Closing<W> {
            fn poll_write(
                mut self: Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                b: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                Pin::new(&mut self.inner).poll_write(cx, b)
            }
            fn poll_flush(
                mut self: Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                Pin::new(&mut self.inner).poll_flush(cx)
            }
            fn poll_shutdown(
                mut self: Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                if let Some(closed) = self.closed.take() {
                    let _ = closed.send(());
                }
                Pin::new(&mut self.inner).poll_shutdown(cx)
            }
        }
        let process = Process {
            stdin: Some(Box::pin(Closing { inner: process_stdin, closed: Some(closed_tx) })),
            stdout: Some(Box::pin(process_stdout)),
            stderr: None,
            resize: None,
        };
        let options = Options { stdin: true, stdout: true, ..Options::default() };
        let server = tokio::spawn(async move {
            let ws = crate::handshake::websocket(server_io).await;
            serve(ws, v5, options, process, async move {
                let _ = closed_rx.await;
                Outcome::Exited(7)
            })
            .await
        });
        let mut client = WebSocketStream::from_raw_socket(client_io, Role::Client, None).await;
        client.send(Message::binary(b"\x00hello".to_vec())).await.unwrap();
        client.send(Message::binary(vec![255, 0])).await.unwrap();
        let (mut stdout, mut error, mut closed) = (Vec::new(), Vec::new(), None);
        while let Some(Ok(message)) = client.next().await {
            if let Message::Close(frame) = &message {
                closed = frame.as_ref().map(|f| f.code);
            }
            match v5.decode(message) {
                Ok(Some(Frame::Data { channel: 1, data })) => stdout.extend_from_slice(&data),
                Ok(Some(Frame::Data { channel: 3, data })) => error.extend_from_slice(&data),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        assert_eq!(stdout, b"hello");
        assert_eq!(closed, Some(CloseCode::Normal), "client-go needs the normal closure's code");
        let status: serde_json::Value = serde_json::from_slice(&error).unwrap();
        assert_eq!(status["details"]["causes"][0]["message"], "7");
        assert_eq!(server.await.unwrap(), Ended::Told(Outcome::Exited(7)));
    }

    #[tokio::test]
    async fn a_client_that_breaks_the_protocol_ends_the_session() {
        use tokio_tungstenite::tungstenite::protocol::Role;
        let (client_io, server_io) = tokio::io::duplex(1 << 16);
        let v5 = protocol("v5.channel.k8s.io");
        let server = tokio::spawn(async move {
            let ws = crate::handshake::websocket(server_io).await;
            let options = Options { stdout: true, ..Options::default() };
            serve(ws, v5, options, Process::default(), std::future::pending()).await
        });
        let mut client = WebSocketStream::from_raw_socket(client_io, Role::Client, None).await;
        // A close signal of three bytes.
        client.send(Message::binary(vec![255, 0, 0])).await.unwrap();
        assert_eq!(server.await.unwrap(), Ended::ClientGone);
        // And a message over the limit.
        let (client_io, server_io) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(async move {
            let ws = crate::handshake::websocket(server_io).await;
            serve(ws, v5, Options::default(), Process::default(), std::future::pending()).await
        });
        let mut client = WebSocketStream::from_raw_socket(client_io, Role::Client, None).await;
        let _ = client.send(Message::binary(vec![0u8; crate::handshake::MAX_MESSAGE + 2])).await;
        assert_eq!(server.await.unwrap(), Ended::ClientGone);
    }
}
