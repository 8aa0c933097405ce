//! The kubelet API's streams: `/exec/<namespace>/<pod>/<container>?command=…&input=1&output=1&error=1&tty=1` (the
//! query the API server writes, as kube-apiserver's `ExecLocation` writes it) runs the command inside the
//! container's sandbox with the OCI runtime's `exec` — the container's namespaces, user, environment, capabilities
//! and cgroup — and connects it to the client over a channel-protocol WebSocket, or over SPDY/3.1 for a client that
//! falls back to it ([`nest_streams`]; [`Upgrade`] chooses, for exec and attach alike). With `tty`, the runtime gets a terminal of this node's making whose size the
//! client's resize messages set.
//!
//! Errors before the upgrade are `Status` objects with the kubelet's codes and messages (`container not found
//! ("x")` is a 404), which the API server hands on unchanged.

use std::future::Future;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::process::Stdio;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::{Request, Response, StatusCode};
use nest_kubelet_server::Body;
use nest_streams::channel::REMOTE_COMMAND;
use nest_streams::remotecommand::{self, Ended, Options, Outcome, Process, TerminalSize};
use nest_streams::spdy;
use serde_json::json;

use crate::Context;
use crate::process::NotRunning;

/// The most arguments, and bytes of them, a command may have: far more than any shell line, far less than a node's
/// memory.
const MAX_COMMAND_ARGS: usize = 4096;
const MAX_COMMAND_BYTES: usize = 256 << 10;

/// The kubelet's answer for a stream into `pod`'s container `container` that cannot be entered: 404 when the pod has
/// no such container, 400 when it does not run (upstream's words for both).
pub(crate) fn not_running(not: NotRunning, pod: &str, container: &str) -> Response<Body> {
    match not {
        NotRunning::NoSuchContainer => {
            status(StatusCode::NOT_FOUND, "NotFound", format!("container not found ({container:?})"))
        }
        NotRunning::NotRunning => status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!("container {container:?} in pod {pod:?} is not running"),
        ),
    }
}

/// A `Status` answer, as the kubelet writes its streaming errors (`streaming.WriteError`).
pub(crate) fn status(code: StatusCode, reason: &str, message: impl Into<String>) -> Response<Body> {
    let message = message.into();
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": message, "reason": reason, "code": code.as_u16()});
    let mut response = Response::new(Full::new(Bytes::from(format!("{body}\n"))).boxed_unsync());
    *response.status_mut() = code;
    response.headers_mut().insert("content-type", "application/json".parse().expect("a header value"));
    response
}

/// What `/exec` was asked to run.
#[derive(Debug, PartialEq, Eq)]
struct ExecRequest {
    command: Vec<String>,
    options: Options,
}

/// Reads `/exec`'s query: the kubelet's names (`input`, `output`, `error`, `tty`, `command` repeated).
fn exec_request(query: &str) -> Result<ExecRequest, String> {
    let mut command = Vec::new();
    let mut options = Options::default();
    let mut bytes = 0usize;
    for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
        let flag = matches!(value.as_ref(), "1" | "true" | "True" | "TRUE" | "t" | "T");
        match key.as_ref() {
            "command" => {
                bytes = bytes.saturating_add(value.len());
                if command.len() >= MAX_COMMAND_ARGS || bytes > MAX_COMMAND_BYTES {
                    return Err("the command is too long".into());
                }
                command.push(value.into_owned());
            }
            "input" => options.stdin = flag,
            "output" => options.stdout = flag,
            "error" => options.stderr = flag,
            "tty" => options.tty = flag,
            _ => {}
        }
    }
    if !(options.stdin || options.stdout || options.stderr) {
        return Err("you must specify at least 1 of stdin, stdout, stderr".into());
    }
    if command.is_empty() {
        return Err("you must specify a command".into());
    }
    // A terminal merges standard error into its output (upstream drops `error` with `tty` the same way).
    if options.tty {
        options.stderr = false;
    }
    Ok(ExecRequest { command, options })
}

