//! nest's syncer: makes tenant workloads real. For every tenant (a nested control plane that is ready), it copies
//! what the tenant creates — namespaces, pods, services, config maps, secrets, volume claims — into the management
//! ("super") cluster under names that cannot collide between tenants ([`names`]), and copies the results back: pod
//! status, the node a pod runs on (as a *virtual node* in the tenant), service addresses, claim status. One process
//! serves every tenant.
//!
//! - [`tenants`]: finds tenants by watching NestedControlPlanes and Clusters, starts a watch of each synced kind in
//!   each (through its `<cluster>-kubeconfig` Secret), and removes everything of a tenant that is deleted, as its
//!   [`lifecycle`] (a state machine) says.
//! - [`kinds`]: the table of synced kinds, one file per kind: how a tenant object becomes its super object, and
//!   the kind's [`kinds::Hooks`] (what it needs first, how it is repaired, what goes up, what goes with it).
//! - [`sync`]: the workers: each takes an [`Item`] from the queue and reconciles it, retrying failures.
//! - [`object`]: the reconcile of one tenant object of a synced kind, both ways, the same for every kind; it only
//!   ever changes super objects whose tenant UID annotation matches. Its requests go through
//!   [`requests::Requests`], which unit tests fake; [`caps`] holds it to the tenant's caps and quota.
//! - [`namespaces`]: tenant namespaces, their super namespaces, Pod Security labels and LimitRanges.
//! - [`nodes`]: virtual nodes, their status and their Leases.
//! - [`events`]: Events about tenants' objects, copied up; [`public`]: storage classes, priority classes and CRDs
//!   the super cluster marks public, copied into every tenant.
//! - [`volumes`]: PersistentVolumes the super cluster bound to tenants' claims, copied up.
//! - [`queue`]: the work queue, shared fairly between tenants.
//! - [`kubelet`]: the kubelet endpoint of each tenant's virtual nodes, for `kubectl logs`, `exec`, `attach` and
//!   `port-forward` through the tenant.
//! - [`addresses`]: which addresses a tenant's Endpoints may name.
//! - [`policy`]: what a tenant may ask of the management cluster; [`compute`]: what its pods may take of it (container
//!   defaults as a LimitRange in each super namespace, a quota over all of them, its share of the node).
//! - [`metrics`]: counters served as Prometheus text.
//!
//! A patrol per tenant enqueues every object on both sides every `patrol` interval, which repairs drift either way
//! and removes super objects whose tenant object is gone (also those deleted while the syncer was not running).

pub mod addresses;
pub mod caps;
pub mod compute;
pub mod events;
pub mod kinds;
pub mod kubelet;
pub mod lifecycle;
pub mod metrics;
pub mod names;
pub mod namespaces;
pub mod nodes;
pub mod object;
pub mod policy;
pub mod public;
pub mod queue;
pub mod requests;
pub mod sync;
pub mod tenants;
pub mod tokens;
pub mod volumes;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Event, LimitRange, Namespace, Node, PersistentVolume};
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use crate::kinds::{Kind, KindId};
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
    /// An object of synced kind `kind`, by its tenant namespace and name.
    Object { kind: KindId, namespace: String, name: String },
    /// A tenant namespace.
    Namespace(String),
    /// A super Event, by its super namespace and name, told to the tenant whose object it is about.
    Event { namespace: String, name: String },
    /// A public super object of kind `Syncer::public[kind]` ([`kinds::public`]), copied into the tenant.
    Public { kind: usize, name: String },
    /// A super PersistentVolume bound to a claim of the tenant, copied into the tenant.
    Volume(String),
}

/// The objects of one synced kind on one side (the super cluster, or a tenant) as a watch keeps them, and whether
/// that watch has filled it once: an object of a kind whose caches are not filled on both sides waits, so that
/// nothing is deleted for lack of news (a custom resource's cache fills only once its CRD exists).
pub struct Cache {
    pub objects: Store<DynamicObject>,
    resource: ApiResource,
    filled: AtomicBool,
}

impl Cache {
    /// A cache of `resource` read from `objects`, not yet filled.
    pub fn new(objects: Store<DynamicObject>, resource: ApiResource) -> Cache {
        Cache { objects, resource, filled: AtomicBool::new(false) }
    }

    /// The object `namespace/name`, if the cache has it.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<DynamicObject>> {
        self.objects.get(&ObjectRef::new_with(name, self.resource.clone()).within(namespace))
    }

    /// Whether its watch has filled it once.
    pub fn is_filled(&self) -> bool {
        self.filled.load(Ordering::SeqCst)
    }

    /// Records that its watch has filled it.
    pub fn set_filled(&self) {
        self.filled.store(true, Ordering::SeqCst);
    }
}

