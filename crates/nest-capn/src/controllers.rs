//! The provider's controllers, on kube-runtime, talking to the management cluster through any client:
//!
//! - **NestedControlPlane**: the cluster CA (`<cluster>-ca`), the components (a NestedAPIServer and a
//!   NestedControllerManager named after it, unless it names its own), the admin kubeconfig `<cluster>-kubeconfig`
//!   and the controller-manager's own, the endpoint; `initialized` once the tenant API server has answered, `ready`
//!   while every component is.
//! - **NestedAPIServer** and **NestedControllerManager**: render their Service and StatefulSet ([`crate::render`]),
//!   create them, put back what was changed by hand, and report phase, health, replicas and addresses.
//! - **Cluster** (the part of Cluster API's core nest needs, where the core is not installed): adopts its control
//!   plane and infrastructure, copies the endpoint, reports its phase (`Pending`, `Provisioning`, `Provisioned`,
//!   `Deleting`) and conditions, and on deletion removes the control plane, then the infrastructure.
//! - **NestedCluster**: takes the control plane's endpoint and is ready when the control plane is.
//!
//! Each reconcile is idempotent and looks again every few seconds, since health is not an event.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ObjectReference, Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};

use crate::api::{
    ApiEndpoint, CLUSTER_NAME_LABEL, Cluster, NestedAPIServer, NestedAPIServerSpec, NestedCluster, NestedComponentSpec,
    NestedComponentStatus, NestedControlPlane, NestedControllerManager, NestedControllerManagerSpec, PAUSED_ANNOTATION,
};
use crate::render::{self, API_SERVER_PORT, Names};

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

/// How often health is looked at.
const LOOK_AGAIN: Duration = Duration::from_secs(3);
/// The type Cluster API gives the Secrets it reads.
const SECRET_TYPE: &str = "cluster.x-k8s.io/secret";

struct Context {
    client: Client,
}

/// Runs every controller of the provider until the watches end.
pub async fn run(client: Client) {
    let context = Arc::new(Context { client: client.clone() });
    let all = watcher::Config::default();
    let control_planes = Controller::new(Api::<NestedControlPlane>::all(client.clone()), all.clone())
        .owns(Api::<NestedAPIServer>::all(client.clone()), all.clone())
        .owns(Api::<NestedControllerManager>::all(client.clone()), all.clone())
        .run(reconcile_control_plane, policy, context.clone());
    let api_servers = Controller::new(Api::<NestedAPIServer>::all(client.clone()), all.clone())
        .owns(Api::<StatefulSet>::all(client.clone()), all.clone())
        .run(reconcile_api_server, policy, context.clone());
    let controller_managers = Controller::new(Api::<NestedControllerManager>::all(client.clone()), all.clone())
        .owns(Api::<StatefulSet>::all(client.clone()), all.clone())
        .run(reconcile_controller_manager, policy, context.clone());
    // A Cluster and a NestedCluster follow their control plane and infrastructure at once: each change of one of
    // those reconciles the objects of its cluster (by the cluster-name label).
    let clusters = Controller::new(Api::<Cluster>::all(client.clone()), all.clone())
        .watches(Api::<NestedControlPlane>::all(client.clone()), all.clone(), same_cluster)
        .watches(Api::<NestedCluster>::all(client.clone()), all.clone(), same_cluster)
        .run(reconcile_cluster, policy, context.clone());
    let infrastructures = Controller::new(Api::<NestedCluster>::all(client.clone()), all.clone())
        .watches(Api::<NestedControlPlane>::all(client.clone()), all, same_cluster)
        .run(reconcile_nested_cluster, policy, context);
    tokio::join!(
        drain(control_planes),
        drain(api_servers),
        drain(controller_managers),
        drain(clusters),
        drain(infrastructures)
    );
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

/// Creates the rendered `wanted` object, or puts back the fields it sets that were changed (drift).
async fn apply_rendered<K>(api: &Api<K>, mut wanted: Value, owner: OwnerReference) -> Result<K>
where
    K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    wanted["metadata"]["ownerReferences"] = json!([owner]);
    let name = wanted["metadata"]["name"].as_str().unwrap_or_default().to_string();
    match api.get_opt(&name).await? {
        None => Ok(api.create(&PostParams::default(), &serde_json::from_value(wanted)?).await?),
        Some(live) => {
            let live_json = serde_json::to_value(&live)?;
            if render::covers(&live_json["spec"], &wanted["spec"]) {
                return Ok(live);
            }
            tracing::info!(%name, "putting back a changed {}", wanted["kind"]);
            let patch = json!({"spec": wanted["spec"]});
            Ok(api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?)
        }
    }
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
    config.connect_timeout = Some(Duration::from_secs(2));
    config.read_timeout = Some(Duration::from_secs(2));
    Client::try_from(config).ok()
}

