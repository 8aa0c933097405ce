//! The revisioned key-value store under every nest control plane.
//!
//! Every object of every control plane lives here, as an opaque value under a key shaped like a Kubernetes registry
//! key (`/registry/<group>/<resource>/<namespace>/<name>`). The store hands out revisions from one global counter
//! that only grows; every write gets the next one, and the API server turns them into `resourceVersion`s.
//!
//! The interface is the [`Store`] trait: compare-and-swap writes (`create`, `update`, `delete`), reads at the latest
//! or at a pinned revision (`get`, `list`, `count`), and `watch`, an ordered, gapless stream of changes that can
//! resume from any retained revision. Two backends implement it:
//!
//! - [`embedded::EmbeddedStore`] (the default): one directory holding a [redb](https://www.redb.org) database.
//!   Concurrent writers are batched into one durable commit (group commit); history is kept for watch resumption
//!   and compacted in the background.
//! - `etcd::EtcdStore` (cargo feature `etcd`): a real etcd v3 server; the store's revisions are etcd's.
//!
//! Start with [`Store`], then [`embedded`]. `tests/conformance.rs` is the suite every backend must pass.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> nest_storage::Result<()> {
//! use nest_storage::{embedded::EmbeddedStore, ListOptions, Store};
//! let dir = tempfile::tempdir().unwrap();
//! let store = EmbeddedStore::open(dir.path(), Default::default())?;
//! let created = store.create(b"/registry/configmaps/default/a", "v1".into()).await?;
//! let updated = store.update(b"/registry/configmaps/default/a", "v2".into(), created.mod_revision).await?;
//! assert!(updated.mod_revision > created.mod_revision);
//! let page = store.list(b"/registry/configmaps/", ListOptions::default()).await?;
//! assert_eq!(page.items.len(), 1);
//! # Ok(()) }
//! ```

use std::fmt;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::stream::BoxStream;

pub mod embedded;
mod error;
#[cfg(feature = "etcd")]
pub mod etcd;
mod hub;
pub mod prefixed;
mod queue;

pub use error::{Error, Result};

/// The largest value a store accepts: 1.5 MiB, etcd's default request limit, so that both backends refuse the same
/// writes.
pub const MAX_VALUE_SIZE: usize = 1536 * 1024;

/// A point in the store's history. Every successful write gets the next revision of one global counter.
///
/// `Revision(0)` means "before anything": no item ever carries it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Revision(pub u64);

impl Revision {
    /// The revision right after this one.
    pub fn next(self) -> Revision {
        Revision(self.0 + 1)
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// One stored item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    /// The key.
    pub key: Bytes,
    /// The value, opaque to the store.
    pub value: Bytes,
    /// The revision of the write that created the key (it changes if the key is deleted and created again).
    pub create_revision: Revision,
    /// The revision of the last write to the key.
    pub mod_revision: Revision,
}

/// What `delete` removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deleted {
    /// The revision of the deletion.
    pub revision: Revision,
    /// The item as it was just before the deletion.
    pub prev: KeyValue,
}

/// Which revision a list reads at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReadAt {
    /// The newest revision; the result says which one that was.
    #[default]
    Latest,
    /// Exactly this revision: older than the compaction point → [`Error::Compacted`], newer than the store →
    /// [`Error::FutureRevision`].
    Revision(Revision),
}

/// Options of [`Store::list`].
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    /// The revision to read at. To page through a consistent snapshot, read the first page at
    /// [`ReadAt::Latest`] and every further page at the [`ListResult::revision`] it returned.
    pub revision: ReadAt,
    /// At most this many items; `None` for all.
    pub limit: Option<usize>,
    /// Only keys strictly after this one (the last key of the previous page).
    pub start_after: Option<Bytes>,
}

/// A page of [`Store::list`].
#[derive(Clone, Debug)]
pub struct ListResult {
    /// The items, in key order.
    pub items: Vec<KeyValue>,
    /// The revision the page was read at.
    pub revision: Revision,
    /// Whether more items follow the last one returned.
    pub more: bool,
}

/// The kind of a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// The key was created or updated; it was created if `create_revision == revision`.
    Put,
    /// The key was deleted.
    Delete,
}

/// One change, as delivered by [`Store::watch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// Put or delete.
    pub kind: EventKind,
    /// The key that changed.
    pub key: Bytes,
    /// For a put, the new value; for a delete, the value the key held just before (Kubernetes sends the last state
    /// of an object in its DELETED event).
    pub value: Bytes,
    /// The revision that created the key (for a delete, of the item that was deleted).
    pub create_revision: Revision,
    /// The revision of this change.
    pub revision: Revision,
}

