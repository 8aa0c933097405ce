//! The garbage collector, after kube-controller-manager's (`pkg/controller/garbagecollector`, 1.33), for every
//! resource the server serves, custom ones included:
//!
//! - an object all of whose owners (`ownerReferences`) are gone is deleted (background propagation: its own
//!   dependents follow on later passes); owners that are gone are checked with a live read by name and uid before
//!   anything is deleted, so a list that raced with a creation never removes a live object's dependents;
//! - an owner being deleted with the `foregroundDeletion` finalizer has its dependents deleted (in the foreground
//!   too), and keeps existing until no dependent with `blockOwnerDeletion` is left;
//! - an owner being deleted with the `orphan` finalizer has its reference removed from every dependent, which stay.
//!
//! Where kube-controller-manager keeps a dependency graph fed by informers on every resource, this collector sweeps:
//! every [`SWEEP`] it lists each resource (from the API server's watch cache) and acts on what it finds.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, Preconditions};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiResource, Discovery, Scope, verbs};
use kube::{Client, ResourceExt};
use serde_json::json;

/// How often the collector looks.
pub const SWEEP: Duration = Duration::from_secs(1);
/// How often the served resources are discovered again.
const REDISCOVER: Duration = Duration::from_secs(30);

const FOREGROUND: &str = "foregroundDeletion";
const ORPHAN: &str = "orphan";

/// One object seen in a sweep.
struct Seen {
    resource: ApiResource,
    namespaced: bool,
    object: DynamicObject,
}

/// The CustomResourceDefinitions as last seen (name and resourceVersion, which also moves when one becomes
/// Established), so that a new or changed one is discovered at
/// once rather than at the next [`REDISCOVER`]: a custom resource created with foreground deletion right after its
/// CRD must not wait half a minute.
async fn crd_versions(client: &Client) -> Option<Vec<(String, String)>> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds = Api::<CustomResourceDefinition>::all(client.clone()).list_metadata(&ListParams::default()).await.ok()?;
    let mut versions: Vec<(String, String)> =
        crds.items.iter().map(|c| (c.name_any(), c.resource_version().unwrap_or_default())).collect();
    versions.sort();
    Some(versions)
}

/// Runs the collector until the task is dropped.
pub async fn run(client: Client) {
    let mut discovery: Option<(Discovery, Instant)> = None;
    let mut known_crds: Option<Vec<(String, String)>> = None;
    loop {
        let crds = crd_versions(&client).await;
        let crds_changed = crds.is_some() && crds != known_crds;
        if crds_changed || discovery.as_ref().is_none_or(|(_, at)| at.elapsed() > REDISCOVER) {
            match Discovery::new(client.clone()).run().await {
                Ok(found) => {
                    discovery = Some((found, Instant::now()));
                    known_crds = crds;
                }
                Err(error) => tracing::debug!(%error, "garbage collector: discovery"),
            }
        }
        if let Some((found, _)) = &discovery
            && let Err(error) = sweep(&client, found).await
        {
            tracing::debug!(%error, "garbage collector");
        }
        tokio::time::sleep(SWEEP).await;
    }
}

