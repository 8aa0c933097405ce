//! The storage conformance suite: every case is written once, against `dyn Store`, and run against every backend.
//!
//! The embedded backend gets a fresh directory per case. The etcd backend (cargo feature `etcd`) uses the server at
//! `NEST_TEST_ETCD` when set (as `.ci/run` does), otherwise a throw-away etcd started from `PATH` per case. Cases on
//! a shared etcd run one at a time, each under its own key prefix, because some assert exact revisions and
//! compaction is global.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use nest_storage::{Error, Event, EventKind, ListOptions, ReadAt, Revision, Store, WatchStream};

/// How long a case waits for an event that must come.
const PATIENCE: Duration = Duration::from_secs(20);
/// The watch buffer every backend is opened with here, small so that overflow is quick to provoke.
const WATCH_BUFFER: usize = 256;

/// A backend under test, with whatever keeps it alive.
struct Backend {
    store: Arc<dyn Store>,
    /// A unique key prefix for the case, ending in `/`.
    prefix: String,
    _guard: Box<dyn std::any::Any + Send>,
}

impl Backend {
    fn key(&self, rest: &str) -> Vec<u8> {
        format!("{}{rest}", self.prefix).into_bytes()
    }
}

async fn next_event(stream: &mut WatchStream) -> Event {
    match tokio::time::timeout(PATIENCE, stream.next()).await {
        Ok(Some(Ok(event))) => event,
        Ok(Some(Err(e))) => panic!("watch failed: {e}"),
        Ok(None) => panic!("watch ended"),
        Err(_) => panic!("no event within {PATIENCE:?}"),
    }
}

async fn nothing_within(stream: &mut WatchStream, wait: Duration) {
    if let Ok(item) = tokio::time::timeout(wait, stream.next()).await {
        panic!("expected no event, got {item:?}");
    }
}

// === The cases ===

