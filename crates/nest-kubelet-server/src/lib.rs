//! The server half of the kubelet API: HTTPS with a serving certificate, answering only the API server (a client
//! certificate from the given CA whose common name is [`API_SERVER_CLIENT`]), each connection held to [`Limits`].
//! Start with [`serve_with`]: the caller brings the handler, this crate the port.
//!
//! Two components serve it: `nest-node` for its own pods' logs, streams and statistics, and `nest-syncer` for each
//! tenant's virtual nodes (logs and streams through the management cluster). Neither needs the other, so the port lives here, a leaf beside
//! `nest-pki`: the syncer links it without linking the node agent.
//!
//! A kubelet port is reachable from pods, so what one client can hold of it is bounded as the API server bounds it
//! ([`Limits`]): a TLS handshake deadline, a header read deadline, an idle timeout, a cap on the connections of one
//! source address and one on all of them ([`Connections`], which several servers can share as one budget).
//!
//! - [`limits`]: [`Limits`], and [`Connections`], which counts what is open against them;
//! - [`upgrade`]: connections a handler takes over after `101 Switching Protocols` (exec, attach, port-forward);
//! - `activity` (private): a response body that keeps its connection busy until it is sent; the idleness itself is
//!   [`nest_streams::idle`].

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod activity;
pub mod limits;
pub mod upgrade;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::activity::Held;
pub use crate::limits::{Closed, Connections, Limits};
use nest_streams::idle::{Activity, OpenRequest, Watched};

/// The common name of the client certificate the API server presents to nodes.
pub const API_SERVER_CLIENT: &str = "kube-apiserver-kubelet-client";

/// The kubelet API's certificate material (PEM).
#[derive(Clone, Debug)]
pub struct Tls {
    /// The serving certificate, issued by the cluster CA for the node's address.
    pub cert: String,
    /// The serving certificate's private key.
    pub key: String,
    /// The CA that signs the API server's client certificate.
    pub client_ca: String,
}

/// Why a kubelet API server could not start: its [`Tls`] is unusable.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A certificate or the key is not PEM of what it should be.
    #[error("the kubelet API's {what}: {source}")]
    Pem {
        /// Which of the [`Tls`] fields.
        what: &'static str,
        /// What was wrong with it.
        #[source]
        source: rustls::pki_types::pem::Error,
    },
    /// rustls refused the material (a key that does not match its certificate, a CA it cannot use).
    #[error("the kubelet API's TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    /// The client CA cannot verify client certificates.
    #[error("the kubelet API's client CA: {0}")]
    ClientCa(#[from] rustls::server::VerifierBuilderError),
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

fn server_config(tls: &Tls) -> Result<rustls::ServerConfig, Error> {
    let pem = |what| move |source| Error::Pem { what, source };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(tls.client_ca.as_bytes()).map_err(pem("client CA"))?)?;
    let verifier =
        rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone()).build()?;
    let chain = vec![CertificateDer::from_pem_slice(tls.cert.as_bytes()).map_err(pem("serving certificate"))?];
    let key = PrivateKeyDer::from_pem_slice(tls.key.as_bytes()).map_err(pem("serving key"))?;
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

/// Serves a kubelet-style API on `listener` with `handle`: HTTPS with `tls`, answering only clients whose certificate
/// `tls.client_ca` signed and whose common name is [`API_SERVER_CLIENT`] (others get 403), each connection counted
/// in `connections` and held to its limits. Used by the node, and by the syncer for tenants' virtual nodes (all of
/// its endpoints sharing one `connections`). Returns only when `tls` is unusable; otherwise it serves until the task
/// is dropped.
pub async fn serve_with<H, F>(
    listener: tokio::net::TcpListener,
    tls: Tls,
    connections: Arc<Connections>,
    handle: H,
) -> Result<(), Error>
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
        // Shared with a stream the handler takes over, which outlives the HTTP connection ([`upgrade`]).
        let slot = upgrade::Slot(Arc::new(slot));
        let (acceptor, handle, connections) = (acceptor.clone(), handle.clone(), connections.clone());
        tokio::spawn(async move {
            let limits = connections.limits();
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
            let service = hyper::service::service_fn(move |mut request: Request<hyper::body::Incoming>| {
                let (handle, client) = (handle.clone(), client.clone());
                request.extensions_mut().insert(slot.clone());
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
            let io = TokioIo::new(Watched::new(stream, activity.clone()));
            tokio::select! {
                _ = builder.serve_connection(io, service).with_upgrades() => {}
                () = activity.until_idle(limits.idle_timeout) => {
                    connections.idle_closed.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
}
