//! `nest node`: nodes that run the pods bound to them as processes (when their images are allowed) or in simulation
//! (`--runtime`).

use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The cluster to join.
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "FILE")]
    kubeconfig: PathBuf,
    /// The node's name; with `--count`, the prefix of `<name>-<i>`.
    #[arg(long, value_name = "NAME")]
    name: String,
    /// How many nodes this process simulates.
    #[arg(long, default_value_t = 1)]
    count: u8,
    /// Capacity: CPU cores.
    #[arg(long, default_value = "4")]
    cpu: String,
    /// Capacity: memory.
    #[arg(long, default_value = "8Gi")]
    memory: String,
    /// Capacity: pods.
    #[arg(long, default_value_t = 110)]
    pods: u32,
    /// How long a pod takes to become Running and Ready, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 200)]
    start_delay_ms: u64,
    /// How often each node renews its Lease, in seconds (the Lease lasts four times as long).
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    lease_seconds: u64,
    /// How pods run: `simulated` (every pod reported Running without running anything, for scale tests) or
    /// `process` (every pod as processes, from its images; a pod whose RuntimeClass's handler is `simulated` is
    /// simulated).
    #[arg(long, value_name = "RUNTIME", default_value = "simulated")]
    runtime: nest_node::Mode,
    /// Where the process runtime keeps pod files and claims (`<DIR>/<node name>/`).
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "DIR", default_value = "nest-node-data")]
    data_dir: PathBuf,
    /// The pod address range, instead of the one picked from the node's index (with `--count`, node i takes the
    /// i-th range of the same size after it).
    #[arg(long, value_name = "CIDR")]
    pod_cidr: Option<String>,
    /// The port of each node's kubelet API (on the node's address; 0 picks a free one).
    #[arg(long, value_name = "PORT", default_value_t = 10250)]
    kubelet_port: u16,
    /// The cluster CA's directory (`ca.crt` and `ca.key`, as `nest apiserver` keeps them in `<data-dir>/pki`): each
    /// node issues its kubelet serving certificate from it. Without it (or `--tls-cert-file`), nodes serve no kubelet
    /// API and `kubectl logs` cannot reach their pods.
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "DIR")]
    ca_dir: Option<PathBuf>,
    /// The kubelet serving certificate and key (PEM), issued by the cluster CA, instead of `--ca-dir`.
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "FILE", requires = "tls_private_key_file", conflicts_with = "ca_dir")]
    tls_cert_file: Option<PathBuf>,
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "FILE")]
    tls_private_key_file: Option<PathBuf>,
    /// The first back-off before restarting a container that keeps crashing, in seconds (it doubles up to 300).
    #[arg(long, value_name = "SECONDS", default_value_t = 10)]
    crash_backoff_seconds: u64,
    /// The OCI runtime every container of the process runtime runs in (runc, or one with its command line).
    #[arg(long, value_name = "EXECUTABLE", default_value = "runc")]
    oci_runtime: PathBuf,
    #[command(flatten)]
    registries: Registries,
    /// The most an image may be (a quantity, as `8Gi`): the sum of its blobs as pulled, and again its files once
    /// unpacked. A bigger one is not pulled, and its pod waits with `ErrImagePull`.
    #[arg(long, value_name = "BYTES", default_value = "8Gi", value_parser = parse_bytes)]
    image_size_limit: u64,
    #[command(flatten)]
    tenant_share: TenantShare,
}

