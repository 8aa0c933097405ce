//! Tenants: found among the management cluster's NestedControlPlanes, started once their control plane is ready
//! (through the `<cluster>-kubeconfig` Secret), kept while they exist — also while their API server is down, when
//! they are marked unhealthy and their watches retry — and cleaned up when they are deleted: every super namespace
//! labelled with the tenant's key goes, with everything in it.

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
use nest_capn::api::{CLUSTER_NAME_LABEL, Cluster, NestedControlPlane};
use tokio::task::JoinHandle;

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
    /// The tenant's objects, one store per synced kind.
    pub objects: Vec<Store<DynamicObject>>,
    pub namespaces: Store<Namespace>,
    /// Whether the built-in kinds' stores have been filled once (before that, nothing is done for the tenant).
    pub ready: AtomicBool,
    /// Whether each kind's store has been filled once (a custom resource's only once the tenant has its CRD); an
    /// object of a kind whose stores are not filled on both sides waits, so that nothing is deleted for lack of news.
    pub kind_ready: Vec<AtomicBool>,
    /// Whether the tenant's API server answered the last check.
    pub healthy: AtomicBool,
    /// The Pod Security level its super namespaces enforce (annotation [`POD_SECURITY_ANNOTATION`], else the
    /// syncer's `--pod-security-level`); followed when the platform admin changes it.
    pub pod_security: std::sync::RwLock<PodSecurityLevel>,
    tasks: std::sync::Mutex<Vec<JoinHandle<()>>>,
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
pub use nest_capn::api::POD_SECURITY_ANNOTATION;

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
    namespace: String,
    cluster: String,
    /// Ready, with an endpoint.
    endpoint: Option<(String, i32)>,
    gone: bool,
}

