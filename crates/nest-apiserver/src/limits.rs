//! What one client can take of the server: connections (a cap, a TLS handshake deadline, an idle timeout), requests
//! in flight per user (429 beyond, a first step of API Priority and Fairness: one user's flood does not starve
//! another's requests) and the size of a request's body (413 beyond). Each refusal of a connection or a request in
//! flight is counted for `/metrics`.

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The limits, as `nest apiserver`'s flags set them.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Connections open at once; more are closed as soon as they are accepted.
    pub max_connections: usize,
    /// How long a client has to complete the TLS handshake.
    pub handshake_timeout: Duration,
    /// How long a client has to send a request's headers (HTTP/1.1).
    pub header_read_timeout: Duration,
    /// A connection with no request open and no byte either way for this long is closed.
    pub idle_timeout: Duration,
    /// Requests one user may have in flight (watches and log streams, which last, do not count), as
    /// kube-apiserver's `--max-requests-inflight` but per user.
    pub max_inflight_per_user: usize,
    /// The largest request body read (`--max-request-bytes`); a larger one is answered 413 `RequestEntityTooLarge`.
    pub max_request_bytes: usize,
}

/// kube-apiserver's `MaxRequestBodyBytes` (3 MiB: `NewConfig` in `k8s.io/apiserver/pkg/server/config.go`, 1.33,
/// which gives it no flag): the default of `--max-request-bytes`.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 3 * 1024 * 1024;

/// What `--max-request-bytes` may be: from 1 KiB (less could not hold a small object) to 64 MiB (a body is held in
/// memory whole before it is decoded; storage keeps no object over 1.5 MiB anyway).
pub const MAX_REQUEST_BYTES_RANGE: RangeInclusive<usize> = 1024..=64 * 1024 * 1024;

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 4096,
            handshake_timeout: Duration::from_secs(10),
            // kube-apiserver's ReadHeaderTimeout.
            header_read_timeout: Duration::from_secs(32),
            // Longer than clients keep idle connections (Go and hyper-util: 90 s), so that they close first and never
            // reuse one the server is closing.
            idle_timeout: Duration::from_secs(120),
            max_inflight_per_user: 200,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
        }
    }
}

/// Counters of what the limits did, and the gauges behind them.
#[derive(Debug, Default)]
pub struct Counters {
    pub connections: AtomicUsize,
    pub refused_connections: AtomicU64,
    pub handshake_timeouts: AtomicU64,
    pub idle_closed: AtomicU64,
    pub inflight: AtomicUsize,
    pub rejected_requests: AtomicU64,
    per_user: Mutex<HashMap<String, usize>>,
    /// Answers by verb, resource and code, as kube-apiserver's `apiserver_request_total`.
    answered: Mutex<HashMap<(&'static str, String, u16), u64>>,
}

/// Held while a connection is open.
pub struct ConnectionSlot(Arc<Counters>);

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Held while a request of a user is in flight.
pub struct RequestSlot {
    counters: Arc<Counters>,
    user: String,
}

impl Drop for RequestSlot {
    fn drop(&mut self) {
        self.counters.inflight.fetch_sub(1, Ordering::SeqCst);
        let mut users = self.counters.per_user.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = users.get_mut(&self.user) {
            *count -= 1;
            if *count == 0 {
                users.remove(&self.user);
            }
        }
    }
}

impl Counters {
    /// A slot for a new connection, unless `max` are open (then the refusal is counted).
    pub fn connect(self: &Arc<Self>, max: usize) -> Option<ConnectionSlot> {
        let open = self.connections.fetch_add(1, Ordering::SeqCst);
        if open >= max {
            self.connections.fetch_sub(1, Ordering::SeqCst);
            self.refused_connections.fetch_add(1, Ordering::SeqCst);
            return None;
        }
        Some(ConnectionSlot(self.clone()))
    }

