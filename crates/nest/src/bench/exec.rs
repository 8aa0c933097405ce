//! `nest bench exec`: what entering a pod costs. It starts `nest up` (this binary) on a new data directory, with the
//! registry flags given (a machine without network access names its mirror, as for `nest up`), and runs one pod of
//! `--image` (busybox: it needs `sh`, `head` and `nc`) in the management cluster and one in the `demo` tenant. Each
//! pod serves `--mebibytes` of zeros to every connection on port 9000. Then, in each place:
//!
//! - **exec**: `--count` execs of `true`, one after another, each timed from the request to its exit status (kube-rs's
//!   `Api::exec`, WebSocket); and the same command through `runc exec` on the management pod's container, the floor
//!   under every path (the node runs exactly that);
//! - **port-forward**: the zeros read through one forwarded stream (kube-rs's `Api::portforward`, WebSocket), timed
//!   from the stream's opening, three times, the best kept; and read over a connection to localhost inside the pod's
//!   network namespace, made as the node makes it for a port-forward (the floor).
//!
//! Through the tenant, a request goes tenant API server → the syncer's kubelet endpoint → management API server →
//! node. One JSON line per measurement. The bench uses `nest up`'s fixed node and pod addresses: run no other
//! `nest up` beside it, and run it as root (as `nest up`).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams, PostParams};
use serde_json::json;
use tokio::io::AsyncReadExt as _;

use super::stats::{Summary, round};
use super::{emit, parse_duration};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Execs timed in each place.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    count: u32,
    /// Mebibytes read through one port-forward stream.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=16_384))]
    mebibytes: u64,
    /// The pods' image: it must have `sh`, `head` and `nc` (busybox's).
    #[arg(long, default_value = "busybox")]
    image: String,
    /// Passed on to `nest up` (`HOST=ENDPOINT`, as `docker.io=http://127.0.0.1:5000`); repeatable.
    #[arg(long = "registry-mirror", value_name = "HOST=ENDPOINT")]
    registry_mirrors: Vec<String>,
    /// Give up on a step after this long.
    #[arg(long, default_value = "300s", value_parser = parse_duration)]
    timeout: Duration,
}

/// The port the pods serve their zeros on.
const PORT: u16 = 9000;
/// The pods' name, in namespace `default` of each cluster.
const POD: &str = "bench-exec";

pub async fn run(args: Args) -> anyhow::Result<()> {
    let data = tempfile::tempdir()?;
    let extra: Vec<String> =
        args.registry_mirrors.iter().flat_map(|m| ["--registry-mirror".into(), m.clone()]).collect();
    let up = super::idle::start_up(data.path(), &extra)?;
    let admin = nest_client::connect(&data.path().join("admin.kubeconfig")).await?.client;
    let tenant = demo_client(&admin, data.path(), args.timeout).await?;
    let bytes = args.mebibytes.checked_mul(1 << 20).context("too many mebibytes")?;
    let places = [("management", admin.clone()), ("tenant", tenant)];
    for (_, client) in &places {
        start_pod(client, &args.image, bytes).await?;
    }
    let mut pods = Vec::new();
    for (place, client) in &places {
        let pods_api: Api<Pod> = Api::namespaced(client.clone(), "default");
        pods.push(running(&pods_api, args.timeout).await.with_context(|| format!("the {place} pod"))?);
    }
    let management = &pods[0];
    let floor = runc_exec(data.path(), management, args.count).await?;
    emit(exec_line("runc exec alone (the floor)", floor));
    for (place, client) in &places {
        let pods_api: Api<Pod> = Api::namespaced(client.clone(), "default");
        let summary = exec_round_trips(&pods_api, args.count).await.with_context(|| format!("exec in the {place}"))?;
        emit(exec_line(&format!("{place} API server (kube-rs, WebSocket)"), summary));
    }
    let uid = management.metadata.uid.clone().context("the pod has no uid")?;
    let netns = Path::new("/run/netns").join(format!("nest-{uid}"));
    let direct = best_of(3, || direct_read(&netns, bytes)).await?;
    emit(throughput_line("localhost in the pod's network namespace, as the node dials it (the floor)", bytes, direct));
    for (place, client) in &places {
        let pods_api: Api<Pod> = Api::namespaced(client.clone(), "default");
        let took = best_of(3, || forwarded_read(&pods_api, bytes)).await.with_context(|| format!("in the {place}"))?;
        emit(throughput_line(&format!("{place} API server (kube-rs, WebSocket)"), bytes, took));
    }
    drop(up);
    Ok(())
}

/// The demo tenant's admin client, once its control plane is Ready.
async fn demo_client(admin: &kube::Client, data: &Path, timeout: Duration) -> anyhow::Result<kube::Client> {
    let clusters: Api<nest_capn::api::Cluster> = Api::namespaced(admin.clone(), "default");
    let began = Instant::now();
    while clusters.get_opt("demo").await.ok().flatten().is_none() {
        anyhow::ensure!(began.elapsed() < timeout, "nest up created no demo tenant");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    super::tenants::wait_provisioned(&clusters, &["demo".to_string()], began, timeout).await?;
    let path = data.join("demo.kubeconfig");
    loop {
        if let Ok(config) = crate::cmd::cluster::tenant_kubeconfig(admin, "default", "demo").await {
            nest_apiserver::certs::write_private(&path, &config)?;
            if let Ok(connection) = nest_client::connect(&path).await
                && connection.client.apiserver_version().await.is_ok()
            {
                return Ok(connection.client);
            }
        }
        anyhow::ensure!(began.elapsed() < timeout, "demo's API server did not answer");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Creates the pod that serves `bytes` zeros on [`PORT`] to each connection, as Pod Security "restricted" admits.
async fn start_pod(client: &kube::Client, image: &str, bytes: u64) -> anyhow::Result<()> {
    let serve = format!("while true; do head -c {bytes} /dev/zero | nc -l -p {PORT}; done");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": POD},
        "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "main", "image": image, "command": ["sh", "-c", serve],
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
            }],
        },
    }))?;
    Api::<Pod>::namespaced(client.clone(), "default").create(&PostParams::default(), &pod).await?;
    Ok(())
}

