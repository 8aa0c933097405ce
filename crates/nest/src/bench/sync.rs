//! `nest bench sync --tenants 100 --pods-per-tenant 100`: the syncer under the VirtualCluster paper's load. A super
//! cluster (`nest apiserver`, scheduler, simulated nodes), one `nest apiserver` per tenant made known as a ready
//! NestedControlPlane with its kubeconfig Secret, and `nest syncer` as its own process. Pods are created in every
//! tenant at once; printed: the time from each tenant pod's creation to its super pod, and to the tenant pod
//! Running (p50/p99); the syncer's memory per synced pod; the time a restarted syncer takes to compare everything
//! again (full resync); and the time its patrols spend comparing the caches (scan).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;
use tokio::io::AsyncBufReadExt;

use super::api::{ApiServer, rss_mib};
use super::cluster::component;
use super::stats::{Summary, round};
use super::{emit, parse_duration};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[arg(long, default_value_t = 100)]
    tenants: usize,
    #[arg(long, default_value_t = 100)]
    pods_per_tenant: usize,
    /// Give up after this long.
    #[arg(long, default_value = "600s", value_parser = parse_duration)]
    timeout: Duration,
}

/// `nest syncer` as a child process, with its metrics address.
struct Syncer {
    child: tokio::process::Child,
    metrics: String,
}