/// Whether the API server at `server` answers `/readyz`.
async fn answers(server: &str, ca: &str) -> bool {
    let Some(client) = tenant_client(server, ca, None).await else { return false };
    let request = http::Request::get("/readyz").body(Vec::new()).expect("a request");
    client.request_text(request).await.is_ok_and(|body| body.trim() == "ok")
}

// === NestedControlPlane ===

async fn reconcile_control_plane(plane: Arc<NestedControlPlane>, context: Arc<Context>) -> Result<Action> {
    if plane.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let client = &context.client;
    if paused(&*plane) {
        let planes: Api<NestedControlPlane> = Api::namespaced(client.clone(), &plane.namespace().unwrap_or_default());
        let previous = plane.status.as_ref().and_then(|s| s.conditions.as_ref());
        let mut conditions: Vec<Condition> =
            previous.into_iter().flatten().filter(|c| c.type_ != "Paused").cloned().collect();
        conditions.push(condition("Paused", true, "Paused", "reconciliation is paused", plane.metadata.generation));
        let status = json!({"status": {"conditions": keep_transitions(previous, conditions)}});
        planes.patch_status(&plane.name_any(), &PatchParams::default(), &Patch::Merge(&status)).await?;
        return Ok(Action::await_change());
    }
    let names = names_of(&*plane);
    let namespace = names.namespace.clone();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let planes: Api<NestedControlPlane> = Api::namespaced(client.clone(), &namespace);
    let generation = plane.metadata.generation;

    // The cluster CA.
    let ca = match secrets.get_opt(&names.ca_secret()).await? {
        Some(secret) => nest_pki::Ca(nest_pki::Pair {
            cert: secret_data(&secret, "tls.crt").unwrap_or_default(),
            key: secret_data(&secret, "tls.key").unwrap_or_default(),
        }),
        None => {
            let ca = nest_pki::Ca::generate(&format!("{}-ca", names.cluster))?;
            let data = [("tls.crt", ca.0.cert.as_str()), ("tls.key", ca.0.key.as_str())];
            ensure(&secrets, cluster_secret(&names, names.ca_secret(), owner(&*plane), &data)).await?;
            ca
        }
    };

    // The components.
    let overrides = plane.spec.components.clone().unwrap_or_default();
    // The version the components get: the wanted one, unless that would go backwards or skip a minor version
    // from what runs, which is refused (the components keep what they run).
    let previous_version = plane.status.as_ref().and_then(|s| s.version.clone());
    let refusal = previous_version.as_deref().and_then(|running| version_change_refused(running, &plane.spec.version));
    let version = match (&refusal, &previous_version) {
        (Some(_), Some(running)) => running.clone(),
        _ => plane.spec.version.clone(),
    };
    let component = |given: Option<NestedComponentSpec>| {
        let mut spec = given.unwrap_or_default();
        spec.version = spec.version.or_else(|| Some(version.clone()));
        spec
    };
    let meta = ObjectMeta {
        name: plane.metadata.name.clone(),
        namespace: Some(namespace.clone()),
        labels: Some([(CLUSTER_NAME_LABEL.to_string(), names.cluster.clone())].into()),
        owner_references: Some(vec![owner(&*plane)]),
        ..Default::default()
    };
    let api_servers: Api<NestedAPIServer> = Api::namespaced(client.clone(), &namespace);
    let api_server_name = plane.spec.api_server.as_ref().and_then(|r| r.name.clone());
    let api_server = match &api_server_name {
        Some(name) => api_servers.get_opt(name).await?,
        None => {
            let spec = NestedAPIServerSpec { component: component(overrides.api_server.clone()) };
            let existing =
                ensure(&api_servers, NestedAPIServer { metadata: meta.clone(), spec: spec.clone(), status: None })
                    .await?;
            Some(sync_spec(&api_servers, existing, &spec).await?)
        }
    };
    let managers: Api<NestedControllerManager> = Api::namespaced(client.clone(), &namespace);
    let manager = match plane.spec.controller_manager.as_ref().and_then(|r| r.name.clone()) {
        Some(name) => managers.get_opt(&name).await?,
        None => {
            let spec = NestedControllerManagerSpec { component: component(overrides.controller_manager.clone()) };
            let existing =
                ensure(&managers, NestedControllerManager { metadata: meta, spec: spec.clone(), status: None }).await?;
            Some(sync_spec(&managers, existing, &spec).await?)
        }
    };

    // The endpoint: the API server's Service.
    let services: Api<Service> = Api::namespaced(client.clone(), &namespace);
    let service_ip = services
        .get_opt(&names.api_server())
        .await?
        .and_then(|s| s.spec.and_then(|s| s.cluster_ip))
        .filter(|ip| !ip.is_empty() && ip != "None");
    let Some(service_ip) = service_ip else {
        return Ok(Action::requeue(Duration::from_secs(1)));
    };
    let endpoint = plane.spec.control_plane_endpoint.clone().filter(|e| !e.is_zero());
    let server = match &endpoint {
        Some(endpoint) => format!("https://{}:{}", endpoint.host, endpoint.port),
        None => format!("https://{service_ip}:{API_SERVER_PORT}"),
    };
    if endpoint.is_none() {
        let patch = json!({"spec": {"controlPlaneEndpoint": {"host": service_ip, "port": API_SERVER_PORT}}});
        planes.patch(&plane.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }

    // Kubeconfigs: the admin's (Cluster API's `<cluster>-kubeconfig`) and the controller-manager's own.
    let admin = kubeconfig_secret(
        &secrets,
        &names,
        &plane,
        &ca,
        &server,
        names.kubeconfig_secret(),
        "kubernetes-admin",
        "system:masters",
    )
    .await?;
    kubeconfig_secret(
        &secrets,
        &names,
        &plane,
        &ca,
        &server,
        names.controller_manager_kubeconfig_secret(),
        "system:kube-controller-manager",
        "system:kube-controller-manager",
    )
    .await?;

    // Initialized once the API server has answered, for good.
    let previous = plane.status.clone().unwrap_or_default();
    let mut initialized = previous.initialized;
    if !initialized && let Some(tenant) = tenant_client(&server, &ca.0.cert, Some(&admin)).await {
        initialized = tenant.apiserver_version().await.is_ok();
    }
    let component_ready =
        |status: Option<&NestedComponentStatus>| status.and_then(|s| s.phase.as_deref()) == Some("Ready");
    let api_status = api_server.as_ref().and_then(|a| a.status.clone());
    let manager_status = manager.as_ref().and_then(|m| m.status.clone());
    let (api_ready, manager_ready) = (component_ready(api_status.as_ref()), component_ready(manager_status.as_ref()));
    let ready = initialized && api_ready && manager_ready;
    let waiting: Vec<&str> =
        [(!api_ready).then_some("NestedAPIServer"), (!manager_ready).then_some("NestedControllerManager")]
            .into_iter()
            .flatten()
            .collect();
    let ready_condition = if ready {
        condition("Ready", true, "Ready", "", generation)
    } else if !waiting.is_empty() {
        condition("Ready", false, "ComponentsNotReady", format!("waiting for {}", waiting.join(", ")), generation)
    } else {
        condition("Ready", false, "WaitingForAPIServer", "the API server has not answered yet", generation)
    };
    let conditions = keep_transitions(
        previous.conditions.as_ref(),
        vec![
            condition(
                "Initialized",
                initialized,
                if initialized { "Initialized" } else { "WaitingForAPIServer" },
                "",
                generation,
            ),
            ready_condition,
            match &refusal {
                Some((reason, message)) => condition("VersionAccepted", false, reason, message.clone(), generation),
                None => condition("VersionAccepted", true, "Accepted", "", generation),
            },
            condition("Paused", false, "NotPaused", "", generation),
        ],
    );
    let replicas = api_status.as_ref().and_then(|s| s.replicas).unwrap_or(0);
    let ready_replicas = api_status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(0);
    let status = json!({"status": {
        "initialized": initialized,
        "ready": ready,
        "initialization": {"controlPlaneInitialized": initialized},
        "replicas": replicas, "readyReplicas": ready_replicas, "availableReplicas": ready_replicas,
        "updatedReplicas": replicas, "upToDateReplicas": replicas, "unavailableReplicas": replicas - ready_replicas,
        "version": api_status.as_ref().and_then(|s| s.version.clone()),
        "selector": format!("{CLUSTER_NAME_LABEL}={},{}=apiserver", names.cluster, render::COMPONENT_LABEL),
        "conditions": conditions,
        "observedGeneration": generation,
    }});
    planes.patch_status(&plane.name_any(), &PatchParams::default(), &Patch::Merge(&status)).await?;
    Ok(Action::requeue(LOOK_AGAIN))
}

/// `v1.33.0` as (1, 33, 0).
fn parse_version(version: &str) -> Option<(u64, u64, u64)> {
    let core = version.strip_prefix('v')?.split(['-', '+']).next()?;
    let mut parts = core.split('.').map(|p| p.parse::<u64>().ok());
    Some((parts.next()??, parts.next()??, parts.next()??))
}

/// Why going from version `running` to `wanted` is refused, if it is: Kubernetes control planes go forward only, one
/// minor version at a time. Returns (reason, message).
fn version_change_refused(running: &str, wanted: &str) -> Option<(&'static str, String)> {
    let (Some(from), Some(to)) = (parse_version(running), parse_version(wanted)) else { return None };
    if to < from {
        return Some((
            "DowngradeRefused",
            format!("{wanted} is older than the running {running}; control planes are only upgraded"),
        ));
    }
    if to.0 != from.0 || to.1 > from.1 + 1 {
        return Some((
            "VersionSkewRefused",
            format!("{running} to {wanted} skips a minor version; upgrade one minor version at a time"),
        ));
    }
    None
}

/// Puts `spec` on a component the control plane created, when it differs.
async fn sync_spec<K>(api: &Api<K>, existing: K, spec: &impl serde::Serialize) -> Result<K>
where
    K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let live = serde_json::to_value(&existing)?;
    let wanted = serde_json::to_value(spec)?;
    if render::covers(&live["spec"], &wanted) {
        return Ok(existing);
    }
    let name = existing.meta().name.clone().unwrap_or_default();
    Ok(api.patch(&name, &PatchParams::default(), &Patch::Merge(&json!({"spec": wanted}))).await?)
}

