//! What a controller wrote that its cache does not show yet, after upstream's `ControllerExpectations`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};

use crate::informers::{Change, Informer, Kind, lock};

/// How long a controller waits for its cache to show what it wrote before it acts anyway (upstream's
/// `ExpectationsTimeout`): only a watch that lost events gets there.
const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(300);

/// What a controller wrote for each owner that its cache of kind `K` does not show yet, as upstream's
/// `ControllerExpectations`: a ReplicaSet that has just created pods must not count them missing and create them
/// again, nor count a pod it has just deleted. Creations are counted before they are asked for (their names are the
/// server's) and met by the watch's `Added` changes of the owner's children; a deletion is met once the cache holds
/// the object no more or holds it being deleted (upstream's `DeletionObserved`: a newer version alone, such as a
/// kubelet's status write that came first, does not do, or the controller would count the pod still there and delete
/// another); a change is met once the cache holds another version of the object, or none. While an owner's are unmet
/// its controller only waits.
pub(crate) struct Expectations<K: Kind> {
    store: Store<K>,
    pending: Arc<Mutex<HashMap<String, Pending<K>>>>,
}

impl<K: Kind> Clone for Expectations<K> {
    fn clone(&self) -> Self {
        Expectations { store: self.store.clone(), pending: self.pending.clone() }
    }
}

/// One owner's unmet expectations.
struct Pending<K: Kind> {
    since: Instant,
    creations: usize,
    /// Objects changed or deleted, with the version read before and which of the two was asked for.
    changes: Vec<(ObjectRef<K>, Option<String>, Write)>,
}

/// What was asked of an object an owner expects to see in its cache.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Write {
    Change,
    Deletion,
}

impl<K: Kind> Expectations<K> {
    pub(crate) fn new(children: &Informer<K>) -> Self {
        Expectations { store: children.store(), pending: Arc::default() }
    }

    fn with(&self, owner: &str, f: impl FnOnce(&mut Pending<K>)) {
        let mut pending = lock(&self.pending);
        // Those of owners deleted before their expectations were met are never asked about again.
        pending.retain(|_, p| p.since.elapsed() <= EXPECTATIONS_TIMEOUT);
        let entry = pending.entry(owner.to_string()).or_insert_with(|| Pending {
            since: Instant::now(),
            creations: 0,
            changes: Vec::new(),
        });
        entry.since = Instant::now();
        f(entry);
    }

    /// `owner` is about to ask for `count` new children.
    pub(crate) fn expect_creations(&self, owner: &str, count: usize) {
        if count > 0 {
            self.with(owner, |p| p.creations += count);
        }
    }

    /// One creation `owner` asked for failed: no child will come of it.
    pub(crate) fn creation_failed(&self, owner: &str) {
        self.with(owner, |p| p.creations = p.creations.saturating_sub(1));
    }

    /// `owner` is about to change `object`, as the cache holds it.
    pub(crate) fn expect_change(&self, owner: &str, object: &K) {
        self.expect(owner, object, Write::Change);
    }

    /// `owner` is about to delete `object`, as the cache holds it.
    pub(crate) fn expect_deletion(&self, owner: &str, object: &K) {
        self.expect(owner, object, Write::Deletion);
    }

    fn expect(&self, owner: &str, object: &K, write: Write) {
        let read = object.resource_version();
        self.with(owner, |p| p.changes.push((ObjectRef::from_obj(object), read, write)));
    }

    /// Takes the server's answer to a change of `object` that `owner` expects (`version` reads the version of the
    /// object in it, if it holds one): a change refused, or answered with the version read (it changed nothing, as
    /// deleting what is already being deleted, so no watch event will come of it), is not waited for.
    pub(crate) fn answered<T>(
        &self,
        owner: &str,
        object: &K,
        answer: &kube::Result<T>,
        version: impl Fn(&T) -> Option<String>,
    ) {
        let read = object.resource_version();
        let void = answer.as_ref().map_or(true, |answer| version(answer).is_some_and(|v| Some(v) == read));
        if void {
            let reference = ObjectRef::from_obj(object);
            self.with(owner, |p| {
                if let Some(at) = p.changes.iter().position(|(r, _, _)| *r == reference) {
                    p.changes.remove(at);
                }
            });
        }
    }

    /// [`answered`](Self::answered), then the answer as `done` reads it ([`nest_client::done_unless_refused`] or
    /// [`nest_client::done_unless_gone_or_changed`]).
    pub(crate) fn settle<T>(
        &self,
        owner: &str,
        object: &K,
        answer: kube::Result<T>,
        version: impl Fn(&T) -> Option<String>,
        done: fn(kube::Result<T>) -> kube::Result<bool>,
    ) -> kube::Result<bool> {
        self.answered(owner, object, &answer, version);
        done(answer)
    }

