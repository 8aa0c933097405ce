//! Tenants: found by watching the management cluster's NestedControlPlanes and Clusters, and taken through their
//! [`lifecycle`]: started once their control plane is ready (through the `<cluster>-kubeconfig`
//! Secret), synced once their caches are full, kept while they exist — also while their API server is down, when
//! they are unhealthy and their watches retry — and cleaned up when they are deleted: every super namespace labelled
//! with the tenant's key goes, with everything in it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use nest_capn_api::{CLUSTER_NAME_LABEL, Cluster, NestedControlPlane};
use tokio::task::JoinHandle;

use crate::kinds::KindId;
use crate::lifecycle::{self, Action, Event};
use crate::names::{self, TENANT_LABEL};
use crate::{Item, Syncer};

/// One tenant being synced.
pub struct Tenant {
    /// The cluster key (see [`names::cluster_key`]).
    pub key: String,
    /// The Cluster's namespace and name in the super cluster.
    pub namespace: String,
    pub cluster: String,
    /// The NestedControlPlane's name.
    pub plane: String,
    pub client: Client,
    /// Where the tenant's API server is reached from the super cluster's pods.
    pub api_server: (String, i32),
    /// The port of the tenant's kubelet endpoint ([`crate::kubelet`]), on the syncer's kubelet address.
    pub kubelet_port: Option<u16>,
    /// The tenant's objects, one cache per synced kind ([`Tenant::cache`]).
    caches: Vec<crate::Cache>,
    pub namespaces: Store<Namespace>,
    /// The Pod Security level its super namespaces enforce (annotation [`POD_SECURITY_ANNOTATION`], else the
    /// syncer's `--pod-security-level`); followed when the platform admin changes it.
    pub pod_security: std::sync::RwLock<PodSecurityLevel>,
    /// What it may ask of the management cluster beyond Pod Security: the syncer's policy with its Cluster's
    /// `tenancy.nest.dev/allow-*` annotations ([`crate::policy`]).
    pub policy: std::sync::RwLock<crate::policy::Policy>,
    /// Super objects the syncer let through its caps and quota and created, which its cache may not show yet, by
    /// kind and super namespace and name: they count until it does ([`crate::sync`]).
    pub reserved: std::sync::Mutex<std::collections::HashMap<(KindId, String, String), Reservation>>,
    tasks: std::sync::Mutex<Vec<JoinHandle<()>>>,
}

/// What a super object just created counts for, until the cache shows it.
#[derive(Clone, Debug)]
pub struct Reservation {
    /// Bytes of its JSON.
    pub size: u64,
    /// What it takes of the tenant's compute quota.
    pub usage: crate::compute::Usage,
    /// When it was let through.
    pub at: std::time::Instant,
}

impl Tenant {
    /// The tenant's objects of synced kind `id`.
    pub fn cache(&self, id: KindId) -> &crate::Cache {
        &self.caches[id.index()]
    }
}

#[cfg(test)]
impl Tenant {
    /// Tenant `key` of `syncer` with empty caches (filled by hand through the writers returned, one per synced
    /// kind), the syncer's policy, and a client that reaches nothing, for unit tests of what the syncer decides.
    pub(crate) fn for_tests(
        syncer: &Syncer,
        key: &str,
        client: Client,
    ) -> (Tenant, Vec<reflector::store::Writer<DynamicObject>>) {
        let mut writers = Vec::new();
        let mut caches = Vec::new();
        for id in syncer.kind_ids() {
            let resource = syncer.kind(id).resource.clone();
            let writer = reflector::store::Writer::<DynamicObject>::new(resource.clone());
            caches.push(crate::Cache::new(writer.as_reader(), resource));
            writers.push(writer);
        }
        let tenant = Tenant {
            key: key.to_string(),
            namespace: "default".into(),
            cluster: "tenant".into(),
            plane: "tenant".into(),
            client,
            api_server: ("10.0.0.9".into(), 6443),
            kubelet_port: None,
            caches,
            namespaces: reflector::store().0,
            pod_security: std::sync::RwLock::new(PodSecurityLevel::Restricted),
            policy: std::sync::RwLock::new(syncer.options.policy.clone()),
            reserved: Default::default(),
            tasks: Default::default(),
        };
        (tenant, writers)
    }
}