async fn create_get_update_delete(b: Backend) {
    let s = &*b.store;
    let key = b.key("ns/a");
    assert_eq!(s.get(&key).await.unwrap(), None);

    let created = s.create(&key, Bytes::from("v1")).await.unwrap();
    assert_eq!(created.create_revision, created.mod_revision);
    assert!(matches!(s.create(&key, "again".into()).await, Err(Error::AlreadyExists { .. })));
    assert_eq!(s.get(&key).await.unwrap().as_ref(), Some(&created));

    let updated = s.update(&key, "v2".into(), created.mod_revision).await.unwrap();
    assert!(updated.mod_revision > created.mod_revision);
    assert_eq!(updated.create_revision, created.create_revision);
    assert_eq!(updated.value, Bytes::from("v2"));

    // A stale compare-and-swap fails and hands back the current item.
    match s.update(&key, "v3".into(), created.mod_revision).await {
        Err(Error::Conflict { expected, current }) => {
            assert_eq!(expected, created.mod_revision);
            assert_eq!(*current, updated);
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(matches!(s.update(&b.key("ns/missing"), "x".into(), Revision(1)).await, Err(Error::NotFound { .. })));

    // Refused writes take no revision.
    let before = s.current_revision().await.unwrap();
    let _ = s.create(&key, "again".into()).await;
    let _ = s.update(&key, "v3".into(), created.mod_revision).await;
    let _ = s.delete(&key, Some(created.mod_revision)).await;
    assert_eq!(s.current_revision().await.unwrap(), before);
    assert_eq!(before, updated.mod_revision);

    assert!(matches!(s.delete(&key, Some(created.mod_revision)).await, Err(Error::Conflict { .. })));
    let deleted = s.delete(&key, Some(updated.mod_revision)).await.unwrap();
    assert!(deleted.revision > updated.mod_revision);
    assert_eq!(deleted.prev, updated);
    assert_eq!(s.get(&key).await.unwrap(), None);
    assert!(matches!(s.delete(&key, None).await, Err(Error::NotFound { .. })));

    // Created again, it is a new item with a new create revision.
    let again = s.create(&key, "v4".into()).await.unwrap();
    assert!(again.create_revision > deleted.revision);
    let gone = s.delete(&key, None).await.unwrap();
    assert_eq!(gone.prev.value, Bytes::from("v4"));
}

async fn list_and_count(b: Backend) {
    let s = &*b.store;
    for name in ["ns1/a", "ns1/b", "ns2/c", "ns10/d"] {
        s.create(&b.key(name), Bytes::from(name.to_string())).await.unwrap();
    }
    // A neighbouring prefix must not leak in.
    let neighbour = format!("{}x/a", b.prefix.trim_end_matches('/'));
    s.create(neighbour.as_bytes(), "n".into()).await.unwrap();

    let all = s.list(&b.key(""), ListOptions::default()).await.unwrap();
    let keys: Vec<_> = all.items.iter().map(|kv| String::from_utf8_lossy(&kv.key).into_owned()).collect();
    let expected: Vec<_> = ["ns1/a", "ns1/b", "ns10/d", "ns2/c"].iter().map(|n| format!("{}{n}", b.prefix)).collect();
    assert_eq!(keys, expected, "key order, prefix bounds");
    assert!(!all.more);
    assert_eq!(all.revision, s.current_revision().await.unwrap());

    let ns1 = s.list(&b.key("ns1/"), ListOptions::default()).await.unwrap();
    assert_eq!(ns1.items.len(), 2);
    assert_eq!(s.count(&b.key("")).await.unwrap(), 4);
    assert_eq!(s.count(&b.key("ns1/")).await.unwrap(), 2);
    assert_eq!(s.count(&b.key("nothing/")).await.unwrap(), 0);

    let future = ReadAt::Revision(Revision(all.revision.0 + 1000));
    let result = s.list(&b.key(""), ListOptions { revision: future, ..Default::default() }).await;
    assert!(matches!(result, Err(Error::FutureRevision { .. })), "{result:?}");
}

/// A list bigger than one response may carry (etcd's gRPC limit is 4 MiB) still comes back whole.
async fn a_large_list_comes_back_whole(b: Backend) {
    let s = b.store.clone();
    let value = Bytes::from(vec![b'v'; 8 * 1024]);
    let mut tasks = Vec::new();
    for w in 0..8 {
        let (s, value, prefix) = (s.clone(), value.clone(), b.prefix.clone());
        tasks.push(tokio::spawn(async move {
            for i in (w..1200).step_by(8) {
                s.create(format!("{prefix}{i:04}").as_bytes(), value.clone()).await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let all = s.list(&b.key(""), ListOptions::default()).await.unwrap();
    assert_eq!(all.items.len(), 1200);
    assert!(all.items.windows(2).all(|w| w[0].key < w[1].key));
    assert!(!all.more);
    let page = s.list(&b.key(""), ListOptions { limit: Some(700), ..Default::default() }).await.unwrap();
    assert_eq!((page.items.len(), page.more), (700, true));
}

async fn pagination_reads_one_pinned_revision_while_writes_continue(b: Backend) {
    let s = b.store.clone();
    let mut original = BTreeMap::new();
    for i in 0..25 {
        let key = b.key(&format!("item-{i:02}"));
        let value = Bytes::from(format!("original-{i}"));
        s.create(&key, value.clone()).await.unwrap();
        original.insert(key, value);
    }
    let first = s.list(&b.key(""), ListOptions { limit: Some(10), ..Default::default() }).await.unwrap();
    assert_eq!(first.items.len(), 10);
    assert!(first.more);
    let pinned = first.revision;

    // Writers change, delete and add keys in the listed range while the pages are read.
    let writer = {
        let s = s.clone();
        let prefix = b.prefix.clone();
        tokio::spawn(async move {
            for i in 0..25 {
                let key = format!("{prefix}item-{i:02}").into_bytes();
                let current = s.get(&key).await.unwrap().unwrap();
                if i % 3 == 0 {
                    s.delete(&key, None).await.unwrap();
                } else {
                    s.update(&key, "changed".into(), current.mod_revision).await.unwrap();
                }
                s.create(format!("{prefix}item-{i:02}-new").as_bytes(), "new".into()).await.unwrap();
            }
        })
    };

    let mut seen: Vec<_> = first.items.iter().map(|kv| (kv.key.to_vec(), kv.value.clone())).collect();
    let mut last = first.items.last().unwrap().key.clone();
    loop {
        tokio::task::yield_now().await;
        let options = ListOptions { revision: ReadAt::Revision(pinned), limit: Some(10), start_after: Some(last) };
        let page = s.list(&b.key(""), options).await.unwrap();
        assert_eq!(page.revision, pinned);
        seen.extend(page.items.iter().map(|kv| (kv.key.to_vec(), kv.value.clone())));
        if !page.more {
            break;
        }
        last = page.items.last().unwrap().key.clone();
    }
    writer.await.unwrap();
    let expected: Vec<_> = original.into_iter().collect();
    assert_eq!(seen, expected, "every page shows the snapshot, none of the later writes");

    // After the writes, the latest list shows them.
    let now = s.list(&b.key(""), ListOptions::default()).await.unwrap();
    assert_eq!(now.items.len(), 25 - 9 + 25);
}

async fn watch_resumes_from_an_old_revision(b: Backend) {
    let s = &*b.store;
    let mut changes = Vec::new(); // (revision, kind, key, value)
    for i in 0..5 {
        let key = b.key(&format!("k{i}"));
        let kv = s.create(&key, Bytes::from(format!("v{i}"))).await.unwrap();
        changes.push((kv.mod_revision, EventKind::Put, key, kv.value));
    }
    let k1 = b.key("k1");
    let current = s.get(&k1).await.unwrap().unwrap();
    let kv = s.update(&k1, "v1-updated".into(), current.mod_revision).await.unwrap();
    changes.push((kv.mod_revision, EventKind::Put, k1.clone(), kv.value));
    let deleted = s.delete(&b.key("k2"), None).await.unwrap();
    changes.push((deleted.revision, EventKind::Delete, b.key("k2"), deleted.prev.value.clone()));
    // A change outside the prefix must not show up.
    s.create(format!("{}other", b.prefix.trim_end_matches('/')).as_bytes(), "x".into()).await.unwrap();

    let from = changes[3].0;
    let mut watch = s.watch(&b.key(""), from).await.unwrap();
    for (revision, kind, key, value) in &changes[3..] {
        let event = next_event(&mut watch).await;
        assert_eq!((event.revision, event.kind, &event.key[..], &event.value), (*revision, *kind, &key[..], value));
    }
    // The delete event carries the deleted value and the deleted item's create revision.
    let created_k2 = changes[2].0;
    let mut replay = s.watch(&b.key("k2"), deleted.revision).await.unwrap();
    let event = next_event(&mut replay).await;
    assert_eq!((event.kind, event.create_revision, &event.value[..]), (EventKind::Delete, created_k2, &b"v2"[..]));

    // Then the same stream goes on with live changes.
    let live = s.create(&b.key("k9"), "live".into()).await.unwrap();
    let event = next_event(&mut watch).await;
    assert_eq!((event.revision, event.is_create()), (live.mod_revision, true));
}

async fn compaction_makes_older_revisions_unavailable(b: Backend) {
    let s = &*b.store;
    let key = b.key("counter");
    let mut kv = s.create(&key, "0".into()).await.unwrap();
    let old = kv.mod_revision;
    for i in 1..=5 {
        kv = s.update(&key, Bytes::from(i.to_string()), kv.mod_revision).await.unwrap();
    }
    let point = kv.mod_revision;
    let after = s.update(&key, "6".into(), kv.mod_revision).await.unwrap();
    s.compact(point).await.unwrap();
    // Compacting again to the same or an older point is allowed and changes nothing.
    s.compact(point).await.unwrap();
    s.compact(old).await.unwrap();

    let mut stale = s.watch(&b.key(""), old).await.unwrap();
    match tokio::time::timeout(PATIENCE, stale.next()).await.unwrap() {
        Some(Err(Error::Compacted { .. })) => {}
        other => panic!("expected Compacted, got {other:?}"),
    }
    let listed = s.list(&b.key(""), ListOptions { revision: ReadAt::Revision(old), ..Default::default() }).await;
    assert!(matches!(listed, Err(Error::Compacted { .. })), "{listed:?}");

    // The compaction point itself is still readable and watchable.
    let at_point =
        s.list(&b.key(""), ListOptions { revision: ReadAt::Revision(point), ..Default::default() }).await.unwrap();
    assert_eq!(at_point.items[0].value, Bytes::from("5"));
    let mut watch = s.watch(&b.key(""), point).await.unwrap();
    assert_eq!(next_event(&mut watch).await.revision, point);
    assert_eq!(next_event(&mut watch).await.revision, after.mod_revision);
}

async fn compare_and_swap_is_linearizable_and_every_watcher_sees_every_revision(b: Backend) {
    const TASKS: usize = 8;
    const INCREMENTS: usize = 40;
    const COUNTERS: usize = 4;
    let s = b.store.clone();
    let start = s.current_revision().await.unwrap().next();
    for c in 0..COUNTERS {
        s.create(&b.key(&format!("c{c}")), "0".into()).await.unwrap();
    }
    // Watchers read while the writers run, each collecting every event it gets.
    let mut watchers = Vec::new();
    for _ in 0..3 {
        let mut watch = s.watch(&b.key(""), start).await.unwrap();
        watchers.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            for _ in 0..COUNTERS + TASKS * INCREMENTS {
                seen.push(next_event(&mut watch).await.revision);
            }
            nothing_within(&mut watch, Duration::from_millis(200)).await;
            seen
        }));
    }

    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let s = s.clone();
        let prefix = b.prefix.clone();
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::new(); // (counter, revision)
            for i in 0..INCREMENTS {
                let c = (t + i) % COUNTERS;
                let key = format!("{prefix}c{c}").into_bytes();
                let mut current = s.get(&key).await.unwrap().unwrap();
                loop {
                    let n: u64 = std::str::from_utf8(&current.value).unwrap().parse().unwrap();
                    match s.update(&key, Bytes::from((n + 1).to_string()), current.mod_revision).await {
                        Ok(kv) => {
                            acked.push((c, kv.mod_revision));
                            break;
                        }
                        Err(Error::Conflict { current: now, .. }) => current = *now,
                        Err(e) => panic!("increment failed: {e}"),
                    }
                }
            }
            acked
        }));
    }
    let mut acked = Vec::new();
    for task in tasks {
        acked.extend(task.await.unwrap());
    }
    let mut per_counter = [0u64; COUNTERS];
    for (c, _) in &acked {
        per_counter[*c] += 1;
    }
    for (c, expected) in per_counter.iter().enumerate() {
        let value = s.get(&b.key(&format!("c{c}"))).await.unwrap().unwrap().value;
        assert_eq!(std::str::from_utf8(&value).unwrap().parse::<u64>().unwrap(), *expected, "counter {c}");
    }
    let revisions: HashSet<Revision> = acked.iter().map(|(_, r)| *r).collect();
    assert_eq!(revisions.len(), TASKS * INCREMENTS, "no two successful writes share a revision");

    // Every watcher sees the creates and then exactly the acknowledged revisions, once each, in order.
    let mut expected: Vec<Revision> = revisions.into_iter().collect();
    expected.sort();
    for watcher in watchers {
        let seen = watcher.await.unwrap();
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "strictly increasing");
        assert_eq!(&seen[COUNTERS..], &expected[..]);
    }
}

