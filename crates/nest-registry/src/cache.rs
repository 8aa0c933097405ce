//! The watch cache: lists and watches served from memory.
//!
//! After kube-apiserver's cacher (`k8s.io/apiserver/pkg/storage/cacher`, 1.33), with one difference: instead of one
//! storage watch per resource, one storage watch on `/registry/` feeds every resource's cache. Its position is then
//! the position of the whole registry, so "is the cache as new as storage?" is one comparison with
//! [`Store::current_revision`] and needs no progress notifications, which etcd 3.4 cannot be trusted with.
//!
//! A resource's cache is built the first time a list or watch asks for it (one storage list), and from then on
//! holds every object of that resource, decoded once, plus its last [`Config::history`] changes (`nest apiserver
//! --default-watch-cache-size`, [`DEFAULT_HISTORY`] unless set). Each change is published to the resource's watchers
//! through a broadcast channel. A watcher that falls [`BROADCAST`] changes behind is ended (kube-apiserver closes
//! unresponsive watchers too); the client resumes from the last revision it saw.
//!
//! The history bounds how far back a watch may resume, as kube-apiserver's watch cache does
//! (`getAllEventsSinceLocked`, `k8s.io/apiserver/pkg/storage/cacher/watch_cache.go`, 1.33): once a resource's history
//! has dropped a change, a watch from before that change is 410 `Expired`, "too old resource version", and the
//! client lists again. A start before the cache was listed, with nothing dropped since, is one the cache never had
//! rather than one it let go (caches are built when first asked for, and again after the storage watch ends): storage
//! serves it, as far back as its own history goes.
//!
//! When the storage watch itself ends (history compacted or the watch overflowed), every cache is dropped, its
//! watchers end, and caches are rebuilt on demand from a fresh list: nothing stale is ever served.
//!
//! The registry (the generic store's `Registry`) decides when to use the cache; anything the cache cannot answer —
//! an exact old revision, a continue token, a watch from before the retained history — goes to storage.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use nest_storage::{EventKind, ReadAt, Revision, Store};
use serde_json::{Value, json};
use tokio::sync::{Notify, broadcast, watch};

use crate::meta;

/// Changes kept per resource for watches that resume from a recent revision, unless [`Config::history`] says
/// otherwise. (kube-apiserver's `--default-watch-cache-size` is 100; nest has kept 1,024 from the start.)
pub const DEFAULT_HISTORY: usize = 1024;
/// The most changes per resource [`Config::history`] may ask for: each holds the object before and after the
/// change, and a resource's history is held whether or not anyone watches.
pub const MAX_HISTORY: usize = 100_000;
/// The most a resource's history holds, in bytes of the objects its changes carry (as stored; a change that replaced
/// an object counts it twice): however many changes it may keep, a flood of large objects (a tenant's megabyte
/// ConfigMaps, copied down) is not held once it is gone. A watch from before what was dropped is told 410 and lists
/// again, as one that fell behind any bound is.
pub const MAX_HISTORY_BYTES: usize = 8 << 20;
/// Changes a watcher may fall behind before it is ended.
pub const BROADCAST: usize = 1024;
/// How long a consistent read waits for the cache to reach the storage revision before reading storage instead.
pub const CATCH_UP: Duration = Duration::from_secs(1);
/// The storage page size when a cache is built.
const LOAD_PAGE: usize = 1000;

/// How the watch cache is sized.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Changes kept per resource (`--default-watch-cache-size`): a watch may resume from any revision they cover.
    /// Held to 1..=[`MAX_HISTORY`].
    pub history: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config { history: DEFAULT_HISTORY }
    }
}

/// What happened to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

/// An object as the cache holds it: decoded once, encoded to JSON at most once, shared by every reader.
#[derive(Debug)]
pub struct Cached {
    value: Value,
    json: OnceLock<Bytes>,
}

impl Cached {
    pub(crate) fn new(value: Value) -> Cached {
        Cached { value, json: OnceLock::new() }
    }