impl Drop for Tenant {
    fn drop(&mut self) {
        for task in self.tasks.lock().expect("the tasks lock").drain(..) {
            task.abort();
        }
    }
}

/// The annotation on a NestedControlPlane (or its Cluster) giving its tenant a larger share of the syncer's queue:
/// a tenant of weight 3 gets three items per turn to another's one.
pub const WEIGHT_ANNOTATION: &str = "tenancy.nest.dev/weight";

/// The annotation on a Cluster (or its NestedControlPlane) choosing the Pod Security level its tenant's super
/// namespaces enforce: `privileged`, `baseline` or `restricted`. Only the platform admin writes these objects; a
/// value that names no level is taken as `restricted`.
pub use nest_capn_api::POD_SECURITY_ANNOTATION;

/// A level of the Pod Security Standards, as its namespace label value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodSecurityLevel {
    Privileged,
    Baseline,
    Restricted,
}

impl PodSecurityLevel {
    /// The level `text` names, if any.
    pub fn parse(text: &str) -> Option<PodSecurityLevel> {
        match text {
            "privileged" => Some(PodSecurityLevel::Privileged),
            "baseline" => Some(PodSecurityLevel::Baseline),
            "restricted" => Some(PodSecurityLevel::Restricted),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            PodSecurityLevel::Privileged => "privileged",
            PodSecurityLevel::Baseline => "baseline",
            PodSecurityLevel::Restricted => "restricted",
        }
    }
}

/// A control plane found in the super cluster.
struct Found {
    key: String,
    plane: String,
    /// The tenant's share of the work queue (annotation [`WEIGHT_ANNOTATION`], default 1).
    weight: u32,
    /// The annotation [`POD_SECURITY_ANNOTATION`], if set.
    pod_security: Option<String>,
    /// The annotations of its control plane, and of its Cluster over those: the platform admin's word on it.
    annotations: BTreeMap<String, String>,
    namespace: String,
    cluster: String,
    /// Ready, with an endpoint.
    endpoint: Option<(String, i32)>,
    gone: bool,
}

/// How often tenants are looked at again without news from the watches: a failed start is retried this soon.
const LOOK_AGAIN: Duration = Duration::from_secs(2);

/// Finds tenants by watching the management cluster's NestedControlPlanes and Clusters, and drives each tenant's
/// [`lifecycle`] from what it sees: on every change of either, and every `LOOK_AGAIN` (from the
/// watches' caches: looking costs no request).
pub async fn discover(syncer: Arc<Syncer>) {
    let changed = Arc::new(tokio::sync::Notify::new());
    let planes = watched::<NestedControlPlane>(&syncer, &changed);
    let clusters = watched::<Cluster>(&syncer, &changed);
    let mut swept = false;
    loop {
        // Clusters are optional: without their CRD (a 404), control planes stand alone.
        if planes.listed() && (clusters.listed() || clusters.missing()) {
            let found = look(&planes.store.state(), &clusters.store.state());
            reconcile(&syncer, &found).await;
            if !swept {
                // Super namespaces of tenants that no longer exist at all (deleted while the syncer was away).
                let known: BTreeSet<&str> = found.iter().filter(|f| !f.gone).map(|f| f.key.as_str()).collect();
                sweep_orphans(&syncer, &known).await;
                swept = true;
            }
        }
        let _ = tokio::time::timeout(LOOK_AGAIN, changed.notified()).await;
    }
}

/// A watch of every object of kind `K` in the management cluster, feeding a cache.
struct Watched<K: kube::Resource + 'static>
where
    K::DynamicType: std::hash::Hash + Eq,
{
    store: Store<K>,
    /// Its first list is complete.
    listed: Arc<AtomicBool>,
    /// Its kind is not served (the last list was a 404).
    missing: Arc<AtomicBool>,
}

impl<K: kube::Resource + 'static> Watched<K>
where
    K::DynamicType: std::hash::Hash + Eq,
{
    fn listed(&self) -> bool {
        self.listed.load(Ordering::SeqCst)
    }

    fn missing(&self) -> bool {
        self.missing.load(Ordering::SeqCst)
    }
}

