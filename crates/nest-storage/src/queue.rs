//! A watcher's bounded queue, with one slot held back for the error that ends it.
//!
//! Each queue has exactly one producer (the hub's publisher, or an etcd watch pump), which never waits: when only
//! the reserved slot is left, the producer puts [`Error::WatchOverflow`] there and gives the queue up. The consumer
//! therefore reads every event that was accepted, then the reason the watch ended — never a silent gap.

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
