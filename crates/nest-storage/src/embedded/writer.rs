//! The sequencer of the embedded store: one thread that owns every write.
//!
//! Writers send requests over a channel and wait for the reply. The thread takes whatever requests are waiting
//! (up to `max_batch`) and applies them in one redb write transaction. It appends the batch's changes to the
//! [write-ahead log](super::wal) and syncs it (one `fdatasync` for the whole batch: group commit), commits the redb
//! transaction without a sync, publishes the events to the watch hub and answers every request. Because one thread
//! assigns revisions and publishes, revisions are gapless and watchers see them in commit order.
//!
//! Every `checkpoint_interval` (or sooner when the log grows past `checkpoint_bytes`) it makes redb durable with one
//! synced commit and empties the log. When no write is waiting, it compacts history in bounded slices, so
//! compaction never holds writers up for long.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use redb::{Durability, ReadableTable, Table, WriteTransaction};
use tokio::sync::oneshot;

use super::codec::{self, HISTORY, LOG, META, META_COMPACTED, META_REVISION};
use super::wal::Wal;
use super::{Config, Shared};
use crate::{Deleted, Error, Event, EventKind, KeyValue, Result, Revision};

/// How many log rows one compaction slice handles in one transaction.
const COMPACTION_SLICE: u64 = 4096;
/// While writes keep coming, at most one compaction slice runs per this interval.
const COMPACTION_PAUSE: Duration = Duration::from_millis(50);

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
    wal: Wal,
    next_checkpoint: Instant,
    /// Set when redb refused a commit after the log had accepted it: memory and disk may now disagree, so no
    /// further write is taken until the store is reopened (which replays the log).
    failed: Option<String>,
}

type Pending = (Op, oneshot::Sender<Result<Written>>);

impl Writer {
    pub(crate) fn new(
        shared: Arc<Shared>,
        config: Config,
        wal: Wal,
        revision: Revision,
        compacted: Revision,
    ) -> Writer {
        let now = Instant::now();
        Writer {
            next_auto_compaction: now + config.compaction_interval,
            next_checkpoint: now + config.checkpoint_interval,
            shared,
            config,
            revision,
            compacted,
            target: compacted,
            waiting: Vec::new(),
            wal,
            failed: None,
        }
    }

