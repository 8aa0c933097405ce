//! Exec, attach and port-forward through a tenant's kubelet endpoint: the kubelet API's `/exec/<ns>/<pod>/<c>`,
//! `/attach/<ns>/<pod>/<c>` and `/portForward/<ns>/<pod>`, which the tenant's API server calls for its
//! `pods/exec|attach|portforward` (as kube-apiserver calls a node's), proxied to the management cluster's copy of
//! the pod. The caller has been checked already ([`super`]: the tenant's API server, its pod mapped by the syncer's
//! own records); here the upgrade request goes on and, once answered `101`, bytes are spliced both ways. Nothing
//! here reads the stream: WebSocket (`v5.channel.k8s.io` and older) and SPDY/3.1 pass alike.
//!
//! **Where the stream goes: the management API server's `pods/<name>/exec|attach|portforward`**, as the syncer's
//! own user, rather than the node's kubelet port. The syncer holds no credential a kubelet accepts (that is the
//! management API server's kubelet-client certificate, which no tenant-facing component should hold), and going
//! through the API server keeps one gate for every stream into a management pod: its authorization (the syncer's
//! ClusterRole grants `create` on the three subresources, `nest_capn::clusterctl::syncer_rules`), its audit log and
//! its choice of the node. The price is one more hop and the query's translation: the kubelet's names for the
//! options (`input`, `output`, `error`, `tty`, `command`, `port`) become the API's (`stdin`, `stdout`, `stderr`,
//! `tty`, `command`, `ports`), and the container named in the path becomes `container`; anything else in the
//! query is dropped, so a tenant's API server can add nothing to what it asks.
//!
//! The stream keeps its slot in the endpoint's budget of connections ([`nest_kubelet_server::Connections`], shared
//! by every tenant) for as long as it lives, and is closed after the kubelet's streaming idle timeout
//! ([`nest_kubelet_server::upgrade::STREAM_IDLE_TIMEOUT`]).

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use nest_kubelet_server::{Body, text, upgrade};

use crate::Syncer;

/// The headers of an upgrade that go on to the management API server, and those of its `101` that come back. No
/// other: the request goes as the syncer, and a header such as `Impersonate-User` or `Authorization` from the
/// tenant's side must not go with it.
const UPGRADE_HEADERS: &[&str] = &[
    "connection",
    "upgrade",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-protocol",
    "sec-websocket-accept",
    "x-stream-protocol-version",
];

/// How long the management API server (and the node behind it) may take to answer an upgrade.
const UPGRADE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The largest refusal read from the management API server and handed on.
const MAX_ERROR_BODY: usize = 64 << 10;

/// Which stream a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `/exec`: a command in a container.
    Exec,
    /// `/attach`: a container's own standard streams.
    Attach,
    /// `/portForward`: connections to the pod's ports.
    PortForward,
}

impl Kind {
    /// The API's subresource of a pod for this stream.
    fn subresource(self) -> &'static str {
        match self {
            Kind::Exec => "exec",
            Kind::Attach => "attach",
            Kind::PortForward => "portforward",
        }
    }
}

/// The management cluster's pod a request reaches, found by [`super`]'s ownership check.
#[derive(Debug)]
pub struct Target {
    /// The super namespace the tenant's namespace maps to.
    pub super_namespace: String,
    /// The pod's name (the same in both clusters).
    pub pod: String,
    /// The container, from the path (`None` for port-forward).
    pub container: Option<String>,
}

/// The API's query for a kubelet query `query` of a `kind` stream into `container`: the kubelet's option names
/// translated (kube-apiserver's `ExecLocation`, `AttachLocation` and `PortForwardLocation` in
/// `pkg/registry/core/pod/strategy.go`, v1.33, write them the other way), everything else dropped.
pub fn api_query(kind: Kind, query: &str, container: Option<&str>) -> String {
    let mut api = url::form_urlencoded::Serializer::new(String::new());
    if let Some(container) = container {
        api.append_pair("container", container);
    }
    for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
        // The kubelet reads a flag as set when it is "1" (`remotecommand.NewOptions`); kube-apiserver writes "1".
        let on = matches!(value.as_ref(), "1" | "true");
        let renamed = match (kind, key.as_ref()) {
            (Kind::Exec | Kind::Attach, "input") if on => ("stdin", "true"),
            (Kind::Exec | Kind::Attach, "output") if on => ("stdout", "true"),
            (Kind::Exec | Kind::Attach, "error") if on => ("stderr", "true"),
            (Kind::Exec | Kind::Attach, "tty") if on => ("tty", "true"),
            (Kind::Exec, "command") => ("command", value.as_ref()),
            (Kind::PortForward, "port") => ("ports", value.as_ref()),
            _ => continue,
        };
        api.append_pair(renamed.0, renamed.1);
    }
    api.finish()
}

