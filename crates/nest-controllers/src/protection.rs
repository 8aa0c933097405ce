//! Storage protection, after kube-controller-manager's `pvc-protection` and `pv-protection` controllers
//! (`pkg/controller/volume/{pvcprotection,pvprotection}`, 1.33): the API server puts `kubernetes.io/pvc-protection`
//! on every claim and `kubernetes.io/pv-protection` on every volume (StorageObjectInUseProtection admission); a claim
//! being deleted loses its finalizer once no pod that is not finished uses it (by name, or as a pod's generic
//! ephemeral volume), and a volume being deleted once it is no longer Bound. Until then they stay, so that data in
//! use is never removed from under a pod.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use serde_json::json;

use crate::informers::Informers;
use crate::reconciling::Reconciling;

/// A claim's finalizer.
const CLAIM: &str = "kubernetes.io/pvc-protection";
/// A volume's finalizer.
const VOLUME: &str = "kubernetes.io/pv-protection";

/// What both controllers read: the client, and the cache of pods.
struct Context {
    client: Client,
    pods: Store<Pod>,
}

/// Runs both controllers until the process stops.
pub(crate) async fn run(client: Client, caches: Informers) {
    let context = Arc::new(Context { client, pods: caches.pods.store() });
    // A pod that finishes or goes may free the claims it named.
    let claim_loop = Reconciling::new(&caches.claims)
        .watches(&caches.pods, |pod| {
            let namespace = pod.namespace().unwrap_or_default();
            claims_of(pod).into_iter().map(|name| ObjectRef::new(&name).within(&namespace)).collect()
        })
        .run(reconcile_claim, retry, context.clone());
    let volume_loop = Reconciling::new(&caches.volumes).run(reconcile_volume, retry, context);
    tokio::join!(crate::drive(claim_loop, "pvc-protection"), crate::drive(volume_loop, "pv-protection"));
}

fn retry<K>(_: Arc<K>, error: &kube::Error, _: Arc<Context>) -> Action {
    tracing::debug!(%error, "storage protection: retrying");
    Action::requeue(Duration::from_secs(1))
}

/// The claims `pod` uses: those its volumes name, and its generic ephemeral volumes' (`<pod>-<volume>`).
fn claims_of(pod: &Pod) -> Vec<String> {
    let volumes = pod.spec.iter().flat_map(|s| s.volumes.iter().flatten());
    volumes
        .filter_map(|v| match (&v.persistent_volume_claim, &v.ephemeral) {
            (Some(claim), _) => Some(claim.claim_name.clone()),
            (None, Some(_)) => Some(format!("{}-{}", pod.name_any(), v.name)),
            _ => None,
        })
        .collect()
}

fn finished(pod: &Pod) -> bool {
    matches!(pod.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed"))
}

/// `object` without `finalizer`, written only if nothing changed it meanwhile.
async fn release<K>(api: &Api<K>, object: &K, finalizer: &str) -> Result<(), kube::Error>
where
    K: Resource + Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug,
{
    let finalizers: Vec<&String> = object.finalizers().iter().filter(|f| *f != finalizer).collect();
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": object.resource_version()}});
    nest_client::done_unless_gone_or_changed(
        api.patch(&object.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await,
    )
    .map(drop)
}

async fn reconcile_claim(claim: Arc<PersistentVolumeClaim>, context: Arc<Context>) -> Result<Action, kube::Error> {
    if claim.metadata.deletion_timestamp.is_none() || !claim.finalizers().iter().any(|f| f == CLAIM) {
        return Ok(Action::await_change());
    }
    let namespace = claim.namespace().unwrap_or_default();
    let name = claim.name_any();
    let in_use = !context
        .pods
        .state_filter(|pod| {
            pod.metadata.namespace.as_deref() == Some(namespace.as_str())
                && !finished(pod)
                && claims_of(pod).contains(&name)
        })
        .is_empty();
    if !in_use {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(context.client.clone(), &namespace);
        release(&claims, &*claim, CLAIM).await?;
    }
    Ok(Action::await_change())
}

async fn reconcile_volume(volume: Arc<PersistentVolume>, context: Arc<Context>) -> Result<Action, kube::Error> {
    if volume.metadata.deletion_timestamp.is_none() || !volume.finalizers().iter().any(|f| f == VOLUME) {
        return Ok(Action::await_change());
    }
    let bound = volume.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
    if !bound {
        release(&Api::all(context.client.clone()), &*volume, VOLUME).await?;
    }
    Ok(Action::await_change())
}
