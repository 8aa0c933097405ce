//! The node's kubelet API: HTTPS with a serving certificate from the cluster CA, answering only the API server (a
//! client certificate from the cluster CA whose common name is [`API_SERVER_CLIENT`]). It serves what the API
//! server proxies to nodes today:
//!
//! - `GET /containerLogs/<namespace>/<pod>/<container>` with `follow`, `tailLines`, `sinceSeconds`, `timestamps`,
//!   `previous` and `limitBytes`, as the kubelet does: a process's output from its log file; a simulated pod's is one
//!   line saying it is simulated;
//! - `GET /healthz`.
//!
//! A kubelet port is reachable from pods, so what one client can hold of it is bounded as the API server bounds it
//! ([`Limits`]): a TLS handshake deadline, a header read deadline, an idle timeout, a cap on the connections of one
//! source address and one on all of them ([`Connections`], which several servers can share as one budget).

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::IpAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncSeekExt, AsyncWrite, ReadBuf};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::Context;

/// The common name of the client certificate the API server presents to nodes.
pub const API_SERVER_CLIENT: &str = "kube-apiserver-kubelet-client";

/// The kubelet API's certificate material (PEM).
#[derive(Clone, Debug)]
pub struct Tls {
    /// The serving certificate, issued by the cluster CA for the node's address.
    pub cert: String,
    pub key: String,
    /// The CA that signs the API server's client certificate.
    pub client_ca: String,
}

/// A response body.
pub type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, Infallible>;

/// A plain-text response.
pub fn text(code: StatusCode, message: impl Into<String>) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(message.into())).boxed_unsync());
    *response.status_mut() = code;
    response.headers_mut().insert("content-type", "text/plain; charset=utf-8".parse().expect("a header value"));
    response
}

fn server_config(tls: &Tls) -> anyhow::Result<rustls::ServerConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(tls.client_ca.as_bytes())?)?;
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone()).build()?;
    let chain = vec![CertificateDer::from_pem_slice(tls.cert.as_bytes())?];
    let key = PrivateKeyDer::from_pem_slice(tls.key.as_bytes())?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The common name of a DER certificate.
fn common_name(der: &[u8]) -> Option<String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(cert.subject().iter_common_name().next()?.as_str().ok()?.to_string())
}

/// Serves the kubelet API on `listener` until the task is dropped, within the default [`Limits`] but for the cap of
/// one address: the API server that calls the node carries every tenant's logs (the syncer reads them through it),
/// so it may hold a quarter of the connections rather than 256.
pub(crate) async fn serve(listener: tokio::net::TcpListener, tls: Tls, context: Arc<Context>) -> anyhow::Result<()> {
    let defaults = Limits::default();
    let connections = Connections::new(Limits { max_per_source: defaults.max_connections / 4, ..defaults });
    serve_with(listener, tls, connections, move |request| {
        let context = context.clone();
        async move { handle(&context, request).await }
    })
    .await
}