    /// The object's JSON, as served.
    pub fn json(&self) -> &Bytes {
        self.json.get_or_init(|| Bytes::from(serde_json::to_vec(&self.value).unwrap_or_default()))
    }
}

impl std::ops::Deref for Cached {
    type Target = Value;
    fn deref(&self) -> &Value {
        &self.value
    }
}

/// A cached object under its storage key.
pub type Entry = (Arc<str>, Arc<Cached>);

/// One change of one object, shared by every watcher.
#[derive(Debug)]
pub struct Change {
    /// The storage key.
    pub key: Arc<str>,
    pub revision: Revision,
    pub kind: ChangeKind,
    /// The object after the change; for a deletion, its last state, with the deletion's `resourceVersion`.
    pub object: Arc<Cached>,
    /// The object before the change, if it existed.
    pub prev: Option<Arc<Cached>>,
    /// What the change holds, in bytes as stored (counted against [`MAX_HISTORY_BYTES`]).
    bytes: usize,
}

/// A consistent view of one resource.
pub struct Snapshot {
    /// The revision the view is current at.
    pub revision: Revision,
    /// `(key, object)` in key order.
    pub items: Vec<Entry>,
}

/// A watcher's start: what it must send first, and where to read the rest.
pub struct Subscription {
    /// Current objects, for a watch that starts with synthetic ADDED events; empty otherwise.
    pub initial: Vec<Entry>,
    /// Changes already in the history that the watcher has not seen.
    pub replay: Vec<Arc<Change>>,
    /// Every later change.
    pub live: broadcast::Receiver<Arc<Change>>,
    /// Changes at or before this revision are already covered and must be skipped.
    pub after: Revision,
}

/// What [`WatchCache::subscribe`] could do for a watcher.
pub enum Subscribed {
    /// The cache serves the watch.
    Ready(Subscription),
    /// The start is older than a change the resource's history has dropped: 410, "too old resource version:
    /// `requested` (`oldest`)", where every change after `oldest` is still held.
    TooOld { requested: Revision, oldest: Revision },
    /// The cache cannot serve the watch (it started before the cache was listed, or the cache is unavailable) and
    /// storage must.
    ToStorage,
}

/// Where a watch starts.
#[derive(Clone, Copy, Debug)]
pub enum Start {
    /// With the current objects, then their changes.
    Now,
    /// With the changes after this revision.
    After(Revision),
}

/// The caches of every resource, fed by one storage watch.
pub struct WatchCache {
    store: Arc<dyn Store>,
    /// Changes kept per resource.
    history: usize,
    state: Mutex<State>,
    /// The revision the cache is complete through, published after each change is applied.
    progress: watch::Sender<Revision>,
    /// Wakes readers waiting for a cache under construction.
    loaded: Notify,
    /// Set when a consistent read found the cache behind storage (for instance because other tenants write to the
    /// same etcd); consistent reads then go to storage until the cache is seen current again.
    behind: AtomicBool,
}

struct State {
    /// Every change up to here has been applied.
    revision: Revision,
    /// Bumped when the caches are dropped, so that a cache built from an older list is not installed.
    epoch: u64,
    /// By resource prefix (`/registry/<group>/<plural>/`).
    resources: HashMap<String, Slot>,
    /// The storage watch ended for good (the store closed): every read goes to storage.
    closed: bool,
}

enum Slot {
    /// A list is under way; changes arriving meanwhile wait here.
    Loading(Vec<nest_storage::Event>),
    Ready(ResourceCache),
}

struct ResourceCache {
    objects: BTreeMap<Arc<str>, Arc<Cached>>,
    /// The revision the cache was listed at: changes at or before it are already in `objects`.
    listed: Revision,
    history: VecDeque<Arc<Change>>,
    /// The bytes `history`'s changes hold.
    history_bytes: usize,
    /// `history` holds every change after this revision.
    history_after: Revision,
    watchers: broadcast::Sender<Arc<Change>>,
}