impl Event {
    /// Whether this put created the key.
    pub fn is_create(&self) -> bool {
        self.kind == EventKind::Put && self.create_revision == self.revision
    }
}

/// The stream [`Store::watch`] returns.
///
/// It yields every change under the watched prefix in revision order, without gaps. It ends with an error when the
/// watch cannot go on: [`Error::Compacted`] when the start revision is no longer retained and
/// [`Error::WatchOverflow`] when the consumer fell behind; in both cases the caller relists and watches again.
pub type WatchStream = BoxStream<'static, Result<Event>>;

/// A revisioned key-value store with compare-and-swap writes and resumable watches.
///
/// Contract, shared by every backend and checked by the conformance suite:
/// - Revisions come from one global counter; every successful write takes the next one. Failed writes take none.
/// - A write is acknowledged only once it is durable.
/// - `watch` delivers every change with a revision ≥ its start, under its prefix, exactly once, in revision order.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// The item under `key`, if any, at the latest revision.
    async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>>;

    /// The items whose keys start with `prefix`, in key order, at one revision.
    async fn list(&self, prefix: &[u8], options: ListOptions) -> Result<ListResult>;

    /// Creates `key`. Fails with [`Error::AlreadyExists`] if it exists.
    async fn create(&self, key: &[u8], value: Bytes) -> Result<KeyValue>;

    /// Replaces the value of `key` if its modification revision is `expected`. Fails with [`Error::Conflict`]
    /// (carrying the current item) if it is not, and [`Error::NotFound`] if the key does not exist.
    async fn update(&self, key: &[u8], value: Bytes, expected: Revision) -> Result<KeyValue>;

    /// Deletes `key`, if `expected` is given only when its modification revision is that one.
    async fn delete(&self, key: &[u8], expected: Option<Revision>) -> Result<Deleted>;

    /// Every change under `prefix` with revision ≥ `from`. `from` may be in the future: the stream then waits.
    /// To follow a list read at revision R, watch from R + 1.
    async fn watch(&self, prefix: &[u8], from: Revision) -> Result<WatchStream>;

    /// The newest revision.
    async fn current_revision(&self) -> Result<Revision>;

    /// How many keys start with `prefix`, at the latest revision.
    async fn count(&self, prefix: &[u8]) -> Result<u64>;

    /// Forgets history before `revision`: reads and watches from earlier revisions then fail with
    /// [`Error::Compacted`]. Compacting to a revision at or before the current compaction point does nothing.
    async fn compact(&self, revision: Revision) -> Result<()>;

    /// A short name of the backend, for logs and benchmarks.
    fn backend(&self) -> &'static str;

    /// Whether the backend serves now: the API server's `etcd` health check. An embedded store that is open does.
    async fn check(&self) -> Result<()> {
        Ok(())
    }
}

/// Refuses what no backend accepts: empty keys and values over [`MAX_VALUE_SIZE`].
pub(crate) fn check_write(key: &[u8], value: &[u8]) -> Result<()> {
    check_key(key)?;
    if value.len() > MAX_VALUE_SIZE {
        return Err(Error::ValueTooLarge { size: value.len(), limit: MAX_VALUE_SIZE });
    }
    Ok(())
}

pub(crate) fn check_key(key: &[u8]) -> Result<()> {
    if key.is_empty() { Err(Error::EmptyKey) } else { Ok(()) }
}

/// The smallest key greater than every key starting with `prefix`, or `None` when there is none (the prefix is
/// empty or all 0xff).
pub(crate) fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// A put that creates `key` at revision `rev`, for unit tests.
#[cfg(test)]
pub(crate) fn test_put(key: &str, rev: u64) -> Event {
    Event {
        kind: EventKind::Put,
        key: Bytes::copy_from_slice(key.as_bytes()),
        value: Bytes::from(format!("value of {key}")),
        create_revision: Revision(rev),
        revision: Revision(rev),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_increments_the_last_byte_that_can_grow() {
        assert_eq!(prefix_end(b"/registry/pods/"), Some(b"/registry/pods0".to_vec()));
        assert_eq!(prefix_end(&[b'a', 0xff]), Some(vec![b'b']));
        assert_eq!(prefix_end(&[0xff, 0xff]), None);
        assert_eq!(prefix_end(b""), None);
    }

    #[test]
    fn writes_are_checked_before_any_backend_sees_them() {
        assert!(matches!(check_write(b"", b"x"), Err(Error::EmptyKey)));
        let big = vec![0u8; MAX_VALUE_SIZE + 1];
        assert!(matches!(check_write(b"/k", &big), Err(Error::ValueTooLarge { .. })));
        assert!(check_write(b"/k", &big[..MAX_VALUE_SIZE]).is_ok());
    }
}
