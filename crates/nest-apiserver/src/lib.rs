//! nest's Kubernetes-compatible API server.
//!
//! [`serve`] binds the listener, creates (or loads) the PKI under the data directory, writes
//! `DATA_DIR/admin.kubeconfig`, then serves HTTPS (HTTP/2 and HTTP/1.1) until told to stop. Each connection's client
//! certificate is verified against the cluster CA ([`auth`]); each request goes through [`handler`], which turns
//! it into a call on the generic registry ([`nest_registry::Registry`]) over a storage backend
//! ([`nest_storage::Store`]). Discovery documents come from [`discovery`].
//!
//! Start with [`serve`]; `docs/ARCHITECTURE.md` draws the path of a request.

pub mod audit;
pub mod auth;
pub mod authz;
pub mod certificates;
pub mod certs;
pub mod discovery;
mod gnostic;
pub mod handler;
pub mod limits;
pub mod logs;
pub mod node_authz;
pub mod openapi;
mod openapi_v2;
pub mod port_forward;
pub mod reviews;
pub mod streams;
pub mod table;
pub mod tokens;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use http_body_util::BodyExt;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use nest_registry::Registry;
use nest_storage::Store;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;

use crate::auth::{Tokens, user_from_certificate};
use crate::handler::State;

/// How `nest apiserver` is set up.
#[derive(Clone, Debug)]
pub struct Config {
    /// Holds the PKI, `admin.kubeconfig` and (for the embedded backend) the store.
    pub data_dir: PathBuf,
    /// Where to listen; port 0 picks a free port.
    pub listen: SocketAddr,
    /// A static token file (`token,user,uid,"groups"`), if any.
    pub token_file: Option<PathBuf>,
    /// Extra DNS names for the serving certificate.
    pub extra_sans: Vec<String>,
    /// The range Service ClusterIPs are allocated from.
    pub service_cidr: nest_registry::ipalloc::ServiceCidr,
    /// The cluster CA's certificate and key files, when the CA is given rather than made here.
    pub ca_files: Option<(PathBuf, PathBuf)>,
    /// The Kubernetes version to report (a 1.33 patch version such as `v1.33.2`); nest's default when unset.
    pub kubernetes_version: Option<String>,
    /// Pod Security admission's defaults and exemptions.
    pub pod_security: nest_registry::admission::pod_security::Config,
    /// The admission plugins that run (`--enable-admission-plugins`, `--disable-admission-plugins`).
    pub admission_plugins: nest_registry::admission::Plugins,
    /// What one client may take: connections, timeouts, requests in flight, the size of a request's body.
    pub limits: limits::Limits,
    /// The watch cache: how many changes it keeps per resource (`--default-watch-cache-size`).
    pub watch_cache: nest_registry::cache::Config,
    /// How requests are authorized (`--authorization-mode`).
    pub authorization: authz::Mode,
    /// ServiceAccount tokens: issuer, audiences, keys.
    pub service_accounts: tokens::Config,
    /// Where the audit log goes (`--audit-log-path`), and its policy (`--audit-policy-file`): both, or no audit.
    pub audit_log: Option<PathBuf>,
    pub audit_policy: Option<PathBuf>,
}

/// A server that is listening.
pub struct Serving {
    /// The address bound.
    pub address: SocketAddr,
    /// `DATA_DIR/admin.kubeconfig`.
    pub kubeconfig: PathBuf,
}

