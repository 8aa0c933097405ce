//! Logs and streams through the tenant: each tenant's virtual nodes point (InternalIP and kubelet port) at an
//! endpoint of the syncer, one per tenant. It serves the kubelet API's `/containerLogs`, and `/exec`, `/attach` and
//! `/portForward` ([`streams`]), with a certificate from *that tenant's* CA, answers only that tenant's API server
//! (its kubelet client certificate, verified against the tenant's CA), and reaches a pod only when the syncer's own
//! records say the management cluster's pod is the copy of the tenant's (`owned_pod`): the mapped super pod's
//! `pods/log` is streamed, its `pods/exec|attach|portforward` proxied. So `kubectl logs`, `exec`, `attach` and
//! `port-forward` in a tenant work for synced pods, and no other tenant (nor anyone else) reaches them through it.
//!
//! Every tenant's pods can reach these endpoints, so every endpoint keeps the kubelet API's limits
//! ([`nest_kubelet_server::Limits`]: handshake, header and idle deadlines, a cap per source address), and all of them
//! together one budget of connections ([`crate::Syncer::kubelet_connections`]): however many tenants there are, the
//! syncer's descriptors stay bounded.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::AsyncBufReadExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::{Request, Response, StatusCode};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use nest_kubelet_server::{Body, Tls, text};

use crate::names::{self, TENANT_LABEL};

pub mod streams;
use crate::{Syncer, tenants};

/// The query parameters the kubelet's `/containerLogs` and the API's `pods/log` share.
const PASSED_ON: &[&str] = &["follow", "tailLines", "sinceSeconds", "timestamps", "previous", "limitBytes"];

/// A listener on the first free port of `ports` at `address`.
async fn bind_in(
    address: std::net::IpAddr,
    ports: std::ops::RangeInclusive<u16>,
) -> std::io::Result<tokio::net::TcpListener> {
    let (first, last) = (*ports.start(), *ports.end());
    for port in ports {
        match tokio::net::TcpListener::bind((address, port)).await {
            Ok(listener) => return Ok(listener),
            Err(error) if error.kind() == std::io::ErrorKind::AddrInUse => continue,
            Err(error) => return Err(error),
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        format!("every kubelet endpoint port of {address}, {first} to {last}, is taken"),
    ))
}

/// Starts tenant `key`'s endpoint on the syncer's kubelet address; returns its port and the task serving it.
pub async fn start(
    syncer: &Arc<Syncer>,
    namespace: &str,
    cluster: &str,
    key: &str,
) -> tenants::Result<(u16, tokio::task::JoinHandle<()>)> {
    let secrets: Api<Secret> = Api::namespaced(syncer.super_client.clone(), namespace);
    let secret = secrets.get(&format!("{cluster}-ca")).await?;
    let field = |name: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(name))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .unwrap_or_default()
    };
    let ca = nest_pki::Ca(nest_pki::Pair { cert: field("tls.crt"), key: field("tls.key") });
    let address = syncer.options.kubelet_address;
    let leaf = nest_pki::Leaf {
        common_name: "nest-syncer",
        organization: None,
        names: vec![address.to_string()],
        usage: nest_pki::Usage::Server,
        validity: nest_pki::LEAF_VALIDITY,
    };
    let pair = ca.issue(&leaf).map_err(|e| tenants::Error::Certificate(e.to_string()))?;
    let tls = Tls { cert: pair.cert, key: pair.key, client_ca: ca.0.cert.clone() };
    let listener = bind_in(address, syncer.options.kubelet_ports.clone())
        .await
        .map_err(|e| tenants::Error::Certificate(e.to_string()))?;
    let port = listener.local_addr().map_err(|e| tenants::Error::Certificate(e.to_string()))?.port();
    let (syncer, key) = (syncer.clone(), key.to_string());
    let connections = syncer.kubelet_connections.clone();
    let task = tokio::spawn(async move {
        let served = nest_kubelet_server::serve_with(listener, tls, connections, move |request| {
            let (syncer, key) = (syncer.clone(), key.clone());
            async move { handle(&syncer, &key, request).await }
        });
        if let Err(error) = served.await {
            tracing::warn!(%error, "a tenant's kubelet endpoint stopped");
        }
    });
    Ok((port, task))
}

