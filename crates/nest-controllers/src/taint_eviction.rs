//! Taint-based eviction, after kube-controller-manager's `taint-eviction-controller` (`pkg/controller/tainteviction`,
//! 1.33): a pod bound to a node with `NoExecute` taints is deleted at once if it does not tolerate one of them, after
//! the shortest `tolerationSeconds` of the tolerations it uses if they all end (counted from when this controller
//! first saw it so), and never if one of them does not. Before deleting it, the pod gets the `DisruptionTarget`
//! condition (`DeletionByTaintManager`) and a `TaintManagerEviction` event; an eviction that is no longer due (the
//! taint lifted) is cancelled with another.
//!
//! With the node lifecycle controller's `not-ready` and `unreachable` taints and the DefaultTolerationSeconds
//! admission plugin's 300 s, this is what moves the pods of a lost node elsewhere after five minutes.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Taint, Toleration};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::informers::Informers;

/// How often pods are looked at besides when a watch reports a change.
const EVERY: Duration = Duration::from_secs(1);

/// What the pods on NoExecute-tainted nodes call for.
#[derive(Debug, PartialEq)]
enum Due {
    /// Nothing: no NoExecute taint, or one tolerated for ever.
    Never,
    /// Deletion after this long.
    After(Duration),
}

/// When a pod with `tolerations` must go from a node with `taints`, as upstream's `GetMatchingTolerations` and
/// `getMinTolerationTime` decide: at once for a NoExecute taint it does not tolerate; else each taint uses the first
/// toleration that matches it, and the pod goes after the shortest `tolerationSeconds` among those used (at once if
/// one is zero or less; those without a limit do not count), never if none of them has a limit.
fn due(taints: &[Taint], tolerations: &[Toleration]) -> Due {
    let no_execute: Vec<&Taint> = taints.iter().filter(|t| t.effect == "NoExecute").collect();
    if no_execute.is_empty() {
        return Due::Never;
    }
    let mut shortest: Option<i64> = None;
    for taint in no_execute {
        let Some(used) = tolerations.iter().find(|t| nest_client::taints::tolerates(t, taint)) else {
            return Due::After(Duration::ZERO);
        };
        if let Some(seconds) = used.toleration_seconds {
            shortest = Some(shortest.map_or(seconds, |s| s.min(seconds)));
        }
    }
    shortest.map_or(Due::Never, |seconds| Due::After(Duration::from_secs(seconds.max(0) as u64)))
}

/// A pod whose deletion is due: since when its tolerations count (when this controller first saw it due, as
/// upstream keeps a scheduled eviction's start), and when its deletion was last asked for.
struct Scheduled {
    since: Instant,
    tried: Option<Instant>,
}

/// How long a refused deletion waits before it is asked for again.
const RETRY: Duration = Duration::from_secs(10);