/// One synced kind as the syncer holds it: the kind, and the super cluster's objects of it (only those labelled
/// with a tenant).
struct Synced {
    kind: Kind,
    objects: Cache,
}

/// A kind the super cluster shares with every tenant ([`kinds::public`]), and its public objects.
pub struct Public {
    /// The plural resource name (`storageclasses`).
    pub name: &'static str,
    pub resource: ApiResource,
    pub objects: Store<DynamicObject>,
}

/// What every task shares.
pub struct Syncer {
    pub super_client: Client,
    pub options: Options,
    /// The synced kinds, built-in first, with the super cluster's objects of each: found by [`KindId`].
    kinds: Vec<Synced>,
    pub queue: Queue<Item>,
    /// The tenants that have been started (their clients, watches and caches), by key.
    pub tenants: RwLock<BTreeMap<String, Arc<Tenant>>>,
    /// The management cluster's API server addresses (its `default/kubernetes` Service and Endpoints), which no
    /// tenant Endpoints may name; refreshed every minute.
    pub api_addresses: RwLock<std::collections::BTreeSet<std::net::IpAddr>>,
    /// Where every known tenant is in its life ([`lifecycle`]), by key: the one record of it.
    pub lifecycle: std::sync::Mutex<BTreeMap<String, lifecycle::Phase>>,
    /// How many of the kinds are built in (the rest are configured custom resources).
    pub built_in: usize,
    pub super_namespaces: Store<Namespace>,
    pub super_nodes: Store<Node>,
    /// Events in the super cluster (those of tenants' objects are copied up).
    pub super_events: Store<Event>,
    /// The kinds the super cluster shares, and their objects.
    pub public: Vec<Public>,
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

    /// Synced kind `id`.
    pub fn kind(&self, id: KindId) -> &Kind {
        &self.kinds[id.index()].kind
    }

    /// The super cluster's objects of synced kind `id`.
    pub fn super_cache(&self, id: KindId) -> &Cache {
        &self.kinds[id.index()].objects
    }

    /// The super object `namespace/name` of synced kind `id`, as the cache has it.
    pub fn super_object(&self, id: KindId, namespace: &str, name: &str) -> Option<Arc<DynamicObject>> {
        self.super_cache(id).get(namespace, name)
    }

    /// Every synced kind, built-in first.
    pub fn kind_ids(&self) -> impl Iterator<Item = KindId> + use<> {
        (0..self.kinds.len()).map(KindId::new)
    }

    /// The synced kind of plural resource name `plural`, if it is synced.
    pub fn find_kind(&self, plural: &str) -> Option<KindId> {
        self.kinds.iter().position(|synced| synced.kind.name == plural).map(KindId::new)
    }
}

/// A watch that feeds a cache (and the queue), run with the syncer.
type Feed = futures_util::future::BoxFuture<'static, ()>;

/// Where the feeds find the syncer, set once it exists (they are made before it, and run only after).
type Slot = Arc<std::sync::OnceLock<Arc<Syncer>>>;

/// Runs the syncer against the super cluster until it stops.
pub async fn run(super_client: Client, options: Options) {
    start(super_client, options).1.await
}

/// The syncer, and the future that runs it (nothing happens until it is polled).
pub fn start(super_client: Client, options: Options) -> (Arc<Syncer>, futures_util::future::BoxFuture<'static, ()>) {
    let mut kinds = kinds::built_in();
    let built_in = kinds.len();
    kinds.extend(options.custom.iter().map(|(group, version, kind)| kinds::custom(group, version, kind)));
    let mut feeds: Vec<Feed> = Vec::new();
    let slot: Slot = Arc::new(std::sync::OnceLock::new());
    let kinds = kinds
        .into_iter()
        .enumerate()
        .map(|(index, kind)| {
            let (objects, feed) = watch_kind(&super_client, KindId::new(index), &kind, slot.clone());
            feeds.push(feed);
            Synced { kind, objects }
        })
        .collect();
    let cluster = watch_super_cluster(&super_client, &slot, &mut feeds);
    let public = kinds::public()
        .into_iter()
        .enumerate()
        .map(|(index, (name, resource))| {
            let (objects, feed) = watch_public(&super_client, index, &resource, slot.clone());
            feeds.push(feed);
            Public { name, resource, objects }
        })
        .collect();
    let syncer = Arc::new(assemble(super_client, options, kinds, built_in, cluster, public));
    let _ = slot.set(syncer.clone());
    let feeds = futures_util::future::join_all(feeds);
    let work = work(syncer.clone());
    (
        syncer,
        Box::pin(async move {
            tokio::join!(feeds, work);
        }),
    )
}

