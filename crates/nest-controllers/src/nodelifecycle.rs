//! Node lifecycle, after kube-controller-manager's `nodelifecycle` controller (1.33): a node whose Lease in
//! `kube-node-lease` has not been renewed for the grace period is marked `Ready=Unknown` ("Kubelet stopped posting node
//! status."), tainted `node.kubernetes.io/unreachable` (NoSchedule and NoExecute), and its pods' `Ready` condition
//! goes false. Once the node reports Ready again, the taints are removed. Nodes and Leases are read from the caches
//! of two watches, so looking at them every second sends nothing; only a change of a node's state is written.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

/// The taint an unreachable node gets.
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// How often nodes are looked at (kube-controller-manager's `--node-monitor-period`).
const MONITOR_EVERY: Duration = Duration::from_secs(1);

/// Runs the controller until the task is dropped. `grace` is kube-controller-manager's
/// `--node-monitor-grace-period`.
pub async fn run(client: Client, grace: Duration) {
    let (nodes, node_feed) = nest_client::cache(Api::<Node>::all(client.clone()), Default::default());
    let (leases, lease_feed) =
        nest_client::cache(Api::<Lease>::namespaced(client.clone(), "kube-node-lease"), Default::default());
    let monitor = async {
        if nodes.wait_until_ready().await.is_err() || leases.wait_until_ready().await.is_err() {
            return;
        }
        loop {
            if let Err(error) = pass(&client, &nodes.state(), &leases.state(), grace).await {
                tracing::debug!(%error, "node lifecycle");
            }
            tokio::time::sleep(MONITOR_EVERY).await;
        }
    };
    tokio::join!(node_feed, lease_feed, monitor);
}

fn seconds_now() -> i64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// Looks at every node once: `known` nodes and `leases` as the caches hold them.
async fn pass(client: &Client, known: &[Arc<Node>], leases: &[Arc<Lease>], grace: Duration) -> kube::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let renewals: std::collections::HashMap<String, i64> = leases
        .iter()
        .filter_map(|l| Some((l.name_any(), l.spec.as_ref()?.renew_time.as_ref()?.0.as_second())))
        .collect();
    for node in known {
        let name = node.name_any();
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.status.clone())
            .unwrap_or_default();
        let created = node.metadata.creation_timestamp.as_ref().map(|t| t.0.as_second()).unwrap_or(0);
        let last = renewals.get(&name).copied().unwrap_or(created);
        let silent = seconds_now() - last > grace.as_secs() as i64;
        let tainted =
            node.spec.as_ref().and_then(|s| s.taints.as_ref()).into_iter().flatten().any(|t| t.key == UNREACHABLE);
        if silent && ready == "True" {
            tracing::info!(node = %name, "node stopped renewing its lease: marking it NotReady");
            let now = nest_core::clock::rfc3339_now();
            let conditions: Vec<serde_json::Value> = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.clone())
                .unwrap_or_default()
                .into_iter()
                .map(|c| {
                    json!({"type": c.type_, "status": "Unknown", "reason": "NodeStatusUnknown",
                           "message": "Kubelet stopped posting node status.",
                           "lastHeartbeatTime": c.last_heartbeat_time, "lastTransitionTime": now})
                })
                .collect();
            let status = json!({"status": {"conditions": conditions}});
            nodes.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await?;
            mark_pods_not_ready(client, &name).await?;
        }
        let taints: Vec<Taint> = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
        if silent && !tainted {
            let mut taints = taints;
            for effect in ["NoSchedule", "NoExecute"] {
                taints.push(Taint {
                    key: UNREACHABLE.into(),
                    effect: effect.into(),
                    time_added: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        jiff::Timestamp::from_second(seconds_now()).unwrap_or(jiff::Timestamp::UNIX_EPOCH),
                    )),
                    value: None,
                });
            }
            nodes.patch(&name, &PatchParams::default(), &Patch::Merge(&json!({"spec": {"taints": taints}}))).await?;
        } else if !silent && tainted && ready == "True" {
            let kept: Vec<Taint> = taints.into_iter().filter(|t| t.key != UNREACHABLE).collect();
            nodes.patch(&name, &PatchParams::default(), &Patch::Merge(&json!({"spec": {"taints": kept}}))).await?;
        }
    }
    Ok(())
}

/// Sets `Ready=False` on every pod bound to `node`.
async fn mark_pods_not_ready(client: &Client, node: &str) -> kube::Result<()> {
    let pods: Api<Pod> = Api::all(client.clone());
    let bound = pods.list(&ListParams::default().fields(&format!("spec.nodeName={node}"))).await?;
    let now = nest_core::clock::rfc3339_now();
    for pod in bound.items {
        let conditions: Vec<serde_json::Value> = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default()
            .into_iter()
            .map(|c| {
                let mut condition = serde_json::to_value(&c).unwrap_or_default();
                if c.type_ == "Ready" || c.type_ == "ContainersReady" {
                    condition["status"] = json!("False");
                    condition["reason"] = json!("NodeNotReady");
                    condition["lastTransitionTime"] = json!(now);
                }
                condition
            })
            .collect();
        let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
        let patch = json!({"status": {"conditions": conditions}});
        nest_client::done_unless_refused(
            api.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await,
        )?;
    }
    Ok(())
}
