//! Watch fan-out: one sequencer publishes committed events; each watcher gets its own bounded queue.
//!
//! The hub is written to by exactly one thread (a backend's sequencer) after each durable commit, in revision order,
//! so whatever it delivers is ordered and gapless. A watcher is registered under its exact prefix; publishing an
//! event looks up every distinct registered prefix *length* that fits the key (`key[..len]`), so the cost per event
//! grows with the number of distinct prefix lengths (a handful in practice) and the number of matching watchers,
//! never with the total number of watchers.
//!
//! A publish never waits for a watcher. When a watcher's [queue](crate::queue) is full the hub ends it with
//! [`Error::WatchOverflow`](crate::Error) and forgets it: the watcher drains what was queued, reads the error and
//! must relist. Nothing is dropped silently.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

use crate::queue::{QueueReceiver, QueueSender, queue};
use crate::{Error, Event, Result, Revision};

/// Where watchers subscribe and a sequencer publishes.
#[derive(Debug)]
pub(crate) struct Hub {
    inner: Mutex<Inner>,
    /// The queue length of each watcher.
    capacity: usize,
}

#[derive(Debug, Default)]
struct Inner {
    /// The newest revision whose events have all been published.
    published: Revision,
    next_id: u64,
    /// Watchers by their exact prefix.
    by_prefix: HashMap<Bytes, HashMap<u64, QueueSender>>,
    /// How many distinct prefixes of each length are registered.
    lengths: BTreeMap<usize, usize>,
    /// Set when the sequencer stops; subscriptions then end.
    closed: bool,
}

/// A registered watcher's end of the hub. Dropping it unregisters the watcher.
#[derive(Debug)]
pub(crate) struct Subscription {
    hub: Arc<Hub>,
    prefix: Bytes,
    id: u64,
    rx: QueueReceiver,
}

