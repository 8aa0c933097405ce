//! The watch cache, in process over the embedded storage backend: lists and watches answered from memory, never
//! stale, and watches that see objects enter and leave a selection.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use nest_registry::{ListOptions, Registry, Resource};
use nest_storage::embedded::EmbeddedStore;
use nest_storage::{Deleted, KeyValue, ListResult, Revision, Store, WatchStream};
use serde_json::{Value, json};

/// The embedded store, counting the lists and watches that reach it, with a gate on its watches: while the gate is
/// shut, watch events wait, and the watch cache falls behind storage as far as a test wants.
struct Counted {
    inner: EmbeddedStore,
    /// The prefix of every list.
    lists: std::sync::Mutex<Vec<Vec<u8>>>,
    watches: AtomicUsize,
    open: tokio::sync::watch::Sender<bool>,
}

impl Counted {
    /// Lists of configmaps so far (other resources' caches are built in the background as the registry opens).
    fn configmap_lists(&self) -> usize {
        self.lists.lock().unwrap().iter().filter(|p| p.starts_with(b"/registry/core/configmaps/")).count()
    }
}

#[async_trait]
impl Store for Counted {
    async fn get(&self, key: &[u8]) -> nest_storage::Result<Option<KeyValue>> {
        self.inner.get(key).await
    }
    async fn list(&self, prefix: &[u8], options: nest_storage::ListOptions) -> nest_storage::Result<ListResult> {
        self.lists.lock().unwrap().push(prefix.to_vec());
        self.inner.list(prefix, options).await
    }
    async fn create(&self, key: &[u8], value: Bytes) -> nest_storage::Result<KeyValue> {
        self.inner.create(key, value).await
    }
    async fn update(&self, key: &[u8], value: Bytes, expected: Revision) -> nest_storage::Result<KeyValue> {
        self.inner.update(key, value, expected).await
    }
    async fn delete(&self, key: &[u8], expected: Option<Revision>) -> nest_storage::Result<Deleted> {
        self.inner.delete(key, expected).await
    }
    async fn watch(&self, prefix: &[u8], from: Revision) -> nest_storage::Result<WatchStream> {
        self.watches.fetch_add(1, Ordering::SeqCst);
        let events = self.inner.watch(prefix, from).await?;
        let open = self.open.subscribe();
        Ok(events
            .then(move |event| {
                let mut open = open.clone();
                async move {
                    let _ = open.wait_for(|open| *open).await;
                    event
                }
            })
            .boxed())
    }
    async fn current_revision(&self) -> nest_storage::Result<Revision> {
        self.inner.current_revision().await
    }
    async fn count(&self, prefix: &[u8]) -> nest_storage::Result<u64> {
        self.inner.count(prefix).await
    }
    async fn compact(&self, revision: Revision) -> nest_storage::Result<()> {
        self.inner.compact(revision).await
    }
    fn backend(&self) -> &'static str {
        "counted"
    }
}

struct Fixture {
    registry: Registry,
    store: Arc<Counted>,
    _dir: tempfile::TempDir,
}

impl Fixture {
    async fn new() -> Fixture {
        Fixture::with_cache(Default::default()).await
    }

    /// A registry whose watch cache is sized by `cache` (`--default-watch-cache-size`).
    async fn with_cache(cache: nest_registry::cache::Config) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let inner = EmbeddedStore::open(dir.path(), Default::default()).unwrap();
        let open = tokio::sync::watch::Sender::new(true);
        let store = Arc::new(Counted { inner, lists: Default::default(), watches: AtomicUsize::new(0), open });
        let registry = Registry::open_with(store.clone(), cache).await.unwrap();
        registry.create(&cms(&registry, "namespaces"), "", json!({"metadata": {"name": "ns"}}), false).await.unwrap();
        Fixture { registry, store, _dir: dir }
    }

    fn configmaps(&self) -> Resource {
        cms(&self.registry, "configmaps")
    }

    async fn put(&self, name: &str, labels: Value) -> Value {
        let body = json!({"metadata": {"name": name, "labels": labels}});
        let resource = self.configmaps();
        match self.registry.get(&resource, "ns", name).await {
            Ok(mut old) => {
                old["metadata"]["labels"] = labels;
                self.registry.update(&resource, "ns", name, old, nest_registry::Subresource::Main, false).await.unwrap()
            }
            Err(_) => self.registry.create(&resource, "ns", body, false).await.unwrap(),
        }
    }

    async fn names(&self, options: &ListOptions) -> Vec<String> {
        let list = self.registry.list(&self.configmaps(), Some("ns"), options).await.unwrap();
        list["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap().to_string()).collect()
    }
}

