//! What an event recorder decides before it writes, as client-go's `EventCorrelator` decides it (tools/record,
//! `events_cache.go`), with upstream's numbers:
//!
//! - **aggregation**: more than 9 events within 10 minutes that differ only in their message, about one object
//!   from one source with one reason, become one event whose message is `(combined from similar events): <the
//!   last>`;
//! - **counting**: an event identical to one recorded before (the same source, object, field path, type, reason and
//!   message) is not written again: the earlier one's `count` goes up and its `lastTimestamp` moves;
//! - **spam filter**: a source may record 25 events about an object at once, then one every 5 minutes (a token
//!   bucket per source and object), so that a crash-looping object cannot flood the store.
//!
//! No I/O: the recorder that writes (nest-client's `events.rs`) asks [`Correlator::correlate`] and acts on the answer.

use std::collections::{BTreeSet, HashMap};
use std::hash::Hash;
use std::time::{Duration, Instant};

/// How many keys each cache keeps (client-go's `maxLruCacheEntries`).
pub const CACHE_ENTRIES: usize = 4096;
/// How many distinct messages of one reason within [`AGGREGATE_INTERVAL`] make an aggregate.
pub const AGGREGATE_MAX_EVENTS: usize = 10;
/// How long similar events are remembered for aggregation.
pub const AGGREGATE_INTERVAL: Duration = Duration::from_secs(600);
/// How many events a source may record about an object at once.
pub const SPAM_BURST: f64 = 25.0;
/// After the burst, one event per this long.
pub const SPAM_REFILL: Duration = Duration::from_secs(300);
/// The prefix of an aggregated event's message.
pub const COMBINED: &str = "(combined from similar events): ";

/// The fields of an event that say what it is (the rest are when, and how often).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Occurrence {
    /// `source.component` (`kubelet`, `replicaset-controller`).
    pub component: String,
    /// `source.host` (a node's name, for the kubelet).
    pub host: String,
    /// The object's kind (`involvedObject.kind`).
    pub kind: String,
    /// The object's namespace.
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// The part of the object (`spec.containers{web}`).
    pub field_path: String,
    /// The object's UID.
    pub uid: String,
    /// The object's `apiVersion`.
    pub api_version: String,
    /// `Normal` or `Warning`.
    pub type_: String,
    /// Why (`BackOff`).
    pub reason: String,
    /// What happened, in words.
    pub message: String,
}

impl Occurrence {
    /// Source and object (`getSpamKey`).
    fn spam_key(&self) -> Occurrence {
        Occurrence {
            field_path: String::new(),
            type_: String::new(),
            reason: String::new(),
            message: String::new(),
            ..self.clone()
        }
    }

    /// Source, object, type and reason (`EventAggregatorByReasonFunc`).
    fn aggregate_key(&self) -> Occurrence {
        Occurrence { field_path: String::new(), message: String::new(), ..self.clone() }
    }
}

/// What to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// A new Event named `<object>.<hex nanoseconds>`, count 1.
    Create {
        /// The Event's name.
        name: String,
        /// Its message (the event's own, or the aggregate's).
        message: String,
    },
    /// The Event `name`, recorded before: set its count, last timestamp and message.
    Count {
        /// The Event's name.
        name: String,
        /// How many times it happened.
        count: u32,
        /// Its message now.
        message: String,
    },
    /// Nothing: the source has said too much about this object lately.
    Skip,
}

/// A map that forgets its least recently used keys beyond [`CACHE_ENTRIES`].
struct Lru<K, V> {
    entries: HashMap<K, (u64, V)>,
    tick: u64,
}

impl<K: Hash + Eq + Clone, V> Lru<K, V> {
    fn new() -> Self {
        Lru { entries: HashMap::new(), tick: 0 }
    }

    fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.tick += 1;
        let tick = self.tick;
        self.entries.get_mut(key).map(|(used, value)| {
            *used = tick;
            value
        })
    }

    fn insert(&mut self, key: K, value: V) {
        self.tick += 1;
        if self.entries.len() >= CACHE_ENTRIES && !self.entries.contains_key(&key) {
            let oldest = self.entries.iter().min_by_key(|(_, (used, _))| *used).map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(key, (self.tick, value));
    }
}

struct Bucket {
    tokens: f64,
    filled: Instant,
}

struct Similar {
    messages: BTreeSet<String>,
    last: Instant,
}

struct Logged {
    name: String,
    count: u32,
}

/// One recorder's memory of what it recorded.
pub struct Correlator {
    spam: Lru<Occurrence, Bucket>,
    similar: Lru<Occurrence, Similar>,
    logged: Lru<Occurrence, Logged>,
}

impl Default for Correlator {
    fn default() -> Self {
        Correlator { spam: Lru::new(), similar: Lru::new(), logged: Lru::new() }
    }
}

