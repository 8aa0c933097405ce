//! The embedded backend: one directory holding a redb database, no server to run.
//!
//! Reads open a redb read transaction (a consistent snapshot) on the caller's task. Writes go to one sequencer
//! thread (`writer.rs`) that batches concurrent writers into one commit, made durable by one synced append to a
//! write-ahead log (`wal.rs`); only then is a write acknowledged. Watches replay history from the `log` table, then
//! switch to live events from the hub (`hub.rs`) without a gap (`watch.rs`).
//!
//! The layout of the tables is in `codec.rs`.

mod codec;
mod wal;
mod watch;
mod writer;

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use redb::{Database, DatabaseError, Durability, ReadTransaction, ReadableDatabase, ReadableTable, StorageError};
use tokio::sync::oneshot;

use self::codec::{HISTORY, META, META_COMPACTED, META_REVISION, Version};
use self::wal::Wal;
use self::writer::{Op, Request, Tables, Writer, Written};
use crate::hub::Hub;
use crate::{
    Deleted, Error, KeyValue, ListOptions, ListResult, ReadAt, Result, Revision, Store, WatchStream, check_key,
    check_write, prefix_end,
};

/// The database file inside the data directory.
pub const DATABASE_FILE: &str = "nest.redb";
/// The write-ahead log file inside the data directory.
pub const WAL_FILE: &str = wal::WAL_FILE;

/// Settings of an [`EmbeddedStore`].
#[derive(Clone, Debug)]
pub struct Config {
    /// Background compaction keeps at least this many recent revisions for watch resumption.
    pub retain_revisions: u64,
    /// How often background compaction checks whether history has grown past `retain_revisions`.
    pub compaction_interval: Duration,
    /// How many events a watcher may have queued before it is stopped with
    /// [`Error::WatchOverflow`].
    pub watch_buffer: usize,
    /// The most writes committed together in one transaction.
    pub max_batch: usize,
    /// Memory redb may use to cache pages.
    pub cache_size: usize,
    /// Verify every page's checksum when opening, so a damaged file is reported instead of trusted.
    pub verify_on_open: bool,
    /// How often redb itself is made durable and the write-ahead log emptied.
    pub checkpoint_interval: Duration,
    /// Checkpoint sooner when the write-ahead log grows past this many bytes.
    pub checkpoint_bytes: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            retain_revisions: 10_000,
            compaction_interval: Duration::from_secs(30),
            watch_buffer: 1024,
            max_batch: 1024,
            cache_size: 64 * 1024 * 1024,
            verify_on_open: true,
            checkpoint_interval: Duration::from_secs(1),
            checkpoint_bytes: 64 * 1024 * 1024,
        }
    }
}

impl Config {
    /// Sets [`Config::retain_revisions`].
    pub fn retain_revisions(mut self, revisions: u64) -> Self {
        self.retain_revisions = revisions;
        self
    }

    /// Sets [`Config::compaction_interval`].
    pub fn compaction_interval(mut self, interval: Duration) -> Self {
        self.compaction_interval = interval;
        self
    }

    /// Sets [`Config::watch_buffer`].
    pub fn watch_buffer(mut self, events: usize) -> Self {
        self.watch_buffer = events;
        self
    }
}

/// What the sequencer, the readers and the watchers share.
pub(crate) struct Shared {
    db: Database,
    hub: Arc<Hub>,
    /// The compaction point, kept in memory so watchers can check it without a read transaction.
    compacted: AtomicU64,
}

impl Shared {
    fn set_compacted(&self, revision: Revision) {
        self.compacted.store(revision.0, Ordering::Release);
    }

    fn read(&self) -> Result<ReadTransaction> {
        self.db.begin_read().map_err(|e| Error::backend("starting a read", e))
    }
}

/// The embedded store. See the [module docs](self).
///
/// Dropping it stops the sequencer (after the writes already sent) and closes the database, so the directory can
/// be opened again at once.
pub struct EmbeddedStore {
    shared: Arc<Shared>,
    requests: Option<mpsc::Sender<Request>>,
    writer: Option<JoinHandle<()>>,
    path: PathBuf,
}

