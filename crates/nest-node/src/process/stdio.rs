//! A container's own standard streams, held by the node while it runs, for its log and for `kubectl attach`.
//!
//! As a CRI runtime does (containerd's `ContainerIO`), the node starts every container with its standard streams
//! connected to itself:
//!
//! - **Output** (stdout and stderr, or with `tty: true` the terminal's one stream) is read by the node, written to
//!   the container's log line by line, and offered at the same time to whoever is attached
//!   ([`ContainerStdio::attach`]): each chunk goes to a bounded broadcast, so that an attached client that does not read loses output rather than
//!   stalling the container or growing the node's memory.
//! - **Input** is `/dev/null` unless the container has `stdin: true`; then it is a pipe (or the terminal) the node
//!   keeps open with nothing written until a client attaches with stdin. With `stdinOnce: true` it is closed when
//!   the first attached client that sent input goes (the container reads end of file), as upstream's `StdinOnce`.
//! - **A terminal** (`tty: true`) is a pseudo-terminal whose leading side the node holds; the OCI runtime is started
//!   with the follower as its standard streams and its controlling terminal, and copies between it and the
//!   container's own terminal (as for `runc exec --tty`). A client's resize messages set the leader's size, which the
//!   runtime passes on to the container's terminal.

use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use nest_streams::remotecommand::{Options, Process, TerminalSize};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _, ReadBuf};
use tokio::sync::{broadcast, mpsc, watch};

/// Chunks of output kept for attached clients that fall behind: beyond this they lose output.
const BACKLOG: usize = 256;
/// The buffer between an attached client's queue and its session.
const SESSION_BUFFER: usize = 64 << 10;

/// What the container's spec asks of its standard streams (`stdin`, `stdinOnce`, `tty`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wants {
    pub stdin: bool,
    pub stdin_once: bool,
    pub tty: bool,
}

impl Wants {
    /// What `container` asks for.
    pub fn of(container: &k8s_openapi::api::core::v1::Container) -> Wants {
        Wants {
            stdin: container.stdin.unwrap_or(false),
            stdin_once: container.stdin_once.unwrap_or(false),
            tty: container.tty.unwrap_or(false),
        }
    }
}

/// Which of the container's streams a chunk of output came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

type Input = Pin<Box<dyn AsyncWrite + Send>>;

/// One run of a container's standard streams, while it runs.
pub struct ContainerStdio {
    wants: Wants,
    /// Where output goes; taken (closed) once the run's output has all been read.
    output: Mutex<Option<broadcast::Sender<(Stream, Bytes)>>>,
    /// The container's input, while it is open.
    input: Arc<tokio::sync::Mutex<Option<Input>>>,
    /// The terminal's leading side, for resizes.
    terminal: Option<OwnedFd>,
    /// Set once the run has ended.
    ended: watch::Sender<bool>,
}

/// A started run: the OCI runtime's process, its standard streams, and the readers of its output (to be given to
/// the log).
pub struct Started {
    pub child: tokio::process::Child,
    pub stdio: Arc<ContainerStdio>,
    /// The output streams, each passing what is read on to attached clients.
    pub outputs: Vec<(Stream, Tee)>,
}