/// The Secret `name` holding a kubeconfig (key `value`) for `user` in `group` at `server`: created when missing,
/// issued again when it names another server or a third of its certificate's life is left. Returns its client pair.
#[allow(clippy::too_many_arguments)]
async fn kubeconfig_secret(
    secrets: &Api<Secret>,
    names: &Names,
    plane: &NestedControlPlane,
    ca: &nest_pki::Ca,
    server: &str,
    name: String,
    user: &str,
    group: &str,
) -> Result<nest_pki::Pair> {
    let validity =
        plane.spec.certificate_validity.as_deref().and_then(parse_duration).unwrap_or(nest_pki::LEAF_VALIDITY);
    if let Some(existing) = secrets.get_opt(&name).await? {
        // The kubeconfig was written here (nest_pki::kubeconfig), so its fields are where that puts them.
        let text = secret_data(&existing, "value").unwrap_or_default();
        let field = |key: &str| text.lines().find_map(|l| l.trim().strip_prefix(key).map(|v| v.trim().to_string()));
        if let (Some(have_server), Some(cert), Some(key)) =
            (field("server:"), field("client-certificate-data:"), field("client-key-data:"))
        {
            let (cert, key) = (base64_decode(&cert), base64_decode(&key));
            let left =
                nest_pki::not_after(&cert).ok().and_then(|end| end.duration_since(std::time::SystemTime::now()).ok());
            if have_server == server && left.is_some_and(|left| left > validity / 3) {
                return Ok(nest_pki::Pair { cert, key });
            }
        }
    }
    let leaf = nest_pki::Leaf {
        common_name: user,
        organization: Some(group),
        names: Vec::new(),
        usage: nest_pki::Usage::Client,
        validity,
    };
    let pair = ca.issue(&leaf)?;
    let config = nest_pki::kubeconfig(server, &ca.0.cert, &pair, user);
    let secret = cluster_secret(names, name.clone(), owner(plane), &[("value", config.as_str())]);
    match secrets.get_opt(&name).await? {
        Some(_) => {
            secrets.replace(&name, &PostParams::default(), &secret).await?;
        }
        None => {
            ensure(secrets, secret).await?;
        }
    }
    Ok(pair)
}

