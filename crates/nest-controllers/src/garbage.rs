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
//! Like kube-controller-manager, which keeps a dependency graph fed by informers on every resource, the collector
//! keeps the metadata of every object in a reflector per resource, fed by a metadata-only watch
//! ([`kube::runtime::metadata_watcher`]). It sweeps that graph in memory whenever a watch reports a change (changes
//! arriving together are swept once), and asks the API server nothing while nothing changes. The served resources are
//! discovered again when a CustomResourceDefinition changes (a watch on them too), and every [`REDISCOVER`] besides.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::core::{GroupVersionKind, PartialObjectMeta};
use kube::discovery::{ApiResource, Discovery, Scope, verbs};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::Notify;

/// How long the collector lets changes gather before it sweeps, so that a burst of them is swept once.
pub const SETTLE: Duration = Duration::from_millis(100);
/// How often the served resources are discovered again even when no CustomResourceDefinition changed.
pub const REDISCOVER: Duration = Duration::from_secs(300);

const FOREGROUND: &str = "foregroundDeletion";
const ORPHAN: &str = "orphan";

/// One object's metadata, as the graph holds it.
type Meta = PartialObjectMeta<DynamicObject>;

/// One object seen in a sweep.
struct Seen {
    resource: ApiResource,
    namespaced: bool,
    object: Arc<Meta>,
}

/// A resource the collector watches: the metadata of all its objects, kept by a task of its own.
struct Watched {
    resource: ApiResource,
    namespaced: bool,
    store: Store<Meta>,
    /// Whether the first list has been read (a sweep over a half-filled graph could take present owners for gone).
    ready: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts watching the metadata of `resource`'s objects (a metadata-only watch) into a store, calling `changed` on
/// every event.
fn watch_metadata(client: &Client, resource: ApiResource, namespaced: bool, changed: Arc<Notify>) -> Watched {
    let writer = reflector::store::Writer::<Meta>::new(resource.clone());
    let store = writer.as_reader();
    let ready = Arc::new(AtomicBool::new(false));
    let ready_flag = ready.clone();
    let api = Api::<Meta>::all_with(client.clone(), &resource);
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default())).default_backoff();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::InitDone) => {
                    ready_flag.store(true, Ordering::Release);
                    changed.notify_one();
                }
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => changed.notify_one(),
                Ok(_) => {}
                Err(error) => tracing::debug!(%error, "garbage collector: watching"),
            }
        }
    });
    Watched { resource, namespaced, store, ready, task }
}

/// The resources to collect in: every one that can be listed, watched and deleted (the Events `events.k8s.io`
/// serves again are left to `v1`).
fn collectable(discovery: &Discovery) -> Vec<(ApiResource, bool)> {
    let mut found = Vec::new();
    for group in discovery.groups() {
        for (resource, capabilities) in group.recommended_resources() {
            let can = |verb| capabilities.supports_operation(verb);
            if !can(verbs::LIST) || !can(verbs::WATCH) || !can(verbs::DELETE) || resource.group == "events.k8s.io" {
                continue;
            }
            found.push((resource, capabilities.scope == Scope::Namespaced));
        }
    }
    found
}

/// Runs the collector until the task is dropped.
pub async fn run(client: Client) {
    let changed = Arc::new(Notify::new());
    let crds_changed = Arc::new(Notify::new());
    // CustomResourceDefinitions come and go: each change means the served resources may have changed.
    let crd_resource = ApiResource::erase::<CustomResourceDefinition>(&());
    let _crds = watch_metadata(&client, crd_resource, false, crds_changed.clone());
    let mut watched: HashMap<(String, String, String), Watched> = HashMap::new();
    let mut discovery: Option<Discovery> = None;
    let mut rediscover = true;
    // After a failed discovery or sweep, the next try comes after this long, changes or not (doubling to a minute).
    let mut retry: Option<Duration> = None;
    loop {
        if rediscover {
            match Discovery::new(client.clone()).run().await {
                Ok(found) => {
                    let wanted = collectable(&found);
                    let keys: HashSet<_> = wanted.iter().map(|(r, _)| key(r)).collect();
                    watched.retain(|k, _| keys.contains(k));
                    for (resource, namespaced) in wanted {
                        let changed = changed.clone();
                        watched
                            .entry(key(&resource))
                            .or_insert_with(|| watch_metadata(&client, resource, namespaced, changed));
                    }
                    discovery = Some(found);
                    rediscover = false;
                }
                Err(error) => tracing::debug!(%error, "garbage collector: discovery"),
            }
        }
        let mut failed = rediscover;
        if let Some(found) = &discovery
            && watched.values().all(|w| w.ready.load(Ordering::Acquire))
            && let Err(error) = sweep(&client, found, &watched).await
        {
            tracing::debug!(%error, "garbage collector");
            failed = true;
        }
        retry = failed.then(|| retry.map_or(Duration::from_secs(1), |r| (r * 2).min(Duration::from_secs(60))));
        tokio::select! {
            () = changed.notified() => {}
            () = tokio::time::sleep(retry.unwrap_or(REDISCOVER)), if retry.is_some() => {}
            () = crds_changed.notified() => rediscover = true,
            () = tokio::time::sleep(REDISCOVER) => rediscover = true,
        }
        // Let the rest of a burst arrive; its notifications leave one permit, swept next.
        tokio::time::sleep(SETTLE).await;
        if rediscover {
            // A CRD that just became Established is served a moment later.
            tokio::time::sleep(SETTLE).await;
        }
    }
}

fn key(resource: &ApiResource) -> (String, String, String) {
    (resource.group.clone(), resource.version.clone(), resource.plural.clone())
}

async fn sweep(
    client: &Client,
    discovery: &Discovery,
    watched: &HashMap<(String, String, String), Watched>,
) -> kube::Result<()> {
    let mut objects = Vec::new();
    for w in watched.values() {
        objects.extend(w.store.state().into_iter().map(|object| Seen {
            resource: w.resource.clone(),
            namespaced: w.namespaced,
            object,
        }));
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
            nest_client::done_unless_gone_or_changed(
                api_for(client, seen).delete(&seen.object.name_any(), &delete).await,
            )?;
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
                nest_client::done_unless_gone_or_changed(
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
                    nest_client::done_unless_gone_or_changed(
                        api_for(client, dependent).delete(&name, &DeleteParams::foreground()).await,
                    )?;
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
    // A 404 or 409 means the object changed or went meanwhile; the next sweep sees the new state.
    nest_client::done_unless_gone_or_changed(
        api_for(client, seen).patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await,
    )
    .map(drop)
}
