//! nest's syncer: makes tenant workloads real. For every tenant (a nested control plane that is ready), it copies
//! what the tenant creates — namespaces, pods, services, config maps, secrets, volume claims — into the management
//! ("super") cluster under names that cannot collide between tenants ([`names`]), and copies the results back: pod
//! status, the node a pod runs on (as a *virtual node* in the tenant), service addresses, claim status. One process
//! serves every tenant.
//!
//! - [`tenants`]: finds tenants by watching NestedControlPlanes and Clusters, starts a watch of each synced kind in
//!   each (through its `<cluster>-kubeconfig` Secret), and removes everything of a tenant that is deleted, as its
//!   [`lifecycle`] (a state machine) says.
//! - [`kinds`]: the registry of synced kinds and how a tenant object becomes its super object.
//! - [`sync`]: the reconcile of one object, both ways; it only ever changes super objects whose tenant UID annotation
//!   matches.
//! - [`nodes`]: virtual nodes, their status and their Leases.
//! - [`events`]: Events about tenants' objects, copied up; [`public`]: storage classes, priority classes and CRDs
//!   the super cluster marks public, copied into every tenant.
//! - [`volumes`]: PersistentVolumes the super cluster bound to tenants' claims, copied up.
//! - [`queue`]: the work queue, shared fairly between tenants.
//! - [`kubelet`]: the kubelet endpoint of each tenant's virtual nodes, for `kubectl logs` through the tenant.
//! - [`addresses`]: which addresses a tenant's Endpoints may name.
//! - [`policy`]: what a tenant may ask of the management cluster; [`compute`]: what its pods may take of it (container
//!   defaults as a LimitRange in each super namespace, a quota over all of them, its share of the node).
//! - [`metrics`]: counters served as Prometheus text.
//!
//! A patrol per tenant enqueues every object on both sides every `patrol` interval, which repairs drift either way
//! and removes super objects whose tenant object is gone (also those deleted while the syncer was not running).

pub mod addresses;
pub mod compute;
pub mod events;
pub mod kinds;
pub mod kubelet;
pub mod lifecycle;
pub mod metrics;
pub mod names;
pub mod nodes;
pub mod policy;
pub mod public;
pub mod queue;
pub mod sync;
pub mod tenants;
pub mod tokens;
pub mod volumes;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Event, LimitRange, Namespace, Node, PersistentVolume};
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use crate::kinds::Kind;
use crate::queue::Queue;
use crate::tenants::Tenant;

/// The ports the tenants' kubelet endpoints take by default.
pub const KUBELET_PORTS: std::ops::RangeInclusive<u16> = 10300..=10999;