fn base64_decode(text: &str) -> String {
    let value = Value::String(text.trim().to_string());
    serde_json::from_value::<ByteString>(value).map(|b| String::from_utf8_lossy(&b.0).into_owned()).unwrap_or_default()
}

/// A Go duration of hours, minutes and seconds (`8760h`, `90m`, `1h30m`).
fn parse_duration(text: &str) -> Option<Duration> {
    let mut total = 0f64;
    let mut number = String::new();
    for c in text.chars() {
        match c {
            '0'..='9' | '.' => number.push(c),
            'h' | 'm' | 's' => {
                let n: f64 = number.parse().ok()?;
                total += n * match c {
                    'h' => 3600.0,
                    'm' => 60.0,
                    _ => 1.0,
                };
                number.clear();
            }
            _ => return None,
        }
    }
    (number.is_empty() && total > 0.0).then(|| Duration::from_secs_f64(total))
}

// === components ===

/// What a component's StatefulSet says, and the phase that follows.
fn component_status(
    previous: Option<&NestedComponentStatus>,
    set: &StatefulSet,
    healthy: bool,
    version: Option<String>,
    generation: Option<i64>,
) -> NestedComponentStatus {
    let replicas = set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let ready_replicas = set.status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(0);
    let was_ready = previous.and_then(|p| p.phase.as_deref()) == Some("Ready");
    let all_ready = ready_replicas >= replicas && healthy;
    let (phase, reason, message) = if all_ready {
        ("Ready", "Ready", String::new())
    } else if was_ready || previous.and_then(|p| p.phase.as_deref()) == Some("Unhealthy") {
        (
            "Unhealthy",
            "NotHealthy",
            format!("{ready_replicas} of {replicas} ready; health check {}", if healthy { "passes" } else { "fails" }),
        )
    } else {
        ("Provisioning", "Provisioning", format!("{ready_replicas} of {replicas} ready"))
    };
    let conditions = keep_transitions(
        previous.and_then(|p| p.conditions.as_ref()),
        vec![condition("Ready", all_ready, reason, message, generation)],
    );
    NestedComponentStatus {
        phase: Some(phase.into()),
        healthy: all_ready,
        version,
        replicas: Some(replicas),
        ready_replicas: Some(ready_replicas),
        conditions: Some(conditions),
        observed_generation: generation,
        ..Default::default()
    }
}

