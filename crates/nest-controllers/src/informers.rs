//! Shared caches, after client-go's shared informers: one watch and one cache per kind for the whole
//! controller-manager, which every controller reads instead of listing over HTTP on each reconcile (a Deployment's
//! pass used to read every ReplicaSet of its namespace from the API server, a ReplicaSet's every pod).
//!
//! - [`Informer`]: the cache of one kind, fed by one watch, and a stream of what changes in it for each controller
//!   that subscribes (replaying what the cache holds first, as an informer does for a handler added late, so a
//!   controller restarted after a panic sees everything again).
//! - [`Informers`]: the caches of every kind the controllers read, built once when this instance starts to lead.
//! - [`Reconciling`]: a kube-runtime controller whose triggers are subscriptions (its own kind, the children it owns,
//!   other kinds mapped to it) and which reconciles nothing before every cache it reads has listed once (upstream's
//!   `WaitForCacheSync`).
//! - [`Expectations`]: what a controller wrote that its cache does not show yet (upstream's
//!   `ControllerExpectations`), so that a ReplicaSet whose new pods the cache has not seen does not create them again.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, ReplicationController, Service,
    ServiceAccount,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::controller::{Action, Config};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::utils::CancelableJoinHandle;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};

/// What a cached kind must be: a built-in type the watch can read.
pub(crate) trait Kind:
    Resource<DynamicType = ()> + Clone + k8s_openapi::serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static
{
}

impl<K> Kind for K where
    K: Resource<DynamicType = ()>
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// What the watch reported about one object, once the cache holds it.
#[derive(Debug)]
pub(crate) enum Change<K> {
    /// New to the cache: created, or listed for the first time.
    Added(Arc<K>),
    /// Changed, or replayed to a new subscriber.
    Changed(Arc<K>),
    /// Gone: deleted, or missing from a new list after the watch broke (its last state as the cache had it).
    Deleted(Arc<K>),
}

impl<K> Clone for Change<K> {
    fn clone(&self) -> Self {
        match self {
            Change::Added(object) => Change::Added(object.clone()),
            Change::Changed(object) => Change::Changed(object.clone()),
            Change::Deleted(object) => Change::Deleted(object.clone()),
        }
    }
}

impl<K> Change<K> {
    pub(crate) fn object(&self) -> &Arc<K> {
        match self {
            Change::Added(object) | Change::Changed(object) | Change::Deleted(object) => object,
        }
    }
}

/// A lock whose holder panicked still guards consistent data here (every change under it is one call), so it is
/// taken anyway: one controller's panic must not stop the others.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The cache of one kind, fed by one watch of all its objects, shared by every controller that reads it.
pub(crate) struct Informer<K: Kind> {
    shared: Arc<Shared<K>>,
}

impl<K: Kind> Clone for Informer<K> {
    fn clone(&self) -> Self {
        Informer { shared: self.shared.clone() }
    }
}

struct Shared<K: Kind> {
    api: Api<K>,
    config: watcher::Config,
    writer: Mutex<Writer<K>>,
    store: Store<K>,
    /// Whether the cache holds a first complete list. Kept here rather than read from the store, whose readiness
    /// wakes only the last of several waiters.
    synced: tokio::sync::watch::Sender<bool>,
    /// One unbounded queue per subscriber, as client-go's per-handler buffer: a slow controller never holds the
    /// watch (nor the others) back, and never misses a change.
    subscribers: Mutex<Vec<tokio::sync::mpsc::UnboundedSender<Change<K>>>>,
}

impl<K: Kind> Informer<K> {
    /// The cache of what `api` lists; empty until [`feed`](Self::feed) runs.
    pub(crate) fn new(api: Api<K>) -> Self {
        Informer::with_config(api, watcher::Config::default())
    }

    /// The cache of what `api` lists as `config` selects.
    pub(crate) fn with_config(api: Api<K>, config: watcher::Config) -> Self {
        let writer = Writer::default();
        let store = writer.as_reader();
        let shared = Shared {
            api,
            config,
            writer: Mutex::new(writer),
            store,
            synced: tokio::sync::watch::Sender::new(false),
            subscribers: Mutex::default(),
        };
        Informer { shared: Arc::new(shared) }
    }