fn watched<K>(syncer: &Syncer, changed: &Arc<tokio::sync::Notify>) -> Watched<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + k8s_openapi::serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store::<K>();
    let (listed, missing) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let api: Api<K> = Api::all(syncer.super_client.clone());
    let (changed, listed_flag, missing_flag) = (changed.clone(), listed.clone(), missing.clone());
    let feed = reflector::reflector(writer, watcher(api, Default::default()).backoff(crate::Retry::new())).for_each(
        move |event| {
            match &event {
                Ok(watcher::Event::InitDone) => {
                    listed_flag.store(true, Ordering::SeqCst);
                    missing_flag.store(false, Ordering::SeqCst);
                }
                Err(watcher::Error::InitialListFailed(kube::Error::Api(status))) if status.code == 404 => {
                    missing_flag.store(true, Ordering::SeqCst);
                }
                Err(error) => tracing::debug!(%error, "watching for tenants"),
                Ok(_) => {}
            }
            changed.notify_one();
            async {}
        },
    );
    tokio::spawn(feed);
    Watched { store, listed, missing }
}

/// The tenants the control planes and Clusters in the caches stand for.
fn look(planes: &[Arc<NestedControlPlane>], clusters: &[Arc<Cluster>]) -> Vec<Found> {
    let clusters: BTreeMap<(String, String), &Cluster> =
        clusters.iter().map(|c| ((c.namespace().unwrap_or_default(), c.name_any()), c.as_ref())).collect();
    let mut found = Vec::new();
    for plane in planes {
        let namespace = plane.namespace().unwrap_or_default();
        let cluster_name = plane.labels().get(CLUSTER_NAME_LABEL).cloned().unwrap_or_else(|| plane.name_any());
        let cluster = clusters.get(&(namespace.clone(), cluster_name.clone())).copied();
        let uid = cluster.and_then(|c| c.uid()).or_else(|| plane.uid()).unwrap_or_default();
        let gone = plane.metadata.deletion_timestamp.is_some()
            || cluster.is_some_and(|c| c.metadata.deletion_timestamp.is_some());
        let ready = plane.status.as_ref().is_some_and(|s| s.ready || s.initialized);
        let endpoint = plane.spec.control_plane_endpoint.clone().filter(|e| ready && !e.is_zero());
        let mut annotations = plane.annotations().clone();
        annotations.extend(cluster.map(|c| c.annotations().clone()).unwrap_or_default());
        let annotation = |name: &str| annotations.get(name).cloned();
        found.push(Found {
            key: names::cluster_key(&namespace, &cluster_name, &uid),
            plane: plane.name_any(),
            // A platform admin's number, held to 1..=100 so that no tenant takes the whole queue.
            weight: annotation(WEIGHT_ANNOTATION).and_then(|w| w.parse::<u32>().ok()).unwrap_or(1).clamp(1, 100),
            pod_security: annotation(POD_SECURITY_ANNOTATION),
            annotations: annotations.clone(),
            namespace,
            cluster: cluster_name,
            endpoint: endpoint.map(|e| (e.host, e.port)),
            gone,
        });
    }
    found
}

/// Moves every tenant's lifecycle on from what was found, and carries out what it asks.
async fn reconcile(syncer: &Arc<Syncer>, found: &[Found]) {
    let known: Vec<String> = syncer.lifecycle.lock().expect("the lifecycle lock").keys().cloned().collect();
    for key in known.iter().filter(|key| !found.iter().any(|f| &f.key == *key)) {
        let actions = advance(syncer, key, Event::Vanished);
        act(syncer, key, None, &actions).await;
    }
    for candidate in found {
        if candidate.gone {
            let actions = advance(syncer, &candidate.key, Event::Deleted);
            act(syncer, &candidate.key, Some(candidate), &actions).await;
            continue;
        }
        syncer.queue.set_weight(&candidate.key, candidate.weight);
        if let Some(running) = syncer.tenant(&candidate.key) {
            renew_word(syncer, &running, candidate);
        }
        let actions = advance(syncer, &candidate.key, Event::Seen { ready: candidate.endpoint.is_some() });
        act(syncer, &candidate.key, Some(candidate), &actions).await;
    }
}

