//! A tenant's life as the syncer sees it: an explicit state machine. [`step`] takes a tenant's [`Phase`] (none for
//! a tenant not known yet) and what happened to it ([`Event`]), and returns its next phase and what the syncer must
//! do ([`Action`]); nothing else decides when a tenant starts, syncs, waits or goes. `tenants.rs` feeds it the
//! events (from the watches on control planes and Clusters, a tenant's start, its caches and its health checks)
//! and carries out the actions.
//!
//! ```text
//!            Seen(not ready)            Seen(ready): Start
//!   (none) ─────────────────▶ Waiting ─────────────────────▶ Starting ──Started──▶ Filling ──Filled──▶ Syncing
//!      │ Seen(ready): Start      ▲                               │                                 │    ▲
//!      └─────────────────────────┼──────────────▶ Starting       │ StartFailed: RetryLater   Health(false)│Health(true)
//!                                └───────────────────────────────┘                                 ▼    │
//!                                                                                              Unhealthy
//!   any phase ──Deleted: Stop (if started), RemoveEverything──▶ Removing ──Vanished: RemoveEverything──▶ (none)
//!                                                      Deleted: RemoveEverything again ⟲
//! ```

/// Where a tenant is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Its control plane exists but does not serve yet (not ready, or no endpoint).
    Waiting,
    /// Being started: its kubeconfig read, its API server asked, its watches begun.
    Starting,
    /// Started; its caches are filling, and nothing is synced until every built-in kind's cache is full (so that
    /// nothing is deleted for lack of news).
    Filling,
    /// Syncing both ways, its API server answering.
    Syncing,
    /// Its API server stopped answering: syncing goes on failing and retrying; patrols wait.
    Unhealthy,
    /// Its Cluster or control plane is being deleted: it is stopped and what it had in the super cluster removed.
    Removing,
}

impl Phase {
    /// Whether the tenant's objects are synced (in [`Phase::Unhealthy`], attempts fail and are retried).
    pub fn syncs(self) -> bool {
        matches!(self, Phase::Syncing | Phase::Unhealthy)
    }

    /// Whether the tenant has been started (its client and watches exist).
    pub fn started(self) -> bool {
        matches!(self, Phase::Filling | Phase::Syncing | Phase::Unhealthy)
    }
}

/// What happened to a tenant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Its control plane was seen (and it is not being deleted): ready with an endpoint, or not.
    Seen { ready: bool },
    /// Its start worked: its watches run.
    Started,
    /// Its start failed (its API server or kubeconfig is not there yet).
    StartFailed,
    /// Every built-in kind's cache is full.
    Filled,
    /// A health check's answer.
    Health(bool),
    /// Its Cluster or control plane is being deleted.
    Deleted,
    /// Neither its Cluster nor its control plane exists any more.
    Vanished,
}

/// What the syncer does for a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Start the tenant (read its kubeconfig, start its watches), then report `Started` or `StartFailed`.
    Start,
    /// Look again shortly (a failed start is retried).
    RetryLater,
    /// Queue every object of the tenant on both sides.
    SyncAll,
    /// Tell the platform team (an Event on the control plane) that the tenant's API server stopped or started
    /// answering.
    TellHealth(bool),
    /// Stop the tenant: its watches, its queue, its metrics.
    Stop,
    /// Delete every super namespace of the tenant.
    RemoveEverything,
}

/// The next phase of a tenant in `phase` (none: not known) after `event`, and what to do.
pub fn step(phase: Option<Phase>, event: Event) -> (Option<Phase>, Vec<Action>) {
    use {Action::*, Event::*, Phase::*};
    match (phase, event) {
        // Deletion wins over everything; while it lasts, removal is repeated (a sync in flight when the tenant
        // stopped may have made a namespace again).
        (Some(Removing), Deleted) => (Some(Removing), vec![RemoveEverything]),
        (Some(p), Deleted) if p.started() => (Some(Removing), vec![Stop, RemoveEverything]),
        (_, Deleted) => (Some(Removing), vec![RemoveEverything]),
        (Some(Removing), Vanished) => (None, vec![RemoveEverything]),
        (Some(p), Vanished) if p.started() => (None, vec![Stop, RemoveEverything]),
        (_, Vanished) => (None, vec![]),
        // A deleted tenant seen again is a new one of the same key only once it is gone; until then it stays.
        (Some(Removing), _) => (Some(Removing), vec![]),

        (None | Some(Waiting), Seen { ready: false }) => (Some(Waiting), vec![]),
        (None | Some(Waiting), Seen { ready: true }) => (Some(Starting), vec![Start]),
        (Some(Starting), Started) => (Some(Filling), vec![]),
        (Some(Starting), StartFailed) => (Some(Waiting), vec![RetryLater]),
        (Some(Filling), Filled) => (Some(Syncing), vec![SyncAll]),
        (Some(Syncing), Health(true)) => (Some(Syncing), vec![SyncAll]),
        (Some(Syncing), Health(false)) => (Some(Unhealthy), vec![TellHealth(false)]),
        (Some(Unhealthy), Health(true)) => (Some(Syncing), vec![TellHealth(true), SyncAll]),
        (Some(Unhealthy), Health(false)) => (Some(Unhealthy), vec![]),
        // A started tenant stays started while its control plane exists, ready or not (an upgrade, a restart).
        (Some(p), Seen { .. }) => (Some(p), vec![]),
        // Anything else is news from a start or a check that no longer applies (a tenant stopped meanwhile).
        (p, _) => (p, vec![]),
    }
}

