//! The sequencer of the embedded store: one thread that owns every write.
//!
//! Writers send requests over a channel and wait for the reply. The thread takes whatever requests are waiting
//! (up to `max_batch`), applies them in one redb write transaction, commits it durably (one fsync for the whole
//! batch: group commit), then publishes the batch's events to the watch hub and answers every request. Because one
//! thread assigns revisions and publishes, revisions are gapless and watchers see them in commit order.
//!
//! When no write is waiting, the thread compacts history in bounded slices, so compaction never holds writers up
//! for long.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use redb::{ReadableTable, Table, WriteTransaction};
use tokio::sync::oneshot;

use super::codec::{self, HISTORY, KV, LOG, META, META_COMPACTED, META_REVISION};
use super::{Config, Shared};
use crate::{Deleted, Error, Event, EventKind, KeyValue, Result, Revision};

/// How many log rows one compaction slice handles in one transaction.
const COMPACTION_SLICE: u64 = 4096;

/// A write, as sent to the sequencer.
#[derive(Debug)]
pub(crate) enum Op {
    Create { key: Bytes, value: Bytes },
    Update { key: Bytes, value: Bytes, expected: Revision },
    Delete { key: Bytes, expected: Option<Revision> },
}

/// What a successful write returns.
#[derive(Debug)]
pub(crate) enum Written {
    Item(KeyValue),
    Deleted(Deleted),
}

#[derive(Debug)]
pub(crate) enum Request {
    Write { op: Op, reply: oneshot::Sender<Result<Written>> },
    Compact { revision: Revision, reply: oneshot::Sender<Result<()>> },
}

/// The sequencer's state; lives on its own thread.
pub(crate) struct Writer {
    shared: Arc<Shared>,
    config: Config,
    /// The newest committed revision.
    revision: Revision,
    /// The committed compaction point.
    compacted: Revision,
    /// Where compaction is heading; slices run while `compacted < target`.
    target: Revision,
    /// Callers of `compact` waiting for the compaction point to reach their revision.
    waiting: Vec<(Revision, oneshot::Sender<Result<()>>)>,
    next_auto_compaction: Instant,
}

type Pending = (Op, oneshot::Sender<Result<Written>>);

impl Writer {
    pub(crate) fn new(shared: Arc<Shared>, config: Config, revision: Revision, compacted: Revision) -> Writer {
        let next_auto_compaction = Instant::now() + config.compaction_interval;
        Writer { shared, config, revision, compacted, target: compacted, waiting: Vec::new(), next_auto_compaction }
    }