/// Looks at the control planes every two seconds: starts tenants that became ready, removes those deleted.
pub async fn discover(syncer: Arc<Syncer>) {
    let planes: Api<NestedControlPlane> = Api::all(syncer.super_client.clone());
    let clusters: Api<Cluster> = Api::all(syncer.super_client.clone());
    let mut swept = false;
    loop {
        match look(&planes, &clusters).await {
            Ok(found) => {
                reconcile(&syncer, &found).await;
                if !swept {
                    // Super namespaces of tenants that no longer exist at all (deleted while the syncer was away).
                    let known: BTreeSet<&str> = found.iter().filter(|f| !f.gone).map(|f| f.key.as_str()).collect();
                    sweep_orphans(&syncer, &known).await;
                    swept = true;
                }
            }
            Err(error) => tracing::debug!(%error, "looking for tenants"),
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

async fn look(planes: &Api<NestedControlPlane>, clusters: &Api<Cluster>) -> kube::Result<Vec<Found>> {
    let clusters: BTreeMap<(String, String), Cluster> = match clusters.list(&ListParams::default()).await {
        Ok(list) => list.items.into_iter().map(|c| ((c.namespace().unwrap_or_default(), c.name_any()), c)).collect(),
        // Without Clusters, control planes stand alone.
        Err(kube::Error::Api(status)) if status.code == 404 => BTreeMap::new(),
        Err(error) => return Err(error),
    };
    let mut found = Vec::new();
    for plane in planes.list(&ListParams::default()).await?.items {
        let namespace = plane.namespace().unwrap_or_default();
        let cluster_name = plane.labels().get(CLUSTER_NAME_LABEL).cloned().unwrap_or_else(|| plane.name_any());
        let cluster = clusters.get(&(namespace.clone(), cluster_name.clone()));
        let uid = cluster.and_then(|c| c.uid()).or_else(|| plane.uid()).unwrap_or_default();
        let gone = plane.metadata.deletion_timestamp.is_some()
            || cluster.is_some_and(|c| c.metadata.deletion_timestamp.is_some());
        let ready = plane.status.as_ref().is_some_and(|s| s.ready || s.initialized);
        let endpoint = plane.spec.control_plane_endpoint.clone().filter(|e| ready && !e.is_zero());
        let weight = cluster
            .and_then(|c| c.annotations().get(WEIGHT_ANNOTATION).cloned())
            .or_else(|| plane.annotations().get(WEIGHT_ANNOTATION).cloned())
            .and_then(|w| w.parse().ok())
            .unwrap_or(1);
        let pod_security = cluster
            .and_then(|c| c.annotations().get(POD_SECURITY_ANNOTATION).cloned())
            .or_else(|| plane.annotations().get(POD_SECURITY_ANNOTATION).cloned());
        found.push(Found {
            key: names::cluster_key(&namespace, &cluster_name, &uid),
            plane: plane.name_any(),
            weight,
            pod_security,
            namespace,
            cluster: cluster_name,
            endpoint: endpoint.map(|e| (e.host, e.port)),
            gone,
        });
    }
    Ok(found)
}

async fn reconcile(syncer: &Arc<Syncer>, found: &[Found]) {
    let running: Vec<String> = syncer.tenants.read().expect("the tenants lock").keys().cloned().collect();
    // Tenants deleted (or no longer there): stop, then remove what they had in the super cluster.
    for key in running {
        let there = found.iter().find(|f| f.key == key);
        if there.is_none_or(|f| f.gone) {
            tracing::info!(tenant = %key, "tenant deleted; removing its objects from the super cluster");
            syncer.tenants.write().expect("the tenants lock").remove(&key);
            syncer.queue.remove_tenant(&key);
            syncer.metrics.forget(&key);
            remove_everything(syncer, &key).await;
        }
    }
    for tenant in found.iter().filter(|f| f.gone) {
        remove_everything(syncer, &tenant.key).await;
    }
    for candidate in found.iter().filter(|f| !f.gone) {
        syncer.queue.set_weight(&candidate.key, candidate.weight);
        let Some(endpoint) = &candidate.endpoint else { continue };
        if let Some(running) = syncer.tenant(&candidate.key) {
            *running.pod_security.write().expect("the level lock") = level_of(syncer, candidate);
            continue;
        }
        match start(syncer, candidate, endpoint.clone()).await {
            Ok(tenant) => {
                tracing::info!(tenant = %candidate.key, "syncing tenant {}/{}", candidate.namespace, candidate.cluster);
                syncer.tenants.write().expect("the tenants lock").insert(candidate.key.clone(), tenant);
            }
            Err(error) => tracing::warn!(tenant = %candidate.key, %error, "cannot reach the tenant yet"),
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

async fn tenant_client(syncer: &Syncer, found: &Found) -> Result<Client> {
    let secrets: Api<Secret> = Api::namespaced(syncer.super_client.clone(), &found.namespace);
    let secret = secrets.get(&format!("{}-kubeconfig", found.cluster)).await?;
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
    let mut objects = Vec::new();
    for (index, kind) in syncer.kinds.iter().enumerate() {
        let writer = reflector::store::Writer::<DynamicObject>::new(kind.resource.clone());
        objects.push(writer.as_reader());
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.resource);
        let (queue_owner, key) = (syncer.clone(), found.key.clone());
        let stream = watcher(api, Default::default()).backoff(crate::Retry::new()).modify(crate::compact);
        let feed = reflector::reflector(writer, stream).touched_objects().for_each(move |object| {
            if let Err(error) = &object {
                tracing::debug!(tenant = %key, %error, "watching the tenant");
            }
            if let Ok(object) = object {
                let item = Item::Object {
                    kind: index,
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
        objects,
        namespaces,
        ready: AtomicBool::new(false),
        kind_ready: syncer.kinds.iter().map(|_| AtomicBool::new(false)).collect(),
        healthy: AtomicBool::new(true),
        pod_security: std::sync::RwLock::new(level_of(syncer, found)),
        tasks: std::sync::Mutex::new(Vec::new()),
    });
    let patrol = tokio::spawn(patrol(syncer.clone(), Arc::downgrade(&tenant)));
    tasks.push(patrol);
    *tenant.tasks.lock().expect("the tasks lock") = tasks;
    Ok(tenant)
}

/// Waits for the tenant's stores, then every `patrol` interval queues every object of the tenant on both sides and
/// checks that its API server answers.
async fn patrol(syncer: Arc<Syncer>, tenant: std::sync::Weak<Tenant>) {
    {
        let Some(strong) = tenant.upgrade() else { return };
        for (index, store) in strong.objects.iter().enumerate() {
            let (store, weak) = (store.clone(), tenant.clone());
            tokio::spawn(async move {
                if store.wait_until_ready().await.is_ok()
                    && let Some(tenant) = weak.upgrade()
                {
                    tenant.kind_ready[index].store(true, Ordering::SeqCst);
                }
            });
        }
        let tenant = strong;
        // The stores are waited for by the tasks above only: a kube-runtime store wakes one waiter.
        while !tenant.kind_ready[..syncer.built_in].iter().all(|ready| ready.load(Ordering::SeqCst)) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = tenant.namespaces.wait_until_ready().await;
        tenant.ready.store(true, Ordering::SeqCst);
        tracing::debug!(tenant = %tenant.key, "the tenant's caches are filled");
    }
    loop {
        let Some(tenant) = tenant.upgrade() else { return };
        let healthy = tenant.client.apiserver_version().await.is_ok();
        if tenant.healthy.swap(healthy, Ordering::SeqCst) != healthy {
            let (reason, message) = if healthy {
                ("TenantHealthy", "the tenant's API server answers again; syncing resumed")
            } else {
                ("TenantUnhealthy", "the tenant's API server does not answer; syncing waits for it")
            };
            tracing::warn!(tenant = %tenant.key, "{message}");
            // On the control plane, in the super cluster, where the platform team looks.
            let client = &syncer.super_client;
            crate::events::tell(client, &tenant.namespace, "NestedControlPlane", &tenant.plane, None, reason, message)
                .await;
        }
        syncer.metrics.set_health(&tenant.key, healthy);
        if healthy {
            let began = std::time::Instant::now();
            let queued = enqueue_all(&syncer, &tenant);
            syncer.metrics.patrolled(&tenant.key, queued, began.elapsed());
        }
        let interval = syncer.options.patrol;
        drop(tenant);
        tokio::time::sleep(interval).await;
    }
}

/// Queues every object of `tenant`, tenant side and super side; returns how many.
pub fn enqueue_all(syncer: &Syncer, tenant: &Tenant) -> usize {
    let mut items: BTreeSet<Item> = BTreeSet::new();
    for namespace in tenant.namespaces.state() {
        items.insert(Item::Namespace(namespace.name_any()));
    }
    for (index, store) in tenant.objects.iter().enumerate() {
        for object in store.state() {
            items.insert(Item::Object {
                kind: index,
                namespace: object.namespace().unwrap_or_default(),
                name: object.name_any(),
            });
        }
    }
    for (index, store) in syncer.super_objects.iter().enumerate() {
        for object in store.state().iter().filter(|o| o.labels().get(TENANT_LABEL) == Some(&tenant.key)) {
            if let Some(item) = crate::sync::tenant_item(index, object) {
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