/// Serves the API over `store` until `shutdown` completes. `ready` is called once, when the server accepts
/// connections.
pub async fn serve(
    config: Config,
    store: Arc<dyn Store>,
    ready: impl FnOnce(&Serving),
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let listener = TcpListener::bind(config.listen).await.with_context(|| format!("listening on {}", config.listen))?;
    let address = listener.local_addr()?;
    let mut ips = vec![address.ip()];
    if address.ip().is_unspecified() {
        ips = vec!["127.0.0.1".parse().expect("an address")];
    }
    // In-cluster clients dial the `kubernetes` Service's address (KUBERNETES_SERVICE_HOST), as kube-apiserver's
    // serving certificate names it.
    ips.push(IpAddr::V4(config.service_cidr.kubernetes_service_ip()));
    let names = certs::serving_names(&ips, &config.extra_sans);
    let given_ca = config.ca_files.as_ref().map(|(cert, key)| (cert.as_path(), key.as_path()));
    let pki = certs::Pki::load_or_create(&config.data_dir, &names, given_ca)?;
    let host =
        if address.ip().is_unspecified() { format!("127.0.0.1:{}", address.port()) } else { address.to_string() };
    let server_url = format!("https://{host}");
    let kubeconfig = config.data_dir.join("admin.kubeconfig");
    // It embeds the admin's key.
    certs::write_private(
        &kubeconfig,
        &certs::kubeconfig(&server_url, &pki.ca_cert, &pki.admin_cert, &pki.admin_key, "admin"),
    )?;
    let tls = tls_config(&pki)?;
    let tokens = match &config.token_file {
        Some(path) => Tokens::load(path)?,
        None => Tokens::default(),
    };
    let service_accounts = tokens::Issuer::load(&config.service_accounts, &config.data_dir)?;
    let admission = nest_registry::admission::chain(&config.admission_plugins, config.pod_security.clone());
    let registry = Registry::open_with(store, config.watch_cache)
        .await?
        .with_service_cidr(config.service_cidr)
        .with_admission(admission);
    registry.bootstrap(address).await?;
    let kubelet_tls = Arc::new(logs::kubelet_client(&pki)?);
    let kubernetes_version = config.kubernetes_version.clone();
    let limits = config.limits.clone();
    let counters = Arc::new(limits::Counters::default());
    let state = Arc::new(State {
        registry,
        tokens,
        service_accounts,
        address: host,
        kubelet_tls,
        kubernetes_version,
        limits: limits.clone(),
        counters: counters.clone(),
        authorization: config.authorization,
        audit: audit::Auditor::open(config.audit_log.as_deref(), config.audit_policy.as_deref())?.map(Arc::new),
    });
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    ready(&Serving { address, kubeconfig });

    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!(%error, "accepting a connection");
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Over the cap, a connection is closed as soon as it is accepted: it costs a file descriptor for a moment.
        let Some(slot) = counters.connect(limits.max_connections) else { continue };
        let connection = Connection { acceptor: acceptor.clone(), state: state.clone(), peer };
        tokio::spawn(async move {
            let _slot = slot;
            connection.serve(tcp).await;
        });
    }
    Ok(())
}

/// What serving one accepted connection needs.
struct Connection {
    acceptor: tokio_rustls::TlsAcceptor,
    state: Arc<State>,
    /// The client's address.
    peer: SocketAddr,
}

impl Connection {
    /// Serves the connection's requests until it ends, or idles past the idle timeout: the TLS handshake (within
    /// the handshake timeout), then HTTP/2 or HTTP/1.1, each request through [`handler::handle`].
    async fn serve(self, tcp: tokio::net::TcpStream) {
        let Connection { acceptor, state, peer } = self;
        let (limits, counters) = (state.limits.clone(), state.counters.clone());
        let _ = tcp.set_nodelay(true);
        let tls = match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(tcp)).await {
            Ok(Ok(tls)) => tls,
            Ok(Err(error)) => {
                tracing::debug!(%error, "TLS handshake failed");
                return;
            }
            Err(_) => {
                counters.handshake_timeouts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                return;
            }
        };
        let user = tls.get_ref().1.peer_certificates().and_then(|c| c.first()).and_then(|c| user_from_certificate(c));
        let activity = nest_streams::idle::Activity::new();
        let requests = activity.clone();
        let service = service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
            let (state, user) = (state.clone(), user.clone());
            request.extensions_mut().insert(handler::Peer(peer));
            // The connection counts as busy until the response's body is sent (a watch: until it ends).
            let open = nest_streams::idle::OpenRequest::new(&requests);
            async move {
                let response = handler::handle(state, user, request).await;
                let response = response.map(|body| {
                    body.map_frame(move |frame| {
                        let _open = &open;
                        frame
                    })
                    .boxed_unsync()
                });
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
        builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
        builder.http2().timer(TokioTimer::new());
        let io = TokioIo::new(nest_streams::idle::Watched::new(tls, activity.clone()));
        tokio::select! {
            // Upgrades (exec, attach, port-forward) take the connection over; `streams.rs` splices it to a node.
            served = builder.serve_connection_with_upgrades(io, service) => {
                if let Err(error) = served {
                    tracing::debug!(%error, "connection ended with an error");
                }
            }
            () = activity.until_idle(limits.idle_timeout) => {
                counters.idle_closed.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
    }
}

/// TLS with an optional client certificate: one signed by the cluster CA identifies the user; without one the
/// request is anonymous and only health and version endpoints answer.
fn tls_config(pki: &certs::Pki) -> anyhow::Result<rustls::ServerConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(pki.ca_cert.as_bytes()).context("reading the CA certificate")?)?;
    let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots)).allow_unauthenticated().build()?;
    let chain = vec![
        CertificateDer::from_pem_slice(pki.serving_cert.as_bytes()).context("reading the serving certificate")?,
        CertificateDer::from_pem_slice(pki.ca_cert.as_bytes())?,
    ];
    let key = PrivateKeyDer::from_pem_slice(pki.serving_key.as_bytes()).context("reading the serving key")?;
    let mut config =
        rustls::ServerConfig::builder().with_client_cert_verifier(verifier).with_single_cert(chain, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}
