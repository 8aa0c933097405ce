//! The NestedControlPlane controller: PKI, components in upgrade order, kubeconfigs, endpoint, and the Cluster API
//! control-plane contract's status.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::components::ComponentObject;
use super::{
    Context, Result, cluster_paused, cluster_secret, condition, ensure, ensure_ca, ensure_leaf, keep_transitions,
    look_again, owner, paused, report_paused, secret_data, set_status, tenant_client, within,
};
use crate::api::{
    CLUSTER_NAME_LABEL, Cluster, NestedAPIServer, NestedComponentStatus, NestedControlPlane, NestedControllerManager,
    NestedEtcd,
};
use crate::plan::{Plan, component_spec};
use crate::render::{self, API_SERVER_PORT, Component, Names};

pub(super) async fn reconcile(plane: Arc<NestedControlPlane>, context: Arc<Context>) -> Result<Action> {
    if plane.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let client = &context.client;
    let namespace = plane.namespace().unwrap_or_default();
    let planes: Api<NestedControlPlane> = Api::namespaced(client.clone(), &namespace);
    let cluster_name = plane.labels().get(CLUSTER_NAME_LABEL).cloned().unwrap_or_else(|| plane.name_any());
    let cluster = Api::<Cluster>::namespaced(client.clone(), &namespace).get_opt(&cluster_name).await.ok().flatten();
    if paused(&*plane) || cluster_paused(cluster.as_ref()) {
        report_paused(&planes, &*plane, plane.status.as_ref().and_then(|s| s.conditions.as_ref())).await?;
        return Ok(Action::await_change());
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &namespace);
    let plan = Plan::of(&plane, cluster.as_ref());
    let names = plan.names.clone();
    let validity = certificate_validity(&plane);

    // The PKI, with Cluster API's names: the cluster CA, the etcd CA, the front-proxy CA, the service-account keys,
    // and the client certificates the API server presents to etcd and to aggregated API servers.
    let ca = ensure_ca(&secrets, &names, names.ca_secret(), owner(&*plane)).await?;
    let etcd_ca = ensure_ca(&secrets, &names, names.etcd_ca_secret(), owner(&*plane)).await?;
    let proxy_ca = ensure_ca(&secrets, &names, names.proxy_secret(), owner(&*plane)).await?;
    ensure_service_account_keys(&secrets, &names, owner(&*plane)).await?;
    if plan.with_etcd {
        let leaf = nest_pki::Leaf {
            common_name: "kube-apiserver-etcd-client",
            organization: None,
            names: Vec::new(),
            usage: nest_pki::Usage::Client,
            validity,
        };
        ensure_leaf(&secrets, &names, names.apiserver_etcd_client_secret(), &etcd_ca, &leaf, owner(&*plane)).await?;
    }
    let leaf = nest_pki::Leaf {
        common_name: "front-proxy-client",
        organization: None,
        names: Vec::new(),
        usage: nest_pki::Usage::Client,
        validity,
    };
    ensure_leaf(&secrets, &names, names.proxy_client_secret(), &proxy_ca, &leaf, owner(&*plane)).await?;

    // The version the components get: the wanted one, unless that would go backwards or skip a minor version
    // from what runs, which is refused (the components keep what they run).
    let previous_version = plane.status.as_ref().and_then(|s| s.version.clone());
    let refusal = previous_version.as_deref().and_then(|running| version_change_refused(running, &plane.spec.version));
    let target = match (&refusal, &previous_version) {
        (Some(_), Some(running)) => running.clone(),
        _ => plane.spec.version.clone(),
    };

    // The components, in Kubernetes' upgrade order: each gets the target version only once the one before runs it
    // and is ready.
    let mut components: Vec<(Component, Option<ComponentState>)> = Vec::new();
    let mut previous_done = true;
    for component in plan.components() {
        let state = match component {
            Component::Etcd => step::<NestedEtcd>(&context, &plane, &names, component, &target, previous_done).await?,
            Component::ApiServer => {
                step::<NestedAPIServer>(&context, &plane, &names, component, &target, previous_done).await?
            }
            Component::ControllerManager => {
                step::<NestedControllerManager>(&context, &plane, &names, component, &target, previous_done).await?
            }
        };
        previous_done = state.as_ref().is_some_and(|s| s.ready() && s.running() == Some(target.as_str()));
        components.push((component, state));
    }

    // The endpoint: the API server's Service.
    let services: Api<Service> = Api::namespaced(client.clone(), &namespace);
    let service_ip = services
        .get_opt(&names.api_server())
        .await?
        .and_then(|s| s.spec.and_then(|s| s.cluster_ip))
        .filter(|ip| !ip.is_empty() && ip != "None");
    let Some(service_ip) = service_ip else {
        report_components(&planes, &plane, &components, &target, refusal.as_ref(), Serving::default()).await?;
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
        Some("system:masters"),
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
        Some("system:kube-controller-manager"),
    )
    .await?;

    // Initialized once the API server has answered, for good.
    let mut initialized = plane.status.as_ref().is_some_and(|s| s.initialized);
    if !initialized && let Some(tenant) = tenant_client(&server, &ca.0.cert, Some(&admin)).await {
        initialized = within(tenant.apiserver_version()).await.is_some();
    }
    let all_ready = components.iter().all(|(_, state)| state.as_ref().is_some_and(ComponentState::ready));
    // Ready also means the tenant's controllers work (its `default` ServiceAccount is there, without which its
    // ServiceAccount admission refuses every pod of `default`): asked until it is so once, then not again.
    let was_ready = plane
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let mut controllers = was_ready;
    if initialized
        && all_ready
        && !was_ready
        && let Some(tenant) = tenant_client(&server, &ca.0.cert, Some(&admin)).await
    {
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(tenant.clone(), "default");
        controllers = within(accounts.get_opt("default")).await.flatten().is_some();
    }
    // The syncer's credential for the tenant, once its role is there (made with the admin's credential, so in
    // either flavor; for a control plane made before the syncer had one, at the first pass that reaches it).
    let syncer_secret = names.syncer_kubeconfig_secret();
    let mut syncer_ready = secrets.get_opt(&syncer_secret).await?.is_some();
    if !syncer_ready
        && initialized
        && let Some(tenant) = tenant_client(&server, &ca.0.cert, Some(&admin)).await
    {
        syncer_ready = within(syncer_role(&tenant)).await.is_some();
    }
    if syncer_ready {
        let syncer = crate::identity::SYNCER_USER;
        kubeconfig_secret(&secrets, &names, &plane, &ca, &server, syncer_secret, syncer, None).await?;
    }
    let controllers = controllers && syncer_ready;
    let serving = Serving { initialized, controllers };
    report_components(&planes, &plane, &components, &target, refusal.as_ref(), serving).await?;
    if initialized && all_ready && !controllers {
        // Only the tenant's own controllers are awaited, which no watch here sees: they take a moment, look again
        // soon (a tenant is Ready within a second of its components).
        return Ok(Action::requeue(Duration::from_millis(200)));
    }
    Ok(look_again(initialized && all_ready && controllers))
}

