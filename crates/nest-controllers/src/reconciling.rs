//! Controllers driven by the shared caches of [`crate::informers`], as kube-runtime's `Controller` is by watches of
//! its own: triggered by subscriptions (their own kind, the children they own, other kinds mapped to them), and
//! reconciling nothing before every cache they read has listed once (upstream's `WaitForCacheSync`).

use std::sync::Arc;

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{Stream, StreamExt};
use kube::ResourceExt;
use kube::runtime::controller::{Action, Config};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::utils::CancelableJoinHandle;

use crate::expectations::Expectations;
use crate::informers::{Informer, Kind};

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