    /// A reader of the cache.
    pub(crate) fn store(&self) -> Store<K> {
        self.shared.store.clone()
    }

    /// Waits until the cache holds the first complete list.
    pub(crate) async fn synced(&self) {
        // The sender lives as long as the informer: this never fails.
        let _ = self.shared.synced.subscribe().wait_for(|synced| *synced).await;
    }

    /// [`synced`](Self::synced), owning what it waits on.
    pub(crate) fn until_synced(&self) -> BoxFuture<'static, ()> {
        let informer = self.clone();
        Box::pin(async move { informer.synced().await })
    }

    /// Keeps the cache up to date with its watch (retried with back-off), until the task is dropped.
    pub(crate) async fn feed(self) {
        let events = watcher(self.shared.api.clone(), self.shared.config.clone()).default_backoff();
        self.take(events).await;
    }

    async fn take(&self, events: impl Stream<Item = watcher::Result<watcher::Event<K>>>) {
        let mut events = std::pin::pin!(events);
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => self.apply(event),
                Err(error) => tracing::debug!(%error, kind = %K::kind(&()), "watch"),
            }
        }
    }

    /// Takes one watch event into the cache, then tells every subscriber what it changed.
    fn apply(&self, event: watcher::Event<K>) {
        let store = &self.shared.store;
        let key = |object: &K| (ObjectRef::from_obj(object), object.uid());
        let changes = match event {
            watcher::Event::Init | watcher::Event::InitApply(_) => {
                lock(&self.shared.writer).apply_watcher_event(&event);
                return;
            }
            watcher::Event::Apply(object) => {
                let added = store.get(&ObjectRef::from_obj(&object)).is_none_or(|old| old.uid() != object.uid());
                lock(&self.shared.writer).apply_watcher_event(&watcher::Event::Apply(object.clone()));
                let object = store.get(&ObjectRef::from_obj(&object)).unwrap_or_else(|| Arc::new(object));
                vec![if added { Change::Added(object) } else { Change::Changed(object) }]
            }
            watcher::Event::Delete(object) => {
                lock(&self.shared.writer).apply_watcher_event(&watcher::Event::Delete(object.clone()));
                vec![Change::Deleted(Arc::new(object))]
            }
            watcher::Event::InitDone => {
                // A new complete list: what it has that the cache had not is new, what the cache had that it lacks
                // went while the watch was broken (upstream's DeletedFinalStateUnknown).
                let before = store.state();
                lock(&self.shared.writer).apply_watcher_event(&watcher::Event::InitDone);
                let after = store.state();
                tracing::debug!(kind = %K::kind(&()), objects = after.len(), "listed");
                self.shared.synced.send_replace(true);
                let known: HashSet<_> = before.iter().map(|o| key(o)).collect();
                let present: HashSet<_> = after.iter().map(|o| key(o)).collect();
                let gone = before.into_iter().filter(|o| !present.contains(&key(o))).map(Change::Deleted);
                let listed = after
                    .into_iter()
                    .map(|o| if known.contains(&key(&o)) { Change::Changed(o) } else { Change::Added(o) });
                listed.chain(gone).collect()
            }
        };
        let mut subscribers = lock(&self.shared.subscribers);
        subscribers.retain(|subscriber| changes.iter().all(|change| subscriber.send(change.clone()).is_ok()));
    }

    /// Every change from now on, after what the cache holds now (nothing before its first list, which then comes as
    /// changes): a subscriber sees each object at least once, and every later change of it.
    pub(crate) fn subscribe(&self) -> impl Stream<Item = Change<K>> + Send + 'static {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        {
            // Under the subscribers' lock, so no change is told between the replay and the subscription.
            let mut subscribers = lock(&self.shared.subscribers);
            for object in self.shared.store.state() {
                let _ = sender.send(Change::Changed(object));
            }
            subscribers.push(sender);
        }
        futures_util::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|change| (change, receiver))
        })
    }
}

