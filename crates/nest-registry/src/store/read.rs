//! GET and LIST: from the watch cache when it can answer, else from storage.

use std::sync::Arc;

use bytes::Bytes;
use nest_storage::{ReadAt, Revision};
use serde_json::{Value, json};

use crate::cache::{self, WatchCache};
use crate::catalog::ResourceInfo;
use crate::error::{ApiError, Result, StorageResult};

use super::codec::{decode_continue, encode_continue};
use super::{Filter, ListOptions, Registry, Resource, parse_rv, too_large_rv};

/// Storage page size when a list has to filter.
const LIST_PAGE: usize = 500;

impl Registry {
    /// GET of one object.
    pub async fn get(&self, resource: &Resource, namespace: &str, name: &str) -> Result<Value> {
        let info = &resource.info;
        let item = self.store.get(Self::key(info, namespace, name).as_bytes()).await.about(info, name)?;
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

    pub(super) async fn list_any(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        options: &ListOptions,
    ) -> Result<Listed> {
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
    pub(super) async fn cache_ready(
        &self,
        cache: &WatchCache,
        resource_version: Option<&str>,
    ) -> Result<Option<Revision>> {
        match resource_version.filter(|v| !v.is_empty()) {
            None => Ok(cache.catch_up().await.then_some(Revision(0))),
            Some(v) => {
                let min = parse_rv(v)?;
                Ok(cache.wait_for(min, cache::CATCH_UP).await.then_some(min))
            }
        }
    }

    /// A cached object as served: a copy in the resource's shape, with schema defaults applied as on every read.
    pub(super) fn present(info: &ResourceInfo, obj: &Value) -> Value {
        let mut obj = obj.clone();
        crate::convert::from_storage(info, &mut obj);
        if let Some(schema) = &info.schema {
            crate::schema::default(schema, &mut obj);
        }
        obj
    }

    pub(super) async fn list_from_storage(
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
    pub(super) fn list_start(&self, options: &ListOptions, prefix: &str) -> Result<(ReadAt, Option<Bytes>)> {
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
}

/// A list, from the cache or from storage.
pub(super) enum Listed {
    Stored(Value),
    Cached(CachedList),
}

/// A list answered from a cache snapshot: filtered, cut at `limit` with a continue token pinned to the snapshot's
/// revision (later pages come from storage at that revision, which holds the same objects).
pub(super) struct CachedList {
    info: Arc<ResourceInfo>,
    metadata: Value,
    items: Vec<Arc<cache::Cached>>,
}

impl CachedList {
    pub(super) fn new(
        info: Arc<ResourceInfo>,
        filter: &Filter,
        limit: Option<usize>,
        snapshot: cache::Snapshot,
    ) -> CachedList {
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

    pub(super) fn to_value(&self) -> Value {
        json!({
            "kind": format!("{}List", self.info.kind),
            "apiVersion": self.info.api_version(),
            "metadata": self.metadata,
            "items": self.items.iter().map(|obj| Registry::present(&self.info, obj)).collect::<Vec<_>>(),
        })
    }

    /// The list's JSON, with each object's shared encoding copied in. Only for objects served as stored (no schema
    /// defaults to apply).
    pub(super) fn to_json(&self) -> Bytes {
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

pub(super) fn list_error(error: nest_storage::Error, options: &ListOptions) -> ApiError {
    match error {
        nest_storage::Error::Compacted { requested } if options.continue_token.is_some() => ApiError::expired(format!(
            "The provided continue parameter is too old to display a consistent list result. You can start a new \
             list without the continue parameter, or use the continue token in this response to retrieve the \
             remainder of the results. Continuing with the provided token results in an inconsistent list - objects \
             that were created, modified, or deleted between the time the first chunk was returned and now may show \
             up in the list. (revision {requested})"
        )),
        other => ApiError::from_storage(other),
    }
}