/// Where a node pulls images from, the flags of `nest node` and `nest up`.
#[derive(clap::Args, Debug, Clone)]
pub struct Registries {
    /// A registry the node pulls images it lacks from, with a pod's `imagePullSecrets`; repeatable. `*` (the
    /// default) is any registry not of this machine; naming registries restricts the node to them (add `*` to keep
    /// the rest). `HOST[:PORT]` over HTTPS, except a loopback host (`127.0.0.1:5000`, `localhost:5000`), over plain
    /// HTTP as Docker does; `http://HOST[:PORT]` over plain HTTP. Host and port name a registry together (no port:
    /// the scheme's). A registry of this machine (loopback, its own addresses, its pods') is pulled from only when
    /// named here, never because a pod's image names it.
    #[arg(long, value_name = "REGISTRY", default_value = "*", value_parser = nest_node::registries::check_entry)]
    pub pull_from: Vec<String>,
    /// containerd's registry host directory (its `config_path`): `<DIR>/<registry host>/hosts.toml`, each with the
    /// registry's mirrors (`[host."http://127.0.0.1:5000"]`, tried in order, then the registry itself or its
    /// `server`), `capabilities`, `ca` and `skip_verify` per host. Hosts named here are the admin's: they may be on
    /// this machine.
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "DIR")]
    pub registry_config: Option<PathBuf>,
    /// A mirror for a registry, `HOST=ENDPOINT` (`docker.io=http://127.0.0.1:5000`), asked before the registry
    /// itself (and before the mirrors of --registry-config); repeatable, tried in the order given.
    #[arg(long = "registry-mirror", value_name = "HOST=ENDPOINT", value_parser = nest_node::hosts::check_mirror)]
    pub registry_mirrors: Vec<String>,
}

impl Registries {
    /// The registry hosts these flags configure.
    pub fn hosts(&self) -> anyhow::Result<nest_node::hosts::Hosts> {
        let hosts = match &self.registry_config {
            Some(dir) => nest_node::hosts::Hosts::load(dir)?,
            None => nest_node::hosts::Hosts::default(),
        };
        Ok(hosts.with_mirrors(&self.registry_mirrors)?)
    }
}

/// Each tenant's share of a node, the flags of `nest node` and `nest up`.
#[derive(clap::Args, Debug, Clone)]
pub struct TenantShare {
    /// The memory all of one tenant's pods on the node may take together (a quantity): the limit of the tenant's
    /// cgroup subtree, where the kernel's OOM killer acts when they pass it. A pod's `tenancy.nest.dev/tenant-memory`
    /// annotation, which the syncer writes from the tenant's Cluster, says otherwise. Tenants' pods are those the
    /// syncer made (with its `tenancy.nest.dev/cluster` label); the defaults suit a machine of 24 GiB and 2 cores.
    #[arg(long, value_name = "BYTES", default_value = "4Gi", value_parser = nest_node::process::tenants::memory_flag)]
    tenant_memory: u64,
    /// The CPU all of one tenant's pods on the node may take together, in cores (`1`, `500m`): a CFS quota, and a
    /// weight against other tenants; `tenancy.nest.dev/tenant-cpu` says otherwise.
    #[arg(long, value_name = "CORES", default_value = "1", value_parser = nest_node::process::tenants::cpu_flag)]
    tenant_cpu: u64,
    /// The processes and threads all of one tenant's pods on the node may have together;
    /// `tenancy.nest.dev/tenant-pids` says otherwise.
    #[arg(long, value_name = "COUNT", default_value = "4096", value_parser = nest_node::process::tenants::pids_flag)]
    tenant_pids: u64,
}

impl TenantShare {
    /// The share as the node takes it.
    pub fn share(&self) -> nest_node::process::tenants::Share {
        nest_node::process::tenants::Share {
            memory: self.tenant_memory,
            millicores: self.tenant_cpu,
            pids: self.tenant_pids,
        }
    }
}

/// A quantity of bytes, as `8Gi` or `500M`.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let bytes = nest_core::quantity::parse(text);
    if bytes.is_finite() && bytes >= 1.0 {
        Ok(bytes as u64)
    } else {
        Err(format!("{text:?} is not a positive quantity of bytes"))
    }
}