/// Starts `command` (the runtime's `run`) with the standard streams `wants` asks for. Without a terminal the
/// command gets a process group of its own; with one, a session of its own whose controlling terminal it is.
pub fn start(mut command: tokio::process::Command, wants: Wants) -> std::io::Result<Started> {
    let (sender, _) = broadcast::channel(BACKLOG);
    let (ended, _) = watch::channel(false);
    if wants.tty {
        let (leader, follower) = open_terminal()?;
        command.stdin(follower.try_clone()?).stdout(follower.try_clone()?).stderr(follower.try_clone()?);
        // SAFETY: setsid(2) and ioctl(2) are async-signal-safe and touch no memory of the parent.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = command.spawn()?;
        drop(follower);
        let reader = tokio::fs::File::from_std(std::fs::File::from(leader.try_clone()?));
        // Without `stdin: true` nothing is ever written to the terminal: no input is taken.
        let input: Option<Input> = if wants.stdin {
            Some(Box::pin(tokio::fs::File::from_std(std::fs::File::from(leader.try_clone()?))))
        } else {
            None
        };
        let stdio = ContainerStdio {
            wants,
            output: Mutex::new(Some(sender.clone())),
            input: Arc::new(tokio::sync::Mutex::new(input)),
            terminal: Some(leader),
            ended,
        };
        let outputs = vec![(Stream::Stdout, Tee::new(Box::pin(reader), Stream::Stdout, sender))];
        return Ok(Started { child, stdio: Arc::new(stdio), outputs });
    }
    let stdin = if wants.stdin { Stdio::piped() } else { Stdio::null() };
    command.stdin(stdin).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
    let mut child = command.spawn()?;
    let input: Option<Input> = child.stdin.take().map(|w| Box::pin(w) as Input);
    let mut outputs = Vec::new();
    if let Some(out) = child.stdout.take() {
        outputs.push((Stream::Stdout, Tee::new(Box::pin(out), Stream::Stdout, sender.clone())));
    }
    if let Some(err) = child.stderr.take() {
        outputs.push((Stream::Stderr, Tee::new(Box::pin(err), Stream::Stderr, sender.clone())));
    }
    let stdio = ContainerStdio {
        wants,
        output: Mutex::new(Some(sender)),
        input: Arc::new(tokio::sync::Mutex::new(input)),
        terminal: None,
        ended,
    };
    Ok(Started { child, stdio: Arc::new(stdio), outputs })
}

/// Opens a pseudo-terminal: its leading and following sides.
fn open_terminal() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (mut leader, mut follower) = (-1, -1);
    // SAFETY: openpty(3) writes two descriptors into the integers it is given; the other arguments may be null.
    let opened =
        unsafe { libc::openpty(&mut leader, &mut follower, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) };
    if opened != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just opened and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(leader), OwnedFd::from_raw_fd(follower)) })
}

/// Why an attach cannot be had.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The client asked to send input to a container without `stdin: true`.
    NoStdin,
}

impl ContainerStdio {
    /// What the container's spec asked of its streams.
    pub fn wants(&self) -> Wants {
        self.wants
    }

    /// Marks the run ended: attached sessions end once its last output is sent; no one attaches any more.
    pub fn finish(&self) {
        self.output.lock().unwrap_or_else(|p| p.into_inner()).take();
        self.ended.send_replace(true);
    }

    /// Waits until the run has ended.
    pub async fn ended(&self) {
        let mut ended = self.ended.subscribe();
        let _ = ended.wait_for(|e| *e).await;
    }

    /// A session's ends of the container's streams, as `options` ask: output from now on (earlier output is in the
    /// log), input into the container's, resizes of its terminal. Spawns the tasks that carry them.
    pub fn attach(self: &Arc<Self>, options: Options) -> Result<Process, Refusal> {
        if options.stdin && !self.wants.stdin {
            return Err(Refusal::NoStdin);
        }
        let subscribe = || self.output.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(|s| s.subscribe());
        let mut process = Process::default();
        if options.stdout {
            let tty = self.wants.tty;
            process.stdout = Some(Box::pin(forward(subscribe(), move |stream| tty || stream == Stream::Stdout)));
        }
        if options.stderr && !self.wants.tty {
            process.stderr = Some(Box::pin(forward(subscribe(), |stream| stream == Stream::Stderr)));
        }
        if options.stdin {
            let (client, mut from_client) = tokio::io::duplex(SESSION_BUFFER);
            let (input, once) = (self.input.clone(), self.wants.stdin_once);
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 32 << 10];
                loop {
                    let n = tokio::io::AsyncReadExt::read(&mut from_client, &mut buffer).await.unwrap_or(0);
                    let mut input = input.lock().await;
                    let Some(writer) = input.as_mut() else { return };
                    if n == 0 {
                        if once {
                            // `stdinOnce`: the first session's end of input is the container's.
                            let _ = writer.shutdown().await;
                            input.take();
                        }
                        return;
                    }
                    if writer.write_all(&buffer[..n]).await.and(writer.flush().await).is_err() {
                        input.take();
                        return;
                    }
                }
            });
            process.stdin = Some(Box::pin(client));
        }
        // A terminal that cannot be shared for resizes keeps its size.
        if let Some(terminal) = self.terminal.as_ref().and_then(|t| t.try_clone().ok()) {
            let (sizes, mut asked) = mpsc::channel::<TerminalSize>(4);
            tokio::spawn(async move {
                while let Some(size) = asked.recv().await {
                    resize(&terminal, size);
                }
            });
            process.resize = Some(sizes);
        }
        Ok(process)
    }
}

