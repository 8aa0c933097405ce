//! What one client can take of a real `nest apiserver` (issue 18): an idle TLS connection is closed after the idle
//! timeout, connections beyond the cap are refused while a connected client goes on being served, and a user over its
//! in-flight limit gets 429 while another user's requests succeed; and (issue 33) a body over `--max-request-bytes`
//! gets 413, a watch older than `--default-watch-cache-size` changes 410. Raw TLS and HTTP/1.1 from here
//! (tokio-rustls, hyper), so what is measured is the server's doing, not a client's retries.

use crate::common;

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::Server;
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// The server's `127.0.0.1:port`, from its kubeconfig.
fn address(server: &Server) -> String {
    let kubeconfig = std::fs::read_to_string(&server.kubeconfig).unwrap();
    let url = kubeconfig.lines().find_map(|l| l.trim().strip_prefix("server: ")).unwrap();
    url.trim_start_matches("https://").to_string()
}

/// A TLS client that trusts the server's CA.
fn tls(server: &Server) -> tokio_rustls::TlsConnector {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let ca = std::fs::read(server.data_dir().join("pki/ca.crt")).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(&ca).unwrap()).unwrap();
    let mut config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

async fn connect(server: &Server) -> tokio_rustls::client::TlsStream<TcpStream> {
    let tcp = TcpStream::connect(address(server)).await.unwrap();
    tls(server).connect(ServerName::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()), tcp).await.unwrap()
}

/// One GET over a new connection with a bearer token: the status and the `Retry-After` header.
async fn get(server: &Server, token: &str, path: &str) -> (u16, Option<String>) {
    let stream = connect(server).await;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let request = hyper::Request::get(path)
        .header("host", address(server))
        .header("authorization", format!("Bearer {token}"))
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let retry = response.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
    let status = response.status().as_u16();
    let _ = response.into_body().collect().await;
    (status, retry)
}

fn tokens() -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    writeln!(file, "alice-token,alice,1,\"tenants\"\nbob-token,bob,2,\"tenants\"").unwrap();
    file
}

/// Lets the token users (group `tenants`) read everything, as the tests' requests need under RBAC.
fn let_tenants_read(server: &Server) {
    server.ok(&["create", "clusterrolebinding", "tenants-view", "--clusterrole=view", "--group=tenants"]);
}

fn metrics(server: &Server) -> String {
    server.ok(&["get", "--raw", "/metrics"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_tls_connection_is_closed_after_the_idle_timeout() {
    let server = Server::start_with(&["--idle-timeout", "1s", "--tls-handshake-timeout", "1s"]);
    // A connection that never starts its TLS handshake is closed after the handshake timeout.
    let mut silent = TcpStream::connect(address(&server)).await.unwrap();
    let began = Instant::now();
    let mut buffer = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(10), silent.read(&mut buffer)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "the silent connection was not closed: {read:?}");
    assert!(began.elapsed() >= Duration::from_millis(900), "closed before the handshake timeout");
    let mut stream = connect(&server).await;
    let began = Instant::now();
    let mut buffer = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buffer)).await;
    let closed_after = began.elapsed();
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "the idle connection was not closed: {read:?}");
    assert!(closed_after >= Duration::from_millis(900), "closed before the idle timeout: {closed_after:?}");
    let metrics = metrics(&server);
    assert!(metrics.contains("nest_apiserver_connections_closed_total{reason=\"idle\"} 1"), "{metrics}");
    assert!(metrics.contains("nest_apiserver_connections_closed_total{reason=\"handshake_timeout\"} 1"), "{metrics}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_are_refused_while_a_connected_client_is_served() {
    let tokens = tokens();
    let file = tokens.path().to_str().unwrap();
    let server =
        Server::start_with(&["--max-connections", "20", "--tls-handshake-timeout", "30s", "--token-auth-file", file]);
    let_tenants_read(&server);
    // A client connected before the flood keeps its connection and is served throughout.
    let stream = connect(&server).await;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    // 1,019 more connections: 19 fit under the cap, the other 1,000 are closed at once.
    let mut flood = Vec::new();
    for _ in 0..1019 {
        flood.push(TcpStream::connect(address(&server)).await.unwrap());
    }
    let mut refused = 0;
    for stream in &mut flood {
        let mut buffer = [0u8; 1];
        if let Ok(Ok(0)) = tokio::time::timeout(Duration::from_millis(200), stream.read(&mut buffer)).await {
            refused += 1;
        }
    }
    assert_eq!(refused, 1000, "connections beyond the cap of 20 closed at once");
    // The connected, authenticated client is served during the flood.
    for _ in 0..3 {
        sender.ready().await.unwrap();
        let request = hyper::Request::get("/api/v1/namespaces")
            .header("host", address(&server))
            .header("authorization", "Bearer alice-token")
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(response.status(), 200);
        let _ = response.into_body().collect().await;
    }
    drop(flood);
    // Once the flood is gone, new clients get in again, and the refusals were counted.
    let mut counted = String::new();
    common::eventually(30, "a new client served after the flood", || {
        let out = server.kubectl(&["get", "--raw", "/metrics"]);
        counted = String::from_utf8_lossy(&out.stdout).into_owned();
        out.status.success()
    });
    assert!(counted.contains("nest_apiserver_connections_closed_total{reason=\"cap\"} 1000"), "{counted}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_over_its_in_flight_limit_gets_429_while_another_is_served() {
    let tokens = tokens();
    let server = Server::start_with(&[
        "--max-requests-inflight-per-user",
        "2",
        "--token-auth-file",
        tokens.path().to_str().unwrap(),
    ]);
    let_tenants_read(&server);
    // Two of alice's requests that take a second each: lists at a resourceVersion the server has not reached.
    let slow = "/api/v1/configmaps?resourceVersion=999999999";
    let slow_pair = async { tokio::join!(get(&server, "alice-token", slow), get(&server, "alice-token", slow)) };
    let meanwhile = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let third = get(&server, "alice-token", "/api/v1/namespaces").await;
        let bob = get(&server, "bob-token", "/api/v1/namespaces").await;
        (third, bob)
    };
    let (((a, _), (b, _)), ((status, retry), (bob, _))) = tokio::join!(slow_pair, meanwhile);
    assert_eq!((status, retry.as_deref()), (429, Some("1")), "alice's third request");
    assert_eq!(bob, 200, "bob is served while alice is at her limit");
    assert_eq!((a, b), (504, 504), "the slow lists ended as kube-apiserver ends them");
    // Her slots are free again.
    assert_eq!(get(&server, "alice-token", "/api/v1/namespaces").await.0, 200);
    assert!(metrics(&server).contains("nest_apiserver_rejected_requests_total{reason=\"per-user-inflight\"} 1"));
}