/// Makes (or puts back) the syncer's ClusterRole and binding in the tenant ([`crate::identity`]).
async fn syncer_role(tenant: &kube::Client) -> Result<()> {
    let params = PatchParams::apply("nest-manager").force();
    for object in crate::identity::tenant_syncer_rbac() {
        let resource = if object["kind"] == "ClusterRole" {
            kube::core::ApiResource::erase::<k8s_openapi::api::rbac::v1::ClusterRole>(&())
        } else {
            kube::core::ApiResource::erase::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>(&())
        };
        let api: Api<kube::core::DynamicObject> = Api::all_with(tenant.clone(), &resource);
        let name = object["metadata"]["name"].as_str().unwrap_or_default().to_string();
        api.patch(&name, &params, &Patch::Apply(&object)).await?;
    }
    Ok(())
}

/// What the tenant's control plane has shown it does.
#[derive(Clone, Copy, Debug, Default)]
struct Serving {
    /// Its API server answered (Cluster API's `initialized`).
    initialized: bool,
    /// Its controllers made the `default` ServiceAccount of `default`.
    controllers: bool,
}

/// What the control plane knows of one of its components.
struct ComponentState {
    kind: &'static str,
    wanted_version: Option<String>,
    status: Option<NestedComponentStatus>,
}

impl ComponentState {
    fn ready(&self) -> bool {
        self.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Ready")
    }
    /// The version the component runs (reported once it rolled out).
    fn running(&self) -> Option<&str> {
        self.status.as_ref().and_then(|s| s.version.as_deref())
    }
}

