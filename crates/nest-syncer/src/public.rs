//! What the super cluster shares with every tenant: StorageClasses, PriorityClasses and CustomResourceDefinitions
//! labelled `tenancy.nest.dev/public: "true"` are copied into each tenant as they are (labelled
//! `tenancy.nest.dev/from-super`), kept equal, and removed from the tenants when they stop being public.

use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use kube::runtime::reflector::ObjectRef;
use serde_json::json;

use crate::Syncer;
use crate::names::FROM_SUPER_LABEL;
use crate::sync::Done;
use crate::tenants::Tenant;

pub async fn reconcile(syncer: &Syncer, tenant: &Tenant, kind: usize, name: &str) -> kube::Result<Done> {
    let Some(public) = syncer.public.get(kind) else { return Ok(Done::default()) };
    let api: Api<DynamicObject> = Api::all_with(tenant.client.clone(), &public.resource);
    let shared = public.objects.get(&ObjectRef::new_with(name, public.resource.clone()));
    let existing = api.get_opt(name).await?;
    let copied = |object: &DynamicObject| {
        object.metadata.labels.as_ref().and_then(|l| l.get(FROM_SUPER_LABEL)).map(String::as_str) == Some("true")
    };
    let Some(shared) = shared else {
        // No longer public: the copies go (objects the tenant made itself stay).
        if existing.as_ref().is_some_and(copied) {
            nest_client::done_unless_gone_or_changed(api.delete(name, &DeleteParams::default()).await)?;
            return Ok(Done { up: 1, ..Default::default() });
        }
        return Ok(Done::default());
    };
    let shared = serde_json::to_value(shared.as_ref()).map_err(kube::Error::SerdeError)?;
    let mut wanted = json!({
        "apiVersion": shared["apiVersion"], "kind": shared["kind"],
        "metadata": {"name": name, "labels": shared["metadata"]["labels"], "annotations": shared["metadata"]["annotations"]},
    });
    wanted["metadata"]["labels"][FROM_SUPER_LABEL] = json!("true");
    for (field, value) in shared.as_object().into_iter().flatten() {
        if !["apiVersion", "kind", "metadata", "status"].contains(&field.as_str()) {
            wanted[field] = value.clone();
        }
    }
    match existing {
        None => {
            let object: DynamicObject = serde_json::from_value(wanted).map_err(kube::Error::SerdeError)?;
            match api.create(&PostParams::default(), &object).await {
                Ok(_) => Ok(Done { up: 1, ..Default::default() }),
                Err(kube::Error::Api(status)) if status.code == 409 => Ok(Done::default()),
                Err(error) => Err(error),
            }
        }
        Some(existing) if copied(&existing) => {
            let have = serde_json::to_value(&existing).map_err(kube::Error::SerdeError)?;
            let same = wanted.as_object().into_iter().flatten().all(|(field, value)| {
                field == "metadata"
                    || field == "apiVersion"
                    || field == "kind"
                    || nest_core::json::covers(&have[field], value)
            });
            if same {
                return Ok(Done::default());
            }
            wanted["metadata"]["resourceVersion"] = have["metadata"]["resourceVersion"].clone();
            let object: DynamicObject = serde_json::from_value(wanted).map_err(kube::Error::SerdeError)?;
            api.replace(name, &PostParams::default(), &object).await?;
            Ok(Done { up: 1, ..Default::default() })
        }
        // The tenant made one of that name itself: it keeps it.
        Some(_) => Ok(Done::default()),
    }
}

/// Every public object, as items for one tenant.
pub fn items(syncer: &Syncer) -> Vec<crate::Item> {
    let mut items = Vec::new();
    for (kind, public) in syncer.public.iter().enumerate() {
        for object in public.objects.state() {
            if let Some(name) = object.metadata.name.clone() {
                items.push(crate::Item::Public { kind, name });
            }
        }
    }
    items
}
