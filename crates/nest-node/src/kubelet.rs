//! The node's kubelet API: HTTPS with a serving certificate from the cluster CA, answering only the API server (a
//! client certificate from the cluster CA whose common name is [`nest_kubelet_server::API_SERVER_CLIENT`]). It serves what the API
//! server proxies to nodes today:
//!
//! - `GET /containerLogs/<namespace>/<pod>/<container>` with `follow`, `tailLines`, `sinceSeconds`, `timestamps`,
//!   `previous` and `limitBytes`, as the kubelet does: a process's output from its log file; a simulated pod's is one
//!   line saying it is simulated; a pod whose processes have not started (its image not pulled) has none (400);
//! - `/exec/<namespace>/<pod>/<container>`: a command in a running container, over a WebSocket
//!   (`streaming.rs`);
//! - `GET /stats/summary` and `GET /metrics/resource`: the node's, pods' and containers' resource statistics
//!   ([`crate::stats`]);
//! - `GET /healthz`.
//!
//! The port itself (TLS, the API server's client certificate, connection limits) is `nest-kubelet-server`'s, which
//! the syncer's virtual nodes serve too; this module is the node's handler behind it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::{Request, Response, StatusCode};
pub use nest_kubelet_server::Tls;
use nest_kubelet_server::{Body, Connections, Limits, serve_with, text};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::Context;

/// Serves the kubelet API on `listener` until the task is dropped, within the default [`Limits`] but for the cap of
/// one address: the API server that calls the node carries every tenant's logs (the syncer reads them through it),
/// so it may hold a quarter of the connections rather than 256.
pub(crate) async fn serve(listener: tokio::net::TcpListener, tls: Tls, context: Arc<Context>) -> anyhow::Result<()> {
    let defaults = Limits::default();
    let connections = Connections::new(Limits { max_per_source: defaults.max_connections / 4, ..defaults });
    let served = serve_with(listener, tls, connections, move |request| {
        let context = context.clone();
        async move { handle(&context, request).await }
    });
    Ok(served.await?)
}

/// What `/containerLogs` was asked for.
#[derive(Debug, Default)]
struct LogOptions {
    follow: bool,
    tail_lines: Option<usize>,
    /// The earliest line to send: from `sinceTime`, or `sinceSeconds` before now (the first line ever when that
    /// reaches past the earliest time there is).
    since: Option<jiff::Timestamp>,
    timestamps: bool,
    previous: bool,
    limit_bytes: Option<usize>,
}

/// The query as the kubelet reads it. The API server checked the ranges already (`PodLogOptions`); a caller that did
/// not gets a 400 for a number out of range, never arithmetic that overflows.
fn log_options(query: &str) -> Result<LogOptions, String> {
    let mut options = LogOptions::default();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let flag = || matches!(value, "" | "true" | "1");
        let number = |least: i64| match value.parse::<i64>() {
            Ok(n) if n >= least => Ok(n),
            _ => Err(format!("{key}: {value:?} is not a number of at least {least}\n")),
        };
        let size = |n: i64| usize::try_from(n).unwrap_or(usize::MAX);
        match key {
            "follow" => options.follow = flag(),
            "timestamps" => options.timestamps = flag(),
            "previous" => options.previous = flag(),
            "tailLines" => options.tail_lines = Some(size(number(0)?)),
            "limitBytes" => options.limit_bytes = Some(size(number(1)?)),
            "sinceSeconds" => {
                let seconds = jiff::SignedDuration::from_secs(number(1)?);
                options.since = Some(crate::now().checked_sub(seconds).unwrap_or(jiff::Timestamp::MIN));
            }
            "sinceTime" => {
                let time = value.parse::<jiff::Timestamp>().map_err(|e| format!("sinceTime: {value:?}: {e}\n"))?;
                options.since = Some(time);
            }
            _ => {}
        }
    }
    Ok(options)
}

async fn handle(context: &Context, request: Request<hyper::body::Incoming>) -> Response<Body> {
    let path = request.uri().path().to_string();
    if path == "/healthz" {
        return text(StatusCode::OK, "ok");
    }
    match path.as_str() {
        "/stats/summary" => return crate::stats::answer(context, request.method(), false).await,
        "/metrics/resource" => return crate::stats::answer(context, request.method(), true).await,
        _ => {}
    }
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    if let ["exec", rest @ ..] = segments.as_slice() {
        return crate::streaming::exec(context, request, rest).await;
    }
    if let ["portForward", rest @ ..] = segments.as_slice() {
        return crate::port_forward::port_forward(context, request, rest).await;
    }
    if let ["attach", rest @ ..] = segments.as_slice() {
        return crate::attach::attach(context, request, rest).await;
    }
    let Some(rest) = path.strip_prefix("/containerLogs/") else {
        return text(StatusCode::NOT_FOUND, format!("{path}: not found\n"));
    };
    let parts: Vec<&str> = rest.split('/').collect();
    let [namespace, pod, container] = parts[..] else {
        return text(StatusCode::BAD_REQUEST, "expected /containerLogs/<namespace>/<pod>/<container>\n");
    };
    let options = match log_options(request.uri().query().unwrap_or("")) {
        Ok(options) => options,
        Err(message) => return text(StatusCode::BAD_REQUEST, message),
    };
    if context.simulates(namespace, pod) {
        return simulated(&context.options.name, namespace, pod);
    }
    let Some(run) = context.runtime.as_ref().and_then(|runtime| runtime.find(namespace, pod)) else {
        // Not started (its image is being pulled, or cannot be): no output yet, as the kubelet answers.
        return text(
            StatusCode::BAD_REQUEST,
            format!("container {container:?} in pod {pod:?} is waiting to start: no process runs yet\n"),
        );
    };
    let Some(restarts) = run.restart_count(container) else {
        return text(StatusCode::BAD_REQUEST, format!("container {container:?} is not valid for pod {pod:?}\n"));
    };
    let restart = if options.previous {
        if restarts <= 0 {
            return text(
                StatusCode::BAD_REQUEST,
                format!("previous terminated container {container:?} in pod {pod:?} not found\n"),
            );
        }
        restarts - 1
    } else {
        restarts
    };
    let file = run.log_path(container, restart);
    let follow = options.follow && !options.previous;
    let (sender, receiver) = tokio::sync::mpsc::channel::<Bytes>(16);
    tokio::spawn(stream_log(file, options, follow.then_some((run, container.to_string(), restart)), sender));
    let stream = futures_util::StreamExt::map(tokio_stream_from(receiver), |chunk| Ok(Frame::data(chunk)));
    let mut response = Response::new(BodyExt::boxed_unsync(StreamBody::new(stream)));
    response.headers_mut().insert("content-type", "text/plain; charset=utf-8".parse().expect("a header value"));
    response
}