/// Runs the controller until the task is dropped.
pub(crate) async fn run(client: Client, caches: Informers) {
    let changed = Arc::new(tokio::sync::Notify::new());
    let poke = changed.clone();
    let changes = futures_util::stream::select(caches.nodes.subscribe().map(drop), caches.pods.subscribe().map(drop))
        .for_each(move |()| {
            poke.notify_one();
            async {}
        });
    let (nodes, pods) = (caches.nodes.store(), caches.pods.store());
    let events = nest_client::events::Recorder::new(client.clone(), "taint-eviction-controller", None);
    let evicting = async {
        caches.nodes.synced().await;
        caches.pods.synced().await;
        let mut scheduled: HashMap<String, Scheduled> = HashMap::new();
        loop {
            let now = Instant::now();
            let mut seen = HashSet::new();
            // Mostly no node is tainted NoExecute: then there is nothing to look at, however many pods there are.
            let tainted = nodes.state().iter().any(|n| {
                n.spec.as_ref().and_then(|s| s.taints.as_ref()).into_iter().flatten().any(|t| t.effect == "NoExecute")
            });
            let bound = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
            let pods_now = if tainted || !scheduled.is_empty() { pods.state_filter(bound) } else { Vec::new() };
            for pod in pods_now {
                if pod.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                let uid = pod.uid().unwrap_or_default();
                let node_name = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
                let node = nodes.get(&ObjectRef::new(&node_name));
                let taints = node.and_then(|n| n.spec.clone()).and_then(|s| s.taints).unwrap_or_default();
                let tolerations = pod.spec.as_ref().and_then(|s| s.tolerations.clone()).unwrap_or_default();
                let Due::After(after) = due(&taints, &tolerations) else {
                    if scheduled.remove(&uid).is_some() {
                        let (namespace, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
                        let message = format!("Cancelling deletion of Pod {namespace}/{name}");
                        events.about(&*pod, "Normal", "TaintManagerEviction", message);
                    }
                    continue;
                };
                seen.insert(uid.clone());
                let entry = scheduled.entry(uid).or_insert(Scheduled { since: now, tried: None });
                // A limit too far to count (tolerationSeconds near i64::MAX) is never.
                let due_at = entry.since.checked_add(after);
                if due_at.is_none_or(|at| now < at) || entry.tried.is_some_and(|t| now.duration_since(t) < RETRY) {
                    continue;
                }
                match evict(&client, &events, &pod).await {
                    Ok(false) => {}
                    Ok(true) => entry.tried = Some(now),
                    Err(error) => {
                        entry.tried = Some(now);
                        tracing::debug!(%error, pod = %pod.name_any(), "evicting a pod");
                    }
                }
            }
            scheduled.retain(|uid, _| seen.contains(uid));
            tokio::select! {
                () = changed.notified() => {}
                () = tokio::time::sleep(EVERY) => {}
            }
        }
    };
    tokio::join!(changes, evicting);
}

/// Marks `pod` as disrupted by a NoExecute taint, says so, and deletes it: `Ok(true)` once its deletion was asked for
/// (or it is gone), `Ok(false)` when it changed since it was read, which the next pass looks at again.
async fn evict(client: &Client, events: &nest_client::events::Recorder, pod: &Pod) -> kube::Result<bool> {
    let (namespace, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
    let api: Api<Pod> = Api::namespaced(client.clone(), &namespace);
    let condition = json!({"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
                           "message": "Taint manager: deleting due to NoExecute taint",
                           "lastTransitionTime": nest_core::clock::rfc3339_now()});
    // Against the version read, so that a pod made again under the same name is never marked.
    let patch = json!({"metadata": {"resourceVersion": pod.resource_version()}, "status": {"conditions": [condition]}});
    match api.patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch)).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => return Ok(false),
        Err(kube::Error::Api(status)) if status.code == 404 => return Ok(true),
        Err(error) => return Err(error),
    }
    tracing::info!(pod = %name, %namespace, "deleting a pod for a NoExecute taint it does not tolerate");
    events.about(pod, "Normal", "TaintManagerEviction", format!("Marking for deletion Pod {namespace}/{name}"));
    let only_this = DeleteParams {
        preconditions: Some(Preconditions { uid: pod.uid(), resource_version: None }),
        ..Default::default()
    };
    nest_client::done_unless_refused(api.delete(&name, &only_this).await)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, effect: &str) -> Taint {
        Taint { key: key.into(), effect: effect.into(), ..Default::default() }
    }

    fn toleration(key: &str, seconds: Option<i64>) -> Toleration {
        Toleration {
            key: Some(key.into()),
            operator: Some("Exists".into()),
            effect: Some("NoExecute".into()),
            toleration_seconds: seconds,
            ..Default::default()
        }
    }

    #[test]
    fn a_pod_goes_at_once_after_its_shortest_toleration_or_never() {
        let unreachable = [taint("node.kubernetes.io/unreachable", "NoExecute")];
        let five_minutes = toleration("node.kubernetes.io/unreachable", Some(300));
        assert_eq!(due(&[], &[]), Due::Never, "no taint");
        assert_eq!(due(&[taint("gpu", "NoSchedule")], &[]), Due::Never, "NoSchedule evicts nothing");
        assert_eq!(due(&unreachable, &[]), Due::After(Duration::ZERO), "not tolerated");
        assert_eq!(due(&unreachable, std::slice::from_ref(&five_minutes)), Due::After(Duration::from_secs(300)));
        let both = [five_minutes.clone(), toleration("", Some(30))];
        assert_eq!(due(&unreachable, &both), Due::After(Duration::from_secs(300)), "only the first match is used");
        let two_taints = [unreachable[0].clone(), taint("dedicated", "NoExecute")];
        let each = [five_minutes.clone(), toleration("dedicated", Some(30))];
        assert_eq!(due(&two_taints, &each), Due::After(Duration::from_secs(30)), "the shortest of those used");
        let huge = toleration("node.kubernetes.io/unreachable", Some(i64::MAX));
        assert_eq!(due(&unreachable, std::slice::from_ref(&huge)), Due::After(Duration::from_secs(i64::MAX as u64)));
        assert_eq!(Instant::now().checked_add(Duration::from_secs(i64::MAX as u64)), None, "so it is never due");
        let ever = toleration("node.kubernetes.io/unreachable", None);
        assert_eq!(due(&unreachable, std::slice::from_ref(&ever)), Due::Never, "tolerated for ever");
        let both = [ever, five_minutes.clone()];
        assert_eq!(due(&unreachable, &both), Due::Never, "the first match has no limit");
        assert_eq!(
            due(&unreachable, &[toleration("node.kubernetes.io/unreachable", Some(-5))]),
            Due::After(Duration::ZERO)
        );
        let two = [unreachable[0].clone(), taint("dedicated", "NoExecute")];
        assert_eq!(due(&two, &[five_minutes]), Due::After(Duration::ZERO), "one taint not tolerated");
    }
}
