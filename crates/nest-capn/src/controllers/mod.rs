//! The provider's controllers, on kube-runtime, talking to the management cluster through any client. One file per
//! controller:
//!
//! - `control_plane.rs` — **NestedControlPlane**: the PKI Secrets with Cluster API's names (`<cluster>-ca`, `-etcd`,
//!   `-proxy`, `-sa`, and the client certificates issued from them), the components (a NestedEtcd when the control
//!   plane has one, a NestedAPIServer and a NestedControllerManager, named after it unless it names its own), the
//!   admin kubeconfig `<cluster>-kubeconfig` and the controller-manager's own, the endpoint; upgrades in Kubernetes'
//!   order; `initialized` once the tenant API server has answered, `ready` while every component is.
//! - `components.rs` — **NestedEtcd**, **NestedAPIServer**, **NestedControllerManager**: render their package
//!   ([`crate::render`]), apply it, put back what was changed by hand, and report phase, health, version, replicas
//!   and addresses.
//! - `cluster.rs` — **Cluster** (the part of Cluster API's core nest needs, where the core is not installed): adopts
//!   its control plane and infrastructure, copies the endpoint, reports its phase (`Pending`, `Provisioning`,
//!   `Provisioned`, `Deleting`) and conditions, and on deletion removes the control plane, then the infrastructure.
//!   **NestedCluster**: takes the control plane's endpoint and is ready when the control plane is.
//!
//! Each reconcile is idempotent and looks again every few seconds, since health is not an event. Each honours
//! `cluster.x-k8s.io/paused` (and a Cluster's `spec.paused`) with a `Paused` condition.

mod cluster;
mod components;
mod control_plane;

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use kube::api::{Api, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};

use crate::api::{
    CLUSTER_NAME_LABEL, Cluster, NestedAPIServer, NestedCluster, NestedControlPlane, NestedControllerManager,
    NestedEtcd, PAUSED_ANNOTATION,
};
use crate::package::Packages;
use crate::render::{self, Names};

pub use cluster::{CLUSTER_FINALIZER, NESTED_CLUSTER_FINALIZER};

