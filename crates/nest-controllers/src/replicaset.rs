//! ReplicaSets and ReplicationControllers, after kube-controller-manager's `replicaset` controller
//! (`pkg/controller/replicaset`, 1.33), which its `replication` controller reuses for core v1's older kind: as many
//! active pods as `spec.replicas`, made from the template and owned by the set; orphans that match the selector
//! are adopted, owned pods that stop matching are released; surplus pods are deleted least useful first (unscheduled,
//! then pending, then not ready, then the youngest); status counts replicas, labelled, ready and available pods.
//! What differs between the two kinds is in `Replicated`.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec, ReplicationController};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::expectations::version_of;
use crate::informers::{Informers, listed};

/// At most this many pods are created or deleted per pass, as kube-controller-manager's `burstReplicas`.
pub(crate) const BURST: usize = 500;
/// Runs the ReplicaSet controller until the process stops.
pub(crate) async fn run(client: Client, caches: Informers) {
    let pair = (&caches.replica_sets, &caches.pods);
    crate::run_owning(client, &caches, pair, vec![], reconcile::<ReplicaSet>, ReplicaSet::COMPONENT).await;
}

/// Runs the ReplicationController controller until the process stops.
pub(crate) async fn run_replication(client: Client, caches: Informers) {
    let pair = (&caches.replication_controllers, &caches.pods);
    crate::run_owning(
        client,
        &caches,
        pair,
        vec![],
        reconcile::<ReplicationController>,
        ReplicationController::COMPONENT,
    )
    .await;
}

/// What the controller reads of a set: a ReplicaSet, or a ReplicationController (its selector a map of labels).
pub(crate) trait Replicated: crate::informers::Kind + kube::Resource<Scope = NamespaceResourceScope> {
    /// Who the set's Events are from.
    const COMPONENT: &'static str;
    /// The selector, template and wanted replicas, if the set has a spec.
    fn shape(&self) -> Option<(LabelSelector, Option<PodTemplateSpec>, i32)>;
    /// The status last written: replicas, ready, fully labelled, observed generation.
    fn observed(&self) -> Option<(i32, i32, i32, Option<i64>)>;
}

impl Replicated for ReplicaSet {
    const COMPONENT: &'static str = "replicaset-controller";
    fn shape(&self) -> Option<(LabelSelector, Option<PodTemplateSpec>, i32)> {
        let spec = self.spec.as_ref()?;
        Some((spec.selector.clone(), spec.template.clone(), spec.replicas.unwrap_or(1)))
    }
    fn observed(&self) -> Option<(i32, i32, i32, Option<i64>)> {
        let s = self.status.as_ref()?;
        Some((s.replicas, s.ready_replicas.unwrap_or(0), s.fully_labeled_replicas.unwrap_or(0), s.observed_generation))
    }
}

impl Replicated for ReplicationController {
    const COMPONENT: &'static str = "replication-controller";
    fn shape(&self) -> Option<(LabelSelector, Option<PodTemplateSpec>, i32)> {
        let spec = self.spec.as_ref()?;
        let selector = LabelSelector { match_labels: spec.selector.clone(), match_expressions: None };
        Some((selector, spec.template.clone(), spec.replicas.unwrap_or(1)))
    }
    fn observed(&self) -> Option<(i32, i32, i32, Option<i64>)> {
        let s = self.status.as_ref()?;
        Some((s.replicas, s.ready_replicas.unwrap_or(0), s.fully_labeled_replicas.unwrap_or(0), s.observed_generation))
    }
}

/// `metav1.FormatLabelSelector`: the selector as a query string.
pub fn selector_query(selector: &LabelSelector) -> String {
    let mut parts: Vec<String> = selector.match_labels.iter().flatten().map(|(k, v)| format!("{k}={v}")).collect();
    for expression in selector.match_expressions.iter().flatten() {
        let values = expression.values.clone().unwrap_or_default().join(",");
        parts.push(match expression.operator.as_str() {
            "In" => format!("{} in ({values})", expression.key),
            "NotIn" => format!("{} notin ({values})", expression.key),
            "Exists" => expression.key.clone(),
            _ => format!("!{}", expression.key),
        });
    }
    parts.join(",")
}

/// Whether `labels` satisfy `selector` (an empty selector matches nothing, as for workloads).
pub fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let exact = selector.match_labels.iter().flatten().all(|(k, v)| labels.get(k) == Some(v));
    let expressions = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.clone().unwrap_or_default();
        match e.operator.as_str() {
            "In" => labels.get(&e.key).is_some_and(|v| values.contains(v)),
            "NotIn" => labels.get(&e.key).is_none_or(|v| !values.contains(v)),
            "Exists" => labels.contains_key(&e.key),
            _ => !labels.contains_key(&e.key),
        }
    });
    let empty = selector.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
        && selector.match_expressions.as_ref().is_none_or(Vec::is_empty);
    !empty && exact && expressions
}

/// The controller reference of an object, if any.
pub fn controller_of(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references.iter().flatten().find(|r| r.controller == Some(true))
}

/// A pod still counts toward its owner: not being deleted and not finished.
pub fn is_active(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("");
    pod.metadata.deletion_timestamp.is_none() && phase != "Succeeded" && phase != "Failed"
}

/// Whether the pod's Ready condition is true.
pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The pods of `namespace` in `pods`, as a list of them would return them.
pub(crate) fn in_namespace(pods: &Store<Pod>, namespace: &str) -> Vec<Arc<Pod>> {
    listed(pods, |p| p.metadata.namespace.as_deref() == Some(namespace))
}

