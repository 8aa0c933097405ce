//! StatefulSets, after kube-controller-manager's `statefulset` controller (`pkg/controller/statefulset`, 1.33).
//!
//! - Pods are named `<set>-<ordinal>` for the ordinals `spec.ordinals.start` onwards, with the hostname of their name
//!   and the subdomain `spec.serviceName`, and labelled with their name, index and revision.
//! - Every `volumeClaimTemplates` entry becomes a PersistentVolumeClaim `<template>-<set>-<ordinal>`, created before
//!   its pod and mounted by it. Claims outlive their pods; `persistentVolumeClaimRetentionPolicy` decides whether they
//!   are deleted with the set (`whenDeleted`) or when scaled away (`whenScaled`).
//! - `OrderedReady` creates pods in ascending order, each once the one before is Running and Ready, and removes them
//!   highest ordinal first, one at a time; `Parallel` does both at once.
//! - Each template is kept as a ControllerRevision `<set>-<hash>` (what `kubectl rollout history` lists). A
//!   `RollingUpdate` replaces pods not at the update revision from the highest ordinal down to `partition`, one at a
//!   time and only while every pod is Ready; pods below the partition are recreated at the current revision.
//!   `OnDelete` leaves pods alone until they are deleted.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet, StatefulSetSpec};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use crate::expectations::{Expectations, version_of};
use crate::informers::{Informers, listed};
use crate::replicaset::{controller_of, is_ready, selects};

/// The label naming the ControllerRevision a pod was made from.
pub const REVISION_LABEL: &str = "controller-revision-hash";
/// The label carrying a pod's own name, so a Service can select one pod.
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// The label carrying a pod's ordinal.
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// Runs the controller until the process stops.
pub(crate) async fn run(client: Client, caches: Informers) {
    let pair = (&caches.stateful_sets, &caches.pods);
    let reads = vec![caches.controller_revisions.until_synced(), caches.claims.until_synced()];
    crate::run_owning(client, &caches, pair, reads, reconcile, "statefulset-controller").await;
}

/// The set's templates by revision name, and which revisions are current and wanted.
struct Revisions {
    current: String,
    update: String,
    templates: BTreeMap<String, PodTemplateSpec>,
}

