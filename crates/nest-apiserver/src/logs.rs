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

/// The query parameters of `PodLogOptions` the kubelet takes, read and checked as kube-apiserver reads them
/// (`ValidatePodLogOptions`, 1.33): a value that does not parse is a 400; a number out of its range, or both
/// `sinceSeconds` and `sinceTime`, a 422 for the kind `PodLogOptions` named after the pod, before the pod is looked
/// up. What goes on to the kubelet is written again from the parsed values, never copied from the request.
fn log_options(name: &str, query: &impl Fn(&str) -> Option<String>) -> Result<Vec<String>> {
    use nest_registry::error::Cause;
    let mut passed = Vec::new();
    for key in ["follow", "timestamps", "previous"] {
        if let Some(value) = query(key) {
            // strconv.ParseBool's spellings.
            let flag = match value.as_str() {
                "1" | "t" | "T" | "true" | "TRUE" | "True" => true,
                "0" | "f" | "F" | "false" | "FALSE" | "False" => false,
                other => {
                    return Err(ApiError::bad_request(format!("strconv.ParseBool: parsing {other:?}: invalid syntax")));
                }
            };
            passed.push(format!("{key}={flag}"));
        }
    }
    let mut causes = Vec::new();
    let mut numbers = Vec::new();
    for (key, least, message) in [
        ("tailLines", 0, "must be greater than or equal to 0"),
        ("sinceSeconds", 1, "must be greater than 0"),
        ("limitBytes", 1, "must be greater than 0"),
    ] {
        let Some(value) = query(key) else { continue };
        let number = value.parse::<i64>().map_err(|e| {
            let why = if matches!(e.kind(), std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow) {
                "value out of range"
            } else {
                "invalid syntax"
            };
            ApiError::bad_request(format!("strconv.ParseInt: parsing {value:?}: {why}"))
        })?;
        numbers.push((key, number));
        if number < least {
            causes.push(Cause::invalid(key, format!("Invalid value: {number}: {message}")));
        }
    }
    let since_time = match query("sinceTime") {
        Some(text) => Some(text.parse::<jiff::Timestamp>().map_err(|_| {
            ApiError::bad_request(format!("parsing time {text:?} as \"2006-01-02T15:04:05Z07:00\": cannot parse"))
        })?),
        None => None,
    };
    if since_time.is_some() && numbers.iter().any(|(key, _)| *key == "sinceSeconds") {
        causes.retain(|c| c.field != "sinceSeconds");
        causes.push(Cause {
            reason: "FieldValueForbidden",
            message: "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified".into(),
            field: "[]".into(),
        });
    }
    if !causes.is_empty() {
        return Err(ApiError::invalid_kind("", "PodLogOptions", name, causes));
    }
    passed.extend(numbers.into_iter().map(|(key, number)| format!("{key}={number}")));
    if let Some(time) = since_time {
        passed.push(format!("sinceTime={}", time.strftime("%Y-%m-%dT%H:%M:%SZ")));
    }
    Ok(passed)
}

