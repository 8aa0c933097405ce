//! nest's syncer: makes tenant workloads real. For every tenant (a nested control plane that is ready), it copies
//! what the tenant creates — namespaces, pods, services, config maps, secrets, volume claims — into the management
//! ("super") cluster under names that cannot collide between tenants ([`names`]), and copies the results back: pod
//! status, the node a pod runs on (as a *virtual node* in the tenant), service addresses, claim status. One process
//! serves every tenant.
//!
//! - [`tenants`]: finds tenants (NestedControlPlanes that are ready, through their `<cluster>-kubeconfig` Secret),
//!   starts a watch of each synced kind in each, and removes everything of a tenant that is deleted.
//! - [`kinds`]: the registry of synced kinds and how a tenant object becomes its super object.
//! - [`sync`]: the reconcile of one object, both ways; it only ever changes super objects whose tenant UID annotation
//!   matches.
//! - [`nodes`]: virtual nodes, their status and their Leases.
//! - [`queue`]: the work queue, shared fairly between tenants.
//! - [`kubelet`]: the kubelet endpoint of each tenant's virtual nodes, for `kubectl logs` through the tenant.
//! - [`metrics`]: counters served as Prometheus text.
//!
//! A patrol per tenant enqueues every object on both sides every `patrol` interval, which repairs drift either way
//! and removes super objects whose tenant object is gone (also those deleted while the syncer was not running).

pub mod kinds;
pub mod kubelet;
pub mod metrics;
pub mod names;
pub mod nodes;
pub mod queue;
pub mod sync;
pub mod tenants;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};

use crate::kinds::Kind;
use crate::queue::Queue;
use crate::tenants::Tenant;

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
}

impl Default for Options {
    fn default() -> Self {
        Options {
            patrol: Duration::from_secs(60),
            workers: 8,
            node_grace: Duration::from_secs(60),
            kubelet_address: std::net::Ipv4Addr::LOCALHOST.into(),
        }
    }
}

/// What one reconcile works on: an object of a tenant.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Item {
    /// An object of kind `kinds[kind]`, by its tenant namespace and name.
    Object { kind: usize, namespace: String, name: String },
    /// A tenant namespace.
    Namespace(String),
}

/// What every task shares.
pub struct Syncer {
    pub super_client: Client,
    pub options: Options,
    pub kinds: Vec<Kind>,
    pub queue: Queue<Item>,
    pub tenants: RwLock<BTreeMap<String, Arc<Tenant>>>,
    /// The super objects of every tenant, one store per kind (only objects labelled with a tenant).
    pub super_objects: Vec<Store<DynamicObject>>,
    pub super_namespaces: Store<Namespace>,
    pub super_nodes: Store<Node>,
    pub metrics: metrics::Metrics,
}

impl Syncer {
    pub fn tenant(&self, key: &str) -> Option<Arc<Tenant>> {
        self.tenants.read().expect("the tenants lock").get(key).cloned()
    }
}

/// Runs the syncer against the super cluster until it stops.
pub async fn run(super_client: Client, options: Options) {
    start(super_client, options).1.await
}

/// The syncer, and the future that runs it (nothing happens until it is polled).
pub fn start(super_client: Client, options: Options) -> (Arc<Syncer>, futures_util::future::BoxFuture<'static, ()>) {
    let kinds = kinds::built_in();
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
        let feed = reflector::reflector(writer, watcher(api, tenant_selector.clone()).default_backoff())
            .touched_objects()
            .for_each(move |object| {
                if let (Ok(object), Some(syncer)) = (object, slot.get()) {
                    sync::enqueue_super(syncer, index, &object);
                }
                async {}
            });
        feeds.push(Box::pin(feed));
        super_objects.push(store);
    }
    let (super_namespaces, writer) = reflector::store::<Namespace>();
    let namespaces = Api::<Namespace>::all(super_client.clone());
    let feed = reflector::reflector(writer, watcher(namespaces, tenant_selector).default_backoff())
        .applied_objects()
        .for_each(|_| async {});
    feeds.push(Box::pin(feed));
    let (super_nodes, writer) = reflector::store::<Node>();
    let feed = reflector::reflector(
        writer,
        watcher(Api::<Node>::all(super_client.clone()), Default::default()).default_backoff(),
    )
    .applied_objects()
    .for_each(|_| async {});
    feeds.push(Box::pin(feed));
    let syncer = Arc::new(Syncer {
        super_client,
        options,
        kinds,
        queue: Queue::default(),
        tenants: RwLock::new(BTreeMap::new()),
        super_objects,
        super_namespaces,
        super_nodes,
        metrics: metrics::Metrics::default(),
    });
    let _ = syncer_slot.set(syncer.clone());
    let feeds = futures_util::future::join_all(feeds);
    let running = syncer.clone();
    let work = async move {
        let syncer = running;
        // Nothing is decided before the super cluster's caches are filled: an empty cache would look like objects to
        // delete.
        for store in &syncer.super_objects {
            let _ = store.wait_until_ready().await;
        }
        let _ = syncer.super_namespaces.wait_until_ready().await;
        let _ = syncer.super_nodes.wait_until_ready().await;
        let workers = (0..syncer.options.workers.max(1)).map(|_| sync::work(syncer.clone()));
        tokio::join!(
            futures_util::future::join_all(workers),
            tenants::discover(syncer.clone()),
            nodes::run(syncer.clone())
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
