//! `pods/<name>/exec` and `pods/<name>/attach`: connect requests, proxied to the pod's node as kube-apiserver
//! proxies them (`ExecLocation` and `AttachLocation` in `pkg/registry/core/pod/strategy.go` choose the container
//! and write the kubelet's URL; `UpgradeAwareHandler` in
//! `k8s.io/apimachinery/pkg/util/proxy` splices the connection). The client's upgrade request (a WebSocket GET, or
//! a SPDY POST) goes to the kubelet API with this server's kubelet-client certificate; once the node answers `101`,
//! bytes are copied both ways until either side closes. The protocols themselves are the node's
//! (`nest-node/src/streaming.rs`, over `nest-streams`): nothing here reads the stream.
//!
//! What goes wrong before the upgrade is a `Status`: ours (the pod or container does not exist, bad options), or
//! the node's, handed on unchanged with its code, as upstream hands on a backend's non-101 answer.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::{Method, Response, StatusCode};
use hyper_util::rt::TokioIo;
use nest_registry::{ApiError, Registry, Result};

use crate::handler::Body;
use crate::logs::{Kubelet, container};

/// The headers of an upgrade that go on to the node, and those of its `101` that come back.
const UPGRADE_HEADERS: &[&str] = &[
    "connection",
    "upgrade",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-protocol",
    "sec-websocket-accept",
    "x-stream-protocol-version",
];

/// The largest error answer read from a node.
const MAX_ERROR_BODY: usize = 64 << 10;

/// What an exec asks for, from its query (`PodExecOptions`).
#[derive(Debug, PartialEq, Eq)]
pub struct ExecOptions {
    /// `container`, empty when not given.
    pub container: String,
    /// `command`, every value in order.
    pub command: Vec<String>,
    /// `stdin`, `stdout`, `stderr`, `tty`.
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

impl ExecOptions {
    /// Reads the query's options (`get` for a value, `all` for every value of a key); a flag that does not parse is
    /// a 400, as is an exec that would connect no stream.
    pub fn read<'a>(get: impl Fn(&str) -> Option<&'a str>, all: impl Fn(&str) -> Vec<String>) -> Result<ExecOptions> {
        let flag = |key: &str| -> Result<bool> {
            match get(key) {
                None | Some("") => Ok(false),
                Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
                Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
                Some(other) => {
                    Err(ApiError::bad_request(format!("strconv.ParseBool: parsing {other:?}: invalid syntax")))
                }
            }
        };
        let options = ExecOptions {
            container: get("container").unwrap_or_default().to_string(),
            command: all("command"),
            stdin: flag("stdin")?,
            stdout: flag("stdout")?,
            stderr: flag("stderr")?,
            tty: flag("tty")?,
        };
        if !(options.stdin || options.stdout || options.stderr) {
            return Err(ApiError::bad_request("you must specify at least 1 of stdin, stdout, stderr"));
        }
        Ok(options)
    }

    /// The kubelet's query for these options (`ExecLocation`: `input`, `output`, `error`, `tty`, `command`),
    /// written from the parsed values.
    fn kubelet_query(&self) -> String {
        let mut query = url::form_urlencoded::Serializer::new(String::new());
        for (key, on) in [("input", self.stdin), ("output", self.stdout), ("error", self.stderr), ("tty", self.tty)] {
            if on {
                query.append_pair(key, "1");
            }
        }
        for word in &self.command {
            query.append_pair("command", word);
        }
        query.finish()
    }
}

/// The client's side of a connect request: its method, headers and connection.
pub struct Client<'a> {
    /// GET (WebSocket) or POST (SPDY).
    pub method: &'a Method,
    /// Its headers; the upgrade's go on to the node.
    pub headers: &'a hyper::HeaderMap,
    /// Its connection, to take over after the `101`.
    pub upgrade: Option<hyper::upgrade::OnUpgrade>,
}

/// Answers `pods/<name>/exec`: the node's `101` (and from then on, the node's stream), or why not.
pub async fn exec(
    registry: &Registry,
    tls: Arc<rustls::ClientConfig>,
    namespace: &str,
    name: &str,
    options: ExecOptions,
    client: Client<'_>,
) -> Result<Response<Body>> {
    let pods = registry.resource("", "v1", "pods").expect("pods are built in");
    let pod = registry.get(&pods, namespace, name).await?;
    let container = container(&pod, Some(&options.container))?;
    let kubelet = Kubelet::of(registry, &pod, "exec into").await?;
    let path = format!("/exec/{namespace}/{name}/{container}?{}", options.kubelet_query());
    proxy(&kubelet, tls, &path, client).await
}