/// Serves a kubelet-style API on `listener` with `handle`: HTTPS with `tls`, answering only clients whose certificate
/// `tls.client_ca` signed and whose common name is [`API_SERVER_CLIENT`] (others get 403), each connection counted
/// in `connections` and held to its limits. Used by the node, and by the syncer for tenants' virtual nodes (all of
/// its endpoints sharing one `connections`).
pub async fn serve_with<H, F>(
    listener: tokio::net::TcpListener,
    tls: Tls,
    connections: Arc<Connections>,
    handle: H,
) -> anyhow::Result<()>
where
    H: Fn(Request<hyper::body::Incoming>) -> F + Clone + Send + Sync + 'static,
    F: std::future::Future<Output = Response<Body>> + Send + 'static,
{
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config(&tls)?));
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of descriptors, most likely: waiting a moment lets connections close instead of spinning.
                tracing::debug!(%error, "accepting a kubelet API connection");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Over a cap, a connection is closed as soon as it is accepted: it costs a descriptor for a moment.
        let Some(slot) = connections.admit(peer.ip()) else { continue };
        let (acceptor, handle, connections) = (acceptor.clone(), handle.clone(), connections.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let limits = &connections.limits;
            let stream = match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(tcp)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(_)) => return,
                Err(_) => {
                    connections.handshake_timeouts.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            };
            let client = stream.get_ref().1.peer_certificates().and_then(|c| c.first()).and_then(|c| common_name(c));
            let activity = Activity::new();
            let requests = activity.clone();
            let service = hyper::service::service_fn(move |request| {
                let (handle, client) = (handle.clone(), client.clone());
                // The connection counts as busy until the response's body is sent (a followed log: until it ends).
                let open = OpenRequest::new(&requests);
                async move {
                    if client.as_deref() != Some(API_SERVER_CLIENT) {
                        return Ok::<_, Infallible>(text(
                            StatusCode::FORBIDDEN,
                            "only the API server may call this node\n",
                        ));
                    }
                    Ok(handle(request).await.map(|body| Held { body, _open: open }.boxed_unsync()))
                }
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
            let io = TokioIo::new(Watched { inner: stream, activity: activity.clone() });
            tokio::select! {
                _ = builder.serve_connection(io, service) => {}
                () = activity.until_idle(limits.idle_timeout) => {
                    connections.idle_closed.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
}

// === Connection limits ===

/// What one kubelet API server lets clients hold. The defaults are the API server's
/// (`nest-apiserver/src/limits.rs`): the same handshake, header and idle deadlines, and its 4,096 connections in
/// all; and, since every pod can reach a kubelet port, at most 256 of them from one address. The API server, this
/// port's one real client, opens a connection per `kubectl logs` and keeps a followed log's open while it lasts:
/// 256 followed logs at once through one API server is more than anyone watches.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Connections open at once, from everyone; more are closed as soon as they are accepted.
    pub max_connections: usize,
    /// Connections open at once from one address; more are closed as soon as they are accepted.
    pub max_per_source: usize,
    /// How long a client has to complete the TLS handshake.
    pub handshake_timeout: Duration,
    /// How long a client has to send a request's headers.
    pub header_read_timeout: Duration,
    /// A connection with no request open and no byte either way for this long is closed.
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 4096,
            max_per_source: 256,
            handshake_timeout: Duration::from_secs(10),
            // kube-apiserver's ReadHeaderTimeout.
            header_read_timeout: Duration::from_secs(32),
            // Longer than clients keep idle connections (Go and hyper-util: 90 s), so that they close first.
            idle_timeout: Duration::from_secs(120),
        }
    }
}

/// The connections open on one or more kubelet API servers, and what the limits closed: one budget for every server
/// given the same `Arc`.
#[derive(Debug)]
pub struct Connections {
    limits: Limits,
    /// Open connections by source address (IPv4-mapped IPv6 addresses counted as the IPv4 address they are).
    open: Mutex<HashMap<IpAddr, usize>>,
    total: AtomicUsize,
    refused: AtomicU64,
    handshake_timeouts: AtomicU64,
    idle_closed: AtomicU64,
}

/// What the limits did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Closed {
    /// Connections closed as accepted, over a cap.
    pub over_cap: u64,
    /// Connections whose TLS handshake did not end in time.
    pub handshake_timeout: u64,
    /// Connections idle too long.
    pub idle: u64,
}

impl Connections {
    pub fn new(limits: Limits) -> Arc<Connections> {
        Arc::new(Connections {
            limits,
            open: Mutex::new(HashMap::new()),
            total: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
            handshake_timeouts: AtomicU64::new(0),
            idle_closed: AtomicU64::new(0),
        })
    }

    /// The limits these connections are held to.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.total.load(Ordering::SeqCst)
    }

    /// What the limits closed so far.
    pub fn closed(&self) -> Closed {
        Closed {
            over_cap: self.refused.load(Ordering::Relaxed),
            handshake_timeout: self.handshake_timeouts.load(Ordering::Relaxed),
            idle: self.idle_closed.load(Ordering::Relaxed),
        }
    }

    /// A slot for a new connection from `source`, unless that address or everyone is at the cap (then the refusal
    /// is counted).
    fn admit(self: &Arc<Self>, source: IpAddr) -> Option<ConnectionSlot> {
        let source = source.to_canonical();
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let from_source = open.get(&source).copied().unwrap_or(0);
        if from_source >= self.limits.max_per_source || self.total.load(Ordering::SeqCst) >= self.limits.max_connections
        {
            drop(open);
            self.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        open.insert(source, from_source.saturating_add(1));
        self.total.fetch_add(1, Ordering::SeqCst);
        Some(ConnectionSlot { connections: self.clone(), source })
    }
}

