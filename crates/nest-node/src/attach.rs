//! The kubelet API's `/attach/<namespace>/<pod>/<container>?input=1&output=1&error=1&tty=1` (the query the API
//! server writes, as kube-apiserver's `AttachLocation` writes it): the running container's own standard streams
//! ([`crate::process::stdio`]) over a channel-protocol WebSocket, or over SPDY/3.1 for a client that falls back to it
//! (the same [`crate::streaming::Upgrade`] as an exec's). Output from the moment of attaching (what came before is
//! in the log), input when the container has `stdin: true`, resizes of its terminal when it has `tty: true`. The session ends when the container's process does (its error channel then says
//! `Success`, as a CRI runtime's attach returns without error when the container exits), or when the client goes —
//! which, unlike an exec's, leaves the container running.
//!
//! Asking to send input to a container without `stdin: true` is refused (400) before the upgrade. A CRI runtime
//! (containerd's `ContainerIO.Attach`) would accept the stream and drop the input; refusing tells the client why
//! nothing it types arrives.

use hyper::{Request, Response, StatusCode};
use nest_kubelet_server::Body;
use nest_streams::remotecommand::{Options, Outcome};

use crate::Context;
use crate::process::stdio::Refusal;
use crate::streaming::{not_running, status, upgrade_of};

/// Reads `/attach`'s query: the kubelet's names (`input`, `output`, `error`, `tty`), as `NewOptions` reads them.
fn attach_options(query: &str) -> Result<Options, String> {
    let mut options = Options::default();
    for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
        let on = value == "1";
        match key.as_ref() {
            "input" => options.stdin = on,
            "output" => options.stdout = on,
            "error" => options.stderr = on,
            "tty" => options.tty = on,
            _ => {}
        }
    }
    if options.tty {
        options.stderr = false;
    }
    if !(options.stdin || options.stdout || options.stderr) {
        return Err("you must specify at least 1 of stdin, stdout, stderr".into());
    }
    Ok(options)
}

/// Answers `/attach/<namespace>/<pod>/<container>`: the `101` that starts the stream, or why not.
pub(crate) async fn attach(
    context: &Context,
    mut request: Request<hyper::body::Incoming>,
    path: &[&str],
) -> Response<Body> {
    let [namespace, pod, container] = path else {
        return status(StatusCode::BAD_REQUEST, "BadRequest", "expected /attach/<namespace>/<pod>/<container>");
    };
    let mut options = match attach_options(request.uri().query().unwrap_or("")) {
        Ok(options) => options,
        Err(message) => return status(StatusCode::BAD_REQUEST, "BadRequest", message),
    };
    let Some(run) = context.runtime.as_ref().and_then(|runtime| runtime.find(namespace, pod)) else {
        return status(StatusCode::NOT_FOUND, "NotFound", format!("pod {namespace}/{pod} does not run on this node"));
    };
    let stdio = match run.attachable(container) {
        Ok(stdio) => stdio,
        Err(not) => return not_running(not, pod, container),
    };
    // The streams are the client's to open, as its query names them (the kubelet's `createStreams` waits for
    // those); whether the process has a terminal is the container's to say, not the client's (the kubelet's
    // `GetAttach` takes `tty` from the container's spec).
    let asked = options;
    options.tty = stdio.wants().tty;
    if options.tty {
        options.stderr = false;
    }
    let process = match stdio.attach(options) {
        Ok(process) => process,
        Err(Refusal::NoStdin) => {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!(
                    "cannot attach to the standard input of container {container:?} in pod {pod:?}: its spec does \
                     not set stdin: true"
                ),
            );
        }
    };
    let upgrade = match upgrade_of(request.headers()) {
        Ok(upgrade) => upgrade,
        Err((code, reason, message)) => return status(code, reason, message),
    };
    let pending = match nest_kubelet_server::upgrade::take(&mut request) {
        Ok(pending) => pending,
        Err(error) => return status(StatusCode::BAD_REQUEST, "BadRequest", error.to_string()),
    };
    let response = upgrade.response();
    tokio::spawn(async move {
        let Ok(stream) = pending.stream().await else { return };
        let idle = stream.idle();
        let ended = async {
            stdio.ended().await;
            Outcome::Exited(0)
        };
        let session = upgrade.serve(stream, asked, process, ended);
        tokio::select! {
            _ = session => {}
            () = idle.elapsed() => tracing::debug!("an attach idled out"),
        }
    });
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attach_queries_are_read_as_the_kubelet_reads_them() {
        let options = attach_options("input=1&output=1&error=1&tty=1").unwrap();
        assert_eq!(options, Options { stdin: true, stdout: true, stderr: false, tty: true });
        let options = attach_options("output=1&error=1&command=ignored").unwrap();
        assert_eq!(options, Options { stdout: true, stderr: true, ..Options::default() });
        assert_eq!(attach_options("tty=1").unwrap_err(), "you must specify at least 1 of stdin, stdout, stderr");
    }
}