/// How the syncer runs.
#[derive(Clone, Debug)]
pub struct Options {
    /// How often every object of every tenant is compared (default 60 s).
    pub patrol: Duration,
    /// Concurrent reconciles.
    pub workers: usize,
    /// How long a virtual node stays once no tenant pod runs on it.
    pub node_grace: Duration,
    /// The address tenants' API servers reach the syncer's kubelet endpoints at (virtual nodes' InternalIP).
    pub kubelet_address: std::net::IpAddr,
    /// The ports the kubelet endpoints take, one per tenant (default 10300–10999): a fixed range, so that the node's
    /// network wall can let tenants' pods reach them and nothing else of the host.
    pub kubelet_ports: std::ops::RangeInclusive<u16>,
    /// Custom resource kinds to sync as well (group, version, kind): spec down, status up.
    pub custom: Vec<(String, String, String)>,
    /// Also write a super Service's ClusterIP into its tenant Service's `spec.externalIPs`.
    pub service_external_ips: bool,
    /// Label and annotation prefixes that flow up: what the super cluster (its controllers, admission) sets under
    /// them on a super object appears on the tenant object.
    pub transparent_prefixes: Vec<String>,
    /// The Pod Security level tenants' super namespaces enforce unless their control plane's annotation
    /// (`tenancy.nest.dev/pod-security`) says otherwise.
    pub pod_security: tenants::PodSecurityLevel,
    /// What tenants may ask of the management cluster beyond Pod Security ([`policy`]), before each tenant's own
    /// additions.
    pub policy: policy::Policy,
    /// The management cluster's pod ranges besides its nodes' `spec.podCIDRs` (which are read too): an Endpoints
    /// address in one must be a pod of the tenant's own, and none may be a range's bridge address ([`addresses`]).
    pub pod_ranges: Vec<addresses::Range>,
    /// The management cluster's Service ranges, which no tenant Endpoints address may be in (default kube-apiserver's
    /// and `nest apiserver`'s `10.96.0.0/12`).
    pub service_ranges: Vec<addresses::Range>,
    /// What a client may hold of the tenants' kubelet endpoints, all of which share one budget of connections.
    pub kubelet_limits: nest_kubelet_server::Limits,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            patrol: Duration::from_secs(60),
            workers: 8,
            node_grace: Duration::from_secs(60),
            kubelet_address: std::net::Ipv4Addr::LOCALHOST.into(),
            kubelet_ports: KUBELET_PORTS,
            custom: Vec::new(),
            service_external_ips: false,
            transparent_prefixes: vec![names::TRANSPARENT_PREFIX.to_string()],
            pod_security: tenants::PodSecurityLevel::Restricted,
            policy: policy::Policy::default(),
            pod_ranges: Vec::new(),
            service_ranges: vec![DEFAULT_SERVICE_RANGE.parse().expect("a valid range")],
            kubelet_limits: nest_kubelet_server::Limits::default(),
        }
    }
}

/// The Service range the syncer assumes unless told (kube-apiserver's default, and `nest apiserver`'s).
pub const DEFAULT_SERVICE_RANGE: &str = "10.96.0.0/12";

/// How the syncer's watches retry: from 250 ms, doubling, at most 3 s apart. A tenant's API server that comes back,
/// or a CRD created after the syncer started, is noticed within seconds (kube-runtime's default waits up to 30 s).
pub struct Retry(Duration);

impl Retry {
    pub fn new() -> Retry {
        Retry(Duration::from_millis(250))
    }
}

impl Default for Retry {
    fn default() -> Self {
        Retry::new()
    }
}

impl Iterator for Retry {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        let now = self.0;
        self.0 = (self.0 * 2).min(Duration::from_secs(3));
        Some(now)
    }
}

impl kube::runtime::utils::Backoff for Retry {
    fn reset(&mut self) {
        self.0 = Duration::from_millis(250);
    }
}

/// Keeps of a super pod only what the syncer reads (its metadata, status, node, grace period, and containers' names,
/// images and the CPU and memory they ask for, which the tenant's quota counts), so that the cache of ten thousand
/// pods stays small.
fn prune_super_pod(pod: &mut DynamicObject) {
    let spec = &pod.data["spec"];
    let compute = |resources: &serde_json::Value| {
        let amounts = |field: &str| {
            let kept: serde_json::Map<String, serde_json::Value> = ["cpu", "memory"]
                .into_iter()
                .filter_map(|r| resources[field].get(r).map(|amount| (r.to_string(), amount.clone())))
                .collect();
            serde_json::Value::Object(kept)
        };
        serde_json::json!({"requests": amounts("requests"), "limits": amounts("limits")})
    };
    let list = |name: &str, image: bool| -> Vec<serde_json::Value> {
        spec[name]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                let mut kept = serde_json::json!({"name": c["name"], "resources": compute(&c["resources"])});
                if image {
                    kept["image"] = c["image"].clone();
                }
                kept
            })
            .collect()
    };
    let pruned = serde_json::json!({
        "nodeName": spec["nodeName"], "containers": list("containers", true),
        "initContainers": list("initContainers", false),
        "terminationGracePeriodSeconds": spec["terminationGracePeriodSeconds"],
    });
    pod.data["spec"] = pruned;
    pod.metadata.managed_fields = None;
}

