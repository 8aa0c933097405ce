//! `nest bench api`: the load vcluster publishes for its API servers — 5,000 secrets created at 200 requests/s by
//! concurrent clients, then gets, updates and lists — against a real `nest apiserver` process on each backend, with
//! per-verb latency and the server's resident memory idle and after the load.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::stats::{Summary, round};
use super::{emit, parse_duration};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Use this etcd (client URL) for the etcd run instead of starting a temporary one from PATH.
    #[arg(long, value_name = "URL")]
    etcd: Option<String>,
    /// Secrets created.
    #[arg(long, default_value_t = 5000)]
    objects: usize,
    /// Requests per second, for creates, gets and updates.
    #[arg(long, default_value_t = 200)]
    rate: u32,
    /// Gets and updates issued (each).
    #[arg(long, default_value_t = 2000)]
    reads: usize,
    /// How long to let the server settle before measuring idle memory.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    settle: Duration,
    /// Measure authorization instead of the backends: on the embedded store, once as the admin (`system:masters`,
    /// which RBAC never evaluates) and once as a user allowed by an RBAC RoleBinding to `edit`.
    #[arg(long)]
    rbac: bool,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    if args.rbac {
        measure_as(&args, "embedded", None, false).await?;
        return measure_as(&args, "embedded", None, true).await;
    }
    measure(&args, "embedded", None).await?;
    match etcd_url(&args).await? {
        Ok((url, _guard)) => {
            measure(&args, "etcd", Some(&url)).await?;
            #[cfg(feature = "etcd")]
            etcd_itself(&args, &url).await?;
        }
        Err(reason) => emit(json!({"bench": "api", "backend": "etcd", "skipped": reason})),
    }
    Ok(())
}

#[cfg(feature = "etcd")]
async fn etcd_url(args: &Args) -> anyhow::Result<Result<(String, Box<dyn std::any::Any>), String>> {
    match &args.etcd {
        Some(url) => Ok(Ok((url.clone(), Box::new(())))),
        None => {
            let etcd = nest_storage::etcd::TempEtcd::start().await.context("starting a temporary etcd")?;
            Ok(Ok((etcd.url().to_string(), Box::new(etcd))))
        }
    }
}

/// etcd alone, through its own Rust client (which balances over every URL given, as nest's does): the same number
/// of writes and reads of a Secret-sized value at the same rate, so that what the API server adds on top of etcd can
/// be read off one run — for one member and for three alike.
#[cfg(feature = "etcd")]
async fn etcd_itself(args: &Args, urls: &str) -> anyhow::Result<()> {
    let endpoints: Vec<&str> = urls.split(',').collect();
    let client = etcd_client::Client::connect(&endpoints, None).await.context("connecting to etcd")?;
    let prefix = format!("/bench-etcd-{}", fastrand::u64(..));
    let value = vec![b'x'; 300];
    let paced = |count: usize, op: &'static str| {
        let (client, prefix, value) = (client.clone(), prefix.clone(), value.clone());
        async move {
            let start = tokio::time::Instant::now();
            let interval = Duration::from_secs_f64(1.0 / f64::from(args.rate.max(1)));
            let mut tasks = Vec::with_capacity(count);
            for i in 0..count {
                tokio::time::sleep_until(start + interval * i as u32).await;
                let (mut kv, key, value) = (client.kv_client(), format!("{prefix}/{i:05}"), value.clone());
                tasks.push(tokio::spawn(async move {
                    let began = Instant::now();
                    match op {
                        "put" => kv.put(key, value, None).await.map(|_| ())?,
                        _ => kv.get(key, None).await.map(|_| ())?,
                    }
                    Ok::<_, etcd_client::Error>(began.elapsed())
                }));
            }
            let mut latencies = Vec::with_capacity(count);
            for task in tasks {
                latencies.push(task.await??);
            }
            anyhow::Ok(latencies)
        }
    };
    let mut puts = paced(args.objects, "put").await?;
    report("etcd", "etcd_put", Some(args.rate), &mut puts);
    let mut gets = paced(args.reads.min(args.objects), "get").await?;
    report("etcd", "etcd_get", Some(args.rate), &mut gets);
    client.kv_client().delete(prefix.clone(), Some(etcd_client::DeleteOptions::new().with_prefix())).await?;
    Ok(())
}

#[cfg(not(feature = "etcd"))]
async fn etcd_url(_: &Args) -> anyhow::Result<Result<(String, Box<dyn std::any::Any>), String>> {
    Ok(Err("this nest was built without the `etcd` feature; rebuild with `--features etcd` to compare".into()))
}