impl ResourceCache {
    /// Whether the history has dropped a change since the cache was listed: it no longer covers every change after
    /// the list.
    fn dropped_any(&self) -> bool {
        self.history_after > self.listed
    }

    /// Applies one change (of `size` bytes as stored), keeping at most `history` of them and
    /// [`MAX_HISTORY_BYTES`] of what they hold.
    fn apply(
        &mut self,
        history: usize,
        key: &str,
        revision: Revision,
        (object, size): (Option<Value>, usize),
        deleted: bool,
    ) {
        if revision <= self.listed {
            return;
        }
        let Some(object) = object else { return };
        let object = Arc::new(Cached::new(object));
        let key: Arc<str> = match self.objects.get_key_value(key) {
            Some((existing, _)) => existing.clone(),
            None => Arc::from(key),
        };
        let prev = if deleted { self.objects.remove(&key) } else { self.objects.insert(key.clone(), object.clone()) };
        let kind = match (deleted, &prev) {
            (true, _) => ChangeKind::Deleted,
            (false, None) => ChangeKind::Added,
            (false, Some(_)) => ChangeKind::Modified,
        };
        let bytes = if prev.is_some() { size.saturating_mul(2) } else { size };
        let change = Arc::new(Change { key, revision, kind, object, prev, bytes });
        while (self.history.len() >= history || self.history_bytes.saturating_add(bytes) > MAX_HISTORY_BYTES)
            && let Some(oldest) = self.history.pop_front()
        {
            self.history_after = oldest.revision;
            self.history_bytes = self.history_bytes.saturating_sub(oldest.bytes);
        }
        self.history_bytes = self.history_bytes.saturating_add(bytes);
        self.history.push_back(change.clone());
        // No receivers is not an error here.
        let _ = self.watchers.send(change);
    }
}

impl WatchCache {
    /// Starts following `store` from its current revision. Needs a tokio runtime; the cache stops when the store
    /// closes.
    pub async fn start(store: Arc<dyn Store>, config: Config) -> nest_storage::Result<Arc<WatchCache>> {
        let revision = store.current_revision().await?;
        let cache = Arc::new(WatchCache {
            store,
            history: config.history.clamp(1, MAX_HISTORY),
            state: Mutex::new(State { revision, epoch: 0, resources: HashMap::new(), closed: false }),
            progress: watch::Sender::new(revision),
            loaded: Notify::new(),
            behind: AtomicBool::new(false),
        });
        tokio::spawn(cache.clone().follow());
        Ok(cache)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The one storage watch: applies every change to the cache of its resource.
    async fn follow(self: Arc<Self>) {
        loop {
            let from = self.lock().revision.next();
            let mut changes = match self.store.watch(b"/registry/", from).await {
                Ok(changes) => changes,
                Err(nest_storage::Error::Closed) => break,
                Err(error) => {
                    tracing::warn!(%error, "watch cache: cannot watch storage; starting over");
                    self.reset().await;
                    continue;
                }
            };
            loop {
                match changes.next().await {
                    Some(Ok(event)) => self.apply(event),
                    None | Some(Err(nest_storage::Error::Closed)) => {
                        self.lock().closed = true;
                        self.reset_caches();
                        return;
                    }
                    Some(Err(error)) => {
                        tracing::warn!(%error, "watch cache: storage watch ended; dropping caches");
                        self.reset().await;
                        break;
                    }
                }
            }
        }
        self.lock().closed = true;
        self.reset_caches();
    }

    fn apply(&self, event: nest_storage::Event) {
        let revision = event.revision;
        {
            let mut state = self.lock();
            let key = String::from_utf8_lossy(&event.key).into_owned();
            if let Some(slot) = resource_prefix(&key).and_then(|prefix| state.resources.get_mut(prefix)) {
                match slot {
                    Slot::Loading(pending) => pending.push(event),
                    Slot::Ready(cache) => {
                        let deleted = event.kind == EventKind::Delete;
                        let change = (decode(&event.value, revision), event.value.len());
                        cache.apply(self.history, &key, revision, change, deleted);
                    }
                }
            }
            state.revision = state.revision.max(revision);
        }
        self.progress.send_replace(revision);
    }

    /// Drops every cache (their watchers end) and starts again from the store's current revision.
    async fn reset(&self) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let revision = match self.store.current_revision().await {
            Ok(revision) => revision,
            Err(_) => self.lock().revision,
        };
        self.reset_caches();
        let mut state = self.lock();
        state.revision = state.revision.max(revision);
        drop(state);
        self.progress.send_replace(revision);
    }