async fn reconcile_api_server(component: Arc<NestedAPIServer>, context: Arc<Context>) -> Result<Action> {
    if component.metadata.deletion_timestamp.is_some() || paused(&*component) {
        return Ok(Action::await_change());
    }
    let client = &context.client;
    let names = names_of(&*component);
    let services: Api<Service> = Api::namespaced(client.clone(), &names.namespace);
    let service: Service = apply_rendered(&services, render::api_server_service(&names), owner(&*component)).await?;
    let Some(service_ip) = service.spec.as_ref().and_then(|s| s.cluster_ip.clone()).filter(|ip| !ip.is_empty()) else {
        return Ok(Action::requeue(Duration::from_secs(1)));
    };
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &names.namespace);
    let rendered = render::api_server_statefulset(&names, &component.spec.component, &service_ip);
    let set: StatefulSet = apply_rendered(&sets, rendered, owner(&*component)).await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &names.namespace);
    let ca = secrets.get_opt(&names.ca_secret()).await?.and_then(|s| secret_data(&s, "tls.crt"));
    let server = format!("https://{service_ip}:{API_SERVER_PORT}");
    let healthy = match &ca {
        Some(ca) => answers(&server, ca).await,
        None => false,
    };
    let mut status = component_status(
        component.status.as_ref(),
        &set,
        healthy,
        component.spec.component.version.clone(),
        component.metadata.generation,
    );
    status.addresses = Some(vec![format!("{service_ip}:{API_SERVER_PORT}")]);
    status.service_ref = Some(ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Service".into()),
        name: Some(names.api_server()),
        namespace: Some(names.namespace.clone()),
        ..Default::default()
    });
    let api: Api<NestedAPIServer> = Api::namespaced(client.clone(), &names.namespace);
    api.patch_status(&component.name_any(), &PatchParams::default(), &Patch::Merge(&json!({"status": status}))).await?;
    Ok(Action::requeue(LOOK_AGAIN))
}

