//! Node lifecycle, after kube-controller-manager's `nodelifecycle` controller (1.33).
//!
//! - **Health.** A node whose Lease in `kube-node-lease` has not been renewed for the grace period (or that never
//!   posted a status within the startup grace period) gets `Ready` and its pressure conditions `Unknown` ("Kubelet
//!   stopped posting node status."), and its pods' `Ready` condition goes false.
//! - **Conditions become taints** (TaintNodesByCondition, whose admission plugin gives every new node
//!   `node.kubernetes.io/not-ready:NoSchedule`): each condition that keeps pods away has its `NoSchedule` taint —
//!   `Ready` False is `not-ready`, Unknown is `unreachable`; `MemoryPressure`, `DiskPressure`, `PIDPressure` and
//!   `NetworkUnavailable` True are `memory-pressure`, `disk-pressure`, `pid-pressure` and `network-unavailable` —
//!   and `spec.unschedulable` is `node.kubernetes.io/unschedulable`. A node that is not Ready also gets the `NoExecute`
//!   taint of its state (`not-ready` or `unreachable`), which a Ready node loses. Taints nobody here manages are kept.
//!
//! Nodes (and pods) are read from the controller-manager's shared caches, Leases from a cache of its own; a node is
//! looked at as soon as its watch reports a change (so a new node's `not-ready` taint goes the moment it reports
//! Ready) and every second, which sends nothing unless a node's state changed.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::informers::{Informers, listed};

/// The taint of a node that is not ready.
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
/// The taint of a node whose state is unknown.
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// The taint of a cordoned node.
pub const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
/// Each condition's `NoSchedule` taint, by the condition's status (upstream's `nodeConditionToTaintKeyStatusMap`).
const CONDITION_TAINTS: [(&str, &str, &str); 6] = [
    ("Ready", "False", NOT_READY),
    ("Ready", "Unknown", UNREACHABLE),
    ("MemoryPressure", "True", "node.kubernetes.io/memory-pressure"),
    ("DiskPressure", "True", "node.kubernetes.io/disk-pressure"),
    ("NetworkUnavailable", "True", "node.kubernetes.io/network-unavailable"),
    ("PIDPressure", "True", "node.kubernetes.io/pid-pressure"),
];
/// The conditions that go Unknown with `Ready` when a node goes silent.
const SILENCED: [&str; 4] = ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];
/// How often nodes are looked at (kube-controller-manager's `--node-monitor-period`).
const MONITOR_EVERY: Duration = Duration::from_secs(1);
/// How long a new node has to post its first status (`--node-startup-grace-period`).
const STARTUP_GRACE: Duration = Duration::from_secs(60);

/// Runs the controller until the task is dropped. `grace` is kube-controller-manager's
/// `--node-monitor-grace-period`.
pub(crate) async fn run(client: Client, caches: Informers, grace: Duration) {
    let changed = Arc::new(tokio::sync::Notify::new());
    let poke = changed.clone();
    let node_changes = caches.nodes.subscribe().for_each(move |_| {
        poke.notify_one();
        async {}
    });
    // Only this controller reads the nodes' Leases: their cache is its own.
    let (leases, lease_feed) =
        nest_client::cache(Api::<Lease>::namespaced(client.clone(), "kube-node-lease"), Default::default());
    let (nodes, pods) = (caches.nodes.store(), caches.pods.store());
    let monitor = async {
        caches.nodes.synced().await;
        caches.pods.synced().await;
        if leases.wait_until_ready().await.is_err() {
            return;
        }
        let mut disrupted = false;
        loop {
            let known = listed(&nodes, |_| true);
            if let Err(error) = pass(&client, &pods, &known, &leases.state(), grace, &mut disrupted).await {
                tracing::debug!(%error, "node lifecycle");
            }
            tokio::select! {
                () = changed.notified() => {}
                () = tokio::time::sleep(MONITOR_EVERY) => {}
            }
        }
    };
    tokio::join!(node_changes, lease_feed, monitor);
}

fn seconds_now() -> i64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

fn condition<'a>(node: &'a Node, kind: &str) -> Option<&'a NodeCondition> {
    node.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_ == kind)
}