fn cms(registry: &Registry, plural: &str) -> Resource {
    registry.resource("", "v1", plural).unwrap()
}

async fn next(stream: &mut BoxStream<'static, Value>) -> Value {
    tokio::time::timeout(Duration::from_secs(10), stream.next()).await.expect("an event in time").expect("an event")
}

fn summary(event: &Value) -> (String, String) {
    (event["type"].as_str().unwrap().to_string(), event["object"]["metadata"]["name"].as_str().unwrap().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_come_from_memory_once_the_cache_is_built_and_never_lag_behind_writes() {
    let f = Fixture::new().await;
    f.put("first", json!({})).await;
    assert_eq!(f.names(&ListOptions::default()).await, ["first"]);
    let lists_after_warmup = f.store.configmap_lists();

    // Read-your-writes: every list right after a write sees it, though it is served from memory.
    for i in 0..50 {
        f.put(&format!("cm-{i:02}"), json!({})).await;
        assert_eq!(f.names(&ListOptions::default()).await.len(), i + 2);
        let any = ListOptions { resource_version: Some("0".into()), ..Default::default() };
        assert!(f.names(&any).await.len() <= i + 2);
    }
    assert_eq!(f.store.configmap_lists(), lists_after_warmup, "no list reached storage");

    // Pages: the first from memory, later ones from storage at the same revision, and together the same objects.
    let page = ListOptions { limit: Some(20), ..Default::default() };
    let first = f.registry.list(&f.configmaps(), Some("ns"), &page).await.unwrap();
    assert_eq!(first["items"].as_array().unwrap().len(), 20);
    f.put("late", json!({})).await;
    let token = first["metadata"]["continue"].as_str().unwrap().to_string();
    let rest = ListOptions { continue_token: Some(token), ..Default::default() };
    let rest = f.registry.list(&f.configmaps(), Some("ns"), &rest).await.unwrap();
    assert_eq!(rest["metadata"]["resourceVersion"], first["metadata"]["resourceVersion"]);
    assert_eq!(rest["items"].as_array().unwrap().len(), 31, "51 objects in all, without the late one");

    // A resourceVersion newer than anything stored is refused, as kube-apiserver does.
    let future = ListOptions { resource_version: Some("999999".into()), ..Default::default() };
    let error = f.registry.list(&f.configmaps(), Some("ns"), &future).await.unwrap_err();
    assert_eq!((error.code, error.reason), (504, "Timeout"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_see_objects_enter_and_leave_their_selection() {
    let f = Fixture::new().await;
    let web = ListOptions { label_selector: Some("app=web".into()), ..Default::default() };
    let mut watch = f.registry.watch(&f.configmaps(), Some("ns"), &web, None).await.unwrap();
    let mut all = f.registry.watch(&f.configmaps(), None, &ListOptions::default(), None).await.unwrap();

    f.put("a", json!({"app": "db"})).await;
    f.put("a", json!({"app": "web"})).await;
    f.put("a", json!({"app": "web", "tier": "front"})).await;
    let left = f.put("a", json!({"app": "db"})).await;
    f.put("b", json!({"app": "web"})).await;

    assert_eq!(summary(&next(&mut watch).await), ("ADDED".into(), "a".into()));
    assert_eq!(summary(&next(&mut watch).await), ("MODIFIED".into(), "a".into()));
    let gone = next(&mut watch).await;
    assert_eq!(summary(&gone), ("DELETED".into(), "a".into()));
    assert_eq!(gone["object"]["metadata"]["labels"]["app"], "web", "the last state that matched");
    assert_eq!(gone["object"]["metadata"]["resourceVersion"], left["metadata"]["resourceVersion"]);
    assert_eq!(summary(&next(&mut watch).await), ("ADDED".into(), "b".into()));

    let mut seen = Vec::new();
    for _ in 0..5 {
        seen.push(summary(&next(&mut all).await).0);
    }
    assert_eq!(seen, ["ADDED", "MODIFIED", "MODIFIED", "MODIFIED", "ADDED"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_resume_from_the_cache_history_even_after_storage_compacts() {
    let f = Fixture::new().await;
    let start = f.put("a", json!({})).await;
    // Build the cache, then change things.
    f.names(&ListOptions::default()).await;
    f.put("b", json!({})).await;
    f.put("a", json!({"x": "y"})).await;
    f.store.compact(f.store.current_revision().await.unwrap()).await.unwrap();
    let watches = f.store.watches.load(Ordering::SeqCst);

    let resume = ListOptions {
        resource_version: start["metadata"]["resourceVersion"].as_str().map(Into::into),
        ..Default::default()
    };
    let mut watch = f.registry.watch(&f.configmaps(), Some("ns"), &resume, None).await.unwrap();
    assert_eq!(summary(&next(&mut watch).await), ("ADDED".into(), "b".into()));
    assert_eq!(summary(&next(&mut watch).await), ("MODIFIED".into(), "a".into()));
    f.put("c", json!({})).await;
    assert_eq!(summary(&next(&mut watch).await), ("ADDED".into(), "c".into()));
    assert_eq!(f.store.watches.load(Ordering::SeqCst), watches, "no watch reached storage");

    // Bookmarks report the cache's progress, even when the changes are to other resources.
    let bookmarks = ListOptions { allow_watch_bookmarks: true, ..Default::default() };
    let every = Some(Duration::from_millis(100));
    let mut quiet = f.registry.watch(&f.configmaps(), Some("ns"), &bookmarks, every).await.unwrap();
    for _ in 0..3 {
        assert_eq!(next(&mut quiet).await["type"], "ADDED");
    }
    let secrets = f.registry.resource("", "v1", "secrets").unwrap();
    let secret = f.registry.create(&secrets, "ns", json!({"metadata": {"name": "s"}}), false).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let bookmark = next(&mut quiet).await;
        assert_eq!(bookmark["type"], "BOOKMARK");
        if bookmark["object"]["metadata"]["resourceVersion"] == secret["metadata"]["resourceVersion"] {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "bookmarks never reached the secret's revision");
    }
}

/// The history bounds how far back a watch resumes (`--default-watch-cache-size`, here 3): from a revision whose
/// changes the history has dropped, the watch is one ERROR event, 410 `Expired` "too old resource version", as
/// kube-apiserver's watch cache answers — never a storage watch that replays what the cache let go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_older_than_a_small_history_is_410_too_old() {
    let f = Fixture::with_cache(nest_registry::cache::Config { history: 3 }).await;
    // Build the cache, then change configmaps five times: the history holds the last three.
    f.names(&ListOptions::default()).await;
    let a = f.put("a", json!({})).await;
    let b = f.put("b", json!({})).await;
    for name in ["c", "d", "e"] {
        f.put(name, json!({})).await;
    }
    // A consistent list waits for the cache to have every change.
    assert_eq!(f.names(&ListOptions::default()).await, ["a", "b", "c", "d", "e"]);
    let watches = f.store.watches.load(Ordering::SeqCst);
    let from = |obj: &Value| ListOptions { resource_version: Some(rv(obj).to_string()), ..Default::default() };

    // From b's revision: every later change is still held.
    let mut resumed = f.registry.watch(&f.configmaps(), Some("ns"), &from(&b), None).await.unwrap();
    for name in ["c", "d", "e"] {
        assert_eq!(summary(&next(&mut resumed).await), ("ADDED".into(), name.into()));
    }

    // From a's: b's change is gone from the history.
    let mut expired = f.registry.watch(&f.configmaps(), Some("ns"), &from(&a), None).await.unwrap();
    let error = next(&mut expired).await;
    assert_eq!(error["type"], "ERROR");
    let status = &error["object"];
    assert_eq!((status["code"].as_i64(), status["reason"].as_str()), (Some(410), Some("Expired")), "{status}");
    assert_eq!(status["message"], format!("too old resource version: {} ({})", rv(&a), rv(&b)));
    assert!(tokio::time::timeout(Duration::from_secs(1), expired.next()).await.is_ok_and(|e| e.is_none()));
    assert_eq!(f.store.watches.load(Ordering::SeqCst), watches, "no watch reached storage");
}

/// Updates start from the watch cache's copy, as kube-apiserver's do; with the cache held back behind storage, every
/// answer must still be the one the object in storage gives, never one about the stale copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_answer_for_what_storage_holds_while_the_cache_lags() {
    let f = Fixture::new().await;
    let cms = f.configmaps();
    let main = nest_registry::Subresource::Main;
    let create = |body: Value| f.registry.create(&cms, "ns", body, false);
    create(json!({"metadata": {"name": "sealed"}, "immutable": true, "data": {"a": "1"}})).await.unwrap();
    create(json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}})).await.unwrap();
    f.registry.delete(&cms, "ns", "held", &Default::default()).await.unwrap();
    let before = create(json!({"metadata": {"name": "plain"}, "data": {"n": "1"}})).await.unwrap();
    // The cache has all of that; from here on it sees nothing.
    assert_eq!(f.names(&ListOptions::default()).await, ["held", "plain", "sealed"]);
    f.store.open.send_replace(false);

    // An immutable ConfigMap deleted and made again mutable: the cache's copy would refuse the change (422).
    f.registry.delete(&cms, "ns", "sealed", &Default::default()).await.unwrap();
    create(json!({"metadata": {"name": "sealed"}, "data": {"a": "1"}})).await.unwrap();
    let body = json!({"metadata": {"name": "sealed"}, "data": {"a": "2"}});
    let changed = f.registry.update(&cms, "ns", "sealed", body, main, false).await.unwrap();
    assert_eq!(changed["data"]["a"], "2");

    // An object the cache still shows being deleted, gone and made again: an update of the new one keeps it.
    let mut unheld = f.registry.get(&cms, "ns", "held").await.unwrap();
    unheld["metadata"]["finalizers"] = json!([]);
    f.registry.update(&cms, "ns", "held", unheld, main, false).await.unwrap();
    create(json!({"metadata": {"name": "held"}, "data": {"v": "new"}})).await.unwrap();
    let body = json!({"metadata": {"name": "held"}, "data": {"v": "newer"}});
    let kept = f.registry.update(&cms, "ns", "held", body, main, false).await.unwrap();
    assert!(kept["metadata"].get("deletionTimestamp").is_none(), "{kept}");
    assert_eq!(f.registry.get(&cms, "ns", "held").await.unwrap()["data"]["v"], "newer");

    // A change the cache has not seen: the body it would call unchanged must still be written, and the version
    // storage holds must be accepted.
    let mut second = before.clone();
    second["data"]["n"] = json!("2");
    let second = f.registry.update(&cms, "ns", "plain", second, main, false).await.unwrap();
    let mut back = before.clone();
    back["metadata"].as_object_mut().unwrap().remove("resourceVersion");
    let back = f.registry.update(&cms, "ns", "plain", back, main, false).await.unwrap();
    assert_eq!(f.registry.get(&cms, "ns", "plain").await.unwrap()["data"]["n"], "1");
    let mut third = back.clone();
    third["data"]["n"] = json!("3");
    let third = f.registry.update(&cms, "ns", "plain", third, main, false).await.unwrap();
    assert!(rv(&third) > rv(&back) && rv(&back) > rv(&second));
    // And a version storage no longer holds is still a conflict.
    let stale = f.registry.update(&cms, "ns", "plain", second, main, false).await.unwrap_err();
    assert_eq!(stale.code, 409);

    // Once the cache catches up, it serves what storage holds.
    f.store.open.send_replace(true);
    let listed = f.registry.list(&cms, Some("ns"), &ListOptions::default()).await.unwrap();
    let data: Vec<&Value> = listed["items"].as_array().unwrap().iter().map(|i| &i["data"]).collect();
    assert_eq!(data, [&json!({"v": "newer"}), &json!({"n": "3"}), &json!({"a": "2"})]);
}

fn rv(obj: &Value) -> u64 {
    obj["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap()
}