impl Hub {
    pub(crate) fn new(published: Revision, capacity: usize) -> Arc<Hub> {
        Arc::new(Hub { inner: Mutex::new(Inner { published, ..Inner::default() }), capacity: capacity.max(1) })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding this lock cannot leave `Inner` half-updated in a way that matters more than
        // stopping every watcher would; keep serving.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers a watcher for events with revision > the published revision, if that revision is still below
    /// `next`; otherwise returns the published revision, so the caller first catches up to it from history.
    ///
    /// This check-and-register under one lock is what makes the hand-over from history to live events gapless.
    pub(crate) fn subscribe_after(self: &Arc<Self>, prefix: &[u8], next: Revision) -> Result<Subscription, Revision> {
        let mut inner = self.lock();
        if inner.published >= next && !inner.closed {
            return Err(inner.published);
        }
        let (tx, rx) = queue(self.capacity);
        let id = inner.next_id;
        inner.next_id += 1;
        let prefix = Bytes::copy_from_slice(prefix);
        if !inner.closed {
            let slot = inner.by_prefix.entry(prefix.clone()).or_default();
            slot.insert(id, tx);
            if slot.len() == 1 {
                *inner.lengths.entry(prefix.len()).or_default() += 1;
            }
        }
        // When closed, `tx` is dropped here and the subscription ends at once.
        Ok(Subscription { hub: self.clone(), prefix, id, rx })
    }

    /// Delivers one commit's events (in revision order) and marks `revision` published.
    pub(crate) fn publish(&self, events: &[Event], revision: Revision) {
        let mut inner = self.lock();
        let inner = &mut *inner;
        let mut dead: Vec<(Bytes, u64)> = Vec::new();
        for event in events {
            for &len in inner.lengths.keys() {
                if len > event.key.len() {
                    break;
                }
                let Some(subscribers) = inner.by_prefix.get(&event.key[..len]) else { continue };
                for (&id, subscriber) in subscribers {
                    if !subscriber.push(event.clone()) {
                        dead.push((Bytes::copy_from_slice(&event.key[..len]), id));
                    }
                }
            }
            // Removing right away keeps a full queue from being offered (and counted) twice.
            for (prefix, id) in dead.drain(..) {
                inner.remove(&prefix, id);
            }
        }
        inner.published = inner.published.max(revision);
    }

    /// Ends every subscription: the sequencer has stopped.
    pub(crate) fn close(&self) {
        let mut inner = self.lock();
        inner.closed = true;
        inner.by_prefix.clear();
        inner.lengths.clear();
    }

    #[cfg(test)]
    fn watcher_count(&self) -> usize {
        self.lock().by_prefix.values().map(HashMap::len).sum()
    }
}

impl Inner {
    fn remove(&mut self, prefix: &[u8], id: u64) {
        let Some(slot) = self.by_prefix.get_mut(prefix) else { return };
        if slot.remove(&id).is_none() || !slot.is_empty() {
            return;
        }
        self.by_prefix.remove(prefix);
        if let Some(count) = self.lengths.get_mut(&prefix.len()) {
            *count -= 1;
            if *count == 0 {
                self.lengths.remove(&prefix.len());
            }
        }
    }
}

impl Subscription {
    /// The next event, or why there are no more: [`Error::WatchOverflow`], or [`Error::Closed`] when the store
    /// stopped.
    pub(crate) async fn recv(&mut self) -> Result<Event> {
        self.rx.recv().await.unwrap_or(Err(Error::Closed))
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.hub.lock().remove(&self.prefix, self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_put as put;

    async fn next_rev(sub: &mut Subscription) -> u64 {
        sub.recv().await.expect("an event").revision.0
    }

    #[tokio::test]
    async fn events_reach_every_watcher_whose_prefix_matches() {
        let hub = Hub::new(Revision(0), 16);
        let mut all = hub.subscribe_after(b"/registry/", Revision(1)).unwrap();
        let mut pods = hub.subscribe_after(b"/registry/pods/", Revision(1)).unwrap();
        let mut ns = hub.subscribe_after(b"/registry/pods/ns1/", Revision(1)).unwrap();
        hub.publish(
            &[put("/registry/pods/ns1/a", 1), put("/registry/pods/ns2/b", 2), put("/registry/x", 3)],
            Revision(3),
        );
        assert_eq!((next_rev(&mut all).await, next_rev(&mut all).await, next_rev(&mut all).await), (1, 2, 3));
        assert_eq!((next_rev(&mut pods).await, next_rev(&mut pods).await), (1, 2));
        assert_eq!(next_rev(&mut ns).await, 1);
        assert!(ns.rx.try_recv().is_err(), "ns1 watcher must not see ns2 or other resources");
    }

    #[tokio::test]
    async fn subscribing_behind_the_published_revision_asks_to_catch_up_first() {
        let hub = Hub::new(Revision(10), 16);
        assert_eq!(hub.subscribe_after(b"/", Revision(5)).unwrap_err(), Revision(10));
        assert!(hub.subscribe_after(b"/", Revision(11)).is_ok());
    }

    #[tokio::test]
    async fn a_full_queue_ends_in_overflow_after_the_queued_events_and_never_blocks_publish() {
        let hub = Hub::new(Revision(0), 2);
        let mut slow = hub.subscribe_after(b"/", Revision(1)).unwrap();
        let mut fast = hub.subscribe_after(b"/", Revision(1)).unwrap();
        for rev in 1..=3 {
            hub.publish(&[put("/a", rev)], Revision(rev));
            assert_eq!(next_rev(&mut fast).await, rev);
        }
        assert_eq!(next_rev(&mut slow).await, 1);
        assert_eq!(next_rev(&mut slow).await, 2);
        assert!(matches!(slow.recv().await, Err(Error::WatchOverflow)));
        assert_eq!(hub.watcher_count(), 1, "the overflowed watcher is unregistered");
    }

    #[tokio::test]
    async fn dropping_a_subscription_unregisters_it_and_close_ends_the_rest() {
        let hub = Hub::new(Revision(0), 4);
        let first = hub.subscribe_after(b"/a", Revision(1)).unwrap();
        let mut second = hub.subscribe_after(b"/b", Revision(1)).unwrap();
        drop(first);
        assert_eq!(hub.watcher_count(), 1);
        hub.close();
        assert!(matches!(second.recv().await, Err(Error::Closed)));
        let mut late = hub.subscribe_after(b"/c", Revision(1)).unwrap();
        assert!(matches!(late.recv().await, Err(Error::Closed)));
    }
}
