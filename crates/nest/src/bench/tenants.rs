//! `nest bench tenants --count 1,10,100`: tenant clusters on a management cluster of `nest` processes (API server,
//! controller-manager, scheduler, service proxy, manager, and one node running nest's image as processes). For each
//! count, that many more clusters (Cluster + NestedCluster + NestedControlPlane) are created at once; printed: the
//! time from creation to each Cluster `Provisioned` with its control plane ready (p50/p99), the time until all are,
//! and the idle memory of one tenant (its API server and controller-manager processes together): resident,
//! proportional and anonymous (see [`Memory`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kube::api::{Api, ListParams};
use serde_json::json;

use super::api::{ApiServer, rss_mib};
use super::cluster::component;
use super::stats::{Summary, round};
use super::{emit, parse_duration};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// How many tenants to add at each step, comma separated.
    #[arg(long, default_value = "1,10,100", value_delimiter = ',')]
    count: Vec<usize>,
    /// Give up on a step after this long.
    #[arg(long, default_value = "300s", value_parser = parse_duration)]
    timeout: Duration,
    /// The node's pod range. A loopback range keeps the tenants' control-plane pods on the host's network; any other
    /// gives each pod a network namespace on the node's bridge behind the wall between tenants (as `nest up` does;
    /// needs root, the CNI plugins and nftables), so that what the wall costs a tenant's start shows.
    #[arg(long, default_value = "127.31.0.0/16")]
    pod_cidr: String,
}

/// Memory of a set of processes, in MiB: resident (`rss`, counting the `nest` binary's pages, which every process
/// shares, in full), proportional (`pss`, shared pages divided among the processes sharing them: what one more
/// tenant costs) and anonymous (`anon`: heap and stacks, the tenant's own).
#[derive(Clone, Copy, Debug, Default)]
struct Memory {
    rss: f64,
    pss: f64,
    anon: f64,
}

/// A `kB` field of a `/proc` file, in MiB.
fn field_mib(path: &str, field: &str) -> Option<f64> {
    let text = std::fs::read_to_string(path).ok()?;
    let kib: f64 =
        text.lines().find_map(|l| l.strip_prefix(field))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib / 1024.0)
}

/// The memory of the processes whose command line contains `needle`, summed, with what their sandboxes cost: the
/// init each sandbox starts them with (its command line names them too) and the OCI runtime's process above it.
fn memory_of(needle: &str) -> Memory {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Memory::default() };
    let mut total = Memory::default();
    let mut add = |pid: u32| {
        total.rss += rss_mib(pid).unwrap_or(0.0);
        total.pss += field_mib(&format!("/proc/{pid}/smaps_rollup"), "Pss:").unwrap_or(0.0);
        total.anon += field_mib(&format!("/proc/{pid}/status"), "RssAnon:").unwrap_or(0.0);
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let cmdline = String::from_utf8_lossy(&std::fs::read(entry.path().join("cmdline")).unwrap_or_default())
            .replace('\0', " ");
        if cmdline.contains(needle) {
            add(pid);
            if nest_node::process::sandbox::runs_init(&cmdline) {
                let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                let parent = status.lines().find_map(|l| l.strip_prefix("PPid:")).and_then(|p| p.trim().parse().ok());
                if let Some(runtime) = parent {
                    add(runtime);
                }
            }
        }
    }
    total
}

