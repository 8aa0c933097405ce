//! Deployments, after kube-controller-manager's `deployment` controller (`pkg/controller/deployment`, 1.33): one
//! ReplicaSet per pod template, named `<deployment>-<pod-template-hash>` and labelled with the hash; a template change
//! rolls pods from the old ReplicaSets to the new one — with `RollingUpdate` within `maxSurge` above and
//! `maxUnavailable` below the wanted replicas, with `Recreate` only once the old pods are gone. Revisions are
//! numbered in the `deployment.kubernetes.io/revision` annotation (which `kubectl rollout history|undo` read); old
//! ReplicaSets beyond `revisionHistoryLimit` are deleted; a paused Deployment is scaled but not rolled.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::expectations::version_of;
use crate::informers::{Informers, listed};
use crate::replicaset::controller_of;

/// The label (and selector term) that ties a ReplicaSet and its pods to one template.
pub const HASH_LABEL: &str = "pod-template-hash";
/// The annotation numbering revisions.
pub const REVISION: &str = "deployment.kubernetes.io/revision";

/// Runs the controller until the process stops.
pub(crate) async fn run(client: Client, caches: Informers) {
    let pair = (&caches.deployments, &caches.replica_sets);
    crate::run_owning(client, &caches, pair, vec![], reconcile, COMPONENT).await;
}

/// The hash of a pod template: FNV-1a (64 bits) of its JSON without zero values (whose keys serde_json keeps
/// sorted), written with the characters Kubernetes uses for generated names. It must never change between nest
/// versions: a new hash for the same template would roll every Deployment.
pub fn template_hash(template: &serde_json::Value) -> String {
    let mut n: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in normalized(template).to_string().bytes() {
        n ^= u64::from(byte);
        n = n.wrapping_mul(0x0000_0100_0000_01b3);
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..10)
        .map(|_| {
            let c = ALPHABET[(n % ALPHABET.len() as u64) as usize] as char;
            n /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

/// Whether `set` runs `template` (kube's `EqualIgnoreHash`: the templates are equal but for the hash label).
fn same_template(template: &serde_json::Value, set: &ReplicaSet) -> bool {
    let strip = |mut t: serde_json::Value| {
        if let Some(labels) = t.pointer_mut("/metadata/labels").and_then(serde_json::Value::as_object_mut) {
            labels.remove(HASH_LABEL);
            if labels.is_empty() {
                t["metadata"].as_object_mut().map(|m| m.remove("labels"));
            }
        }
        t
    };
    let theirs =
        set.spec.as_ref().and_then(|s| s.template.as_ref()).map(|t| serde_json::to_value(t).unwrap_or_default());
    theirs.is_some_and(|theirs| normalized(&strip(theirs)) == normalized(&strip(template.clone())))
}

/// A template without its zero values (`false`, `0`, `""`, `null`, empty objects and lists), which clients write or
/// leave out interchangeably: Go decodes both to the same struct, and kubectl's `rollout undo` re-encodes a
/// ReplicaSet's template without them.
fn normalized(value: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    let zero = nest_core::json::is_zero;
    match value {
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), normalized(v))).filter(|(_, v)| !zero(v)).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(normalized).collect()),
        other => other.clone(),
    }
}

/// An int-or-percent of `total`, rounded up or down as kube does (`intstr.GetScaledValueFromIntOrPercent`).
/// Who the Deployment's Events are from.
const COMPONENT: &str = "deployment-controller";

///
/// The counts here are i64 (Go's `int`): sums of i32 replica counts, and of counts any client may write into a
/// ReplicaSet's status, must not overflow. A percentage that is not one counts as 0; none is below 0.
fn scaled(value: Option<&IntOrString>, total: i64, round_up: bool, default: &str) -> i64 {
    let value = value.cloned().unwrap_or(IntOrString::String(default.to_string()));
    match value {
        IntOrString::Int(n) => i64::from(n).max(0),
        IntOrString::String(s) => {
            let percent: i64 = s.strip_suffix('%').and_then(|p| p.parse().ok()).unwrap_or(0).max(0);
            let product = i128::from(percent) * i128::from(total);
            let whole = if round_up { (product + 99).div_euclid(100) } else { product.div_euclid(100) };
            i64::try_from(whole).unwrap_or(i64::MAX)
        }
    }
}