impl EmbeddedStore {
    /// Opens (creating if needed) the store in directory `dir`.
    ///
    /// A directory locked by another process, or holding a damaged database, fails with a one-line
    /// [`Error::Locked`] or [`Error::Corrupt`].
    pub fn open(dir: impl AsRef<Path>, config: Config) -> Result<EmbeddedStore> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| Error::backend("creating the data directory", e))?;
        let file = dir.join(DATABASE_FILE);
        let db = open_database(&dir, &file, &config)?;
        let (durable, compacted) = init_tables(&db).map_err(|e| classify(&dir, e))?;
        let (mut wal, logged) = Wal::open(&dir).map_err(|e| Error::backend("reading the write-ahead log", e))?;
        let revision = replay(&db, durable, &logged).map_err(|e| classify(&dir, e))?;
        if revision != durable {
            tracing::info!(from = %durable, to = %revision, "embedded store: replayed the write-ahead log");
        }
        wal.reset().map_err(|e| Error::backend("emptying the write-ahead log", e))?;
        let shared = Arc::new(Shared {
            db,
            hub: Hub::new(revision, config.watch_buffer),
            compacted: AtomicU64::new(compacted.0),
        });
        let (tx, rx) = mpsc::channel();
        let writer = Writer::new(shared.clone(), config, wal, revision, compacted);
        let writer = std::thread::Builder::new()
            .name("nest-store-writer".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| Error::backend("starting the writer thread", e))?;
        Ok(EmbeddedStore { shared, requests: Some(tx), writer: Some(writer), path: dir })
    }

    /// The data directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    async fn write(&self, op: Op) -> Result<Written> {
        let (reply, response) = oneshot::channel();
        let requests = self.requests.as_ref().ok_or(Error::Closed)?;
        requests.send(Request::Write { op, reply }).map_err(|_| Error::Closed)?;
        response.await.map_err(|_| Error::Closed)?
    }
}

