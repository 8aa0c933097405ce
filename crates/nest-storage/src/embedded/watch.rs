//! A watch on the embedded store: replay from history, then follow live events, with no gap between the two.
//!
//! The watcher is a small state machine. In `CatchUp` it asks the hub to subscribe it from its next revision; the
//! hub refuses while it has already published that revision, and the watcher instead reads the next slice of the
//! `log` table (everything up to the published revision is committed there). Once the hub accepts, the watcher is
//! `Live` and every later event arrives through its queue. The hub's check-and-subscribe happens under the same lock
//! the sequencer publishes under, so no revision falls between the log and the queue.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};

use bytes::Bytes;
use futures_util::StreamExt;

use super::codec::{self, HISTORY, LOG, Version};
use super::{Shared, read_error, read_meta};
use crate::hub::Subscription;
use crate::{Error, Event, EventKind, Result, Revision, WatchStream};

/// How many log rows one catch-up read scans.
const CATCH_UP_SLICE: u64 = 1024;

pub(crate) fn stream(shared: &Arc<Shared>, prefix: Bytes, from: Revision) -> WatchStream {
    let from = from.max(Revision(1));
    // Register with the hub right away when there is no history to replay, so that events written from now on are
    // queued even before the stream is first polled (as an etcd watch is registered when created).
    let state = match shared.hub.subscribe_after(&prefix, from) {
        Ok(subscription) => State::Live(subscription),
        Err(_) => State::CatchUp { next: from },
    };
    let watcher = Watcher { shared: Arc::downgrade(shared), prefix, from, state, replayed: VecDeque::new() };
    futures_util::stream::unfold(watcher, |mut watcher| async move {
        let item = watcher.next().await?;
        Some((item, watcher))
    })
    .boxed()
}

enum State {
    /// Reading history; `next` is the first revision not yet read.
    CatchUp { next: Revision },
    /// Following the hub.
    Live(Subscription),
    /// Ended; the stream yields nothing more.
    Done,
}

struct Watcher {
    shared: Weak<Shared>,
    prefix: Bytes,
    /// Events before this revision are not delivered (it can be ahead of the store: the watch then waits).
    from: Revision,
    state: State,
    /// Events read from history, not yet delivered.
    replayed: VecDeque<Event>,
}

impl Watcher {
    async fn next(&mut self) -> Option<Result<Event>> {
        loop {
            if let Some(event) = self.replayed.pop_front() {
                return Some(Ok(event));
            }
            match self.step().await {
                Ok(Some(event)) => return Some(Ok(event)),
                Ok(None) if matches!(self.state, State::Done) => return None,
                Ok(None) => {}
                Err(error) => {
                    self.state = State::Done;
                    return Some(Err(error));
                }
            }
        }
    }

    /// One transition. Returns a live event when there is one; replayed events go to `replayed`.
    async fn step(&mut self) -> Result<Option<Event>> {
        match &mut self.state {
            State::Done => Ok(None),
            State::CatchUp { next } => {
                let next = *next;
                let Some(shared) = self.shared.upgrade() else { return Err(Error::Closed) };
                let compacted = Revision(shared.compacted.load(std::sync::atomic::Ordering::Acquire));
                if next < compacted {
                    return Err(Error::Compacted { requested: next });
                }
                match shared.hub.subscribe_after(&self.prefix, next) {
                    Ok(subscription) => self.state = State::Live(subscription),
                    Err(published) => {
                        let next = self.replay(&shared, next, published)?;
                        self.state = State::CatchUp { next };
                    }
                }
                Ok(None)
            }
            State::Live(subscription) => {
                let event = subscription.recv().await?;
                Ok((event.revision >= self.from).then_some(event))
            }
        }
    }

    /// Reads one slice of history from `next` (at most up to `published`) into `replayed`; returns the next
    /// revision to read.
    fn replay(&mut self, shared: &Arc<Shared>, next: Revision, published: Revision) -> Result<Revision> {
        let txn = shared.read()?;
        let (_, compacted) = read_meta(&txn)?;
        if next < compacted {
            return Err(Error::Compacted { requested: next });
        }
        let log = txn.open_table(LOG).map_err(read_error)?;
        let history = txn.open_table(HISTORY).map_err(read_error)?;
        let end = published.0.min(next.0 + CATCH_UP_SLICE - 1);
        for row in log.range(next.0..=end).map_err(read_error)? {
            let (rev, row) = row.map_err(read_error)?;
            let rev = rev.value();
            let (kind, key) = codec::decode_log(row.value()).ok_or_else(|| read_error(codec::malformed("log")))?;
            if !key.starts_with(&self.prefix) {
                continue;
            }
            // A put's value is its own version; a delete carries the version just before it.
            let version = match kind {
                EventKind::Put => history.get((key, rev)).map_err(read_error)?.map(|row| row.value().to_vec()),
                EventKind::Delete => history
                    .range((key, 0)..(key, rev))
                    .map_err(read_error)?
                    .next_back()
                    .transpose()
                    .map_err(read_error)?
                    .map(|(_, row)| row.value().to_vec()),
            };
            let Some(Version::Put { create_revision, value }) = version.as_deref().and_then(codec::decode_version)
            else {
                return Err(read_error(codec::malformed("history")));
            };
            if rev >= self.from.0 {
                self.replayed.push_back(Event {
                    kind,
                    key: Bytes::copy_from_slice(key),
                    value,
                    create_revision,
                    revision: Revision(rev),
                });
            }
        }
        Ok(Revision(end + 1))
    }
}