/// Answers `/exec/<namespace>/<pod>/<container>`: the `101` that starts the stream, or why not.
pub(crate) async fn exec(
    context: &Context,
    mut request: Request<hyper::body::Incoming>,
    path: &[&str],
) -> Response<Body> {
    let [namespace, pod, container] = path else {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "expected /exec/<namespace>/<pod>/<container>");
    };
    let asked = match exec_request(request.uri().query().unwrap_or("")) {
        Ok(asked) => asked,
        Err(message) => return status(StatusCode::BAD_REQUEST, "BadRequest", message),
    };
    let run = context.runtime.as_ref().and_then(|runtime| runtime.find(namespace, pod));
    let Some(run) = run else {
        // A simulated pod runs nothing to enter; neither does one this node does not have.
        return status(StatusCode::NOT_FOUND, "NotFound", format!("pod {namespace}/{pod} does not run on this node"));
    };
    let sandbox = match run.running_sandbox(container) {
        Ok(sandbox) => sandbox,
        Err(not) => return not_running(not, pod, container),
    };
    let upgrade = match upgrade_of(request.headers()) {
        Ok(upgrade) => upgrade,
        Err((code, reason, message)) => return status(code, reason, message),
    };
    let pending = match nest_kubelet_server::upgrade::take(&mut request) {
        Ok(pending) => pending,
        Err(error) => return status(StatusCode::BAD_REQUEST, "BadRequest", error.to_string()),
    };
    let pid_file = sandbox.exec_pid_file();
    let started = start(&sandbox, &asked, &pid_file);
    let (child, process) = match started {
        Ok(started) => started,
        Err(error) => {
            return status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                format!("starting the command in container {container:?}: {error}"),
            );
        }
    };
    let (response, options) = (upgrade.response(), asked.options);
    tokio::spawn(async move {
        let Ok(stream) = pending.stream().await else { return };
        let idle = stream.idle();
        let mut child = child;
        let ended = async {
            match child.wait().await {
                Ok(status) => {
                    use std::os::unix::process::ExitStatusExt as _;
                    Outcome::Exited(status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(9)))
                }
                Err(error) => Outcome::Failed(error.to_string()),
            }
        };
        let session = upgrade.serve(stream, options, process, ended);
        let told = tokio::select! {
            ended = session => matches!(ended, Ended::Told(_)),
            () = idle.elapsed() => false,
        };
        if !told {
            // The client went away (or the stream idled out) while the command runs: it is killed, as the
            // kubelet's runtime kills an exec whose stream ended. The runtime cannot pass SIGKILL on, so the command
            // is killed by its host process ID, which the runtime still waits for.
            tracing::debug!("an exec's client went away; its command is killed");
            let pid = std::fs::read_to_string(&pid_file).ok().and_then(|p| p.trim().parse::<libc::pid_t>().ok());
            if let Some(pid) = pid.filter(|p| *p > 1) {
                // SAFETY: kill(2) with a process ID read from the runtime's file; no memory is touched.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        let _ = std::fs::remove_file(&pid_file);
        // Dropping the runtime's process kills it too (kill_on_drop).
        drop(child);
    });
    response
}

/// The upgrade an exec or an attach asked for: a channel-protocol WebSocket (a GET), or SPDY/3.1 (a POST,
/// client-go's fallback).
pub(crate) enum Upgrade {
    WebSocket(nest_streams::handshake::Accepted),
    Spdy(&'static str),
}

/// Which upgrade `headers` ask for, or the code, reason and message of the `Status` that refuses them (upstream's
/// 403 for a SPDY protocol no one shares).
pub(crate) fn upgrade_of(headers: &hyper::HeaderMap) -> Result<Upgrade, (StatusCode, &'static str, String)> {
    if nest_streams::handshake::is_spdy(headers) {
        return nest_streams::handshake::spdy_protocol(headers, spdy::remotecommand::PROTOCOLS)
            .map(Upgrade::Spdy)
            .map_err(|message| (StatusCode::FORBIDDEN, "Forbidden", message));
    }
    match nest_streams::handshake::accept(headers, REMOTE_COMMAND) {
        Ok(accepted) => Ok(Upgrade::WebSocket(accepted)),
        Err(nest_streams::handshake::Refusal::NotWebSocket) => {
            Err((StatusCode::BAD_REQUEST, "BadRequest", "Upgrade request required".into()))
        }
        Err(refusal) => Err((StatusCode::BAD_REQUEST, "BadRequest", refusal.to_string())),
    }
}

impl Upgrade {
    /// Runs the remote-command session on the upgraded connection `stream` in the protocol asked for: `process`'s
    /// streams to and from the client until `ended` resolves and the output has been sent, or the client goes.
    pub(crate) async fn serve(
        self,
        stream: nest_kubelet_server::upgrade::Stream,
        options: Options,
        process: Process,
        ended: impl Future<Output = Outcome>,
    ) -> Ended {
        match self {
            Upgrade::WebSocket(accepted) => {
                let ws = nest_streams::handshake::websocket(stream).await;
                remotecommand::serve(ws, accepted.protocol, options, process, ended).await
            }
            Upgrade::Spdy(protocol) => spdy::remotecommand::serve(stream, protocol, options, process, ended).await,
        }
    }

