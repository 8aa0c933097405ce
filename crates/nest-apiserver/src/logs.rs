//! `GET pods/<name>/log`: the container is chosen as kube-apiserver chooses it (`pkg/registry/core/pod/strategy.go`,
//! `LogLocation`, 1.33), then the request goes to the kubelet API of the pod's node (its InternalIP and
//! `status.daemonEndpoints.kubeletEndpoint.Port`) over HTTPS — the node's certificate checked against the cluster CA,
//! this server presenting its `kube-apiserver-kubelet-client` certificate — and the answer is streamed back as it
//! comes, so `kubectl logs -f` follows.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::{Response, StatusCode};
use hyper_util::rt::TokioIo;
use nest_registry::{ApiError, Registry, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::Value;

use crate::handler::Body;

/// The TLS client this server calls kubelets with.
pub fn kubelet_client(pki: &crate::certs::Pki) -> anyhow::Result<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(pki.ca_cert.as_bytes())?)?;
    let chain = vec![CertificateDer::from_pem_slice(pki.kubelet_client_cert.as_bytes())?];
    let key = PrivateKeyDer::from_pem_slice(pki.kubelet_client_key.as_bytes())?;
    let mut config = rustls::ClientConfig::builder().with_root_certificates(roots).with_client_auth_cert(chain, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// The query parameters `PodLogOptions` has that the kubelet takes.
const PASSED_ON: &[&str] = &["follow", "tailLines", "sinceSeconds", "timestamps", "previous", "limitBytes"];

/// Which container of `pod` the request means.
fn container(pod: &Value, asked: Option<&str>) -> Result<String> {
    let name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let names = |field: &str| -> Vec<String> {
        pod["spec"][field]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["name"].as_str().map(str::to_string))
            .collect()
    };
    let (containers, others) = (names("containers"), [names("initContainers"), names("ephemeralContainers")].concat());
    match asked.filter(|c| !c.is_empty()) {
        Some(asked) if containers.iter().chain(&others).any(|c| c == asked) => Ok(asked.to_string()),
        Some(asked) => Err(ApiError::bad_request(format!("container {asked} is not valid for pod {name}"))),
        None => {
            let default = pod["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"].as_str();
            if let Some(default) = default.filter(|d| containers.iter().any(|c| c == d)) {
                return Ok(default.to_string());
            }
            match containers.as_slice() {
                [only] => Ok(only.clone()),
                _ => Err(ApiError::bad_request(format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    containers.join(" ")
                ))),
            }
        }
    }
}

/// Answers `GET pods/<name>/log` with the kubelet's answer.
pub async fn pod_log(
    registry: &Registry,
    tls: Arc<rustls::ClientConfig>,
    namespace: &str,
    name: &str,
    query: impl Fn(&str) -> Option<String>,
) -> Result<Response<Body>> {
    let pods = registry.resource("", "v1", "pods").expect("pods are built in");
    let nodes = registry.resource("", "v1", "nodes").expect("nodes are built in");
    let pod = registry.get(&pods, namespace, name).await?;
    let container = container(&pod, query("container").as_deref())?;
    let node_name = pod["spec"]["nodeName"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ApiError::bad_request(format!("pod {name} does not have a host assigned")))?;
    let node = registry.get(&nodes, "", node_name).await?;
    let address = node["status"]["addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["type"] == "InternalIP")
        .and_then(|a| a["address"].as_str())
        .and_then(|a| a.parse::<std::net::IpAddr>().ok());
    // A port the kubelet could have registered: 1 to 65535, never truncated into range. An address must be one a
    // kubelet can listen on (not unspecified, multicast or broadcast).
    let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p > 0);
    let address = address.filter(|a| {
        !a.is_unspecified() && !a.is_multicast() && *a != std::net::IpAddr::V4(std::net::Ipv4Addr::BROADCAST)
    });
    let (Some(address), Some(port)) = (address, port) else {
        return Err(ApiError::service_unavailable(format!(
            "node {node_name} does not serve the kubelet API, so the logs of pod {name} cannot be read"
        )));
    };
    let mut path = format!("/containerLogs/{namespace}/{name}/{container}");
    let passed: Vec<String> =
        PASSED_ON.iter().filter_map(|key| query(key).map(|value| format!("{key}={value}"))).collect();
    if !passed.is_empty() {
        path = format!("{path}?{}", passed.join("&"));
    }
    let unreachable = |error: &dyn std::fmt::Display| {
        ApiError::service_unavailable(format!("the kubelet API of node {node_name} ({address}:{port}): {error}"))
    };
    let tcp = tokio::net::TcpStream::connect((address, port)).await.map_err(|e| unreachable(&e))?;
    let connector = tokio_rustls::TlsConnector::from(tls);
    let stream = connector.connect(ServerName::IpAddress(address.into()), tcp).await.map_err(|e| unreachable(&e))?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| unreachable(&e))?;
    tokio::spawn(connection);
    let request = hyper::Request::get(path)
        .header("host", format!("{address}:{port}"))
        .body(http_body_util::Empty::<Bytes>::new())
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let response = sender.send_request(request).await.map_err(|e| unreachable(&e))?;
    let status = response.status();
    if status != StatusCode::OK {
        let text = response.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        let message = String::from_utf8_lossy(&text).trim().to_string();
        return Err(match status {
            StatusCode::BAD_REQUEST => ApiError::bad_request(message),
            _ => ApiError::service_unavailable(format!("node {node_name} answered {status}: {message}")),
        });
    }
    let body = futures_util::stream::unfold(response.into_body(), |mut body| async move {
        loop {
            match body.frame().await? {
                Ok(frame) => match frame.into_data() {
                    Ok(data) => return Some((Ok(Frame::data(data)), body)),
                    Err(_) => continue,
                },
                Err(_) => return None,
            }
        }
    });
    let mut reply = Response::new(BodyExt::boxed_unsync(StreamBody::new(body)));
    reply.headers_mut().insert("content-type", "text/plain".parse().expect("a header value"));
    Ok(reply)
}