/// Looks at every node once: `known` nodes and `leases` as the caches hold them. `disrupted` says whether every
/// node was down at the last pass (upstream's "master disruption mode"), and is kept up to date.
async fn pass(
    client: &Client,
    pods: &Store<Pod>,
    known: &[Arc<Node>],
    leases: &[Arc<Lease>],
    grace: Duration,
    disrupted: &mut bool,
) -> kube::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let renewals: HashMap<String, i64> = leases
        .iter()
        .filter_map(|l| Some((l.name_any(), l.spec.as_ref()?.renew_time.as_ref()?.0.as_second())))
        .collect();
    let silent: Vec<Option<Vec<serde_json::Value>>> =
        known.iter().map(|node| silenced(node, renewals.get(&node.name_any()).copied(), grace)).collect();
    // When no node is Ready, the trouble is more likely this side's (the network, the control plane) than every
    // node's: as upstream, no node is then tainted NoExecute, so nothing is evicted, and those taints are lifted.
    let all_down = !known.is_empty()
        && known
            .iter()
            .zip(&silent)
            .all(|(node, silent)| silent.is_some() || condition(node, "Ready").is_none_or(|c| c.status != "True"));
    if all_down != *disrupted {
        if all_down {
            tracing::info!("every node is not Ready: entering disruption mode, no NoExecute taints");
        } else {
            tracing::info!("a node is Ready again: leaving disruption mode");
        }
        *disrupted = all_down;
    }
    for (node, silenced) in known.iter().zip(silent) {
        let name = node.name_any();
        if let Err(error) = look_at(client, pods, &nodes, node, silenced, all_down).await {
            tracing::debug!(%error, node = %name, "node lifecycle");
        }
    }
    Ok(())
}

/// Marks `node` Unknown with the `silenced` conditions, if it went silent, and gives it the taints its state calls for.
async fn look_at(
    client: &Client,
    pods: &Store<Pod>,
    nodes: &Api<Node>,
    node: &Node,
    silenced: Option<Vec<serde_json::Value>>,
    disrupted: bool,
) -> kube::Result<()> {
    let name = node.name_any();
    let mut node = node.clone();
    if let Some(silenced) = silenced {
        tracing::info!(node = %name, "node stopped posting its status: marking it Unknown");
        // Against the version read, so that a status the node has just posted is never overwritten.
        let patch =
            json!({"metadata": {"resourceVersion": node.resource_version()}, "status": {"conditions": silenced}});
        match nodes.patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch)).await {
            Ok(written) => node = written,
            Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => return Ok(()),
            Err(error) => return Err(error),
        }
        mark_pods_not_ready(client, pods, &name).await?;
    }
    let now = Time(jiff::Timestamp::from_second(seconds_now()).unwrap_or(jiff::Timestamp::UNIX_EPOCH));
    if let Some(taints) = taints_after(&node, now, disrupted) {
        // Against the version read, so a taint someone else set meanwhile is never overwritten: the next pass
        // sees it.
        let patch = json!({"metadata": {"resourceVersion": node.resource_version()}, "spec": {"taints": taints}});
        let written = nodes.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await;
        nest_client::done_unless_gone_or_changed(written)?;
    }
    Ok(())
}

/// The conditions (as a strategic merge patch's list) that say `node` went silent, if it did: neither its Lease
/// (renewed at `renewed`, seconds) nor its Ready condition's heartbeat is newer than `grace` ago — both count, as
/// upstream's probe — or, for a node that never posted a status, the startup grace period after it was created.
fn silenced(node: &Node, renewed: Option<i64>, grace: Duration) -> Option<Vec<serde_json::Value>> {
    let created = node.metadata.creation_timestamp.as_ref().map(|t| t.0.as_second()).unwrap_or(0);
    let ready = condition(node, "Ready");
    let grace = if ready.is_some() { grace } else { STARTUP_GRACE.max(grace) };
    let heartbeat = ready.and_then(|c| c.last_heartbeat_time.as_ref()).map(|t| t.0.as_second());
    let last = renewed.unwrap_or(created).max(heartbeat.unwrap_or(0));
    if seconds_now() - last <= grace.as_secs() as i64 || ready.is_some_and(|c| c.status == "Unknown") {
        return None;
    }
    let now = nest_core::clock::rfc3339_now();
    let conditions = SILENCED
        .iter()
        .filter_map(|kind| match condition(node, kind) {
            Some(old) if old.status == "Unknown" => None,
            Some(old) => Some(json!({"type": kind, "status": "Unknown", "reason": "NodeStatusUnknown",
                                     "message": "Kubelet stopped posting node status.",
                                     "lastHeartbeatTime": old.last_heartbeat_time, "lastTransitionTime": now})),
            None => Some(json!({"type": kind, "status": "Unknown", "reason": "NodeStatusNeverUpdated",
                                "message": "Kubelet never posted node status.",
                                "lastHeartbeatTime": node.metadata.creation_timestamp, "lastTransitionTime": now})),
        })
        .collect();
    Some(conditions)
}