/// The pod once it runs, with an address.
async fn running(pods: &Api<Pod>, timeout: Duration) -> anyhow::Result<Pod> {
    let began = Instant::now();
    loop {
        let pod = pods.get(POD).await?;
        let status = pod.status.as_ref();
        if status.and_then(|s| s.phase.as_deref()) == Some("Running") && status.is_some_and(|s| s.pod_ip.is_some()) {
            return Ok(pod);
        }
        anyhow::ensure!(began.elapsed() < timeout, "not Running after {timeout:?}: {:?}", pod.status);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `count` execs of `true`, each timed to its exit status.
async fn exec_round_trips(pods: &Api<Pod>, count: u32) -> anyhow::Result<Summary> {
    let mut samples = Vec::new();
    for _ in 0..count {
        let began = Instant::now();
        let mut process = pods.exec(POD, ["true"], &AttachParams::default().stdout(true).stderr(true)).await?;
        let status = process.take_status().context("no status channel")?.await.context("no exit status")?;
        process.join().await?;
        samples.push(began.elapsed());
        anyhow::ensure!(status.status.as_deref() == Some("Success"), "`true` failed: {status:?}");
    }
    Ok(Summary::of(&mut samples))
}

/// `count` runs of `runc exec <container> true` on the node's runtime state, as the node runs an exec.
async fn runc_exec(data: &Path, pod: &Pod, count: u32) -> anyhow::Result<Summary> {
    let uid = pod.metadata.uid.as_deref().context("the pod has no uid")?;
    let root = data.join("nodes").join("nest-node-0").join("runc");
    let id = format!("{uid}-main");
    let mut samples = Vec::new();
    for _ in 0..count {
        let began = Instant::now();
        let out = tokio::process::Command::new("runc").arg("--root").arg(&root).args(["exec", &id, "true"]).output();
        let out = out.await?;
        samples.push(began.elapsed());
        anyhow::ensure!(out.status.success(), "runc exec {id}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(Summary::of(&mut samples))
}

/// The least time of `tries` runs of `read`.
async fn best_of<F, Fut>(tries: u32, mut read: F) -> anyhow::Result<Duration>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Duration>>,
{
    let mut best = Duration::MAX;
    for _ in 0..tries {
        best = best.min(read().await?);
    }
    Ok(best)
}

/// Reads `bytes` from `stream`; the time it took from `began`.
async fn read_all(
    mut stream: impl tokio::io::AsyncRead + Unpin,
    bytes: u64,
    began: Instant,
) -> anyhow::Result<Duration> {
    let mut buffer = vec![0u8; 64 << 10];
    let mut read = 0u64;
    while read < bytes {
        let n = stream.read(&mut buffer).await?;
        anyhow::ensure!(n > 0, "the stream ended after {read} of {bytes} bytes");
        read = read.saturating_add(n as u64);
    }
    Ok(began.elapsed())
}

/// The zeros read over a connection to localhost in the pod's network namespace `netns`, made as the node makes one
/// for a port-forward (the pod's server may take a moment to listen again).
async fn direct_read(netns: &Path, bytes: u64) -> anyhow::Result<Duration> {
    let began = Instant::now();
    loop {
        let path = netns.to_path_buf();
        match tokio::task::spawn_blocking(move || nest_node::port_forward::connect_inside(&path, PORT)).await? {
            Ok(stream) => {
                stream.set_nonblocking(true)?;
                return read_all(tokio::net::TcpStream::from_std(stream)?, bytes, Instant::now()).await;
            }
            Err(_) if began.elapsed() < Duration::from_secs(10) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(error) => return Err(error).context(format!("connecting to port {PORT} in {}", netns.display())),
        }
    }
}

/// The zeros read through a port-forward of [`PORT`].
async fn forwarded_read(pods: &Api<Pod>, bytes: u64) -> anyhow::Result<Duration> {
    // Give the pod's server a moment to listen again after the previous read.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut forwarder = pods.portforward(POD, &[PORT]).await?;
    let stream = forwarder.take_stream(PORT).context("no stream for the port")?;
    let took = read_all(stream, bytes, Instant::now()).await;
    forwarder.abort();
    took
}

fn exec_line(through: &str, summary: Summary) -> serde_json::Value {
    json!({"bench": "exec", "command": "true", "through": through, "count": summary.count,
           "p50_ms": summary.p50_ms, "p99_ms": summary.p99_ms, "avg_ms": summary.avg_ms, "max_ms": summary.max_ms})
}

fn throughput_line(through: &str, bytes: u64, took: Duration) -> serde_json::Value {
    let megabytes = bytes as f64 / 1e6;
    json!({"bench": "port-forward", "through": through, "megabytes": round(megabytes),
           "seconds": round(took.as_secs_f64()), "mb_per_second": round(megabytes / took.as_secs_f64().max(1e-9))})
}
