//! Per-kind policy: the small trait every kind implements, after `k8s.io/apiserver/pkg/registry/rest`'s
//! `RESTCreateStrategy` / `RESTUpdateStrategy` / `RESTGracefulDeleteStrategy` (1.33). Mechanism (conflicts, generated
//! names, dry-run, finalizers, watch) lives once in the generic store; a strategy holds only what differs between
//! kinds. Which kinds there are is decided outside the mechanism: a registry is given a table of them, each row a
//! kind's catalogue entry with its strategy.
//!
//! The hooks in the order a write meets them: [`Strategy::validate_name`], [`Strategy::prepare_for_create`] (or
//! [`Strategy::prepare_for_update`]), [`Strategy::validate`] (or [`Strategy::validate_update`]), then, once the
//! admission chain ([`crate::chain`]) has passed the object, [`Strategy::reserve`] just before storage. A delete
//! asks [`Strategy::grace_period`] and [`Strategy::holds_removal`] whether the object stays for now,
//! [`Strategy::prepare_for_delete`] when it does, and [`Strategy::before_remove`] and [`Strategy::release`] when it
//! goes.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use nest_storage::Store;
use serde_json::Value;

use crate::cache::{Cached, WatchCache};
use crate::catalog::ResourceInfo;
use crate::error::{ApiError, Cause, Result};
use crate::ipalloc::ServiceCidr;
use crate::validation;

/// What a strategy's asynchronous hooks and the admission plugins may use: the registry's storage, its watch cache
/// and its configuration.
#[derive(Clone, Copy)]
pub struct Cluster<'a> {
    pub store: &'a dyn Store,
    /// The registry's watch cache, if it has one (a registry opened over storage has; one made with `new` has not).
    pub cache: Option<&'a WatchCache>,
    /// The range Service ClusterIPs come from.
    pub service_cidr: &'a ServiceCidr,
}

impl Cluster<'_> {
    /// The object stored under `key`, read as kube-apiserver's admission plugins read through their listers: from the
    /// watch cache, and from storage only when the cache does not have it (a live lookup, for an object made a
    /// moment ago that the cache has not seen yet) or cannot serve. Saves a consistent read of etcd, a round trip
    /// to its leader, on every request that asks about its namespace or its service account.
    pub async fn lookup(&self, key: &str) -> Result<Option<Arc<Cached>>> {
        if let Some(cache) = self.cache
            && let Some(Some(object)) = cache.get(key)
        {
            return Ok(Some(object));
        }
        self.live(key).await
    }

    /// The object stored under `key`, from storage whatever the cache holds (upstream's live lookup).
    pub async fn live(&self, key: &str) -> Result<Option<Arc<Cached>>> {
        let Some(item) = self.store.get(key.as_bytes()).await.map_err(ApiError::from_storage)? else { return Ok(None) };
        let object = crate::cache::decode(&item.value, item.mod_revision)
            .ok_or_else(|| ApiError::internal(format!("the object stored under {key} is not JSON")))?;
        Ok(Some(Arc::new(Cached::new(object))))
    }
}

/// What a kind decides for itself. Every method has the behaviour most kinds want.
pub trait Strategy: Send + Sync + 'static {
    /// Checks a name (`metadata.name`); most kinds use the DNS subdomain rule.
    fn validate_name(&self, name: &str) -> Result<(), String> {
        validation::dns1123_subdomain(name)
    }

    /// Sets defaults and clears what a client may not set, before the first write.
    fn prepare_for_create(&self, _obj: &mut Value) {}

    /// Kind-specific checks of a new object.
    fn validate(&self, _obj: &Value) -> Vec<Cause> {
        Vec::new()
    }

    /// Checks of a new or changed object that depend on the cluster's configuration (its Service range), after
    /// [`Strategy::validate`] or [`Strategy::validate_update`].
    fn validate_in(&self, _cluster: &Cluster<'_>, _obj: &Value) -> Vec<Cause> {
        Vec::new()
    }

    /// Sets defaults on an update; `old` is the stored object.
    fn prepare_for_update(&self, obj: &mut Value, _old: &Value) {
        self.prepare_for_create(obj)
    }

    /// Kind-specific checks of an update.
    fn validate_update(&self, obj: &Value, _old: &Value) -> Vec<Cause> {
        self.validate(obj)
    }

    /// [`Strategy::validate_update`] for a write through `subresource` (`/status`, or one of the kind's own), for kinds
    /// whose rules differ by subresource.
    fn validate_update_of(&self, _subresource: Subresource, obj: &Value, old: &Value) -> Vec<Cause> {
        self.validate_update(obj, old)
    }

    /// The fields a field selector may use besides `metadata.name` and `metadata.namespace`.
    fn selectable_fields(&self) -> &'static [&'static str] {
        &[]
    }

    /// Takes what a new object needs from the cluster (a Service's ClusterIP) just before it is stored, recording it
    /// in the object; [`Strategy::release`] gives it back if the create then fails. Not called on a dry run.
    fn reserve<'a>(
        &'a self,
        _cluster: Cluster<'a>,
        _info: &'a ResourceInfo,
        _obj: &'a mut Value,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// Gives back what [`Strategy::reserve`] took, once the object is gone for good (or its create failed).
    fn release<'a>(&'a self, _cluster: Cluster<'a>, _obj: &'a Value) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }

    /// Runs before an object is removed from storage, and may refuse the removal (a CRD's instances go first).
    fn before_remove<'a>(&'a self, _cluster: Cluster<'a>, _obj: &'a Value) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// Whether a write of this kind changes which resources are served (CustomResourceDefinitions): the registry
    /// then serves, besides the built-ins, what [`Strategy::defined_resources`] finds in every stored object of it.
    fn defines_resources(&self) -> bool {
        false
    }

    /// The resources a stored object of a kind that [`Strategy::defines_resources`] serves, each with its strategy
    /// (a CustomResourceDefinition's, one per served version).
    fn defined_resources(&self, _obj: &Value) -> Vec<Served> {
        Vec::new()
    }

    /// How many seconds a delete gives `obj` before it is removed (`asked` is `gracePeriodSeconds`): 0 removes it at
    /// once (finalizers permitting); more marks it with a deletionTimestamp that far ahead, for whoever runs it to
    /// stop it and delete it again with 0.
    fn grace_period(&self, _obj: &Value, _asked: Option<i64>) -> i64 {
        0
    }

    /// What a delete that names no propagation policy does to the object's dependents (`DefaultGarbageCollectionPolicy`):
    /// `None` for the background deletion most kinds have.
    fn default_propagation(&self) -> Option<&'static str> {
        None
    }

    /// Whether `obj`, although being deleted with no `metadata.finalizers` left, still waits for something of its
    /// kind's own (a namespace's `spec.finalizers`).
    fn holds_removal(&self, _obj: &Value) -> bool {
        false
    }

    /// Marks an object whose deletion has begun but that stays for now (a namespace becomes `Terminating`).
    fn prepare_for_delete(&self, _obj: &mut Value) {}

    /// The object a write to the kind's own subresource `name` (one of [`ResourceInfo::subresources`]) makes of
    /// `current`, from the request's `body`. Only what the subresource may change changes.
    fn update_subresource(&self, name: &str, _info: &ResourceInfo, _current: &Value, _body: &Value) -> Result<Value> {
        Err(ApiError::internal(format!("the subresource {name:?} has no strategy")))
    }
}