async fn sweep(client: &Client, discovery: &Discovery) -> kube::Result<()> {
    let mut objects = Vec::new();
    for group in discovery.groups() {
        for (resource, capabilities) in group.recommended_resources() {
            if !capabilities.supports_operation(verbs::LIST) || !capabilities.supports_operation(verbs::DELETE) {
                continue;
            }
            // events.k8s.io serves the core Events again.
            if resource.group == "events.k8s.io" {
                continue;
            }
            let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
            let Ok(list) = api.list(&ListParams::default()).await else { continue };
            let namespaced = capabilities.scope == Scope::Namespaced;
            objects.extend(list.items.into_iter().map(|object| Seen {
                resource: resource.clone(),
                namespaced,
                object,
            }));
        }
    }
    let uids: HashSet<String> = objects.iter().filter_map(|s| s.object.uid()).collect();
    let mut dependents: HashMap<String, Vec<&Seen>> = HashMap::new();
    for seen in &objects {
        for owner in seen.object.owner_references() {
            dependents.entry(owner.uid.clone()).or_default().push(seen);
        }
    }

    for seen in &objects {
        let owners = seen.object.owner_references();
        // Dependents whose owners are all gone.
        if !owners.is_empty()
            && seen.object.metadata.deletion_timestamp.is_none()
            && owners.iter().all(|o| !uids.contains(&o.uid))
            && all_absent(client, discovery, seen, owners).await?
        {
            let delete = DeleteParams {
                preconditions: Some(Preconditions { uid: seen.object.uid(), resource_version: None }),
                ..DeleteParams::background()
            };
            ignore_gone(api_for(client, seen).delete(&seen.object.name_any(), &delete).await)?;
            continue;
        }
        // Owners being deleted that wait on their dependents.
        let finalizers = seen.object.finalizers();
        if seen.object.metadata.deletion_timestamp.is_none() {
            continue;
        }
        let uid = seen.object.uid().unwrap_or_default();
        let mine = dependents.get(&uid).cloned().unwrap_or_default();
        if finalizers.iter().any(|f| f == ORPHAN) {
            for dependent in &mine {
                let remaining: Vec<OwnerReference> =
                    dependent.object.owner_references().iter().filter(|o| o.uid != uid).cloned().collect();
                let patch = json!({"metadata": {"ownerReferences": remaining}});
                let name = dependent.object.name_any();
                ignore_gone(
                    api_for(client, dependent).patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await,
                )?;
            }
            remove_finalizer(client, seen, ORPHAN).await?;
        } else if finalizers.iter().any(|f| f == FOREGROUND) {
            let mut blocking = 0;
            for dependent in &mine {
                let blocks = dependent
                    .object
                    .owner_references()
                    .iter()
                    .any(|o| o.uid == uid && o.block_owner_deletion == Some(true));
                if blocks {
                    blocking += 1;
                }
                if dependent.object.metadata.deletion_timestamp.is_none() {
                    let name = dependent.object.name_any();
                    ignore_gone(api_for(client, dependent).delete(&name, &DeleteParams::foreground()).await)?;
                }
            }
            if blocking == 0 {
                remove_finalizer(client, seen, FOREGROUND).await?;
            }
        }
    }
    Ok(())
}

fn api_for(client: &Client, seen: &Seen) -> Api<DynamicObject> {
    match seen.object.namespace().filter(|_| seen.namespaced) {
        Some(namespace) => Api::namespaced_with(client.clone(), &namespace, &seen.resource),
        None => Api::all_with(client.clone(), &seen.resource),
    }
}

/// Whether every owner is really gone: a live read by name, compared by uid (an owner of an unknown kind counts as
/// present, so nothing is deleted on a guess).
async fn all_absent(
    client: &Client,
    discovery: &Discovery,
    seen: &Seen,
    owners: &[OwnerReference],
) -> kube::Result<bool> {
    for owner in owners {
        let (group, version) = owner.api_version.rsplit_once('/').unwrap_or(("", &owner.api_version));
        let gvk = GroupVersionKind::gvk(group, version, &owner.kind);
        let Some((resource, capabilities)) = discovery.resolve_gvk(&gvk) else { return Ok(false) };
        let api: Api<DynamicObject> = match (capabilities.scope, seen.object.namespace()) {
            (Scope::Namespaced, Some(namespace)) => Api::namespaced_with(client.clone(), &namespace, &resource),
            (Scope::Namespaced, None) => return Ok(false),
            (Scope::Cluster, _) => Api::all_with(client.clone(), &resource),
        };
        if api.get_opt(&owner.name).await?.is_some_and(|live| live.uid().as_deref() == Some(owner.uid.as_str())) {
            return Ok(false);
        }
    }
    Ok(true)
}

async fn remove_finalizer(client: &Client, seen: &Seen, finalizer: &str) -> kube::Result<()> {
    let finalizers: Vec<&String> = seen.object.finalizers().iter().filter(|f| *f != finalizer).collect();
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": seen.object.resource_version()}});
    let name = seen.object.name_any();
    ignore_gone(api_for(client, seen).patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await)
}

/// A 404 or 409 means the object changed or went meanwhile; the next sweep sees the new state.
fn ignore_gone<T>(result: kube::Result<T>) -> kube::Result<()> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
        Err(error) => Err(error),
    }
}
