//! A watcher's bounded queue, with one slot held back for the error that ends it.
//!
//! Each queue has exactly one producer (the hub's publisher, or an etcd watch pump). When only the reserved slot is
//! left, the producer puts [`Error::WatchOverflow`] there and gives the queue up. The consumer therefore reads every
//! event that was accepted, then the reason the watch ended — never a silent gap.
//!
//! The hub's publisher never waits ([`QueueSender::push`]): one slow watcher must not hold up the others. An etcd
//! pump has a watch of its own and may wait a while ([`QueueSender::push_within`]): etcd hands a watcher that lagged a
//! moment its missed events in batches of up to a thousand, more than a queue holds, and a consumer that is reading
//! them has not fallen behind.

use tokio::sync::mpsc;

use crate::{Error, Event, Result};

/// The producer's end.
#[derive(Debug)]
pub(crate) struct QueueSender {
    tx: mpsc::Sender<Result<Event>>,
}

/// The consumer's end.
pub(crate) type QueueReceiver = mpsc::Receiver<Result<Event>>;

/// A queue holding up to `capacity` events, plus the ending error.
pub(crate) fn queue(capacity: usize) -> (QueueSender, QueueReceiver) {
    let (tx, rx) = mpsc::channel(capacity.max(1) + 1);
    (QueueSender { tx }, rx)
}

impl QueueSender {
    /// Offers an event without waiting. `false` means the queue is finished — the consumer went away, or the queue
    /// was full and now ends with [`Error::WatchOverflow`] — and the producer should drop it.
    pub(crate) fn push(&self, event: Event) -> bool {
        if self.tx.is_closed() {
            return false;
        }
        if self.tx.capacity() <= 1 {
            let _ = self.tx.try_send(Err(Error::WatchOverflow));
            return false;
        }
        self.tx.try_send(Ok(event)).is_ok()
    }

    /// Offers an event, waiting up to `patience` for the consumer to make room. `false` means the queue is finished:
    /// the consumer went away, or it read nothing for `patience` while the queue was full, and the queue now ends
    /// with [`Error::WatchOverflow`].
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) async fn push_within(&self, event: Event, patience: std::time::Duration) -> bool {
        // Two permits: one for the event, and the slot held back for the error stays free.
        match tokio::time::timeout(patience, self.tx.reserve_many(2)).await {
            Ok(Ok(mut permits)) => {
                permits.next().expect("two permits").send(Ok(event));
                true
            }
            Ok(Err(_closed)) => false,
            Err(_elapsed) => {
                let _ = self.tx.try_send(Err(Error::WatchOverflow));
                false
            }
        }
    }

    /// Ends the queue with `error`, after the events already in it.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) fn fail(self, error: Error) {
        let _ = self.tx.try_send(Err(error));
    }

    /// Waits until the consumer has gone away.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))]
    pub(crate) async fn closed(&self) {
        self.tx.closed().await
    }
}
