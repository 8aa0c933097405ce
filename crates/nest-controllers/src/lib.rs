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
//!
//! They read what they manage from one cache per kind for the whole instance (`informers`, as client-go's shared
//! informers), never by listing over HTTP on a reconcile (but for the namespace controller's discovery-driven
//! sweep); `reconciling` runs a controller on those caches and `expectations` keeps it from acting twice on what
//! its cache does not show yet.

use std::future::Future;

use kube::Client;

pub mod certificates;
pub mod daemonset;
pub mod deployment;
pub mod endpoints;
pub(crate) mod expectations;
pub mod garbage;
pub(crate) mod informers;
pub mod job;
pub mod leader;
pub mod namespace;
pub mod nodelifecycle;
pub mod podgc;
pub(crate) mod pods;
pub mod protection;
pub(crate) mod reconciling;
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

/// What every reconcile of a controller owning children of kind `C` gets: the client, the controller's event
/// recorder, every shared cache, and the controller's expectations of its children.
pub(crate) struct Context<C: informers::Kind = k8s_openapi::api::core::v1::Pod> {
    pub client: Client,
    pub events: nest_client::events::Recorder,
    pub caches: informers::Informers,
    pub expectations: expectations::Expectations<C>,
}

/// Runs `reconcile` for every object of kind `K` in `primary`, and again whenever an object of kind `Child` in
/// `children` that it owns changes, until the process stops; nothing is reconciled before those caches and the ones
/// in `reads` have listed once. A failed reconcile is logged and retried a second later. `controller` is the component
/// its Events come from (`replicaset-controller`).
pub(crate) async fn run_owning<K, Child, F, Fut>(
    client: Client,
    caches: &informers::Informers,
    (primary, children): (&informers::Informer<K>, &informers::Informer<Child>),
    reads: Vec<futures_util::future::BoxFuture<'static, ()>>,
    reconcile: F,
    controller: &'static str,
) where
    K: informers::Kind,
    Child: informers::Kind,
    F: FnMut(std::sync::Arc<K>, std::sync::Arc<Context<Child>>) -> Fut,
    Fut: std::future::Future<Output = Result<kube::runtime::controller::Action, kube::Error>> + Send + 'static,
{
    use kube::runtime::controller::Action;
    let error_policy = move |_: std::sync::Arc<K>, error: &kube::Error, _: std::sync::Arc<Context<Child>>| {
        tracing::debug!(%error, controller, "reconcile failed; retrying");
        Action::requeue(std::time::Duration::from_secs(1))
    };
    let expectations = caches.expectations(controller, children);
    let mut reconciling = reconciling::Reconciling::new(primary).owns(children, &expectations);
    for synced in reads {
        reconciling = reconciling.after(synced);
    }
    let context = Context {
        events: nest_client::events::Recorder::new(client.clone(), controller, None),
        client,
        caches: caches.clone(),
        expectations,
    };
    drive(reconciling.run(reconcile, error_policy, std::sync::Arc::new(context)), controller).await;
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
    // One cache per kind, shared by every controller ([`informers`]); each watch and each controller in a task of
    // its own, started again if it panics: one controller's bug (or one object that trips it) stops only that
    // controller, and only for the back-off.
    let caches = informers::Informers::new(&client);
    let mut parts = caches.feeds();
    parts.extend(controllers(&client, &caches, ca_pem, node_grace, local_volumes, signing));
    let controllers = futures_util::future::join_all(
        parts.into_iter().map(|(name, start)| nest_client::supervise::restarting(name, start)),
    );
    tokio::select! {
        _ = controllers => anyhow::bail!("the controllers stopped"),
        () = election.hold() => anyhow::bail!("lost the leader lease {}/{}", LEASE.0, LEASE.1),
        () = &mut shutdown => Ok(()),
    }
}

/// Every controller, named, with how to start it (again, after a panic).
fn controllers(
    client: &Client,
    caches: &informers::Informers,
    ca_pem: String,
    node_grace: std::time::Duration,
    local_volumes: bool,
    signing: Option<certificates::Signing>,
) -> Vec<informers::Part> {
    /// A part running `run` with a client and the caches.
    fn part<Fut: Future<Output = ()> + Send + 'static>(
        name: &'static str,
        client: &Client,
        caches: &informers::Informers,
        run: impl Fn(Client, informers::Informers) -> Fut + Send + 'static,
    ) -> informers::Part {
        let (client, caches) = (client.clone(), caches.clone());
        (name, Box::new(move || Box::pin(run(client.clone(), caches.clone()))))
    }
    let mut parts = vec![
        part("namespace", client, caches, namespace::run),
        part("serviceaccount", client, caches, move |c, i| serviceaccount::run(c, i, ca_pem.clone())),
        part("replicaset", client, caches, replicaset::run),
        part("replicationcontroller", client, caches, replicaset::run_replication),
        part("deployment", client, caches, deployment::run),
        part("garbagecollector", client, caches, |c, _| garbage::run(c)),
        part("nodelifecycle", client, caches, move |c, i| nodelifecycle::run(c, i, node_grace)),
        part("taint-eviction", client, caches, taint_eviction::run),
        part("job", client, caches, job::run),
        part("endpoints", client, caches, endpoints::run),
        part("daemonset", client, caches, daemonset::run),
        part("statefulset", client, caches, statefulset::run),
        part("podgc", client, caches, podgc::run),
        part("persistentvolume-binder", client, caches, move |c, i| volumes::run(c, i, local_volumes)),
        part("protection", client, caches, protection::run),
    ];
    if let Some(signing) = signing {
        parts.push(part("csrsigning", client, caches, move |c, _| certificates::run(c, signing.clone())));
    }
    parts
}