#[cfg(test)]
mod tests {
    use super::Action::*;
    use super::Event::*;
    use super::Phase::*;
    use super::*;

    #[test]
    fn a_new_tenant_waits_for_its_control_plane_then_starts() {
        assert_eq!(step(None, Seen { ready: false }), (Some(Waiting), vec![]));
        assert_eq!(step(Some(Waiting), Seen { ready: false }), (Some(Waiting), vec![]));
        assert_eq!(step(Some(Waiting), Seen { ready: true }), (Some(Starting), vec![Start]));
        assert_eq!(step(None, Seen { ready: true }), (Some(Starting), vec![Start]));
    }

    #[test]
    fn a_start_in_progress_is_not_begun_twice() {
        assert_eq!(step(Some(Starting), Seen { ready: true }), (Some(Starting), vec![]));
    }

    #[test]
    fn a_failed_start_waits_and_is_tried_again() {
        assert_eq!(step(Some(Starting), StartFailed), (Some(Waiting), vec![RetryLater]));
        assert_eq!(step(Some(Waiting), Seen { ready: true }), (Some(Starting), vec![Start]));
    }

    #[test]
    fn a_started_tenant_syncs_once_its_caches_are_full() {
        assert_eq!(step(Some(Starting), Started), (Some(Filling), vec![]));
        assert!(!Filling.syncs());
        assert_eq!(step(Some(Filling), Filled), (Some(Syncing), vec![SyncAll]));
        assert!(Syncing.syncs());
    }

    #[test]
    fn health_checks_patrol_or_wait() {
        assert_eq!(step(Some(Syncing), Health(true)), (Some(Syncing), vec![SyncAll]));
        assert_eq!(step(Some(Syncing), Health(false)), (Some(Unhealthy), vec![TellHealth(false)]));
        assert!(Unhealthy.syncs());
        assert_eq!(step(Some(Unhealthy), Health(false)), (Some(Unhealthy), vec![]));
        assert_eq!(step(Some(Unhealthy), Health(true)), (Some(Syncing), vec![TellHealth(true), SyncAll]));
        // A check before the caches are full changes nothing.
        assert_eq!(step(Some(Filling), Health(false)), (Some(Filling), vec![]));
    }

    #[test]
    fn a_started_tenant_stays_while_its_control_plane_exists() {
        for phase in [Filling, Syncing, Unhealthy] {
            assert_eq!(step(Some(phase), Seen { ready: false }), (Some(phase), vec![]));
            assert_eq!(step(Some(phase), Seen { ready: true }), (Some(phase), vec![]));
        }
    }

    #[test]
    fn a_deleted_tenant_is_stopped_and_removed() {
        for phase in [Filling, Syncing, Unhealthy] {
            assert_eq!(step(Some(phase), Deleted), (Some(Removing), vec![Stop, RemoveEverything]));
        }
        for phase in [None, Some(Waiting), Some(Starting)] {
            assert_eq!(step(phase, Deleted), (Some(Removing), vec![RemoveEverything]));
        }
        assert_eq!(step(Some(Removing), Deleted), (Some(Removing), vec![RemoveEverything]));
        // While being deleted it is never started again.
        assert_eq!(step(Some(Removing), Seen { ready: true }), (Some(Removing), vec![]));
        assert_eq!(step(Some(Removing), Started), (Some(Removing), vec![]));
    }

    #[test]
    fn a_vanished_tenant_is_forgotten_after_a_last_removal() {
        assert_eq!(step(Some(Removing), Vanished), (None, vec![RemoveEverything]));
        assert_eq!(step(Some(Syncing), Vanished), (None, vec![Stop, RemoveEverything]));
        assert_eq!(step(Some(Waiting), Vanished), (None, vec![]));
        assert_eq!(step(None, Vanished), (None, vec![]));
    }

    #[test]
    fn late_news_of_a_stopped_tenant_changes_nothing() {
        assert_eq!(step(None, Started), (None, vec![]));
        assert_eq!(step(None, Filled), (None, vec![]));
        assert_eq!(step(None, Health(true)), (None, vec![]));
        assert_eq!(step(Some(Waiting), Filled), (Some(Waiting), vec![]));
    }
}