/// Waits until every Cluster of `names` is `Provisioned` with its control plane available; returns how long after
/// `began` each one was.
pub(super) async fn wait_provisioned(
    clusters: &Api<nest_capn::api::Cluster>,
    names: &[String],
    began: Instant,
    timeout: Duration,
) -> anyhow::Result<BTreeMap<String, Duration>> {
    let mut ready_after: BTreeMap<String, Duration> = BTreeMap::new();
    while ready_after.len() < names.len() {
        anyhow::ensure!(
            began.elapsed() < timeout,
            "only {} of {} tenants ready after {timeout:?}",
            ready_after.len(),
            names.len()
        );
        for cluster in clusters.list(&ListParams::default()).await?.items {
            let name = cluster.metadata.name.clone().unwrap_or_default();
            let provisioned = cluster.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Provisioned");
            let available = cluster
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "ControlPlaneAvailable" && c.status == "True");
            if names.contains(&name) && provisioned && available && !ready_after.contains_key(&name) {
                ready_after.insert(name, began.elapsed());
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(ready_after)
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    // Pods in network namespaces of their own (as the node decides from the range) reach Services through addresses
    // the proxy makes local to the machine, as on `nest up`; pods on the host's network reach loopback ones.
    let network = nest_node::network::Network::for_range("bench", &args.pod_cidr)?;
    let bridged = matches!(network, nest_node::network::Network::Bridged(_));
    let services = if bridged { "10.232.0.0/16" } else { "127.97.0.0/16" };
    let server = ApiServer::start_with(None, &["--service-cidr", services]).await?;
    let kubeconfig = server.data.path().join("admin.kubeconfig");
    let pki = server.data.path().join("pki").display().to_string();
    let node_dir = tempfile::tempdir()?;
    let node_data = node_dir.path().display().to_string();
    let _components = [
        component(&["controller-manager", "--local-volumes"], &kubeconfig)?,
        component(&["scheduler"], &kubeconfig)?,
        if bridged {
            component(&["proxy", "--service-cidr", services], &kubeconfig)?
        } else {
            component(&["proxy"], &kubeconfig)?
        },
        component(&["manager"], &kubeconfig)?,
    ];
    let mut node = component(
        &[
            "node",
            "--name",
            "bench",
            "--runtime",
            "process",
            "--pods",
            "1000",
            "--pod-cidr",
            &args.pod_cidr,
            "--data-dir",
            &node_data,
            "--ca-dir",
            &pki,
            "--kubelet-port",
            "0",
        ],
        &kubeconfig,
    )?;
    let measured = measure(&args, &server, &kubeconfig).await;
    // The node stops the pods it runs, their processes and network namespaces, when told to stop (killed, it
    // leaves their namespaces on the machine).
    if let Some(pid) = node.id().and_then(|pid| i32::try_from(pid).ok()) {
        // SAFETY: kill sends a signal to the node process this bench started and still holds; no memory is touched.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    let _ = tokio::time::timeout(Duration::from_secs(120), node.wait()).await;
    measured
}

/// The bench's steps, on the management cluster `server` made for it.
async fn measure(args: &Args, server: &ApiServer, kubeconfig: &std::path::Path) -> anyhow::Result<()> {
    let client = nest_client::connect(kubeconfig).await?.client;
    let clusters: Api<nest_capn::api::Cluster> = Api::namespaced(client.clone(), "default");
    // The management cluster is ready: the node registered, the controller-manager leading, the CRDs installed.
    let started = Instant::now();
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(client.clone(), "kube-system");
    let (lease_namespace, lease) = nest_controllers::LEASE;
    debug_assert_eq!(lease_namespace, "kube-system");
    while nodes.list(&ListParams::default()).await?.items.is_empty() || leases.get_opt(lease).await?.is_none() {
        anyhow::ensure!(started.elapsed() < args.timeout, "the node did not register or no controller-manager leads");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let planes: Api<nest_capn::api::NestedControlPlane> = Api::namespaced(client.clone(), "default");
    let infrastructures: Api<nest_capn::api::NestedCluster> = Api::namespaced(client.clone(), "default");
    let one = ListParams::default().limit(1);
    while clusters.list(&one).await.is_err()
        || planes.list(&one).await.is_err()
        || infrastructures.list(&one).await.is_err()
    {
        anyhow::ensure!(started.elapsed() < args.timeout, "the manager did not install the CRDs");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let mut existing = 0;
    for (step, count) in args.count.iter().copied().enumerate() {
        let names: Vec<String> = (0..count).map(|i| format!("t{step}-{i}")).collect();
        let began = Instant::now();
        let creations = names.iter().map(|name| {
            let client = client.clone();
            async move { nest_capn::bundle::create(&client, name, "default", &Default::default()).await }
        });
        for created in futures_util::future::join_all(creations).await {
            created?;
        }
        let ready_after = wait_provisioned(&clusters, &names, began, args.timeout).await?;
        let all = began.elapsed();
        existing += count;
        // Idle: a few seconds after the last one came up.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let per_tenant: Vec<Memory> = names
            .iter()
            .map(|name| {
                let api = memory_of(&format!("--tls-san={name}-apiserver "));
                let manager = memory_of(&format!("--identity={name}-controller-manager-0"));
                Memory { rss: api.rss + manager.rss, pss: api.pss + manager.pss, anon: api.anon + manager.anon }
            })
            .collect();
        let mean =
            |part: fn(&Memory) -> f64| round(per_tenant.iter().map(part).sum::<f64>() / per_tenant.len().max(1) as f64);
        let mut samples: Vec<Duration> = ready_after.into_values().collect();
        let summary = Summary::of(&mut samples);
        emit(json!({
            "bench": "tenants", "added": count, "tenants": existing,
            "ready_ms": {"p50": summary.p50_ms, "p99": summary.p99_ms, "max": summary.max_ms},
            "all_ready_seconds": round(all.as_secs_f64()),
            "idle_mib_per_tenant": {"rss": mean(|m| m.rss), "pss": mean(|m| m.pss), "anon": mean(|m| m.anon)},
            "management_rss_mib": {"apiserver": server.rss_mib()},
            "pod_cidr": args.pod_cidr,
        }));
    }
    Ok(())
}