/// Creates or updates the component the control plane made (or reads the one it names), giving it `target` when
/// the components before it are done.
async fn step<K: ComponentObject>(
    context: &Context,
    plane: &NestedControlPlane,
    names: &Names,
    component: Component,
    target: &str,
    previous_done: bool,
) -> Result<Option<ComponentState>> {
    let api: Api<K> = Api::namespaced(context.client.clone(), &names.namespace);
    let reference = match component {
        Component::Etcd => plane.spec.etcd.as_ref(),
        Component::ApiServer => plane.spec.api_server.as_ref(),
        Component::ControllerManager => plane.spec.controller_manager.as_ref(),
    }
    .and_then(|r| r.name.clone());
    let object = match reference {
        Some(name) => api.get_opt(&name).await?,
        None => {
            let name = plane.name_any();
            let existing = api.get_opt(&name).await?;
            let version = match (&existing, previous_done) {
                (Some(existing), false) => existing.component_spec().version.clone().unwrap_or_else(|| target.into()),
                _ => target.to_string(),
            };
            let spec = component_spec(plane, component, &version);
            let limits = crate::plan::api_server_limits(plane);
            let meta = ObjectMeta {
                name: Some(name),
                namespace: Some(names.namespace.clone()),
                labels: Some([(CLUSTER_NAME_LABEL.to_string(), names.cluster.clone())].into()),
                owner_references: Some(vec![owner(plane)]),
                ..Default::default()
            };
            let wanted = K::build(meta, spec, limits);
            let object = match existing {
                Some(existing) => existing,
                None => ensure(&api, wanted.clone()).await?,
            };
            Some(sync_spec(&api, object, &serde_json::to_value(&wanted)?["spec"]).await?)
        }
    };
    Ok(object.map(|o| ComponentState {
        kind: K::KIND,
        wanted_version: o.component_spec().version.clone(),
        status: o.component_status().cloned(),
    }))
}

/// Writes the control plane's status from its components' states.
async fn report_components(
    planes: &Api<NestedControlPlane>,
    plane: &NestedControlPlane,
    components: &[(Component, Option<ComponentState>)],
    target: &str,
    refusal: Option<&(&'static str, String)>,
    serving: Serving,
) -> Result<()> {
    let initialized = serving.initialized;
    let generation = plane.metadata.generation;
    let previous = plane.status.clone().unwrap_or_default();
    let kind_of = |component: &Component| match component {
        Component::Etcd => "NestedEtcd",
        Component::ApiServer => "NestedAPIServer",
        Component::ControllerManager => "NestedControllerManager",
    };
    let not_ready: Vec<&str> = components
        .iter()
        .filter(|(_, state)| !state.as_ref().is_some_and(ComponentState::ready))
        .map(|(component, _)| kind_of(component))
        .collect();
    let behind: Vec<String> = components
        .iter()
        .filter_map(|(component, state)| {
            let running = state.as_ref().and_then(|s| s.running());
            (running != Some(target)).then(|| format!("{} ({})", kind_of(component), running.unwrap_or("not running")))
        })
        .collect();
    let ready = initialized && not_ready.is_empty() && serving.controllers;
    let ready_condition = if ready {
        condition("Ready", true, "Ready", "", generation)
    } else if !not_ready.is_empty() {
        condition("Ready", false, "ComponentsNotReady", format!("waiting for {}", not_ready.join(", ")), generation)
    } else if !initialized {
        condition("Ready", false, "WaitingForAPIServer", "the API server has not answered yet", generation)
    } else {
        let message = "the controller-manager has not made the default ServiceAccount yet";
        condition("Ready", false, "WaitingForControllers", message, generation)
    };
    let rolling_out = if behind.is_empty() {
        condition("RollingOut", false, "NotRollingOut", "", generation)
    } else {
        let first = components
            .iter()
            .find(|(_, s)| s.as_ref().and_then(|s| s.running()) != Some(target))
            .and_then(|(_, s)| s.as_ref())
            .map(|s| format!("; {} is at {}", s.kind, s.wanted_version.as_deref().unwrap_or("?")))
            .unwrap_or_default();
        condition(
            "RollingOut",
            true,
            "RollingOut",
            format!("to {target}, in order etcd, API server, controller-manager: {}{first}", behind.join(", ")),
            generation,
        )
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
            rolling_out,
            match refusal {
                Some((reason, message)) => condition("VersionAccepted", false, reason, message.clone(), generation),
                None => condition("VersionAccepted", true, "Accepted", "", generation),
            },
            condition("Paused", false, "NotPaused", "", generation),
        ],
    );
    let api_status = components
        .iter()
        .find(|(c, _)| *c == Component::ApiServer)
        .and_then(|(_, s)| s.as_ref())
        .and_then(|s| s.status.clone());
    let replicas = api_status.as_ref().and_then(|s| s.replicas).unwrap_or(0);
    let ready_replicas = api_status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(0);
    let updated = if api_status.as_ref().and_then(|s| s.version.as_deref()) == Some(target) { replicas } else { 0 };
    // The contract's version is the lowest any component runs.
    let lowest = components
        .iter()
        .filter_map(|(_, s)| s.as_ref().and_then(|s| s.running()))
        .min_by_key(|v| parse_version(v))
        .map(str::to_string)
        .or(previous.version.clone());
    let all_running = components.iter().all(|(_, s)| s.as_ref().and_then(|s| s.running()).is_some());
    let version = if all_running { lowest } else { previous.version.clone().or(lowest) };
    let names = Plan::of(plane, None).names;
    let status = json!({"status": {
        "initialized": initialized,
        "ready": ready,
        "initialization": {"controlPlaneInitialized": initialized},
        "replicas": replicas, "readyReplicas": ready_replicas, "availableReplicas": ready_replicas,
        "updatedReplicas": updated, "upToDateReplicas": updated, "unavailableReplicas": replicas - ready_replicas,
        "version": version,
        "selector": format!("{CLUSTER_NAME_LABEL}={},{}=apiserver", names.cluster, render::COMPONENT_LABEL),
        "conditions": conditions,
        "observedGeneration": generation,
    }});
    set_status(planes, plane, &status).await?;
    Ok(())
}