/// A `nest apiserver` child process.
pub(super) struct ApiServer {
    child: tokio::process::Child,
    address: String,
    pub(super) data: tempfile::TempDir,
}

impl ApiServer {
    pub(super) async fn start(etcd: Option<&str>) -> anyhow::Result<ApiServer> {
        ApiServer::start_with(etcd, &[]).await
    }

    /// A server with more arguments (such as `--service-cidr`).
    pub(super) async fn start_with(etcd: Option<&str>, extra: &[&str]) -> anyhow::Result<ApiServer> {
        let data = tempfile::tempdir()?;
        let mut command = tokio::process::Command::new(std::env::current_exe()?);
        command.args(["apiserver", "--listen", "127.0.0.1:0", "--data-dir"]).arg(data.path()).args(extra);
        if let Some(url) = etcd {
            command.arg(format!("--storage=etcd={url}")).arg(format!("--storage-prefix=/bench-{}", fastrand::u64(..)));
        }
        let mut child = command.stderr(Stdio::piped()).stdout(Stdio::null()).kill_on_drop(true).spawn()?;
        let mut lines = BufReader::new(child.stderr.take().context("stderr")?).lines();
        let address = loop {
            let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
                .await
                .context("the API server did not start within 60 s")??
                .context("the API server exited at start-up")?;
            if let Some(rest) = line.split("serving https://").nth(1) {
                break rest.split_whitespace().next().unwrap_or_default().to_string();
            }
        };
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(ApiServer { child, address, data })
    }

    pub(super) fn rss_mib(&self) -> Option<f64> {
        rss_mib(self.child.id()?)
    }
}

/// A process's resident memory in MiB, from `/proc`.
pub(super) fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: f64 =
        status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(round(kib / 1024.0))
}

/// HTTP/2 connections to the server, authenticated as `admin` (or with a bearer token).
#[derive(Clone)]
struct Client {
    connections: Arc<Vec<SendRequest<Full<Bytes>>>>,
    token: Option<String>,
}

impl Client {
    async fn connect(address: &str, pki: &Path, connections: usize) -> anyhow::Result<Client> {
        Client::connect_as(address, pki, connections, None).await
    }

    /// With `token`, no client certificate: the token's user.
    async fn connect_as(address: &str, pki: &Path, connections: usize, token: Option<&str>) -> anyhow::Result<Client> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let read = |name: &str| std::fs::read(pki.join(name)).with_context(|| format!("reading {name}"));
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from_pem_slice(&read("ca.crt")?)?)?;
        let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
        let mut config = match token {
            Some(_) => builder.with_no_client_auth(),
            None => {
                let cert = CertificateDer::from_pem_slice(&read("admin.crt")?)?;
                let key = PrivateKeyDer::from_pem_slice(&read("admin.key")?)?;
                builder.with_client_auth_cert(vec![cert], key)?
            }
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let mut senders = Vec::new();
        for _ in 0..connections {
            let tcp = tokio::net::TcpStream::connect(address).await?;
            tcp.set_nodelay(true)?;
            let tls = connector.connect(ServerName::try_from("127.0.0.1")?.to_owned(), tcp).await?;
            let (sender, connection) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await?;
            tokio::spawn(connection);
            senders.push(sender);
        }
        Ok(Client { connections: Arc::new(senders), token: token.map(str::to_string) })
    }

    /// Sends one request and returns (status, body, latency).
    async fn send(
        &self,
        i: usize,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(u16, Value, Duration)> {
        let mut sender = self.connections[i % self.connections.len()].clone();
        let bytes = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
        let mut request = Request::builder()
            .method(method)
            .uri(format!("https://127.0.0.1{path}"))
            .header("content-type", "application/json");
        if let Some(token) = &self.token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let request = request.body(Full::new(bytes))?;
        let began = Instant::now();
        let response = sender.send_request(request).await?;
        let status = response.status().as_u16();
        let body = response.into_body().collect().await?.to_bytes();
        let elapsed = began.elapsed();
        Ok((status, serde_json::from_slice(&body).unwrap_or(Value::Null), elapsed))
    }
}