async fn handle(syncer: &Syncer, key: &str, request: Request<hyper::body::Incoming>) -> Response<Body> {
    let path = request.uri().path().to_string();
    if path == "/healthz" {
        return text(StatusCode::OK, "ok\n");
    }
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (kind, namespace, pod, container) = match parts[..] {
        ["containerLogs", namespace, pod, container] => (None, namespace, pod, Some(container)),
        ["exec", namespace, pod, container] => (Some(streams::Kind::Exec), namespace, pod, Some(container)),
        ["attach", namespace, pod, container] => (Some(streams::Kind::Attach), namespace, pod, Some(container)),
        ["portForward", namespace, pod] => (Some(streams::Kind::PortForward), namespace, pod, None),
        _ => return text(StatusCode::NOT_FOUND, format!("{path} is not served here\n")),
    };
    // A container's name is a DNS label: anything else could add to the query of the request below.
    if let Some(container) = container
        && !is_label(container)
    {
        return text(StatusCode::BAD_REQUEST, format!("{container:?} is not a container's name\n"));
    }
    let Some(super_namespace) = owned_pod(syncer, key, namespace, pod) else {
        return text(StatusCode::NOT_FOUND, format!("pod {namespace}/{pod} is not running in the super cluster\n"));
    };
    let pod = pod.to_string();
    let target = streams::Target { super_namespace, pod, container: container.map(str::to_string) };
    match kind {
        Some(kind) => streams::proxy(syncer, kind, &target, request).await,
        None => logs(syncer, &target, &request).await,
    }
}

/// Whether `name` can be a container's name (a DNS label's characters).
fn is_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// The super namespace of tenant `key`'s pod `namespace/pod`, if the syncer's own records say the management
/// cluster's pod there is the copy of that very pod: the tenant still has it (in the syncer's cache of the tenant,
/// so a pod the tenant deleted is no longer reachable), and the super pod carries the tenant's key, the tenant
/// namespace, name and UID the syncer wrote on it. Names alone prove nothing: another tenant's pod, a management
/// pod, or a pod of this tenant's control plane (labelled with its key too) may have the same name.
fn owned_pod(syncer: &Syncer, key: &str, namespace: &str, pod: &str) -> Option<String> {
    let pods = syncer.find_kind("pods")?;
    let tenant = syncer.tenant(key)?;
    let original = tenant.cache(pods).get(namespace, pod)?;
    let uid = original.metadata.uid.as_deref()?;
    let super_namespace = names::super_namespace(key, namespace);
    let copy = syncer.super_object(pods, &super_namespace, pod)?;
    let label = |name: &str| copy.metadata.labels.as_ref().and_then(|l| l.get(name)).map(String::as_str);
    let annotation = |name: &str| copy.metadata.annotations.as_ref().and_then(|a| a.get(name)).map(String::as_str);
    let theirs = label(TENANT_LABEL) == Some(key)
        && annotation(names::TENANT_NAMESPACE) == Some(namespace)
        && annotation(names::TENANT_NAME) == Some(pod)
        && annotation(names::TENANT_UID) == Some(uid);
    theirs.then_some(super_namespace)
}

/// `/containerLogs`: the super pod's `pods/log`, streamed.
async fn logs(syncer: &Syncer, target: &streams::Target, request: &Request<hyper::body::Incoming>) -> Response<Body> {
    let streams::Target { super_namespace, pod, container } = target;
    let container = container.as_deref().unwrap_or_default();
    let query: Vec<String> = request
        .uri()
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|pair| PASSED_ON.iter().any(|name| pair.split('=').next() == Some(name)))
        .map(str::to_string)
        .chain(std::iter::once(format!("container={container}")))
        .collect();
    let url = format!("/api/v1/namespaces/{super_namespace}/pods/{pod}/log?{}", query.join("&"));
    let Ok(request) = http::Request::get(url).body(Vec::new()) else {
        return text(StatusCode::BAD_REQUEST, "a bad request\n");
    };
    match syncer.super_client.request_stream(request).await {
        Ok(reader) => {
            let body = futures_util::stream::unfold(Box::pin(reader), |mut reader| async move {
                let chunk = match reader.as_mut().fill_buf().await {
                    Ok([]) | Err(_) => return None,
                    Ok(data) => Bytes::copy_from_slice(data),
                };
                reader.as_mut().consume_unpin(chunk.len());
                Some((Ok(Frame::data(chunk)), reader))
            });
            let mut response = Response::new(BodyExt::boxed_unsync(StreamBody::new(body)));
            response.headers_mut().insert("content-type", "text/plain".parse().expect("a header value"));
            response
        }
        Err(kube::Error::Api(status)) => {
            let code = StatusCode::from_u16(status.code).unwrap_or(StatusCode::BAD_GATEWAY);
            text(code, format!("{}\n", status.message))
        }
        Err(error) => text(StatusCode::BAD_GATEWAY, format!("the super cluster: {error}\n")),
    }
}

