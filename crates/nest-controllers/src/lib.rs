//! nest's controller-manager: the controllers kube-controller-manager runs, written on kube-runtime, talking to any
//! Kubernetes API server through a kubeconfig.
//!
//! Only one instance acts at a time: [`run`] first wins the `kube-system/nest-controller-manager` Lease
//! ([`leader`]), then runs every controller until it loses the Lease or is told to stop. The controllers, one module
//! each:
//!
//! - [`namespace`]: empties a namespace being deleted, then finalizes it;
//! - [`serviceaccount`]: the `default` ServiceAccount and the `kube-root-ca.crt` ConfigMap in every namespace;
//! - [`replicaset`]: pods for every ReplicaSet and ReplicationController;
//! - [`deployment`]: ReplicaSets for every Deployment, rolled from one template to the next;
//! - [`garbage`]: the garbage collector (owner references, foreground and orphan deletion);
//! - [`nodelifecycle`]: nodes that stop renewing their Lease become NotReady; conditions become taints;
//! - [`taint_eviction`]: pods that do not tolerate their node's `NoExecute` taints (for long) are deleted;
//! - [`job`]: pods for every Job until it completes or fails;
//! - [`endpoints`]: Endpoints and EndpointSlices for every Service with a selector;
//! - [`daemonset`]: one pod per eligible node for every DaemonSet;
//! - [`statefulset`]: pods with stable names and their own volume claims for every StatefulSet;
//! - [`podgc`]: removes pods whose node is gone;
//! - [`protection`]: lets a claim or volume being deleted go once nothing uses it (pvc- and pv-protection);
//! - [`certificates`]: signs approved CertificateSigningRequests for the standard signers, when given the CA.

use std::future::Future;

use kube::Client;

pub mod certificates;
pub mod daemonset;
pub mod deployment;
pub mod endpoints;
pub mod garbage;
pub mod job;
pub mod leader;
pub mod namespace;
pub mod nodelifecycle;
pub mod podgc;
pub mod protection;
pub mod replicaset;
pub mod serviceaccount;
pub mod statefulset;
pub mod taint_eviction;
pub mod volumes;

/// The reference a controller puts on what it creates: it is the controller, and a foreground deletion of it waits
/// for the object.
/// A pod of `owner` from its pod template, as every workload controller makes one: named `<owner>-<random>`, the
/// template's labels with `labels` added, its annotations, `spec` (the template's, or one made from it), and the
/// owner as its controller.
pub(crate) fn pod_from_template<K: kube::Resource<DynamicType = ()>>(
    owner: &K,
    template: &k8s_openapi::api::core::v1::PodTemplateSpec,
    labels: &[(&str, &str)],
    spec: Option<k8s_openapi::api::core::v1::PodSpec>,
) -> k8s_openapi::api::core::v1::Pod {
    use kube::ResourceExt as _;
    let mut all = template.metadata.as_ref().and_then(|m| m.labels.clone()).unwrap_or_default();
    for (key, value) in labels {
        all.insert(key.to_string(), value.to_string());
    }
    k8s_openapi::api::core::v1::Pod {
        metadata: kube::api::ObjectMeta {
            generate_name: Some(format!("{}-", owner.name_any())),
            namespace: owner.namespace(),
            labels: Some(all),
            annotations: template.metadata.as_ref().and_then(|m| m.annotations.clone()),
            owner_references: Some(vec![controller_reference(owner)]),
            ..Default::default()
        },
        spec: spec.or_else(|| template.spec.clone()),
        status: None,
    }
}

pub(crate) fn controller_reference<K: kube::Resource<DynamicType = ()>>(
    owner: &K,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
    let reference = owner.controller_owner_ref(&()).unwrap_or_default();
    k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference { block_owner_deletion: Some(true), ..reference }
}

/// What every reconcile gets: the client, and the controller's event recorder.
pub(crate) struct Context {
    pub client: Client,
    pub events: nest_client::events::Recorder,
}

/// Runs `reconcile` for every object of kind `K`, and again whenever an object of kind `Child` that it controls
/// changes, until the watches end. A failed reconcile is logged and retried a second later. `controller` is the
/// component its Events come from (`replicaset-controller`).
pub(crate) async fn run_owning<K, Child, F, Fut>(client: Client, reconcile: F, controller: &'static str)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    Child: kube::Resource<DynamicType = ()>
        + Clone
        + k8s_openapi::serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    F: FnMut(std::sync::Arc<K>, std::sync::Arc<Context>) -> Fut,
    Fut: std::future::Future<Output = Result<kube::runtime::controller::Action, kube::Error>> + Send + 'static,
{
    use kube::runtime::{controller::Action, watcher};
    let error_policy = move |_: std::sync::Arc<K>, error: &kube::Error, _: std::sync::Arc<Context>| {
        tracing::debug!(%error, controller, "reconcile failed; retrying");
        Action::requeue(std::time::Duration::from_secs(1))
    };
    let results = kube::runtime::Controller::new(kube::Api::<K>::all(client.clone()), watcher::Config::default())
        .owns(kube::Api::<Child>::all(client.clone()), watcher::Config::default())
        .run(
            reconcile,
            error_policy,
            std::sync::Arc::new(Context {
                events: nest_client::events::Recorder::new(client.clone(), controller, None),
                client,
            }),
        );
    drive(results, controller).await;
}

/// Runs a kube-runtime controller's stream until its watches end, logging failed reconciles (they are retried as the
/// controller's error policy says).
pub(crate) async fn drive<T, E: std::fmt::Display>(
    results: impl futures_util::Stream<Item = Result<T, E>>,
    controller: &'static str,
) {
    use futures_util::StreamExt;
    results
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, controller, "reconcile failed");
            }
        })
        .await;
}