/// Why a reconcile failed; it is retried.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error(transparent)]
    Pki(#[from] nest_pki::Error),
    #[error("rendering: {0}")]
    Render(#[from] serde_json::Error),
}

type Result<T, E = Error> = std::result::Result<T, E>;

/// How often an object is looked at again while it is not yet what it should be (a component not Ready, a cluster
/// not Provisioned).
const LOOK_AGAIN: Duration = Duration::from_secs(3);
/// How often it is looked at again once it is: what changes a controller's objects reaches it through its watches
/// (a component's StatefulSet follows its pods' readiness probes, a Cluster its control plane), so this only catches
/// what no watch shows, such as an API server that stops answering through its Service.
const LOOK_AGAIN_WHEN_WELL: Duration = Duration::from_secs(30);

/// When to look again at an object that is `well` (or not yet).
fn look_again(well: bool) -> Action {
    Action::requeue(if well { LOOK_AGAIN_WHEN_WELL } else { LOOK_AGAIN })
}
/// The type Cluster API gives the Secrets it reads.
const SECRET_TYPE: &str = "cluster.x-k8s.io/secret";

struct Context {
    client: Client,
    packages: Packages,
    tenants: TenantClients,
}

/// Clients for tenant API servers and etcds, made once per address and credential and then reused: the health
/// checks run every few seconds for every component, and a new client each time is a new connection and a new
/// TLS handshake each time.
#[derive(Default)]
struct TenantClients(std::sync::Mutex<std::collections::HashMap<String, Client>>);

impl TenantClients {
    /// Certificates are issued again over time; past this many clients the old ones are dropped.
    const MOST: usize = 256;

    /// A client for the server at `server` trusting `ca`, as `user` or anonymous; the same one as last time.
    async fn get(&self, server: &str, ca: &str, user: Option<&nest_pki::Pair>) -> Option<Client> {
        let key = format!("{server}\n{ca}\n{}", user.map_or("", |u| u.cert.as_str()));
        if let Some(client) = self.lock().get(&key) {
            return Some(client.clone());
        }
        let client = tenant_client(server, ca, user).await?;
        let mut clients = self.lock();
        if clients.len() >= Self::MOST {
            clients.clear();
        }
        clients.insert(key, client.clone());
        Some(client)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Client>> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Which controllers run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Set {
    /// NestedControlPlane and its components.
    pub control_plane: bool,
    /// NestedCluster.
    pub infrastructure: bool,
    /// Cluster: only where the Cluster API core does not run.
    pub core: bool,
}

impl Set {
    pub const ALL: Set = Set { control_plane: true, infrastructure: true, core: true };
}

/// Runs the controllers of `set` until the watches end, rendering components from `packages`.
pub async fn run(client: Client, packages: Packages, set: Set) {
    let context = Arc::new(Context { client: client.clone(), packages, tenants: TenantClients::default() });
    let all = watcher::Config::default;
    let mut running: Vec<futures_util::future::BoxFuture<'static, ()>> = Vec::new();
    // Each controller in a task of its own, started again if it panics: a bug one tenant's objects trip stops that
    // controller for the back-off, never every tenant's control plane management.
    let mut add = |name: &'static str, start: Box<dyn Fn() -> futures_util::future::BoxFuture<'static, ()> + Send>| {
        running.push(Box::pin(nest_client::supervise::restarting(name, start)));
    };
    if set.control_plane {
        let (c, x) = (client.clone(), context.clone());
        add(
            "nestedcontrolplane",
            Box::new(move || {
                let control_planes = Controller::new(Api::<NestedControlPlane>::all(c.clone()), all())
                    .owns(Api::<NestedEtcd>::all(c.clone()), all())
                    .owns(Api::<NestedAPIServer>::all(c.clone()), all())
                    .owns(Api::<NestedControllerManager>::all(c.clone()), all())
                    .run(control_plane::reconcile, policy, x.clone());
                Box::pin(drain(control_planes))
            }),
        );
    }
    if set.control_plane {
        let (c, x) = (client.clone(), context.clone());
        add(
            "nestedetcd",
            Box::new(move || {
                let etcds = Controller::new(Api::<NestedEtcd>::all(c.clone()), all())
                    .owns(Api::<StatefulSet>::all(c.clone()), all())
                    .run(components::reconcile::<NestedEtcd>, policy, x.clone());
                Box::pin(drain(etcds))
            }),
        );
        let (c, x) = (client.clone(), context.clone());
        add(
            "nestedapiserver",
            Box::new(move || {
                let api_servers = Controller::new(Api::<NestedAPIServer>::all(c.clone()), all())
                    .owns(Api::<StatefulSet>::all(c.clone()), all())
                    .run(components::reconcile::<NestedAPIServer>, policy, x.clone());
                Box::pin(drain(api_servers))
            }),
        );
        let (c, x) = (client.clone(), context.clone());
        add(
            "nestedcontrollermanager",
            Box::new(move || {
                let controller_managers = Controller::new(Api::<NestedControllerManager>::all(c.clone()), all())
                    .owns(Api::<StatefulSet>::all(c.clone()), all())
                    .run(components::reconcile::<NestedControllerManager>, policy, x.clone());
                Box::pin(drain(controller_managers))
            }),
        );
    }
    // A Cluster and a NestedCluster follow their control plane and infrastructure at once: each change of one of
    // those reconciles the objects of its cluster (by the cluster-name label).
    if set.core {
        let (c, x) = (client.clone(), context.clone());
        add(
            "cluster",
            Box::new(move || {
                let clusters = Controller::new(Api::<Cluster>::all(c.clone()), all())
                    .watches(Api::<NestedControlPlane>::all(c.clone()), all(), same_cluster)
                    .watches(Api::<NestedCluster>::all(c.clone()), all(), same_cluster)
                    .run(cluster::reconcile_cluster, policy, x.clone());
                Box::pin(drain(clusters))
            }),
        );
    }
    if set.infrastructure {
        let (c, x) = (client.clone(), context.clone());
        add(
            "nestedcluster",
            Box::new(move || {
                let infrastructures = Controller::new(Api::<NestedCluster>::all(c.clone()), all())
                    .watches(Api::<NestedControlPlane>::all(c.clone()), all(), same_cluster)
                    .run(cluster::reconcile_nested_cluster, policy, x.clone());
                Box::pin(drain(infrastructures))
            }),
        );
    }
    futures_util::future::join_all(running).await;
}

/// The object of kind `K` named after `object`'s cluster, in its namespace.
fn same_cluster<K, O>(object: O) -> Option<kube::runtime::reflector::ObjectRef<K>>
where
    K: Resource<DynamicType = ()>,
    O: Resource,
{
    let meta = object.meta();
    let cluster = meta.labels.as_ref()?.get(CLUSTER_NAME_LABEL)?;
    Some(kube::runtime::reflector::ObjectRef::new(cluster).within(meta.namespace.as_deref()?))
}

fn policy<K>(_: Arc<K>, error: &Error, _: Arc<Context>) -> Action {
    tracing::debug!(%error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(2))
}

async fn drain<T>(results: impl futures_util::Stream<Item = T>) {
    results.for_each(|_| async {}).await;
}

fn now() -> Time {
    Time(jiff::Timestamp::now())
}

fn condition(kind: &str, ok: bool, reason: &str, message: impl Into<String>, generation: Option<i64>) -> Condition {
    Condition {
        type_: kind.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: now(),
        observed_generation: generation,
    }
}

/// Patches `object`'s status with `patch` (`{"status": …}`, a merge patch) unless the status already says all of
/// it: a reconcile that finds nothing new costs no request, and wakes no watcher.
async fn set_status<K>(api: &Api<K>, object: &K, patch: &serde_json::Value) -> Result<()>
where
    K: Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let current = serde_json::to_value(object).unwrap_or_default();
    if nest_core::json::covers(&current["status"], &patch["status"]) {
        return Ok(());
    }
    let name = object.meta().name.clone().unwrap_or_default();
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(patch)).await?;
    Ok(())
}

/// Keeps a condition's transition time when its status did not change.
fn keep_transitions(old: Option<&Vec<Condition>>, mut new: Vec<Condition>) -> Vec<Condition> {
    for condition in &mut new {
        if let Some(before) = old.into_iter().flatten().find(|c| c.type_ == condition.type_)
            && before.status == condition.status
        {
            condition.last_transition_time = before.last_transition_time.clone();
        }
    }
    new
}

fn paused<K: Resource>(object: &K) -> bool {
    object.meta().annotations.as_ref().is_some_and(|a| a.contains_key(PAUSED_ANNOTATION))
}

/// Whether the Cluster pauses everything of it (`spec.paused` or the annotation), as Cluster API providers honour.
fn cluster_paused(cluster: Option<&Cluster>) -> bool {
    cluster.is_some_and(|c| c.spec.paused == Some(true) || paused(c))
}

/// The names of `object`'s cluster: its `cluster.x-k8s.io/cluster-name` label, else its own name.
fn names_of<K: Resource>(object: &K) -> Names {
    let meta = object.meta();
    let cluster = meta.labels.as_ref().and_then(|l| l.get(CLUSTER_NAME_LABEL)).cloned();
    Names {
        cluster: cluster.unwrap_or_else(|| meta.name.clone().unwrap_or_default()),
        namespace: meta.namespace.clone().unwrap_or_default(),
    }
}

fn owner<K: Resource<DynamicType = ()>>(object: &K) -> OwnerReference {
    OwnerReference { block_owner_deletion: Some(true), ..object.controller_owner_ref(&()).unwrap_or_default() }
}

fn secret_data(secret: &Secret, key: &str) -> Option<String> {
    secret.data.as_ref()?.get(key).map(|b| String::from_utf8_lossy(&b.0).into_owned())
}

/// A Secret of the cluster, as Cluster API names and labels them.
fn cluster_secret(names: &Names, name: String, owner: OwnerReference, data: &[(&str, &str)]) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(names.namespace.clone()),
            labels: Some([(CLUSTER_NAME_LABEL.to_string(), names.cluster.clone())].into()),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        type_: Some(SECRET_TYPE.into()),
        data: Some(data.iter().map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec()))).collect()),
        ..Default::default()
    }
}