#[cfg(test)]
mod tests {
    //! The kubelet API's limits on a real endpoint on 127.0.0.1, as every tenant's pods could try them: one address
    //! that opens connections and never speaks, or stops half way through the TLS handshake.

    use std::net::{IpAddr, SocketAddr};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use nest_kubelet_server::{Connections, Limits, Tls};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio_rustls::rustls;

    use super::*;

    const CLIENT: &str = nest_kubelet_server::API_SERVER_CLIENT;

    struct Endpoint {
        address: SocketAddr,
        client: Arc<rustls::ClientConfig>,
    }

    /// A kubelet endpoint answering `/healthz`, as the syncer starts one per tenant, sharing `connections`.
    async fn endpoint(connections: Arc<Connections>) -> Endpoint {
        endpoint_with(connections, |_| async { text(StatusCode::OK, "ok\n") }).await
    }

    /// A kubelet endpoint answering with `handle`.
    async fn endpoint_with<H, F>(connections: Arc<Connections>, handle: H) -> Endpoint
    where
        H: Fn(Request<hyper::body::Incoming>) -> F + Clone + Send + Sync + 'static,
        F: std::future::Future<Output = Response<Body>> + Send + 'static,
    {
        let ca = nest_pki::Ca::generate("tenant-ca").unwrap();
        let leaf = |common_name, usage, names: Vec<String>| nest_pki::Leaf {
            common_name,
            organization: None,
            names,
            usage,
            validity: nest_pki::LEAF_VALIDITY,
        };
        let serving = ca.issue(&leaf("nest-syncer", nest_pki::Usage::Server, vec!["127.0.0.1".into()])).unwrap();
        let client = ca.issue(&leaf(CLIENT, nest_pki::Usage::Client, Vec::new())).unwrap();
        let tls = Tls { cert: serving.cert, key: serving.key, client_ca: ca.0.cert.clone() };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(nest_kubelet_server::serve_with(listener, tls, connections, handle));
        let pem = |text: &str| {
            use rustls::pki_types::pem::PemObject;
            rustls::pki_types::CertificateDer::from_pem_slice(text.as_bytes()).unwrap()
        };
        let mut roots = rustls::RootCertStore::empty();
        roots.add(pem(&ca.0.cert)).unwrap();
        let key = {
            use rustls::pki_types::pem::PemObject;
            rustls::pki_types::PrivateKeyDer::from_pem_slice(client.key.as_bytes()).unwrap()
        };
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_client_auth_cert(vec![pem(&client.cert)], key)
            .unwrap();
        Endpoint { address, client: Arc::new(config) }
    }

