//! The Cluster controller (the part of Cluster API's core nest needs) and the NestedCluster controller.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::{
    Context, Result, condition, keep_transitions, look_again, names_of, owner, paused, report_paused, set_status,
};
use crate::api::{ApiEndpoint, CLUSTER_NAME_LABEL, Cluster, NestedCluster, NestedControlPlane};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

/// The finalizer a Cluster holds until what it references is gone.
pub const CLUSTER_FINALIZER: &str = "cluster.cluster.x-k8s.io";

/// The NestedControlPlane a Cluster references, if that is what it references.
fn control_plane_of(cluster: &Cluster) -> Option<String> {
    let reference = cluster.spec.control_plane_ref.as_ref()?;
    (reference.api_group == crate::api::CONTROL_PLANE_GROUP && reference.kind == "NestedControlPlane")
        .then(|| reference.name.clone())
}

fn infrastructure_of(cluster: &Cluster) -> Option<String> {
    let reference = cluster.spec.infrastructure_ref.as_ref()?;
    (reference.api_group == crate::api::INFRASTRUCTURE_GROUP && reference.kind == "NestedCluster")
        .then(|| reference.name.clone())
}

/// Labels `object` with the cluster's name and makes the Cluster one of its owners, as Cluster API's core does.
async fn adopt<K>(api: &Api<K>, object: &K, cluster: &Cluster) -> Result<()>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let meta = object.meta();
    let labelled = meta.labels.as_ref().and_then(|l| l.get(CLUSTER_NAME_LABEL)) == Some(&cluster.name_any());
    let uid = cluster.uid().unwrap_or_default();
    let owned = meta.owner_references.iter().flatten().any(|o| o.uid == uid);
    if labelled && owned {
        return Ok(());
    }
    let mut owners = meta.owner_references.clone().unwrap_or_default();
    if !owned {
        owners.push(OwnerReference { controller: Some(false), block_owner_deletion: Some(true), ..owner(cluster) });
    }
    let patch = json!({"metadata": {"labels": {CLUSTER_NAME_LABEL: cluster.name_any()}, "ownerReferences": owners}});
    api.patch(&meta.name.clone().unwrap_or_default(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

/// Cluster API's core Cluster controller, the part nest needs: adopt the control plane and infrastructure, copy the
/// endpoint, report the phase and conditions; on deletion, remove the control plane, then the infrastructure, then
/// the finalizer.
pub(super) async fn reconcile_cluster(cluster: Arc<Cluster>, context: Arc<Context>) -> Result<Action> {
    let client = &context.client;
    let namespace = cluster.namespace().unwrap_or_default();
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), &namespace);
    let planes: Api<NestedControlPlane> = Api::namespaced(client.clone(), &namespace);
    let infrastructures: Api<NestedCluster> = Api::namespaced(client.clone(), &namespace);
    let generation = cluster.metadata.generation;
    let plane = match control_plane_of(&cluster) {
        Some(name) => planes.get_opt(&name).await?,
        None => None,
    };
    let infrastructure = match infrastructure_of(&cluster) {
        Some(name) => infrastructures.get_opt(&name).await?,
        None => None,
    };

    if cluster.metadata.deletion_timestamp.is_some() {
        let status = json!({"status": {"phase": "Deleting"}});
        set_status(&clusters, &*cluster, &status).await?;
        // The control plane first (with everything it made), then the infrastructure.
        let foreground = kube::api::DeleteParams::foreground();
        if let Some(plane) = &plane {
            if plane.metadata.deletion_timestamp.is_none() {
                planes.delete(&plane.name_any(), &foreground).await?;
            }
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        if let Some(infrastructure) = &infrastructure {
            if infrastructure.metadata.deletion_timestamp.is_none() {
                infrastructures.delete(&infrastructure.name_any(), &foreground).await?;
            }
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        let finalizers: Vec<&String> = cluster.finalizers().iter().filter(|f| *f != CLUSTER_FINALIZER).collect();
        let patch = json!({"metadata": {"finalizers": finalizers}});
        clusters.patch(&cluster.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
        return Ok(Action::await_change());
    }
    if !cluster.finalizers().iter().any(|f| f == CLUSTER_FINALIZER) {
        let mut finalizers = cluster.finalizers().to_vec();
        finalizers.push(CLUSTER_FINALIZER.into());
        let patch = json!({"metadata": {"finalizers": finalizers}});
        clusters.patch(&cluster.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }
    let previous = cluster.status.clone().unwrap_or_default();
    if cluster.spec.paused == Some(true) || paused(&*cluster) {
        let conditions = keep_transitions(
            previous.conditions.as_ref(),
            vec![condition("Paused", true, "Paused", "reconciliation is paused", generation)],
        );
        let status = json!({"status": {"conditions": conditions}});
        set_status(&clusters, &*cluster, &status).await?;
        return Ok(Action::await_change());
    }
    if let Some(plane) = &plane {
        adopt(&planes, plane, &cluster).await?;
    }
    if let Some(infrastructure) = &infrastructure {
        adopt(&infrastructures, infrastructure, &cluster).await?;
    }

    // The endpoint: the control plane's, else the infrastructure's.
    let endpoint = plane
        .as_ref()
        .and_then(|p| p.spec.control_plane_endpoint.clone())
        .or_else(|| infrastructure.as_ref().and_then(|i| i.spec.control_plane_endpoint.clone()))
        .filter(|e| !e.is_zero());
    if let Some(endpoint) = endpoint
        && cluster.spec.control_plane_endpoint.as_ref().is_none_or(ApiEndpoint::is_zero)
    {
        let patch = json!({"spec": {"controlPlaneEndpoint": endpoint}});
        clusters.patch(&cluster.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }

    let provisioned = infrastructure.as_ref().and_then(|i| i.status.as_ref()).is_some_and(|s| s.ready);
    let initialized = plane.as_ref().and_then(|p| p.status.as_ref()).is_some_and(|s| s.initialized);
    let plane_ready = plane.as_ref().and_then(|p| p.status.as_ref()).is_some_and(|s| s.ready);
    let phase = match (infrastructure.is_some() || plane.is_some(), provisioned, initialized) {
        (false, _, _) => "Pending",
        (true, true, true) => "Provisioned",
        _ => "Provisioning",
    };
    let missing = |what: &str| format!("the {what} has not been found");
    let conditions = keep_transitions(
        previous.conditions.as_ref(),
        vec![
            if infrastructure.is_none() {
                condition("InfrastructureReady", false, "NotFound", missing("infrastructure"), generation)
            } else {
                condition(
                    "InfrastructureReady",
                    provisioned,
                    if provisioned { "Ready" } else { "Provisioning" },
                    "",
                    generation,
                )
            },
            if plane.is_none() {
                condition("ControlPlaneInitialized", false, "NotFound", missing("control plane"), generation)
            } else {
                condition(
                    "ControlPlaneInitialized",
                    initialized,
                    if initialized { "Initialized" } else { "WaitingForAPIServer" },
                    "",
                    generation,
                )
            },
            condition(
                "ControlPlaneAvailable",
                plane_ready,
                if plane_ready { "Available" } else { "NotReady" },
                "",
                generation,
            ),
            condition("Paused", false, "NotPaused", "", generation),
        ],
    );
    let status = json!({"status": {
        "phase": phase,
        "initialization": {"infrastructureProvisioned": provisioned, "controlPlaneInitialized": initialized},
        "conditions": conditions,
        "observedGeneration": generation,
    }});
    set_status(&clusters, &*cluster, &status).await?;
    Ok(look_again(phase == "Provisioned" && plane_ready))
}

/// The finalizer a NestedCluster holds until its control plane is gone: the infrastructure outlives the control plane
/// that runs on it.
pub const NESTED_CLUSTER_FINALIZER: &str = "nestedcluster.infrastructure.cluster.x-k8s.io";

/// The NestedCluster: its endpoint is the control plane's (unless set), and it is ready when the control plane is.
pub(super) async fn reconcile_nested_cluster(
    infrastructure: Arc<NestedCluster>,
    context: Arc<Context>,
) -> Result<Action> {
    let client = &context.client;
    let names = names_of(&*infrastructure);
    let api: Api<NestedCluster> = Api::namespaced(client.clone(), &names.namespace);
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), &names.namespace);
    let planes: Api<NestedControlPlane> = Api::namespaced(client.clone(), &names.namespace);
    // The control plane of its Cluster, else the one of the same cluster name.
    let cluster = clusters.get_opt(&names.cluster).await?;
    let from_cluster = cluster.as_ref().and_then(control_plane_of);
    let plane = planes.get_opt(&from_cluster.unwrap_or_else(|| names.cluster.clone())).await?;
    let finalizers = infrastructure.finalizers();
    if infrastructure.metadata.deletion_timestamp.is_some() {
        if !finalizers.iter().any(|f| f == NESTED_CLUSTER_FINALIZER) {
            return Ok(Action::await_change());
        }
        if plane.is_some() {
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        let kept: Vec<&String> = finalizers.iter().filter(|f| *f != NESTED_CLUSTER_FINALIZER).collect();
        let patch = json!({"metadata": {"finalizers": kept}});
        api.patch(&infrastructure.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
        return Ok(Action::await_change());
    }
    if paused(&*infrastructure) || cluster.as_ref().is_some_and(|c| c.spec.paused == Some(true) || paused(c)) {
        let conditions = infrastructure.status.as_ref().and_then(|s| s.conditions.as_ref());
        report_paused(&api, &*infrastructure, conditions).await?;
        return Ok(Action::await_change());
    }
    if !finalizers.iter().any(|f| f == NESTED_CLUSTER_FINALIZER) {
        let mut all = finalizers.to_vec();
        all.push(NESTED_CLUSTER_FINALIZER.into());
        let patch = json!({"metadata": {"finalizers": all}});
        api.patch(&infrastructure.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }
    let ready = plane.as_ref().and_then(|p| p.status.as_ref()).is_some_and(|s| s.ready);
    let endpoint = plane.as_ref().and_then(|p| p.spec.control_plane_endpoint.clone()).filter(|e| !e.is_zero());
    if let Some(endpoint) = endpoint
        && infrastructure.spec.control_plane_endpoint.as_ref().is_none_or(ApiEndpoint::is_zero)
    {
        let patch = json!({"spec": {"controlPlaneEndpoint": endpoint}});
        api.patch(&infrastructure.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }
    let generation = infrastructure.metadata.generation;
    let previous = infrastructure.status.clone().unwrap_or_default();
    let conditions = keep_transitions(
        previous.conditions.as_ref(),
        vec![
            condition("Ready", ready, if ready { "Ready" } else { "WaitingForControlPlane" }, "", generation),
            condition("Paused", false, "NotPaused", "", generation),
        ],
    );
    let status = json!({"status": {
        "ready": ready, "initialization": {"provisioned": ready}, "conditions": conditions,
        "observedGeneration": generation,
    }});
    set_status(&api, &*infrastructure, &status).await?;
    Ok(look_again(ready))
}