async fn reconcile_controller_manager(
    component: Arc<NestedControllerManager>,
    context: Arc<Context>,
) -> Result<Action> {
    if component.metadata.deletion_timestamp.is_some() || paused(&*component) {
        return Ok(Action::await_change());
    }
    let client = &context.client;
    let names = names_of(&*component);
    let api: Api<NestedControllerManager> = Api::namespaced(client.clone(), &names.namespace);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &names.namespace);
    if secrets.get_opt(&names.controller_manager_kubeconfig_secret()).await?.is_none() {
        let status = json!({"status": {"phase": "Pending", "healthy": false, "conditions": [condition(
            "Ready", false, "WaitingForKubeconfig",
            format!("waiting for the Secret {}", names.controller_manager_kubeconfig_secret()), component.metadata.generation)]}});
        api.patch_status(&component.name_any(), &PatchParams::default(), &Patch::Merge(&status)).await?;
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), &names.namespace);
    let rendered = render::controller_manager_statefulset(&names, &component.spec.component);
    let set: StatefulSet = apply_rendered(&sets, rendered, owner(&*component)).await?;
    let ready = set.status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(0)
        >= set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let status = component_status(
        component.status.as_ref(),
        &set,
        ready,
        component.spec.component.version.clone(),
        component.metadata.generation,
    );
    api.patch_status(&component.name_any(), &PatchParams::default(), &Patch::Merge(&json!({"status": status}))).await?;
    Ok(Action::requeue(LOOK_AGAIN))
}

// === Cluster and NestedCluster ===

/// The finalizer a Cluster holds until what it references is gone.
pub const CLUSTER_FINALIZER: &str = "cluster.cluster.x-k8s.io";

/// The NestedControlPlane a Cluster references, if that is what it references.
fn control_plane_of(cluster: &Cluster) -> Option<String> {
    let reference = cluster.spec.control_plane_ref.as_ref()?;
    (reference.api_group == crate::api::CONTROL_PLANE_GROUP && reference.kind == "NestedControlPlane")
        .then(|| reference.name.clone())
}

fn infrastructure_of(cluster: &Cluster) -> Option<String> {
    let reference = cluster.spec.infrastructure_ref.as_ref()?;
    (reference.api_group == crate::api::INFRASTRUCTURE_GROUP && reference.kind == "NestedCluster")
        .then(|| reference.name.clone())
}

