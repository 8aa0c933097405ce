//! Pod garbage collection, after kube-controller-manager's `podgc` controller (`pkg/controller/podgc`, 1.33): pods
//! bound to a node that no longer exists are deleted at once (grace period 0), since no node will ever stop them. Like
//! kube, a node must be missing on two looks in a row, so a pod bound to a node that is just registering is left
//! alone.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};

use crate::informers::{Informers, listed};

/// How often pods are looked at (kube: 20 s).
const EVERY: Duration = Duration::from_secs(10);

/// Runs the collector until the process stops, once the caches of nodes and pods have listed.
pub(crate) async fn run(client: Client, caches: Informers) {
    caches.nodes.synced().await;
    caches.pods.synced().await;
    let (nodes, pods) = (caches.nodes.store(), caches.pods.store());
    let mut suspects: BTreeSet<String> = BTreeSet::new();
    loop {
        match sweep(&client, &nodes, &pods, &suspects).await {
            Ok(missing) => suspects = missing,
            Err(error) => tracing::debug!(%error, "pod garbage collection"),
        }
        tokio::time::sleep(EVERY).await;
    }
}

/// Deletes the pods of nodes missing now and in `suspects`; returns the nodes missing now.
async fn sweep(
    client: &Client,
    nodes: &Store<Node>,
    pods: &Store<Pod>,
    suspects: &BTreeSet<String>,
) -> Result<BTreeSet<String>, kube::Error> {
    let nodes: BTreeSet<String> = nodes.state().iter().map(|n| n.name_any()).collect();
    let bound = listed(pods, |p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty()));
    let mut missing = BTreeSet::new();
    for pod in &bound {
        let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else { continue };
        if nodes.contains(&node) {
            continue;
        }
        missing.insert(node.clone());
        if !suspects.contains(&node) {
            continue;
        }
        tracing::info!(pod = %pod.name_any(), %node, "deleting a pod whose node is gone");
        let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
        let force = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: pod.uid(), resource_version: None }),
            ..DeleteParams::background()
        };
        nest_client::done_unless_refused(api.delete(&pod.name_any(), &force).await)?;
    }
    Ok(missing)
}