/// Whether a taint is one this controller keeps: a condition's `NoSchedule` taint, the unschedulable taint, or the
/// `NoExecute` taint of a node not ready or unreachable.
fn managed(taint: &Taint) -> bool {
    match taint.effect.as_str() {
        "NoSchedule" => taint.key == UNSCHEDULABLE || CONDITION_TAINTS.iter().any(|(_, _, key)| *key == taint.key),
        "NoExecute" => taint.key == NOT_READY || taint.key == UNREACHABLE,
        _ => false,
    }
}

/// The taints `node` should carry in place of what it has, if they differ: its own taints other than those this
/// controller manages, with those its state calls for (the ones it already has kept as they are, new ones added at
/// `now`) — no NoExecute ones while every node is down (`disrupted`).
fn taints_after(node: &Node, now: Time, disrupted: bool) -> Option<Vec<Taint>> {
    let mut wanted: Vec<(&str, &str)> = CONDITION_TAINTS
        .iter()
        .filter(|(kind, status, _)| condition(node, kind).is_some_and(|c| c.status == *status))
        .map(|(_, _, key)| (*key, "NoSchedule"))
        .collect();
    if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        wanted.push((UNSCHEDULABLE, "NoSchedule"));
    }
    // A node with no Ready condition keeps whatever NoExecute taint it has, as upstream's pass leaves it alone.
    let ready = condition(node, "Ready").map(|c| c.status.as_str());
    match ready {
        _ if disrupted => {}
        Some("False") => wanted.push((NOT_READY, "NoExecute")),
        Some("Unknown") => wanted.push((UNREACHABLE, "NoExecute")),
        _ => {}
    }
    let current: Vec<Taint> = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    let keep = |t: &Taint| {
        !managed(t)
            || wanted.contains(&(t.key.as_str(), t.effect.as_str()))
            || (ready.is_none() && !disrupted && t.effect == "NoExecute")
    };
    let mut taints: Vec<Taint> = current.iter().filter(|t| keep(t)).cloned().collect();
    for (key, effect) in &wanted {
        if !taints.iter().any(|t| t.key == *key && t.effect == *effect) {
            taints.push(Taint {
                key: (*key).into(),
                effect: (*effect).into(),
                time_added: Some(now.clone()),
                value: None,
            });
        }
    }
    (taints != current).then_some(taints)
}