    /// A TCP connection to `to` from loopback address `from` (every 127/8 address is this machine's).
    async fn connect(from: [u8; 4], to: SocketAddr) -> TcpStream {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::new(IpAddr::from(from), 0)).unwrap();
        socket.connect(to).await.unwrap()
    }

    /// What a proper client (the tenant's API server) gets for `GET /healthz`, from `from`; `None` when the
    /// connection is refused.
    async fn healthz(endpoint: &Endpoint, from: [u8; 4]) -> Option<String> {
        let tcp = connect(from, endpoint.address).await;
        let connector = tokio_rustls::TlsConnector::from(endpoint.client.clone());
        let name = rustls::pki_types::ServerName::IpAddress(endpoint.address.ip().into());
        let mut tls = tokio::time::timeout(Duration::from_secs(5), connector.connect(name, tcp)).await.ok()?.ok()?;
        tls.write_all(b"GET /healthz HTTP/1.1\r\nhost: kubelet\r\nconnection: close\r\n\r\n").await.ok()?;
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(5), tls.read_to_string(&mut answer)).await.ok()?.ok()?;
        Some(answer)
    }

    /// How long until the server closes `stream` (which sends nothing more), at most `within`.
    async fn closed_after(mut stream: TcpStream, within: Duration) -> Option<Duration> {
        let began = Instant::now();
        let mut buffer = [0u8; 1024];
        loop {
            match tokio::time::timeout_at((began + within).into(), stream.read(&mut buffer)).await {
                Err(_) => return None,
                Ok(Ok(0) | Err(_)) => return Some(began.elapsed()),
                // A TLS alert or an HTTP answer before closing.
                Ok(Ok(_)) => {}
            }
        }
    }

    /// The start of a TLS ClientHello that never ends: a record header promising 512 bytes, and 5 of them.
    const HALF_A_HELLO: &[u8] = &[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03];

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn silent_and_half_open_connections_are_closed_and_one_address_takes_only_its_share() {
        let limits = Limits {
            max_connections: 64,
            max_per_source: 8,
            handshake_timeout: Duration::from_millis(500),
            header_read_timeout: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(1),
        };
        // Two tenants' endpoints, one budget, as in the syncer.
        let connections = Connections::new(limits);
        let demo = endpoint(connections.clone()).await;
        let acme = endpoint(connections.clone()).await;
        assert!(healthz(&demo, [127, 0, 0, 2]).await.is_some_and(|a| a.starts_with("HTTP/1.1 200")));

        // The attacker, at 127.0.0.2: connections that never speak, and TLS handshakes stopped half way, up to the
        // cap of its address.
        let mut held = Vec::new();
        for i in 0..8 {
            let mut stream = connect([127, 0, 0, 2], demo.address).await;
            if i % 2 == 1 {
                stream.write_all(HALF_A_HELLO).await.unwrap();
            }
            held.push(stream);
        }
        // Each is counted once the server has accepted it (soon, but later on a loaded machine).
        let counting = Instant::now();
        while connections.open() < 8 && counting.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(connections.open(), 8);
        // One more from that address, to either endpoint, is closed as soon as it is accepted.
        for endpoint in [&demo, &acme] {
            let over = connect([127, 0, 0, 2], endpoint.address).await;
            let closed = closed_after(over, Duration::from_millis(500)).await;
            assert!(closed.is_some(), "a connection over the address's cap is refused");
        }
        // Meanwhile the tenants' API servers, elsewhere, are served.
        let answer = healthz(&demo, [127, 0, 0, 3]).await.expect("a proper client served");
        assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("ok\n"), "{answer:?}");
        assert!(healthz(&acme, [127, 0, 0, 4]).await.is_some_and(|a| a.starts_with("HTTP/1.1 200")));

        // Every held connection is closed within the handshake deadline (with slack for a loaded machine).
        let waits = futures_util::future::join_all(held.into_iter().map(|s| closed_after(s, Duration::from_secs(5))));
        for (i, waited) in waits.await.into_iter().enumerate() {
            let waited = waited.unwrap_or_else(|| panic!("connection {i} still open after 5 s"));
            assert!(waited < Duration::from_secs(3), "connection {i} held for {waited:?}");
        }
        // The address is served again once its connections are gone.
        assert!(healthz(&demo, [127, 0, 0, 2]).await.is_some_and(|a| a.starts_with("HTTP/1.1 200")));

        // A client that completes the handshake, then says nothing, is closed once idle.
        let tcp = connect([127, 0, 0, 5], demo.address).await;
        let connector = tokio_rustls::TlsConnector::from(demo.client.clone());
        let name = rustls::pki_types::ServerName::IpAddress(demo.address.ip().into());
        let mut quiet = connector.connect(name, tcp).await.unwrap();
        let began = Instant::now();
        let mut buffer = [0u8; 64];
        let read = tokio::time::timeout(Duration::from_secs(5), quiet.read(&mut buffer)).await;
        assert!(matches!(read, Ok(Ok(0) | Err(_))), "an idle connection is closed: {read:?}");
        assert!(began.elapsed() < Duration::from_secs(3), "closed after {:?}", began.elapsed());

        let closed = connections.closed();
        assert_eq!(closed.over_cap, 2, "{closed:?}");
        assert_eq!(closed.handshake_timeout, 8, "{closed:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(connections.open(), 0, "every slot given back");
    }

    /// A management API server that answers every upgrade `101` with SPDY's headers, tells what it was asked, and
    /// echoes the stream's bytes back with each byte plus one: no WebSocket, no SPDY, just bytes.
    async fn management() -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<(String, hyper::HeaderMap)>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let (asked, told) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await.unwrap();
                let asked = asked.clone();
                let service = hyper::service::service_fn(move |mut request: Request<hyper::body::Incoming>| {
                    let line = format!("{} {}", request.method(), request.uri());
                    asked.send((line, request.headers().clone())).unwrap();
                    let upgrade = hyper::upgrade::on(&mut request);
                    tokio::spawn(async move {
                        let mut stream = hyper_util::rt::TokioIo::new(upgrade.await.unwrap());
                        let mut buffer = [0u8; 1024];
                        loop {
                            let read = stream.read(&mut buffer).await.unwrap_or(0);
                            if read == 0 {
                                return;
                            }
                            let answer: Vec<u8> = buffer[..read].iter().map(|b| b.wrapping_add(1)).collect();
                            stream.write_all(&answer).await.unwrap();
                        }
                    });
                    let mut response = Response::new(http_body_util::Empty::<Bytes>::new());
                    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
                    let headers = response.headers_mut();
                    headers.insert("connection", "Upgrade".parse().unwrap());
                    headers.insert("upgrade", "SPDY/3.1".parse().unwrap());
                    headers.insert("x-stream-protocol-version", "v4.channel.k8s.io".parse().unwrap());
                    async move { Ok::<_, std::convert::Infallible>(response) }
                });
                let io = hyper_util::rt::TokioIo::new(tcp);
                tokio::spawn(hyper::server::conn::http1::Builder::new().serve_connection(io, service).with_upgrades());
            }
        });
        (address, told)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stream_goes_on_as_the_syncer_with_its_upgrade_headers_and_its_bytes_both_ways_holding_a_slot() {
        let (address, mut told) = management().await;
        let config = kube::Config::new(format!("http://{address}").parse().unwrap());
        let (syncer, _) = crate::Syncer::for_tests(kube::Client::try_from(config).unwrap(), crate::Options::default());
        let syncer = Arc::new(syncer);
        let connections = Connections::new(Limits::default());
        let endpoint = endpoint_with(connections.clone(), move |request| {
            let syncer = syncer.clone();
            async move {
                let target = streams::Target {
                    super_namespace: "demo-1-default".into(),
                    pod: "web".into(),
                    container: Some("c".into()),
                };
                streams::proxy(&syncer, streams::Kind::Exec, &target, request).await
            }
        })
        .await;
        let tcp = connect([127, 0, 0, 6], endpoint.address).await;
        let connector = tokio_rustls::TlsConnector::from(endpoint.client.clone());
        let name = rustls::pki_types::ServerName::IpAddress(endpoint.address.ip().into());
        let mut tls = connector.connect(name, tcp).await.unwrap();
        // SPDY's POST, as kubectl's fallback sends it, with what the tenant's API server must not pass on.
        let request = "POST /exec/default/web/c?command=sh&input=1&output=1&container=other HTTP/1.1\r\n\
                       host: kubelet\r\nconnection: Upgrade\r\nupgrade: SPDY/3.1\r\n\
                       x-stream-protocol-version: v4.channel.k8s.io\r\nx-stream-protocol-version: v3.channel.k8s.io\r\n\
                       impersonate-user: system:admin\r\nauthorization: Bearer stolen\r\ncontent-length: 0\r\n\r\n";
        tls.write_all(request.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            assert_eq!(tls.read(&mut byte).await.unwrap(), 1, "{}", String::from_utf8_lossy(&head));
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).to_lowercase();
        assert!(head.starts_with("http/1.1 101"), "{head}");
        assert!(head.contains("upgrade: spdy/3.1") && head.contains("x-stream-protocol-version: v4.channel.k8s.io"));

        let (line, headers) = told.recv().await.unwrap();
        assert_eq!(
            line,
            "POST /api/v1/namespaces/demo-1-default/pods/web/exec?container=c&command=sh&stdin=true&stdout=true"
        );
        assert_eq!(headers.get_all("x-stream-protocol-version").iter().count(), 2);
        assert_eq!(headers.get("upgrade").unwrap(), "SPDY/3.1");
        assert!(headers.get("impersonate-user").is_none() && headers.get("authorization").is_none(), "{headers:?}");

        // Bytes of no protocol at all, both ways.
        tls.write_all(&[0x80, 0x03, 0x00, 0x01, b'a']).await.unwrap();
        let mut echoed = [0u8; 5];
        tls.read_exact(&mut echoed).await.unwrap();
        assert_eq!(echoed, [0x81, 0x04, 0x01, 0x02, b'b']);
        assert_eq!(connections.open(), 1, "the stream holds its connection's slot");
        drop(tls);
        let closing = Instant::now();
        while connections.open() > 0 && closing.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(connections.open(), 0, "the slot given back when the client closes");
    }
}