async fn bad_input_is_refused_with_a_clear_error(b: Backend) {
    let s = &*b.store;
    assert!(matches!(s.create(b"", "v".into()).await, Err(Error::EmptyKey)));
    assert!(matches!(s.get(b"").await, Err(Error::EmptyKey)));
    assert!(matches!(s.update(b"", "v".into(), Revision(1)).await, Err(Error::EmptyKey)));
    assert!(matches!(s.delete(b"", None).await, Err(Error::EmptyKey)));
    let too_big = Bytes::from(vec![b'x'; nest_storage::MAX_VALUE_SIZE + 1]);
    let refused = s.create(&b.key("big"), too_big).await;
    assert!(matches!(refused, Err(Error::ValueTooLarge { .. })), "{refused:?}");
    assert!(refused.unwrap_err().to_string().contains("over the limit"));
    let largest = Bytes::from(vec![b'x'; nest_storage::MAX_VALUE_SIZE]);
    let kv = s.create(&b.key("big"), largest.clone()).await.unwrap();
    assert_eq!(s.get(&b.key("big")).await.unwrap().unwrap().value.len(), largest.len());
    assert!(matches!(
        s.update(&b.key("big"), Bytes::from(vec![0; nest_storage::MAX_VALUE_SIZE + 1]), kv.mod_revision).await,
        Err(Error::ValueTooLarge { .. })
    ));
}

