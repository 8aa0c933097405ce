//! The service proxy: what kube-proxy does, for ClusterIPs this machine holds. For every TCP port of every Service
//! whose ClusterIP lies in 127.0.0.0/8 or in a Service range given to [`run`] (`nest up`'s is `10.96.0.0/16`), it
//! listens on `<clusterIP>:<port>` and forwards each connection to a ready endpoint from the Service's
//! EndpointSlices, taking them in turn. A given range is made local to this machine first (`ip route replace local
//! <range> dev lo table local`, as 127.0.0.0/8 is), so that the proxy may listen on any of its addresses and pods in
//! their own network namespaces, routed to this machine through their node's bridge, reach them. A Service without
//! ready endpoints has no listener, so connections are refused, as kube-proxy's REJECT rule refuses them. Listeners
//! follow Services and EndpointSlices as they change.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::sync::RwLock;

/// `<clusterIP>:<port>` → the ready endpoints it forwards to.
type Table = BTreeMap<SocketAddr, Vec<SocketAddr>>;

/// One listening address and the endpoints it currently forwards to.
struct Listener {
    backends: Arc<RwLock<Vec<SocketAddr>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Runs the proxy until the watches end, serving loopback ClusterIPs and those of `service_ranges`.
pub async fn run(client: Client, service_ranges: Vec<String>) {
    let mut local = Vec::new();
    for range in &service_ranges {
        match crate::addresses::Pool::new(range) {
            Ok(pool) => local.push(pool),
            Err(error) => tracing::warn!(%error, "not a Service range"),
        }
        let out = std::process::Command::new("ip")
            .args(["route", "replace", "local", range, "dev", "lo"])
            .arg("table")
            .arg("local")
            .output();
        match out {
            Ok(out) if out.status.success() => {}
            Ok(out) => {
                tracing::warn!(%range, error = %String::from_utf8_lossy(&out.stderr).trim(), "making a Service range local")
            }
            Err(error) => tracing::warn!(%range, %error, "making a Service range local (is iproute2 installed?)"),
        }
    }
    let served = move |ip: &IpAddr| {
        ip.is_loopback() || matches!(ip, IpAddr::V4(v4) if local.iter().any(|range| range.contains(*v4)))
    };
    let (services, services_writer) = reflector::store::<Service>();
    let (slices, slices_writer) = reflector::store::<EndpointSlice>();
    let service_events = reflector(services_writer, watcher(Api::<Service>::all(client.clone()), Default::default()))
        .default_backoff()
        .map(|_| ());
    let slice_events = reflector(slices_writer, watcher(Api::<EndpointSlice>::all(client), Default::default()))
        .default_backoff()
        .map(|_| ());
    let mut changes = std::pin::pin!(futures_util::stream::select(service_events, slice_events));
    let mut listeners: BTreeMap<SocketAddr, Listener> = BTreeMap::new();
    while changes.next().await.is_some() {
        // Coalesce a burst of changes into one update.
        while let Some(Some(())) = futures_util::FutureExt::now_or_never(changes.next()) {}
        let table = table(&services.state(), &slices.state(), &served);
        listeners.retain(|address, _| table.contains_key(address));
        for (address, backends) in table {
            match listeners.get(&address) {
                Some(listener) => *listener.backends.write().await = backends,
                None => match listen(address, backends).await {
                    Ok(listener) => {
                        listeners.insert(address, listener);
                    }
                    Err(error) => tracing::warn!(%address, %error, "cannot serve a ClusterIP"),
                },
            }
        }
    }
}

/// The addresses to serve: every TCP port of every ClusterIP `served` takes that has ready endpoints.
fn table(services: &[Arc<Service>], slices: &[Arc<EndpointSlice>], served: &impl Fn(&IpAddr) -> bool) -> Table {
    let mut table = Table::new();
    for service in services {
        let spec = service.spec.clone().unwrap_or_default();
        let cluster_ips: BTreeSet<IpAddr> = spec
            .cluster_ips
            .iter()
            .flatten()
            .chain(spec.cluster_ip.iter())
            .filter_map(|ip| ip.parse().ok())
            .filter(|ip| served(ip))
            .collect();
        if cluster_ips.is_empty() {
            continue;
        }
        let namespace = service.namespace().unwrap_or_default();
        let own: Vec<&Arc<EndpointSlice>> = slices
            .iter()
            .filter(|s| {
                s.namespace().as_deref() == Some(namespace.as_str())
                    && s.labels().get("kubernetes.io/service-name") == Some(&service.name_any())
            })
            .collect();
        for port in spec.ports.iter().flatten() {
            if port.protocol.as_deref().is_some_and(|p| p != "TCP") {
                continue;
            }
            let Ok(service_port) = u16::try_from(port.port) else { continue };
            let mut backends = Vec::new();
            for slice in &own {
                let target = slice
                    .ports
                    .iter()
                    .flatten()
                    .find(|p| p.name.as_deref().unwrap_or("") == port.name.as_deref().unwrap_or(""))
                    .and_then(|p| p.port)
                    .and_then(|p| u16::try_from(p).ok());
                let Some(target) = target else { continue };
                for endpoint in &slice.endpoints {
                    if endpoint.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                        continue;
                    }
                    for address in &endpoint.addresses {
                        if let Ok(ip) = address.parse::<IpAddr>() {
                            backends.push(SocketAddr::new(ip, target));
                        }
                    }
                }
            }
            if backends.is_empty() {
                continue;
            }
            backends.sort();
            for ip in &cluster_ips {
                table.insert(SocketAddr::new(*ip, service_port), backends.clone());
            }
        }
    }
    table
}

async fn listen(address: SocketAddr, backends: Vec<SocketAddr>) -> std::io::Result<Listener> {
    let socket = tokio::net::TcpListener::bind(address).await?;
    let backends = Arc::new(RwLock::new(backends));
    let shared = backends.clone();
    let next = Arc::new(AtomicUsize::new(0));
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut inbound, _)) = socket.accept().await else { continue };
            let (backends, next) = (shared.clone(), next.clone());
            tokio::spawn(async move {
                let candidates = backends.read().await.clone();
                if candidates.is_empty() {
                    return;
                }
                // Round robin; an endpoint that refuses is skipped for the next one.
                let first = next.fetch_add(1, Ordering::Relaxed);
                for attempt in 0..candidates.len() {
                    let target = candidates[(first + attempt) % candidates.len()];
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        return;
                    }
                }
            });
        }
    });
    Ok(Listener { backends, task })
}