#[cfg(test)]
mod ownership {
    //! Which pod a path reaches, by the syncer's records: only the copy of the calling tenant's own pod.

    use std::sync::Arc;

    use kube::api::DynamicObject;
    use kube::runtime::watcher;
    use serde_json::json;

    use super::owned_pod;
    use crate::names::{self, TENANT_LABEL, TENANT_NAME, TENANT_NAMESPACE, TENANT_UID};
    use crate::tenants::Tenant;
    use crate::{Options, Syncer};

    fn object(value: serde_json::Value) -> DynamicObject {
        serde_json::from_value(value).expect("an object")
    }

    /// A super pod `namespace/name` with the syncer's marks for tenant `key`'s pod `tenant_namespace/name` of `uid`.
    fn copy(namespace: &str, name: &str, key: &str, tenant_namespace: &str, uid: &str) -> DynamicObject {
        object(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": {TENANT_LABEL: key},
                         "annotations": {TENANT_NAMESPACE: tenant_namespace, TENANT_NAME: name, TENANT_UID: uid}},
        }))
    }

    #[tokio::test]
    async fn only_the_copy_of_the_callers_own_pod_is_reached() {
        let client = || kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
        let (syncer, mut super_writers) = Syncer::for_tests(client(), Options::default());
        let (demo, mut demo_writers) = Tenant::for_tests(&syncer, "demo-1", client());
        let (acme, mut acme_writers) = Tenant::for_tests(&syncer, "acme-2", client());
        let pods = syncer.find_kind("pods").unwrap();
        let tenant_pod = |writers: &mut [kube::runtime::reflector::store::Writer<DynamicObject>], name, uid| {
            let pod = object(json!({"apiVersion": "v1", "kind": "Pod",
                                    "metadata": {"name": name, "namespace": "default", "uid": uid}}));
            writers[pods.index()].apply_watcher_event(&watcher::Event::Apply(pod));
        };
        tenant_pod(&mut demo_writers, "web", "demo-uid");
        tenant_pod(&mut demo_writers, "stale", "demo-uid-new");
        tenant_pod(&mut demo_writers, "twin", "demo-twin");
        tenant_pod(&mut acme_writers, "victim", "acme-uid");
        tenant_pod(&mut acme_writers, "twin", "acme-twin");
        let (demo_default, acme_default) =
            (names::super_namespace("demo-1", "default"), names::super_namespace("acme-2", "default"));
        for pod in [
            copy(&demo_default, "web", "demo-1", "default", "demo-uid"),
            // A pod deleted and made again by the tenant: the copy is of the old one until the syncer replaces it.
            copy(&demo_default, "stale", "demo-1", "default", "demo-uid-old"),
            copy(&demo_default, "twin", "demo-1", "default", "demo-twin"),
            copy(&acme_default, "victim", "acme-2", "default", "acme-uid"),
            copy(&acme_default, "twin", "acme-2", "default", "acme-twin"),
        ] {
            super_writers[pods.index()].apply_watcher_event(&watcher::Event::Apply(pod));
        }
        {
            let mut tenants = syncer.tenants.write().unwrap();
            tenants.insert("demo-1".into(), Arc::new(demo));
            tenants.insert("acme-2".into(), Arc::new(acme));
        }
        assert_eq!(owned_pod(&syncer, "demo-1", "default", "web"), Some(demo_default.clone()));
        assert_eq!(owned_pod(&syncer, "demo-1", "default", "twin"), Some(demo_default.clone()));
        assert_eq!(owned_pod(&syncer, "acme-2", "default", "twin"), Some(acme_default.clone()));
        for (key, namespace, pod) in [
            // Another tenant's pod, by its name and by its super namespace.
            ("demo-1", "default", "victim"),
            ("demo-1", acme_default.as_str(), "victim"),
            // Demo's own pod named by its super namespace.
            ("demo-1", demo_default.as_str(), "web"),
            // A copy of another pod of that name than the tenant has now.
            ("demo-1", "default", "stale"),
            // A pod the tenant does not have, and a tenant the syncer does not serve.
            ("demo-1", "default", "gone"),
            ("other-3", "default", "web"),
        ] {
            assert_eq!(owned_pod(&syncer, key, namespace, pod), None, "{key}: {namespace}/{pod}");
        }
    }
}