    /// Serves requests until every sender is gone, then closes the hub so watchers end.
    pub(crate) fn run(mut self, requests: Receiver<Request>) {
        let mut batch: Vec<Pending> = Vec::new();
        // Under a steady load the writer is never idle; compaction still gets a slice this often.
        let mut next_slice = Instant::now();
        loop {
            let first = if self.target > self.compacted {
                match requests.try_recv() {
                    Ok(request) => Some(request),
                    Err(TryRecvError::Empty) => None,
                    Err(TryRecvError::Disconnected) => break,
                }
            } else {
                let due = self.next_auto_compaction.min(self.next_checkpoint);
                let wait = due.saturating_duration_since(Instant::now());
                match requests.recv_timeout(wait.max(Duration::from_millis(1))) {
                    Ok(request) => Some(request),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            };
            let now = Instant::now();
            if now >= self.next_checkpoint || self.wal.len() >= self.config.checkpoint_bytes {
                self.checkpoint();
            }
            if now >= self.next_auto_compaction {
                self.schedule_compaction();
            }
            let idle = first.is_none();
            if let Some(first) = first {
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
            if self.target > self.compacted && (idle || now >= next_slice) {
                self.compaction_step();
                next_slice = Instant::now() + COMPACTION_PAUSE;
            }
        }
        // A clean stop leaves redb durable and the log empty.
        self.checkpoint();
        self.shared.hub.close();
    }

    /// The automatic compaction tick: keep at least `retain_revisions` revisions.
    fn schedule_compaction(&mut self) {
        self.next_auto_compaction = Instant::now() + self.config.compaction_interval;
        let keep_from = Revision(self.revision.0.saturating_sub(self.config.retain_revisions));
        if keep_from > self.target {
            tracing::debug!(%keep_from, "embedded store: automatic compaction");
            self.target = keep_from;
        }
    }

    /// Makes everything committed so far durable in redb itself, then empties the log.
    fn checkpoint(&mut self) {
        self.next_checkpoint = Instant::now() + self.config.checkpoint_interval;
        if self.wal.len() == 0 || self.failed.is_some() {
            return;
        }
        let durable = (|| -> Result<(), redb::Error> {
            let mut txn = self.shared.db.begin_write()?;
            txn.set_durability(Durability::Immediate)?;
            txn.open_table(META)?.insert(META_REVISION, self.revision.0)?;
            txn.commit()?;
            Ok(())
        })();
        match durable.map_err(|e| e.to_string()).and_then(|()| self.wal.reset().map_err(|e| e.to_string())) {
            Ok(()) => tracing::debug!(revision = %self.revision, "embedded store: checkpoint"),
            // The log still holds every write since the last checkpoint; the next one tries again.
            Err(error) => tracing::error!(%error, "embedded store: checkpoint failed"),
        }
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

    /// Applies a batch in one transaction, makes it durable through the log, commits it; then publishes and
    /// replies.
    fn commit_batch(&mut self, batch: Vec<Pending>) {
        if let Some(failed) = &self.failed {
            for (_, reply) in batch {
                let _ = reply.send(Err(Error::backend("writing", format!("the store must be reopened: {failed}"))));
            }
            return;
        }
        let mut events = Vec::with_capacity(batch.len());
        let mut results = Vec::with_capacity(batch.len());
        let applied = (|| -> Result<(WriteTransaction, Revision), redb::Error> {
            let mut txn = self.shared.db.begin_write()?;
            // Durability comes from the log; redb is synced at checkpoints.
            txn.set_durability(Durability::None)?;
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
            Ok((txn, revision))
        })();
        let outcome = match applied {
            // Every write in the batch was refused: nothing to make durable.
            Ok((txn, _)) if events.is_empty() => txn.abort().map_err(|e| e.to_string()),
            Ok((txn, revision)) => match self.wal.append(&events) {
                // Dropping `txn` aborts it, so redb and the log stay in step.
                Err(error) => Err(format!("appending to the write-ahead log: {error}")),
                Ok(()) => match txn.commit() {
                    Ok(()) => {
                        self.revision = revision;
                        Ok(())
                    }
                    Err(error) => {
                        let error = format!("committing an acknowledged batch: {error}");
                        self.failed = Some(error.clone());
                        Err(error)
                    }
                },
            },
            Err(error) => Err(error.to_string()),
        };
        match outcome {
            Ok(()) => {
                // Publish before replying: once a writer hears back, its event is already queued for every watcher.
                if !events.is_empty() {
                    self.shared.hub.publish(&events, self.revision);
                }
                for ((_, reply), result) in batch.into_iter().zip(results) {
                    let _ = reply.send(result);
                }
            }
            Err(message) => {
                tracing::error!(error = %message, "embedded store: write failed");
                for (_, reply) in batch {
                    let _ = reply.send(Err(Error::backend("committing a write", message.clone())));
                }
            }
        }
    }

    /// Runs one compaction slice.
    fn compaction_step(&mut self) {
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
pub(crate) struct Tables<'txn> {
    history: Table<'txn, (&'static [u8], u64), &'static [u8]>,
    log: Table<'txn, u64, &'static [u8]>,
    pub(crate) meta: Table<'txn, &'static str, u64>,
}

impl<'txn> Tables<'txn> {
    pub(crate) fn open(txn: &'txn WriteTransaction) -> Result<Self, redb::Error> {
        Ok(Tables { history: txn.open_table(HISTORY)?, log: txn.open_table(LOG)?, meta: txn.open_table(META)? })
    }

    fn current(&self, key: &[u8]) -> Result<Option<KeyValue>, redb::Error> {
        codec::item_at(&self.history, key, Revision(u64::MAX))
    }

    /// Applies one write. The outer error is a storage failure that aborts the whole batch; the inner one is this
    /// write's own refusal (exists, conflict, not found), which costs no revision.
    fn apply(
        &mut self,
        op: &Op,
        revision: &mut Revision,
        events: &mut Vec<Event>,
    ) -> Result<Result<Written>, redb::Error> {
        let rev = revision.next();
        let (event, written) = match op {
            Op::Create { key, value } => {
                if self.current(key)?.is_some() {
                    return Ok(Err(Error::AlreadyExists { key: key.to_vec() }));
                }
                let item = KeyValue { key: key.clone(), value: value.clone(), create_revision: rev, mod_revision: rev };
                (put_event(&item), Written::Item(item))
            }
            Op::Update { key, value, expected } => {
                let Some(current) = self.current(key)? else {
                    return Ok(Err(Error::NotFound { key: key.to_vec() }));
                };
                if current.mod_revision != *expected {
                    return Ok(Err(Error::Conflict { expected: *expected, current: Box::new(current) }));
                }
                let item = KeyValue {
                    key: key.clone(),
                    value: value.clone(),
                    create_revision: current.create_revision,
                    mod_revision: rev,
                };
                (put_event(&item), Written::Item(item))
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
                let event = Event {
                    kind: EventKind::Delete,
                    key: key.clone(),
                    value: current.value.clone(),
                    create_revision: current.create_revision,
                    revision: rev,
                };
                (event, Written::Deleted(Deleted { revision: rev, prev: current }))
            }
        };
        self.record(&event)?;
        *revision = rev;
        events.push(event);
        Ok(Ok(written))
    }

    /// Writes one change, already checked, into the tables. Also used to replay the write-ahead log.
    pub(crate) fn record(&mut self, event: &Event) -> Result<(), redb::Error> {
        let (key, rev) = (&event.key[..], event.revision);
        match event.kind {
            EventKind::Put => {
                self.history
                    .insert((key, rev.0), &codec::encode_put_version(event.create_revision, &event.value)[..])?;
            }
            EventKind::Delete => {
                self.history.insert((key, rev.0), &codec::encode_tombstone(event.create_revision)[..])?;
            }
        }
        self.log.insert(rev.0, &codec::encode_log(event.kind, key)[..])?;
        Ok(())
    }
}

fn put_event(item: &KeyValue) -> Event {
    Event {
        kind: EventKind::Put,
        key: item.key.clone(),
        value: item.value.clone(),
        create_revision: item.create_revision,
        revision: item.mod_revision,
    }
}

/// Forgets the history of revisions in `[from, to)`, keeping what reads at `to` and later need.
///
/// For each change in that range: if a newer version of its key exists at or before `to`, or the change is a
/// deletion that nothing at or before `to` follows, no read at `to` or later can see that version or any older
/// one of the key, so all of them go. Then the log rows go, and the compaction point moves to `to`.
fn compact_slice(db: &redb::Database, from: Revision, to: Revision) -> Result<(), redb::Error> {
    let mut txn = db.begin_write()?;
    // Made durable by the next checkpoint; a crash before it only means the history is compacted again.
    txn.set_durability(Durability::None)?;
    {
        let mut tables = Tables::open(&txn)?;
        let mut changes: Vec<(u64, Vec<u8>, EventKind)> = Vec::new();
        for row in tables.log.range(from.0..to.0)? {
            let (rev, row) = row?;
            let (kind, key) = codec::decode_log(row.value()).ok_or_else(|| codec::malformed("log"))?;
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