/// Which container of `pod` the request means (`LogLocation` and `streamLocation` choose alike).
pub(crate) fn container(pod: &Value, asked: Option<&str>) -> Result<String> {
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
    let passed = log_options(name, &query)?;
    let pods = registry.resource("", "v1", "pods").expect("pods are built in");
    let pod = registry.get(&pods, namespace, name).await?;
    let container = container(&pod, query("container").as_deref())?;
    let kubelet = Kubelet::of(registry, &pod, "the logs of").await?;
    let mut path = format!("/containerLogs/{namespace}/{name}/{container}");
    if !passed.is_empty() {
        path = format!("{path}?{}", passed.join("&"));
    }
    let mut sender = kubelet.connect(tls).await?;
    let request = hyper::Request::get(path)
        .header("host", kubelet.host())
        .body(http_body_util::Empty::<Bytes>::new())
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let response = sender.send_request(request).await.map_err(|e| kubelet.unreachable(&e))?;
    let status = response.status();
    if status != StatusCode::OK {
        // An error's text is short; a node that sends more is cut off at 64 KiB.
        let limited = http_body_util::Limited::new(response.into_body(), 64 << 10);
        let text = limited.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        let message = String::from_utf8_lossy(&text).trim().to_string();
        return Err(match status {
            StatusCode::BAD_REQUEST => ApiError::bad_request(message),
            _ => ApiError::service_unavailable(format!("node {} answered {status}: {message}", kubelet.node)),
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

/// The kubelet API of the node a pod is bound to: its InternalIP and `status.daemonEndpoints.kubeletEndpoint.Port`.
pub(crate) struct Kubelet {
    /// The node's name.
    pub node: String,
    address: std::net::IpAddr,
    port: u16,
}

impl Kubelet {
    /// The kubelet of `pod`'s node; `what` says what was wanted of it for the error (`the logs of`).
    pub async fn of(registry: &Registry, pod: &Value, what: &str) -> Result<Kubelet> {
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        let nodes = registry.resource("", "v1", "nodes").expect("nodes are built in");
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
        // A port the kubelet could have registered: 1 to 65535, never truncated into range. An address must be one
        // a kubelet can listen on (not unspecified, multicast or broadcast).
        let port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p > 0);
        let address = address.filter(|a| {
            !a.is_unspecified() && !a.is_multicast() && *a != std::net::IpAddr::V4(std::net::Ipv4Addr::BROADCAST)
        });
        let (Some(address), Some(port)) = (address, port) else {
            return Err(ApiError::service_unavailable(format!(
                "node {node_name} does not serve the kubelet API, so {what} pod {name} cannot be reached"
            )));
        };
        Ok(Kubelet { node: node_name.to_string(), address, port })
    }

    /// The `Host` header of a request to it.
    pub fn host(&self) -> String {
        std::net::SocketAddr::new(self.address, self.port).to_string()
    }

    /// The error for a kubelet that did not answer.
    pub fn unreachable(&self, error: &dyn std::fmt::Display) -> ApiError {
        ApiError::service_unavailable(format!(
            "the kubelet API of node {} ({}): {error}",
            self.node,
            std::net::SocketAddr::new(self.address, self.port)
        ))
    }

    /// An HTTP/1.1 connection to it over TLS (the node's certificate checked against the cluster CA, this server
    /// presenting its kubelet-client certificate); upgrades allowed.
    pub async fn connect(
        &self,
        tls: Arc<rustls::ClientConfig>,
    ) -> Result<hyper::client::conn::http1::SendRequest<http_body_util::Empty<Bytes>>> {
        let tcp = tokio::net::TcpStream::connect((self.address, self.port)).await.map_err(|e| self.unreachable(&e))?;
        let connector = tokio_rustls::TlsConnector::from(tls);
        let server = ServerName::IpAddress(self.address.into());
        let stream = connector.connect(server, tcp).await.map_err(|e| self.unreachable(&e))?;
        let (sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| self.unreachable(&e))?;
        tokio::spawn(connection.with_upgrades());
        Ok(sender)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(query: &[(&str, &str)]) -> Result<Vec<String>> {
        let query: Vec<(String, String)> = query.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        log_options("web", &|key: &str| query.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()))
    }

    #[test]
    fn log_options_are_passed_on_as_parsed() {
        let passed = options(&[("follow", "1"), ("tailLines", "0"), ("sinceSeconds", &i64::MAX.to_string())]).unwrap();
        assert_eq!(passed, ["follow=true", "tailLines=0", format!("sinceSeconds={}", i64::MAX).as_str()]);
        // Nothing the client wrote reaches the kubelet's query unread.
        let passed = options(&[("limitBytes", "+5"), ("sinceTime", "2026-12-04T10:00:00Z")]).unwrap();
        assert_eq!(passed, ["limitBytes=5", "sinceTime=2026-12-04T10:00:00Z"]);
    }

    #[test]
    fn log_options_out_of_range_are_upstreams_422_for_pod_log_options() {
        let error = options(&[("sinceSeconds", "-5")]).unwrap_err();
        assert_eq!((error.code, error.reason), (422, "Invalid"));
        assert_eq!(
            error.message,
            "PodLogOptions \"web\" is invalid: sinceSeconds: Invalid value: -5: must be greater than 0"
        );
        assert_eq!(error.details.kind.as_deref(), Some("PodLogOptions"));
        assert_eq!(error.details.name.as_deref(), Some("web"));
        let error = options(&[("tailLines", "-1"), ("limitBytes", "0")]).unwrap_err();
        assert_eq!(
            error.message,
            "PodLogOptions \"web\" is invalid: [tailLines: Invalid value: -1: must be greater than or equal to 0, \
             limitBytes: Invalid value: 0: must be greater than 0]"
        );
        let error = options(&[("sinceSeconds", "5"), ("sinceTime", "2026-12-04T10:00:00Z")]).unwrap_err();
        assert_eq!(
            error.message,
            "PodLogOptions \"web\" is invalid: []: Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"
        );
    }

    #[test]
    fn log_options_that_do_not_parse_are_400s() {
        for (key, value, message) in [
            (
                "sinceSeconds",
                "9223372036854775808",
                "strconv.ParseInt: parsing \"9223372036854775808\": value out of range",
            ),
            ("tailLines", "ten", "strconv.ParseInt: parsing \"ten\": invalid syntax"),
            ("follow", "yes", "strconv.ParseBool: parsing \"yes\": invalid syntax"),
        ] {
            let error = options(&[(key, value)]).unwrap_err();
            assert_eq!((error.code, error.message.as_str()), (400, message), "{key}={value}");
        }
        assert_eq!(options(&[("sinceTime", "yesterday")]).unwrap_err().code, 400);
    }
}