/// What a list from the API server would have returned: the objects in `cache` that `keep` picks, in the server's
/// order (by namespace, then name; a cache's own order changes from one read to the next, and what a controller
/// writes from it, such as the addresses of an Endpoints object, must not).
pub(crate) fn listed<K: Kind>(cache: &Store<K>, keep: impl Fn(&K) -> bool) -> Vec<Arc<K>> {
    let mut objects = cache.state_filter(keep);
    objects.sort_by(|a, b| {
        (a.meta().namespace.as_deref(), a.meta().name.as_deref())
            .cmp(&(b.meta().namespace.as_deref(), b.meta().name.as_deref()))
    });
    objects
}

/// The caches of every kind the controllers read, one each, built when this instance starts to lead.
#[derive(Clone)]
pub(crate) struct Informers {
    pub namespaces: Informer<Namespace>,
    /// Only each namespace's `default` ServiceAccount, which is all the controllers read of that kind.
    pub default_accounts: Informer<ServiceAccount>,
    /// Only each namespace's root CA ConfigMap, likewise.
    pub root_ca_configmaps: Informer<ConfigMap>,
    pub pods: Informer<Pod>,
    pub nodes: Informer<Node>,
    pub services: Informer<Service>,
    pub endpoint_slices: Informer<EndpointSlice>,
    pub replica_sets: Informer<ReplicaSet>,
    pub replication_controllers: Informer<ReplicationController>,
    pub deployments: Informer<Deployment>,
    pub daemon_sets: Informer<DaemonSet>,
    pub stateful_sets: Informer<StatefulSet>,
    pub controller_revisions: Informer<ControllerRevision>,
    pub jobs: Informer<Job>,
    pub claims: Informer<PersistentVolumeClaim>,
    pub volumes: Informer<PersistentVolume>,
}

/// A part of the controller-manager: its name and how to start it (again, after a panic).
pub(crate) type Part = (&'static str, Box<dyn FnMut() -> BoxFuture<'static, ()> + Send>);

impl Informers {
    pub(crate) fn new(client: &Client) -> Informers {
        fn all<K: Kind>(client: &Client) -> Informer<K> {
            Informer::new(Api::all(client.clone()))
        }
        let named = |name: &str| watcher::Config::default().fields(&format!("metadata.name={name}"));
        Informers {
            namespaces: all(client),
            default_accounts: Informer::with_config(Api::all(client.clone()), named("default")),
            root_ca_configmaps: Informer::with_config(
                Api::all(client.clone()),
                named(crate::serviceaccount::ROOT_CA_CONFIGMAP),
            ),
            pods: all(client),
            nodes: all(client),
            services: all(client),
            endpoint_slices: all(client),
            replica_sets: all(client),
            replication_controllers: all(client),
            deployments: all(client),
            daemon_sets: all(client),
            stateful_sets: all(client),
            controller_revisions: all(client),
            jobs: all(client),
            claims: all(client),
            volumes: all(client),
        }
    }

    /// The watches that feed the caches, each a part of its own.
    pub(crate) fn feeds(&self) -> Vec<Part> {
        fn feed<K: Kind>(name: &'static str, informer: &Informer<K>) -> Part {
            let informer = informer.clone();
            (name, Box::new(move || Box::pin(informer.clone().feed())))
        }
        vec![
            feed("informer-namespaces", &self.namespaces),
            feed("informer-serviceaccounts", &self.default_accounts),
            feed("informer-configmaps", &self.root_ca_configmaps),
            feed("informer-pods", &self.pods),
            feed("informer-nodes", &self.nodes),
            feed("informer-services", &self.services),
            feed("informer-endpointslices", &self.endpoint_slices),
            feed("informer-replicasets", &self.replica_sets),
            feed("informer-replicationcontrollers", &self.replication_controllers),
            feed("informer-deployments", &self.deployments),
            feed("informer-daemonsets", &self.daemon_sets),
            feed("informer-statefulsets", &self.stateful_sets),
            feed("informer-controllerrevisions", &self.controller_revisions),
            feed("informer-jobs", &self.jobs),
            feed("informer-persistentvolumeclaims", &self.claims),
            feed("informer-persistentvolumes", &self.volumes),
        ]
    }
}