    fn reset_caches(&self) {
        let mut state = self.lock();
        state.epoch += 1;
        state.resources.clear();
        drop(state);
        self.loaded.notify_waiters();
    }

    /// Builds the caches of these resources (prefixes as in [`WatchCache::snapshot`]), one after the other.
    pub async fn warm(self: Arc<Self>, prefixes: Vec<String>) {
        for prefix in prefixes {
            self.with_ready(&prefix, |_, _| ()).await;
        }
    }

    /// The revision the cache is complete through.
    pub fn revision(&self) -> Revision {
        *self.progress.borrow()
    }

    /// Waits until the cache has applied every change up to `target`; false if it has not within `wait`.
    pub async fn wait_for(&self, target: Revision, wait: Duration) -> bool {
        let mut progress = self.progress.subscribe();
        matches!(tokio::time::timeout(wait, progress.wait_for(|r| *r >= target)).await, Ok(Ok(_)))
    }

    /// Waits until the cache is as new as storage is now, for a consistent read; false when the caller should read
    /// storage instead.
    pub async fn catch_up(&self) -> bool {
        let Ok(target) = self.store.current_revision().await else { return false };
        if self.revision() >= target {
            self.behind.store(false, Ordering::Relaxed);
            return true;
        }
        if self.behind.load(Ordering::Relaxed) {
            return false;
        }
        let caught_up = self.wait_for(target, CATCH_UP).await;
        self.behind.store(!caught_up, Ordering::Relaxed);
        caught_up
    }

    /// Every object of the resource under `prefix` whose key starts with `scope` (a namespace's prefix, or `prefix`
    /// itself), in key order; the caller filters and cuts. `None` when the cache cannot serve it and storage must.
    pub async fn snapshot(&self, prefix: &str, scope: &str) -> Option<Snapshot> {
        self.with_ready(prefix, |state, cache| Snapshot {
            revision: state.revision.max(cache.listed),
            items: in_scope(cache, scope),
        })
        .await
    }

    /// The object under the storage key `key`: `Some(None)` when the cache holds its resource and not the object,
    /// `None` when the cache cannot serve it (or has not been built: this never builds one) and storage must.
    pub fn get(&self, key: &str) -> Option<Option<Arc<Cached>>> {
        let state = self.lock();
        match state.resources.get(resource_prefix(key)?) {
            Some(Slot::Ready(cache)) if !state.closed => Some(cache.objects.get(key).cloned()),
            _ => None,
        }
    }

    /// Starts a watcher of the resource under `prefix`: [`Subscribed::TooOld`] when the start is older than a change
    /// the history has dropped, [`Subscribed::ToStorage`] when it is older than the cache itself (or the cache is
    /// unavailable).
    pub async fn subscribe(&self, prefix: &str, scope: &str, start: Start) -> Subscribed {
        self.with_ready(prefix, |state, cache| {
            let revision = state.revision.max(cache.listed);
            match start {
                Start::Now => Subscribed::Ready(Subscription {
                    initial: in_scope(cache, scope),
                    replay: Vec::new(),
                    live: cache.watchers.subscribe(),
                    after: revision,
                }),
                Start::After(after) if after >= cache.history_after => Subscribed::Ready(Subscription {
                    initial: Vec::new(),
                    replay: cache.history.iter().filter(|c| c.revision > after).cloned().collect(),
                    live: cache.watchers.subscribe(),
                    after: after.max(revision),
                }),
                Start::After(after) if cache.dropped_any() => {
                    Subscribed::TooOld { requested: after, oldest: cache.history_after }
                }
                Start::After(_) => Subscribed::ToStorage,
            }
        })
        .await
        .unwrap_or(Subscribed::ToStorage)
    }

