//! The generic store: every REST verb implemented once, for every kind, over [`nest_storage::Store`].
//!
//! After `k8s.io/apiserver/pkg/registry/generic/registry/store.go` (1.33). The order of a write's lifecycle lives here
//! and only here: decode → check scope and names → strategy `prepare_*` → strategy `validate*` → compare-and-swap in
//! storage (retrying generated names) → encode the answer. Objects are stored as JSON without `resourceVersion`; it
//! is set from the storage revision on every read, so it always equals the store's modification revision.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{BoxStream, StreamExt};
use nest_storage::{EventKind, KeyValue, ReadAt, Revision, Store};
use serde_json::{Value, json};

use crate::cache::{self, Change, ChangeKind, Start, WatchCache};
use crate::catalog::{Catalog, ResourceInfo};
use crate::error::{ApiError, Cause, Result};
use crate::ipalloc::{self, ServiceCidr};
use crate::meta;
use crate::selector::{FieldSelector, LabelSelector};
use crate::strategy::{self, Strategy};

/// How many times a create with `generateName` tries a new name after a collision.
const GENERATE_NAME_ATTEMPTS: usize = 8;
/// Storage page size when a list has to filter.
const LIST_PAGE: usize = 500;

/// A served resource with its policy.
pub struct Resource {
    pub info: Arc<ResourceInfo>,
    pub strategy: Box<dyn Strategy>,
    /// A built-in kind's OpenAPI schema, which every body is decoded against.
    pub schema: Option<Arc<nest_openapi::KindSchema>>,
    /// The field manager writes are recorded for in `managedFields` ([`crate::apply::track_update`]); `None`
    /// records nothing (the server's own writes, and apply, which records itself).
    pub manager: Option<String>,
}

impl Resource {
    pub fn new(info: Arc<ResourceInfo>) -> Resource {
        let strategy = strategy::for_resource(&info);
        let schema = if info.custom { None } else { nest_openapi::kind_schema(&info.group, &info.version, &info.kind) };
        Resource { info, strategy, schema, manager: None }
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
    /// `pods/binding`: the node (`spec.nodeName`) and the `PodScheduled` condition, which only a binding sets, together.
    Binding,
}

/// What an update is going to do.
enum Updated {
    /// A dry run: the object as it would be stored.
    DryRun(Value),
    /// The object to store.
    Store(Value),
    /// Nothing but the resourceVersion would change: the stored object, which is not written again.
    Unchanged(Value),
}

/// Whether `new` is `old` with nothing changed but (at most) its resourceVersion. kube-apiserver then writes nothing
/// (no new revision, no watch event) and answers with the stored object (`GuaranteedUpdate` in
/// `k8s.io/apiserver/pkg/storage/etcd3/store.go`, 1.33): without that, every controller that writes an unchanged
/// status on each resync would wake every watcher of the kind.
fn unchanged(new: &Value, old: &Value) -> bool {
    let (Value::Object(new), Value::Object(old)) = (new, old) else { return new == old };
    let same_metadata = |new: &Value, old: &Value| match (new, old) {
        (Value::Object(new), Value::Object(old)) => {
            let keys = |m: &'_ serde_json::Map<String, Value>| m.keys().filter(|k| *k != "resourceVersion").count();
            keys(new) == keys(old)
                && new.iter().filter(|(k, _)| *k != "resourceVersion").all(|(k, v)| old.get(k) == Some(v))
        }
        _ => new == old,
    };
    new.len() == old.len()
        && new.iter().all(|(key, value)| match old.get(key) {
            Some(before) if key == "metadata" => same_metadata(value, before),
            Some(before) => value == before,
            None => false,
        })
}

/// One event of a watch, ready to serialise as `{"type": …, "object": …}`.
pub type WatchEvent = Value;

/// The generic store over a storage backend.
pub struct Registry {
    store: Arc<dyn Store>,
    /// Serves lists and watches from memory; `None` in a registry made with [`Registry::new`].
    cache: Option<Arc<WatchCache>>,
    /// Built-ins plus what the Established CustomResourceDefinitions serve; rebuilt whenever a CRD changes.
    catalog: Arc<RwLock<Arc<Catalog>>>,
    service_cidr: ServiceCidr,
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
    pub fn new(store: Arc<dyn Store>, catalog: Catalog) -> Registry {
        let service_cidr = "10.96.0.0/12".parse().expect("a valid default range");
        Registry { store, cache: None, catalog: Arc::new(RwLock::new(Arc::new(catalog))), service_cidr }
    }

    /// A registry serving the built-ins and the CustomResourceDefinitions in `store`, kept current by a background
    /// watch, so CRDs written through another API server sharing the store are served here too, with lists and
    /// watches served from a [`WatchCache`]. Needs a tokio runtime; the watches end when the store closes.
    ///
    /// [`Registry::new`] makes a registry without either: every read goes to storage.
    pub async fn open(store: Arc<dyn Store>) -> Result<Registry> {
        let mut registry = Registry::new(store, Catalog::builtin());
        let cache = WatchCache::start(registry.store.clone()).await?;
        // Build the built-ins' caches now, as kube-apiserver does at start, so no client waits for the first list.
        let prefixes: Vec<String> =
            registry.catalog().resources().iter().map(|info| Self::prefix(info, None)).collect();
        tokio::spawn(cache.clone().warm(prefixes));
        registry.cache = Some(cache);
        let from = registry.refresh_catalog().await?.next();
        let (store, catalog) = (registry.store.clone(), registry.catalog.clone());
        tokio::spawn(follow_crds(store, catalog, from));
        Ok(registry)
    }

