//! `nest syncer`: copies every tenant's workloads into the management cluster and their status back
//! (`nest_syncer`), serving its counters as Prometheus text on `/metrics`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The management ("super") cluster; inside a pod, the pod's service account when unset.
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// How often every object of every tenant is compared, both ways.
    #[arg(long, value_name = "SECONDS", default_value_t = 60)]
    patrol_seconds: u64,
    /// Where to serve /metrics (port 0 picks one; it is printed).
    #[arg(long, value_name = "ADDR:PORT")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// The address tenants' API servers reach this syncer at, for `kubectl logs` through their virtual nodes.
    #[arg(long, value_name = "IP", default_value = "127.0.0.1")]
    kubelet_address: std::net::IpAddr,
    /// The ports the tenants' kubelet endpoints take, one each (the node's network wall lets tenants' pods reach
    /// them).
    #[arg(long, value_name = "FIRST-LAST", default_value = "10300-10999", value_parser = parse_ports)]
    kubelet_ports: std::ops::RangeInclusive<u16>,
    /// A custom resource kind to sync as well, `GROUP/VERSION/KIND` (spec down, status up); repeatable. Its CRD must
    /// exist in the super cluster; labelled `tenancy.nest.dev/public=true` there, it is copied into every tenant.
    #[arg(long = "sync-resource", value_name = "GROUP/VERSION/KIND", value_parser = parse_gvk)]
    sync_resources: Vec<(String, String, String)>,
    /// Also write each super Service's ClusterIP into its tenant Service's `spec.externalIPs`.
    #[arg(long)]
    service_external_ips: bool,
    /// A label and annotation prefix whose entries on super objects flow up to the tenant's (repeatable; default
    /// `transparency.tenancy.nest.dev/`).
    #[arg(long = "transparent-prefix", value_name = "PREFIX")]
    transparent_prefixes: Vec<String>,
    /// The Pod Security level tenants' namespaces enforce in the management cluster, unless a tenant's Cluster says
    /// otherwise (annotation `tenancy.nest.dev/pod-security`).
    #[arg(long, value_name = "LEVEL", default_value = "restricted", value_parser = parse_level)]
    pod_security_level: nest_syncer::tenants::PodSecurityLevel,
    /// A Service type tenants may use besides ClusterIP (NodePort, LoadBalancer, ExternalName); repeatable.
    #[arg(long = "allow-service-type", value_name = "TYPE")]
    allow_service_types: Vec<String>,
    /// A pod volume type tenants may use besides the defaults (configMap, secret, downwardAPI, projected, emptyDir,
    /// persistentVolumeClaim, ephemeral, image); repeatable.
    #[arg(long = "allow-volume-type", value_name = "TYPE")]
    allow_volume_types: Vec<String>,
    /// A toleration key tenants' pods may use besides node.kubernetes.io/not-ready and unreachable; repeatable.
    #[arg(long = "allow-toleration-key", value_name = "KEY")]
    allow_toleration_keys: Vec<String>,
    /// A node label tenants' pods may select nodes by besides OS, architecture, zone, region and instance type;
    /// repeatable.
    #[arg(long = "allow-node-selector-key", value_name = "KEY")]
    allow_node_selector_keys: Vec<String>,
    /// A scheduler tenants' pods may name besides default-scheduler; repeatable.
    #[arg(long = "allow-scheduler-name", value_name = "NAME")]
    allow_scheduler_names: Vec<String>,
    /// A runtime class tenants' pods may name besides `nest-simulated`; repeatable.
    #[arg(long = "allow-runtime-class", value_name = "NAME")]
    allow_runtime_classes: Vec<String>,
    /// A priority class tenants' pods may name besides those labelled tenancy.nest.dev/public=true; repeatable.
    #[arg(long = "allow-priority-class", value_name = "NAME")]
    allow_priority_classes: Vec<String>,
    /// A cap on what each tenant keeps in the management cluster, `<plural>-objects=N` or `<plural>-bytes=SIZE`
    /// (`configmaps-bytes=16Mi`; defaults: 10,000 objects of each kind, 64Mi of ConfigMaps and of Secrets), or on
    /// the longest grace period its pods get, `pods-grace-period-seconds=N` (default 3600); repeatable. A tenant's
    /// Cluster annotation `tenancy.nest.dev/cap-<what>` (`cap-pods-objects`, …) sets its own.
    #[arg(long = "cap", value_name = "WHAT=VALUE", value_parser = parse_cap)]
    caps: Vec<(String, String)>,
    /// What all of a tenant's pods may take together, `RESOURCE=AMOUNT` for pods, requests.cpu, requests.memory,
    /// limits.cpu or limits.memory (defaults, sized for 10,000 pods of the default resources: 10000 pods, 100 and
    /// 320Gi of requests, 5000 and 5Ti of limits); repeatable. A tenant's Cluster annotation
    /// `tenancy.nest.dev/quota-<resource>` sets its own.
    #[arg(long = "quota", value_name = "RESOURCE=AMOUNT", value_parser = parse_quota)]
    quotas: Vec<(String, String)>,
    /// What a tenant's container that does not say gets, `WHAT=AMOUNT` for cpu-limit, memory-limit, cpu-request or
    /// memory-request (defaults: limits 500m and 512Mi, requests 10m and 32Mi), as a LimitRange in each of its
    /// namespaces; repeatable. A tenant's Cluster annotation `tenancy.nest.dev/default-<what>` sets its own.
    #[arg(long = "pod-default", value_name = "WHAT=AMOUNT", value_parser = parse_pod_default)]
    pod_defaults: Vec<(String, String)>,
    /// A pod range of the management cluster besides its nodes' podCIDRs (which are read): tenants' Endpoints may
    /// name only their own pods in it, and never its first address (a node bridge's); repeatable.
    #[arg(long = "pod-cidr", value_name = "CIDR")]
    pod_cidrs: Vec<nest_syncer::addresses::Range>,
    /// The management cluster's Service range, which tenants' Endpoints may not name; repeatable.
    #[arg(long = "service-cidr", value_name = "CIDR", default_value = nest_syncer::DEFAULT_SERVICE_RANGE)]
    service_cidrs: Vec<nest_syncer::addresses::Range>,
}