impl Drop for EmbeddedStore {
    fn drop(&mut self) {
        self.requests.take();
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

fn open_database(dir: &Path, file: &Path, config: &Config) -> Result<Database> {
    let mut builder = Database::builder();
    builder.set_cache_size(config.cache_size).set_check_integrity_on_open(config.verify_on_open);
    // redb checks what it reads; a file damaged from outside can still trip an assertion in a debug build. That
    // must become the one-line error the caller expects, never a crash at start-up.
    let opened = std::panic::catch_unwind(AssertUnwindSafe(|| builder.create(file)));
    match opened {
        Ok(Ok(db)) => Ok(db),
        Ok(Err(DatabaseError::DatabaseAlreadyOpen | DatabaseError::LockProtocolMismatch)) => {
            Err(Error::Locked { path: dir.to_path_buf() })
        }
        Ok(Err(DatabaseError::Storage(StorageError::Io(e)))) if e.kind() != std::io::ErrorKind::InvalidData => {
            Err(Error::backend("opening the database", e))
        }
        Ok(Err(e)) => Err(Error::Corrupt { path: dir.to_path_buf(), detail: e.to_string() }),
        Err(_) => Err(Error::Corrupt { path: dir.to_path_buf(), detail: "the database file is damaged".into() }),
    }
}

/// Creates the tables if missing and reads the current revision and compaction point.
fn init_tables(db: &Database) -> Result<(Revision, Revision), redb::Error> {
    let txn = db.begin_write()?;
    let (revision, compacted) = {
        txn.open_table(HISTORY)?;
        txn.open_table(codec::LOG)?;
        let meta = txn.open_table(META)?;
        let revision = meta.get(META_REVISION)?.map(|v| v.value()).unwrap_or(0);
        let compacted = meta.get(META_COMPACTED)?.map(|v| v.value()).unwrap_or(0);
        (Revision(revision), Revision(compacted))
    };
    txn.commit()?;
    Ok((revision, compacted))
}

/// Applies the logged changes redb does not have yet (those after its durable revision), durably; returns the
/// revision the store continues from.
fn replay(db: &Database, durable: Revision, logged: &[crate::Event]) -> Result<Revision, redb::Error> {
    let missing: Vec<_> = logged.iter().filter(|event| event.revision > durable).collect();
    let Some(last) = missing.last() else { return Ok(durable) };
    for (expected, event) in (durable.0 + 1..).zip(&missing) {
        if event.revision.0 != expected {
            return Err(redb::Error::Corrupted(format!(
                "the write-ahead log skips from revision {} to {}",
                expected - 1,
                event.revision
            )));
        }
    }
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Immediate)?;
    {
        let mut tables = Tables::open(&txn)?;
        for event in &missing {
            tables.record(event)?;
        }
        tables.meta.insert(META_REVISION, last.revision.0)?;
    }
    txn.commit()?;
    Ok(last.revision)
}

fn classify(dir: &Path, error: redb::Error) -> Error {
    match error {
        redb::Error::Corrupted(detail) => Error::Corrupt { path: dir.to_path_buf(), detail },
        redb::Error::TableTypeMismatch { .. } => {
            Error::Corrupt { path: dir.to_path_buf(), detail: "the database holds tables of another program".into() }
        }
        other => Error::backend("opening the database", other),
    }
}

fn read_error(e: impl Into<redb::Error>) -> Error {
    Error::backend("reading", e.into())
}

/// The revision and compaction point as of a read transaction.
fn read_meta(txn: &ReadTransaction) -> Result<(Revision, Revision)> {
    let meta = txn.open_table(META).map_err(read_error)?;
    let revision = meta.get(META_REVISION).map_err(read_error)?.map(|v| v.value()).unwrap_or(0);
    let compacted = meta.get(META_COMPACTED).map_err(read_error)?.map(|v| v.value()).unwrap_or(0);
    Ok((Revision(revision), Revision(compacted)))
}

/// The lower bound of a listing: the prefix, or just past `start_after` when that comes later.
fn list_start(prefix: &[u8], start_after: Option<&Bytes>) -> (Vec<u8>, Option<Vec<u8>>) {
    let end = prefix_end(prefix);
    match start_after {
        Some(after) if after.as_ref() >= prefix => {
            let mut start = after.to_vec();
            start.push(0);
            (start, end)
        }
        _ => (prefix.to_vec(), end),
    }
}

/// Lists the keys under `prefix` as they were at revision `at`.
fn list_at(txn: &ReadTransaction, prefix: &[u8], options: &ListOptions, at: Revision) -> Result<(Vec<KeyValue>, bool)> {
    let history = txn.open_table(HISTORY).map_err(read_error)?;
    let (start, end) = list_start(prefix, options.start_after.as_ref());
    let limit = options.limit.unwrap_or(usize::MAX);
    let mut items = Vec::new();
    let mut more = false;
    let mut malformed = false;
    codec::scan_at(&history, &start, end.as_deref(), at, |key, revision, row| {
        if items.len() == limit {
            more = true;
            return false;
        }
        match codec::decode_version(row) {
            Some(Version::Put { create_revision, value }) => {
                items.push(KeyValue {
                    key: Bytes::copy_from_slice(key),
                    value,
                    create_revision,
                    mod_revision: revision,
                });
                true
            }
            _ => {
                malformed = true;
                false
            }
        }
    })
    .map_err(read_error)?;
    if malformed {
        return Err(read_error(codec::malformed("history")));
    }
    Ok((items, more))
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        check_key(key)?;
        let txn = self.shared.read()?;
        let history = txn.open_table(HISTORY).map_err(read_error)?;
        codec::item_at(&history, key, Revision(u64::MAX)).map_err(read_error)
    }

    async fn list(&self, prefix: &[u8], options: ListOptions) -> Result<ListResult> {
        let txn = self.shared.read()?;
        let (current, compacted) = read_meta(&txn)?;
        let at = match options.revision {
            ReadAt::Latest => current,
            ReadAt::Revision(at) if at > current => return Err(Error::FutureRevision { requested: at }),
            ReadAt::Revision(at) if at < compacted => return Err(Error::Compacted { requested: at }),
            ReadAt::Revision(at) => at,
        };
        let (items, more) = list_at(&txn, prefix, &options, at)?;
        Ok(ListResult { items, revision: at, more })
    }

    async fn create(&self, key: &[u8], value: Bytes) -> Result<KeyValue> {
        check_write(key, &value)?;
        match self.write(Op::Create { key: Bytes::copy_from_slice(key), value }).await? {
            Written::Item(item) => Ok(item),
            Written::Deleted(_) => unreachable!("the writer answers a create with an item"),
        }
    }

    async fn update(&self, key: &[u8], value: Bytes, expected: Revision) -> Result<KeyValue> {
        check_write(key, &value)?;
        match self.write(Op::Update { key: Bytes::copy_from_slice(key), value, expected }).await? {
            Written::Item(item) => Ok(item),
            Written::Deleted(_) => unreachable!("the writer answers an update with an item"),
        }
    }

