//! DaemonSets, after kube-controller-manager's `daemon` controller (`pkg/controller/daemon`, 1.33): one pod on every
//! node the pod template's `nodeSelector` and required node affinity allow and whose `NoSchedule`/`NoExecute` taints
//! it tolerates, placed on its node directly; pods on nodes that no longer qualify are deleted. A template change
//! replaces pods one node at a time (`RollingUpdate` with `maxUnavailable` 1) or waits for them to be deleted
//! (`OnDelete`). Like kube, daemon pods tolerate the node-condition taints (`not-ready`, `unreachable`, pressure,
//! `unschedulable`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod, Toleration};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::informers::{Informers, listed};
use crate::replicaset::{controlled_by, is_active, is_ready};

/// The label recording which template generation a daemon pod was made from.
pub const GENERATION_LABEL: &str = "pod-template-generation";

/// Runs the controller until the process stops. DaemonSets are looked at again every few seconds, which is how new
/// nodes are noticed.
pub(crate) async fn run(client: Client, caches: Informers) {
    let pair = (&caches.daemon_sets, &caches.pods);
    let nodes = vec![caches.nodes.until_synced()];
    crate::run_owning(client, &caches, pair, nodes, reconcile, "daemonset-controller").await;
}

/// The tolerations kube-controller-manager adds to every daemon pod, and to one on the host's network, which does not
/// need the node's pod network, `network-unavailable` too.
fn daemon_tolerations(host_network: bool) -> Vec<Toleration> {
    let toleration = |key: &str, effect: &str| Toleration {
        key: Some(key.into()),
        operator: Some("Exists".into()),
        effect: Some(effect.into()),
        ..Default::default()
    };
    let mut tolerations = vec![
        toleration("node.kubernetes.io/not-ready", "NoExecute"),
        toleration("node.kubernetes.io/unreachable", "NoExecute"),
        toleration("node.kubernetes.io/disk-pressure", "NoSchedule"),
        toleration("node.kubernetes.io/memory-pressure", "NoSchedule"),
        toleration("node.kubernetes.io/pid-pressure", "NoSchedule"),
        toleration("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if host_network {
        tolerations.push(toleration("node.kubernetes.io/network-unavailable", "NoSchedule"));
    }
    tolerations
}

/// Whether the daemon pod described by `template` belongs on `node`.
fn eligible(set: &DaemonSet, node: &Node) -> bool {
    let spec = set.spec.as_ref().and_then(|s| s.template.spec.clone()).unwrap_or_default();
    let labels = node.labels();
    if !spec.node_selector.iter().flatten().all(|(k, v)| labels.get(k) == Some(v)) {
        return false;
    }
    let mut tolerations = spec.tolerations.unwrap_or_default();
    tolerations.extend(daemon_tolerations(spec.host_network == Some(true)));
    let taints = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    nest_client::taints::untolerated(&taints, &tolerations, &["NoSchedule", "NoExecute"]).is_none()
}

async fn reconcile(set: Arc<DaemonSet>, context: Arc<crate::Context>) -> Result<Action, kube::Error> {
    if set.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let (namespace, name) = (set.namespace().unwrap_or_default(), set.name_any());
    let uid = set.uid().unwrap_or_default();
    let generation = set.metadata.generation.unwrap_or(1).to_string();
    let spec = set.spec.clone().unwrap_or_default();
    let expectations = &context.expectations;
    // Daemon pods just created or deleted that the cache does not show yet would be created or deleted again.
    if !expectations.satisfied(&uid) {
        return Ok(Action::requeue(crate::expectations::EXPECTING));
    }
    let nodes = listed(&context.caches.nodes.store(), |_| true);
    let pods_api: Api<Pod> = Api::namespaced(context.client.clone(), &namespace);
    let mut pods = controlled_by(&context.caches.pods.store(), &namespace, &uid);
    pods.retain(is_active);
    let mut by_node: BTreeMap<String, Vec<&Pod>> = BTreeMap::new();
    for pod in &pods {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
        by_node.entry(node).or_default().push(pod);
    }
    let wanted: Vec<&Node> = nodes.iter().map(|n| &**n).filter(|n| eligible(&set, n)).collect();
    let wanted_names: Vec<String> = wanted.iter().map(|n| n.name_any()).collect();

    let mut deletions: Vec<&Pod> = Vec::new();
    for (node, on_node) in &by_node {
        if !wanted_names.contains(node) {
            deletions.extend(on_node.iter().copied());
        } else if on_node.len() > 1 {
            deletions.extend(on_node[1..].iter().copied());
        }
    }
    // Rolling update: replace out-of-date pods while at most one daemon pod is unavailable.
    let rolling = spec.update_strategy.as_ref().and_then(|s| s.type_.as_deref()) != Some("OnDelete");
    let unavailable =
        wanted_names.iter().filter(|n| !by_node.get(*n).is_some_and(|p| p.iter().any(|p| is_ready(p)))).count();
    if rolling && unavailable == 0 {
        let stale = pods.iter().find(|p| {
            p.labels().get(GENERATION_LABEL) != Some(&generation)
                && wanted_names.contains(&p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default())
        });
        if let Some(stale) = stale {
            deletions.push(stale);
        }
    }
    let delete = DeleteParams::background();
    for pod in deletions {
        crate::pods::delete(&context, &pods_api, &*set, pod, &delete, nest_client::done_unless_refused).await?;
    }

    let template = spec.template.clone();
    let missing: Vec<&String> = wanted_names.iter().filter(|n| !by_node.contains_key(*n)).collect();
    expectations.expect_creations(&uid, missing.len());
    for (made, node) in missing.iter().enumerate() {
        let mut pod_spec = template.spec.clone().unwrap_or_default();
        pod_spec.node_name = Some((*node).clone());
        let mut tolerations = pod_spec.tolerations.take().unwrap_or_default();
        tolerations.extend(daemon_tolerations(pod_spec.host_network == Some(true)));
        pod_spec.tolerations = Some(tolerations);
        let pod =
            crate::pod_from_template(&*set, &template, &[(GENERATION_LABEL, generation.as_str())], Some(pod_spec));
        let created = pods_api.create(&PostParams::default(), &pod).await;
        if created.is_err() {
            // None of the rest is asked for either.
            for _ in made..missing.len() {
                expectations.creation_failed(&uid);
            }
        }
        match created {
            Ok(pod) => {
                context.events.about(&*set, "Normal", "SuccessfulCreate", format!("Created pod: {}", pod.name_any()))
            }
            Err(kube::Error::Api(status)) => {
                let message = format!("Error creating: {}", status.message);
                context.events.about(&*set, "Warning", "FailedCreate", message);
                return Err(kube::Error::Api(status));
            }
            Err(error) => return Err(error),
        }
    }

    let scheduled = wanted_names.iter().filter(|n| by_node.contains_key(*n)).count();
    let ready = wanted_names.iter().filter(|n| by_node.get(*n).is_some_and(|p| p.iter().any(|p| is_ready(p)))).count();
    let updated = pods.iter().filter(|p| p.labels().get(GENERATION_LABEL) == Some(&generation)).count();
    let misscheduled = by_node.keys().filter(|n| !wanted_names.contains(n)).count();
    let status = json!({"status": {
        "desiredNumberScheduled": wanted.len(), "currentNumberScheduled": scheduled, "numberReady": ready,
        "numberAvailable": ready, "numberUnavailable": wanted.len() - ready, "updatedNumberScheduled": updated,
        "numberMisscheduled": misscheduled, "observedGeneration": set.metadata.generation,
    }});
    let current = serde_json::to_value(&set.status).unwrap_or_default();
    let changed = [
        "desiredNumberScheduled",
        "currentNumberScheduled",
        "numberReady",
        "updatedNumberScheduled",
        "numberMisscheduled",
        "observedGeneration",
    ]
    .iter()
    .any(|k| current[*k].as_i64().unwrap_or(0) != status["status"][*k].as_i64().unwrap_or(0));
    if changed {
        let sets: Api<DaemonSet> = Api::namespaced(context.client.clone(), &namespace);
        nest_client::done_unless_refused(
            sets.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await,
        )?;
    }
    // New nodes are noticed on the next look.
    Ok(Action::requeue(Duration::from_secs(5)))
}