/// Proxies `request`, a `kind` stream into `target`, to the management API server: its `101` (and from then on its
/// stream), or its refusal with its code.
pub async fn proxy(
    syncer: &Syncer,
    kind: Kind,
    target: &Target,
    mut request: Request<hyper::body::Incoming>,
) -> Response<Body> {
    if !matches!(*request.method(), Method::GET | Method::POST) {
        return text(StatusCode::METHOD_NOT_ALLOWED, format!("{} is not an upgrade\n", request.method()));
    }
    if !request.headers().contains_key("upgrade") {
        return text(StatusCode::BAD_REQUEST, "Upgrade request required\n");
    }
    let query = api_query(kind, request.uri().query().unwrap_or_default(), target.container.as_deref());
    let (namespace, pod, subresource) = (&target.super_namespace, &target.pod, kind.subresource());
    let url = format!("/api/v1/namespaces/{namespace}/pods/{pod}/{subresource}?{query}");
    let mut onward = Request::builder().method(request.method().clone()).uri(url);
    for name in UPGRADE_HEADERS {
        for value in request.headers().get_all(*name) {
            onward = onward.header(*name, value);
        }
    }
    let Ok(onward) = onward.body(kube::client::Body::empty()) else {
        return text(StatusCode::BAD_REQUEST, "a bad request\n");
    };
    // Taken before answering: the client's connection, and its slot in the endpoint's budget.
    let client = match upgrade::take(&mut request) {
        Ok(pending) => pending,
        Err(error) => return text(StatusCode::BAD_REQUEST, format!("unable to upgrade connection: {error}\n")),
    };
    let mut response = match tokio::time::timeout(UPGRADE_TIMEOUT, syncer.super_client.send(onward)).await {
        Ok(Ok(response)) => response,
        Ok(Err(error)) => {
            tracing::debug!(%error, namespace, pod, "a tenant's stream could not reach the management API server");
            return text(StatusCode::BAD_GATEWAY, "the management cluster's API server did not answer\n");
        }
        Err(_) => return text(StatusCode::GATEWAY_TIMEOUT, "the management cluster's API server did not answer\n"),
    };
    if response.status() != StatusCode::SWITCHING_PROTOCOLS {
        return refusal(response).await;
    }
    let mut answer = Response::new(http_body_util::Empty::<Bytes>::new().boxed_unsync());
    *answer.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    for name in UPGRADE_HEADERS {
        for value in response.headers().get_all(*name) {
            answer.headers_mut().append(*name, value.clone());
        }
    }
    let management = hyper::upgrade::on(&mut response);
    let (namespace, pod) = (namespace.clone(), pod.clone());
    tokio::spawn(async move {
        let (client, management) =
            match tokio::try_join!(async { client.stream().await.map_err(|e| e.to_string()) }, async {
                management.await.map_err(|e| e.to_string())
            }) {
                Ok(both) => both,
                Err(error) => {
                    tracing::debug!(%error, namespace, pod, "a tenant's stream was not upgraded");
                    return;
                }
            };
        let idle = client.idle();
        let (mut client, mut management) = (client, TokioIo::new(management));
        tokio::select! {
            copied = tokio::io::copy_bidirectional(&mut client, &mut management) => {
                if let Err(error) = copied {
                    tracing::debug!(%error, namespace, pod, "a tenant's stream ended");
                }
            }
            () = idle.elapsed() => tracing::debug!(namespace, pod, "a tenant's idle stream closed"),
        }
    });
    answer
}

/// The management API server's answer other than `101`, handed on with its code and content type (a `Status`, as
/// upstream hands on a backend's refusal), at most [`MAX_ERROR_BODY`] of it.
async fn refusal(response: Response<kube::client::Body>) -> Response<Body> {
    let status = response.status();
    let content_type = response.headers().get("content-type").cloned();
    let limited = http_body_util::Limited::new(response.into_body(), MAX_ERROR_BODY);
    let body = limited.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let mut answer = Response::new(Full::new(body).boxed_unsync());
    *answer.status_mut() = status;
    if let Some(content_type) = content_type {
        answer.headers_mut().insert("content-type", content_type);
    }
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubelets_options_become_the_apis_and_nothing_else_goes_on() {
        let exec = api_query(Kind::Exec, "input=1&output=1&tty=0&command=sh&command=-c&command=echo+a%26b", Some("c"));
        assert_eq!(exec, "container=c&stdin=true&stdout=true&command=sh&command=-c&command=echo+a%26b");
        // A flag the kubelet would not read as set, and what the API server would take but the kubelet never gets.
        let attach = api_query(Kind::Attach, "error=1&input=yes&command=sh&container=other&ports=1", Some("c"));
        assert_eq!(attach, "container=c&stderr=true");
        let forward = api_query(Kind::PortForward, "port=80&port=8080&container=x&command=sh", None);
        assert_eq!(forward, "ports=80&ports=8080");
    }
}
