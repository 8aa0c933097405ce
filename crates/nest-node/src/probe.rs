//! Container probes as the kubelet runs them (`pkg/kubelet/prober`, 1.33): `httpGet` (HTTP or HTTPS, certificate not
//! verified, 200–399 passes), `tcpSocket` (a connection passes) and `exec` (exit code 0 passes), each after
//! `initialDelaySeconds`, every `periodSeconds`, within `timeoutSeconds`, with `successThreshold` and
//! `failureThreshold` counting consecutive results.
//!
//! An `exec` probe runs in the container's sandbox, as the container's own process does ([`Sandboxed::exec`]).

use crate::process::sandbox::Sandboxed;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Where probes go and what they may run.
#[derive(Clone, Debug, Default)]
pub struct Target {
    pub pod_ip: String,
    /// Where exec probes run.
    pub sandbox: Option<Arc<Sandboxed>>,
}

/// One probe, with the container's named ports resolved.
#[derive(Clone, Debug)]
pub struct Check {
    action: Action,
    initial_delay: Duration,
    period: Duration,
    timeout: Duration,
    success_threshold: u32,
    failure_threshold: u32,
}

#[derive(Clone, Debug)]
enum Action {
    Http {
        host: Option<String>,
        port: u16,
        path: String,
        https: bool,
        headers: Vec<(String, String)>,
    },
    Tcp {
        host: Option<String>,
        port: u16,
    },
    Exec {
        command: Vec<String>,
    },
    /// A probe nest cannot run (gRPC, or a named port the container does not declare): it always fails.
    Unsupported(String),
}

/// The startup, liveness and readiness probes of a container.
#[derive(Clone, Debug, Default)]
pub struct Probes {
    pub startup: Option<Check>,
    pub liveness: Option<Check>,
    pub readiness: Option<Check>,
}

impl Probes {
    pub fn of(container: &Container) -> Probes {
        let check = |p: &Option<Probe>| p.as_ref().map(|p| Check::new(p, container));
        Probes {
            startup: check(&container.startup_probe),
            liveness: check(&container.liveness_probe),
            readiness: check(&container.readiness_probe),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.startup.is_none() && self.liveness.is_none() && self.readiness.is_none()
    }
    pub fn has_startup(&self) -> bool {
        self.startup.is_some()
    }
    pub fn has_readiness(&self) -> bool {
        self.readiness.is_some()
    }
}

fn seconds(value: Option<i32>, default: u64) -> Duration {
    Duration::from_secs(value.and_then(|v| u64::try_from(v).ok()).filter(|v| *v > 0).unwrap_or(default))
}

fn port(port: &IntOrString, container: &Container) -> Result<u16, String> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).map_err(|_| format!("port {n} is out of range")),
        IntOrString::String(name) => container
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .and_then(|p| u16::try_from(p.container_port).ok())
            .ok_or_else(|| format!("the container has no port named {name:?}")),
    }
}

impl Check {
    fn new(probe: &Probe, container: &Container) -> Check {
        let action = if let Some(http) = &probe.http_get {
            match port(&http.port, container) {
                Ok(port) => Action::Http {
                    host: http.host.clone().filter(|h| !h.is_empty()),
                    port,
                    path: http.path.clone().filter(|p| !p.is_empty()).unwrap_or_else(|| "/".into()),
                    https: http.scheme.as_deref() == Some("HTTPS"),
                    headers: http.http_headers.iter().flatten().map(|h| (h.name.clone(), h.value.clone())).collect(),
                },
                Err(message) => Action::Unsupported(message),
            }
        } else if let Some(tcp) = &probe.tcp_socket {
            match port(&tcp.port, container) {
                Ok(port) => Action::Tcp { host: tcp.host.clone().filter(|h| !h.is_empty()), port },
                Err(message) => Action::Unsupported(message),
            }
        } else if let Some(exec) = &probe.exec {
            Action::Exec { command: exec.command.clone().unwrap_or_default() }
        } else {
            Action::Unsupported("gRPC probes are not supported".into())
        };
        Check {
            action,
            initial_delay: Duration::from_secs(probe.initial_delay_seconds.unwrap_or(0).max(0).unsigned_abs().into()),
            period: seconds(probe.period_seconds, 10),
            timeout: seconds(probe.timeout_seconds, 1),
            success_threshold: probe.success_threshold.unwrap_or(1).max(1).unsigned_abs(),
            failure_threshold: probe.failure_threshold.unwrap_or(3).max(1).unsigned_abs(),
        }
    }

    /// One attempt: `Ok` when the probe passes, else why not.
    pub async fn attempt(&self, target: &Target) -> Result<(), String> {
        match tokio::time::timeout(self.timeout, self.act(target)).await {
            Ok(result) => result,
            Err(_) => Err(format!("timed out after {:?}", self.timeout)),
        }
    }