/// A reader of the chunks a broadcast carries that `wanted` picks, ending when the broadcast closes: those that come
/// while the session's buffer is full are lost to it.
fn forward(
    receiver: Option<broadcast::Receiver<(Stream, Bytes)>>,
    wanted: impl Fn(Stream) -> bool + Send + 'static,
) -> tokio::io::DuplexStream {
    let (session, mut to_session) = tokio::io::duplex(SESSION_BUFFER);
    tokio::spawn(async move {
        let Some(mut receiver) = receiver else { return };
        loop {
            match receiver.recv().await {
                Ok((stream, chunk)) if wanted(stream) => {
                    if to_session.write_all(&chunk).await.is_err() {
                        return;
                    }
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    });
    session
}

/// Sets the size of the terminal whose leading side is `leader`.
fn resize(leader: &OwnedFd, size: TerminalSize) {
    let size = libc::winsize { ws_row: size.height, ws_col: size.width, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCSWINSZ reads the winsize it is given and nothing else.
    unsafe { libc::ioctl(leader.as_raw_fd(), libc::TIOCSWINSZ, &size) };
}

impl std::fmt::Debug for ContainerStdio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContainerStdio").field("wants", &self.wants).finish_non_exhaustive()
    }
}

/// A reader that offers what it reads to attached clients as it passes it on.
pub struct Tee {
    inner: Pin<Box<dyn AsyncRead + Send>>,
    stream: Stream,
    to: broadcast::Sender<(Stream, Bytes)>,
}

impl Tee {
    fn new(inner: Pin<Box<dyn AsyncRead + Send>>, stream: Stream, to: broadcast::Sender<(Stream, Bytes)>) -> Tee {
        Tee { inner, stream, to }
    }
}

impl AsyncRead for Tee {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = self.inner.as_mut().poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled
            && buf.filled().len() > before
            && self.to.receiver_count() > 0
        {
            // No receiver is no error: no one is attached.
            let _ = self.to.send((self.stream, Bytes::copy_from_slice(&buf.filled()[before..])));
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt as _;

    async fn read_all(reader: Option<Pin<Box<dyn AsyncRead + Send>>>) -> Vec<u8> {
        let mut out = Vec::new();
        reader.expect("a reader").read_to_end(&mut out).await.unwrap();
        out
    }

    /// `cat` with `stdin: true`: what an attached client sends comes back on its stdout, and the log's reader sees
    /// the same; asking for stdin of a container without it is refused.
    #[tokio::test]
    async fn attached_clients_get_output_and_give_input() {
        let wants = Wants { stdin: true, stdin_once: true, tty: false };
        let Started { mut child, stdio, outputs } = start(tokio::process::Command::new("cat"), wants).unwrap();
        let mut log = Vec::new();
        for (_, tee) in outputs {
            log.push(tokio::spawn(async move {
                let mut tee = tee;
                let mut text = Vec::new();
                let _ = tee.read_to_end(&mut text).await;
                text
            }));
        }
        let options = Options { stdin: true, stdout: true, stderr: true, tty: false };
        let mut session = stdio.attach(options).unwrap();
        let mut input = session.stdin.take().unwrap();
        input.write_all(b"hello\n").await.unwrap();
        input.shutdown().await.unwrap();
        drop(input);
        child.wait().await.unwrap();
        let logged = log.remove(0).await.unwrap();
        assert_eq!(logged, b"hello\n");
        stdio.finish();
        assert_eq!(read_all(session.stdout.take()).await, b"hello\n");
        assert_eq!(read_all(session.stderr.take()).await, b"");

        let none = Wants::default();
        let Started { mut child, stdio, .. } = start(tokio::process::Command::new("true"), none).unwrap();
        assert_eq!(stdio.attach(options).err(), Some(Refusal::NoStdin));
        child.wait().await.unwrap();
    }
}