/// Takes the platform admin's word on a running tenant as last found (its Pod Security level, its policy's
/// allowances): when either changed, every object of the tenant is looked at again now, not at the next patrol, so that
/// what the admin now allows goes down (and what it no longer allows is refused) at once.
fn renew_word(syncer: &Syncer, running: &Tenant, found: &Found) {
    let level = level_of(syncer, found);
    let policy = syncer.options.policy.with_annotations(&found.annotations);
    let changed = {
        let mut held_level = running.pod_security.write().expect("the level lock");
        let mut held_policy = running.policy.write().expect("the policy lock");
        let changed = *held_level != level || *held_policy != policy;
        (*held_level, *held_policy) = (level, policy);
        changed
    };
    if changed {
        let queued = enqueue_all(syncer, running);
        tracing::info!(tenant = %running.key, queued, "the tenant's policy changed: its objects are looked at again");
    }
}

/// Applies `event` to tenant `key`'s lifecycle; returns what to do.
pub(crate) fn advance(syncer: &Syncer, key: &str, event: Event) -> Vec<Action> {
    let mut phases = syncer.lifecycle.lock().expect("the lifecycle lock");
    let before = phases.get(key).copied();
    let (after, actions) = lifecycle::step(before, event);
    if before != after {
        tracing::debug!(tenant = %key, ?before, ?after, ?event, "tenant lifecycle");
    }
    match after {
        Some(phase) => phases.insert(key.to_string(), phase),
        None => phases.remove(key),
    };
    actions
}

/// Carries out a lifecycle step's actions for tenant `key` (`found`: as last seen, when it still exists).
async fn act(syncer: &Arc<Syncer>, key: &str, found: Option<&Found>, actions: &[Action]) {
    for action in actions {
        match action {
            Action::Start => {
                let Some(found) = found else { continue };
                let Some(endpoint) = found.endpoint.clone() else { continue };
                match start(syncer, found, endpoint).await {
                    Ok(tenant) => {
                        tracing::info!(tenant = %key, "syncing tenant {}/{}", found.namespace, found.cluster);
                        syncer.tenants.write().expect("the tenants lock").insert(key.to_string(), tenant);
                        let next = advance(syncer, key, Event::Started);
                        Box::pin(act(syncer, key, Some(found), &next)).await;
                    }
                    Err(error) => {
                        tracing::warn!(tenant = %key, %error, "cannot reach the tenant yet");
                        let next = advance(syncer, key, Event::StartFailed);
                        Box::pin(act(syncer, key, Some(found), &next)).await;
                    }
                }
            }
            other => carry_out(syncer, key, *other).await,
        }
    }
}

/// Carries out one action other than [`Action::Start`] (which only [`act`] does, as discovery's).
async fn carry_out(syncer: &Arc<Syncer>, key: &str, action: Action) {
    match action {
        // The next look, at most LOOK_AGAIN away, sees it ready again and starts it.
        Action::RetryLater | Action::Start => {}
        Action::Stop => {
            tracing::info!(tenant = %key, "tenant deleted; removing its objects from the super cluster");
            syncer.tenants.write().expect("the tenants lock").remove(key);
            syncer.queue.remove_tenant(key);
            syncer.metrics.forget(key);
        }
        Action::RemoveEverything => remove_everything(syncer, key).await,
        Action::SyncAll => {
            if let Some(tenant) = syncer.tenant(key) {
                let began = std::time::Instant::now();
                let queued = enqueue_all(syncer, &tenant);
                syncer.metrics.patrolled(key, queued, began.elapsed());
            }
        }
        Action::TellHealth(healthy) => {
            let Some(tenant) = syncer.tenant(key) else { return };
            let (reason, message) = if healthy {
                ("TenantHealthy", "the tenant's API server answers again; syncing resumed")
            } else {
                ("TenantUnhealthy", "the tenant's API server does not answer; syncing waits for it")
            };
            tracing::warn!(tenant = %key, "{message}");
            // On the control plane, in the super cluster, where the platform team looks.
            let client = &syncer.super_client;
            crate::events::tell(client, &tenant.namespace, "NestedControlPlane", &tenant.plane, None, reason, message)
                .await;
        }
    }
}