fn replicas_of(set: &ReplicaSet) -> i64 {
    i64::from(set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0).max(0))
}

fn available_of(set: &ReplicaSet) -> i64 {
    i64::from(set.status.as_ref().and_then(|s| s.available_replicas).unwrap_or(0).max(0))
}

/// A count computed here as the i32 the API holds (they never leave 0..=the Deployment's replicas, but are held
/// there whatever the inputs).
fn count(n: i64) -> i32 {
    i32::try_from(n.max(0)).unwrap_or(i32::MAX)
}

fn revision_of(set: &ReplicaSet) -> i64 {
    set.annotations().get(REVISION).and_then(|r| r.parse().ok()).unwrap_or(0)
}

async fn reconcile(
    deployment: Arc<Deployment>,
    context: Arc<crate::Context<ReplicaSet>>,
) -> Result<Action, kube::Error> {
    if deployment.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let (namespace, name) = (deployment.namespace().unwrap_or_default(), deployment.name_any());
    let Some(spec) = deployment.spec.clone() else { return Ok(Action::await_change()) };
    let uid = deployment.uid().unwrap_or_default();
    let expectations = &context.expectations;
    // A ReplicaSet just created or scaled that the cache does not show yet would be created or scaled again.
    if !expectations.satisfied(&uid) {
        return Ok(Action::requeue(crate::expectations::EXPECTING));
    }
    let sets_api: Api<ReplicaSet> = Api::namespaced(context.client.clone(), &namespace);
    let owned = |s: &ReplicaSet| {
        s.metadata.namespace.as_deref() == Some(namespace.as_str())
            && controller_of(&s.metadata).is_some_and(|o| o.uid == uid)
    };
    let mut sets: Vec<ReplicaSet> =
        listed(&context.caches.replica_sets.store(), owned).into_iter().map(Arc::unwrap_or_clone).collect();

    // The ReplicaSet of the current template (whatever its name: a rollback brings back an older one), created if
    // missing.
    let mut template = serde_json::to_value(&spec.template).unwrap_or_default();
    let existing = sets.iter().find(|s| same_template(&template, s)).map(|s| s.name_any());
    let hash = template_hash(&template);
    template["metadata"]["labels"][HASH_LABEL] = json!(hash);
    let new_name = existing.unwrap_or_else(|| format!("{name}-{hash}"));
    let wanted = i64::from(spec.replicas.unwrap_or(1).max(0));
    let max_revision = sets.iter().map(revision_of).max().unwrap_or(0);
    if !sets.iter().any(|s| s.name_any() == new_name) {
        if spec.paused == Some(true) {
            return update_status(&context, &deployment, &sets, None).await;
        }
        let mut selector = serde_json::to_value(&spec.selector).unwrap_or_default();
        selector["matchLabels"][HASH_LABEL] = json!(hash);
        // A first ReplicaSet starts at full size; a later one grows as the rollout allows.
        let initial = if sets.is_empty() { wanted } else { 0 };
        let set = serde_json::from_value::<ReplicaSet>(json!({
            "metadata": {
                "name": new_name, "namespace": namespace,
                "labels": template["metadata"]["labels"],
                "annotations": {REVISION: max_revision.saturating_add(1).to_string()},
                "ownerReferences": [crate::controller_reference(&*deployment)],
            },
            "spec": {"replicas": initial, "minReadySeconds": spec.min_ready_seconds.unwrap_or(0), "selector": selector,
                     "template": template},
        }))
        .map_err(kube::Error::SerdeError)?;
        expectations.expect_creations(&uid, 1);
        let created = sets_api.create(&PostParams::default(), &set).await;
        if created.is_err() {
            expectations.creation_failed(&uid);
        }
        match created {
            Ok(created) => {
                if initial > 0 {
                    let message = format!("Scaled up replica set {new_name} from 0 to {initial}");
                    context.events.about(&*deployment, "Normal", "ScalingReplicaSet", message);
                }
                sets.push(created)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                return Ok(Action::requeue(Duration::from_millis(200)));
            }
            Err(error) => return Err(error),
        }
    } else if let Some(current) = sets.iter().find(|s| s.name_any() == new_name)
        && revision_of(current) < max_revision
    {
        // Rolled back to an older template: it becomes the newest revision again.
        let patch = json!({"metadata": {"annotations": {REVISION: max_revision.saturating_add(1).to_string()}}});
        expectations.expect_change(&uid, current);
        let renumbered = sets_api.patch(&new_name, &PatchParams::default(), &Patch::Merge(&patch)).await;
        expectations.answered(&uid, current, &renumbered, version_of);
        renumbered?;
    }

    let (new, old): (Vec<ReplicaSet>, Vec<ReplicaSet>) = sets.iter().cloned().partition(|s| s.name_any() == new_name);
    let new = new.into_iter().next();
    if spec.paused != Some(true)
        && let Some(new) = &new
    {
        let strategy = spec.strategy.clone().unwrap_or_default();
        let mut changes: BTreeMap<String, i64> = BTreeMap::new();
        if strategy.type_.as_deref() == Some("Recreate") {
            for set in &old {
                if replicas_of(set) != 0 {
                    changes.insert(set.name_any(), 0);
                }
            }
            let old_pods: i64 = old.iter().map(|s| i64::from(s.status.as_ref().map_or(0, |st| st.replicas))).sum();
            if old_pods == 0 && replicas_of(new) != wanted {
                changes.insert(new.name_any(), wanted);
            }
        } else {
            let rolling = strategy.rolling_update.unwrap_or_default();
            let surge = scaled(rolling.max_surge.as_ref(), wanted, true, "25%");
            let mut unavailable = scaled(rolling.max_unavailable.as_ref(), wanted, false, "25%");
            if surge == 0 && unavailable == 0 {
                unavailable = 1;
            }
            // Scale up the new ReplicaSet within the surge.
            let total: i64 = sets.iter().map(replicas_of).sum();
            let new_replicas = replicas_of(new);
            let target = if old.iter().all(|s| replicas_of(s) == 0) {
                wanted
            } else {
                (new_replicas + (wanted + surge - total).max(0)).min(wanted)
            };
            if target != new_replicas {
                changes.insert(new.name_any(), target);
            }
            // Scale down old ones while enough pods stay available.
            let available: i64 = sets.iter().map(available_of).sum();
            let new_unavailable = (replicas_of(new).max(target) - available_of(new)).max(0);
            let mut removable = (available - (wanted - unavailable) - new_unavailable).max(0);
            // Old pods that are not available anyway can go at once.
            let mut by_age = old.clone();
            by_age.sort_by_key(revision_of);
            for set in &by_age {
                let replicas = replicas_of(set);
                let idle = (replicas - available_of(set)).max(0);
                let cut = (idle + removable).min(replicas);
                if cut > 0 {
                    changes.insert(set.name_any(), replicas - cut);
                    removable -= (cut - idle).max(0);
                }
            }
        }
        for (set, replicas) in changes {
            let from = sets.iter().find(|s| s.name_any() == set).map_or(0, replicas_of);
            let direction = if replicas > from { "up" } else { "down" };
            let message = format!("Scaled {direction} replica set {set} from {from} to {replicas}");
            context.events.about(&*deployment, "Normal", "ScalingReplicaSet", message);
            let patch = json!({"spec": {"replicas": count(replicas)}});
            let cached = sets.iter().find(|s| s.name_any() == set);
            if let Some(cached) = cached {
                expectations.expect_change(&uid, cached);
            }
            let scaled = sets_api.patch(&set, &PatchParams::default(), &Patch::Merge(&patch)).await;
            if let Some(cached) = cached {
                expectations.answered(&uid, cached, &scaled, version_of);
            }
            nest_client::done_unless_refused(scaled)?;
        }
        // History: old, empty ReplicaSets beyond the limit go, oldest first.
        let limit = usize::try_from(spec.revision_history_limit.unwrap_or(10)).unwrap_or(0);
        let mut empty: Vec<&ReplicaSet> =
            old.iter().filter(|s| replicas_of(s) == 0 && s.status.as_ref().map_or(0, |st| st.replicas) == 0).collect();
        empty.sort_by_key(|s| revision_of(s));
        for set in empty.iter().take(empty.len().saturating_sub(limit)) {
            expectations.expect_deletion(&uid, set);
            let deleted = sets_api.delete(&set.name_any(), &DeleteParams::background()).await;
            expectations.answered(&uid, set, &deleted, |a| a.as_ref().left().and_then(version_of));
        }
    }
    update_status(&context, &deployment, &sets, new.as_ref()).await
}