impl Correlator {
    /// What to write for `event`, seen `now`; `unique` names a new Event (`<object>.<hex nanoseconds>`, which the
    /// caller makes from the clock).
    pub fn correlate(&mut self, event: &Occurrence, now: Instant, unique: impl FnOnce() -> String) -> Decision {
        // Aggregation: the key the event is counted under, and its message.
        let aggregate_key = event.aggregate_key();
        let similar = match self.similar.get_mut(&aggregate_key) {
            Some(similar) if now.saturating_duration_since(similar.last) <= AGGREGATE_INTERVAL => similar,
            _ => {
                self.similar.insert(aggregate_key.clone(), Similar { messages: BTreeSet::new(), last: now });
                self.similar.get_mut(&aggregate_key).expect("just inserted")
            }
        };
        similar.messages.insert(event.message.clone());
        similar.last = now;
        let (key, message) = if similar.messages.len() < AGGREGATE_MAX_EVENTS {
            (event.clone(), event.message.clone())
        } else {
            // Do not let the set grow past the threshold.
            if let Some(first) = similar.messages.iter().next().cloned() {
                similar.messages.remove(&first);
            }
            (aggregate_key, format!("{COMBINED}{}", event.message))
        };
        // Counting.
        let decision = match self.logged.get_mut(&key) {
            Some(logged) => {
                logged.count += 1;
                Decision::Count { name: logged.name.clone(), count: logged.count, message }
            }
            None => {
                let name = unique();
                self.logged.insert(key, Logged { name: name.clone(), count: 1 });
                Decision::Create { name, message }
            }
        };
        // The spam filter, last, as upstream: a skipped event still counts as seen.
        let spam_key = event.spam_key();
        let bucket = match self.spam.get_mut(&spam_key) {
            Some(bucket) => bucket,
            None => {
                self.spam.insert(spam_key.clone(), Bucket { tokens: SPAM_BURST, filled: now });
                self.spam.get_mut(&spam_key).expect("just inserted")
            }
        };
        let refilled = now.saturating_duration_since(bucket.filled).as_secs_f64() / SPAM_REFILL.as_secs_f64();
        bucket.tokens = (bucket.tokens + refilled).min(SPAM_BURST);
        bucket.filled = now;
        if bucket.tokens < 1.0 {
            return Decision::Skip;
        }
        bucket.tokens -= 1.0;
        decision
    }

    /// Forgets the Event `name` (gone from the server, expired or deleted), so that the next occurrence of what it
    /// recorded is created again.
    pub fn forget(&mut self, name: &str) {
        self.logged.entries.retain(|_, (_, logged)| logged.name != name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(message: &str) -> Occurrence {
        Occurrence {
            component: "kubelet".into(),
            host: "node-0".into(),
            kind: "Pod".into(),
            namespace: "default".into(),
            name: "web".into(),
            uid: "u1".into(),
            api_version: "v1".into(),
            type_: "Warning".into(),
            reason: "BackOff".into(),
            message: message.into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_same_event_is_counted_not_written_again() {
        let mut correlator = Correlator::default();
        let now = Instant::now();
        let mut names = 0;
        let mut unique = || {
            names += 1;
            format!("web.{names:x}")
        };
        let first = correlator.correlate(&event("Back-off restarting failed container"), now, &mut unique);
        assert_eq!(
            first,
            Decision::Create { name: "web.1".into(), message: "Back-off restarting failed container".into() }
        );
        let second = correlator.correlate(&event("Back-off restarting failed container"), now, &mut unique);
        assert_eq!(
            second,
            Decision::Count { name: "web.1".into(), count: 2, message: "Back-off restarting failed container".into() }
        );
        // Another object, or another message, is another event.
        let other = Occurrence { name: "db".into(), ..event("Back-off restarting failed container") };
        assert!(matches!(correlator.correlate(&other, now, &mut unique), Decision::Create { .. }));
        assert!(matches!(correlator.correlate(&event("other"), now, &mut unique), Decision::Create { .. }));
        // Once its Event is gone, the next is created again.
        correlator.forget("web.1");
        assert!(matches!(
            correlator.correlate(&event("Back-off restarting failed container"), now, &mut unique),
            Decision::Create { .. }
        ));
    }

    #[test]
    fn ten_similar_messages_in_ten_minutes_are_combined() {
        let mut correlator = Correlator::default();
        let now = Instant::now();
        let mut n = 0;
        let mut decisions = Vec::new();
        for i in 0..12 {
            decisions.push(correlator.correlate(&event(&format!("message {i}")), now, || {
                n += 1;
                format!("web.{n:x}")
            }));
        }
        // The first nine are themselves; the tenth becomes the aggregate, which the eleventh and twelfth count.
        assert!(
            decisions[..9]
                .iter()
                .all(|d| matches!(d, Decision::Create { message, .. } if !message.starts_with(COMBINED)))
        );
        assert_eq!(decisions[9], Decision::Create { name: "web.a".into(), message: format!("{COMBINED}message 9") });
        assert_eq!(
            decisions[11],
            Decision::Count { name: "web.a".into(), count: 3, message: format!("{COMBINED}message 11") }
        );
        // Eleven minutes later similar events are new again.
        let later = now + Duration::from_secs(660);
        let decision = correlator.correlate(&event("message 99"), later, || "web.new".into());
        assert_eq!(decision, Decision::Create { name: "web.new".into(), message: "message 99".into() });
    }

    #[test]
    fn a_source_may_say_25_things_about_an_object_then_one_every_five_minutes() {
        let mut correlator = Correlator::default();
        let now = Instant::now();
        let mut n = 0u32;
        let mut written = 0;
        for i in 0..100 {
            let decision = correlator.correlate(&event(&format!("m{}", i % 5)), now, || {
                n += 1;
                format!("web.{n:x}")
            });
            if decision != Decision::Skip {
                written += 1;
            }
        }
        assert_eq!(written, 25);
        // Another object from the same source is not held back.
        let other = Occurrence { name: "db".into(), uid: "u2".into(), ..event("m") };
        assert_ne!(correlator.correlate(&other, now, || "db.1".into()), Decision::Skip);
        // Five minutes later, one more.
        let later = now + SPAM_REFILL;
        assert_ne!(correlator.correlate(&event("m0"), later, || "x".into()), Decision::Skip);
        assert_eq!(correlator.correlate(&event("m0"), later, || "x".into()), Decision::Skip);
    }
}