/// Where a compacted tenant object keeps its body.
const BODY: &str = "nest.dev/body";
/// What a compacted object keeps of a content field it holds only as a digest ([`compact`]): the field's SHA-256
/// (hex) and its size in bytes of JSON. A ConfigMap's or Secret's data maps strings to strings, so no real field is
/// ever this object (its size is a number).
const DIGEST: &str = "nest.dev/digest";
const DIGESTED_BYTES: &str = "nest.dev/bytes";
/// A verbatim field above this many bytes of JSON is cached as its digest: small ones cost less kept as they are.
const DIGEST_ABOVE: usize = 512;

/// Compacts a cached object (tenant objects, and the super objects made from them): without managedFields (the
/// syncer never reads them), with the fields in `verbatim` (content copied down as it is: a ConfigMap's or Secret's
/// data, [`kinds::Kind::verbatim`]) held as their digest and size when larger than 512 bytes (`DIGEST_ABOVE`), and
/// with the rest of its body (everything but apiVersion, kind and metadata) kept as one JSON string instead of a
/// tree of values — a tenth of the memory. So a tenant's gigabyte of ConfigMaps costs the syncer a few hundred bytes
/// each: what it needs to tell whether the super copy has the same data; the data itself is read from the tenant's
/// API server when a copy must be written ([`sync`]). The fields read on every pass stay as they are:
/// `spec.nodeName`, `spec.selector`, `spec.volumeName`, and a pod's `status.phase`, `status.podIP` and
/// `status.podIPs` (every Endpoints check reads every pod's).
pub fn compact(object: &mut DynamicObject, verbatim: &[&str]) {
    object.metadata.managed_fields = None;
    let mut body = std::mem::take(&mut object.data);
    let mut digested = 0usize;
    for field in verbatim {
        if let Some(value) = body.get_mut(*field)
            && !value.is_null()
        {
            let text = value.to_string();
            if text.len() > DIGEST_ABOVE {
                digested = digested.saturating_add(text.len());
                *value = serde_json::json!({DIGEST: digest(value), DIGESTED_BYTES: text.len()});
            }
        }
    }
    let mut data = serde_json::Map::new();
    for (part, fields) in
        [("spec", &["nodeName", "selector", "volumeName"][..]), ("status", &["phase", "podIP", "podIPs"])]
    {
        let hot: serde_json::Map<String, serde_json::Value> = fields
            .iter()
            .filter_map(|field| body[part].get(*field).map(|value| (field.to_string(), value.clone())))
            .collect();
        if !hot.is_empty() {
            data.insert(part.into(), serde_json::Value::Object(hot));
        }
    }
    data.insert(BODY.into(), serde_json::Value::String(body.to_string()));
    if digested > 0 {
        data.insert(DIGESTED_BYTES.into(), digested.into());
    }
    object.data = serde_json::Value::Object(data);
}

/// The SHA-256 of a JSON value in canonical form (object keys in order, whatever order the value keeps them in), as
/// hex: equal values, however they were written, have equal digests.
fn digest(value: &serde_json::Value) -> String {
    use sha2::Digest;
    fn feed(hasher: &mut sha2::Sha256, value: &serde_json::Value) {
        match value {
            serde_json::Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                hasher.update(b"{");
                for (key, value) in entries {
                    hasher.update(serde_json::Value::String(key.clone()).to_string().as_bytes());
                    hasher.update(b":");
                    feed(hasher, value);
                    hasher.update(b",");
                }
                hasher.update(b"}");
            }
            serde_json::Value::Array(items) => {
                hasher.update(b"[");
                for item in items {
                    feed(hasher, item);
                    hasher.update(b",");
                }
                hasher.update(b"]");
            }
            scalar => hasher.update(scalar.to_string().as_bytes()),
        }
    }
    let mut hasher = sha2::Sha256::new();
    feed(&mut hasher, value);
    hasher.finalize().iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Whether a field of a cached object's body (as [`full`] gives it) is held only as a digest.
pub fn is_digest(field: &serde_json::Value) -> bool {
    field.get(DIGEST).is_some_and(serde_json::Value::is_string) && field[DIGESTED_BYTES].is_u64()
}

/// Whether any of `fields` of a cached object (as [`full`] gives it) is held only as a digest: to write it down, the
/// whole object must be read first.
pub fn digested(value: &serde_json::Value, fields: &[&str]) -> bool {
    fields.iter().any(|field| is_digest(&value[*field]))
}