/// Issues `count` requests at `rate` per second, each from its own task (an open loop: a slow answer does not slow
/// the arrivals), and returns their latencies.
async fn paced(
    client: &Client,
    count: usize,
    rate: u32,
    make: impl Fn(usize) -> (&'static str, String, Option<Value>),
) -> anyhow::Result<Vec<Duration>> {
    let start = tokio::time::Instant::now();
    let interval = Duration::from_secs_f64(1.0 / f64::from(rate.max(1)));
    let mut tasks = Vec::with_capacity(count);
    for i in 0..count {
        tokio::time::sleep_until(start + interval * i as u32).await;
        let (method, path, body) = make(i);
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let (status, answer, latency) = client.send(i, method, &path, body.as_ref()).await?;
            anyhow::ensure!(status < 300, "{method} {path}: {status} {answer}");
            Ok(latency)
        }));
    }
    let mut latencies = Vec::with_capacity(count);
    for task in tasks {
        latencies.push(task.await??);
    }
    Ok(latencies)
}

fn report(backend: &str, verb: &str, rate: Option<u32>, latencies: &mut [Duration]) {
    let s = Summary::of(latencies);
    emit(json!({
        "bench": "api", "backend": backend, "verb": verb, "requests": s.count, "rate_per_sec": rate,
        "avg_ms": s.avg_ms, "p50_ms": s.p50_ms, "p99_ms": s.p99_ms, "max_ms": s.max_ms,
    }));
}

async fn measure(args: &Args, backend: &str, etcd: Option<&str>) -> anyhow::Result<()> {
    measure_as(args, backend, etcd, false).await
}

/// The load as the admin, or (`rbac`) as a token user bound to `edit` in the namespace.
async fn measure_as(args: &Args, backend: &str, etcd: Option<&str>, rbac: bool) -> anyhow::Result<()> {
    let tokens = tempfile::NamedTempFile::new()?;
    std::fs::write(tokens.path(), "bench-token,bench,1,\"bench-users\"\n")?;
    let token_file = tokens.path().display().to_string();
    let server = ApiServer::start_with(etcd, &["--token-auth-file", &token_file]).await?;
    tokio::time::sleep(args.settle).await;
    let idle = server.rss_mib();
    let pki: PathBuf = server.data.path().join("pki");
    let admin = Client::connect(&server.address, &pki, 8).await?;
    let ns = "bench";
    let (status, answer, _) =
        admin.send(0, "POST", "/api/v1/namespaces", Some(&json!({"metadata": {"name": ns}}))).await?;
    anyhow::ensure!(status == 201, "creating the namespace: {status} {answer}");
    let client = if rbac {
        let binding = json!({"metadata": {"name": "bench-edit"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "bench-users"}]});
        let path = format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings");
        let (status, answer, _) = admin.send(0, "POST", &path, Some(&binding)).await?;
        anyhow::ensure!(status == 201, "binding the bench user: {status} {answer}");
        Client::connect_as(&server.address, &pki, 8, Some("bench-token")).await?
    } else {
        admin
    };
    let backend = if rbac { format!("{backend}+rbac-user") } else { backend.to_string() };
    let backend = backend.as_str();
    let secret = |i: usize, version: &str| {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": format!("secret-{i:05}"), "namespace": ns},
               "type": "Opaque", "data": {"value": nest_registry::base64::encode(format!("{version}-{i}").as_bytes())}})
    };
    let collection = format!("/api/v1/namespaces/{ns}/secrets");

    let mut creates =
        paced(&client, args.objects, args.rate, |i| ("POST", collection.clone(), Some(secret(i, "v1")))).await?;
    report(backend, "create", Some(args.rate), &mut creates);
    let reads = args.reads.min(args.objects);
    let mut gets = paced(&client, reads, args.rate, |i| ("GET", format!("{collection}/secret-{i:05}"), None)).await?;
    report(backend, "get", Some(args.rate), &mut gets);
    // An update without resourceVersion is an unconditional replace, as many controllers send.
    let mut updates =
        paced(&client, reads, args.rate, |i| ("PUT", format!("{collection}/secret-{i:05}"), Some(secret(i, "v2"))))
            .await?;
    report(backend, "update", Some(args.rate), &mut updates);
    let mut lists = Vec::new();
    for i in 0..10 {
        let (status, answer, latency) = client.send(i, "GET", &collection, None).await?;
        anyhow::ensure!(status == 200, "list: {status}");
        let items = answer["items"].as_array().map_or(0, Vec::len);
        anyhow::ensure!(items == args.objects, "listed {items} secrets, expected {}", args.objects);
        lists.push(latency);
    }
    report(backend, &format!("list_{}", args.objects), None, &mut lists);
    emit(json!({"bench": "api", "backend": backend, "rss_idle_mib": idle, "rss_after_load_mib": server.rss_mib()}));
    Ok(())
}
