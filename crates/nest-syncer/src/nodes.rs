//! Virtual nodes: a tenant pod is bound to a node named after the super node its super pod runs on. The node is made
//! in the tenant on first use with the super node's capacity, addresses and conditions; every ten seconds its status
//! is copied again and its Lease renewed while the super node is Ready (so the tenant's node controller keeps it
//! Ready); once no tenant pod has been bound to it for the grace period, it is removed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{DaemonEndpoint, Node, NodeAddress, NodeDaemonEndpoints, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use serde_json::json;

use crate::Syncer;
use crate::names::VIRTUAL_NODE_LABEL;
use crate::tenants::Tenant;

/// How often virtual nodes are refreshed.
const REFRESH: Duration = Duration::from_secs(10);

/// The status a virtual node shows for super node `node`: its capacity, conditions (heartbeat now) and system
/// information; its InternalIP and kubelet port are the tenant's kubelet endpoint on the syncer, when it has one.
fn status_of(syncer: &Syncer, tenant: &Tenant, node: &Node) -> NodeStatus {
    let status = node.status.clone().unwrap_or_default();
    let mut addresses = status.addresses.unwrap_or_default();
    let mut endpoints = None;
    if let Some(port) = tenant.kubelet_port {
        addresses.retain(|a| a.type_ != "InternalIP");
        let address = syncer.options.kubelet_address.to_string();
        addresses.insert(0, NodeAddress { type_: "InternalIP".into(), address });
        endpoints = Some(NodeDaemonEndpoints { kubelet_endpoint: Some(DaemonEndpoint { port: i32::from(port) }) });
    }
    let now = Time(jiff::Timestamp::now());
    let conditions = status.conditions.map(|conditions| {
        conditions
            .into_iter()
            .map(|mut c| {
                c.last_heartbeat_time = Some(now.clone());
                c
            })
            .collect()
    });
    NodeStatus {
        capacity: status.capacity,
        allocatable: status.allocatable,
        addresses: Some(addresses),
        daemon_endpoints: endpoints,
        conditions,
        node_info: status.node_info,
        ..Default::default()
    }
}

fn ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Makes the virtual node `name` in `tenant` unless it is there.
pub async fn ensure_virtual_node(syncer: &Syncer, tenant: &Tenant, name: &str) -> kube::Result<()> {
    let nodes: Api<Node> = Api::all(tenant.client.clone());
    if nodes.get_opt(name).await?.is_some() {
        return Ok(());
    }
    let super_node = syncer.super_nodes.get(&ObjectRef::new(name));
    let mut labels: BTreeMap<String, String> = super_node
        .as_ref()
        .map(|n| {
            n.labels()
                .iter()
                .filter(|(k, _)| k.starts_with("kubernetes.io/") || k.starts_with("topology.kubernetes.io/"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    labels.insert(VIRTUAL_NODE_LABEL.into(), "true".into());
    labels.insert("kubernetes.io/hostname".into(), name.into());
    // Made with its status, as a kubelet registers, so that the tenant's node lifecycle controller lifts the
    // `not-ready` taint the node is created with as soon as it sees it.
    let node = Node {
        metadata: ObjectMeta { name: Some(name.into()), labels: Some(labels), ..Default::default() },
        status: super_node.as_ref().map(|super_node| status_of(syncer, tenant, super_node)),
        ..Default::default()
    };
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => return Ok(()),
        Err(error) => return Err(error),
    }
    renew_lease(tenant, name).await
}

async fn renew_lease(tenant: &Tenant, name: &str) -> kube::Result<()> {
    let leases: Api<Lease> = Api::namespaced(tenant.client.clone(), "kube-node-lease");
    let now = MicroTime(jiff::Timestamp::now());
    let patch = json!({"spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now}});
    match leases.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    namespace: Some("kube-node-lease".into()),
                    ..Default::default()
                },
                spec: Some(serde_json::from_value(patch["spec"].clone()).map_err(kube::Error::SerdeError)?),
            };
            match leases.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
                Err(error) => Err(error),
            }
        }
        Err(error) => Err(error),
    }
}

/// Refreshes every tenant's virtual nodes every ten seconds.
pub async fn run(syncer: Arc<Syncer>) {
    let mut unused_since: BTreeMap<(String, String), Instant> = BTreeMap::new();
    loop {
        let tenants: Vec<Arc<Tenant>> = syncer.tenants.read().expect("the tenants lock").values().cloned().collect();
        for tenant in tenants {
            if let Err(error) = refresh(&syncer, &tenant, &mut unused_since).await {
                tracing::debug!(tenant = %tenant.key, %error, "refreshing virtual nodes");
            }
        }
        tokio::time::sleep(REFRESH).await;
    }
}

async fn refresh(
    syncer: &Syncer,
    tenant: &Tenant,
    unused_since: &mut BTreeMap<(String, String), Instant>,
) -> kube::Result<()> {
    let nodes: Api<Node> = Api::all(tenant.client.clone());
    let virtual_nodes = nodes.list(&ListParams::default().labels(VIRTUAL_NODE_LABEL)).await?;
    let pods = syncer.find_kind("pods").expect("pods are synced");
    let bound: Vec<String> = tenant
        .cache(pods)
        .objects
        .state()
        .iter()
        .filter_map(|p| p.data["spec"]["nodeName"].as_str().map(str::to_string))
        .collect();
    for node in virtual_nodes.items {
        let name = node.name_any();
        let key = (tenant.key.clone(), name.clone());
        if bound.contains(&name) {
            unused_since.remove(&key);
        } else {
            let since = *unused_since.entry(key.clone()).or_insert_with(Instant::now);
            if since.elapsed() >= syncer.options.node_grace {
                tracing::info!(tenant = %tenant.key, node = %name, "removing an unused virtual node");
                let _ = nodes.delete(&name, &DeleteParams::default()).await;
                unused_since.remove(&key);
                continue;
            }
        }
        let Some(super_node) = syncer.super_nodes.get(&ObjectRef::new(&name)) else { continue };
        let patch = json!({"status": status_of(syncer, tenant, &super_node)});
        nodes.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        if ready(&super_node) {
            renew_lease(tenant, &name).await?;
        }
    }
    Ok(())
}
