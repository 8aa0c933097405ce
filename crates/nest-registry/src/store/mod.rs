//! The generic store: every REST verb implemented once, for every kind, over [`nest_storage::Store`].
//!
//! After `k8s.io/apiserver/pkg/registry/generic/registry/store.go` (1.33). The order of a write's lifecycle lives here
//! and only here: decode → check scope and names → strategy `prepare_*` → strategy `validate*` → compare-and-swap in
//! storage (retrying generated names) → encode the answer. Objects are stored as JSON without `resourceVersion`; it
//! is set from the storage revision on every read, so it always equals the store's modification revision.

use std::sync::{Arc, RwLock};

use nest_storage::{Revision, Store};
use serde_json::Value;

use crate::cache::{self, WatchCache};
use crate::catalog::{Catalog, ResourceInfo};
use crate::chain::Chain;
use crate::error::{ApiError, Cause, Result, StorageResult};
use crate::ipalloc::ServiceCidr;
use crate::meta;
use crate::selector::{FieldSelector, LabelSelector};
use crate::serving::{Kinds, Serving};
use crate::strategy::Cluster;

mod codec;
mod definitions;
mod read;
mod watch;
mod write;

pub use crate::resource::Resource;
pub use crate::strategy::Subresource;
pub use watch::WatchEvent;

/// Options of a list or watch, straight from the query string.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    pub allow_watch_bookmarks: bool,
}

/// Options of a delete (`DeleteOptions` body and query).
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    pub propagation_policy: Option<String>,
    pub precondition_uid: Option<String>,
    pub precondition_resource_version: Option<String>,
    pub dry_run: bool,
    /// How long a pod's containers get to stop (`gracePeriodSeconds`); unset means the pod's own
    /// `terminationGracePeriodSeconds`. Only pods are deleted gracefully.
    pub grace_period_seconds: Option<i64>,
}

/// The generic store over a storage backend.
pub struct Registry {
    store: Arc<dyn Store>,
    /// Serves lists and watches from memory; `None` in a registry made with [`Registry::new`].
    cache: Option<Arc<WatchCache>>,
    /// The kinds this registry was given.
    kinds: Arc<Kinds>,
    /// The built-ins plus what stored definitions (Established CustomResourceDefinitions) define; made again
    /// whenever a definition changes.
    serving: Arc<RwLock<Arc<Serving>>>,
    service_cidr: ServiceCidr,
    /// What runs between a validated object and storage.
    admission: Chain,
}

/// Matches objects against a list's selectors.
struct Filter {
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    fn new(resource: &Resource, options: &ListOptions) -> Result<Filter> {
        let labels = LabelSelector::parse(options.label_selector.as_deref().unwrap_or(""))?;
        let mut supported = vec!["metadata.name", "metadata.namespace"];
        supported.extend_from_slice(resource.strategy.selectable_fields());
        let fields = FieldSelector::parse(options.field_selector.as_deref().unwrap_or(""), &supported)?;
        Ok(Filter { labels, fields })
    }

    fn matches(&self, obj: &Value) -> bool {
        (self.labels.is_empty() || self.labels.matches(&meta::labels(obj)))
            && self.fields.matches(|field| meta::path_str(obj, field))
    }

    /// Matches a cached (stored-shape) object as `info` serves it.
    fn matches_cached(&self, info: &ResourceInfo, obj: &Value) -> bool {
        if crate::convert::converts(info) && !self.fields.is_empty() {
            return self.matches(&Registry::present(info, obj));
        }
        self.matches(obj)
    }
}

impl Registry {
    /// Whether the storage serves now (the `etcd` health check of `/readyz` and `/healthz`).
    pub async fn check_storage(&self) -> nest_storage::Result<()> {
        self.store.check().await
    }