/// The pods of `namespace` in `pods` whose controller is `owner` (by uid), as a list of them would return them.
pub(crate) fn controlled_by(pods: &Store<Pod>, namespace: &str, owner: &str) -> Vec<Pod> {
    let owned = |p: &Pod| {
        p.metadata.namespace.as_deref() == Some(namespace) && controller_of(&p.metadata).is_some_and(|o| o.uid == owner)
    };
    listed(pods, owned).into_iter().map(Arc::unwrap_or_clone).collect()
}

async fn reconcile<K: Replicated>(set: Arc<K>, context: Arc<crate::Context>) -> Result<Action, kube::Error> {
    if set.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let (namespace, name) = (set.namespace().unwrap_or_default(), set.name_any());
    let Some((selector, template, replicas)) = set.shape() else { return Ok(Action::await_change()) };
    let uid = set.uid().unwrap_or_default();
    let expectations = &context.expectations;
    // Pods this controller just created or deleted that the cache does not show yet would be counted wrong.
    if !expectations.satisfied(&uid) {
        return Ok(Action::requeue(crate::expectations::EXPECTING));
    }
    let pods: Api<Pod> = Api::namespaced(context.client.clone(), &namespace);
    let all = in_namespace(&context.caches.pods.store(), &namespace);

    let mut owned = Vec::new();
    for pod in all {
        let labels = pod.labels().clone();
        let matches = selects(&selector, &labels);
        match controller_of(&pod.metadata) {
            Some(owner) if owner.uid == uid => {
                if matches {
                    owned.push(Arc::unwrap_or_clone(pod));
                } else {
                    // Release: the pod no longer matches.
                    let remaining: Vec<_> = pod.owner_references().iter().filter(|r| r.uid != uid).cloned().collect();
                    let patch = json!({"metadata": {"ownerReferences": remaining}});
                    expectations.expect_change(&uid, &pod);
                    let released = pods.patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await;
                    expectations.settle(&uid, &pod, released, version_of, nest_client::done_unless_gone_or_changed)?;
                }
            }
            None if matches && is_active(&pod) && pod.metadata.deletion_timestamp.is_none() => {
                // Adopt an orphan.
                let adopted = crate::pods::adopt(&context, &pods, &*set, &pod).await;
                if nest_client::done_unless_gone_or_changed(adopted)? {
                    owned.push(Arc::unwrap_or_clone(pod));
                }
            }
            _ => {}
        }
    }

    let mut active: Vec<Pod> = owned.iter().filter(|p| is_active(p)).cloned().collect();
    let wanted = usize::try_from(replicas).unwrap_or(0);
    if active.len() < wanted {
        let missing = (wanted - active.len()).min(BURST);
        let template = template.clone().unwrap_or_default();
        let pod = crate::pod_from_template(&*set, &template, &[], None);
        active.extend(crate::pods::create(&context, &pods, &*set, &pod, missing).await?);
    } else if active.len() > wanted {
        active.sort_by_key(deletion_rank);
        let surplus: Vec<Pod> = active.drain(..(active.len() - wanted).min(BURST)).collect();
        let delete = DeleteParams::default();
        let done = nest_client::done_unless_gone_or_changed;
        let deletions = surplus.iter().map(|pod| crate::pods::delete(&context, &pods, &*set, pod, &delete, done));
        for deleted in futures_util::future::join_all(deletions).await {
            deleted?;
        }
    }

    let ready = active.iter().filter(|p| is_ready(p)).count();
    let template_labels =
        template.as_ref().and_then(|t| t.metadata.as_ref()).and_then(|m| m.labels.clone()).unwrap_or_default();
    let labelled = active.iter().filter(|p| template_labels.iter().all(|(k, v)| p.labels().get(k) == Some(v))).count();
    let status = json!({"status": {
        "replicas": active.len(),
        "fullyLabeledReplicas": labelled,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "observedGeneration": set.meta().generation,
    }});
    let unchanged = set.observed().is_some_and(|(replicas, ready_now, labelled_now, generation)| {
        replicas as usize == active.len()
            && ready_now as usize == ready
            && labelled_now as usize == labelled
            && generation == set.meta().generation
    });
    if !unchanged {
        let sets: Api<K> = Api::namespaced(context.client.clone(), &namespace);
        nest_client::done_unless_gone_or_changed(
            sets.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status)).await,
        )?;
    }
    Ok(Action::await_change())
}

/// Which surplus pods go first: unscheduled, then pending, then not ready, then the youngest.
fn deletion_rank(pod: &Pod) -> (u8, u8, u8, std::cmp::Reverse<String>) {
    let scheduled = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0.to_string()).unwrap_or_default();
    (u8::from(scheduled), u8::from(phase == "Running"), u8::from(is_ready(pod)), std::cmp::Reverse(created))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    #[test]
    fn selectors_match_and_print_as_kubernetes_does() {
        let selector = LabelSelector {
            match_labels: Some(BTreeMap::from([("app".to_string(), "web".to_string())])),
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "tier".into(),
                operator: "In".into(),
                values: Some(vec!["a".into(), "b".into()]),
            }]),
        };
        assert_eq!(selector_query(&selector), "app=web,tier in (a,b)");
        let labels = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert!(selects(&selector, &labels(&[("app", "web"), ("tier", "a")])));
        assert!(!selects(&selector, &labels(&[("app", "web"), ("tier", "c")])));
        assert!(!selects(&LabelSelector::default(), &labels(&[("app", "web")])), "an empty selector selects nothing");
    }
}