fn parse_cap(text: &str) -> Result<(String, String), String> {
    let (what, value) = text.split_once('=').ok_or_else(|| format!("{text:?} is not WHAT=VALUE"))?;
    if !nest_syncer::policy::Policy::default().set_cap(what, value) {
        return Err(format!("{text:?} is not <plural>-objects=N or <plural>-bytes=SIZE"));
    }
    Ok((what.to_string(), value.to_string()))
}

fn parse_quota(text: &str) -> Result<(String, String), String> {
    let (what, value) = text.split_once('=').ok_or_else(|| format!("{text:?} is not RESOURCE=AMOUNT"))?;
    if !nest_syncer::compute::Quota::default().set(what, value) {
        return Err(format!(
            "{text:?}: RESOURCE is one of {}, AMOUNT a quantity",
            nest_syncer::compute::RESOURCES.join(", ")
        ));
    }
    Ok((what.to_string(), value.to_string()))
}

fn parse_pod_default(text: &str) -> Result<(String, String), String> {
    let (what, value) = text.split_once('=').ok_or_else(|| format!("{text:?} is not WHAT=AMOUNT"))?;
    if !nest_syncer::compute::Defaults::default().set(what, value) {
        return Err(format!(
            "{text:?}: WHAT is cpu-limit, memory-limit, cpu-request or memory-request, AMOUNT a quantity above zero"
        ));
    }
    Ok((what.to_string(), value.to_string()))
}

impl Args {
    /// The default policy with what the flags add.
    fn policy(&self) -> nest_syncer::policy::Policy {
        let mut policy = nest_syncer::policy::Policy::default();
        policy.service_types.extend(self.allow_service_types.iter().cloned());
        policy.volume_types.extend(self.allow_volume_types.iter().cloned());
        policy.toleration_keys.extend(self.allow_toleration_keys.iter().cloned());
        policy.node_selector_keys.extend(self.allow_node_selector_keys.iter().cloned());
        policy.scheduler_names.extend(self.allow_scheduler_names.iter().cloned());
        policy.runtime_classes.extend(self.allow_runtime_classes.iter().cloned());
        policy.priority_classes.extend(self.allow_priority_classes.iter().cloned());
        for (what, value) in &self.caps {
            policy.set_cap(what, value);
        }
        for (resource, amount) in &self.quotas {
            policy.quota.set(resource, amount);
        }
        for (what, amount) in &self.pod_defaults {
            policy.defaults.set(what, amount);
        }
        policy
    }
}