    /// Creates what every cluster starts with, as kube-apiserver's bootstrap controllers do: the `default`,
    /// `kube-system`, `kube-public` and `kube-node-lease` namespaces, and the `kubernetes` Service in `default` on
    /// the first address of the service range. Existing objects are left alone.
    pub async fn bootstrap(&self, api_port: u16) -> Result<()> {
        let namespaces = self.resource("", "v1", "namespaces").expect("namespaces are built in");
        for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            match self.create(&namespaces, "", json!({"metadata": {"name": name}}), false).await {
                Ok(_) => {}
                Err(e) if e.reason == "AlreadyExists" => {}
                Err(e) => return Err(e),
            }
        }
        let services = self.resource("", "v1", "services").expect("services are built in");
        // Another API server sharing the store may have created it (and holds its address) already.
        if self.get(&services, "default", "kubernetes").await.is_ok() {
            return Ok(());
        }
        let kubernetes = json!({
            "metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {
                "clusterIP": self.service_cidr.kubernetes_service_ip().to_string(),
                "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": api_port}],
            },
        });
        match self.create(&services, "default", kubernetes, false).await {
            Ok(_) => Ok(()),
            // Lost a race with another server starting at the same time.
            Err(_) if self.get(&services, "default", "kubernetes").await.is_ok() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Rebuilds the catalogue from the stored CustomResourceDefinitions; returns the revision it read at.
    async fn refresh_catalog(&self) -> Result<Revision> {
        load_catalog(self.store.as_ref(), &self.catalog).await
    }

    fn is_crd(info: &ResourceInfo) -> bool {
        info.group == "apiextensions.k8s.io" && info.plural == "customresourcedefinitions"
    }

    /// After a write to `info`: a changed CRD changes what is served.
    async fn after_write(&self, info: &ResourceInfo) {
        if Self::is_crd(info)
            && let Err(error) = self.refresh_catalog().await.map(drop)
        {
            tracing::warn!(%error, "reloading CustomResourceDefinitions");
        }
    }

    /// Removes every instance of the custom resource a CRD defines (kube-apiserver does this behind the
    /// `customresourcecleanup.apiextensions.k8s.io` finalizer).
    async fn delete_instances(&self, crd: &Value) -> Result<()> {
        let group = meta::path_str(crd, "spec.group");
        let plural = meta::path_str(crd, "spec.names.plural");
        if group.is_empty() || plural.is_empty() {
            return Ok(());
        }
        let prefix = format!("/registry/{group}/{plural}/");
        let listed = self.store.list(prefix.as_bytes(), nest_storage::ListOptions::default()).await?;
        for item in listed.items {
            match self.store.delete(&item.key, None).await {
                Ok(_) | Err(nest_storage::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Allocates Service ClusterIPs from `cidr` (default `10.96.0.0/12`).
    pub fn with_service_cidr(mut self, cidr: ServiceCidr) -> Registry {
        self.service_cidr = cidr;
        self
    }

    fn is_service(info: &ResourceInfo) -> bool {
        info.group.is_empty() && info.plural == "services"
    }

    /// Gives a new Service its ClusterIP (kube-apiserver does this in the Service REST storage, around the generic
    /// store). Returns the address to free if the create then fails.
    async fn allocate_cluster_ip(&self, info: &ResourceInfo, obj: &mut Value) -> Result<Option<String>> {
        if !Self::is_service(info) || meta::path_str(obj, "spec.type") == "ExternalName" {
            return Ok(None);
        }
        let wanted = meta::path_str(obj, "spec.clusterIP");
        if wanted == "None" {
            obj["spec"]["clusterIPs"] = json!(["None"]);
            return Ok(None);
        }
        let wanted = match wanted.as_str() {
            "" => None,
            text => Some(text.parse().map_err(|_| {
                ApiError::invalid(
                    info,
                    meta::name(obj),
                    vec![Cause::invalid(
                        "spec.clusterIP",
                        format!("Invalid value: {text:?}: must be a valid IP address"),
                    )],
                )
            })?),
        };
        let owner = format!("{}/{}", meta::namespace(obj), meta::name(obj));
        let ip = ipalloc::allocate(self.store.as_ref(), &self.service_cidr, wanted, &owner).await?.to_string();
        obj["spec"]["clusterIP"] = json!(ip);
        obj["spec"]["clusterIPs"] = json!([ip]);
        obj["spec"]["ipFamilies"] = json!(["IPv4"]);
        obj["spec"]["ipFamilyPolicy"] = json!("SingleStack");
        Ok(Some(ip))
    }

    /// Frees what an object held once it is gone for good.
    async fn after_remove(&self, info: &ResourceInfo, obj: &Value) {
        if Self::is_service(info) {
            for ip in obj["spec"]["clusterIPs"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                if let Err(error) = ipalloc::release(self.store.as_ref(), ip).await {
                    tracing::warn!(%ip, %error, "releasing a service IP");
                }
            }
        }
    }

    /// What is served right now.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The resource `plural` of `group/version`, if served.
    pub fn resource(&self, group: &str, version: &str, plural: &str) -> Option<Resource> {
        self.catalog().find(group, version, plural).map(Resource::new)
    }

    // === keys and encoding ===

    fn prefix(info: &ResourceInfo, namespace: Option<&str>) -> String {
        let base = format!("/registry/{}/{}/", info.storage_group(), info.storage_plural());
        match namespace.filter(|_| info.namespaced) {
            Some(ns) => format!("{base}{ns}/"),
            None => base,
        }
    }

    fn key(info: &ResourceInfo, namespace: &str, name: &str) -> String {
        format!("{}{name}", Self::prefix(info, Some(namespace)))
    }

    fn decode(info: &ResourceInfo, item: &KeyValue) -> Result<Value> {
        Self::decode_at(info, &item.value, item.mod_revision)
    }

    fn decode_at(info: &ResourceInfo, bytes: &[u8], revision: Revision) -> Result<Value> {
        let mut obj: Value = serde_json::from_slice(bytes)
            .map_err(|e| ApiError::internal(format!("stored {} is not JSON: {e}", info.qualified())))?;
        meta::metadata_mut(&mut obj).insert("resourceVersion".into(), json!(revision.0.to_string()));
        crate::convert::from_storage(info, &mut obj);
        // Defaults added to a schema after an object was written apply when it is read, as in kube-apiserver.
        if let Some(schema) = &info.schema {
            crate::schema::default(schema, &mut obj);
        }
        Ok(obj)
    }

    fn encode(info: &ResourceInfo, obj: &Value) -> Result<Bytes> {
        let mut obj = obj.clone();
        meta::metadata_mut(&mut obj).remove("resourceVersion");
        crate::convert::to_storage(info, &mut obj);
        serde_json::to_vec(&obj).map(Bytes::from).map_err(|e| ApiError::internal(e.to_string()))
    }

    // === reads ===

    /// GET of one object.
    pub async fn get(&self, resource: &Resource, namespace: &str, name: &str) -> Result<Value> {
        let info = &resource.info;
        let item = self.store.get(Self::key(info, namespace, name).as_bytes()).await?;
        let item = item.ok_or_else(|| ApiError::not_found(info, name))?;
        Self::decode(info, &item)
    }

    /// LIST, in one namespace (`Some`) or across all of them: from the watch cache when it can answer, as
    /// kube-apiserver's cacher does (any list without `continue` or an exact `resourceVersion`), else from storage.
    pub async fn list(&self, resource: &Resource, namespace: Option<&str>, options: &ListOptions) -> Result<Value> {
        Ok(match self.list_any(resource, namespace, options).await? {
            Listed::Stored(list) => list,
            Listed::Cached(list) => list.to_value(),
        })
    }

    /// [`Registry::list`], encoded as JSON: what a list request answers. From the cache, objects are encoded once
    /// and shared by every list and watch that sends them.
    pub async fn list_json(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        options: &ListOptions,
    ) -> Result<Bytes> {
        Ok(match self.list_any(resource, namespace, options).await? {
            Listed::Stored(list) => Bytes::from(list.to_string()),
            Listed::Cached(list) if list.info.custom || crate::convert::converts(&list.info) => {
                Bytes::from(list.to_value().to_string())
            }
            Listed::Cached(list) => list.to_json(),
        })
    }

    async fn list_any(&self, resource: &Resource, namespace: Option<&str>, options: &ListOptions) -> Result<Listed> {
        let info = &resource.info;
        let filter = Filter::new(resource, options)?;
        let scope = Self::prefix(info, namespace);
        let (read_at, start_after) = self.list_start(options, &scope)?;
        if let Some(cache) = &self.cache
            && start_after.is_none()
            && read_at == ReadAt::Latest
            && let Some(min) = self.cache_ready(cache, options.resource_version.as_deref()).await?
            && let Some(snapshot) = cache.snapshot(&Self::prefix(info, None), &scope).await
        {
            if snapshot.revision < min {
                return Err(too_large_rv(min, snapshot.revision));
            }
            let limit = options.limit.filter(|&l| l > 0);
            return Ok(Listed::Cached(CachedList::new(info.clone(), &filter, limit, snapshot)));
        }
        let list = self.list_from_storage(info, &filter, options, read_at, start_after, &scope).await?;
        if let Some(min) = options.resource_version.as_deref().filter(|v| !v.is_empty()).map(parse_rv).transpose()?
            && read_at == ReadAt::Latest
        {
            let revision = parse_rv(list["metadata"]["resourceVersion"].as_str().unwrap_or("0"))?;
            if revision < min {
                return Err(too_large_rv(min, revision));
            }
        }
        Ok(Listed::Stored(list))
    }

    /// Whether the cache may serve a read with this `resourceVersion` (unset: a consistent read; `N`: not older
    /// than N), once it has caught up: `Some(N)` (0 when unset) if so, `None` if storage must serve it.
    async fn cache_ready(&self, cache: &WatchCache, resource_version: Option<&str>) -> Result<Option<Revision>> {
        match resource_version.filter(|v| !v.is_empty()) {
            None => Ok(cache.catch_up().await.then_some(Revision(0))),
            Some(v) => {
                let min = parse_rv(v)?;
                Ok(cache.wait_for(min, cache::CATCH_UP).await.then_some(min))
            }
        }
    }

    /// A cached object as served: a copy in the resource's shape, with schema defaults applied as on every read.
    fn present(info: &ResourceInfo, obj: &Value) -> Value {
        let mut obj = obj.clone();
        crate::convert::from_storage(info, &mut obj);
        if let Some(schema) = &info.schema {
            crate::schema::default(schema, &mut obj);
        }
        obj
    }

    async fn list_from_storage(
        &self,
        info: &ResourceInfo,
        filter: &Filter,
        options: &ListOptions,
        read_at: ReadAt,
        start_after: Option<Bytes>,
        prefix: &str,
    ) -> Result<Value> {
        let limit = options.limit.filter(|&l| l > 0);
        let mut items = Vec::new();
        let mut start_after = start_after;
        let mut pinned = read_at;
        let mut snapshot;
        let mut last_key: Option<Bytes> = None;
        let mut more = false;
        loop {
            let page = self
                .store
                .list(
                    prefix.as_bytes(),
                    nest_storage::ListOptions {
                        revision: pinned,
                        limit: Some(limit.map_or(LIST_PAGE, |l| (l - items.len()).max(1)).min(LIST_PAGE)),
                        start_after: start_after.clone(),
                    },
                )
                .await
                .map_err(|e| list_error(e, options))?;
            snapshot = page.revision;
            pinned = ReadAt::Revision(page.revision);
            for item in &page.items {
                let obj = Self::decode(info, item)?;
                last_key = Some(item.key.clone());
                if filter.matches(&obj) {
                    items.push(obj);
                }
                if limit.is_some_and(|l| items.len() >= l) {
                    break;
                }
            }
            let reached = limit.is_some_and(|l| items.len() >= l);
            let consumed_page = last_key.as_ref() == page.items.last().map(|i| &i.key);
            if reached {
                more = page.more || !consumed_page;
                break;
            }
            if !page.more {
                break;
            }
            start_after = last_key.clone();
        }
        let mut metadata = json!({"resourceVersion": snapshot.0.to_string()});
        if more && let Some(key) = &last_key {
            metadata["continue"] = json!(encode_continue(snapshot, &String::from_utf8_lossy(key)));
        }
        Ok(json!({
            "kind": format!("{}List", info.kind),
            "apiVersion": info.api_version(),
            "metadata": metadata,
            "items": items,
        }))
    }

    /// The revision and start key a list reads from, from `resourceVersion`, `resourceVersionMatch` and `continue`.
    fn list_start(&self, options: &ListOptions, prefix: &str) -> Result<(ReadAt, Option<Bytes>)> {
        let rv = options.resource_version.as_deref().filter(|v| !v.is_empty());
        if let Some(token) = options.continue_token.as_deref().filter(|t| !t.is_empty()) {
            if rv.is_some_and(|v| v != "0") {
                return Err(ApiError::bad_request("specifying resource version is not allowed when using continue"));
            }
            let (revision, key) = decode_continue(token)?;
            if !key.starts_with(prefix) {
                return Err(ApiError::bad_request("continue key is not valid: does not match the listed resource"));
            }
            return Ok((ReadAt::Revision(revision), Some(Bytes::from(key))));
        }
        let rv_match = options.resource_version_match.as_deref().filter(|m| !m.is_empty());
        match (rv, rv_match) {
            (None, None) => Ok((ReadAt::Latest, None)),
            (None, Some(m)) => Err(ApiError::bad_request(format!(
                "resourceVersionMatch is forbidden unless resourceVersion is provided (got {m:?})"
            ))),
            (Some(v), m) => {
                let revision = parse_rv(v)?;
                match m {
                    Some("Exact") if revision.0 == 0 => Err(ApiError::bad_request(
                        "resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"",
                    )),
                    Some("Exact") => Ok((ReadAt::Revision(revision), None)),
                    // "NotOlderThan", or no match with an RV: the latest state satisfies both.
                    None | Some("NotOlderThan") => Ok((ReadAt::Latest, None)),
                    Some(other) => Err(ApiError::bad_request(format!(
                        "resourceVersionMatch: Unsupported value: {other:?}: supported values: \"Exact\", \"NotOlderThan\""
                    ))),
                }
            }
        }
    }

    // === writes ===

    /// Refuses objects in a namespace that does not exist (404) or is being deleted (403).
    async fn check_namespace(&self, resource: &Resource, namespace: &str, name: &str) -> Result<()> {
        if !resource.info.namespaced {
            return Ok(());
        }
        let key = format!("/registry/core/namespaces/{namespace}");
        let Some(item) = self.store.get(key.as_bytes()).await? else {
            let namespaces = self.catalog().find("", "v1", "namespaces").expect("namespaces are built in");
            return Err(ApiError::not_found(&namespaces, namespace));
        };
        let ns: Value = serde_json::from_slice(&item.value).map_err(|e| ApiError::internal(e.to_string()))?;
        if meta::path_str(&ns, "status.phase") == "Terminating" || meta::is_deleting(&ns) {
            return Err(ApiError::forbidden(
                &resource.info,
                name,
                format!("unable to create new content in namespace {namespace} because it is being terminated"),
            ));
        }
        Ok(())
    }

    /// Checks what every object must satisfy: its type, its name, its namespace.
    fn check_identity(resource: &Resource, namespace: &str, obj: &Value) -> Result<()> {
        let info = &resource.info;
        if !obj.is_object() {
            return Err(ApiError::bad_request("the object must be a JSON object"));
        }
        if let Some(kind) = obj.get("kind").and_then(Value::as_str).filter(|k| !k.is_empty())
            && kind != info.kind
        {
            return Err(ApiError::bad_request(format!(
                "the kind {kind:?} in the body does not match the resource {:?} (kind {:?})",
                info.qualified(),
                info.kind
            )));
        }
        if let Some(api_version) = obj.get("apiVersion").and_then(Value::as_str).filter(|v| !v.is_empty())
            && api_version != info.api_version()
        {
            return Err(ApiError::bad_request(format!(
                "the apiVersion {api_version:?} in the body does not match the URL ({:?})",
                info.api_version()
            )));
        }
        let body_ns = meta::namespace(obj);
        if info.namespaced && !body_ns.is_empty() && body_ns != namespace {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        Ok(())
    }

    fn check_name(resource: &Resource, name: &str) -> Result<()> {
        if let Err(message) = resource.strategy.validate_name(name) {
            return Err(ApiError::invalid(
                &resource.info,
                name,
                vec![Cause::invalid("metadata.name", format!("Invalid value: {name:?}: {message}"))],
            ));
        }
        Ok(())
    }

    /// POST: creates an object.
    pub async fn create(&self, resource: &Resource, namespace: &str, body: Value, dry_run: bool) -> Result<Value> {
        let info = &resource.info;
        Self::check_identity(resource, namespace, &body)?;
        let mut obj = body;
        resource.decode(&mut obj)?;
        obj["apiVersion"] = json!(info.api_version());
        obj["kind"] = json!(info.kind);
        let generate = meta::meta_str(&obj, "generateName").to_string();
        let given = meta::name(&obj).to_string();
        if given.is_empty() && generate.is_empty() {
            return Err(ApiError::invalid(
                info,
                "",
                vec![Cause {
                    reason: "FieldValueRequired",
                    message: "name or generateName is required".into(),
                    field: "metadata.name".into(),
                }],
            ));
        }
        {
            let metadata = meta::metadata_mut(&mut obj);
            if info.namespaced {
                metadata.insert("namespace".into(), json!(namespace));
            } else {
                metadata.remove("namespace");
            }
            for cleared in ["resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"] {
                metadata.remove(cleared);
            }
            metadata.insert("uid".into(), json!(meta::new_uid()));
            metadata.insert("creationTimestamp".into(), json!(nest_core::clock::rfc3339_now()));
            metadata.insert("generation".into(), json!(1));
        }
        resource.strategy.prepare_for_create(&mut obj);
        let check_name = if given.is_empty() { meta::generate_name(&generate) } else { given.clone() };
        Self::check_name(resource, &check_name)?;
        let causes = resource.strategy.validate(&obj);
        if !causes.is_empty() {
            return Err(ApiError::invalid(info, &check_name, causes));
        }
        self.check_namespace(resource, namespace, &check_name).await?;
        if let Some(manager) = &resource.manager {
            crate::apply::track_update(
                resource,
                None,
                &mut obj,
                manager,
                Subresource::Main,
                &nest_core::clock::rfc3339_now(),
            );
        }
        let allocated = if dry_run { None } else { self.allocate_cluster_ip(info, &mut obj).await? };
        let created = self.create_named(resource, namespace, obj, &given, &generate, &check_name, dry_run).await;
        if created.is_err()
            && let Some(ip) = allocated
        {
            let _ = ipalloc::release(self.store.as_ref(), &ip).await;
        }
        created
    }

    /// Stores a prepared object under its name, or under generated names until one is free.
    #[allow(clippy::too_many_arguments)]
    async fn create_named(
        &self,
        resource: &Resource,
        namespace: &str,
        mut obj: Value,
        given: &str,
        generate: &str,
        check_name: &str,
        dry_run: bool,
    ) -> Result<Value> {
        let info = &resource.info;
        let attempts = if given.is_empty() { GENERATE_NAME_ATTEMPTS } else { 1 };
        for attempt in 0..attempts {
            let name = if !given.is_empty() {
                given.to_string()
            } else if attempt == 0 {
                check_name.to_string()
            } else {
                meta::generate_name(generate)
            };
            meta::metadata_mut(&mut obj).insert("name".into(), json!(name));
            let key = Self::key(info, namespace, &name);
            if dry_run {
                if self.store.get(key.as_bytes()).await?.is_some() {
                    if given.is_empty() {
                        continue;
                    }
                    return Err(ApiError::already_exists(info, &name));
                }
                return Ok(obj);
            }
            match self.store.create(key.as_bytes(), Self::encode(info, &obj)?).await {
                Ok(item) => {
                    self.after_write(info).await;
                    return Self::decode(info, &item);
                }
                Err(nest_storage::Error::AlreadyExists { .. }) if given.is_empty() => continue,
                Err(nest_storage::Error::AlreadyExists { .. }) => return Err(ApiError::already_exists(info, &name)),
                Err(e) => return Err(e.into()),
            }
        }
        Err(ApiError::already_exists(info, meta::name(&obj)).with_message(format!(
            "{} could not find a free name for generateName {generate:?} after {attempts} attempts",
            info.qualified()
        )))
    }

    /// PUT: replaces an object (or, for `/status`, its status). Fails with 409 when the body's resourceVersion is
    /// stale.
    pub async fn update(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
        body: Value,
        subresource: Subresource,
        dry_run: bool,
    ) -> Result<Value> {
        let info = &resource.info;
        Self::check_identity(resource, namespace, &body)?;
        let body_name = meta::name(&body);
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        let key = Self::key(info, namespace, name);
        let current = self.store.get(key.as_bytes()).await?.ok_or_else(|| ApiError::not_found(info, name))?;
        let old = Self::decode(info, &current)?;
        if info.custom && meta::meta_str(&body, "resourceVersion").is_empty() {
            return Err(ApiError::invalid(
                info,
                name,
                vec![Cause::invalid("metadata.resourceVersion", "Invalid value: 0x0: must be specified for an update")],
            ));
        }
        match self.next_version(resource, name, current.mod_revision, &old, body, subresource, dry_run)? {
            Updated::DryRun(obj) | Updated::Unchanged(obj) => Ok(obj),
            Updated::Store(obj) => self.write_back(resource, &key, name, obj, current.mod_revision).await,
        }
    }

    /// The object an update (PUT or PATCH) would store, from the stored one and the body: the checks both share.
    #[allow(clippy::too_many_arguments)]
    fn next_version(
        &self,
        resource: &Resource,
        name: &str,
        current: Revision,
        old: &Value,
        body: Value,
        subresource: Subresource,
        dry_run: bool,
    ) -> Result<Updated> {
        let info = &resource.info;
        // A body that carries resourceVersion asks for optimistic concurrency.
        let wanted_rv = meta::meta_str(&body, "resourceVersion");
        if !wanted_rv.is_empty() && wanted_rv != current.0.to_string() {
            return Err(ApiError::conflict(info, name));
        }
        let mut body = body;
        resource.decode(&mut body)?;
        let mut obj = self.merge_update(resource, old, body, subresource)?;
        let causes = resource.strategy.validate_update(&obj, old);
        if !causes.is_empty() {
            return Err(ApiError::invalid(info, name, causes));
        }
        if let Some(manager) = &resource.manager {
            crate::apply::track_update(
                resource,
                Some(old),
                &mut obj,
                manager,
                subresource,
                &nest_core::clock::rfc3339_now(),
            );
        }
        if dry_run {
            meta::metadata_mut(&mut obj).insert("resourceVersion".into(), json!(current.0.to_string()));
            return Ok(Updated::DryRun(obj));
        }
        if unchanged(&obj, old) {
            return Ok(Updated::Unchanged(old.clone()));
        }
        Ok(Updated::Store(obj))
    }

    /// Stores an updated object with compare-and-swap; an object being deleted whose finalizers are all gone is
    /// removed instead.
    async fn write_back(
        &self,
        resource: &Resource,
        key: &str,
        name: &str,
        obj: Value,
        expected: Revision,
    ) -> Result<Value> {
        let info = &resource.info;
        let grace_pending = obj["metadata"]["deletionGracePeriodSeconds"].as_i64().is_some_and(|g| g > 0);
        if meta::is_deleting(&obj)
            && meta::finalizers(&obj).is_empty()
            && !namespace_waiting(info, &obj)
            && !grace_pending
        {
            return match self.store.delete(key.as_bytes(), Some(expected)).await {
                Ok(deleted) => {
                    self.after_remove(info, &obj).await;
                    self.after_write(info).await;
                    Self::decode_at(info, &Self::encode(info, &obj)?, deleted.revision)
                }
                Err(nest_storage::Error::Conflict { .. }) => Err(ApiError::conflict(info, name)),
                Err(nest_storage::Error::NotFound { .. }) => Err(ApiError::not_found(info, name)),
                Err(e) => Err(e.into()),
            };
        }
        match self.store.update(key.as_bytes(), Self::encode(info, &obj)?, expected).await {
            Ok(item) => {
                self.after_write(info).await;
                Self::decode(info, &item)
            }
            Err(nest_storage::Error::Conflict { .. }) => Err(ApiError::conflict(info, name)),
            Err(nest_storage::Error::NotFound { .. }) => Err(ApiError::not_found(info, name)),
            Err(e) => Err(e.into()),
        }
    }

    /// Builds the object an update stores from the old one and the body, keeping what clients may not change.
    fn merge_update(&self, resource: &Resource, old: &Value, body: Value, subresource: Subresource) -> Result<Value> {
        let info = &resource.info;
        let body_managed_fields = body["metadata"].get("managedFields").cloned();
        let mut obj = match subresource {
            Subresource::Status => {
                let mut obj = old.clone();
                obj["status"] = body.get("status").cloned().unwrap_or(Value::Null);
                obj
            }
            Subresource::Binding => {
                let mut obj = old.clone();
                obj["spec"]["nodeName"] = body["spec"]["nodeName"].clone();
                obj["status"] = body.get("status").cloned().unwrap_or(Value::Null);
                obj
            }
            Subresource::Main => {
                let mut obj = body;
                if info.status {
                    obj["status"] = old.get("status").cloned().unwrap_or(Value::Null);
                }
                obj
            }
        };
        if obj.get("status").is_some_and(Value::is_null) {
            obj.as_object_mut().expect("an object").remove("status");
        }
        // managedFields travel with every write, status included (server-side apply to `/status` sets them).
        if subresource != Subresource::Main
            && let Some(fields) = body_managed_fields
        {
            meta::metadata_mut(&mut obj).insert("managedFields".into(), fields);
        }
        obj["apiVersion"] = json!(info.api_version());
        obj["kind"] = json!(info.kind);
        let old_meta = old.get("metadata").cloned().unwrap_or_else(|| json!({}));
        {
            let metadata = meta::metadata_mut(&mut obj);
            for kept in [
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                match old_meta.get(kept) {
                    Some(value) => metadata.insert(kept.into(), value.clone()),
                    None => metadata.remove(kept),
                };
            }
            metadata.remove("resourceVersion");
        }
        if subresource == Subresource::Main {
            resource.strategy.prepare_for_update(&mut obj, old);
        }
        if meta::is_deleting(old) {
            let before = meta::finalizers(old);
            if meta::finalizers(&obj).iter().any(|f| !before.contains(f)) {
                return Err(ApiError::invalid(
                    info,
                    meta::name(old),
                    vec![Cause {
                        reason: "FieldValueForbidden",
                        message: "Forbidden: no new finalizers can be added if the object is being deleted".into(),
                        field: "metadata.finalizers".into(),
                    }],
                ));
            }
        }
        // generation counts changes of everything but metadata and (with a status subresource) status.
        let spec_changed = |a: &Value, b: &Value| {
            let strip = |v: &Value| {
                let mut v = v.clone();
                if let Some(map) = v.as_object_mut() {
                    map.remove("metadata");
                    if info.status {
                        map.remove("status");
                    }
                }
                v
            };
            strip(a) != strip(b)
        };
        if spec_changed(&obj, old) {
            let generation = old_meta.get("generation").and_then(Value::as_i64).unwrap_or(0) + 1;
            meta::metadata_mut(&mut obj).insert("generation".into(), json!(generation));
        }
        Ok(obj)
    }

    /// Read-modify-write with retries on conflict: the mechanism under PATCH. `change` gets the current object
    /// (with its resourceVersion) and returns the new one.
    pub async fn update_with(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
        subresource: Subresource,
        dry_run: bool,
        mut change: impl FnMut(&Value) -> Result<Value> + Send,
    ) -> Result<Value> {
        let info = &resource.info;
        let key = Self::key(info, namespace, name);
        for _ in 0..16 {
            let current = self.store.get(key.as_bytes()).await?.ok_or_else(|| ApiError::not_found(info, name))?;
            let old = Self::decode(info, &current)?;
            let body = change(&old)?;
            Self::check_identity(resource, namespace, &body)?;
            if meta::name(&body) != name {
                return Err(ApiError::bad_request("the patch must not change metadata.name"));
            }
            // `change` starts from the current object, resourceVersion included; only a patch that set another
            // one asks for optimistic concurrency. Otherwise a conflict with a concurrent write is retried.
            let wanted_rv = meta::meta_str(&body, "resourceVersion");
            let conditional = !wanted_rv.is_empty() && wanted_rv != meta::meta_str(&old, "resourceVersion");
            let obj = match self.next_version(resource, name, current.mod_revision, &old, body, subresource, dry_run)? {
                Updated::DryRun(obj) | Updated::Unchanged(obj) => return Ok(obj),
                Updated::Store(obj) => obj,
            };
            match self.write_back(resource, &key, name, obj, current.mod_revision).await {
                Err(e) if e.reason == "Conflict" && !conditional => continue,
                other => return other,
            }
        }
        Err(ApiError::conflict(info, name))
    }

    /// DELETE. Objects with finalizers (after the propagation policy adds its own) are marked with a
    /// deletionTimestamp and kept; the rest are removed. Returns the object as it was last.
    pub async fn delete(
        &self,
        resource: &Resource,
        namespace: &str,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Value> {
        let info = &resource.info;
        let key = Self::key(info, namespace, name);
        for _ in 0..16 {
            let current = self.store.get(key.as_bytes()).await?.ok_or_else(|| ApiError::not_found(info, name))?;
            let mut obj = Self::decode(info, &current)?;
            if let Some(uid) = &options.precondition_uid
                && uid != meta::meta_str(&obj, "uid")
            {
                return Err(ApiError::conflict(info, name).with_message(format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    meta::meta_str(&obj, "uid")
                )));
            }
            if let Some(rv) = &options.precondition_resource_version
                && *rv != current.mod_revision.0.to_string()
            {
                return Err(ApiError::conflict(info, name).with_message(format!(
                    "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                    current.mod_revision
                )));
            }
            let mut finalizers = meta::finalizers(&obj);
            if !meta::is_deleting(&obj) {
                match options.propagation_policy.as_deref() {
                    Some("Foreground") if !finalizers.iter().any(|f| f == "foregroundDeletion") => {
                        finalizers.push("foregroundDeletion".into())
                    }
                    Some("Orphan") if !finalizers.iter().any(|f| f == "orphan") => finalizers.push("orphan".into()),
                    Some("Foreground" | "Orphan" | "Background") | None => {}
                    Some(other) => {
                        return Err(ApiError::invalid(
                            info,
                            name,
                            vec![Cause {
                                reason: "FieldValueNotSupported",
                                message: format!(
                                    "Unsupported value: {other:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
                                ),
                                field: "propagationPolicy".into(),
                            }],
                        ));
                    }
                }
            }
            // A pod on a node is deleted in two steps, as kube's pod strategy does: marked with a deletionTimestamp
            // at the end of its grace period, then removed by its node (with a grace period of 0) once stopped.
            let grace = pod_grace_period(info, &obj, options.grace_period_seconds);
            let pending_grace = meta::is_deleting(&obj)
                .then(|| obj["metadata"]["deletionGracePeriodSeconds"].as_i64().unwrap_or(0))
                .filter(|pending| *pending > 0);
            let graceful = !finalizers.is_empty() || namespace_waiting(info, &obj) || grace > 0;
            if !graceful {
                if options.dry_run {
                    return Ok(obj);
                }
                if Self::is_crd(info) {
                    self.delete_instances(&obj).await?;
                }
                return match self.store.delete(key.as_bytes(), Some(current.mod_revision)).await {
                    Ok(deleted) => {
                        self.after_remove(info, &obj).await;
                        self.after_write(info).await;
                        Self::decode_at(info, &Self::encode(info, &obj)?, deleted.revision)
                    }
                    Err(nest_storage::Error::Conflict { .. }) => continue,
                    Err(nest_storage::Error::NotFound { .. }) => Err(ApiError::not_found(info, name)),
                    Err(e) => Err(e.into()),
                };
            }
            // A second delete may only shorten a pod's grace period.
            let shorter = pending_grace.is_some_and(|pending| grace < pending);
            if meta::is_deleting(&obj) && finalizers == meta::finalizers(&obj) && !shorter {
                // Already being deleted; nothing changes.
                return Ok(obj);
            }
            {
                let metadata = meta::metadata_mut(&mut obj);
                metadata.insert("finalizers".into(), json!(finalizers));
                if !metadata.contains_key("deletionTimestamp") || shorter {
                    metadata.insert("deletionTimestamp".into(), json!(nest_core::clock::rfc3339_in(grace)));
                    metadata.insert("deletionGracePeriodSeconds".into(), json!(grace));
                }
            }
            if info.group.is_empty() && info.plural == "namespaces" {
                obj["status"]["phase"] = json!("Terminating");
            }
            if options.dry_run {
                return Ok(obj);
            }
            match self.store.update(key.as_bytes(), Self::encode(info, &obj)?, current.mod_revision).await {
                Ok(item) => return Self::decode(info, &item),
                Err(nest_storage::Error::Conflict { .. }) => continue,
                Err(nest_storage::Error::NotFound { .. }) => return Err(ApiError::not_found(info, name)),
                Err(e) => return Err(e.into()),
            }
        }
        Err(ApiError::conflict(info, name))
    }

    /// `PUT namespaces/<name>/finalize`: replaces `spec.finalizers`; a terminating namespace left with none is
    /// removed.
    pub async fn finalize_namespace(&self, name: &str, body: Value) -> Result<Value> {
        let resource = self.resource("", "v1", "namespaces").expect("namespaces are built in");
        let finalizers = body.get("spec").and_then(|s| s.get("finalizers")).cloned().unwrap_or_else(|| json!([]));
        let key = Self::key(&resource.info, "", name);
        let current = self.store.get(key.as_bytes()).await?.ok_or_else(|| ApiError::not_found(&resource.info, name))?;
        let wanted_rv = meta::meta_str(&body, "resourceVersion");
        if !wanted_rv.is_empty() && wanted_rv != current.mod_revision.0.to_string() {
            return Err(ApiError::conflict(&resource.info, name));
        }
        let mut obj = Self::decode(&resource.info, &current)?;
        obj["spec"]["finalizers"] = finalizers;
        meta::metadata_mut(&mut obj).remove("resourceVersion");
        self.write_back(&resource, &key, name, obj, current.mod_revision).await
    }

    // === watch ===

    /// WATCH: the changes after `resourceVersion` (or, when it is unset or "0", the current objects as ADDED events
    /// first), filtered by the selectors. A start too old for the retained history yields one ERROR event (410).
    pub async fn watch(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        options: &ListOptions,
        bookmark_every: Option<Duration>,
    ) -> Result<BoxStream<'static, WatchEvent>> {
        let info = resource.info.clone();
        let filter = Filter::new(resource, options)?;
        let prefix = Self::prefix(&info, namespace);
        if let Some(cache) = &self.cache {
            let start = match options.resource_version.as_deref().filter(|v| !v.is_empty()) {
                // Unset: start from the current state, which the cache must first have reached.
                None => cache.catch_up().await.then_some(Start::Now),
                Some("0") => Some(Start::Now),
                Some(v) => Some(Start::After(parse_rv(v)?)),
            };
            if let Some(start) = start
                && let Some(subscription) = cache.subscribe(&Self::prefix(&info, None), &prefix, start).await
            {
                return Ok(CachedWatch::stream(info, filter, prefix, subscription, cache.clone(), bookmark_every));
            }
        }
        let rv = options.resource_version.as_deref().filter(|v| !v.is_empty() && *v != "0");
        let (initial, from) = match rv {
            Some(v) => (Vec::new(), parse_rv(v)?.next()),
            None => {
                let everything = ListOptions {
                    label_selector: options.label_selector.clone(),
                    field_selector: options.field_selector.clone(),
                    ..ListOptions::default()
                };
                let list = self.list(resource, namespace, &everything).await?;
                let revision = parse_rv(list["metadata"]["resourceVersion"].as_str().unwrap_or("0"))?;
                let items = list["items"].as_array().cloned().unwrap_or_default();
                let events: Vec<Value> = items.into_iter().map(|obj| json!({"type": "ADDED", "object": obj})).collect();
                (events, revision.next())
            }
        };
        let stream = self.store.watch(prefix.as_bytes(), from).await?;
        let state =
            WatchState { info, filter, stream, last: Revision(from.0.saturating_sub(1)), bookmark_every, done: false };
        let live = futures_util::stream::unfold(state, |mut state| async move {
            let event = state.next().await?;
            Some((event, state))
        });
        Ok(futures_util::stream::iter(initial).chain(live).boxed())
    }
}

const CRD_PREFIX: &[u8] = b"/registry/apiextensions.k8s.io/customresourcedefinitions/";

/// Reads the stored CRDs and installs the catalogue they make; returns the revision read at.
async fn load_catalog(store: &dyn Store, catalog: &RwLock<Arc<Catalog>>) -> Result<Revision> {
    let listed = store.list(CRD_PREFIX, nest_storage::ListOptions::default()).await?;
    let crds: Vec<Value> = listed.items.iter().filter_map(|item| serde_json::from_slice(&item.value).ok()).collect();
    *catalog.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(Catalog::with_crds(&crds));
    Ok(listed.revision)
}

/// Reloads the catalogue whenever a CRD changes in storage, whoever changed it.
async fn follow_crds(store: Arc<dyn Store>, catalog: Arc<RwLock<Arc<Catalog>>>, mut from: Revision) {
    loop {
        let mut changes = match store.watch(CRD_PREFIX, from).await {
            Ok(changes) => changes,
            Err(_) => return,
        };
        while let Some(change) = changes.next().await {
            match change {
                Ok(event) => {
                    from = event.revision.next();
                    if let Err(error) = load_catalog(store.as_ref(), &catalog).await {
                        tracing::warn!(%error, "reloading CustomResourceDefinitions");
                    }
                }
                Err(nest_storage::Error::Closed) => return,
                Err(error) => {
                    // Fell behind or history was compacted: reload everything and watch again from there.
                    tracing::debug!(%error, "CRD watch ended; reloading");
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        match load_catalog(store.as_ref(), &catalog).await {
            Ok(revision) => from = revision.next(),
            Err(error) => tracing::warn!(%error, "reloading CustomResourceDefinitions"),
        }
    }
}

/// A namespace keeps existing while `spec.finalizers` (the namespace controller's) remain, even once terminating.
/// The grace period a delete gives `obj`, after kube's pod strategy (`CheckGracefulDelete`): for pods, the one asked
/// for or else `terminationGracePeriodSeconds`, but 0 for a pod no node runs and for a finished pod, and at least 1
/// when negative; 0 for everything else.
fn pod_grace_period(info: &ResourceInfo, obj: &Value, asked: Option<i64>) -> i64 {
    if !(info.group.is_empty() && info.plural == "pods") {
        return 0;
    }
    let spec = &obj["spec"];
    let period = asked.or_else(|| spec["terminationGracePeriodSeconds"].as_i64()).unwrap_or(0);
    let scheduled = spec["nodeName"].as_str().is_some_and(|n| !n.is_empty());
    let finished = matches!(obj["status"]["phase"].as_str(), Some("Succeeded" | "Failed"));
    if !scheduled || finished {
        0
    } else if period < 0 {
        1
    } else {
        period
    }
}

fn namespace_waiting(info: &ResourceInfo, obj: &Value) -> bool {
    info.group.is_empty()
        && info.plural == "namespaces"
        && obj.get("spec").and_then(|s| s.get("finalizers")).and_then(Value::as_array).is_some_and(|f| !f.is_empty())
}

struct WatchState {
    info: Arc<ResourceInfo>,
    filter: Filter,
    stream: nest_storage::WatchStream,
    /// The revision of the last change delivered or skipped: what a bookmark reports.
    last: Revision,
    bookmark_every: Option<Duration>,
    done: bool,
}

impl WatchState {
    async fn next(&mut self) -> Option<WatchEvent> {
        if self.done {
            return None;
        }
        loop {
            let next = match self.bookmark_every {
                Some(every) => match tokio::time::timeout(every, self.stream.next()).await {
                    Ok(next) => next,
                    Err(_) => {
                        return Some(json!({
                            "type": "BOOKMARK",
                            "object": {
                                "kind": self.info.kind,
                                "apiVersion": self.info.api_version(),
                                "metadata": {"resourceVersion": self.last.0.to_string()},
                            },
                        }));
                    }
                },
                None => self.stream.next().await,
            };
            let event = match next {
                None => return None,
                Some(Err(error)) => {
                    self.done = true;
                    let status = match error {
                        nest_storage::Error::Compacted { requested } => ApiError::expired(format!(
                            "too old resource version: {} ({requested})",
                            requested.0.saturating_sub(1)
                        )),
                        nest_storage::Error::WatchOverflow => ApiError::expired(
                            "the watch fell behind and was stopped; list again and watch from the new resourceVersion",
                        ),
                        other => ApiError::internal(other.to_string()),
                    };
                    return Some(json!({"type": "ERROR", "object": status.to_status()}));
                }
                Some(Ok(event)) => event,
            };
            self.last = event.revision;
            let obj = match Registry::decode_at(&self.info, &event.value, event.revision) {
                Ok(obj) => obj,
                Err(error) => return Some(json!({"type": "ERROR", "object": error.to_status()})),
            };
            if !self.filter.matches(&obj) {
                continue;
            }
            let kind = match event.kind {
                EventKind::Delete => "DELETED",
                EventKind::Put if event.is_create() => "ADDED",
                EventKind::Put => "MODIFIED",
            };
            return Some(json!({"type": kind, "object": obj}));
        }
    }
}

/// A list, from the cache or from storage.
enum Listed {
    Stored(Value),
    Cached(CachedList),
}

/// A list answered from a cache snapshot: filtered, cut at `limit` with a continue token pinned to the snapshot's
/// revision (later pages come from storage at that revision, which holds the same objects).
struct CachedList {
    info: Arc<ResourceInfo>,
    metadata: Value,
    items: Vec<Arc<cache::Cached>>,
}

impl CachedList {
    fn new(info: Arc<ResourceInfo>, filter: &Filter, limit: Option<usize>, snapshot: cache::Snapshot) -> CachedList {
        let mut items = Vec::new();
        let mut last_key = None;
        let mut more = false;
        for (key, obj) in snapshot.items {
            if !filter.matches_cached(&info, &obj) {
                continue;
            }
            if limit.is_some_and(|l| items.len() >= l) {
                more = true;
                break;
            }
            items.push(obj);
            last_key = Some(key);
        }
        let mut metadata = json!({"resourceVersion": snapshot.revision.0.to_string()});
        if more && let Some(key) = last_key {
            metadata["continue"] = json!(encode_continue(snapshot.revision, &key));
        }
        CachedList { info, metadata, items }
    }

    fn to_value(&self) -> Value {
        json!({
            "kind": format!("{}List", self.info.kind),
            "apiVersion": self.info.api_version(),
            "metadata": self.metadata,
            "items": self.items.iter().map(|obj| Registry::present(&self.info, obj)).collect::<Vec<_>>(),
        })
    }

    /// The list's JSON, with each object's shared encoding copied in. Only for objects served as stored (no schema
    /// defaults to apply).
    fn to_json(&self) -> Bytes {
        let head = json!({
            "kind": format!("{}List", self.info.kind),
            "apiVersion": self.info.api_version(),
            "metadata": self.metadata,
        })
        .to_string();
        let size = self.items.iter().map(|obj| obj.json().len() + 1).sum::<usize>();
        let mut out = Vec::with_capacity(head.len() + size + 16);
        out.extend_from_slice(&head.as_bytes()[..head.len() - 1]);
        out.extend_from_slice(b",\"items\":[");
        for (i, obj) in self.items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(obj.json());
        }
        out.extend_from_slice(b"]}");
        Bytes::from(out)
    }
}

/// A watch served from the [`WatchCache`]: the subscription's initial objects and replayed history, then its live
/// changes, filtered by namespace and selectors. An object that starts or stops matching the selectors arrives as
/// ADDED or DELETED, as kube-apiserver's cacher sends it.
struct CachedWatch {
    info: Arc<ResourceInfo>,
    filter: Filter,
    /// The key prefix of the watched namespace (or of the whole resource).
    scope: String,
    replay: std::collections::VecDeque<Arc<Change>>,
    live: tokio::sync::broadcast::Receiver<Arc<Change>>,
    /// Live changes at or before this revision were covered by the start.
    after: Revision,
    /// The revision this watcher is complete through: what a bookmark reports.
    last: Revision,
    cache: Arc<WatchCache>,
    bookmark_every: Option<Duration>,
}

impl CachedWatch {
    fn stream(
        info: Arc<ResourceInfo>,
        filter: Filter,
        scope: String,
        subscription: cache::Subscription,
        cache: Arc<WatchCache>,
        bookmark_every: Option<Duration>,
    ) -> BoxStream<'static, WatchEvent> {
        let initial: Vec<Value> = subscription
            .initial
            .iter()
            .filter(|(_, obj)| filter.matches_cached(&info, obj))
            .map(|(_, obj)| json!({"type": "ADDED", "object": Registry::present(&info, obj)}))
            .collect();
        let state = CachedWatch {
            info,
            filter,
            scope,
            replay: subscription.replay.into(),
            live: subscription.live,
            after: subscription.after,
            last: subscription.after,
            cache,
            bookmark_every,
        };
        let live = futures_util::stream::unfold(state, |mut state| async move {
            let event = state.next().await?;
            Some((event, state))
        });
        futures_util::stream::iter(initial).chain(live).boxed()
    }

    /// The next change as an event; `None` ends the watch (the watcher fell behind or the cache was rebuilt; the
    /// client resumes from the last revision it saw).
    async fn next(&mut self) -> Option<WatchEvent> {
        use tokio::sync::broadcast::error::{RecvError, TryRecvError};
        loop {
            let change = match self.replay.pop_front() {
                Some(change) => change,
                None => {
                    let received = match self.bookmark_every {
                        None => self.live.recv().await,
                        Some(every) => match tokio::time::timeout(every, self.live.recv()).await {
                            Ok(received) => received,
                            Err(_) => {
                                // The cache's revision, read before checking that nothing is queued here, is one
                                // this watcher is complete through.
                                let progress = self.cache.revision();
                                match self.live.try_recv() {
                                    Err(TryRecvError::Empty) => {
                                        self.last = self.last.max(progress);
                                        return Some(self.bookmark());
                                    }
                                    Ok(change) => Ok(change),
                                    Err(TryRecvError::Closed | TryRecvError::Lagged(_)) => return None,
                                }
                            }
                        },
                    };
                    match received {
                        Ok(change) if change.revision <= self.after => continue,
                        Ok(change) => change,
                        Err(RecvError::Closed | RecvError::Lagged(_)) => return None,
                    }
                }
            };
            self.last = self.last.max(change.revision);
            if !change.key.starts_with(&self.scope) {
                continue;
            }
            if let Some(event) = self.translate(&change) {
                return Some(event);
            }
        }
    }

    fn translate(&self, change: &Change) -> Option<WatchEvent> {
        let now = self.filter.matches_cached(&self.info, &change.object);
        let before = change.prev.as_ref().is_some_and(|prev| self.filter.matches_cached(&self.info, prev));
        let (kind, obj) = match (change.kind, before, now) {
            (ChangeKind::Added, _, true) => ("ADDED", Registry::present(&self.info, &change.object)),
            (ChangeKind::Deleted, _, true) => ("DELETED", Registry::present(&self.info, &change.object)),
            (ChangeKind::Modified, true, true) => ("MODIFIED", Registry::present(&self.info, &change.object)),
            (ChangeKind::Modified, false, true) => ("ADDED", Registry::present(&self.info, &change.object)),
            (ChangeKind::Modified, true, false) => {
                // Left the selection: its last matching state, at the revision it left.
                let mut prev = Registry::present(&self.info, change.prev.as_deref()?);
                meta::metadata_mut(&mut prev).insert("resourceVersion".into(), json!(change.revision.0.to_string()));
                ("DELETED", prev)
            }
            _ => return None,
        };
        Some(json!({"type": kind, "object": obj}))
    }

    fn bookmark(&self) -> WatchEvent {
        json!({
            "type": "BOOKMARK",
            "object": {
                "kind": self.info.kind,
                "apiVersion": self.info.api_version(),
                "metadata": {"resourceVersion": self.last.0.to_string()},
            },
        })
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

fn list_error(error: nest_storage::Error, options: &ListOptions) -> ApiError {
    match error {
        nest_storage::Error::Compacted { requested } if options.continue_token.is_some() => ApiError::expired(format!(
            "The provided continue parameter is too old to display a consistent list result. You can start a new \
             list without the continue parameter, or use the continue token in this response to retrieve the \
             remainder of the results. Continuing with the provided token results in an inconsistent list - objects \
             that were created, modified, or deleted between the time the first chunk was returned and now may show \
             up in the list. (revision {requested})"
        )),
        other => other.into(),
    }
}

/// Continue tokens: base64 of `{"v":"meta.k8s.io/v1","rv":R,"start":"<key>"}`, as kube-apiserver shapes them.
fn encode_continue(revision: Revision, key: &str) -> String {
    let token = json!({"v": "meta.k8s.io/v1", "rv": revision.0, "start": key});
    crate::base64::encode(token.to_string().as_bytes())
}

fn decode_continue(token: &str) -> Result<(Revision, String)> {
    let bad = || {
        ApiError::bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        )
    };
    let bytes = crate::base64::decode(token).ok_or_else(bad)?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    let revision = value.get("rv").and_then(Value::as_u64).ok_or_else(bad)?;
    let start = value.get("start").and_then(Value::as_str).ok_or_else(bad)?;
    Ok((Revision(revision), start.to_string()))
}

impl ApiError {
    /// The same error with another message.
    pub fn with_message(mut self, message: impl Into<String>) -> ApiError {
        self.message = message.into();
        self
    }
}