    /// Serves requests until every sender is gone, then closes the hub so watchers end.
    pub(crate) fn run(mut self, requests: Receiver<Request>) {
        let mut batch: Vec<Pending> = Vec::new();
        loop {
            let first = if self.target > self.compacted {
                match requests.try_recv() {
                    Ok(request) => Some(request),
                    Err(TryRecvError::Empty) => None,
                    Err(TryRecvError::Disconnected) => break,
                }
            } else {
                let wait = self.next_auto_compaction.saturating_duration_since(Instant::now());
                match requests.recv_timeout(wait.max(Duration::from_millis(1))) {
                    Ok(request) => Some(request),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            };
            let Some(first) = first else {
                self.compaction_step();
                continue;
            };
            self.take(first, &mut batch);
            while batch.len() < self.config.max_batch {
                match requests.try_recv() {
                    Ok(request) => self.take(request, &mut batch),
                    Err(_) => break,
                }
            }
            if !batch.is_empty() {
                self.commit_batch(std::mem::take(&mut batch));
            }
        }
        self.shared.hub.close();
    }

    fn take(&mut self, request: Request, batch: &mut Vec<Pending>) {
        match request {
            Request::Write { op, reply } => batch.push((op, reply)),
            Request::Compact { revision, reply } => {
                if revision > self.revision {
                    let _ = reply.send(Err(Error::FutureRevision { requested: revision }));
                } else if revision <= self.compacted {
                    let _ = reply.send(Ok(()));
                } else {
                    self.target = self.target.max(revision);
                    self.waiting.push((revision, reply));
                }
            }
        }
    }

    /// Applies a batch in one transaction and commits it durably; then publishes and replies.
    fn commit_batch(&mut self, batch: Vec<Pending>) {
        let mut events = Vec::with_capacity(batch.len());
        let mut results = Vec::with_capacity(batch.len());
        let outcome = (|| -> Result<Revision, redb::Error> {
            let txn = self.shared.db.begin_write()?;
            let mut revision = self.revision;
            {
                let mut tables = Tables::open(&txn)?;
                for (op, _) in &batch {
                    results.push(tables.apply(op, &mut revision, &mut events)?);
                }
                if revision != self.revision {
                    tables.meta.insert(META_REVISION, revision.0)?;
                }
            }
            if revision == self.revision {
                // Every write in the batch was refused: nothing to make durable.
                txn.abort()?;
            } else {
                txn.commit()?;
            }
            Ok(revision)
        })();
        match outcome {
            Ok(revision) => {
                self.revision = revision;
                // Publish before replying: once a writer hears back, its event is already queued for every watcher.
                if !events.is_empty() {
                    self.shared.hub.publish(&events, revision);
                }
                for ((_, reply), result) in batch.into_iter().zip(results) {
                    let _ = reply.send(result);
                }
            }
            Err(error) => {
                tracing::error!(%error, "embedded store: write transaction failed");
                let message = error.to_string();
                for (_, reply) in batch {
                    let _ = reply.send(Err(Error::backend("committing a write", message.clone())));
                }
            }
        }
    }

    /// Runs one compaction slice, or schedules automatic compaction when it is due.
    fn compaction_step(&mut self) {
        if self.target <= self.compacted {
            // The automatic compaction tick: keep at least `retain_revisions` revisions.
            self.next_auto_compaction = Instant::now() + self.config.compaction_interval;
            let keep_from = Revision(self.revision.0.saturating_sub(self.config.retain_revisions));
            if keep_from > self.compacted {
                tracing::debug!(%keep_from, "embedded store: automatic compaction");
                self.target = keep_from;
            }
            return;
        }
        let end = Revision(self.target.0.min(self.compacted.0 + COMPACTION_SLICE));
        match compact_slice(&self.shared.db, self.compacted, end) {
            Ok(()) => {
                self.compacted = end;
                self.shared.set_compacted(end);
            }
            Err(error) => {
                tracing::error!(%error, "embedded store: compaction failed");
                let message = error.to_string();
                self.target = self.compacted;
                for (_, reply) in self.waiting.drain(..) {
                    let _ = reply.send(Err(Error::backend("compacting history", message.clone())));
                }
                return;
            }
        }
        let compacted = self.compacted;
        let (done, waiting): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.waiting).into_iter().partition(|(revision, _)| *revision <= compacted);
        self.waiting = waiting;
        for (_, reply) in done {
            let _ = reply.send(Ok(()));
        }
    }
}

/// The tables of one write transaction.
struct Tables<'txn> {
    kv: Table<'txn, &'static [u8], &'static [u8]>,
    history: Table<'txn, (&'static [u8], u64), &'static [u8]>,
    log: Table<'txn, u64, &'static [u8]>,
    meta: Table<'txn, &'static str, u64>,
}

impl<'txn> Tables<'txn> {
    fn open(txn: &'txn WriteTransaction) -> Result<Self, redb::Error> {
        Ok(Tables {
            kv: txn.open_table(KV)?,
            history: txn.open_table(HISTORY)?,
            log: txn.open_table(LOG)?,
            meta: txn.open_table(META)?,
        })
    }

    fn current(&self, key: &[u8]) -> Result<Option<KeyValue>, redb::Error> {
        let Some(row) = self.kv.get(key)? else { return Ok(None) };
        Ok(Some(codec::decode_item(key, row.value()).ok_or_else(|| corrupt_row("kv"))?))
    }