/// The syncer of `kinds` (the first `built_in` of them built in), over the caches of the super cluster given.
fn assemble(
    super_client: Client,
    options: Options,
    kinds: Vec<Synced>,
    built_in: usize,
    cluster: SuperCluster,
    public: Vec<Public>,
) -> Syncer {
    let kubelet_connections = nest_kubelet_server::Connections::new(options.kubelet_limits.clone());
    Syncer {
        super_client,
        options,
        kinds,
        built_in,
        queue: Queue::default(),
        tenants: RwLock::new(BTreeMap::new()),
        lifecycle: std::sync::Mutex::new(BTreeMap::new()),
        api_addresses: RwLock::new(Default::default()),
        super_namespaces: cluster.namespaces,
        super_nodes: cluster.nodes,
        super_events: cluster.events,
        public,
        super_volumes: cluster.volumes,
        super_limit_ranges: cluster.limit_ranges,
        metrics: metrics::Metrics::default(),
        failures: Default::default(),
        kubelet_connections,
    }
}

#[cfg(test)]
impl Syncer {
    /// A syncer of the built-in kinds whose caches are filled by hand (through the writers returned, one per kind)
    /// and whose client reaches nothing, for unit tests of what it decides.
    pub(crate) fn for_tests(
        super_client: Client,
        options: Options,
    ) -> (Syncer, Vec<reflector::store::Writer<DynamicObject>>) {
        let mut writers = Vec::new();
        let kinds: Vec<Synced> = kinds::built_in()
            .into_iter()
            .map(|kind| {
                let writer = reflector::store::Writer::<DynamicObject>::new(kind.resource.clone());
                let objects = Cache::new(writer.as_reader(), kind.resource.clone());
                writers.push(writer);
                Synced { kind, objects }
            })
            .collect();
        let cluster = SuperCluster {
            namespaces: reflector::store().0,
            nodes: reflector::store().0,
            events: reflector::store().0,
            volumes: reflector::store().0,
            limit_ranges: reflector::store().0,
        };
        let built_in = kinds.len();
        (assemble(super_client, options, kinds, built_in, cluster, Vec::new()), writers)
    }
}

/// The watch of the super objects of synced kind `id` (those labelled with a tenant), and its cache: each object
/// is pruned as the kind says and compacted; a changed one queues the tenant object it stands for.
fn watch_kind(client: &Client, id: KindId, kind: &Kind, slot: Slot) -> (Cache, Feed) {
    let writer = reflector::store::Writer::<DynamicObject>::new(kind.resource.clone());
    let store = writer.as_reader();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &kind.resource);
    let (prune, verbatim) = (kind.prune, kind.verbatim);
    let selector = watcher::Config::default().labels(names::TENANT_LABEL);
    let stream = watcher(api, selector).backoff(Retry::new()).modify(move |object| {
        if let Some(prune) = prune {
            prune(object);
        }
        // The pods' token Secrets are the syncer's own, and it reads which tokens they hold.
        let own = object.metadata.name.as_deref().is_some_and(|n| n.starts_with(tokens::SECRET_PREFIX));
        compact(object, if own { &[] } else { verbatim });
    });
    let feed = reflector::reflector(writer, stream).touched_objects().for_each(move |object| {
        match (object, slot.get()) {
            (Ok(object), Some(syncer)) => sync::enqueue_super(syncer, id, &object),
            (Err(error), _) => tracing::debug!(%error, "watching the super cluster"),
            _ => {}
        }
        async {}
    });
    (Cache::new(store, kind.resource.clone()), Box::pin(feed))
}

/// The caches of the super cluster's own objects the syncer reads.
struct SuperCluster {
    namespaces: Store<Namespace>,
    nodes: Store<Node>,
    events: Store<Event>,
    volumes: Store<PersistentVolume>,
    limit_ranges: Store<LimitRange>,
}