async fn a_watch_from_a_future_revision_waits_for_it(b: Backend) {
    let s = &*b.store;
    let now = s.current_revision().await.unwrap();
    let from = Revision(now.0 + 3);
    let mut watch = s.watch(&b.key(""), from).await.unwrap();
    s.create(&b.key("1"), "1".into()).await.unwrap();
    s.create(&b.key("2"), "2".into()).await.unwrap();
    nothing_within(&mut watch, Duration::from_millis(300)).await;
    let third = s.create(&b.key("3"), "3".into()).await.unwrap();
    assert_eq!(third.mod_revision, from);
    assert_eq!(next_event(&mut watch).await.revision, from);
}

async fn a_slow_watcher_overflows_without_blocking_writers_or_other_watchers(b: Backend) {
    let s = &*b.store;
    let start = s.current_revision().await.unwrap().next();
    let mut slow = s.watch(&b.key(""), start).await.unwrap();
    let mut fast = s.watch(&b.key(""), start).await.unwrap();
    let writes = WATCH_BUFFER * 3;
    let mut fast_seen = Vec::new();
    let key = b.key("k");
    let mut kv = s.create(&key, "0".into()).await.unwrap();
    fast_seen.push(next_event(&mut fast).await.revision);
    // The slow watcher reads the first event, then stops reading.
    assert_eq!(next_event(&mut slow).await.revision, fast_seen[0]);
    for i in 1..writes {
        kv = s.update(&key, Bytes::from(i.to_string()), kv.mod_revision).await.unwrap();
        fast_seen.push(next_event(&mut fast).await.revision);
    }
    assert_eq!(fast_seen.len(), writes);
    assert!(fast_seen.windows(2).all(|w| w[0] < w[1]));

    // The slow watcher gets the events that fit, in order, then a distinct error — never a silent gap.
    let mut previous = None;
    let mut delivered = 1;
    loop {
        match tokio::time::timeout(PATIENCE, slow.next()).await.unwrap() {
            Some(Ok(event)) => {
                if let Some(previous) = previous {
                    assert!(event.revision > previous);
                }
                assert_eq!(event.revision, fast_seen[delivered]);
                previous = Some(event.revision);
                delivered += 1;
            }
            Some(Err(Error::WatchOverflow)) => break,
            other => panic!("expected events then WatchOverflow, got {other:?}"),
        }
    }
    assert!(delivered >= 1 && delivered < writes, "delivered {delivered} of {writes}");
    assert!(Error::WatchOverflow.needs_relist());
    assert!(tokio::time::timeout(PATIENCE, slow.next()).await.unwrap().is_none(), "the stream ends after the error");
}