/// The Lease the controller-manager's instances compete for.
pub const LEASE: (&str, &str) = ("kube-system", "nest-controller-manager");

/// How one controller-manager instance runs.
pub struct Options {
    /// Its name in the leader Lease; unique per instance.
    pub identity: String,
    /// The cluster CA (PEM) to publish in every namespace.
    pub ca_pem: String,
    /// How long the Lease stays held without renewal (kube-controller-manager: 15 s); it is renewed five times as
    /// often.
    pub lease_duration: std::time::Duration,
    /// Called once this instance leads.
    pub on_leading: Box<dyn FnOnce() + Send>,
    /// How long a node may go without renewing its Lease before it is NotReady (`--node-monitor-grace-period`).
    pub node_grace: std::time::Duration,
    /// Provision a local volume for every claim with no storage class ([`volumes`]): on for a cluster whose nodes
    /// keep claims in their own directories (`nest up`), off for a tenant's, whose claims the syncer binds.
    pub local_volumes: bool,
    /// The CA CertificateSigningRequests are signed with (`--cluster-signing-cert-file`/`-key-file`); without it
    /// nothing signs them, as kube-controller-manager skips its signer.
    pub signing: Option<certificates::Signing>,
}

/// Runs the controller-manager: waits to lead, then runs every controller. Returns `Ok` when `shutdown` completes,
/// and an error if leadership is lost (the process should exit, as kube-controller-manager does, so that it never
/// acts without the Lease).
pub async fn run(client: Client, options: Options, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
    tokio::pin!(shutdown);
    let Options { identity, ca_pem, lease_duration, on_leading, node_grace, local_volumes, signing } = options;
    let mut election = leader::Election::new(client.clone(), LEASE.0, LEASE.1, identity.clone());
    election.lease_duration = lease_duration;
    election.renew_every = (lease_duration / 5).max(std::time::Duration::from_millis(200));
    tokio::select! {
        () = election.acquire() => {}
        () = &mut shutdown => return Ok(()),
    }
    tracing::info!(%identity, "leading: starting the controllers");
    on_leading();
    // Each controller in a task of its own, started again if it panics: one controller's bug (or one object that
    // trips it) stops only that controller, and only for the back-off.
    use nest_client::supervise::restarting;
    let with = |client: &Client| {
        let client = client.clone();
        move || client.clone()
    };
    let controllers = async {
        tokio::join!(
            restarting("namespace", {
                let c = with(&client);
                move || namespace::run(c())
            }),
            restarting("serviceaccount", {
                let (c, ca_pem) = (with(&client), ca_pem.clone());
                move || serviceaccount::run(c(), ca_pem.clone())
            }),
            restarting("replicaset", {
                let c = with(&client);
                move || replicaset::run(c())
            }),
            restarting("replicationcontroller", {
                let c = with(&client);
                move || replicaset::run_replication(c())
            }),
            restarting("deployment", {
                let c = with(&client);
                move || deployment::run(c())
            }),
            restarting("garbagecollector", {
                let c = with(&client);
                move || garbage::run(c())
            }),
            restarting("nodelifecycle", {
                let c = with(&client);
                move || nodelifecycle::run(c(), node_grace)
            }),
            restarting("taint-eviction", {
                let c = with(&client);
                move || taint_eviction::run(c())
            }),
            restarting("job", {
                let c = with(&client);
                move || job::run(c())
            }),
            restarting("endpoints", {
                let c = with(&client);
                move || endpoints::run(c())
            }),
            restarting("daemonset", {
                let c = with(&client);
                move || daemonset::run(c())
            }),
            restarting("statefulset", {
                let c = with(&client);
                move || statefulset::run(c())
            }),
            restarting("podgc", {
                let c = with(&client);
                move || podgc::run(c())
            }),
            restarting("persistentvolume-binder", {
                let c = with(&client);
                move || volumes::run(c(), local_volumes)
            }),
            restarting("protection", {
                let c = with(&client);
                move || protection::run(c())
            }),
            async {
                if let Some(signing) = signing {
                    let c = with(&client);
                    restarting("csrsigning", move || certificates::run(c(), signing.clone())).await;
                }
            },
        );
    };
    tokio::select! {
        () = controllers => anyhow::bail!("the controllers stopped"),
        () = election.hold() => anyhow::bail!("lost the leader lease {}/{}", LEASE.0, LEASE.1),
        () = &mut shutdown => Ok(()),
    }
}