fn tokio_stream_from(mut receiver: tokio::sync::mpsc::Receiver<Bytes>) -> impl futures_util::Stream<Item = Bytes> {
    futures_util::stream::poll_fn(move |cx| receiver.poll_recv(cx))
}

fn simulated(node: &str, namespace: &str, pod: &str) -> Response<Body> {
    text(
        StatusCode::OK,
        format!("pod {namespace}/{pod} is simulated by node {node}: nothing runs, so there is no output\n"),
    )
}

/// One stored line, `<RFC 3339 time> <stream> <text>`, as the client sees it.
fn render(line: &str, options: &LogOptions, since: Option<jiff::Timestamp>) -> Option<String> {
    let mut fields = line.splitn(3, ' ');
    let (time, _stream, text) = (fields.next()?, fields.next()?, fields.next().unwrap_or(""));
    if let Some(since) = since
        && time.parse::<jiff::Timestamp>().is_ok_and(|t| t < since)
    {
        return None;
    }
    Some(if options.timestamps { format!("{time} {text}\n") } else { format!("{text}\n") })
}

/// Sends the log file's lines, then (following) what is appended until that run of the container ends.
async fn stream_log(
    file: PathBuf,
    options: LogOptions,
    follow: Option<(Arc<crate::process::PodRun>, String, i32)>,
    sender: tokio::sync::mpsc::Sender<Bytes>,
) {
    let since = options.since;
    let contents = tokio::fs::read_to_string(&file).await.unwrap_or_default();
    let complete = contents.rfind('\n').map_or(0, |i| i + 1);
    let mut lines: Vec<String> = contents[..complete].lines().filter_map(|l| render(l, &options, since)).collect();
    if let Some(tail) = options.tail_lines {
        lines.drain(..lines.len().saturating_sub(tail));
    }
    let mut budget = options.limit_bytes.unwrap_or(usize::MAX);
    let mut send = |text: String| {
        let take = text.len().min(budget);
        budget -= take;
        Bytes::from(text.into_bytes()).slice(..take)
    };
    for line in lines {
        let chunk = send(line);
        if chunk.is_empty() || sender.send(chunk).await.is_err() {
            return;
        }
    }
    let Some((run, container, restart)) = follow else { return };
    let mut offset = complete as u64;
    let mut pending = String::new();
    loop {
        let done = run.restart_count(&container) != Some(restart) || run.finished();
        if let Ok(mut handle) = tokio::fs::File::open(&file).await
            && handle.seek(std::io::SeekFrom::Start(offset)).await.is_ok()
        {
            let mut more = String::new();
            if let Ok(read) = handle.read_to_string(&mut more).await {
                offset += read as u64;
                pending.push_str(&more);
            }
        }
        while let Some(end) = pending.find('\n') {
            let line: String = pending.drain(..=end).collect();
            if let Some(text) = render(line.trim_end_matches('\n'), &options, since) {
                let chunk = send(text);
                if chunk.is_empty() || sender.send(chunk).await.is_err() {
                    return;
                }
            }
        }
        if done || sender.is_closed() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_options_at_their_extremes_are_read_without_overflow() {
        let options = log_options(&format!("sinceSeconds={}&tailLines={}&limitBytes=1", i64::MAX, i64::MAX)).unwrap();
        assert_eq!(options.since, Some(jiff::Timestamp::MIN), "further back than time goes: every line");
        assert_eq!(options.tail_lines, Some(usize::try_from(i64::MAX).unwrap()));
        assert_eq!(options.limit_bytes, Some(1));
        let options = log_options("sinceTime=2026-12-04T10:00:00Z").unwrap();
        assert_eq!(options.since, Some("2026-12-04T10:00:00Z".parse().unwrap()));
        for refused in
            ["sinceSeconds=0", "sinceSeconds=-5", "tailLines=-1", "limitBytes=0", "tailLines=1e3", "sinceTime=x"]
        {
            assert!(log_options(refused).is_err(), "{refused}");
        }
    }
}
