//! What one kubelet API server lets clients hold ([`Limits`]), and the count of what they hold ([`Connections`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What one kubelet API server lets clients hold. The defaults are the API server's
/// (`nest-apiserver/src/limits.rs`): the same handshake, header and idle deadlines, and its 4,096 connections in
/// all; and, since every pod can reach a kubelet port, at most 256 of them from one address. The API server, this
/// port's one real client, opens a connection per `kubectl logs` and keeps a followed log's open while it lasts:
/// 256 followed logs at once through one API server is more than anyone watches.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Connections open at once, from everyone; more are closed as soon as they are accepted.
    pub max_connections: usize,
    /// Connections open at once from one address; more are closed as soon as they are accepted.
    pub max_per_source: usize,
    /// How long a client has to complete the TLS handshake.
    pub handshake_timeout: Duration,
    /// How long a client has to send a request's headers.
    pub header_read_timeout: Duration,
    /// A connection with no request open and no byte either way for this long is closed.
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 4096,
            max_per_source: 256,
            handshake_timeout: Duration::from_secs(10),
            // kube-apiserver's ReadHeaderTimeout.
            header_read_timeout: Duration::from_secs(32),
            // Longer than clients keep idle connections (Go and hyper-util: 90 s), so that they close first.
            idle_timeout: Duration::from_secs(120),
        }
    }
}

/// The connections open on one or more kubelet API servers, and what the limits closed: one budget for every server
/// given the same `Arc`.
#[derive(Debug)]
pub struct Connections {
    limits: Limits,
    /// Open connections by source address (IPv4-mapped IPv6 addresses counted as the IPv4 address they are).
    open: Mutex<HashMap<IpAddr, usize>>,
    total: AtomicUsize,
    refused: AtomicU64,
    pub(crate) handshake_timeouts: AtomicU64,
    pub(crate) idle_closed: AtomicU64,
}

/// What the limits did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Closed {
    /// Connections closed as accepted, over a cap.
    pub over_cap: u64,
    /// Connections whose TLS handshake did not end in time.
    pub handshake_timeout: u64,
    /// Connections idle too long.
    pub idle: u64,
}

impl Connections {
    /// No connections yet, to be held to `limits`.
    pub fn new(limits: Limits) -> Arc<Connections> {
        Arc::new(Connections {
            limits,
            open: Mutex::new(HashMap::new()),
            total: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
            handshake_timeouts: AtomicU64::new(0),
            idle_closed: AtomicU64::new(0),
        })
    }

    /// The limits these connections are held to.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.total.load(Ordering::SeqCst)
    }

    /// What the limits closed so far.
    pub fn closed(&self) -> Closed {
        Closed {
            over_cap: self.refused.load(Ordering::Relaxed),
            handshake_timeout: self.handshake_timeouts.load(Ordering::Relaxed),
            idle: self.idle_closed.load(Ordering::Relaxed),
        }
    }

    /// A slot for a new connection from `source`, unless that address or everyone is at the cap (then the refusal
    /// is counted).
    pub(crate) fn admit(self: &Arc<Self>, source: IpAddr) -> Option<ConnectionSlot> {
        let source = source.to_canonical();
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let from_source = open.get(&source).copied().unwrap_or(0);
        if from_source >= self.limits.max_per_source || self.total.load(Ordering::SeqCst) >= self.limits.max_connections
        {
            drop(open);
            self.refused.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        open.insert(source, from_source.saturating_add(1));
        self.total.fetch_add(1, Ordering::SeqCst);
        Some(ConnectionSlot { connections: self.clone(), source })
    }
}

/// Held while a connection is open.
pub(crate) struct ConnectionSlot {
    connections: Arc<Connections>,
    source: IpAddr,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut open = self.connections.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = open.get_mut(&self.source) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.source);
            }
        }
        self.connections.total.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_beyond_a_sources_cap_or_the_total_are_refused_and_counted() {
        let limits = Limits { max_connections: 5, max_per_source: 2, ..Limits::default() };
        let connections = Connections::new(limits);
        let one: IpAddr = "10.128.0.7".parse().unwrap();
        let mapped: IpAddr = "::ffff:10.128.0.7".parse().unwrap();
        let first = connections.admit(one).unwrap();
        let _second = connections.admit(mapped).unwrap();
        assert!(connections.admit(one).is_none(), "an IPv4-mapped address is the same source");
        let others: Vec<_> = (1..=3).map(|i| connections.admit(IpAddr::from([10, 128, 0, i])).unwrap()).collect();
        assert_eq!(connections.open(), 5);
        assert!(connections.admit("10.128.0.9".parse().unwrap()).is_none(), "the total is reached");
        drop(first);
        assert!(connections.admit(one).is_some(), "a closed connection frees its slot");
        drop(others);
        assert_eq!(connections.closed(), Closed { over_cap: 2, ..Closed::default() });
    }
}