/// Deletes every super namespace of tenant `key` (their contents go with them).
async fn remove_everything(syncer: &Syncer, key: &str) {
    let namespaces: Api<Namespace> = Api::all(syncer.super_client.clone());
    let selector = format!("{TENANT_LABEL}={key}");
    let Ok(list) = namespaces.list(&ListParams::default().labels(&selector)).await else { return };
    for namespace in list.items.iter().filter(|n| n.metadata.deletion_timestamp.is_none()) {
        let _ = namespaces.delete(&namespace.name_any(), &DeleteParams::default()).await;
    }
}

async fn sweep_orphans(syncer: &Syncer, known: &BTreeSet<&str>) {
    let orphans: BTreeSet<String> = syncer
        .super_namespaces
        .state()
        .iter()
        .filter_map(|n| n.labels().get(TENANT_LABEL).cloned())
        .filter(|key| !known.contains(key.as_str()))
        .collect();
    for key in orphans {
        tracing::info!(tenant = %key, "removing the objects of a tenant that no longer exists");
        remove_everything(syncer, &key).await;
    }
    // A super namespace of a tenant that is not the name its tenant namespace has now (made under an older naming
    // of long names) holds copies nothing keeps: it goes, and its objects are made again where they belong.
    let namespaces: Api<Namespace> = Api::all(syncer.super_client.clone());
    for namespace in syncer.super_namespaces.state() {
        let (Some(key), Some(tenant_namespace)) =
            (namespace.labels().get(TENANT_LABEL), namespace.annotations().get(names::TENANT_NAMESPACE))
        else {
            continue;
        };
        let name = namespace.name_any();
        if known.contains(key.as_str()) && names::super_namespace(key, tenant_namespace) != name {
            tracing::info!(tenant = %key, namespace = %name, "removing a super namespace of an older name");
            let _ = namespaces.delete(&name, &DeleteParams::default()).await;
        }
    }
}

/// The level a found tenant's namespaces enforce.
fn level_of(syncer: &Syncer, found: &Found) -> PodSecurityLevel {
    match found.pod_security.as_deref() {
        None => syncer.options.pod_security,
        Some(text) => PodSecurityLevel::parse(text).unwrap_or_else(|| {
            tracing::warn!(tenant = %found.key, value = %text, "{POD_SECURITY_ANNOTATION} names no level; restricted");
            PodSecurityLevel::Restricted
        }),
    }
}

/// A client of the tenant as the syncer (`nest:syncer`, its `<cluster>-syncer-kubeconfig`), or, for a control plane
/// made before the syncer had a credential of its own there, with its admin kubeconfig.
async fn tenant_client(syncer: &Syncer, found: &Found) -> Result<Client> {
    let secrets: Api<Secret> = Api::namespaced(syncer.super_client.clone(), &found.namespace);
    let secret = match secrets.get_opt(&format!("{}-syncer-kubeconfig", found.cluster)).await? {
        Some(secret) => secret,
        None => secrets.get(&format!("{}-kubeconfig", found.cluster)).await?,
    };
    let value = secret.data.as_ref().and_then(|d| d.get("value")).ok_or(Error::NoKubeconfig)?;
    let text = String::from_utf8_lossy(&value.0).into_owned();
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&text)?;
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    config.connect_timeout = Some(Duration::from_secs(3));
    Ok(Client::try_from(config)?)
}