/// Creates `object` unless it exists; returns what is stored.
async fn ensure<K>(api: &Api<K>, object: K) -> Result<K>
where
    K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = object.meta().name.clone().unwrap_or_default();
    if let Some(existing) = api.get_opt(&name).await? {
        return Ok(existing);
    }
    match api.create(&PostParams::default(), &object).await {
        Ok(created) => Ok(created),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(api.get(&name).await?),
        Err(error) => Err(error.into()),
    }
}

/// Creates the rendered `wanted` object (any kind), or puts back the fields it sets that were changed (drift): its
/// labels, annotations and everything outside `metadata` and `status`. Returns what is stored.
async fn apply_rendered(client: &Client, mut wanted: Value, owner: OwnerReference) -> Result<Value> {
    wanted["metadata"]["ownerReferences"] = json!([owner]);
    let name = wanted["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let namespace = wanted["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
    let (group, version) = match wanted["apiVersion"].as_str().unwrap_or_default().split_once('/') {
        Some((group, version)) => (group.to_string(), version.to_string()),
        None => (String::new(), wanted["apiVersion"].as_str().unwrap_or_default().to_string()),
    };
    let kind = wanted["kind"].as_str().unwrap_or_default().to_string();
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(&group, &version, &kind));
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &resource);
    let live = match api.get_opt(&name).await? {
        Some(live) => serde_json::to_value(live)?,
        None => {
            let object: DynamicObject = serde_json::from_value(wanted)?;
            return Ok(serde_json::to_value(api.create(&PostParams::default(), &object).await?)?);
        }
    };
    let mut patch = serde_json::Map::new();
    for (key, value) in wanted.as_object().into_iter().flatten() {
        if ["apiVersion", "kind", "metadata", "status"].contains(&key.as_str()) {
            continue;
        }
        if !render::covers(&live[key], value) {
            patch.insert(key.clone(), value.clone());
        }
    }
    for field in ["labels", "annotations"] {
        if !wanted["metadata"][field].is_null() && !render::covers(&live["metadata"][field], &wanted["metadata"][field])
        {
            patch.insert("metadata".into(), json!({field: wanted["metadata"][field]}));
        }
    }
    if patch.is_empty() {
        return Ok(live);
    }
    tracing::info!(%namespace, %name, %kind, "putting back what was changed");
    Ok(serde_json::to_value(api.patch(&name, &PatchParams::default(), &Patch::Merge(&Value::Object(patch))).await?)?)
}