async fn update_status(
    context: &crate::Context<ReplicaSet>,
    deployment: &Deployment,
    sets: &[ReplicaSet],
    new: Option<&ReplicaSet>,
) -> Result<Action, kube::Error> {
    let spec = deployment.spec.clone().unwrap_or_default();
    let wanted = spec.replicas.unwrap_or(1).max(0);
    let total = |f: fn(&ReplicaSet) -> i64| count(sets.iter().map(f).sum::<i64>());
    let replicas = total(|s| i64::from(s.status.as_ref().map_or(0, |st| st.replicas).max(0)));
    let ready = total(|s| i64::from(s.status.as_ref().and_then(|st| st.ready_replicas).unwrap_or(0).max(0)));
    let available = total(available_of);
    let updated = new.and_then(|s| s.status.as_ref()).map_or(0, |st| st.replicas);
    let rolling = spec.strategy.as_ref().and_then(|s| s.rolling_update.clone()).unwrap_or_default();
    let max_unavailable = if spec.strategy.as_ref().and_then(|s| s.type_.as_deref()) == Some("Recreate") {
        0
    } else {
        count(scaled(rolling.max_unavailable.as_ref(), i64::from(wanted), false, "25%"))
    };
    let complete = updated == wanted && replicas == wanted && available == wanted;
    let now = nest_core::clock::rfc3339_now();
    let condition = |kind: &str, status: bool, reason: &str, message: String| {
        json!({"type": kind, "status": if status { "True" } else { "False" }, "reason": reason, "message": message,
               "lastUpdateTime": now, "lastTransitionTime": now})
    };
    let name = deployment.name_any();
    let new_name = new.map(|s| s.name_any()).unwrap_or_default();
    let available_condition = if available >= wanted - max_unavailable {
        condition("Available", true, "MinimumReplicasAvailable", "Deployment has minimum availability.".into())
    } else {
        condition(
            "Available",
            false,
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.".into(),
        )
    };
    let progressing = if spec.paused == Some(true) {
        condition("Progressing", false, "DeploymentPaused", "Deployment is paused".into())
    } else if complete {
        condition(
            "Progressing",
            true,
            "NewReplicaSetAvailable",
            format!("ReplicaSet \"{new_name}\" has successfully progressed."),
        )
    } else {
        condition("Progressing", true, "ReplicaSetUpdated", format!("ReplicaSet \"{new_name}\" is progressing."))
    };
    // Keep the conditions' transition times when nothing changed, so the status settles.
    let previous = deployment.status.clone().unwrap_or_default();
    let same = |kind: &str, wanted: &serde_json::Value| {
        previous.conditions.iter().flatten().any(|c| {
            c.type_ == kind && c.status == wanted["status"] && c.reason.as_deref() == wanted["reason"].as_str()
        })
    };
    let conditions_unchanged = same("Available", &available_condition) && same("Progressing", &progressing);
    let numbers_unchanged = previous.replicas == Some(replicas)
        && previous.ready_replicas.unwrap_or(0) == ready
        && previous.available_replicas.unwrap_or(0) == available
        && previous.updated_replicas.unwrap_or(0) == updated
        && previous.observed_generation == deployment.metadata.generation;
    if conditions_unchanged && numbers_unchanged {
        return Ok(if complete { Action::await_change() } else { Action::requeue(Duration::from_secs(5)) });
    }
    let mut status = json!({
        "replicas": replicas, "readyReplicas": ready, "availableReplicas": available, "updatedReplicas": updated,
        "unavailableReplicas": (wanted - available).max(0), "observedGeneration": deployment.metadata.generation,
    });
    if !conditions_unchanged {
        status["conditions"] = json!([available_condition, progressing]);
    }
    let deployments: Api<Deployment> =
        Api::namespaced(context.client.clone(), &deployment.namespace().unwrap_or_default());
    let revision = new.map(revision_of).unwrap_or(0);
    if revision > 0 && deployment.annotations().get(REVISION) != Some(&revision.to_string()) {
        let patch = json!({"metadata": {"annotations": {REVISION: revision.to_string()}}});
        let _ = deployments.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await;
    }
    nest_client::done_unless_refused(
        deployments.patch_status(&name, &PatchParams::default(), &Patch::Merge(&json!({"status": status}))).await,
    )?;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn surge_rounds_up_and_unavailability_down() {
        let pct = |s: &str| Some(IntOrString::String(s.into()));
        assert_eq!(scaled(pct("25%").as_ref(), 3, true, "25%"), 1);
        assert_eq!(scaled(pct("25%").as_ref(), 3, false, "25%"), 0);
        assert_eq!(scaled(Some(&IntOrString::Int(2)), 3, false, "25%"), 2);
        assert_eq!(scaled(None, 10, true, "25%"), 3);
        // At the extremes: no overflow, nothing below 0, and what is not a percentage is 0.
        let total = i64::from(i32::MAX);
        assert_eq!(scaled(pct("2147483647%").as_ref(), total, true, "25%"), total * total / 100 + 1);
        assert_eq!(scaled(Some(&IntOrString::Int(i32::MIN)), total, true, "25%"), 0);
        assert_eq!(scaled(pct("-50%").as_ref(), 10, true, "25%"), 0);
        assert_eq!(scaled(pct("1e10%").as_ref(), 10, true, "25%"), 0);
        assert_eq!(scaled(pct("NaN%").as_ref(), 10, true, "25%"), 0);
        assert_eq!(count(i64::MAX), i32::MAX);
        assert_eq!(count(-5), 0);
    }

    #[test]
    fn template_hashes_are_stable_and_differ_by_template() {
        let a = json!({"spec": {"containers": [{"name": "web", "image": "nginx:1"}]}});
        let b = json!({"spec": {"containers": [{"name": "web", "image": "nginx:2"}]}});
        assert_eq!(template_hash(&a), template_hash(&a.clone()));
        assert_ne!(template_hash(&a), template_hash(&b));
        assert_eq!(template_hash(&a).len(), 10);
        let noisy = json!({"metadata": {"creationTimestamp": null},
                           "spec": {"containers": [{"name": "web", "image": "nginx:1", "stdin": false}]}});
        assert_eq!(template_hash(&a), template_hash(&noisy), "zero values do not count");
        // Fixed forever: a change would roll every Deployment on upgrade.
        assert_eq!(template_hash(&json!({})), "l7t7jbdt44");
    }
}