/// Answers `pods/<name>/attach`: the node's `101` (and from then on, the container's own streams), or why not.
pub async fn attach(
    registry: &Registry,
    tls: Arc<rustls::ClientConfig>,
    namespace: &str,
    name: &str,
    options: ExecOptions,
    client: Client<'_>,
) -> Result<Response<Body>> {
    let pods = registry.resource("", "v1", "pods").expect("pods are built in");
    let pod = registry.get(&pods, namespace, name).await?;
    let container = container(&pod, Some(&options.container))?;
    let kubelet = Kubelet::of(registry, &pod, "attach to").await?;
    let path = format!("/attach/{namespace}/{name}/{container}?{}", options.kubelet_query());
    proxy(&kubelet, tls, &path, client).await
}

/// Sends the client's upgrade request to `path` on the kubelet; on `101`, splices the two connections.
pub(crate) async fn proxy(
    kubelet: &Kubelet,
    tls: Arc<rustls::ClientConfig>,
    path: &str,
    client: Client<'_>,
) -> Result<Response<Body>> {
    let Some(client_upgrade) = client.upgrade else {
        return Err(ApiError::bad_request("unable to upgrade connection: the connection cannot be upgraded (HTTP/2)"));
    };
    if !client.headers.contains_key("upgrade") {
        return Err(ApiError::bad_request("Upgrade request required"));
    }
    let mut sender = kubelet.connect(tls).await?;
    let mut request = hyper::Request::builder().method(client.method.clone()).uri(path).header("host", kubelet.host());
    for name in UPGRADE_HEADERS {
        for value in client.headers.get_all(*name) {
            request = request.header(*name, value);
        }
    }
    let request =
        request.body(http_body_util::Empty::<Bytes>::new()).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let mut response = sender.send_request(request).await.map_err(|e| kubelet.unreachable(&e))?;
    let status = response.status();
    if status != StatusCode::SWITCHING_PROTOCOLS {
        // The node's refusal, handed on (a Status from the node, usually).
        let content_type = response.headers().get("content-type").cloned();
        let limited = http_body_util::Limited::new(response.into_body(), MAX_ERROR_BODY);
        let text = limited.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        let mut answer = Response::new(Full::new(text).boxed_unsync());
        *answer.status_mut() = status;
        if let Some(content_type) = content_type {
            answer.headers_mut().insert("content-type", content_type);
        }
        return Ok(answer);
    }
    let mut answer = Response::new(http_body_util::Empty::<Bytes>::new().boxed_unsync());
    *answer.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    for name in UPGRADE_HEADERS {
        for value in response.headers().get_all(*name) {
            answer.headers_mut().append(*name, value.clone());
        }
    }
    let node_upgrade = hyper::upgrade::on(&mut response);
    let node = kubelet.node.clone();
    tokio::spawn(async move {
        let (client, node_side) = match tokio::try_join!(client_upgrade, node_upgrade) {
            Ok(both) => both,
            Err(error) => {
                tracing::debug!(%error, node, "a stream's upgrade failed");
                return;
            }
        };
        let (mut client, mut node_side) = (TokioIo::new(client), TokioIo::new(node_side));
        if let Err(error) = tokio::io::copy_bidirectional(&mut client, &mut node_side).await {
            tracing::debug!(%error, node, "a stream ended");
        }
    });
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(query: &[(&str, &str)]) -> Result<ExecOptions> {
        let get = |key: &str| query.iter().rev().find(|(k, _)| *k == key).map(|(_, v)| *v);
        let all = |key: &str| query.iter().filter(|(k, _)| *k == key).map(|(_, v)| v.to_string()).collect();
        ExecOptions::read(get, all)
    }

    #[test]
    fn exec_options_become_the_kubelets_query() {
        let read =
            options(&[("command", "sh"), ("command", "-c"), ("command", "echo a&b"), ("stdout", "true")]).unwrap();
        assert_eq!(read.kubelet_query(), "output=1&command=sh&command=-c&command=echo+a%26b");
        let read = options(&[("command", "sh"), ("stdin", "1"), ("tty", "true"), ("container", "c")]).unwrap();
        assert_eq!((read.container.as_str(), read.kubelet_query().as_str()), ("c", "input=1&tty=1&command=sh"));
    }

    #[test]
    fn exec_options_that_connect_nothing_or_do_not_parse_are_400s() {
        let error = options(&[("command", "sh")]).unwrap_err();
        assert_eq!((error.code, error.message.as_str()), (400, "you must specify at least 1 of stdin, stdout, stderr"));
        let error = options(&[("command", "sh"), ("stdout", "yes")]).unwrap_err();
        assert_eq!((error.code, error.message.as_str()), (400, "strconv.ParseBool: parsing \"yes\": invalid syntax"));
    }
}