/// A controller of kind `K` driven by subscriptions to shared caches, as kube-runtime's `Controller` is by watches
/// of its own.
pub(crate) struct Reconciling<K: Kind> {
    store: Store<K>,
    triggers: Vec<BoxStream<'static, ObjectRef<K>>>,
    synced: Vec<BoxFuture<'static, ()>>,
}

impl<K: Kind> Reconciling<K> {
    /// Reconciles every object of `primary` when it changes.
    pub(crate) fn new(primary: &Informer<K>) -> Self {
        let trigger = primary.subscribe().map(|change| ObjectRef::from_obj(&**change.object())).boxed();
        Reconciling { store: primary.store(), triggers: vec![trigger], synced: vec![primary.until_synced()] }
    }

    /// And its owner when one of `children` changes, after `expectations` has seen the change.
    pub(crate) fn owns<C: Kind>(mut self, children: &Informer<C>, expectations: &Expectations<C>) -> Self {
        let expectations = expectations.clone();
        let trigger = children.subscribe().flat_map(move |change| {
            expectations.observe(&change);
            let child = change.object();
            let namespace = child.namespace();
            let owners: Vec<ObjectRef<K>> = child
                .owner_references()
                .iter()
                .filter_map(|owner| ObjectRef::from_owner_ref(namespace.as_deref(), owner, ()))
                .collect();
            futures_util::stream::iter(owners)
        });
        self.triggers.push(trigger.boxed());
        self.reads(children)
    }

    /// Only lets `expectations` see the changes of `children` (what its own writes of them cause does not reconcile
    /// the owner again).
    pub(crate) fn expects<C: Kind>(mut self, children: &Informer<C>, expectations: &Expectations<C>) -> Self {
        let expectations = expectations.clone();
        let observed = children.subscribe().filter_map(move |change| {
            expectations.observe(&change);
            std::future::ready(None)
        });
        self.triggers.push(observed.boxed());
        self.reads(children)
    }

    /// And the objects `map` names when one of `others` changes.
    pub(crate) fn watches<O: Kind>(
        mut self,
        others: &Informer<O>,
        map: impl Fn(&O) -> Vec<ObjectRef<K>> + Send + 'static,
    ) -> Self {
        let trigger = others.subscribe().flat_map(move |change| futures_util::stream::iter(map(change.object())));
        self.triggers.push(trigger.boxed());
        self.reads(others)
    }

    /// Reconciles nothing before the cache of `other`, which the reconcile reads, has listed once.
    pub(crate) fn reads<O: Kind>(self, other: &Informer<O>) -> Self {
        self.after(other.until_synced())
    }

    /// Reconciles nothing before `synced` is done.
    pub(crate) fn after(mut self, synced: BoxFuture<'static, ()>) -> Self {
        self.synced.push(synced);
        self
    }

    /// Runs `reconcile` (each in a task of its own, as kube-runtime's `Controller::run`) for every trigger once
    /// every cache has synced; a failed reconcile is retried as `error_policy` says.
    pub(crate) fn run<Ctx, F, Fut, E>(
        self,
        mut reconcile: F,
        error_policy: impl Fn(Arc<K>, &E, Arc<Ctx>) -> Action,
        context: Arc<Ctx>,
    ) -> impl Stream<Item = Result<(ObjectRef<K>, Action), kube::runtime::controller::Error<E, std::convert::Infallible>>>
    where
        F: FnMut(Arc<K>, Arc<Ctx>) -> Fut,
        Fut: std::future::Future<Output = Result<Action, E>> + Send + 'static,
        E: std::error::Error + Send + 'static,
    {
        let Reconciling { store, triggers, synced } = self;
        // The applier is made only once the caches have synced: it waits for its store's readiness itself, which
        // wakes only the last of several waiters (two controllers of one kind would wait for ever), and is at once
        // ready then. The subscriptions keep every change meanwhile.
        futures_util::stream::once(async move {
            futures_util::future::join_all(synced).await;
            tracing::debug!(kind = %K::kind(&()), "caches synced: reconciling");
            let queue = futures_util::stream::select_all(triggers).map(Ok::<_, std::convert::Infallible>);
            kube::runtime::applier(
                move |object, context| {
                    CancelableJoinHandle::spawn(reconcile(object, context), &tokio::runtime::Handle::current())
                },
                error_policy,
                context,
                store,
                queue,
                Config::default(),
            )
        })
        .flatten()
    }
}