/// `apiserver_request_total` counts answers by verb, resource and code as kube-apiserver names them, and paths the
/// server does not serve add no series: a client asking for a thousand made-up resources grows nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_are_counted_by_verb_resource_and_code_and_made_up_paths_add_no_series() {
    let tokens = tokens();
    let server = Server::start_with(&["--token-auth-file", tokens.path().to_str().unwrap()]);
    let_tenants_read(&server);
    server.ok(&["create", "configmap", "counted", "--from-literal=a=b"]);
    server.ok(&["get", "configmaps"]);
    server.ok(&["get", "configmap", "counted"]);
    assert!(!server.kubectl(&["get", "configmap", "missing"]).status.success());
    server.ok(&["delete", "configmap", "counted"]);
    let counted = |metrics: &str, labels: &str| {
        let prefix = format!("apiserver_request_total{{{labels}}} ");
        metrics.lines().find_map(|l| l.strip_prefix(prefix.as_str())).map(|n| n.parse::<u64>().unwrap())
    };
    let series = |metrics: &str| metrics.lines().filter(|l| l.starts_with("apiserver_request_total{")).count();
    let before = metrics(&server);
    assert_eq!(counted(&before, r#"verb="POST",resource="configmaps",code="201""#), Some(1), "{before}");
    assert!(counted(&before, r#"verb="LIST",resource="configmaps",code="200""#) >= Some(1), "{before}");
    assert!(counted(&before, r#"verb="GET",resource="configmaps",code="200""#) >= Some(1), "{before}");
    assert!(counted(&before, r#"verb="GET",resource="configmaps",code="404""#) >= Some(1), "{before}");
    assert_eq!(counted(&before, r#"verb="DELETE",resource="configmaps",code="200""#), Some(1), "{before}");
    // A thousand made-up resources and names, as a user allowed to read: not one new series for them.
    let (status, _) = get(&server, "bob-token", "/apis/made.up/v1/namespaces/default/things0/x").await;
    assert_eq!(status, 404);
    let one = metrics(&server);
    for i in 1..1000 {
        let (status, _) =
            get(&server, "bob-token", &format!("/apis/made.up/v{i}/namespaces/ns{i}/things{i}/x{i}")).await;
        assert_eq!(status, 404);
    }
    let after = metrics(&server);
    assert_eq!(series(&after), series(&one), "{after}");
    let unserved = r#"verb="GET",resource="",code="404""#;
    assert_eq!(counted(&after, unserved), counted(&one, unserved).map(|n| n + 999), "{after}");
}

/// The caps a NestedControlPlane sets on its tenant's API server (issue 33), as flags: a body over
/// `--max-request-bytes` is a 413 `Status` in kube-apiserver's words, and a watch from before the changes
/// `--default-watch-cache-size` keeps is one ERROR event, 410 "too old resource version".
#[test]
fn the_request_body_limit_and_the_watch_cache_size_are_the_flags() {
    let server = Server::start_with(&["--max-request-bytes", "2048", "--default-watch-cache-size", "2"]);
    let configmap = |name: &str, size: usize| {
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                           "data": {"k": "x".repeat(size)}})
    };
    let (code, answer) = server.post_raw("/api/v1/namespaces/default/configmaps", &configmap("big", 4096));
    assert_eq!(code, 413, "{answer}");
    let status: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert_eq!((status["kind"].as_str(), status["reason"].as_str()), (Some("Status"), Some("RequestEntityTooLarge")));
    assert_eq!(status["message"], "Request entity too large: limit is 2048");
    assert_eq!(server.post_raw("/api/v1/namespaces/default/configmaps", &configmap("small", 1024)).0, 201);

    // The cache is built and current; then four changes, of which it keeps two.
    server.ok(&["get", "configmaps"]);
    let first = server.json(&["create", "configmap", "w0"]);
    for name in ["w1", "w2", "w3"] {
        server.ok(&["create", "configmap", name]);
    }
    server.ok(&["get", "configmaps"]);
    let rv = first["metadata"]["resourceVersion"].as_str().unwrap();
    let watch = format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={rv}&timeoutSeconds=10");
    let event: serde_json::Value = serde_json::from_str(server.ok(&["get", "--raw", &watch]).trim()).unwrap();
    assert_eq!(event["type"], "ERROR", "{event}");
    assert_eq!((event["object"]["code"].as_i64(), event["object"]["reason"].as_str()), (Some(410), Some("Expired")));
    let message = event["object"]["message"].as_str().unwrap();
    assert!(message.starts_with(&format!("too old resource version: {rv} (")), "{message}");
}