/// The ordinal of pod `pod` of set `set`, when its name has the form `<set>-<ordinal>`.
fn ordinal_of(set: &str, pod: &str) -> Option<i32> {
    let digits = pod.strip_prefix(set)?.strip_prefix('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || (digits.len() > 1 && digits.starts_with('0'))
    {
        return None;
    }
    digits.parse().ok()
}

fn running_and_ready(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") && is_ready(pod)
}

fn finished(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

/// Whether an object of `namespace` with `meta` is one the set's `selector` picks: as a list by the selector's query
/// did when these were read from the API server, an empty selector picks everything.
fn picked(selector: &LabelSelector, namespace: &str, meta: &ObjectMeta) -> bool {
    let empty = selector.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
        && selector.match_expressions.as_ref().is_none_or(Vec::is_empty);
    meta.namespace.as_deref() == Some(namespace)
        && (empty || selects(selector, meta.labels.as_ref().unwrap_or(&BTreeMap::new())))
}

fn revision_of(pod: &Pod) -> &str {
    pod.labels().get(REVISION_LABEL).map_or("", String::as_str)
}

/// Records the set's template as a ControllerRevision (renumbering an old one that matches it, as a rollback does)
/// and trims revisions past `revisionHistoryLimit` that no pod uses.
async fn revisions(
    set: &StatefulSet,
    pods: &[Pod],
    client: &Client,
    cache: &Store<ControllerRevision>,
) -> Result<Revisions, kube::Error> {
    let (namespace, name) = (set.namespace().unwrap_or_default(), set.name_any());
    let uid = set.uid().unwrap_or_default();
    let spec = set.spec.clone().unwrap_or_default();
    let api: Api<ControllerRevision> = Api::namespaced(client.clone(), &namespace);
    // The revisions the selector matches (they carry the template's labels) that the set controls.
    let mut owned: Vec<ControllerRevision> = listed(cache, |r| {
        picked(&spec.selector, &namespace, &r.metadata) && controller_of(&r.metadata).is_some_and(|o| o.uid == uid)
    })
    .into_iter()
    .map(Arc::unwrap_or_clone)
    .collect();
    owned.sort_by_key(|r| r.revision);
    let template = serde_json::to_value(&spec.template).unwrap_or_default();
    let update = format!("{name}-{}", crate::deployment::template_hash(&template));
    let newest = owned.last().map_or(0, |r| r.revision);
    match owned.iter().find(|r| r.name_any() == update) {
        Some(existing) if existing.revision < newest => {
            let patch = json!({"revision": newest.saturating_add(1)});
            api.patch(&update, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        }
        Some(_) => {}
        None => {
            let mut data = json!({"spec": {"template": template}});
            data["spec"]["template"]["$patch"] = json!("replace");
            let revision = ControllerRevision {
                metadata: ObjectMeta {
                    name: Some(update.clone()),
                    labels: spec.template.metadata.as_ref().and_then(|m| m.labels.clone()),
                    owner_references: Some(vec![crate::controller_reference(set)]),
                    ..Default::default()
                },
                data: Some(RawExtension(data)),
                revision: newest.saturating_add(1),
            };
            match api.create(&PostParams::default(), &revision).await {
                Ok(created) => owned.push(created),
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(error) => return Err(error),
            }
        }
    }
    let templates: BTreeMap<String, PodTemplateSpec> = owned
        .iter()
        .filter_map(|r| {
            let mut template = r.data.as_ref()?.0.get("spec")?.get("template")?.clone();
            template.as_object_mut()?.remove("$patch");
            Some((r.name_any(), serde_json::from_value(template).ok()?))
        })
        .chain([(update.clone(), spec.template.clone())])
        .collect();
    let current = set
        .status
        .as_ref()
        .and_then(|s| s.current_revision.clone())
        .filter(|c| templates.contains_key(c))
        .unwrap_or_else(|| update.clone());

    // History: keep revisionHistoryLimit revisions besides the ones in use.
    let limit = usize::try_from(spec.revision_history_limit.unwrap_or(10)).unwrap_or(0);
    let in_use = |r: &ControllerRevision| {
        let revision = r.name_any();
        revision == current || revision == update || pods.iter().any(|p| revision_of(p) == revision)
    };
    let spare: Vec<&ControllerRevision> = owned.iter().filter(|r| !in_use(r)).collect();
    for old in spare.iter().take(spare.len().saturating_sub(limit)) {
        nest_client::done_unless_refused(api.delete(&old.name_any(), &DeleteParams::default()).await)?;
    }
    Ok(Revisions { current, update, templates })
}

/// The claims pod `ordinal` mounts, named `<template>-<set>-<ordinal>`.
fn claims(set: &StatefulSet, ordinal: i32) -> Vec<PersistentVolumeClaim> {
    let spec = set.spec.clone().unwrap_or_default();
    let retention = spec.persistent_volume_claim_retention_policy.clone().unwrap_or_default();
    let owners = if retention.when_deleted.as_deref() == Some("Delete") {
        Some(vec![OwnerReference { block_owner_deletion: None, ..crate::controller_reference(set) }])
    } else {
        None
    };
    spec.volume_claim_templates
        .unwrap_or_default()
        .into_iter()
        .map(|template| {
            let mut labels = template.metadata.labels.clone().unwrap_or_default();
            labels.extend(spec.selector.match_labels.clone().unwrap_or_default());
            PersistentVolumeClaim {
                metadata: ObjectMeta {
                    name: Some(format!("{}-{}-{ordinal}", template.name_any(), set.name_any())),
                    labels: Some(labels),
                    annotations: template.metadata.annotations.clone(),
                    owner_references: owners.clone(),
                    ..Default::default()
                },
                spec: template.spec,
                status: None,
            }
        })
        .collect()
}

/// Pod `ordinal` of `set`, made from `template` of revision `revision`.
fn new_pod(set: &StatefulSet, ordinal: i32, revision: &str, template: &PodTemplateSpec) -> Pod {
    let name = format!("{}-{ordinal}", set.name_any());
    let meta = template.metadata.clone().unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    labels.insert(POD_NAME_LABEL.into(), name.clone());
    labels.insert(POD_INDEX_LABEL.into(), ordinal.to_string());
    labels.insert(REVISION_LABEL.into(), revision.into());
    let mut spec = template.spec.clone().unwrap_or_default();
    spec.hostname = Some(name.clone());
    spec.subdomain = set.spec.as_ref().and_then(|s| s.service_name.clone()).filter(|s| !s.is_empty());
    let mut volumes = spec.volumes.take().unwrap_or_default();
    for template in set.spec.as_ref().and_then(|s| s.volume_claim_templates.clone()).unwrap_or_default() {
        let volume = template.name_any();
        volumes.retain(|v| v.name != volume);
        volumes.push(Volume {
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: format!("{volume}-{}-{ordinal}", set.name_any()),
                read_only: None,
            }),
            name: volume,
            ..Default::default()
        });
    }
    spec.volumes = (!volumes.is_empty()).then_some(volumes);
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            labels: Some(labels),
            annotations: meta.annotations,
            owner_references: Some(vec![crate::controller_reference(set)]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// What one pass over a set found and did.
struct Pass<'a> {
    set: &'a StatefulSet,
    uid: String,
    expectations: &'a Expectations<Pod>,
    claims: Store<PersistentVolumeClaim>,
    spec: StatefulSetSpec,
    client: &'a Client,
    events: &'a nest_client::events::Recorder,
    pods: Api<Pod>,
    revisions: Revisions,
}

impl Pass<'_> {
    /// Creates the claims pod `ordinal` needs that the cache does not hold (one it has not shown yet is refused as
    /// existing, which is as good).
    async fn ensure_claims(&self, ordinal: i32) -> Result<(), kube::Error> {
        let namespace = self.set.namespace().unwrap_or_default();
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &namespace);
        for claim in claims(self.set, ordinal) {
            if self.claims.get(&ObjectRef::new(&claim.name_any()).within(&namespace)).is_some() {
                continue;
            }
            match api.create(&PostParams::default(), &claim).await {
                Ok(_) => {
                    let set = self.set.name_any();
                    let message =
                        format!("create Claim {} Pod {set}-{ordinal} in StatefulSet {set} success", claim.name_any());
                    self.events.about(self.set, "Normal", "SuccessfulCreate", message);
                }
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    /// Which revision a new pod `ordinal` is made from: below the partition of a rolling update, the current one.
    fn revision_for(&self, ordinal: i32, start: i32) -> &str {
        let strategy = self.spec.update_strategy.clone().unwrap_or_default();
        let partition = strategy.rolling_update.as_ref().and_then(|r| r.partition).unwrap_or(0);
        if strategy.type_.as_deref() != Some("OnDelete") && ordinal < start.saturating_add(partition) {
            &self.revisions.current
        } else {
            &self.revisions.update
        }
    }

    async fn create(&self, ordinal: i32, start: i32) -> Result<(), kube::Error> {
        self.ensure_claims(ordinal).await?;
        let revision = self.revision_for(ordinal, start).to_string();
        let template = self.revisions.templates.get(&revision).unwrap_or(&self.spec.template);
        self.expectations.expect_creations(&self.uid, 1);
        let created = self.pods.create(&PostParams::default(), &new_pod(self.set, ordinal, &revision, template)).await;
        if created.is_err() {
            self.expectations.creation_failed(&self.uid);
        }
        match created {
            Ok(pod) => {
                self.told("create", &pod, None);
                Ok(())
            }
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            Err(error) => Err(error),
        }
    }

    async fn delete(&self, pod: &Pod) -> Result<(), kube::Error> {
        self.expectations.expect_deletion(&self.uid, pod);
        let deleted = self.pods.delete(&pod.name_any(), &DeleteParams::default()).await;
        self.expectations.answered(&self.uid, pod, &deleted, |a| a.as_ref().left().and_then(version_of));
        match deleted {
            Ok(_) => {
                self.told("delete", pod, None);
                Ok(())
            }
            Err(kube::Error::Api(status)) => {
                if status.code != 404 {
                    self.told("delete", pod, Some(&status.message));
                }
                Ok(())
            }
            Err(error) => Err(error),
        }
    }

    /// The Event of a pod created or deleted (`recordPodEvent`): `Successful<Verb>` or, with an error,
    /// `Failed<Verb>`, in upstream's words.
    fn told(&self, verb: &str, pod: &Pod, error: Option<&str>) {
        let set = self.set.name_any();
        let (pod, title) = (pod.name_any(), format!("{}{}", &verb[..1].to_uppercase(), &verb[1..]));
        match error {
            None => {
                let message = format!("{verb} Pod {pod} in StatefulSet {set} successful");
                self.events.about(self.set, "Normal", &format!("Successful{title}"), message);
            }
            Some(error) => {
                let message = format!("{verb} Pod {pod} in StatefulSet {set} failed error: {error}");
                self.events.about(self.set, "Warning", &format!("Failed{title}"), message);
            }
        }
    }

    /// A pod scaled away whose claims go with it (`whenScaled: Delete`): the claims become the pod's dependents.
    async fn release_claims(&self, pod: &Pod, ordinal: i32) -> Result<(), kube::Error> {
        let retention = self.spec.persistent_volume_claim_retention_policy.clone().unwrap_or_default();
        if retention.when_scaled.as_deref() != Some("Delete") {
            return Ok(());
        }
        let api: Api<PersistentVolumeClaim> =
            Api::namespaced(self.client.clone(), &self.set.namespace().unwrap_or_default());
        let Some(owner) = pod.owner_ref(&()) else { return Ok(()) };
        for claim in claims(self.set, ordinal) {
            let patch = json!({"metadata": {"ownerReferences": [owner]}});
            nest_client::done_unless_refused(
                api.patch(&claim.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await,
            )?;
        }
        Ok(())
    }

    /// Creates, replaces and removes pods as the policies allow; returns when a step must wait for a pod.
    async fn step(&self, by_ordinal: &BTreeMap<i32, Pod>, condemned: &[(i32, Pod)]) -> Result<(), kube::Error> {
        let ordered = self.spec.pod_management_policy.as_deref() != Some("Parallel");
        let start = self.spec.ordinals.as_ref().and_then(|o| o.start).unwrap_or(0);
        let replicas = self.spec.replicas.unwrap_or(1).max(0);
        let mut waiting = false;
        // Ordinals are i32s in pod names: a range that would pass i32::MAX ends there.
        for ordinal in start..start.saturating_add(replicas) {
            match by_ordinal.get(&ordinal) {
                None => self.create(ordinal, start).await?,
                // Finished pods are replaced; the new one comes on the next pass, once this one is gone.
                Some(pod) if finished(pod) && pod.metadata.deletion_timestamp.is_none() => self.delete(pod).await?,
                Some(pod) if running_and_ready(pod) && pod.metadata.deletion_timestamp.is_none() => {
                    self.ensure_claims(ordinal).await?;
                    continue;
                }
                Some(_) => {}
            }
            waiting = true;
            if ordered {
                return Ok(());
            }
        }
        for (ordinal, pod) in condemned {
            if pod.metadata.deletion_timestamp.is_none() {
                self.release_claims(pod, *ordinal).await?;
                self.delete(pod).await?;
            }
            if ordered {
                return Ok(());
            }
        }
        let strategy = self.spec.update_strategy.clone().unwrap_or_default();
        if waiting || !condemned.is_empty() || strategy.type_.as_deref() == Some("OnDelete") {
            return Ok(());
        }
        // Rolling update: the highest stale ordinal at or above the partition goes first, once all are Ready.
        let partition = strategy.rolling_update.and_then(|r| r.partition).unwrap_or(0);
        for ordinal in (start.saturating_add(partition.max(0))..start.saturating_add(replicas)).rev() {
            if let Some(pod) = by_ordinal.get(&ordinal)
                && revision_of(pod) != self.revisions.update
            {
                return self.delete(pod).await;
            }
        }
        Ok(())
    }
}

async fn reconcile(set: Arc<StatefulSet>, context: Arc<crate::Context>) -> Result<Action, kube::Error> {
    if set.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let (namespace, name) = (set.namespace().unwrap_or_default(), set.name_any());
    let uid = set.uid().unwrap_or_default();
    let Some(spec) = set.spec.clone() else { return Ok(Action::await_change()) };
    let client = &context.client;
    let expectations = &context.expectations;
    // Pods just created or deleted that the cache does not show yet would be created or deleted again.
    if !expectations.satisfied(&uid) {
        return Ok(Action::requeue(crate::expectations::EXPECTING));
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);

    let mut owned: Vec<Pod> = Vec::new();
    for pod in listed(&context.caches.pods.store(), |p| picked(&spec.selector, &namespace, &p.metadata)) {
        let pod = Arc::unwrap_or_clone(pod);
        match controller_of(&pod.metadata) {
            Some(owner) if owner.uid == uid => owned.push(pod),
            // An orphan with one of the set's names and labels (left by `--cascade=orphan`) is adopted.
            None if selects(&spec.selector, pod.labels()) && ordinal_of(&name, &pod.name_any()).is_some() => {
                match crate::pods::adopt(&context, &pods, &*set, &pod).await {
                    Ok(adopted) => owned.push(adopted),
                    Err(kube::Error::Api(_)) => {}
                    Err(error) => return Err(error),
                }
            }
            _ => {}
        }
    }
    let revisions = revisions(&set, &owned, client, &context.caches.controller_revisions.store()).await?;

    let start = spec.ordinals.as_ref().and_then(|o| o.start).unwrap_or(0);
    let replicas = spec.replicas.unwrap_or(1).max(0);
    let mut by_ordinal: BTreeMap<i32, Pod> = BTreeMap::new();
    let mut condemned: Vec<(i32, Pod)> = Vec::new();
    for pod in &owned {
        match ordinal_of(&name, &pod.name_any()) {
            Some(ordinal) if (start..start.saturating_add(replicas)).contains(&ordinal) => {
                by_ordinal.insert(ordinal, pod.clone());
            }
            ordinal => condemned.push((ordinal.unwrap_or(i32::MAX), pod.clone())),
        }
    }
    condemned.sort_by_key(|(ordinal, _)| std::cmp::Reverse(*ordinal));

    let live: Vec<&Pod> = owned.iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect();
    let ready = live.iter().filter(|p| running_and_ready(p)).count();
    let at = |revision: &str| live.iter().filter(|p| revision_of(p) == revision).count();
    let (mut current, updated) = (at(&revisions.current), at(&revisions.update));
    let mut current_revision = revisions.current.clone();
    // A finished rolling update makes the update revision current.
    if live.len() == replicas as usize && updated == live.len() && ready == live.len() {
        current_revision = revisions.update.clone();
        current = updated;
    }
    let pass = Pass {
        set: &set,
        uid: uid.clone(),
        expectations,
        claims: context.caches.claims.store(),
        spec: spec.clone(),
        client,
        events: &context.events,
        pods,
        revisions,
    };
    pass.step(&by_ordinal, &condemned).await?;

    let status = json!({
        "replicas": live.len(), "readyReplicas": ready, "availableReplicas": ready,
        "currentReplicas": current, "updatedReplicas": updated,
        "currentRevision": current_revision, "updateRevision": pass.revisions.update,
        "observedGeneration": set.metadata.generation, "collisionCount": 0,
    });
    let before = serde_json::to_value(&set.status).unwrap_or_default();
    let changed = status.as_object().into_iter().flatten().any(|(k, v)| {
        let old = &before[k];
        old != v && !(old.is_null() && v.as_i64() == Some(0))
    });
    if changed {
        let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &namespace);
        nest_client::done_unless_refused(
            sets.patch_status(&name, &PatchParams::default(), &Patch::Merge(&json!({"status": status}))).await,
        )?;
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinals_are_read_only_from_names_the_set_would_give() {
        assert_eq!(ordinal_of("web", "web-0"), Some(0));
        assert_eq!(ordinal_of("web", "web-12"), Some(12));
        assert_eq!(ordinal_of("web", "web-01"), None);
        assert_eq!(ordinal_of("web", "web-"), None);
        assert_eq!(ordinal_of("web", "webby-1"), None);
        assert_eq!(ordinal_of("web", "web-x-1"), None);
        assert_eq!(ordinal_of("web-x", "web-x-1"), Some(1));
    }
}
