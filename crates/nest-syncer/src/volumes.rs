//! Bound volumes, copied up. When the super cluster binds a tenant's claim (a provisioner or the binder gives the
//! super PersistentVolumeClaim a `volumeName`), the tenant gets a PersistentVolume of the same name, bound to the
//! tenant's claim (`claimRef` names the tenant namespace, claim and UID), with the super volume's capacity, modes,
//! class and source, and the tenant claim's `spec.volumeName` is set — what `kubectl get pv,pvc` shows in an
//! ordinary cluster. The copy (labelled `tenancy.nest.dev/from-super`) is Released and deleted when the super volume
//! goes or stops being bound to that claim.

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use serde_json::{Value, json};

use crate::names::{FROM_SUPER_LABEL, TENANT_LABEL, TENANT_NAME, TENANT_NAMESPACE, TENANT_UID};
use crate::sync::Done;
use crate::tenants::Tenant;
use crate::{Item, Syncer};

/// The tenant (cluster key) a super volume's claim belongs to, if any.
pub fn owner(syncer: &Syncer, volume: &PersistentVolume) -> Option<String> {
    let namespace = volume.spec.as_ref()?.claim_ref.as_ref()?.namespace.as_ref()?;
    let super_namespace = syncer.super_namespaces.get(&ObjectRef::new(namespace))?;
    super_namespace.labels().get(TENANT_LABEL).cloned()
}

/// Queues a changed (or deleted) super volume for the tenant whose claim it is bound to.
pub fn enqueue(syncer: &Syncer, volume: &PersistentVolume) {
    if let Some(key) = owner(syncer, volume) {
        syncer.queue.add(&key, Item::Volume(volume.name_any()));
    }
}

/// Every super volume bound to a claim of `tenant`, as items (for the patrol).
pub fn items(syncer: &Syncer, tenant: &Tenant) -> Vec<Item> {
    syncer
        .super_volumes
        .state()
        .iter()
        .filter(|v| owner(syncer, v).as_deref() == Some(tenant.key.as_str()))
        .map(|v| Item::Volume(v.name_any()))
        .collect()
}

/// The tenant PersistentVolume for super volume `name`: `None` when there should be none.
fn wanted(syncer: &Syncer, tenant: &Tenant, name: &str) -> Option<Value> {
    let volume = syncer.super_volumes.get(&ObjectRef::new(name))?;
    if owner(syncer, &volume).as_deref() != Some(tenant.key.as_str()) {
        return None;
    }
    let claim_ref = volume.spec.as_ref()?.claim_ref.as_ref()?;
    let (super_namespace, claim_name) = (claim_ref.namespace.as_deref()?, claim_ref.name.as_deref()?);
    // The super claim must be ours and bound to this volume, and its tenant claim must still be there.
    let claims = syncer.find_kind("persistentvolumeclaims")?;
    let super_claim = syncer.super_object(claims, super_namespace, claim_name)?;
    let annotations = super_claim.annotations();
    if super_claim.labels().get(TENANT_LABEL) != Some(&tenant.key)
        || super_claim.data["spec"]["volumeName"] != name
        || claim_ref.uid.as_deref().is_some_and(|uid| super_claim.metadata.uid.as_deref() != Some(uid))
    {
        return None;
    }
    let (namespace, claim) = (annotations.get(TENANT_NAMESPACE)?, annotations.get(TENANT_NAME)?);
    let tenant_claim = tenant.cache(claims).get(namespace, claim)?;
    if tenant_claim.metadata.uid.as_ref() != annotations.get(TENANT_UID) {
        return None;
    }
    let mut spec = serde_json::to_value(volume.spec.as_ref()?).ok()?;
    spec["claimRef"] = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "namespace": namespace, "name": claim, "uid": tenant_claim.metadata.uid,
    });
    let phase = volume.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_else(|| "Bound".into());
    Some(json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {FROM_SUPER_LABEL: "true"}},
        "spec": spec,
        "status": {"phase": phase},
    }))
}

pub async fn reconcile(syncer: &Syncer, tenant: &Tenant, name: &str) -> kube::Result<Done> {
    let api: Api<PersistentVolume> = Api::all(tenant.client.clone());
    let existing = api.get_opt(name).await?;
    let copied =
        existing.as_ref().is_some_and(|v| v.labels().get(FROM_SUPER_LABEL).map(String::as_str) == Some("true"));
    let mut done = Done::default();
    let Some(wanted) = wanted(syncer, tenant, name) else {
        if copied {
            // Released first, as the binder releases a volume whose claim is gone, so that the tenant's
            // pv-protection lets the copy go.
            let released = json!({"status": {"phase": "Released"}});
            let patched = api.patch_status(name, &PatchParams::default(), &Patch::Merge(&released)).await;
            nest_client::done_unless_gone_or_changed(patched)?;
            nest_client::done_unless_gone_or_changed(api.delete(name, &DeleteParams::default()).await)?;
            done.up += 1;
        }
        return Ok(done);
    };
    let have = match existing {
        None => {
            let mut create = wanted.clone();
            create.as_object_mut().expect("an object").remove("status");
            let volume: PersistentVolume = serde_json::from_value(create).map_err(kube::Error::SerdeError)?;
            match api.create(&PostParams::default(), &volume).await {
                Ok(created) => {
                    done.up += 1;
                    serde_json::to_value(created).map_err(kube::Error::SerdeError)?
                }
                // Someone else's of that name: it stays theirs.
                Err(kube::Error::Api(status)) if status.code == 409 => return Ok(done),
                Err(error) => return Err(error),
            }
        }
        Some(_) if !copied => {
            tracing::warn!(tenant = %tenant.key, volume = %name, "a tenant PersistentVolume not made by the syncer is in the way");
            return Ok(done);
        }
        Some(existing) => serde_json::to_value(existing).map_err(kube::Error::SerdeError)?,
    };
    if !nest_core::json::covers(&have["spec"], &wanted["spec"]) {
        let patch = json!({"spec": wanted["spec"]});
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        done.up += 1;
    }
    if have["status"]["phase"] != wanted["status"]["phase"] {
        let patch = json!({"status": wanted["status"]});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        done.up += 1;
    }
    Ok(done)
}
