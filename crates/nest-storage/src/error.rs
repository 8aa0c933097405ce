//! The one error type of the storage layer.
//!
//! Callers above (the API server's generic registry) match on the variants to choose a Kubernetes `Status`:
//! `NotFound` → 404, `AlreadyExists`/`Conflict` → 409, `Compacted` → 410, `FutureRevision` → 504 after a wait,
//! invalid input → 400/413. Everything else is a storage failure the caller cannot repair.

use std::path::PathBuf;

use crate::{KeyValue, Revision};

/// `Result` with the storage [`Error`] as its default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a storage operation can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The key does not exist (update, or delete with or without an expected revision).
    #[error("key {} not found", show_key(.key))]
    NotFound {
        /// The key that was asked for.
        key: Vec<u8>,
    },

    /// `create` found the key already present.
    #[error("key {} already exists", show_key(.key))]
    AlreadyExists {
        /// The key that was asked for.
        key: Vec<u8>,
    },

    /// A compare-and-swap failed: the key's modification revision is not the one expected. Carries the item as it
    /// is now, so the caller can retry without another read.
    #[error(
        "key {} was modified: expected revision {expected}, found {}",
        show_key(&.current.key),
        .current.mod_revision
    )]
    Conflict {
        /// The revision the caller expected.
        expected: Revision,
        /// The item as it currently is.
        current: Box<KeyValue>,
    },

    /// The requested revision is older than the retained history. The caller must relist.
    #[error("revision {requested} has been compacted")]
    Compacted {
        /// The revision asked for.
        requested: Revision,
    },

    /// A read asked for a revision the store has not reached yet.
    #[error("revision {requested} is in the future")]
    FutureRevision {
        /// The revision asked for.
        requested: Revision,
    },

    /// A watcher did not keep up: its bounded buffer filled, so the store stopped it rather than block writers or
    /// drop events. Every event before this error was delivered; the caller must relist and watch again.
    #[error("watcher fell behind and its buffer overflowed; relist and watch again")]
    WatchOverflow,

    /// The key is empty.
    #[error("invalid key: a key must not be empty")]
    EmptyKey,

    /// The value is larger than [`MAX_VALUE_SIZE`](crate::MAX_VALUE_SIZE).
    #[error("value of {size} bytes is over the limit of {limit} bytes")]
    ValueTooLarge {
        /// The size of the refused value.
        size: usize,
        /// The limit.
        limit: usize,
    },

    /// Another process holds the data directory.
    #[error("data directory {} is locked by another process", .path.display())]
    Locked {
        /// The data directory.
        path: PathBuf,
    },

    /// The data directory holds something that is not a valid database.
    #[error("data directory {} is corrupt: {detail}", .path.display())]
    Corrupt {
        /// The data directory.
        path: PathBuf,
        /// What was found wrong.
        detail: String,
    },

    /// The store has been closed (its writer stopped); no further operations are possible.
    #[error("the store is closed")]
    Closed,

    /// The backend cannot serve now, and the request was not carried out (etcd has no leader, or no member could be
    /// reached): the caller may try again.
    #[error("{context}: {detail}")]
    Unavailable {
        /// What the store was doing.
        context: &'static str,
        /// What the backend said.
        detail: String,
    },

    /// etcd's space quota is used up (its NOSPACE alarm): nothing more is written until an operator compacts,
    /// defragments and disarms the alarm.
    #[error("{detail}")]
    NoSpace {
        /// etcd's message (`etcdserver: mvcc: database space exceeded`).
        detail: String,
    },

    /// A failure of the underlying database or server, with its cause.
    #[error("{context}: {source}")]
    Backend {
        /// What the store was doing.
        context: &'static str,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl Error {
    /// Wraps a backend failure with what the store was doing when it happened.
    pub fn backend(context: &'static str, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        Error::Backend { context, source: source.into() }
    }

    /// Whether this error tells a watcher or lister to start over from a fresh list.
    pub fn needs_relist(&self) -> bool {
        matches!(self, Error::Compacted { .. } | Error::WatchOverflow)
    }
}

/// Keys are byte strings but in practice UTF-8 registry paths; show them as text where possible.
pub(crate) fn show_key(key: &[u8]) -> String {
    match std::str::from_utf8(key) {
        Ok(s) => format!("{s:?}"),
        Err(_) => format!("{key:?}"),
    }
}