pub fn parse_level(text: &str) -> Result<nest_syncer::tenants::PodSecurityLevel, String> {
    nest_syncer::tenants::PodSecurityLevel::parse(text)
        .ok_or_else(|| format!("{text:?} is not privileged, baseline or restricted"))
}

pub fn parse_gvk(text: &str) -> Result<(String, String, String), String> {
    nest_syncer::kinds::parse_gvk(text).ok_or_else(|| format!("{text:?} is not GROUP/VERSION/KIND"))
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let client = nest_client::connect_or_in_cluster(args.kubeconfig.as_deref()).await?;
    let options = nest_syncer::Options {
        patrol: Duration::from_secs(args.patrol_seconds.max(1)),
        kubelet_address: args.kubelet_address,
        kubelet_ports: args.kubelet_ports.clone(),
        custom: args.sync_resources.clone(),
        service_external_ips: args.service_external_ips,
        transparent_prefixes: if args.transparent_prefixes.is_empty() {
            vec![nest_syncer::names::TRANSPARENT_PREFIX.to_string()]
        } else {
            args.transparent_prefixes.clone()
        },
        pod_security: args.pod_security_level,
        policy: args.policy(),
        pod_ranges: args.pod_cidrs.clone(),
        service_ranges: args.service_cidrs.clone(),
        ..Default::default()
    };
    let (syncer, running) = nest_syncer::start(client, options);
    if let Some(address) = args.metrics_listen {
        let listener =
            tokio::net::TcpListener::bind(address).await.with_context(|| format!("listening on {address}"))?;
        eprintln!("nest syncer: metrics at http://{}/metrics", listener.local_addr()?);
        tokio::spawn(serve_metrics(listener, syncer));
    }
    eprintln!("nest syncer: running");
    tokio::select! {
        () = running => anyhow::bail!("the syncer stopped"),
        () = super::shutdown_signal() => {
            eprintln!("nest syncer: stopped");
            Ok(())
        }
    }
}

/// A minimal HTTP/1.1 server for `GET /metrics`: one response per connection.
pub async fn serve_metrics(listener: tokio::net::TcpListener, syncer: Arc<nest_syncer::Syncer>) {
    loop {
        let Ok((mut connection, _)) = listener.accept().await else { continue };
        let syncer = syncer.clone();
        tokio::spawn(async move {
            let mut request = Vec::new();
            let mut buffer = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16 * 1024 {
                match tokio::time::timeout(Duration::from_secs(5), connection.read(&mut buffer)).await {
                    Ok(Ok(n)) if n > 0 => request.extend_from_slice(&buffer[..n]),
                    _ => return,
                }
            }
            let line = String::from_utf8_lossy(&request);
            let path = line.split_whitespace().nth(1).unwrap_or_default();
            let (status, body) = match path {
                "/metrics" => ("200 OK", nest_syncer::metrics::render(&syncer)),
                "/healthz" => ("200 OK", "ok\n".to_string()),
                _ => ("404 Not Found", "not found\n".to_string()),
            };
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = connection.write_all(response.as_bytes()).await;
        });
    }
}

/// `FIRST-LAST`, a range of ports.
fn parse_ports(text: &str) -> Result<std::ops::RangeInclusive<u16>, String> {
    let bad = || format!("{text:?} is not a range of ports such as 10300-10999");
    let (first, last) = text.split_once('-').ok_or_else(bad)?;
    let (first, last): (u16, u16) = (first.parse().map_err(|_| bad())?, last.parse().map_err(|_| bad())?);
    if first == 0 || first > last {
        return Err(bad());
    }
    Ok(first..=last)
}