    /// Applies one write. The outer error is a storage failure that aborts the whole batch; the inner one is this
    /// write's own refusal (exists, conflict, not found), which costs no revision.
    fn apply(
        &mut self,
        op: &Op,
        revision: &mut Revision,
        events: &mut Vec<Event>,
    ) -> Result<Result<Written>, redb::Error> {
        match op {
            Op::Create { key, value } => {
                if self.current(key)?.is_some() {
                    return Ok(Err(Error::AlreadyExists { key: key.to_vec() }));
                }
                let rev = revision.next();
                Ok(Ok(Written::Item(self.put(key, value, rev, rev, revision, events)?)))
            }
            Op::Update { key, value, expected } => {
                let Some(current) = self.current(key)? else {
                    return Ok(Err(Error::NotFound { key: key.to_vec() }));
                };
                if current.mod_revision != *expected {
                    return Ok(Err(Error::Conflict { expected: *expected, current: Box::new(current) }));
                }
                let rev = revision.next();
                Ok(Ok(Written::Item(self.put(key, value, current.create_revision, rev, revision, events)?)))
            }
            Op::Delete { key, expected } => {
                let Some(current) = self.current(key)? else {
                    return Ok(Err(Error::NotFound { key: key.to_vec() }));
                };
                if let Some(expected) = expected
                    && current.mod_revision != *expected
                {
                    return Ok(Err(Error::Conflict { expected: *expected, current: Box::new(current) }));
                }
                let rev = revision.next();
                self.kv.remove(&key[..])?;
                self.history.insert((&key[..], rev.0), &codec::encode_tombstone(current.create_revision)[..])?;
                self.log.insert(rev.0, &codec::encode_log(EventKind::Delete, key)[..])?;
                *revision = rev;
                events.push(Event {
                    kind: EventKind::Delete,
                    key: key.clone(),
                    value: current.value.clone(),
                    create_revision: current.create_revision,
                    revision: rev,
                });
                Ok(Ok(Written::Deleted(Deleted { revision: rev, prev: current })))
            }
        }
    }

    fn put(
        &mut self,
        key: &Bytes,
        value: &Bytes,
        create: Revision,
        rev: Revision,
        revision: &mut Revision,
        events: &mut Vec<Event>,
    ) -> Result<KeyValue, redb::Error> {
        self.kv.insert(&key[..], &codec::encode_item(create, rev, value)[..])?;
        self.history.insert((&key[..], rev.0), &codec::encode_put_version(create, value)[..])?;
        self.log.insert(rev.0, &codec::encode_log(EventKind::Put, key)[..])?;
        *revision = rev;
        events.push(Event {
            kind: EventKind::Put,
            key: key.clone(),
            value: value.clone(),
            create_revision: create,
            revision: rev,
        });
        Ok(KeyValue { key: key.clone(), value: value.clone(), create_revision: create, mod_revision: rev })
    }
}

/// Forgets the history of revisions in `[from, to)`, keeping what reads at `to` and later need.
///
/// For each change in that range: if a newer version of its key exists at or before `to`, or the change is a
/// deletion that nothing at or before `to` follows, no read at `to` or later can see that version or any older
/// one of the key, so all of them go. Then the log rows go, and the compaction point moves to `to`.
fn compact_slice(db: &redb::Database, from: Revision, to: Revision) -> Result<(), redb::Error> {
    let txn = db.begin_write()?;
    {
        let mut tables = Tables::open(&txn)?;
        let mut changes: Vec<(u64, Vec<u8>, EventKind)> = Vec::new();
        for row in tables.log.range(from.0..to.0)? {
            let (rev, row) = row?;
            let (kind, key) = codec::decode_log(row.value()).ok_or_else(|| corrupt_row("log"))?;
            changes.push((rev.value(), key.to_vec(), kind));
        }
        for (rev, key, kind) in &changes {
            let superseded = tables.history.range((&key[..], rev + 1)..=(&key[..], to.0))?.next().is_some();
            if superseded || *kind == EventKind::Delete {
                tables.history.retain_in((&key[..], 0)..=(&key[..], *rev), |_, _| false)?;
            }
        }
        tables.log.retain_in(from.0..to.0, |_, _| false)?;
        tables.meta.insert(META_COMPACTED, to.0)?;
    }
    txn.commit()?;
    Ok(())
}

pub(crate) fn corrupt_row(table: &str) -> redb::Error {
    redb::Error::Corrupted(format!("malformed row in table {table}"))
}