/// The kubelet API's certificates for node `options`, from `--ca-dir` or `--tls-cert-file`; `ca_pem` (from the
/// kubeconfig) verifies the API server's client certificate.
fn kubelet_tls(
    args: &Args,
    options: &nest_node::Options,
    ca_pem: &str,
) -> anyhow::Result<Option<nest_node::kubelet::Tls>> {
    let address: std::net::IpAddr = options.address.parse()?;
    if let Some(dir) = &args.ca_dir {
        let (cert, key, ca) = nest_apiserver::certs::issue_kubelet_serving(dir, &options.name, &[address])?;
        return Ok(Some(nest_node::kubelet::Tls { cert, key, client_ca: ca }));
    }
    if let (Some(cert), Some(key)) = (&args.tls_cert_file, &args.tls_private_key_file) {
        let read = |path: &PathBuf| {
            std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))
        };
        return Ok(Some(nest_node::kubelet::Tls { cert: read(cert)?, key: read(key)?, client_ca: ca_pem.to_string() }));
    }
    Ok(None)
}

/// The options of node `i` of `args`.
fn options(args: &Args, i: u8, hosts: &nest_node::hosts::Hosts) -> nest_node::Options {
    let name = if args.count == 1 { args.name.clone() } else { format!("{}-{i}", args.name) };
    let mut options = nest_node::Options::numbered(name, i, args.runtime, &args.data_dir);
    options.process.crash_backoff = Duration::from_secs(args.crash_backoff_seconds);
    options.process.oci_runtime = args.oci_runtime.clone();
    options.process.pull_from = args.registries.pull_from.clone();
    options.process.hosts = hosts.clone();
    options.process.image_size_limit = args.image_size_limit;
    options.process.tenant_share = args.tenant_share.share();
    if let Some(cidr) = &args.pod_cidr {
        options.pod_cidr = nth_range(cidr, i).unwrap_or_else(|| cidr.clone());
    }
    options.cpu = args.cpu.clone();
    options.memory = args.memory.clone();
    options.pods = args.pods;
    options.start_delay = Duration::from_millis(args.start_delay_ms);
    options.lease_every = Duration::from_secs(args.lease_seconds.max(1));
    options
}

/// The `index`-th range of the size of `cidr` from `cidr` on (`127.20.0.0/16`, 1 → `127.21.0.0/16`).
fn nth_range(cidr: &str, index: u8) -> Option<String> {
    let (address, length) = cidr.split_once('/')?;
    let address: std::net::Ipv4Addr = address.parse().ok()?;
    let length: u32 = length.parse().ok().filter(|l| (1..=32).contains(l))?;
    let step = 1u32.checked_shl(32 - length)?;
    let start = u32::from(address).checked_add(step.checked_mul(u32::from(index))?)?;
    Some(format!("{}/{length}", std::net::Ipv4Addr::from(start)))
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let hosts = args.registries.hosts()?;
    let nest_client::Connection { client, ca_pem } = nest_client::connect(&args.kubeconfig).await?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut all = Vec::new();
    for i in 0..args.count.max(1) {
        let mut options = options(&args, i, &hosts);
        if let Some(tls) = kubelet_tls(&args, &options, &ca_pem)? {
            options.kubelet = Some((tls, args.kubelet_port));
        }
        all.push(options);
    }
    let nodes = all.into_iter().map(|options| {
        let client = client.clone();
        let mut stopped = stopped.clone();
        let shutdown = async move {
            let _ = stopped.wait_for(|s| *s).await;
        };
        tokio::spawn(async move { nest_node::run(client, options, shutdown).await })
    });
    let mut nodes: Vec<_> = nodes.collect();
    eprintln!("nest node: {} {} node(s) running", nodes.len(), args.runtime.label());
    tokio::select! {
        (result, index, _) = futures_util::future::select_all(nodes.iter_mut()) => {
            nodes.remove(index);
            let _ = stop.send(true);
            futures_util::future::join_all(nodes).await;
            result??;
        }
        () = super::shutdown_signal() => {
            // Each node stops the processes it runs before it returns.
            let _ = stop.send(true);
            for result in futures_util::future::join_all(nodes).await {
                result??;
            }
        }
    }
    eprintln!("nest node: stopped");
    Ok(())
}