/// Held while a connection is open.
struct ConnectionSlot {
    connections: Arc<Connections>,
    source: IpAddr,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut open = self.connections.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = open.get_mut(&self.source) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.source);
            }
        }
        self.connections.total.fetch_sub(1, Ordering::SeqCst);
    }
}

/// When a connection last moved a byte, and how many of its requests are open: what the idle timeout reads.
#[derive(Debug)]
struct Activity {
    since: Instant,
    /// Milliseconds after `since`.
    last: AtomicU64,
    open_requests: AtomicUsize,
}

impl Activity {
    fn new() -> Arc<Activity> {
        Arc::new(Activity { since: Instant::now(), last: AtomicU64::new(0), open_requests: AtomicUsize::new(0) })
    }

    fn touch(&self) {
        let elapsed = u64::try_from(self.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(elapsed, Ordering::Relaxed);
    }

    /// Whether nothing has moved for `timeout` and no request is open.
    fn idle_for(&self, timeout: Duration) -> bool {
        let quiet = self.since.elapsed().saturating_sub(Duration::from_millis(self.last.load(Ordering::Relaxed)));
        self.open_requests.load(Ordering::SeqCst) == 0 && quiet >= timeout
    }

    /// Returns once the connection has been idle for `timeout`.
    async fn until_idle(&self, timeout: Duration) {
        let tick = (timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
        loop {
            tokio::time::sleep(tick).await;
            if self.idle_for(timeout) {
                return;
            }
        }
    }
}

/// Held while a request's response is being sent on a connection.
struct OpenRequest(Arc<Activity>);

impl OpenRequest {
    fn new(activity: &Arc<Activity>) -> OpenRequest {
        activity.open_requests.fetch_add(1, Ordering::SeqCst);
        activity.touch();
        OpenRequest(activity.clone())
    }
}

impl Drop for OpenRequest {
    fn drop(&mut self) {
        self.0.touch();
        self.0.open_requests.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response body that keeps its request open (see [`OpenRequest`]) until it is sent or dropped; its size as the
/// body's, so that a short answer keeps its `content-length`.
struct Held {
    body: Body,
    _open: OpenRequest,
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

/// A connection's byte stream, noting in its [`Activity`] when bytes move.
struct Watched<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

// === The kubelet API ===

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
    let Some(runtime) = &context.runtime else { return simulated(&context.options.name, namespace, pod) };
    let Some(run) = runtime.find(namespace, pod) else { return simulated(&context.options.name, namespace, pod) };
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
    fn connections_beyond_a_sources_cap_or_the_total_are_refused_and_counted() {
        let limits = Limits { max_connections: 5, max_per_source: 2, ..Limits::default() };
        let connections = Connections::new(limits);
        let one: IpAddr = "10.128.0.7".parse().unwrap();
        let mapped: IpAddr = "::ffff:10.128.0.7".parse().unwrap();
        let first = connections.admit(one).unwrap();
        let _second = connections.admit(mapped).unwrap();
        assert!(connections.admit(one).is_none(), "an IPv4-mapped address is the same source");
        let others: Vec<_> = (1..=3).map(|i| connections.admit(IpAddr::from([10, 128, 0, i])).unwrap()).collect();
        assert_eq!(connections.open(), 5);
        assert!(connections.admit("10.128.0.9".parse().unwrap()).is_none(), "the total is reached");
        drop(first);
        assert!(connections.admit(one).is_some(), "a closed connection frees its slot");
        drop(others);
        assert_eq!(connections.closed(), Closed { over_cap: 2, ..Closed::default() });
    }

    #[test]
    fn a_connection_with_an_open_request_is_never_idle() {
        let activity = Activity::new();
        let open = OpenRequest::new(&activity);
        assert!(!activity.idle_for(Duration::ZERO));
        drop(open);
        assert!(activity.idle_for(Duration::ZERO));
        assert!(!activity.idle_for(Duration::from_secs(60)));
    }

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