    async fn act(&self, target: &Target) -> Result<(), String> {
        match &self.action {
            Action::Unsupported(message) => Err(message.clone()),
            Action::Tcp { host, port } => {
                let host = host.as_deref().unwrap_or(&target.pod_ip);
                tokio::net::TcpStream::connect((host, *port)).await.map(|_| ()).map_err(|e| e.to_string())
            }
            Action::Http { host, port, path, https, headers } => {
                let host = host.as_deref().unwrap_or(&target.pod_ip);
                let stream = tokio::net::TcpStream::connect((host, *port)).await.map_err(|e| e.to_string())?;
                let mut request = format!(
                    "GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUser-Agent: kube-probe/1.33\r\nAccept: */*\r\nConnection: close\r\n"
                );
                for (name, value) in headers {
                    request.push_str(&format!("{name}: {value}\r\n"));
                }
                request.push_str("\r\n");
                let head = if *https {
                    let connector = tokio_rustls::TlsConnector::from(Arc::new(insecure_tls()));
                    let name = tokio_rustls::rustls::pki_types::ServerName::try_from(host.to_string())
                        .map_err(|e| e.to_string())?;
                    let mut tls = connector.connect(name, stream).await.map_err(|e| e.to_string())?;
                    exchange(&mut tls, &request).await?
                } else {
                    let mut stream = stream;
                    exchange(&mut stream, &request).await?
                };
                let code: u16 =
                    head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).ok_or("not an HTTP response")?;
                if (200..400).contains(&code) {
                    Ok(())
                } else {
                    Err(format!("HTTP probe failed with statuscode: {code}"))
                }
            }
            Action::Exec { command } => {
                if command.is_empty() {
                    return Err("an exec probe needs a command".into());
                }
                let sandbox = target.sandbox.as_ref().ok_or("an exec probe needs a running container")?;
                let status = sandbox
                    .exec(command)
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .kill_on_drop(true)
                    .status()
                    .await
                    .map_err(|e| e.to_string())?;
                if status.success() { Ok(()) } else { Err(format!("command exited with {status}")) }
            }
        }
    }

    /// Probes until `successThreshold` passes in a row (true) or `failureThreshold` failures in a row (false).
    pub async fn passes_within(&self, target: &Target) -> bool {
        tokio::time::sleep(self.initial_delay).await;
        let (mut passed, mut failed) = (0u32, 0u32);
        loop {
            match self.attempt(target).await {
                Ok(()) => (passed, failed) = (passed.saturating_add(1), 0),
                Err(_) => (passed, failed) = (0, failed.saturating_add(1)),
            }
            if passed >= self.success_threshold {
                return true;
            }
            if failed >= self.failure_threshold {
                return false;
            }
            tokio::time::sleep(self.period).await;
        }
    }

    /// Probes until `failureThreshold` failures in a row; returns what the last one said.
    pub async fn until_failure(&self, target: &Target) -> String {
        tokio::time::sleep(self.initial_delay).await;
        let mut failed = 0;
        loop {
            match self.attempt(target).await {
                Ok(()) => failed = 0,
                Err(error) => {
                    failed += 1;
                    if failed >= self.failure_threshold {
                        return error;
                    }
                }
            }
            tokio::time::sleep(self.period).await;
        }
    }

    /// Probes for ever, calling `changed(ready)` when the result flips (starting from not ready). Until the first
    /// success it probes every quarter second rather than every `periodSeconds`: failures then change nothing (the
    /// container is not ready yet either way), and the container is ready as soon as it serves instead of up to a
    /// period later.
    pub async fn watch<F, Fut>(&self, target: &Target, mut changed: F)
    where
        F: FnMut(bool) -> Fut,
        Fut: Future<Output = ()>,
    {
        tokio::time::sleep(self.initial_delay).await;
        let (mut ready, mut ever_ready, mut passed, mut failed) = (false, false, 0u32, 0u32);
        loop {
            match self.attempt(target).await {
                Ok(()) => (passed, failed) = (passed.saturating_add(1), 0),
                Err(_) => (passed, failed) = (0, failed.saturating_add(1)),
            }
            if !ready && passed >= self.success_threshold {
                ready = true;
                ever_ready = true;
                changed(true).await;
            } else if ready && failed >= self.failure_threshold {
                ready = false;
                changed(false).await;
            }
            let wait = if ever_ready { self.period } else { self.period.min(Duration::from_millis(250)) };
            tokio::time::sleep(wait).await;
        }
    }
}

/// Sends `request` and reads the response's status line.
async fn exchange<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    stream: &mut S,
    request: &str,
) -> Result<String, String> {
    stream.write_all(request.as_bytes()).await.map_err(|e| e.to_string())?;
    let mut head = Vec::new();
    let mut buffer = [0u8; 512];
    while !head.contains(&b'\n') && head.len() < 4096 {
        let n = stream.read(&mut buffer).await.map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buffer[..n]);
    }
    Ok(String::from_utf8_lossy(&head).lines().next().unwrap_or_default().to_string())
}

/// TLS that accepts any server certificate, as the kubelet's HTTPS probes do.
fn insecure_tls() -> tokio_rustls::rustls::ClientConfig {
    use tokio_rustls::rustls;
    #[derive(Debug)]
    struct AcceptAnything(Arc<rustls::crypto::CryptoProvider>);
    impl rustls::client::danger::ServerCertVerifier for AcceptAnything {
        fn verify_server_cert(
            &self,
            _: &tokio_rustls::rustls::pki_types::CertificateDer<'_>,
            _: &[tokio_rustls::rustls::pki_types::CertificateDer<'_>],
            _: &tokio_rustls::rustls::pki_types::ServerName<'_>,
            _: &[u8],
            _: tokio_rustls::rustls::pki_types::UnixTime,
        ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &tokio_rustls::rustls::pki_types::CertificateDer<'_>,
            dss: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
        }
        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &tokio_rustls::rustls::pki_types::CertificateDer<'_>,
            dss: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
        }
        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAnything(provider)))
        .with_no_client_auth()
}