/// Why a tenant could not be started (it is tried again).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    #[error("the kubeconfig Secret has no `value`")]
    NoKubeconfig,
    #[error("the kubelet endpoint: {0}")]
    Certificate(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

async fn start(syncer: &Arc<Syncer>, found: &Found, api_server: (String, i32)) -> Result<Arc<Tenant>> {
    let client = tenant_client(syncer, found).await?;
    client.apiserver_version().await?;
    let mut tasks = Vec::new();
    // The RuntimeClass a tenant's pod asks for simulation by, in the tenant's own cluster as in the management
    // cluster (where the super pod names the management cluster's class of the same name).
    let (classes, key) = (client.clone(), found.key.clone());
    tasks.push(tokio::spawn(async move {
        for _ in 0..60 {
            match nest_client::runtime_classes::ensure_simulated(&classes).await {
                Ok(()) => return,
                Err(error) => tracing::debug!(tenant = %key, %error, "making RuntimeClass nest-simulated"),
            }
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        }
    }));
    // Without the cluster's CA there is no kubelet endpoint: the tenant syncs, but its logs cannot be read.
    let kubelet_port = match crate::kubelet::start(syncer, &found.namespace, &found.cluster, &found.key).await {
        Ok((port, task)) => {
            tasks.push(task);
            Some(port)
        }
        Err(error) => {
            tracing::warn!(tenant = %found.key, %error, "no kubelet endpoint: `kubectl logs` will not reach synced pods");
            None
        }
    };
    let mut caches = Vec::new();
    for id in syncer.kind_ids() {
        let kind = syncer.kind(id);
        let writer = reflector::store::Writer::<DynamicObject>::new(kind.resource.clone());
        caches.push(crate::Cache::new(writer.as_reader(), kind.resource.clone()));
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.resource);
        let (queue_owner, key) = (syncer.clone(), found.key.clone());
        let verbatim = kind.verbatim;
        let stream =
            watcher(api, Default::default()).backoff(crate::Retry::new()).modify(move |o| crate::compact(o, verbatim));
        let feed = reflector::reflector(writer, stream).touched_objects().for_each(move |object| {
            if let Err(error) = &object {
                tracing::debug!(tenant = %key, %error, "watching the tenant");
            }
            if let Ok(object) = object {
                let item = Item::Object {
                    kind: id,
                    namespace: object.namespace().unwrap_or_default(),
                    name: object.name_any(),
                };
                queue_owner.queue.add(&key, item);
            }
            async {}
        });
        tasks.push(tokio::spawn(feed));
    }
    let (namespaces, writer) = reflector::store::<Namespace>();
    let (queue_owner, key) = (syncer.clone(), found.key.clone());
    let feed = reflector::reflector(
        writer,
        watcher(Api::<Namespace>::all(client.clone()), Default::default()).backoff(crate::Retry::new()),
    )
    .touched_objects()
    .for_each(move |namespace| {
        if let Ok(namespace) = namespace {
            queue_owner.queue.add(&key, Item::Namespace(namespace.name_any()));
        }
        async {}
    });
    tasks.push(tokio::spawn(feed));
    let tenant = Arc::new(Tenant {
        key: found.key.clone(),
        namespace: found.namespace.clone(),
        cluster: found.cluster.clone(),
        plane: found.plane.clone(),
        client,
        api_server,
        kubelet_port,
        caches,
        namespaces,
        pod_security: std::sync::RwLock::new(level_of(syncer, found)),
        policy: std::sync::RwLock::new(syncer.options.policy.with_annotations(&found.annotations)),
        reserved: Default::default(),
        tasks: std::sync::Mutex::new(Vec::new()),
    });
    let patrol = tokio::spawn(patrol(syncer.clone(), Arc::downgrade(&tenant)));
    tasks.push(patrol);
    *tenant.tasks.lock().expect("the tasks lock") = tasks;
    Ok(tenant)
}

/// Waits for the tenant's stores (then its lifecycle moves to syncing), then every `patrol` interval checks that
/// its API server answers (the lifecycle then queues every object of the tenant on both sides, or waits).
async fn patrol(syncer: Arc<Syncer>, tenant: std::sync::Weak<Tenant>) {
    {
        let Some(strong) = tenant.upgrade() else { return };
        for id in syncer.kind_ids() {
            let (store, weak) = (strong.cache(id).objects.clone(), tenant.clone());
            tokio::spawn(async move {
                if store.wait_until_ready().await.is_ok()
                    && let Some(tenant) = weak.upgrade()
                {
                    tenant.cache(id).set_filled();
                }
            });
        }
        let tenant = strong;
        // The stores are waited for by the tasks above only: a kube-runtime store wakes one waiter.
        while !syncer.kind_ids().take(syncer.built_in).all(|id| tenant.cache(id).is_filled()) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = tenant.namespaces.wait_until_ready().await;
        tracing::debug!(tenant = %tenant.key, "the tenant's caches are filled");
        // Its API server answered when it started.
        syncer.metrics.set_health(&tenant.key, true);
        for action in advance(&syncer, &tenant.key, Event::Filled) {
            carry_out(&syncer, &tenant.key, action).await;
        }
    }
    loop {
        let interval = syncer.options.patrol;
        tokio::time::sleep(interval).await;
        let Some(tenant) = tenant.upgrade() else { return };
        let healthy = tenant.client.apiserver_version().await.is_ok();
        syncer.metrics.set_health(&tenant.key, healthy);
        for action in advance(&syncer, &tenant.key, Event::Health(healthy)) {
            carry_out(&syncer, &tenant.key, action).await;
        }
    }
}