/// How long a controller waits for its cache to show what it wrote before it acts anyway (upstream's
/// `ExpectationsTimeout`): only a watch that lost events gets there.
const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(300);

/// What a controller wrote for each owner that its cache of kind `K` does not show yet, as upstream's
/// `ControllerExpectations`: a ReplicaSet that has just created pods must not count them missing and create them
/// again, nor count a pod it has just deleted. Creations are counted before they are asked for (their names are the
/// server's) and met by the watch's `Added` changes of the owner's children; changes and deletions are met once the
/// cache holds another version of the object, or none. While an owner's are unmet its controller only waits.
pub(crate) struct Expectations<K: Kind> {
    store: Store<K>,
    pending: Arc<Mutex<HashMap<String, Pending<K>>>>,
}

impl<K: Kind> Clone for Expectations<K> {
    fn clone(&self) -> Self {
        Expectations { store: self.store.clone(), pending: self.pending.clone() }
    }
}

/// One owner's unmet expectations.
struct Pending<K: Kind> {
    since: Instant,
    creations: usize,
    /// Objects changed or deleted, with the version read before.
    changes: Vec<(ObjectRef<K>, Option<String>)>,
}

impl<K: Kind> Expectations<K> {
    pub(crate) fn new(children: &Informer<K>) -> Self {
        Expectations { store: children.store(), pending: Arc::default() }
    }

    fn with(&self, owner: &str, f: impl FnOnce(&mut Pending<K>)) {
        let mut pending = lock(&self.pending);
        let entry = pending.entry(owner.to_string()).or_insert_with(|| Pending {
            since: Instant::now(),
            creations: 0,
            changes: Vec::new(),
        });
        entry.since = Instant::now();
        f(entry);
    }

    /// `owner` is about to ask for `count` new children.
    pub(crate) fn expect_creations(&self, owner: &str, count: usize) {
        if count > 0 {
            self.with(owner, |p| p.creations += count);
        }
    }

    /// One creation `owner` asked for failed: no child will come of it.
    pub(crate) fn creation_failed(&self, owner: &str) {
        self.with(owner, |p| p.creations = p.creations.saturating_sub(1));
    }

    /// `owner` is about to change or delete `object`, as the cache holds it.
    pub(crate) fn expect_change(&self, owner: &str, object: &K) {
        let read = object.resource_version();
        self.with(owner, |p| p.changes.push((ObjectRef::from_obj(object), read)));
    }

    /// Takes the server's answer to a change of `object` that `owner` expects (`version` reads the version of the
    /// object in it, if it holds one): a change refused, or answered with the version read (it changed nothing, as
    /// deleting what is already being deleted, so no watch event will come of it), is not waited for.
    pub(crate) fn answered<T>(
        &self,
        owner: &str,
        object: &K,
        answer: &kube::Result<T>,
        version: impl Fn(&T) -> Option<String>,
    ) {
        let read = object.resource_version();
        let void = answer.as_ref().map_or(true, |answer| version(answer).is_some_and(|v| Some(v) == read));
        if void {
            let reference = ObjectRef::from_obj(object);
            self.with(owner, |p| {
                if let Some(at) = p.changes.iter().position(|(r, _)| *r == reference) {
                    p.changes.remove(at);
                }
            });
        }
    }

