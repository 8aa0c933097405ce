//! Shared caches, after client-go's shared informers: one watch and one cache per kind for the whole
//! controller-manager, which every controller reads instead of listing over HTTP on each reconcile (a Deployment's
//! pass used to read every ReplicaSet of its namespace from the API server, a ReplicaSet's every pod).
//!
//! - [`Informer`]: the cache of one kind, fed by one watch, and a stream of what changes in it for each controller
//!   that subscribes (replaying what the cache holds first, as an informer does for a handler added late, so a
//!   controller restarted after a panic sees everything again).
//! - [`Informers`]: the caches of every kind the controllers read, built once when this instance starts to lead.
//!
//! Controllers run on them through [`crate::reconciling`], and keep what they wrote and the cache does not show yet
//! in [`crate::expectations`].

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures_util::future::BoxFuture;
use futures_util::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    ConfigMap, Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, ReplicationController, Service,
    ServiceAccount,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
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
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
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
    pub(crate) fn apply(&self, event: watcher::Event<K>) {
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
    /// Each controller's expectations, by its name: they outlive a restart of the controller (after a panic in a
    /// reconcile), as the caches do, so that a restarted controller does not count missing what it has just created.
    expectations: Arc<Mutex<HashMap<&'static str, Box<dyn std::any::Any + Send + Sync>>>>,
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
            expectations: Arc::default(),
        }
    }

    /// The expectations of `controller`, whose children are `children`'s: the same each time it is asked.
    pub(crate) fn expectations<Child: Kind>(
        &self,
        controller: &'static str,
        children: &Informer<Child>,
    ) -> crate::expectations::Expectations<Child> {
        let mut all = lock(&self.expectations);
        let kept = all.entry(controller).or_insert_with(|| Box::new(crate::expectations::Expectations::new(children)));
        match kept.downcast_ref::<crate::expectations::Expectations<Child>>() {
            Some(kept) => kept.clone(),
            // A controller's children are always of one kind; were they not, the new kind's are its own.
            None => {
                let fresh = crate::expectations::Expectations::new(children);
                *kept = Box::new(fresh.clone());
                fresh
            }
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

/// What the tests of the caches and of what reads them build on.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use serde_json::json;

    /// A pod of namespace `default`, controlled by the ReplicaSet `owner` (a uid) if given.
    pub(crate) fn pod(name: &str, uid: &str, version: &str, owner: Option<&str>) -> Pod {
        let owners: Vec<serde_json::Value> = owner
            .map(|uid| json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": uid, "controller": true}))
            .into_iter()
            .collect();
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default", "uid": uid,
                                                    "resourceVersion": version, "ownerReferences": owners}}))
        .unwrap()
    }

    pub(crate) fn informer() -> Informer<Pod> {
        // Never fed from a server: the tests apply watch events by hand.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        Informer::new(Api::all(Client::try_from(config).unwrap()))
    }

    /// A complete list of `pods`, as the watch gives one when it starts or starts again.
    pub(crate) fn list(informer: &Informer<Pod>, pods: Vec<Pod>) {
        informer.apply(watcher::Event::Init);
        for pod in pods {
            informer.apply(watcher::Event::InitApply(pod));
        }
        informer.apply(watcher::Event::InitDone);
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{informer, list, pod};
    use super::*;
    use std::time::Duration;

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
        list(&informer, vec![]);
        for waiter in waiters {
            tokio::time::timeout(Duration::from_secs(5), waiter).await.unwrap().unwrap();
        }
    }

    #[tokio::test]
    async fn a_new_list_after_a_broken_watch_tells_what_went_meanwhile() {
        let informer = informer();
        list(&informer, vec![pod("a", "1", "10", None), pod("b", "2", "11", None)]);
        let mut subscriber = Box::pin(informer.subscribe());
        drain(&mut subscriber).await;
        // b went and a was replaced by another object of the same name while the watch was down.
        list(&informer, vec![pod("a", "3", "20", None), pod("c", "4", "21", None)]);
        let mut seen = names(&drain(&mut subscriber).await);
        seen.sort();
        assert_eq!(seen, ["added a", "added c", "deleted a", "deleted b"]);
    }
}