/// Many watchers (ten thousand in the suite) on overlapping prefixes each get exactly the events under their prefix.
async fn fan_out_to_many_watchers_on_overlapping_prefixes(b: Backend, watchers: usize) {
    let s = &*b.store;
    let start = s.current_revision().await.unwrap().next();
    let prefixes = [b.key(""), b.key("ns1/"), b.key("ns1/a"), b.key("ns2/")];
    let mut streams = Vec::with_capacity(watchers);
    for i in 0..watchers {
        let prefix = &prefixes[i % prefixes.len()];
        streams.push((i % prefixes.len(), s.watch(prefix, start).await.unwrap()));
    }
    let keys = ["ns1/a", "ns1/b", "ns2/a", "ns3/a", "ns1/a"];
    let mut written = Vec::new();
    for (i, name) in keys.iter().enumerate() {
        let key = b.key(name);
        let kv = match s.get(&key).await.unwrap() {
            Some(current) => s.update(&key, Bytes::from(i.to_string()), current.mod_revision).await.unwrap(),
            None => s.create(&key, Bytes::from(i.to_string())).await.unwrap(),
        };
        written.push((key, kv.mod_revision));
    }
    for (p, mut stream) in streams {
        let expected: Vec<Revision> =
            written.iter().filter(|(key, _)| key.starts_with(&prefixes[p])).map(|(_, rev)| *rev).collect();
        for revision in expected {
            assert_eq!(next_event(&mut stream).await.revision, revision);
        }
    }
}