    /// [`answered`](Self::answered), then the answer as `done` reads it ([`nest_client::done_unless_refused`] or
    /// [`nest_client::done_unless_gone_or_changed`]).
    pub(crate) fn settle<T>(
        &self,
        owner: &str,
        object: &K,
        answer: kube::Result<T>,
        version: impl Fn(&T) -> Option<String>,
        done: fn(kube::Result<T>) -> kube::Result<bool>,
    ) -> kube::Result<bool> {
        self.answered(owner, object, &answer, version);
        done(answer)
    }

    /// Takes what the watch reported: a new child counts toward its controller's creations.
    fn observe(&self, change: &Change<K>) {
        let Change::Added(child) = change else { return };
        let Some(owner) = crate::replicaset::controller_of(child.meta()) else { return };
        if let Some(pending) = lock(&self.pending).get_mut(&owner.uid) {
            pending.creations = pending.creations.saturating_sub(1);
        }
    }

    /// Whether the cache shows everything written for `owner` (or it waited too long for it); what it shows is
    /// forgotten.
    pub(crate) fn satisfied(&self, owner: &str) -> bool {
        let mut pending = lock(&self.pending);
        let Some(entry) = pending.get_mut(owner) else { return true };
        entry.changes.retain(|(reference, read)| {
            self.store.get(reference).is_some_and(|cached| cached.resource_version() == *read)
        });
        let met = entry.creations == 0 && entry.changes.is_empty();
        if met || entry.since.elapsed() > EXPECTATIONS_TIMEOUT {
            if !met {
                tracing::warn!(%owner, kind = %K::kind(&()), "the cache never showed what was written; acting anyway");
            }
            pending.remove(owner);
            return true;
        }
        false
    }
}

/// The version of the object in a write's answer.
pub(crate) fn version_of<K: Resource>(object: &K) -> Option<String> {
    object.meta().resource_version.clone()
}

