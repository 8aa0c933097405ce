//! WATCH: from the watch cache, or from storage.

use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{BoxStream, StreamExt};
use nest_storage::{EventKind, Revision};
use serde_json::{Value, json};

use crate::cache::{self, Change, ChangeKind, Start, Subscribed, WatchCache};
use crate::catalog::ResourceInfo;
use crate::error::{ApiError, Result, StorageResult};
use crate::meta;

use super::{Filter, ListOptions, Registry, Resource, parse_rv};

/// One event of a watch, ready to serialise as `{"type": …, "object": …}`.
pub type WatchEvent = Value;

impl Registry {
    /// WATCH: the changes after `resourceVersion` (or, when it is unset or "0", the current objects as ADDED events
    /// first), filtered by the selectors. A start too old for the retained history — the watch cache's, once it has
    /// dropped a change after the start, else storage's — yields one ERROR event (410), as kube-apiserver's cacher
    /// answers once the resource version has parsed.
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
            if let Some(start) = start {
                match cache.subscribe(&Self::prefix(&info, None), &prefix, start).await {
                    Subscribed::Ready(subscription) => {
                        let cache = cache.clone();
                        return Ok(CachedWatch::stream(info, filter, prefix, subscription, cache, bookmark_every));
                    }
                    Subscribed::TooOld { requested, oldest } => {
                        let status = ApiError::expired(format!("too old resource version: {requested} ({oldest})"));
                        let error = json!({"type": "ERROR", "object": status.to_status()});
                        return Ok(futures_util::stream::iter([error]).boxed());
                    }
                    Subscribed::ToStorage => {}
                }
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
        let stream = self.store.watch(prefix.as_bytes(), from).await.storage()?;
        let state =
            WatchState { info, filter, stream, last: Revision(from.0.saturating_sub(1)), bookmark_every, done: false };
        let live = futures_util::stream::unfold(state, |mut state| async move {
            let event = state.next().await?;
            Some((event, state))
        });
        Ok(futures_util::stream::iter(initial).chain(live).boxed())
    }
}

pub(super) struct WatchState {
    info: Arc<ResourceInfo>,
    filter: Filter,
    stream: nest_storage::WatchStream,
    /// The revision of the last change delivered or skipped: what a bookmark reports.
    last: Revision,
    bookmark_every: Option<Duration>,
    done: bool,
}

impl WatchState {
    pub(super) async fn next(&mut self) -> Option<WatchEvent> {
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

/// A watch served from the [`WatchCache`]: the subscription's initial objects and replayed history, then its live
/// changes, filtered by namespace and selectors. An object that starts or stops matching the selectors arrives as
/// ADDED or DELETED, as kube-apiserver's cacher sends it.
pub(super) struct CachedWatch {
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
    pub(super) fn stream(
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
    pub(super) async fn next(&mut self) -> Option<WatchEvent> {
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

    pub(super) fn translate(&self, change: &Change) -> Option<WatchEvent> {
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

    pub(super) fn bookmark(&self) -> WatchEvent {
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