/// The strategy of kinds with no policy of their own.
pub struct Generic;

impl Strategy for Generic {}

/// A served resource with its policy: a built-in kind's row, or a resource that another kind's objects define.
#[derive(Clone)]
pub struct Served {
    pub info: Arc<ResourceInfo>,
    pub strategy: Arc<dyn Strategy>,
}

/// Which part of an object an update may change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subresource {
    /// The main resource: everything but `.status` (when a status subresource exists).
    Main,
    /// `/status`: only `.status`.
    Status,
    /// One of the kind's own subresources ([`ResourceInfo::subresources`], such as `pods/binding`): what its strategy's
    /// [`Strategy::update_subresource`] makes of the object.
    Own(&'static str),
}

/// Sets each of `fields` that `target` (an object) lacks or has as `null`: the shape of most `SetDefaults_*`.
pub fn set_defaults<const N: usize>(target: &mut Value, fields: [(&str, Value); N]) {
    if !target.is_object() {
        return;
    }
    for (field, default) in fields {
        if target.get(field).is_none_or(Value::is_null) {
            target[field] = default;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;
    use nest_storage::Store;
    use nest_storage::embedded::EmbeddedStore;

    use super::Cluster;
    use crate::cache::WatchCache;
    use crate::ipalloc::ServiceCidr;

    const KEY: &str = "/registry/core/namespaces/fresh";

    /// A lookup finds an object the watch cache has not seen yet (a namespace created the moment before the request
    /// that names it), finds it again from the cache, and finds nothing once it is gone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lookup_reads_the_cache_and_storage_for_what_the_cache_has_not_seen() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path(), Default::default()).unwrap());
        let cache = WatchCache::start(store.clone(), Default::default()).await.unwrap();
        let cidr: ServiceCidr = "10.96.0.0/12".parse().unwrap();
        let cluster = Cluster { store: store.as_ref(), cache: Some(&cache), service_cidr: &cidr };
        assert!(cluster.lookup(KEY).await.unwrap().is_none());
        assert!(cache.get(KEY).is_none(), "no cache of namespaces yet: storage answered");
        let prefix = "/registry/core/namespaces/";
        cache.snapshot(prefix, prefix).await.expect("namespaces cached");
        assert!(matches!(cache.get(KEY), Some(None)), "the cache holds namespaces, not this one");

        let object = br#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"fresh"}}"#;
        let created = store.create(KEY.as_bytes(), Bytes::from_static(object)).await.unwrap();
        // Straight after the write, whether or not the cache has applied it yet.
        let found = cluster.lookup(KEY).await.unwrap().expect("found in storage if not in the cache");
        assert_eq!(found["metadata"]["name"], "fresh");
        assert_eq!(found["metadata"]["resourceVersion"], created.mod_revision.0.to_string());
        assert!(cache.wait_for(created.mod_revision, Duration::from_secs(5)).await);
        let cached = cache.get(KEY).flatten().expect("in the cache once it caught up");
        assert_eq!(cached["metadata"]["resourceVersion"], created.mod_revision.0.to_string());

        let deleted = store.delete(KEY.as_bytes(), None).await.unwrap();
        assert!(cache.wait_for(deleted.revision, Duration::from_secs(5)).await);
        assert!(cluster.lookup(KEY).await.unwrap().is_none());
    }
}