/// Marks `object` paused in its status conditions, keeping the others.
async fn report_paused<K>(api: &Api<K>, object: &K, conditions: Option<&Vec<Condition>>) -> Result<()>
where
    K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let mut kept: Vec<Condition> = conditions.into_iter().flatten().filter(|c| c.type_ != "Paused").cloned().collect();
    kept.push(condition("Paused", true, "Paused", "reconciliation is paused", object.meta().generation));
    let status = json!({"status": {"conditions": keep_transitions(conditions, kept)}});
    set_status(api, object, &status).await?;
    Ok(())
}

/// The CA in Secret `name` (keys `tls.crt` and `tls.key`), made and stored when missing.
async fn ensure_ca(secrets: &Api<Secret>, names: &Names, name: String, owner: OwnerReference) -> Result<nest_pki::Ca> {
    if let Some(secret) = secrets.get_opt(&name).await? {
        return Ok(nest_pki::Ca(nest_pki::Pair {
            cert: secret_data(&secret, "tls.crt").unwrap_or_default(),
            key: secret_data(&secret, "tls.key").unwrap_or_default(),
        }));
    }
    let ca = nest_pki::Ca::generate(&name)?;
    let data = [("tls.crt", ca.0.cert.as_str()), ("tls.key", ca.0.key.as_str())];
    let stored = ensure(secrets, cluster_secret(names, name, owner, &data)).await?;
    // Another reconcile may have stored its CA first: that one is the CA.
    Ok(nest_pki::Ca(nest_pki::Pair {
        cert: secret_data(&stored, "tls.crt").unwrap_or_default(),
        key: secret_data(&stored, "tls.key").unwrap_or_default(),
    }))
}

/// The annotation recording the names a certificate Secret was issued for.
const NAMES_ANNOTATION: &str = "nest.dev/certificate-names";

