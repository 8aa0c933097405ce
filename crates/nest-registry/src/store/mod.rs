//! The generic store: every REST verb implemented once, for every kind, over [`nest_storage::Store`].
//!
//! After `k8s.io/apiserver/pkg/registry/generic/registry/store.go` (1.33). The order of a write's lifecycle lives here
//! and only here: decode → check scope and names → strategy `prepare_*` → strategy `validate*` → compare-and-swap in
//! storage (retrying generated names) → encode the answer. Objects are stored as JSON without `resourceVersion`; it
//! is set from the storage revision on every read, so it always equals the store's modification revision.

use std::sync::{Arc, RwLock};

use nest_storage::{Revision, Store};
use serde_json::Value;

use crate::admission::{self, UserInfo, Warnings};
use crate::cache::{self, WatchCache};
use crate::catalog::{Catalog, ResourceInfo};
use crate::error::{ApiError, Cause, Result, StorageResult};
use crate::ipalloc::ServiceCidr;
use crate::meta;
use crate::selector::{FieldSelector, LabelSelector};
use crate::strategy::{Cluster, Strategy};

mod codec;
mod read;
mod watch;
mod write;

pub use watch::WatchEvent;

/// A served resource with its policy, as one request uses it.
pub struct Resource {
    pub info: Arc<ResourceInfo>,
    pub strategy: Box<dyn Strategy>,
    /// A built-in kind's OpenAPI schema, which every body is decoded against.
    pub schema: Option<Arc<nest_openapi::KindSchema>>,
    /// The field manager writes are recorded for in `managedFields` ([`crate::apply::track_update`]); `None`
    /// records nothing (the server's own writes, and apply, which records itself).
    pub manager: Option<String>,
    /// Who asks (the server itself when empty), for admission.
    pub user: UserInfo,
    /// What admission warns about, for the response's `Warning` headers.
    pub warnings: Warnings,
}

impl Resource {
    pub fn new(info: Arc<ResourceInfo>) -> Resource {
        let strategy = crate::kinds::for_resource(&info);
        let schema = if info.custom { None } else { nest_openapi::kind_schema(&info.group, &info.version, &info.kind) };
        Resource { info, strategy, schema, manager: None, user: UserInfo::default(), warnings: Warnings::default() }
    }

    /// Decodes a request body as kube-apiserver decodes it into the kind's Go type: a field of the wrong type is a
    /// 400 naming the field, and fields the kind does not have are dropped (returned, for `fieldValidation`).
    pub fn decode(&self, obj: &mut Value) -> Result<Vec<String>> {
        let Some(schema) = &self.schema else { return Ok(Vec::new()) };
        let causes = crate::schema::validate_builtin(schema, obj);
        if let Some(first) = causes.first() {
            let kind = &self.info.kind;
            let mut error = ApiError::bad_request(format!(
                "{kind} in version \"{}\" cannot be handled as a {kind}: {}: {}",
                self.info.version, first.field, first.message
            ));
            error.details.kind = Some(self.info.plural.clone());
            error.details.causes = causes;
            return Err(error);
        }
        Ok(crate::schema::prune_builtin(schema, obj))
    }

    /// The fields of `obj` that the kind does not have (for a custom resource, that its schema does not declare), as
    /// `fieldValidation=Strict|Warn` reports them.
    pub fn unknown_fields(&self, obj: &Value) -> Vec<String> {
        let mut copy = obj.clone();
        match (&self.schema, &self.info.schema) {
            (Some(schema), _) => crate::schema::prune_builtin(schema, &mut copy),
            (None, Some(schema)) => crate::schema::prune(schema, &mut copy, true),
            (None, None) => Vec::new(),
        }
    }
}

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

/// The generic store over a storage backend.
pub struct Registry {
    store: Arc<dyn Store>,
    /// Serves lists and watches from memory; `None` in a registry made with [`Registry::new`].
    cache: Option<Arc<WatchCache>>,
    /// Built-ins plus what the Established CustomResourceDefinitions serve; rebuilt whenever a CRD changes.
    catalog: Arc<RwLock<Arc<Catalog>>>,
    service_cidr: ServiceCidr,
    /// What runs between a validated object and storage.
    admission: admission::Chain,
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

    pub fn new(store: Arc<dyn Store>, catalog: Catalog) -> Registry {
        let service_cidr = "10.96.0.0/12".parse().expect("a valid default range");
        Registry {
            store,
            cache: None,
            catalog: Arc::new(RwLock::new(Arc::new(catalog))),
            service_cidr,
            admission: admission::Chain::standard(),
        }
    }

    /// A registry serving the built-ins and the CustomResourceDefinitions in `store`, kept current by a background
    /// watch, so CRDs written through another API server sharing the store are served here too, with lists and
    /// watches served from a [`WatchCache`]. Needs a tokio runtime; the watches end when the store closes.
    ///
    /// [`Registry::new`] makes a registry without either: every read goes to storage.
    pub async fn open(store: Arc<dyn Store>) -> Result<Registry> {
        Registry::open_with(store, cache::Config::default()).await
    }

    /// [`Registry::open`] with a watch cache sized by `cache` (`--default-watch-cache-size`).
    pub async fn open_with(store: Arc<dyn Store>, cache: cache::Config) -> Result<Registry> {
        let mut registry = Registry::new(store, Catalog::builtin());
        let cache = WatchCache::start(registry.store.clone(), cache).await.storage()?;
        // Build the built-ins' caches now, as kube-apiserver does at start, so no client waits for the first list.
        let prefixes: Vec<String> =
            registry.catalog().resources().iter().map(|info| Self::prefix(info, None)).collect();
        tokio::spawn(cache.clone().warm(prefixes));
        registry.cache = Some(cache);
        let from = registry.refresh_catalog().await?.next();
        let (store, catalog) = (registry.store.clone(), registry.catalog.clone());
        tokio::spawn(crate::kinds::crd::follow(store, catalog, from));
        Ok(registry)
    }

    /// Creates what every cluster starts with ([`crate::kinds::bootstrap`]); existing objects are left alone but the
    /// `kubernetes` Service's endpoints, which name this API server (`api`).
    pub async fn bootstrap(&self, api: std::net::SocketAddr) -> Result<()> {
        crate::kinds::bootstrap::run(self, api).await
    }

    /// Rebuilds the catalogue from the stored CustomResourceDefinitions; returns the revision it read at.
    async fn refresh_catalog(&self) -> Result<Revision> {
        crate::kinds::crd::load_catalog(self.store.as_ref(), &self.catalog).await
    }

    /// After a write: a kind that defines resources (a CRD) changes what is served.
    async fn after_write(&self, resource: &Resource) {
        if resource.strategy.defines_resources()
            && let Err(error) = self.refresh_catalog().await.map(drop)
        {
            tracing::warn!(%error, "reloading CustomResourceDefinitions");
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

    /// Runs `chain` as this registry's admission instead of [`admission::Chain::standard`].
    pub fn with_admission(mut self, chain: admission::Chain) -> Registry {
        self.admission = chain;
        self
    }

    /// What strategy hooks and admission plugins may use.
    fn cluster(&self) -> Cluster<'_> {
        Cluster { store: self.store.as_ref(), cache: self.cache.as_deref(), service_cidr: &self.service_cidr }
    }

    /// What is served right now.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The resource `plural` of `group/version`, if served.
    pub fn resource(&self, group: &str, version: &str, plural: &str) -> Option<Resource> {
        self.catalog().find(group, version, plural).map(Resource::new)
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