    /// Runs `read` on the resource's cache, building the cache first if needed.
    async fn with_ready<T>(&self, prefix: &str, read: impl Fn(&State, &ResourceCache) -> T) -> Option<T> {
        loop {
            let loaded = self.loaded.notified();
            tokio::pin!(loaded);
            loaded.as_mut().enable();
            let epoch = {
                let mut state = self.lock();
                if state.closed {
                    return None;
                }
                match state.resources.get(prefix) {
                    Some(Slot::Ready(cache)) => return Some(read(&state, cache)),
                    Some(Slot::Loading(_)) => None,
                    None => {
                        state.resources.insert(prefix.to_string(), Slot::Loading(Vec::new()));
                        Some(state.epoch)
                    }
                }
            };
            match epoch {
                None => loaded.await,
                Some(epoch) => {
                    let built = self.load(prefix, epoch).await;
                    self.loaded.notify_waiters();
                    if !built {
                        return None;
                    }
                }
            }
        }
    }

    /// Lists the resource from storage and installs its cache; false if that failed (the slot is then freed).
    async fn load(&self, prefix: &str, epoch: u64) -> bool {
        let listed = self.list_all(prefix).await;
        let mut state = self.lock();
        if state.epoch != epoch {
            return true; // Dropped meanwhile; the caller tries again.
        }
        let (revision, items) = match listed {
            Ok(listed) => listed,
            Err(error) => {
                tracing::warn!(%error, prefix, "watch cache: cannot list; serving from storage");
                state.resources.remove(prefix);
                return false;
            }
        };
        let Some(Slot::Loading(pending)) = state.resources.remove(prefix) else { return false };
        let mut cache = ResourceCache {
            objects: items,
            listed: revision,
            history: VecDeque::new(),
            history_bytes: 0,
            history_after: revision,
            watchers: broadcast::Sender::new(BROADCAST),
        };
        for event in pending {
            let key = String::from_utf8_lossy(&event.key).into_owned();
            let change = (decode(&event.value, event.revision), event.value.len());
            cache.apply(self.history, &key, event.revision, change, event.kind == EventKind::Delete);
        }
        state.resources.insert(prefix.to_string(), Slot::Ready(cache));
        true
    }

    async fn list_all(&self, prefix: &str) -> nest_storage::Result<(Revision, BTreeMap<Arc<str>, Arc<Cached>>)> {
        let mut objects = BTreeMap::new();
        let mut options =
            nest_storage::ListOptions { revision: ReadAt::Latest, limit: Some(LOAD_PAGE), start_after: None };
        loop {
            let page = self.store.list(prefix.as_bytes(), options.clone()).await?;
            for item in &page.items {
                let key: Arc<str> = Arc::from(String::from_utf8_lossy(&item.key));
                if let Some(object) = decode(&item.value, item.mod_revision) {
                    objects.insert(key, Arc::new(Cached::new(object)));
                }
            }
            if !page.more {
                return Ok((page.revision, objects));
            }
            options.revision = ReadAt::Revision(page.revision);
            options.start_after = page.items.last().map(|i| i.key.clone());
        }
    }
}

/// `/registry/<group>/<plural>/` of a key, the prefix its resource's cache is filed under.
fn resource_prefix(key: &str) -> Option<&str> {
    let rest = key.strip_prefix("/registry/")?;
    let group_end = rest.find('/')?;
    let plural_end = rest[group_end + 1..].find('/')?;
    Some(&key[..("/registry/".len() + group_end + 1 + plural_end + 1)])
}

