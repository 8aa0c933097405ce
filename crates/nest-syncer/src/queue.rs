//! One work queue shared by every tenant, fair between them: tenants take turns (weighted round robin), so a tenant
//! with thousands of changes waiting delays another by at most one turn. An item queued twice is there once; an item
//! changed while a worker has it is queued again when the worker is done, so no change is lost and no object is
//! worked on by two workers at once.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

struct Lane<K> {
    items: VecDeque<(K, Instant)>,
    queued: HashSet<K>,
    weight: u32,
    /// Items taken in the current turn.
    taken: u32,
}

impl<K> Lane<K> {
    fn new() -> Lane<K> {
        Lane { items: VecDeque::new(), queued: HashSet::new(), weight: 1, taken: 0 }
    }
}

struct Inner<K> {
    lanes: BTreeMap<String, Lane<K>>,
    /// Tenants with items, in turn order.
    turns: VecDeque<String>,
    in_flight: HashSet<(String, K)>,
    again: HashSet<(String, K)>,
}

/// The queue. `K` identifies one object of one tenant.
pub struct Queue<K> {
    inner: Mutex<Inner<K>>,
    ready: Notify,
}

impl<K: Clone + Eq + Hash> Default for Queue<K> {
    fn default() -> Self {
        Queue {
            inner: Mutex::new(Inner {
                lanes: BTreeMap::new(),
                turns: VecDeque::new(),
                in_flight: HashSet::new(),
                again: HashSet::new(),
            }),
            ready: Notify::new(),
        }
    }
}

impl<K: Clone + Eq + Hash> Queue<K> {
    /// Queues `key` of `tenant` (once).
    pub fn add(&self, tenant: &str, key: K) {
        let mut inner = self.inner.lock().expect("the queue lock");
        let flight = (tenant.to_string(), key.clone());
        if inner.in_flight.contains(&flight) {
            inner.again.insert(flight);
            return;
        }
        let lane = inner.lanes.entry(tenant.to_string()).or_insert_with(Lane::new);
        if !lane.queued.insert(key.clone()) {
            return;
        }
        lane.items.push_back((key, Instant::now()));
        if lane.items.len() == 1 && !inner.turns.iter().any(|t| t == tenant) {
            inner.turns.push_back(tenant.to_string());
        }
        drop(inner);
        self.ready.notify_one();
    }

    /// How many items `tenant` takes per turn (1 unless set).
    pub fn set_weight(&self, tenant: &str, weight: u32) {
        let mut inner = self.inner.lock().expect("the queue lock");
        inner.lanes.entry(tenant.to_string()).or_insert_with(Lane::new).weight = weight.max(1);
    }

    /// The next item, in turn, with how long it waited; the caller calls [`Queue::done`] after working on it.
    pub async fn next(&self) -> (String, K, Duration) {
        loop {
            let notified = self.ready.notified();
            if let Some(item) = self.take() {
                return item;
            }
            notified.await;
        }
    }

    fn take(&self) -> Option<(String, K, Duration)> {
        let mut inner = self.inner.lock().expect("the queue lock");
        let tenant = inner.turns.front()?.clone();
        let lane = inner.lanes.get_mut(&tenant)?;
        let (key, queued_at) = lane.items.pop_front()?;
        lane.queued.remove(&key);
        lane.taken += 1;
        let turn_over = lane.taken >= lane.weight || lane.items.is_empty();
        let more = !lane.items.is_empty();
        if turn_over {
            lane.taken = 0;
            inner.turns.pop_front();
            if more {
                inner.turns.push_back(tenant.clone());
            }
        }
        inner.in_flight.insert((tenant.clone(), key.clone()));
        if !inner.turns.is_empty() {
            self.ready.notify_one();
        }
        Some((tenant, key, queued_at.elapsed()))
    }

    /// Marks `key` worked on; it is queued again if it changed meanwhile.
    pub fn done(&self, tenant: &str, key: &K) {
        let flight = (tenant.to_string(), key.clone());
        let again = {
            let mut inner = self.inner.lock().expect("the queue lock");
            inner.in_flight.remove(&flight);
            inner.again.remove(&flight)
        };
        if again {
            self.add(tenant, key.clone());
        }
    }

    /// Drops everything of `tenant`.
    pub fn remove_tenant(&self, tenant: &str) {
        let mut inner = self.inner.lock().expect("the queue lock");
        inner.lanes.remove(tenant);
        inner.turns.retain(|t| t != tenant);
        inner.again.retain(|(t, _)| t != tenant);
    }

    /// Items waiting, per tenant.
    pub fn depths(&self) -> BTreeMap<String, usize> {
        let inner = self.inner.lock().expect("the queue lock");
        inner.lanes.iter().map(|(tenant, lane)| (tenant.clone(), lane.items.len())).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tenants_take_turns_whatever_their_backlog() {
        let queue = Queue::default();
        for i in 0..1000 {
            queue.add("busy", i);
        }
        queue.add("quiet", 1);
        queue.add("quiet", 2);
        let mut order = Vec::new();
        for _ in 0..4 {
            let (tenant, key, _) = queue.next().await;
            queue.done(&tenant, &key);
            order.push(tenant);
        }
        assert_eq!(order, ["busy", "quiet", "busy", "quiet"]);
        queue.set_weight("busy", 3);
        let (tenant, key, _) = queue.next().await;
        queue.done(&tenant, &key);
        assert_eq!(tenant, "busy");
        assert_eq!(queue.depths()["busy"], 997, "1000, less two in the first turns, less one");
    }

    #[tokio::test]
    async fn an_item_is_queued_once_and_again_after_a_change_in_flight() {
        let queue = Queue::default();
        queue.add("t", "pod/a");
        queue.add("t", "pod/a");
        let (tenant, key, _) = queue.next().await;
        assert_eq!(queue.depths()["t"], 0, "queued once");
        queue.add("t", "pod/a");
        assert_eq!(queue.depths()["t"], 0, "not twice while in flight");
        queue.done(&tenant, &key);
        assert_eq!(queue.depths()["t"], 1, "again after the worker is done");
        queue.remove_tenant("t");
        assert!(queue.depths().is_empty());
    }
}
