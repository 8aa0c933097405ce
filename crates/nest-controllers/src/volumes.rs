//! Volume claims, after kube-controller-manager's `persistentvolume-binder` controller: a claim that names a volume
//! (`spec.volumeName`) is bound to it once that volume is free or already points back at the claim; with local
//! volumes on (`nest up`'s management cluster), a claim with no storage class gets a volume of its own at once,
//! provisioned by [`PROVISIONER`] as `pvc-<claim uid>` and bound to it; a provisioned volume whose claim is gone is
//! Released and deleted (its reclaim policy is `Delete`); another volume whose claim is gone is Released. Binding sets the volume's `claimRef` and phase `Bound`, then the
//! claim's `volumeName` and its status (`Bound`, access modes, capacity), as upstream does.
//!
//! Nodes run a pod only once each of its claims is Bound (`nest-node`), so a claim name that is not a Bound claim of
//! the pod's namespace mounts nothing.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::informers::Informers;
use crate::reconciling::Reconciling;

/// The provisioner of nest's local volumes (a volume's `pv.kubernetes.io/provisioned-by`, its CSI driver name):
/// each is a directory on the node that runs the claim's pods.
pub const PROVISIONER: &str = "nest.dev/local";
const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";

struct Context {
    client: Client,
    local: bool,
}

/// Runs the binder until the process stops; `local` provisions a volume for every claim with no storage class.
pub(crate) async fn run(client: Client, caches: Informers, local: bool) {
    let context = Arc::new(Context { client: client.clone(), local });
    let binder = Reconciling::new(&caches.claims)
        .watches(&caches.volumes, |volume| {
            let claim = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
            let reference =
                claim.and_then(|c| Some(ObjectRef::new(c.name.as_deref()?).within(c.namespace.as_deref()?)));
            reference.into_iter().collect()
        })
        .run(reconcile_claim, error_policy, context.clone());
    // A claim that goes frees its volume at once, not at the next look.
    let reclaimer = Reconciling::new(&caches.volumes)
        .watches(&caches.claims, |claim| {
            let volume = claim.spec.as_ref().and_then(|s| s.volume_name.as_deref());
            volume.map(ObjectRef::new).into_iter().collect()
        })
        .run(
            reconcile_volume,
            |_, error, _| {
                tracing::debug!(%error, "reclaiming a volume");
                Action::requeue(Duration::from_secs(2))
            },
            context,
        );
    tokio::join!(
        crate::drive(binder, "persistentvolume-binder"),
        crate::drive(reclaimer, "persistentvolume-reclaimer")
    );
}

fn error_policy(_: Arc<PersistentVolumeClaim>, error: &kube::Error, _: Arc<Context>) -> Action {
    tracing::debug!(%error, "binding a claim");
    Action::requeue(Duration::from_secs(1))
}

/// Whether `volume` is free for `claim`, or already points at it.
fn fits(volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    match volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) {
        None => true,
        Some(reference) => {
            reference.name.as_deref() == Some(claim.name_any().as_str())
                && reference.namespace == claim.namespace()
                && reference.uid.as_ref().is_none_or(|uid| Some(uid) == claim.uid().as_ref())
        }
    }
}

async fn reconcile_claim(claim: Arc<PersistentVolumeClaim>, context: Arc<Context>) -> Result<Action, kube::Error> {
    if claim.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let phase = claim.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
    let spec = claim.spec.clone().unwrap_or_default();
    let volumes: Api<PersistentVolume> = Api::all(context.client.clone());
    let named = spec.volume_name.clone().filter(|v| !v.is_empty());
    let volume = match &named {
        Some(name) => match volumes.get_opt(name).await? {
            Some(volume) if fits(&volume, &claim) => volume,
            // Named but not there (yet), or another claim's: the claim waits.
            _ => return Ok(Action::requeue(Duration::from_secs(5))),
        },
        None if context.local && spec.storage_class_name.is_none() => provision(&context, &claim).await?,
        None => return Ok(Action::await_change()),
    };
    let volume_phase = volume.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or_default();
    if phase == "Bound" && volume_phase == "Bound" && named.is_some() {
        return Ok(Action::await_change());
    }
    bind(&context, &claim, &volume).await?;
    Ok(Action::await_change())
}

/// A new local volume for `claim`: its requested size and access modes, reclaimed (deleted) with the claim.
async fn provision(context: &Context, claim: &PersistentVolumeClaim) -> Result<PersistentVolume, kube::Error> {
    let name = format!("pvc-{}", claim.uid().unwrap_or_default());
    let spec = claim.spec.clone().unwrap_or_default();
    let size = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage").cloned())
        .map_or_else(|| json!("1Gi"), |q| json!(q.0));
    let access_modes = spec.access_modes.clone().unwrap_or_else(|| vec!["ReadWriteOnce".into()]);
    let volume: PersistentVolume = serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": {PROVISIONED_BY: PROVISIONER}},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": access_modes,
            "persistentVolumeReclaimPolicy": "Delete",
            "volumeMode": spec.volume_mode.clone().unwrap_or_else(|| "Filesystem".into()),
            "claimRef": claim_ref(claim),
            "csi": {"driver": PROVISIONER, "volumeHandle": format!("{}/{}", claim.namespace().unwrap_or_default(), claim.name_any())},
        },
    }))
    .map_err(kube::Error::SerdeError)?;
    let volumes: Api<PersistentVolume> = Api::all(context.client.clone());
    match volumes.create(&PostParams::default(), &volume).await {
        Ok(created) => Ok(created),
        Err(kube::Error::Api(status)) if status.code == 409 => volumes.get(&name).await,
        Err(error) => Err(error),
    }
}