impl Syncer {
    async fn start(kubeconfig: &std::path::Path) -> anyhow::Result<Syncer> {
        let mut child = tokio::process::Command::new(std::env::current_exe()?)
            .args(["syncer", "--metrics-listen", "127.0.0.1:0", "--patrol-seconds", "3600", "--kubeconfig"])
            .arg(kubeconfig)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let mut lines = tokio::io::BufReader::new(child.stderr.take().context("stderr")?).lines();
        let metrics = loop {
            let line = lines.next_line().await?.context("the syncer exited at start-up")?;
            if let Some(rest) = line.split("metrics at http://").nth(1) {
                break rest.trim_end_matches("/metrics").trim().to_string();
            }
        };
        // What the syncer says goes to standard error with NEST_BENCH_VERBOSE set.
        let verbose = std::env::var_os("NEST_BENCH_VERBOSE").is_some();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                if verbose {
                    eprintln!("syncer: {line}");
                }
            }
        });
        Ok(Syncer { child, metrics })
    }

    fn rss_kib(&self) -> f64 {
        self.child.id().and_then(rss_mib).unwrap_or(0.0) * 1024.0
    }

    /// The syncer's metrics: the sum of each family's samples.
    async fn metrics(&self) -> BTreeMap<String, f64> {
        let mut sums = BTreeMap::new();
        let Ok(mut stream) = tokio::net::TcpStream::connect(&self.metrics).await else { return sums };
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let _ = stream.write_all(b"GET /metrics HTTP/1.1\r\nhost: bench\r\n\r\n").await;
        let mut text = String::new();
        let _ = stream.read_to_string(&mut text).await;
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let (Some(name), Some(value)) = (line.split('{').next(), line.rsplit(' ').next()) else { continue };
            *sums.entry(name.to_string()).or_insert(0.0) += value.parse::<f64>().unwrap_or(0.0);
        }
        sums
    }
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let total = args.tenants * args.pods_per_tenant;
    // No controller-manager runs in either cluster to make namespaces' `default` ServiceAccounts: as envtest runs
    // kube-apiserver, ServiceAccount admission is off (so tenant pods carry no token the syncer brings down). Nor
    // is there a node lifecycle controller to lift the not-ready taint new nodes are given, so in the super cluster,
    // whose scheduler places the super pods, TaintNodesByCondition is off too.
    const NO_ACCOUNTS: &[&str] = &["--disable-admission-plugins=ServiceAccount"];
    let server =
        ApiServer::start_with(None, &["--disable-admission-plugins=ServiceAccount,TaintNodesByCondition"]).await?;
    let kubeconfig = server.data.path().join("admin.kubeconfig");
    // Simulated nodes with room for every pod (a node's pod range holds 254 addresses).
    let nodes = (total / 250 + 1).to_string();
    let _components = [
        component(&["scheduler"], &kubeconfig)?,
        component(
            &["node", "--name", "bench", "--count", &nodes, "--pods", "250", "--start-delay-ms", "0"],
            &kubeconfig,
        )?,
    ];
    let client = nest_client::connect(&kubeconfig).await?.client;
    nest_capn::crds::install(&client).await?;

    // The tenants: API servers, made known as ready control planes.
    eprintln!("bench sync: starting {} tenant API servers", args.tenants);
    let tenants =
        futures_util::future::try_join_all((0..args.tenants).map(|_| ApiServer::start_with(None, NO_ACCOUNTS))).await?;
    let planes: Api<nest_capn::api::NestedControlPlane> = Api::namespaced(client.clone(), "default");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let mut tenant_clients = Vec::new();
    for (i, tenant) in tenants.iter().enumerate() {
        let name = format!("t{i}");
        let tenant_kubeconfig = tenant.data.path().join("admin.kubeconfig");
        let text = std::fs::read_to_string(&tenant_kubeconfig)?;
        let server_url = text.lines().find_map(|l| l.trim().strip_prefix("server: https://")).context("server")?;
        let (host, port) = server_url.rsplit_once(':').context("a port")?;
        let plane = json!({
            "apiVersion": "controlplane.cluster.x-k8s.io/v1alpha1", "kind": "NestedControlPlane",
            "metadata": {"name": name, "namespace": "default", "labels": {"cluster.x-k8s.io/cluster-name": name}},
            "spec": {"version": nest_capn::bundle::DEFAULT_VERSION,
                     "controlPlaneEndpoint": {"host": host, "port": port.parse::<i32>()?}},
        });
        planes.create(&PostParams::default(), &serde_json::from_value(plane)?).await?;
        let status = json!({"status": {"ready": true, "initialized": true}});
        planes.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await?;
        let secret = Secret {
            metadata: ObjectMeta { name: Some(format!("{name}-kubeconfig")), ..Default::default() },
            string_data: Some([("value".to_string(), text)].into()),
            ..Default::default()
        };
        secrets.create(&PostParams::default(), &secret).await?;
        // The tenant's CA, as a NestedControlPlane keeps it: the syncer's kubelet endpoint for it is issued from it.
        let pki = tenant.data.path().join("pki");
        let read = |file: &str| std::fs::read_to_string(pki.join(file));
        let ca = [("tls.crt".to_string(), read("ca.crt")?), ("tls.key".to_string(), read("ca.key")?)];
        let secret = Secret {
            metadata: ObjectMeta { name: Some(format!("{name}-ca")), ..Default::default() },
            string_data: Some(ca.into()),
            ..Default::default()
        };
        secrets.create(&PostParams::default(), &secret).await?;
        tenant_clients.push(nest_client::connect(&tenant_kubeconfig).await?.client);
    }

    eprintln!("bench sync: starting the syncer");
    let syncer = Syncer::start(&kubeconfig).await?;
    let began = Instant::now();
    // Every tenant synced: its four namespaces exist in the super cluster.
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    loop {
        let listed = namespaces.list(&kube::api::ListParams::default().labels("tenancy.nest.dev/cluster")).await?;
        if listed.items.len() >= 4 * args.tenants {
            break;
        }
        anyhow::ensure!(began.elapsed() < args.timeout, "the syncer did not pick up every tenant");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let tenants_synced = began.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle_kib = syncer.rss_kib();

    // Watches on both sides record when each pod is first seen in the super cluster and Running in its tenant.
    let seen: Arc<Mutex<BTreeMap<String, Instant>>> = Arc::default();
    let running: Arc<Mutex<BTreeMap<String, Instant>>> = Arc::default();
    let super_pods: Api<Pod> = Api::all(client.clone());
    let record = seen.clone();
    let super_watch = tokio::spawn(
        watcher(super_pods, watcher::Config::default().labels("tenancy.nest.dev/cluster")).for_each(move |event| {
            if let Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = event {
                let name = pod.metadata.name.unwrap_or_default();
                record.lock().expect("lock").entry(name).or_insert_with(Instant::now);
            }
            async {}
        }),
    );
    let mut tenant_watches = Vec::new();
    for tenant in &tenant_clients {
        let record = running.clone();
        let pods: Api<Pod> = Api::namespaced(tenant.clone(), "default");
        tenant_watches.push(tokio::spawn(watcher(pods, watcher::Config::default()).for_each(move |event| {
            if let Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = event
                && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            {
                let name = pod.metadata.name.unwrap_or_default();
                record.lock().expect("lock").entry(name).or_insert_with(Instant::now);
            }
            async {}
        })));
    }

    // The pods: every tenant at once, each creating its own one after another.
    eprintln!("bench sync: every tenant picked up in {tenants_synced:?}; creating {total} pods");
    let created: Arc<Mutex<BTreeMap<String, Instant>>> = Arc::default();
    let load = Instant::now();
    let creations = tenant_clients.iter().enumerate().map(|(i, tenant)| {
        let (pods, created) = (Api::<Pod>::namespaced(tenant.clone(), "default"), created.clone());
        let per_tenant = args.pods_per_tenant;
        async move {
            for j in 0..per_tenant {
                let name = format!("t{i}-p{j}");
                let pod: Pod = serde_json::from_value(json!({
                    "metadata": {"name": name},
                    // Restricted, as the syncer's super namespaces enforce by default.
                    "spec": {
                        "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                        "containers": [{"name": "c", "image": "registry.example/app:1", "securityContext": {
                            "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]},
                        }}],
                    },
                }))?;
                created.lock().expect("lock").insert(name, Instant::now());
                pods.create(&PostParams::default(), &pod).await?;
            }
            anyhow::Ok(())
        }
    });
    futures_util::future::try_join_all(creations).await?;
    let creating = load.elapsed();
    while running.lock().expect("lock").len() < total {
        anyhow::ensure!(load.elapsed() < args.timeout, "not every tenant pod became Running");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let all_running = load.elapsed();
    super_watch.abort();
    for watch in tenant_watches {
        watch.abort();
    }
    let (mut to_super, mut to_running) = (Vec::new(), Vec::new());
    {
        let (created, seen, running) =
            (created.lock().expect("lock"), seen.lock().expect("lock"), running.lock().expect("lock"));
        for (name, at) in created.iter() {
            if let Some(seen) = seen.get(name) {
                to_super.push(seen.saturating_duration_since(*at));
            }
            if let Some(running) = running.get(name) {
                to_running.push(running.saturating_duration_since(*at));
            }
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let loaded_kib = syncer.rss_kib();
    let (to_super, to_running) = (Summary::of(&mut to_super), Summary::of(&mut to_running));
    emit(json!({
        "bench": "sync", "tenants": args.tenants, "pods": total,
        "tenants_picked_up_s": round(tenants_synced.as_secs_f64()),
        "create_all_s": round(creating.as_secs_f64()), "all_running_s": round(all_running.as_secs_f64()),
        "to_super_pod_p50_ms": to_super.p50_ms, "to_super_pod_p99_ms": to_super.p99_ms,
        "to_running_p50_ms": to_running.p50_ms, "to_running_p99_ms": to_running.p99_ms,
        "syncer_rss_idle_mib": round(idle_kib / 1024.0), "syncer_rss_loaded_mib": round(loaded_kib / 1024.0),
        "syncer_kib_per_pod": round((loaded_kib - idle_kib) / total as f64),
    }));

    // A restarted syncer compares everything again: the time until it has reconciled every object once.
    eprintln!("bench sync: restarting the syncer");
    drop(syncer);
    let restarted = Instant::now();
    let syncer = Syncer::start(&kubeconfig).await?;
    let resync = loop {
        let metrics = syncer.metrics().await;
        let patrolled = metrics.get("nest_syncer_patrols_total").copied().unwrap_or(0.0);
        let compared = metrics.get("nest_syncer_patrol_items_total").copied().unwrap_or(0.0);
        let taken = metrics.get("nest_syncer_queue_items_total").copied().unwrap_or(0.0);
        let waiting = metrics.get("nest_syncer_queue_depth").copied().unwrap_or(1.0);
        if patrolled >= args.tenants as f64 && taken >= compared && waiting == 0.0 {
            break (restarted.elapsed(), metrics);
        }
        anyhow::ensure!(restarted.elapsed() < args.timeout, "the restarted syncer did not catch up");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (resync_time, metrics) = resync;
    let scan = metrics.get("nest_syncer_patrol_scan_seconds_total").copied().unwrap_or(0.0);
    emit(json!({
        "bench": "sync-resync", "tenants": args.tenants, "pods": total,
        "resync_s": round(resync_time.as_secs_f64()),
        "objects_compared": metrics.get("nest_syncer_patrol_items_total"),
        "patrol_scan_all_tenants_s": round(scan),
        "changes_made": metrics.get("nest_syncer_operations_total"),
    }));
    Ok(())
}