/// Watches the super cluster's tenant namespaces, nodes, Events, PersistentVolumes and tenants' LimitRanges; their
/// feeds go to `feeds`.
fn watch_super_cluster(client: &Client, slot: &Slot, feeds: &mut Vec<Feed>) -> SuperCluster {
    let tenant_selector = || watcher::Config::default().labels(names::TENANT_LABEL);
    let (namespaces, feed) =
        nest_client::cache_then(Api::<Namespace>::all(client.clone()), tenant_selector(), Retry::new(), |_| {});
    feeds.push(Box::pin(feed));
    let (nodes, feed) =
        nest_client::cache_then(Api::<Node>::all(client.clone()), Default::default(), Retry::new(), |_| {});
    feeds.push(Box::pin(feed));
    let slot_of_events = slot.clone();
    let (events, feed) =
        nest_client::cache_then(Api::<Event>::all(client.clone()), Default::default(), Retry::new(), move |seen| {
            if let (nest_client::Seen::Applied(event), Some(syncer)) = (seen, slot_of_events.get()) {
                sync::enqueue_event(syncer, event);
            }
        });
    feeds.push(Box::pin(feed));
    let slot_of_volumes = slot.clone();
    let (volumes, feed) = nest_client::cache_then(
        Api::<PersistentVolume>::all(client.clone()),
        Default::default(),
        Retry::new(),
        move |seen| {
            let (nest_client::Seen::Applied(volume) | nest_client::Seen::Deleted(volume)) = seen;
            if let Some(syncer) = slot_of_volumes.get() {
                volumes::enqueue(syncer, volume);
            }
        },
    );
    feeds.push(Box::pin(feed));
    // The tenants' LimitRanges: one changed or deleted by someone else is put back by its namespace's reconcile.
    let slot_of_ranges = slot.clone();
    let (limit_ranges, feed) =
        nest_client::cache_then(Api::<LimitRange>::all(client.clone()), tenant_selector(), Retry::new(), move |seen| {
            let (nest_client::Seen::Applied(range) | nest_client::Seen::Deleted(range)) = seen;
            if let Some(syncer) = slot_of_ranges.get() {
                sync::enqueue_namespace_of(syncer, range.metadata.namespace.as_deref().unwrap_or_default());
            }
        });
    feeds.push(Box::pin(feed));
    SuperCluster { namespaces, nodes, events, volumes, limit_ranges }
}

/// The watch of the public objects of shared kind `index` (labelled [`names::PUBLIC_LABEL`] `"true"`), which
/// queues each changed one for every tenant, and its cache.
fn watch_public(client: &Client, index: usize, resource: &ApiResource, slot: Slot) -> (Store<DynamicObject>, Feed) {
    let writer = reflector::store::Writer::<DynamicObject>::new(resource.clone());
    let store = writer.as_reader();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), resource);
    let selector = watcher::Config::default().labels(&format!("{}=true", names::PUBLIC_LABEL));
    let feed = reflector::reflector(writer, watcher(api, selector).backoff(Retry::new())).touched_objects().for_each(
        move |object| {
            if let (Ok(object), Some(syncer)) = (object, slot.get()) {
                let keys: Vec<String> = syncer.tenants.read().expect("the tenants lock").keys().cloned().collect();
                for key in keys {
                    syncer.queue.add(&key, Item::Public { kind: index, name: object.name_any() });
                }
            }
            async {}
        },
    );
    (store, Box::pin(feed))
}

/// Once the super cluster's caches are filled (nothing is decided before: an empty cache would look like objects
/// to delete), the workers, the tenants' discovery, the virtual nodes and the API server's addresses.
async fn work(syncer: Arc<Syncer>) {
    for id in syncer.kind_ids() {
        let (store, ready) = (syncer.super_cache(id).objects.clone(), syncer.clone());
        tokio::spawn(async move {
            if store.wait_until_ready().await.is_ok() {
                ready.super_cache(id).set_filled();
            }
        });
    }
    // Those tasks are the stores' only waiters: a kube-runtime store wakes one waiter.
    while !syncer.kind_ids().take(syncer.built_in).all(|id| syncer.super_cache(id).is_filled()) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let _ = syncer.super_namespaces.wait_until_ready().await;
    let _ = syncer.super_nodes.wait_until_ready().await;
    let _ = syncer.super_volumes.wait_until_ready().await;
    let _ = syncer.super_limit_ranges.wait_until_ready().await;
    for public in &syncer.public {
        let _ = public.objects.wait_until_ready().await;
    }
    let workers = (0..syncer.options.workers.max(1)).map(|_| sync::work(syncer.clone()));
    tokio::join!(
        futures_util::future::join_all(workers),
        tenants::discover(syncer.clone()),
        nodes::run(syncer.clone()),
        policy::follow_api_server(syncer.clone())
    );
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
        kinds::prune_super_pod(&mut object);
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