/// Cluster API's `<cluster>-sa`: the key pair service-account tokens are signed with (`tls.crt` holds the public
/// key, `tls.key` the private one), made once.
async fn ensure_service_account_keys(secrets: &Api<Secret>, names: &Names, owner: OwnerReference) -> Result<()> {
    if secrets.get_opt(&names.sa_secret()).await?.is_some() {
        return Ok(());
    }
    let (public, private) = nest_pki::key_pair()?;
    let data = [("tls.crt", public.as_str()), ("tls.key", private.as_str())];
    ensure(secrets, cluster_secret(names, names.sa_secret(), owner, &data)).await?;
    Ok(())
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
    if to.0 != from.0 || to.1 > from.1.saturating_add(1) {
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
    group: Option<&str>,
) -> Result<nest_pki::Pair> {
    let validity = certificate_validity(plane);
    if let Some(existing) = secrets.get_opt(&name).await? {
        // The kubeconfig was written here (nest_pki::kubeconfig), so its fields are where that puts them.
        let text = secret_data(&existing, "value").unwrap_or_default();
        let field = |key: &str| text.lines().find_map(|l| l.trim().strip_prefix(key).map(|v| v.trim().to_string()));
        if let (Some(have_server), Some(cert), Some(key)) =
            (field("server:"), field("client-certificate-data:"), field("client-key-data:"))
        {
            let (cert, key) = (
                nest_core::base64::decode_text(&cert).unwrap_or_default(),
                nest_core::base64::decode_text(&key).unwrap_or_default(),
            );
            let left =
                nest_pki::not_after(&cert).ok().and_then(|end| end.duration_since(std::time::SystemTime::now()).ok());
            if have_server == server && left.is_some_and(|left| left > validity / 3) {
                return Ok(nest_pki::Pair { cert, key });
            }
        }
    }
    let leaf = nest_pki::Leaf {
        common_name: user,
        organization: group,
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

/// How long the certificates of `plane` live: its `certificateValidity`, else a year.
pub(super) fn certificate_validity(plane: &NestedControlPlane) -> Duration {
    plane.spec.certificate_validity.as_deref().and_then(nest_pki::parse_duration).unwrap_or(nest_pki::LEAF_VALIDITY)
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