    /// The `101` that says which.
    pub(crate) fn response(&self) -> Response<Body> {
        let mut response = Response::new(http_body_util::Empty::<Bytes>::new().boxed_unsync());
        *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
        let headers = response.headers_mut();
        headers.insert("connection", "Upgrade".parse().expect("a header value"));
        match self {
            Upgrade::WebSocket(accepted) => {
                headers.insert("upgrade", "websocket".parse().expect("a header value"));
                if let Ok(accept) = accepted.accept.parse() {
                    headers.insert("sec-websocket-accept", accept);
                }
                if !accepted.protocol.name.is_empty() {
                    let name = accepted.protocol.name.parse().expect("a protocol name is a header value");
                    headers.insert("sec-websocket-protocol", name);
                }
            }
            Upgrade::Spdy(protocol) => {
                headers.insert("upgrade", "SPDY/3.1".parse().expect("a header value"));
                if !protocol.is_empty() {
                    let name = protocol.parse().expect("a protocol name is a header value");
                    headers.insert("x-stream-protocol-version", name);
                }
            }
        }
        response
    }
}

/// Starts the runtime's `exec` of the command in `sandbox`, its standard streams as the client asked: pipes, or a
/// terminal.
fn start(
    sandbox: &crate::process::sandbox::Sandboxed,
    asked: &ExecRequest,
    pid_file: &std::path::Path,
) -> std::io::Result<(tokio::process::Child, Process)> {
    let mut command = sandbox.exec_with(&asked.command, asked.options.tty, Some(pid_file));
    command.env_clear().env("PATH", std::env::var_os("PATH").unwrap_or_default()).kill_on_drop(true);
    if asked.options.tty {
        return start_with_terminal(command);
    }
    let piped = |wanted: bool| if wanted { Stdio::piped() } else { Stdio::null() };
    command.stdin(piped(asked.options.stdin)).stdout(piped(asked.options.stdout)).stderr(piped(asked.options.stderr));
    let mut child = command.spawn()?;
    let process = Process {
        stdin: child.stdin.take().map(|w| Box::pin(w) as _),
        stdout: child.stdout.take().map(|r| Box::pin(r) as _),
        stderr: child.stderr.take().map(|r| Box::pin(r) as _),
        resize: None,
    };
    Ok((child, process))
}

/// Starts the runtime with a terminal of its own as its standard streams (its controlling terminal, in a session of
/// its own): the runtime puts it in raw mode and copies between it and the container's terminal, whose size it
/// sets from this one's whenever it changes (`SIGWINCH`, which the kernel sends when [`resize`] sets it).
fn start_with_terminal(mut command: tokio::process::Command) -> std::io::Result<(tokio::process::Child, Process)> {
    let (mut leader, mut follower) = (-1, -1);
    // SAFETY: openpty(3) writes two descriptors into the integers it is given; the other arguments may be null.
    let opened =
        unsafe { libc::openpty(&mut leader, &mut follower, std::ptr::null_mut(), std::ptr::null(), std::ptr::null()) };
    if opened != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just opened and are owned by nothing else.
    let (leader, follower) = unsafe { (OwnedFd::from_raw_fd(leader), OwnedFd::from_raw_fd(follower)) };
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
    let (sizes, mut asked) = tokio::sync::mpsc::channel::<TerminalSize>(4);
    let resizing = leader.try_clone()?;
    tokio::spawn(async move {
        while let Some(size) = asked.recv().await {
            resize(&resizing, size);
        }
    });
    let writer = tokio::fs::File::from_std(std::fs::File::from(leader.try_clone()?));
    let reader = tokio::fs::File::from_std(std::fs::File::from(leader));
    let process =
        Process { stdin: Some(Box::pin(writer)), stdout: Some(Box::pin(reader)), stderr: None, resize: Some(sizes) };
    Ok((child, process))
}

/// Sets the size of the terminal whose leading side is `leader`.
fn resize(leader: &OwnedFd, size: TerminalSize) {
    let size = libc::winsize { ws_row: size.height, ws_col: size.width, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCSWINSZ reads the winsize it is given and nothing else.
    unsafe { libc::ioctl(leader.as_raw_fd(), libc::TIOCSWINSZ, &size) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_queries_are_read_as_the_kubelet_reads_them() {
        let asked = exec_request("command=sh&command=-c&command=echo%20hi%26&output=1&error=1").unwrap();
        assert_eq!(asked.command, ["sh", "-c", "echo hi&"]);
        assert_eq!(asked.options, Options { stdout: true, stderr: true, ..Options::default() });
        let asked = exec_request("command=sh&input=1&output=1&error=1&tty=1").unwrap();
        assert_eq!(asked.options, Options { stdin: true, stdout: true, stderr: false, tty: true });
        assert_eq!(exec_request("command=sh").unwrap_err(), "you must specify at least 1 of stdin, stdout, stderr");
        assert!(exec_request("output=1").is_err(), "no command");
        let long = "command=x&".repeat(MAX_COMMAND_ARGS + 1) + "output=1";
        assert_eq!(exec_request(&long).unwrap_err(), "the command is too long");
    }
}