/// Queues every object of `tenant`, tenant side and super side; returns how many.
pub fn enqueue_all(syncer: &Syncer, tenant: &Tenant) -> usize {
    let mut items: BTreeSet<Item> = BTreeSet::new();
    for namespace in tenant.namespaces.state() {
        items.insert(Item::Namespace(namespace.name_any()));
    }
    for id in syncer.kind_ids() {
        for object in tenant.cache(id).objects.state() {
            items.insert(Item::Object {
                kind: id,
                namespace: object.namespace().unwrap_or_default(),
                name: object.name_any(),
            });
        }
    }
    for id in syncer.kind_ids() {
        let objects = syncer.super_cache(id).objects.state();
        for object in objects.iter().filter(|o| o.labels().get(TENANT_LABEL) == Some(&tenant.key)) {
            if let Some(item) = crate::sync::tenant_item(id, object) {
                items.insert(item);
            }
        }
    }
    for namespace in
        syncer.super_namespaces.state().iter().filter(|n| n.labels().get(TENANT_LABEL) == Some(&tenant.key))
    {
        if let Some(name) = namespace.annotations().get(names::TENANT_NAMESPACE) {
            items.insert(Item::Namespace(name.clone()));
        }
    }
    items.extend(crate::public::items(syncer));
    items.extend(crate::volumes::items(syncer, tenant));
    let count = items.len();
    for item in items {
        syncer.queue.add(&tenant.key, item);
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher;

    fn found(annotations: &[(&str, &str)]) -> Found {
        Found {
            key: "default-abcde-t".into(),
            plane: "t".into(),
            weight: 1,
            pod_security: None,
            annotations: annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            namespace: "default".into(),
            cluster: "t".into(),
            endpoint: Some(("10.0.0.9".into(), 6443)),
            gone: false,
        }
    }

    /// Must run within a Tokio runtime (the client is built, never used).
    fn client() -> Client {
        Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"))).expect("a client")
    }

    /// A syncer and its tenant, whose cache holds one NodePort Service.
    fn tenant_with_a_service() -> (Syncer, Tenant) {
        let (syncer, _super) = Syncer::for_tests(client(), crate::Options::default());
        let (tenant, writers) = Tenant::for_tests(&syncer, "default-abcde-t", client());
        let id = syncer.find_kind("services").expect("services are synced");
        let service: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "exposed", "namespace": "web"},
            "spec": {"type": "NodePort", "ports": [{"port": 80}]},
        }))
        .expect("a Service");
        let mut writer = writers.into_iter().nth(id.index()).expect("a writer per kind");
        writer.apply_watcher_event(&watcher::Event::Apply(service));
        (syncer, tenant)
    }

    fn queued(syncer: &Syncer) -> usize {
        syncer.queue.depths().get("default-abcde-t").copied().unwrap_or(0)
    }

    #[tokio::test]
    async fn a_changed_word_of_the_platform_admin_looks_at_the_tenants_objects_again_at_once() {
        let (syncer, tenant) = tenant_with_a_service();
        // The same word as before: nothing is queued (the patrol looks in its time).
        renew_word(&syncer, &tenant, &found(&[]));
        assert_eq!(queued(&syncer), 0);
        // NodePorts allowed: the tenant's objects are queued now, the Service among them.
        renew_word(&syncer, &tenant, &found(&[("tenancy.nest.dev/allow-service-types", "NodePort")]));
        assert!(queued(&syncer) >= 1, "nothing queued when the policy changed");
        assert!(*tenant.policy.read().expect("the policy lock") != syncer.options.policy, "the policy taken");

        // A Pod Security level of the admin's is news too.
        let (syncer, tenant) = tenant_with_a_service();
        let mut baseline = found(&[]);
        baseline.pod_security = Some("baseline".into());
        renew_word(&syncer, &tenant, &baseline);
        assert!(queued(&syncer) >= 1, "nothing queued when the level changed");
        assert_eq!(*tenant.pod_security.read().expect("the level lock"), PodSecurityLevel::Baseline);
    }
}