    /// Takes what the watch reported: a new child counts toward its controller's creations.
    pub(crate) fn observe(&self, change: &Change<K>) {
        let Change::Added(child) = change else { return };
        let Some(owner) = crate::replicaset::controller_of(child.meta()) else { return };
        if let Some(pending) = lock(&self.pending).get_mut(&owner.uid) {
            pending.creations = pending.creations.saturating_sub(1);
        }
    }

    /// Whether the cache shows everything written for `owner` (or it waited too long for it); what it shows is
    /// forgotten.
    pub(crate) fn satisfied(&self, owner: &str) -> bool {
        let mut pending = lock(&self.pending);
        let Some(entry) = pending.get_mut(owner) else { return true };
        entry.changes.retain(|(reference, read, write)| {
            self.store.get(reference).is_some_and(|cached| match write {
                Write::Change => cached.resource_version() == *read,
                Write::Deletion => cached.meta().deletion_timestamp.is_none(),
            })
        });
        let met = entry.creations == 0 && entry.changes.is_empty();
        if met || entry.since.elapsed() > EXPECTATIONS_TIMEOUT {
            if !met {
                tracing::warn!(%owner, kind = %K::kind(&()), "the cache never showed what was written; acting anyway");
            }
            pending.remove(owner);
            return true;
        }
        false
    }
}

/// The version of the object in a write's answer.
pub(crate) fn version_of<K: Resource>(object: &K) -> Option<String> {
    object.meta().resource_version.clone()
}

/// How soon an owner whose expectations are unmet is looked at again (its children's changes usually come first).
pub(crate) const EXPECTING: Duration = Duration::from_millis(500);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::informers::testing::{informer, list, pod};
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::watcher;

    #[tokio::test]
    async fn expectations_hold_an_owner_until_the_cache_shows_its_writes() {
        let informer = informer();
        list(&informer, vec![pod("old", "1", "10", Some("rs"))]);
        let expectations = Expectations::new(&informer);
        assert!(expectations.satisfied("rs"), "nothing written yet");

        // Two creations asked for, one of which fails; and one deletion.
        expectations.expect_creations("rs", 2);
        expectations.creation_failed("rs");
        let old = informer.store().state()[0].clone();
        expectations.expect_change("rs", &old);
        assert!(!expectations.satisfied("rs"));

        // The new pod comes (and is observed as a controller's subscription would).
        informer.apply(watcher::Event::Apply(pod("new", "2", "11", Some("rs"))));
        expectations.observe(&Change::Added(informer.store().get(&ObjectRef::new("new").within("default")).unwrap()));
        assert!(!expectations.satisfied("rs"), "the deletion is not in the cache yet");
        // Another owner's children do not count.
        expectations.expect_creations("other", 1);
        expectations.observe(&Change::Added(Arc::new(pod("x", "9", "12", Some("rs")))));
        assert!(!expectations.satisfied("other"));

        informer.apply(watcher::Event::Delete(pod("old", "1", "13", Some("rs"))));
        assert!(expectations.satisfied("rs"));

        // A change that was refused, or that changed nothing, is not waited for; one that was done is.
        let new = informer.store().get(&ObjectRef::new("new").within("default")).unwrap();
        let version = |p: &Pod| p.resource_version();
        expectations.expect_change("rs", &new);
        expectations.answered("rs", &new, &Ok(pod("new", "2", "14", Some("rs"))), version);
        assert!(!expectations.satisfied("rs"));
        expectations.answered("rs", &new, &Err::<Pod, _>(kube::Error::LinesCodecMaxLineLengthExceeded), version);
        assert!(expectations.satisfied("rs"));
        expectations.expect_change("rs", &new);
        expectations.answered("rs", &new, &Ok((*new).clone()), version);
        assert!(expectations.satisfied("rs"));
    }

    #[tokio::test]
    async fn a_deletion_is_met_by_the_object_being_deleted_or_gone_not_by_a_newer_version() {
        let informer = informer();
        list(&informer, vec![pod("p", "1", "10", Some("rs"))]);
        let expectations = Expectations::new(&informer);
        let p = informer.store().state()[0].clone();
        expectations.expect_deletion("rs", &p);
        // The kubelet's status write lands before the deletion: the pod is still there, not being deleted.
        informer.apply(watcher::Event::Apply(pod("p", "1", "11", Some("rs"))));
        assert!(!expectations.satisfied("rs"), "a newer version of a pod not being deleted");
        // The deletion lands: the pod is being deleted (grace period), then gone.
        let mut deleting = pod("p", "1", "12", Some("rs"));
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now()));
        informer.apply(watcher::Event::Apply(deleting));
        assert!(expectations.satisfied("rs"));

        list(&informer, vec![pod("q", "2", "20", Some("rs"))]);
        let q = informer.store().state()[0].clone();
        expectations.expect_deletion("rs", &q);
        assert!(!expectations.satisfied("rs"));
        informer.apply(watcher::Event::Delete(pod("q", "2", "21", Some("rs"))));
        assert!(expectations.satisfied("rs"));
    }
}