    async fn delete(&self, key: &[u8], expected: Option<Revision>) -> Result<Deleted> {
        check_key(key)?;
        match self.write(Op::Delete { key: Bytes::copy_from_slice(key), expected }).await? {
            Written::Deleted(deleted) => Ok(deleted),
            Written::Item(_) => unreachable!("the writer answers a delete with the deleted item"),
        }
    }

    async fn watch(&self, prefix: &[u8], from: Revision) -> Result<WatchStream> {
        Ok(watch::stream(&self.shared, Bytes::copy_from_slice(prefix), from))
    }

    async fn current_revision(&self) -> Result<Revision> {
        let txn = self.shared.read()?;
        Ok(read_meta(&txn)?.0)
    }

    async fn count(&self, prefix: &[u8]) -> Result<u64> {
        let txn = self.shared.read()?;
        let history = txn.open_table(HISTORY).map_err(read_error)?;
        let mut count = 0;
        codec::scan_at(&history, prefix, prefix_end(prefix).as_deref(), Revision(u64::MAX), |_, _, _| {
            count += 1;
            true
        })
        .map_err(read_error)?;
        Ok(count)
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let (reply, response) = oneshot::channel();
        let requests = self.requests.as_ref().ok_or(Error::Closed)?;
        requests.send(Request::Compact { revision, reply }).map_err(|_| Error::Closed)?;
        response.await.map_err(|_| Error::Closed)?
    }

    fn backend(&self) -> &'static str {
        "embedded"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_list_at_an_old_revision_sees_the_keys_as_they_were() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path(), Config::default()).unwrap();
        let a = store.create(b"/p/a", "a1".into()).await.unwrap();
        let b = store.create(b"/p/b", "b1".into()).await.unwrap();
        let before = store.current_revision().await.unwrap();
        store.update(b"/p/a", "a2".into(), a.mod_revision).await.unwrap();
        store.delete(b"/p/b", Some(b.mod_revision)).await.unwrap();
        store.create(b"/p/c", "c1".into()).await.unwrap();
        let old =
            store.list(b"/p/", ListOptions { revision: ReadAt::Revision(before), ..Default::default() }).await.unwrap();
        let seen: Vec<_> = old.items.iter().map(|kv| (kv.key.clone(), kv.value.clone())).collect();
        assert_eq!(seen, vec![(Bytes::from("/p/a"), Bytes::from("a1")), (Bytes::from("/p/b"), Bytes::from("b1"))]);
        assert_eq!(old.revision, before);
    }

    #[tokio::test]
    async fn compaction_keeps_what_reads_at_the_compaction_point_need() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path(), Config::default()).unwrap();
        let mut a = store.create(b"/p/a", "0".into()).await.unwrap();
        for i in 1..5 {
            a = store.update(b"/p/a", i.to_string().into(), a.mod_revision).await.unwrap();
        }
        let gone = store.create(b"/p/gone", "x".into()).await.unwrap();
        store.delete(b"/p/gone", None).await.unwrap();
        let point = store.current_revision().await.unwrap();
        store.update(b"/p/a", "after".into(), a.mod_revision).await.unwrap();
        store.compact(point).await.unwrap();
        let at_point =
            store.list(b"/p/", ListOptions { revision: ReadAt::Revision(point), ..Default::default() }).await.unwrap();
        assert_eq!(at_point.items.len(), 1);
        assert_eq!(at_point.items[0].value, Bytes::from("4"));
        // Only the versions a read at the compaction point or later can see are left: of /p/a, "4" and "after";
        // of /p/gone, only the tombstone at the compaction point itself.
        let txn = store.shared.read().unwrap();
        let history = txn.open_table(HISTORY).unwrap();
        let left: Vec<(Vec<u8>, u64)> = history
            .iter()
            .unwrap()
            .map(|row| row.unwrap().0.value().0.to_vec())
            .zip(history.iter().unwrap().map(|row| row.unwrap().0.value().1))
            .collect();
        let a_versions = left.iter().filter(|(k, _)| k == b"/p/a").count();
        assert_eq!(a_versions, 2, "{left:?}");
        assert_eq!(left.iter().filter(|(k, r)| k == b"/p/gone" && *r < point.0).count(), 0, "{gone:?} is forgotten");
    }
}