/// Sets `Ready=False` on every pod bound to `node` (as the cache `pods` holds them).
async fn mark_pods_not_ready(client: &Client, pods: &Store<Pod>, node: &str) -> kube::Result<()> {
    let bound = listed(pods, |p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node));
    let now = nest_core::clock::rfc3339_now();
    for pod in bound {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn node(conditions: serde_json::Value, spec: serde_json::Value) -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n"}, "spec": spec, "status": {"conditions": conditions}}))
            .unwrap()
    }

    fn keys(taints: &[Taint]) -> Vec<String> {
        taints.iter().map(|t| format!("{}:{}", t.key, t.effect)).collect()
    }

    fn now() -> Time {
        Time(jiff::Timestamp::from_second(1_700_000_000).unwrap())
    }

    #[test]
    fn a_ready_node_loses_the_not_ready_taint_it_was_created_with_and_keeps_its_own() {
        let new = node(
            json!([{"type": "Ready", "status": "True"}, {"type": "MemoryPressure", "status": "False"}]),
            json!({"taints": [{"key": NOT_READY, "effect": "NoSchedule"}, {"key": "gpu", "value": "yes", "effect": "NoSchedule"}]}),
        );
        assert_eq!(keys(&taints_after(&new, now(), false).unwrap()), ["gpu:NoSchedule"]);
        let settled = node(
            json!([{"type": "Ready", "status": "True"}]),
            json!({"taints": [{"key": "gpu", "effect": "NoSchedule"}]}),
        );
        assert_eq!(taints_after(&settled, now(), false), None, "nothing to write");
    }

    #[test]
    fn each_condition_that_keeps_pods_away_is_a_taint_and_cordoning_is_one_too() {
        let pressed = node(
            json!([{"type": "Ready", "status": "True"}, {"type": "MemoryPressure", "status": "True"},
                   {"type": "DiskPressure", "status": "True"}, {"type": "PIDPressure", "status": "False"}]),
            json!({"unschedulable": true}),
        );
        let taints = taints_after(&pressed, now(), false).unwrap();
        assert_eq!(
            keys(&taints),
            [
                "node.kubernetes.io/memory-pressure:NoSchedule",
                "node.kubernetes.io/disk-pressure:NoSchedule",
                "node.kubernetes.io/unschedulable:NoSchedule"
            ]
        );
        assert!(taints.iter().all(|t| t.time_added == Some(now())), "added taints say when");
    }

    #[test]
    fn a_node_not_ready_or_unreachable_carries_both_effects_of_its_state_and_only_those() {
        let unreachable = node(
            json!([{"type": "Ready", "status": "Unknown"}]),
            json!({"taints": [{"key": NOT_READY, "effect": "NoSchedule"}, {"key": NOT_READY, "effect": "NoExecute"}]}),
        );
        assert_eq!(
            keys(&taints_after(&unreachable, now(), false).unwrap()),
            ["node.kubernetes.io/unreachable:NoSchedule", "node.kubernetes.io/unreachable:NoExecute"]
        );
        let down = node(json!([{"type": "Ready", "status": "False"}]), json!({}));
        assert_eq!(
            keys(&taints_after(&down, now(), false).unwrap()),
            ["node.kubernetes.io/not-ready:NoSchedule", "node.kubernetes.io/not-ready:NoExecute"]
        );
        let back = node(
            json!([{"type": "Ready", "status": "True"}]),
            json!({"taints": [{"key": UNREACHABLE, "effect": "NoSchedule"}, {"key": UNREACHABLE, "effect": "NoExecute"}]}),
        );
        assert_eq!(taints_after(&back, now(), false).unwrap(), vec![]);
        // With every node down, no NoExecute taint is given, and those there are lifted.
        assert_eq!(
            keys(&taints_after(&unreachable, now(), true).unwrap()),
            ["node.kubernetes.io/unreachable:NoSchedule"]
        );
    }

    #[test]
    fn a_silent_node_goes_unknown_once_and_a_node_that_never_reported_gets_the_startup_grace() {
        let stale = (jiff::Timestamp::now() - jiff::SignedDuration::from_secs(10)).as_second();
        let fresh = jiff::Timestamp::now().as_second();
        let ready =
            node(json!([{"type": "Ready", "status": "True"}, {"type": "PIDPressure", "status": "False"}]), json!({}));
        let conditions = silenced(&ready, Some(stale), Duration::from_secs(3)).unwrap();
        let kinds: Vec<&str> = conditions.iter().map(|c| c["type"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"]);
        let reasons: Vec<&str> = conditions.iter().map(|c| c["reason"].as_str().unwrap()).collect();
        assert_eq!(
            reasons,
            ["NodeStatusUnknown", "NodeStatusNeverUpdated", "NodeStatusNeverUpdated", "NodeStatusUnknown"]
        );
        assert!(conditions.iter().all(|c| c["status"] == "Unknown"));
        assert_eq!(silenced(&ready, Some(fresh), Duration::from_secs(3)), None);
        let mut posting = ready.clone();
        posting.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].last_heartbeat_time =
            Some(Time(jiff::Timestamp::now()));
        assert_eq!(
            silenced(&posting, Some(stale), Duration::from_secs(3)),
            None,
            "a fresh status heartbeat counts too"
        );
        let unknown = node(json!([{"type": "Ready", "status": "Unknown"}]), json!({}));
        assert_eq!(silenced(&unknown, Some(stale), Duration::from_secs(3)), None, "already Unknown");
        let mut silent: Node = serde_json::from_value(json!({"metadata": {"name": "n"}})).unwrap();
        silent.metadata.creation_timestamp = Some(Time(jiff::Timestamp::now() - jiff::SignedDuration::from_secs(10)));
        assert_eq!(silenced(&silent, None, Duration::from_secs(3)), None, "within the startup grace");
        silent.metadata.creation_timestamp = Some(Time(jiff::Timestamp::now() - jiff::SignedDuration::from_secs(61)));
        let conditions = silenced(&silent, None, Duration::from_secs(3)).unwrap();
        assert_eq!(conditions.len(), 4);
        assert_eq!(conditions[0]["message"], "Kubelet never posted node status.");
    }
}