/// Labels `object` with the cluster's name and makes the Cluster one of its owners, as Cluster API's core does.
async fn adopt<K>(api: &Api<K>, object: &K, cluster: &Cluster) -> Result<()>
where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let meta = object.meta();
    let labelled = meta.labels.as_ref().and_then(|l| l.get(CLUSTER_NAME_LABEL)) == Some(&cluster.name_any());
    let uid = cluster.uid().unwrap_or_default();
    let owned = meta.owner_references.iter().flatten().any(|o| o.uid == uid);
    if labelled && owned {
        return Ok(());
    }
    let mut owners = meta.owner_references.clone().unwrap_or_default();
    if !owned {
        owners.push(OwnerReference { controller: Some(false), block_owner_deletion: Some(true), ..owner(cluster) });
    }
    let patch = json!({"metadata": {"labels": {CLUSTER_NAME_LABEL: cluster.name_any()}, "ownerReferences": owners}});
    api.patch(&meta.name.clone().unwrap_or_default(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    Ok(())
}

/// Cluster API's core Cluster controller, the part nest needs: adopt the control plane and infrastructure, copy the
/// endpoint, report the phase and conditions; on deletion, remove the control plane, then the infrastructure, then
/// the finalizer.
async fn reconcile_cluster(cluster: Arc<Cluster>, context: Arc<Context>) -> Result<Action> {
    let client = &context.client;
    let namespace = cluster.namespace().unwrap_or_default();
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), &namespace);
    let planes: Api<NestedControlPlane> = Api::namespaced(client.clone(), &namespace);
    let infrastructures: Api<NestedCluster> = Api::namespaced(client.clone(), &namespace);
    let generation = cluster.metadata.generation;
    let plane = match control_plane_of(&cluster) {
        Some(name) => planes.get_opt(&name).await?,
        None => None,
    };
    let infrastructure = match infrastructure_of(&cluster) {
        Some(name) => infrastructures.get_opt(&name).await?,
        None => None,
    };

    if cluster.metadata.deletion_timestamp.is_some() {
        let status = json!({"status": {"phase": "Deleting"}});
        clusters.patch_status(&cluster.name_any(), &PatchParams::default(), &Patch::Merge(&status)).await?;
        // The control plane first (with everything it made), then the infrastructure.
        let foreground = kube::api::DeleteParams::foreground();
        if let Some(plane) = &plane {
            if plane.metadata.deletion_timestamp.is_none() {
                planes.delete(&plane.name_any(), &foreground).await?;
            }
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        if let Some(infrastructure) = &infrastructure {
            if infrastructure.metadata.deletion_timestamp.is_none() {
                infrastructures.delete(&infrastructure.name_any(), &foreground).await?;
            }
            return Ok(Action::requeue(Duration::from_secs(1)));
        }
        let finalizers: Vec<&String> = cluster.finalizers().iter().filter(|f| *f != CLUSTER_FINALIZER).collect();
        let patch = json!({"metadata": {"finalizers": finalizers}});
        clusters.patch(&cluster.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
        return Ok(Action::await_change());
    }
    if !cluster.finalizers().iter().any(|f| f == CLUSTER_FINALIZER) {
        let mut finalizers = cluster.finalizers().to_vec();
        finalizers.push(CLUSTER_FINALIZER.into());
        let patch = json!({"metadata": {"finalizers": finalizers}});
        clusters.patch(&cluster.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }
    let previous = cluster.status.clone().unwrap_or_default();
    if cluster.spec.paused == Some(true) || paused(&*cluster) {
        let conditions = keep_transitions(
            previous.conditions.as_ref(),
            vec![condition("Paused", true, "Paused", "reconciliation is paused", generation)],
        );
        let status = json!({"status": {"conditions": conditions}});
        clusters.patch_status(&cluster.name_any(), &PatchParams::default(), &Patch::Merge(&status)).await?;
        return Ok(Action::await_change());
    }
    if let Some(plane) = &plane {
        adopt(&planes, plane, &cluster).await?;
    }
    if let Some(infrastructure) = &infrastructure {
        adopt(&infrastructures, infrastructure, &cluster).await?;
    }

    // The endpoint: the control plane's, else the infrastructure's.
    let endpoint = plane
        .as_ref()
        .and_then(|p| p.spec.control_plane_endpoint.clone())
        .or_else(|| infrastructure.as_ref().and_then(|i| i.spec.control_plane_endpoint.clone()))
        .filter(|e| !e.is_zero());
    if let Some(endpoint) = endpoint
        && cluster.spec.control_plane_endpoint.as_ref().is_none_or(ApiEndpoint::is_zero)
    {
        let patch = json!({"spec": {"controlPlaneEndpoint": endpoint}});
        clusters.patch(&cluster.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }

    let provisioned = infrastructure.as_ref().and_then(|i| i.status.as_ref()).is_some_and(|s| s.ready);
    let initialized = plane.as_ref().and_then(|p| p.status.as_ref()).is_some_and(|s| s.initialized);
    let plane_ready = plane.as_ref().and_then(|p| p.status.as_ref()).is_some_and(|s| s.ready);
    let phase = match (infrastructure.is_some() || plane.is_some(), provisioned, initialized) {
        (false, _, _) => "Pending",
        (true, true, true) => "Provisioned",
        _ => "Provisioning",
    };
    let missing = |what: &str| format!("the {what} has not been found");
    let conditions = keep_transitions(
        previous.conditions.as_ref(),
        vec![
            if infrastructure.is_none() {
                condition("InfrastructureReady", false, "NotFound", missing("infrastructure"), generation)
            } else {
                condition(
                    "InfrastructureReady",
                    provisioned,
                    if provisioned { "Ready" } else { "Provisioning" },
                    "",
                    generation,
                )
            },
            if plane.is_none() {
                condition("ControlPlaneInitialized", false, "NotFound", missing("control plane"), generation)
            } else {
                condition(
                    "ControlPlaneInitialized",
                    initialized,
                    if initialized { "Initialized" } else { "WaitingForAPIServer" },
                    "",
                    generation,
                )
            },
            condition(
                "ControlPlaneAvailable",
                plane_ready,
                if plane_ready { "Available" } else { "NotReady" },
                "",
                generation,
            ),
            condition("Paused", false, "NotPaused", "", generation),
        ],
    );
    let status = json!({"status": {
        "phase": phase,
        "initialization": {"infrastructureProvisioned": provisioned, "controlPlaneInitialized": initialized},
        "conditions": conditions,
        "observedGeneration": generation,
    }});
    clusters.patch_status(&cluster.name_any(), &PatchParams::default(), &Patch::Merge(&status)).await?;
    Ok(Action::requeue(LOOK_AGAIN))
}

/// The NestedCluster: its endpoint is the control plane's (unless set), and it is ready when the control plane is.
async fn reconcile_nested_cluster(infrastructure: Arc<NestedCluster>, context: Arc<Context>) -> Result<Action> {
    if infrastructure.metadata.deletion_timestamp.is_some() || paused(&*infrastructure) {
        return Ok(Action::await_change());
    }
    let client = &context.client;
    let names = names_of(&*infrastructure);
    let clusters: Api<Cluster> = Api::namespaced(client.clone(), &names.namespace);
    let planes: Api<NestedControlPlane> = Api::namespaced(client.clone(), &names.namespace);
    // The control plane of its Cluster, else the one of the same cluster name.
    let from_cluster = match clusters.get_opt(&names.cluster).await? {
        Some(cluster) => control_plane_of(&cluster),
        None => None,
    };
    let plane = planes.get_opt(&from_cluster.unwrap_or_else(|| names.cluster.clone())).await?;
    let ready = plane.as_ref().and_then(|p| p.status.as_ref()).is_some_and(|s| s.ready);
    let endpoint = plane.as_ref().and_then(|p| p.spec.control_plane_endpoint.clone()).filter(|e| !e.is_zero());
    let api: Api<NestedCluster> = Api::namespaced(client.clone(), &names.namespace);
    if let Some(endpoint) = endpoint
        && infrastructure.spec.control_plane_endpoint.as_ref().is_none_or(ApiEndpoint::is_zero)
    {
        let patch = json!({"spec": {"controlPlaneEndpoint": endpoint}});
        api.patch(&infrastructure.name_any(), &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }
    let generation = infrastructure.metadata.generation;
    let previous = infrastructure.status.clone().unwrap_or_default();
    let conditions = keep_transitions(
        previous.conditions.as_ref(),
        vec![condition("Ready", ready, if ready { "Ready" } else { "WaitingForControlPlane" }, "", generation)],
    );
    let status = json!({"status": {
        "ready": ready, "initialization": {"provisioned": ready}, "conditions": conditions,
        "observedGeneration": generation,
    }});
    api.patch_status(&infrastructure.name_any(), &PatchParams::default(), &Patch::Merge(&status)).await?;
    Ok(Action::requeue(LOOK_AGAIN))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_go_forward_one_minor_at_a_time() {
        assert_eq!(version_change_refused("v1.33.0", "v1.33.2"), None);
        assert_eq!(version_change_refused("v1.33.2", "v1.34.0"), None);
        assert_eq!(version_change_refused("v1.33.2", "v1.33.2"), None);
        assert_eq!(version_change_refused("v1.33.2", "v1.33.1").map(|r| r.0), Some("DowngradeRefused"));
        assert_eq!(version_change_refused("v1.33.0", "v1.32.9").map(|r| r.0), Some("DowngradeRefused"));
        assert_eq!(version_change_refused("v1.32.0", "v1.34.0").map(|r| r.0), Some("VersionSkewRefused"));
        assert_eq!(version_change_refused("v1.33.0", "v2.0.0").map(|r| r.0), Some("VersionSkewRefused"));
        assert_eq!(parse_version("v1.33.0-rc.1"), Some((1, 33, 0)));
    }
}