/// The bytes of JSON a cached object's body takes whole: what is kept, and what is held as a digest.
pub fn cached_bytes(object: &DynamicObject) -> u64 {
    let Some(body) = object.data.get(BODY).and_then(serde_json::Value::as_str) else {
        return u64::try_from(object.data.to_string().len()).unwrap_or(u64::MAX);
    };
    let digested = object.data.get(DIGESTED_BYTES).and_then(serde_json::Value::as_u64).unwrap_or(0);
    u64::try_from(body.len()).unwrap_or(u64::MAX).saturating_add(digested)
}

/// A cached object whole, as the API served it (compacted or not), but for the fields held as a digest.
pub fn full(object: &DynamicObject) -> serde_json::Value {
    let mut value = match object.data.get(BODY).and_then(serde_json::Value::as_str) {
        Some(body) => serde_json::from_str(body).unwrap_or_else(|_| serde_json::json!({})),
        None => object.data.clone(),
    };
    if !value.is_object() {
        value = serde_json::json!({});
    }
    if let Some(types) = &object.types {
        value["apiVersion"] = serde_json::json!(types.api_version);
        value["kind"] = serde_json::json!(types.kind);
    }
    value["metadata"] = serde_json::to_value(&object.metadata).unwrap_or_default();
    value
}

/// What one reconcile works on: an object of a tenant.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Item {
    /// An object of kind `kinds[kind]`, by its tenant namespace and name.
    Object { kind: usize, namespace: String, name: String },
    /// A tenant namespace.
    Namespace(String),
    /// A super Event, by its super namespace and name, told to the tenant whose object it is about.
    Event { namespace: String, name: String },
    /// A public super object of kind `kinds::public()[kind]`, copied into the tenant.
    Public { kind: usize, name: String },
    /// A super PersistentVolume bound to a claim of the tenant, copied into the tenant.
    Volume(String),
}

/// What every task shares.
pub struct Syncer {
    pub super_client: Client,
    pub options: Options,
    pub kinds: Vec<Kind>,
    pub queue: Queue<Item>,
    /// The tenants that have been started (their clients, watches and caches), by key.
    pub tenants: RwLock<BTreeMap<String, Arc<Tenant>>>,
    /// The management cluster's API server addresses (its `default/kubernetes` Service and Endpoints), which no
    /// tenant Endpoints may name; refreshed every minute.
    pub api_addresses: RwLock<std::collections::BTreeSet<std::net::IpAddr>>,
    /// Where every known tenant is in its life ([`lifecycle`]), by key: the one record of it.
    pub lifecycle: std::sync::Mutex<BTreeMap<String, lifecycle::Phase>>,
    /// How many of `kinds` are built in (the rest are configured custom resources).
    pub built_in: usize,
    /// The super objects of every tenant, one store per kind (only objects labelled with a tenant).
    pub super_objects: Vec<Store<DynamicObject>>,
    /// Whether each of `super_objects` has been filled once (a custom resource's only once its CRD exists).
    pub super_ready: Vec<std::sync::atomic::AtomicBool>,
    pub super_namespaces: Store<Namespace>,
    pub super_nodes: Store<Node>,
    /// Events in the super cluster (those of tenants' objects are copied up).
    pub super_events: Store<Event>,
    /// The kinds the super cluster shares (`kinds::public()`), and their objects, one store per kind.
    pub public_kinds: Vec<(&'static str, kube::core::ApiResource)>,
    pub public: Vec<Store<DynamicObject>>,
    /// The super cluster's PersistentVolumes (those bound to tenants' claims are copied up).
    pub super_volumes: Store<PersistentVolume>,
    /// The LimitRanges the syncer keeps in tenants' super namespaces ([`compute::LIMIT_RANGE`]).
    pub super_limit_ranges: Store<LimitRange>,
    pub metrics: metrics::Metrics,
    /// The connections open on every tenant's kubelet endpoint: one budget, so that the syncer's descriptors are
    /// bounded however many tenants it serves.
    pub kubelet_connections: Arc<nest_kubelet_server::Connections>,
    /// Consecutive failures per item, for back-off.
    pub failures: std::sync::Mutex<std::collections::HashMap<(String, Item), u32>>,
}

impl Syncer {
    pub fn tenant(&self, key: &str) -> Option<Arc<Tenant>> {
        self.tenants.read().expect("the tenants lock").get(key).cloned()
    }