    /// A slot for one more request of `user`, unless it has `max` in flight (then the rejection is counted).
    pub fn begin(self: &Arc<Self>, user: &str, max: usize) -> Option<RequestSlot> {
        let mut users = self.per_user.lock().unwrap_or_else(|p| p.into_inner());
        let count = users.entry(user.to_string()).or_insert(0);
        if *count >= max {
            drop(users);
            self.rejected_requests.fetch_add(1, Ordering::SeqCst);
            return None;
        }
        *count += 1;
        self.inflight.fetch_add(1, Ordering::SeqCst);
        Some(RequestSlot { counters: self.clone(), user: user.to_string() })
    }

    /// Counts one answer. `resource` is a resource the server serves (or empty for other paths), so the number of
    /// series stays bounded whatever paths clients ask for.
    pub fn answered(&self, verb: &'static str, resource: &str, code: u16) {
        let mut answered = self.answered.lock().unwrap_or_else(|p| p.into_inner());
        match answered.get_mut(&(verb, resource.to_string(), code)) {
            Some(count) => *count += 1,
            None => {
                answered.insert((verb, resource.to_string(), code), 1);
            }
        }
    }

    /// The counters in the Prometheus text format.
    pub fn render(&self) -> String {
        let get = |v: &AtomicU64| v.load(Ordering::SeqCst);
        let mut out = String::new();
        let mut family = |name: &str, kind: &str, help: &str, samples: &[(&str, u64)]| {
            out.push_str(&format!("# HELP {name} {help}\n# TYPE {name} {kind}\n"));
            for (labels, value) in samples {
                out.push_str(&format!("{name}{labels} {value}\n"));
            }
        };
        family(
            "nest_apiserver_connections",
            "gauge",
            "Connections open.",
            &[("", self.connections.load(Ordering::SeqCst) as u64)],
        );
        family(
            "nest_apiserver_connections_closed_total",
            "counter",
            "Connections the server closed: over the cap as accepted, a TLS handshake too slow, idle too long.",
            &[
                ("{reason=\"cap\"}", get(&self.refused_connections)),
                ("{reason=\"handshake_timeout\"}", get(&self.handshake_timeouts)),
                ("{reason=\"idle\"}", get(&self.idle_closed)),
            ],
        );
        family(
            "apiserver_current_inflight_requests",
            "gauge",
            "Requests in flight (watches and log streams aside).",
            &[("", self.inflight.load(Ordering::SeqCst) as u64)],
        );
        family(
            "nest_apiserver_rejected_requests_total",
            "counter",
            "Requests refused with 429 because their user had too many in flight.",
            &[("{reason=\"per-user-inflight\"}", get(&self.rejected_requests))],
        );
        let mut answered: Vec<(String, u64)> = {
            let answered = self.answered.lock().unwrap_or_else(|p| p.into_inner());
            answered
                .iter()
                .map(|((verb, resource, code), n)| {
                    (format!("{{verb=\"{verb}\",resource=\"{resource}\",code=\"{code}\"}}"), *n)
                })
                .collect()
        };
        answered.sort();
        let samples: Vec<(&str, u64)> = answered.iter().map(|(labels, n)| (labels.as_str(), *n)).collect();
        family(
            "apiserver_request_total",
            "counter",
            "Requests answered, by verb, resource and HTTP code (a watch when it starts).",
            &samples,
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_over_its_limit_is_refused_while_others_are_not() {
        let counters = Arc::new(Counters::default());
        let first = counters.begin("alice", 2).unwrap();
        let _second = counters.begin("alice", 2).unwrap();
        assert!(counters.begin("alice", 2).is_none());
        assert!(counters.begin("bob", 2).is_some());
        drop(first);
        assert!(counters.begin("alice", 2).is_some(), "a finished request frees its slot");
        assert_eq!(counters.rejected_requests.load(Ordering::SeqCst), 1);
        assert!(counters.render().contains("nest_apiserver_rejected_requests_total{reason=\"per-user-inflight\"} 1"));
    }

    #[test]
    fn connections_beyond_the_cap_are_refused_and_counted() {
        let counters = Arc::new(Counters::default());
        let slots: Vec<_> = (0..3).map(|_| counters.connect(3).unwrap()).collect();
        assert!(counters.connect(3).is_none());
        drop(slots);
        assert!(counters.connect(3).is_some());
        assert!(counters.render().contains("nest_apiserver_connections_closed_total{reason=\"cap\"} 1"));
    }
}