    /// A registry serving `kinds` over `store`, every read from storage (no watch cache), its catalogue made once
    /// (stored definitions are not read), and no admission until [`Registry::with_admission`].
    pub fn new(store: Arc<dyn Store>, kinds: Arc<Kinds>) -> Registry {
        let service_cidr = "10.96.0.0/12".parse().expect("a valid default range");
        let serving = Arc::new(RwLock::new(Arc::new(kinds.serving())));
        Registry { store, cache: None, kinds, serving, service_cidr, admission: Chain::default() }
    }

    /// A registry serving `kinds` and what the definitions in `store` define (CustomResourceDefinitions), kept
    /// current by a background watch, so definitions written through another API server sharing the store are
    /// served here too, with lists and watches served from a [`WatchCache`] sized by `cache`
    /// (`--default-watch-cache-size`). Needs a tokio runtime; the watches end when the store closes.
    pub async fn start(store: Arc<dyn Store>, kinds: Arc<Kinds>, cache: cache::Config) -> Result<Registry> {
        let mut registry = Registry::new(store, kinds);
        let cache = WatchCache::start(registry.store.clone(), cache).await.storage()?;
        // Build the built-ins' caches now, as kube-apiserver does at start, so no client waits for the first list.
        let prefixes: Vec<String> =
            registry.catalog().resources().iter().map(|info| Self::prefix(info, None)).collect();
        tokio::spawn(cache.clone().warm(prefixes));
        registry.cache = Some(cache);
        let from = registry.refresh_catalog().await?.next();
        tokio::spawn(definitions::follow(
            registry.store.clone(),
            registry.kinds.clone(),
            registry.serving.clone(),
            from,
        ));
        Ok(registry)
    }

    /// Makes what is served again from the stored definitions; returns the revision it read at.
    async fn refresh_catalog(&self) -> Result<Revision> {
        definitions::load(self.store.as_ref(), &self.kinds, &self.serving).await
    }

    /// After a write: a kind that defines resources (a CRD) changes what is served.
    async fn after_write(&self, resource: &Resource) {
        if resource.strategy.defines_resources()
            && let Err(error) = self.refresh_catalog().await.map(drop)
        {
            tracing::warn!(%error, "reloading resource definitions");
        }
    }

    /// Allocates Service ClusterIPs from `cidr` (default `10.96.0.0/12`).
    pub fn with_service_cidr(mut self, cidr: ServiceCidr) -> Registry {
        self.service_cidr = cidr;
        self
    }

    /// The range Service ClusterIPs come from.
    pub fn service_cidr(&self) -> &ServiceCidr {
        &self.service_cidr
    }

    /// Runs `chain` as this registry's admission.
    pub fn with_admission(mut self, chain: Chain) -> Registry {
        self.admission = chain;
        self
    }

    /// What strategy hooks and admission plugins may use.
    fn cluster(&self) -> Cluster<'_> {
        Cluster { store: self.store.as_ref(), cache: self.cache.as_deref(), service_cidr: &self.service_cidr }
    }

    /// What is served right now, with each resource's strategy.
    fn serving(&self) -> Arc<Serving> {
        self.serving.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// What is served right now.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.serving().catalog().clone()
    }

    /// The resource `plural` of `group/version`, if served.
    pub fn resource(&self, group: &str, version: &str, plural: &str) -> Option<Resource> {
        let served = self.serving().find(group, version, plural)?.clone();
        Some(Resource::with_strategy(served.info, served.strategy))
    }
}

/// kube-apiserver's answer to a read newer than anything stored.
fn too_large_rv(requested: Revision, current: Revision) -> ApiError {
    let mut error = ApiError::timeout(format!("Too large resource version: {requested}, current: {current}"));
    error.details.causes.push(Cause {
        reason: "ResourceVersionTooLarge",
        message: "Too large resource version".into(),
        field: String::new(),
    });
    error
}

fn parse_rv(text: &str) -> Result<Revision> {
    text.parse::<u64>().map(Revision).map_err(|_| ApiError::bad_request(format!("invalid resource version: {text:?}")))
}