/// A certificate Secret `name` (keys `tls.crt`, `tls.key` and the CA's `ca.crt`) issued by `ca` for `leaf`: created
/// when missing, issued again when its names changed or a third of its life is left.
async fn ensure_leaf(
    secrets: &Api<Secret>,
    names: &Names,
    name: String,
    ca: &nest_pki::Ca,
    leaf: &nest_pki::Leaf<'_>,
    owner: OwnerReference,
) -> Result<nest_pki::Pair> {
    let wanted_names = leaf.names.join(",");
    let existing = secrets.get_opt(&name).await?;
    if let Some(secret) = &existing {
        let cert = secret_data(secret, "tls.crt").unwrap_or_default();
        let left =
            nest_pki::not_after(&cert).ok().and_then(|end| end.duration_since(std::time::SystemTime::now()).ok());
        let same_names = secret.annotations().get(NAMES_ANNOTATION) == Some(&wanted_names);
        let same_ca = secret_data(secret, "ca.crt").as_deref() == Some(ca.0.cert.as_str());
        if same_names && same_ca && left.is_some_and(|left| left > leaf.validity / 3) {
            return Ok(nest_pki::Pair { cert, key: secret_data(secret, "tls.key").unwrap_or_default() });
        }
    }
    let pair = ca.issue(leaf)?;
    let data = [("tls.crt", pair.cert.as_str()), ("tls.key", pair.key.as_str()), ("ca.crt", ca.0.cert.as_str())];
    let mut secret = cluster_secret(names, name.clone(), owner, &data);
    secret.metadata.annotations = Some([(NAMES_ANNOTATION.to_string(), wanted_names)].into());
    match existing {
        Some(_) => {
            secrets.replace(&name, &PostParams::default(), &secret).await?;
        }
        None => {
            ensure(secrets, secret).await?;
        }
    }
    Ok(pair)
}

/// The ClusterIPs of the Services of `names`' cluster: name → address.
async fn cluster_ips(client: &Client, names: &Names) -> Result<std::collections::BTreeMap<String, String>> {
    let services: Api<Service> = Api::namespaced(client.clone(), &names.namespace);
    let selector = format!("{CLUSTER_NAME_LABEL}={}", names.cluster);
    let list = services.list(&kube::api::ListParams::default().labels(&selector)).await?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|s| {
            let ip = s.spec.as_ref()?.cluster_ip.clone().filter(|ip| !ip.is_empty() && ip != "None")?;
            Some((s.name_any(), ip))
        })
        .collect())
}

/// A client for the tenant API server at `server` trusting `ca`, as `user` (a client certificate) or anonymous.
async fn tenant_client(server: &str, ca: &str, user: Option<&nest_pki::Pair>) -> Option<Client> {
    let mut config = match user {
        Some(pair) => {
            let text = nest_pki::kubeconfig(server, ca, pair, "admin");
            let file = kube::config::Kubeconfig::from_yaml(&text).ok()?;
            kube::Config::from_custom_kubeconfig(file, &Default::default()).await.ok()?
        }
        None => {
            let mut config = kube::Config::new(server.parse().ok()?);
            config.root_cert = Some(vec![nest_pki::der(ca).ok()?]);
            config
        }
    };
    // No read timeout: the client's connection is kept for the next check, and a read timeout on the connection
    // closes it whenever it sits idle that long (so every check would open a new one). Each check is bounded by
    // [`within`] instead.
    config.connect_timeout = Some(CHECK_TIMEOUT);
    Client::try_from(config).ok()
}

/// How long a health check of a tenant component may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// The answer of `request` to a tenant component, or `None` when it has none within [`CHECK_TIMEOUT`].
async fn within<T, E>(request: impl std::future::Future<Output = std::result::Result<T, E>>) -> Option<T> {
    tokio::time::timeout(CHECK_TIMEOUT, request).await.ok()?.ok()
}

/// Whether the API server at `server` answers `/readyz`.
async fn answers(tenants: &TenantClients, server: &str, ca: &str) -> bool {
    let Some(client) = tenants.get(server, ca, None).await else { return false };
    let request = http::Request::get("/readyz").body(Vec::new()).expect("a request");
    within(client.request_text(request)).await.is_some_and(|body| body.trim() == "ok")
}