    /// Where tenant `key` is in its life, if it is known.
    pub fn phase(&self, key: &str) -> Option<lifecycle::Phase> {
        self.lifecycle.lock().expect("the lifecycle lock").get(key).copied()
    }
}

/// Runs the syncer against the super cluster until it stops.
pub async fn run(super_client: Client, options: Options) {
    start(super_client, options).1.await
}

/// The syncer, and the future that runs it (nothing happens until it is polled).
pub fn start(super_client: Client, options: Options) -> (Arc<Syncer>, futures_util::future::BoxFuture<'static, ()>) {
    let mut kinds = kinds::built_in();
    let built_in = kinds.len();
    kinds.extend(options.custom.iter().map(|(group, version, kind)| kinds::custom(group, version, kind)));
    let tenant_selector = watcher::Config::default().labels(names::TENANT_LABEL);
    let mut feeds: Vec<futures_util::future::BoxFuture<'static, ()>> = Vec::new();
    let mut super_objects = Vec::new();
    // The feeds enqueue work for the syncer, made once the stores exist; they run only once it is set.
    let syncer_slot: Arc<std::sync::OnceLock<Arc<Syncer>>> = Arc::new(std::sync::OnceLock::new());
    for (index, kind) in kinds.iter().enumerate() {
        let writer = reflector::store::Writer::<DynamicObject>::new(kind.resource.clone());
        let store = writer.as_reader();
        let api: Api<DynamicObject> = Api::all_with(super_client.clone(), &kind.resource);
        let slot = syncer_slot.clone();
        let (pods, verbatim) = (kind.name == "pods", kind.verbatim);
        let stream = watcher(api, tenant_selector.clone()).backoff(Retry::new()).modify(move |object| {
            if pods {
                prune_super_pod(object);
            }
            // The pods' token Secrets are the syncer's own, and it reads which tokens they hold.
            let own = object.metadata.name.as_deref().is_some_and(|n| n.starts_with(tokens::SECRET_PREFIX));
            compact(object, if own { &[] } else { verbatim });
        });
        let feed = reflector::reflector(writer, stream).touched_objects().for_each(move |object| {
            match (object, slot.get()) {
                (Ok(object), Some(syncer)) => sync::enqueue_super(syncer, index, &object),
                (Err(error), _) => tracing::debug!(%error, "watching the super cluster"),
                _ => {}
            }
            async {}
        });
        feeds.push(Box::pin(feed));
        super_objects.push(store);
    }
    let (super_namespaces, feed) =
        nest_client::cache_then(Api::<Namespace>::all(super_client.clone()), tenant_selector, Retry::new(), |_| {});
    feeds.push(Box::pin(feed));
    let (super_nodes, feed) =
        nest_client::cache_then(Api::<Node>::all(super_client.clone()), Default::default(), Retry::new(), |_| {});
    feeds.push(Box::pin(feed));
    let slot = syncer_slot.clone();
    let (super_events, feed) = nest_client::cache_then(
        Api::<Event>::all(super_client.clone()),
        Default::default(),
        Retry::new(),
        move |seen| {
            if let (nest_client::Seen::Applied(event), Some(syncer)) = (seen, slot.get()) {
                sync::enqueue_event(syncer, event);
            }
        },
    );
    feeds.push(Box::pin(feed));
    let slot = syncer_slot.clone();
    let (super_volumes, feed) = nest_client::cache_then(
        Api::<PersistentVolume>::all(super_client.clone()),
        Default::default(),
        Retry::new(),
        move |seen| {
            let (nest_client::Seen::Applied(volume) | nest_client::Seen::Deleted(volume)) = seen;
            if let Some(syncer) = slot.get() {
                volumes::enqueue(syncer, volume);
            }
        },
    );
    feeds.push(Box::pin(feed));
    // The tenants' LimitRanges: one changed or deleted by someone else is put back by its namespace's reconcile.
    let slot = syncer_slot.clone();
    let (super_limit_ranges, feed) = nest_client::cache_then(
        Api::<LimitRange>::all(super_client.clone()),
        watcher::Config::default().labels(names::TENANT_LABEL),
        Retry::new(),
        move |seen| {
            let (nest_client::Seen::Applied(range) | nest_client::Seen::Deleted(range)) = seen;
            if let Some(syncer) = slot.get() {
                sync::enqueue_namespace_of(syncer, range.metadata.namespace.as_deref().unwrap_or_default());
            }
        },
    );
    feeds.push(Box::pin(feed));
    let mut public = Vec::new();
    let public_kinds = kinds::public();
    for (index, (_, resource)) in public_kinds.iter().cloned().enumerate() {
        let writer = reflector::store::Writer::<DynamicObject>::new(resource.clone());
        public.push(writer.as_reader());
        let api: Api<DynamicObject> = Api::all_with(super_client.clone(), &resource);
        let slot = syncer_slot.clone();
        let selector = watcher::Config::default().labels(&format!("{}=true", names::PUBLIC_LABEL));
        let feed = reflector::reflector(writer, watcher(api, selector).backoff(Retry::new()))
            .touched_objects()
            .for_each(move |object| {
                if let (Ok(object), Some(syncer)) = (object, slot.get()) {
                    let keys: Vec<String> = syncer.tenants.read().expect("the tenants lock").keys().cloned().collect();
                    for key in keys {
                        syncer.queue.add(&key, Item::Public { kind: index, name: object.name_any() });
                    }
                }
                async {}
            });
        feeds.push(Box::pin(feed));
    }
    let kubelet_connections = nest_kubelet_server::Connections::new(options.kubelet_limits.clone());
    let syncer = Arc::new(Syncer {
        super_client,
        options,
        super_ready: kinds.iter().map(|_| std::sync::atomic::AtomicBool::new(false)).collect(),
        kinds,
        built_in,
        queue: Queue::default(),
        tenants: RwLock::new(BTreeMap::new()),
        lifecycle: std::sync::Mutex::new(BTreeMap::new()),
        api_addresses: RwLock::new(Default::default()),
        super_objects,
        super_namespaces,
        super_nodes,
        super_events,
        public_kinds,
        public,
        super_volumes,
        super_limit_ranges,
        metrics: metrics::Metrics::default(),
        failures: Default::default(),
        kubelet_connections,
    });
    let _ = syncer_slot.set(syncer.clone());
    let feeds = futures_util::future::join_all(feeds);
    let running = syncer.clone();
    let work = async move {
        let syncer = running;
        // Nothing is decided before the super cluster's caches are filled: an empty cache would look like objects to
        // delete.
        for (index, store) in syncer.super_objects.iter().enumerate() {
            let (store, ready) = (store.clone(), syncer.clone());
            tokio::spawn(async move {
                if store.wait_until_ready().await.is_ok() {
                    ready.super_ready[index].store(true, std::sync::atomic::Ordering::SeqCst);
                }
            });
        }
        // Those tasks are the stores' only waiters: a kube-runtime store wakes one waiter.
        while !syncer.super_ready[..syncer.built_in].iter().all(|r| r.load(std::sync::atomic::Ordering::SeqCst)) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let _ = syncer.super_namespaces.wait_until_ready().await;
        let _ = syncer.super_nodes.wait_until_ready().await;
        let _ = syncer.super_volumes.wait_until_ready().await;
        let _ = syncer.super_limit_ranges.wait_until_ready().await;
        for store in &syncer.public {
            let _ = store.wait_until_ready().await;
        }
        let workers = (0..syncer.options.workers.max(1)).map(|_| sync::work(syncer.clone()));
        tokio::join!(
            futures_util::future::join_all(workers),
            tenants::discover(syncer.clone()),
            nodes::run(syncer.clone()),
            policy::follow_api_server(syncer.clone())
        );
    };
    let handle = syncer.clone();
    (
        handle,
        Box::pin(async move {
            tokio::join!(feeds, work);
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_super_pod_keeps_what_the_tenants_quota_counts() {
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n"},
            "spec": {"nodeName": "node-1", "volumes": [{"name": "v", "emptyDir": {}}],
                     "containers": [{"name": "c", "image": "i", "env": [{"name": "A", "value": "b"}],
                                     "resources": {"requests": {"cpu": "100m", "ephemeral-storage": "1Gi"},
                                                   "limits": {"cpu": "1", "memory": "1Gi"}}}],
                     "initContainers": [{"name": "i", "image": "j", "resources": {"requests": {"cpu": "2"}}}]},
            "status": {"phase": "Running"},
        });
        let mut object: DynamicObject = serde_json::from_value(pod.clone()).unwrap();
        prune_super_pod(&mut object);
        compact(&mut object, &[]);
        let cached = full(&object);
        assert!(cached["spec"].get("volumes").is_none() && cached["spec"]["containers"][0].get("env").is_none());
        assert_eq!(compute::usage_of_pod(&cached), compute::usage_of_pod(&pod));
        assert_eq!(cached["spec"]["containers"][0]["image"], "i", "images are put back on drift");
    }

    #[test]
    fn a_compacted_object_is_whole_again_and_keeps_what_every_pass_reads_at_hand() {
        let pod = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "n"},
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "podIP": "10.128.0.5", "podIPs": [{"ip": "10.128.0.5"}], "hostIP": "h"},
        });
        let mut object: DynamicObject = serde_json::from_value(pod.clone()).unwrap();
        compact(&mut object, &[]);
        assert_eq!(object.data["spec"], serde_json::json!({"nodeName": "node-1"}));
        assert_eq!(
            object.data["status"],
            serde_json::json!({"phase": "Running", "podIP": "10.128.0.5", "podIPs": [{"ip": "10.128.0.5"}]})
        );
        let mut whole = full(&object);
        whole["metadata"].as_object_mut().unwrap().retain(|_, v| !v.is_null());
        assert_eq!(whole, pod);
    }

    #[test]
    fn a_large_configmap_is_cached_as_a_digest_that_equal_data_shares() {
        let big = "x".repeat(100_000);
        let configmap = |data: serde_json::Value| {
            serde_json::from_value::<DynamicObject>(serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "n"}, "data": data,
            }))
            .unwrap()
        };
        let verbatim = &["data", "binaryData"][..];
        let mut one = configmap(serde_json::json!({"a": big, "b": "1"}));
        compact(&mut one, verbatim);
        // What the cache holds is a few hundred bytes; what the cap counts is the data's size.
        assert!(serde_json::to_string(&one).unwrap().len() < 600, "{one:?}");
        let whole = serde_json::json!({"a": big, "b": "1"}).to_string().len() as u64;
        assert!(cached_bytes(&one) > whole, "{} <= {whole}", cached_bytes(&one));
        let cached = full(&one);
        assert!(digested(&cached, verbatim) && is_digest(&cached["data"]), "{cached}");
        assert_eq!(cached["metadata"]["name"], "c");
        // The same data written in another order has the same digest; other data another.
        let mut map = serde_json::Map::new();
        map.insert("b".into(), "1".into());
        map.insert("a".into(), big.clone().into());
        let mut same = configmap(serde_json::Value::Object(map));
        compact(&mut same, verbatim);
        assert_eq!(full(&same)["data"], cached["data"]);
        let mut other = configmap(serde_json::json!({"a": big, "b": "2"}));
        compact(&mut other, verbatim);
        assert_ne!(full(&other)["data"], cached["data"]);
        // Small data stays as it is, and data that only looks like a digest is data.
        let look_alike = serde_json::json!({"nest.dev/digest": "00", "nest.dev/bytes": "5"});
        let mut small = configmap(look_alike.clone());
        compact(&mut small, verbatim);
        assert_eq!(full(&small)["data"], look_alike);
        assert!(!digested(&full(&small), verbatim));
    }
}