// === Backends ===

macro_rules! conformance {
    ($backend:ident, $open:path) => {
        mod $backend {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn create_get_update_delete() {
                super::create_get_update_delete($open().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn list_and_count() {
                super::list_and_count($open().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_large_list_comes_back_whole() {
                super::a_large_list_comes_back_whole($open().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn pagination_reads_one_pinned_revision_while_writes_continue() {
                super::pagination_reads_one_pinned_revision_while_writes_continue($open().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn watch_resumes_from_an_old_revision() {
                super::watch_resumes_from_an_old_revision($open().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn compaction_makes_older_revisions_unavailable() {
                super::compaction_makes_older_revisions_unavailable($open().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn compare_and_swap_is_linearizable_and_every_watcher_sees_every_revision() {
                super::compare_and_swap_is_linearizable_and_every_watcher_sees_every_revision($open().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn bad_input_is_refused_with_a_clear_error() {
                super::bad_input_is_refused_with_a_clear_error($open().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_watch_from_a_future_revision_waits_for_it() {
                super::a_watch_from_a_future_revision_waits_for_it($open().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_slow_watcher_overflows_without_blocking_writers_or_other_watchers() {
                super::a_slow_watcher_overflows_without_blocking_writers_or_other_watchers($open().await).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn fan_out_to_many_watchers_on_overlapping_prefixes() {
                super::fan_out_to_many_watchers_on_overlapping_prefixes($open().await, 10_000).await
            }
        }
    };
}

async fn open_embedded() -> Backend {
    let dir = tempfile::tempdir().unwrap();
    let config = nest_storage::embedded::Config::default().watch_buffer(WATCH_BUFFER);
    let store = nest_storage::embedded::EmbeddedStore::open(dir.path(), config).unwrap();
    Backend { store: Arc::new(store), prefix: "/registry/test/".into(), _guard: Box::new(dir) }
}

conformance!(embedded, open_embedded);

#[cfg(feature = "etcd")]
async fn open_etcd() -> Backend {
    use nest_storage::etcd::{Config, EtcdStore, TempEtcd};
    // One case at a time on a shared server: some cases assert exact revisions, and compaction is global.
    static SHARED: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    static CASE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    // A watcher that stops reading is ended after 200 ms of a full queue: long enough for one reading its way
    // through etcd's catch-up batches, short next to the slow-watcher case's writes.
    let config = Config { watch_buffer: WATCH_BUFFER, watch_patience: Duration::from_millis(200), ..Config::default() };
    let case = CASE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let prefix = format!("/registry/test-{}-{case}/", std::process::id());
    match std::env::var("NEST_TEST_ETCD") {
        Ok(url) => {
            let serial = SHARED.lock().await;
            let store = EtcdStore::connect(&[url], config).await.unwrap();
            Backend { store: Arc::new(store), prefix, _guard: Box::new(serial) }
        }
        Err(_) => {
            let etcd = TempEtcd::start().await.expect("etcd from PATH (Debian package etcd-server)");
            let store = EtcdStore::connect(&[etcd.url().to_string()], config).await.unwrap();
            Backend { store: Arc::new(store), prefix, _guard: Box::new(etcd) }
        }
    }
}

#[cfg(feature = "etcd")]
conformance!(etcd, open_etcd);