fn in_scope(cache: &ResourceCache, scope: &str) -> Vec<Entry> {
    cache
        .objects
        .range::<str, _>((Bound::Included(scope), Bound::Unbounded))
        .take_while(|(key, _)| key.starts_with(scope))
        .map(|(key, object)| (key.clone(), object.clone()))
        .collect()
}

/// A stored object with its `resourceVersion`; `None` (and a warning) if it is not JSON.
pub(crate) fn decode(bytes: &[u8], revision: Revision) -> Option<Value> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(mut object) => {
            meta::metadata_mut(&mut object).insert("resourceVersion".into(), json!(revision.0.to_string()));
            Some(object)
        }
        Err(error) => {
            tracing::warn!(%error, revision = revision.0, "watch cache: stored object is not JSON; skipped");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_history_keeps_as_many_changes_as_configured_and_says_when_it_dropped_one() {
        let mut cache = ResourceCache {
            objects: BTreeMap::new(),
            listed: Revision(10),
            history: VecDeque::new(),
            history_bytes: 0,
            history_after: Revision(10),
            watchers: broadcast::Sender::new(4),
        };
        let key = "/registry/core/configmaps/ns/a";
        cache.apply(2, key, Revision(11), (Some(json!({})), 2), false);
        cache.apply(2, key, Revision(12), (Some(json!({})), 2), false);
        assert!(!cache.dropped_any(), "two changes fit in a history of two");
        cache.apply(2, key, Revision(13), (Some(json!({})), 2), true);
        let kept: Vec<(u64, ChangeKind)> = cache.history.iter().map(|c| (c.revision.0, c.kind)).collect();
        assert_eq!(kept, [(12, ChangeKind::Modified), (13, ChangeKind::Deleted)]);
        assert_eq!(cache.history_after, Revision(11), "every change after 11 is held");
        assert!(cache.dropped_any());
    }

    #[test]
    fn the_history_holds_no_more_than_its_bytes_of_large_objects() {
        let mut cache = ResourceCache {
            objects: BTreeMap::new(),
            listed: Revision(0),
            history: VecDeque::new(),
            history_bytes: 0,
            history_after: Revision(0),
            watchers: broadcast::Sender::new(4),
        };
        // Megabyte objects, made and deleted: a history of 1,024 changes keeps only what fits in its bytes.
        let megabyte = 1 << 20;
        for i in 0..20u64 {
            let key = format!("/registry/core/configmaps/ns/c{i}");
            cache.apply(1024, &key, Revision(2 * i + 1), (Some(json!({})), megabyte), false);
            cache.apply(1024, &key, Revision(2 * i + 2), (Some(json!({})), megabyte), true);
        }
        assert!(cache.history_bytes <= MAX_HISTORY_BYTES, "{}", cache.history_bytes);
        assert_eq!(cache.history_bytes, cache.history.iter().map(|c| c.bytes).sum::<usize>());
        assert!(cache.history.len() < 10 && cache.dropped_any(), "{}", cache.history.len());
        assert_eq!(cache.history.back().map(|c| c.revision), Some(Revision(40)), "the newest change is kept");
        // One change larger than the whole budget is still kept (a watcher must see it), alone.
        cache.apply(
            1024,
            "/registry/core/configmaps/ns/big",
            Revision(41),
            (Some(json!({})), 2 * MAX_HISTORY_BYTES),
            false,
        );
        assert_eq!(cache.history.len(), 1);
    }

    #[test]
    fn keys_file_under_their_resource() {
        assert_eq!(resource_prefix("/registry/core/pods/ns/a"), Some("/registry/core/pods/"));
        assert_eq!(resource_prefix("/registry/apps/deployments/x"), Some("/registry/apps/deployments/"));
        assert_eq!(resource_prefix("/registry/core/"), None);
        assert_eq!(resource_prefix("/other/core/pods/a"), None);
    }
}