fn claim_ref(claim: &PersistentVolumeClaim) -> serde_json::Value {
    json!({"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": claim.namespace(), "name": claim.name_any(),
           "uid": claim.uid(), "resourceVersion": claim.resource_version()})
}

/// Binds `claim` and `volume` to each other: the volume's claimRef and phase, then the claim's volumeName and status.
async fn bind(context: &Context, claim: &PersistentVolumeClaim, volume: &PersistentVolume) -> Result<(), kube::Error> {
    let volumes: Api<PersistentVolume> = Api::all(context.client.clone());
    let params = PatchParams::default();
    let name = volume.name_any();
    if volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()).is_none() {
        volumes.patch(&name, &params, &Patch::Merge(&json!({"spec": {"claimRef": claim_ref(claim)}}))).await?;
    }
    if volume.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Bound") {
        volumes.patch_status(&name, &params, &Patch::Merge(&json!({"status": {"phase": "Bound"}}))).await?;
    }
    let claims: Api<PersistentVolumeClaim> =
        Api::namespaced(context.client.clone(), &claim.namespace().unwrap_or_default());
    let spec = volume.spec.clone().unwrap_or_default();
    if claim.spec.as_ref().and_then(|s| s.volume_name.as_deref()) != Some(name.as_str()) {
        let patch = json!({"metadata": {"annotations": {"pv.kubernetes.io/bind-completed": "yes",
                                                        "pv.kubernetes.io/bound-by-controller": "yes"}},
                           "spec": {"volumeName": name}});
        claims.patch(&claim.name_any(), &params, &Patch::Merge(&patch)).await?;
    }
    let status = json!({"status": {"phase": "Bound", "accessModes": spec.access_modes, "capacity": spec.capacity}});
    claims.patch_status(&claim.name_any(), &params, &Patch::Merge(&status)).await?;
    Ok(())
}

/// Deletes a provisioned local volume whose claim is gone (or is another claim of the same name).
async fn reconcile_volume(volume: Arc<PersistentVolume>, context: Arc<Context>) -> Result<Action, kube::Error> {
    let ours = volume.annotations().get(PROVISIONED_BY).map(String::as_str) == Some(PROVISIONER);
    let Some(reference) = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return Ok(Action::await_change());
    };
    if volume.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let claims: Api<PersistentVolumeClaim> =
        Api::namespaced(context.client.clone(), reference.namespace.as_deref().unwrap_or_default());
    let claim = claims.get_opt(reference.name.as_deref().unwrap_or_default()).await?;
    let gone = claim.is_none_or(|c| reference.uid.is_some() && c.uid() != reference.uid);
    if !gone {
        return Ok(Action::requeue(Duration::from_secs(60)));
    }
    // Its claim is gone: Released (so that pv-protection lets it go), then deleted if it is one of ours.
    let volumes: Api<PersistentVolume> = Api::all(context.client.clone());
    if volume.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Released") {
        let patch = json!({"status": {"phase": "Released"}});
        let released = volumes.patch_status(&volume.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await;
        nest_client::done_unless_gone_or_changed(released)?;
    }
    if ours {
        nest_client::done_unless_gone_or_changed(volumes.delete(&volume.name_any(), &Default::default()).await)?;
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(name: &str, uid: &str) -> PersistentVolumeClaim {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "a", "uid": uid}})).unwrap()
    }

    fn volume(claim_ref: serde_json::Value) -> PersistentVolume {
        serde_json::from_value(json!({"metadata": {"name": "v"}, "spec": {"claimRef": claim_ref}})).unwrap()
    }

    #[test]
    fn a_volume_fits_only_a_claim_it_is_free_for_or_points_at() {
        let mine = claim("data", "1");
        let free: PersistentVolume = serde_json::from_value(json!({"metadata": {"name": "v"}})).unwrap();
        assert!(fits(&free, &mine));
        assert!(fits(&volume(json!({"name": "data", "namespace": "a", "uid": "1"})), &mine));
        assert!(fits(&volume(json!({"name": "data", "namespace": "a"})), &mine), "pre-bound by name");
        assert!(!fits(&volume(json!({"name": "data", "namespace": "b", "uid": "1"})), &mine), "another namespace's");
        assert!(!fits(&volume(json!({"name": "data", "namespace": "a", "uid": "2"})), &mine), "an earlier claim's");
        assert!(!fits(&volume(json!({"name": "other", "namespace": "a"})), &mine));
    }
}