/// How soon an owner whose expectations are unmet is looked at again (its children's changes usually come first).
pub(crate) const EXPECTING: Duration = Duration::from_millis(500);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, uid: &str, version: &str, owner: Option<&str>) -> Pod {
        let owners: Vec<serde_json::Value> = owner
            .map(|uid| json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": uid, "controller": true}))
            .into_iter()
            .collect();
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default", "uid": uid,
                                                    "resourceVersion": version, "ownerReferences": owners}}))
        .unwrap()
    }

    fn informer() -> Informer<Pod> {
        // Never fed from a server: the tests apply watch events by hand.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        Informer::new(Api::all(Client::try_from(config).unwrap()))
    }

    fn names(changes: &[Change<Pod>]) -> Vec<String> {
        changes
            .iter()
            .map(|c| {
                let kind = match c {
                    Change::Added(_) => "added",
                    Change::Changed(_) => "changed",
                    Change::Deleted(_) => "deleted",
                };
                format!("{kind} {}", c.object().name_any())
            })
            .collect()
    }

    async fn drain(stream: &mut (impl Stream<Item = Change<Pod>> + Unpin)) -> Vec<Change<Pod>> {
        let mut seen = Vec::new();
        while let Ok(Some(change)) = tokio::time::timeout(Duration::from_millis(20), stream.next()).await {
            seen.push(change);
        }
        seen
    }

    #[tokio::test]
    async fn subscribers_see_the_first_list_then_changes_and_late_ones_get_the_cache_replayed() {
        let informer = informer();
        let mut early = Box::pin(informer.subscribe());
        informer.apply(watcher::Event::Init);
        informer.apply(watcher::Event::InitApply(pod("a", "1", "10", None)));
        assert!(drain(&mut early).await.is_empty(), "nothing before the list is complete");
        informer.apply(watcher::Event::InitDone);
        informer.synced().await;
        informer.apply(watcher::Event::Apply(pod("b", "2", "11", None)));
        informer.apply(watcher::Event::Apply(pod("a", "1", "12", None)));
        informer.apply(watcher::Event::Delete(pod("b", "2", "13", None)));
        assert_eq!(names(&drain(&mut early).await), ["added a", "added b", "changed a", "deleted b"]);

        let mut late = Box::pin(informer.subscribe());
        assert_eq!(names(&drain(&mut late).await), ["changed a"]);
        assert_eq!(informer.store().state().len(), 1);
    }

    #[tokio::test]
    async fn every_controller_waiting_for_the_first_list_is_told_of_it() {
        let informer = informer();
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let informer = informer.clone();
                tokio::spawn(async move { informer.synced().await })
            })
            .collect();
        tokio::task::yield_now().await;
        informer.apply(watcher::Event::Init);
        informer.apply(watcher::Event::InitDone);
        for waiter in waiters {
            tokio::time::timeout(Duration::from_secs(5), waiter).await.unwrap().unwrap();
        }
    }

    #[tokio::test]
    async fn a_new_list_after_a_broken_watch_tells_what_went_meanwhile() {
        let informer = informer();
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(pod("a", "1", "10", None)),
            watcher::Event::InitApply(pod("b", "2", "11", None)),
            watcher::Event::InitDone,
        ] {
            informer.apply(event);
        }
        let mut subscriber = Box::pin(informer.subscribe());
        drain(&mut subscriber).await;
        // b went and a was replaced by another object of the same name while the watch was down.
        for event in [
            watcher::Event::Init,
            watcher::Event::InitApply(pod("a", "3", "20", None)),
            watcher::Event::InitApply(pod("c", "4", "21", None)),
            watcher::Event::InitDone,
        ] {
            informer.apply(event);
        }
        let mut seen = names(&drain(&mut subscriber).await);
        seen.sort();
        assert_eq!(seen, ["added a", "added c", "deleted a", "deleted b"]);
    }

    #[tokio::test]
    async fn expectations_hold_an_owner_until_the_cache_shows_its_writes() {
        let informer = informer();
        informer.apply(watcher::Event::Init);
        informer.apply(watcher::Event::InitApply(pod("old", "1", "10", Some("rs"))));
        informer.apply(watcher::Event::InitDone);
        let expectations = Expectations::new(&informer);
        assert!(expectations.satisfied("rs"), "nothing written yet");

        // Two creations asked for, one of which fails; and one deletion.
        expectations.expect_creations("rs", 2);
        expectations.creation_failed("rs");
        let old = informer.store().state()[0].clone();
        expectations.expect_change("rs", &old);
        assert!(!expectations.satisfied("rs"));

        // The new pod comes (and is observed as a controller's subscription would).
        informer.apply(watcher::Event::Apply(pod("new", "2", "11", Some("rs"))));
        expectations.observe(&Change::Added(informer.store().get(&ObjectRef::new("new").within("default")).unwrap()));
        assert!(!expectations.satisfied("rs"), "the deletion is not in the cache yet");
        // Another owner's children do not count.
        expectations.expect_creations("other", 1);
        expectations.observe(&Change::Added(Arc::new(pod("x", "9", "12", Some("rs")))));
        assert!(!expectations.satisfied("other"));

        informer.apply(watcher::Event::Delete(pod("old", "1", "13", Some("rs"))));
        assert!(expectations.satisfied("rs"));

        // A change that was refused, or that changed nothing, is not waited for; one that was done is.
        let new = informer.store().get(&ObjectRef::new("new").within("default")).unwrap();
        let version = |p: &Pod| p.resource_version();
        expectations.expect_change("rs", &new);
        expectations.answered("rs", &new, &Ok(pod("new", "2", "14", Some("rs"))), version);
        assert!(!expectations.satisfied("rs"));
        expectations.answered("rs", &new, &Err::<Pod, _>(kube::Error::LinesCodecMaxLineLengthExceeded), version);
        assert!(expectations.satisfied("rs"));
        expectations.expect_change("rs", &new);
        expectations.answered("rs", &new, &Ok((*new).clone()), version);
        assert!(expectations.satisfied("rs"));
    }
}
