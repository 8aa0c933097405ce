//! The component controllers — NestedEtcd, NestedAPIServer, NestedControllerManager — one generic reconcile:
//! find the control plane, issue the component's serving certificate, render its package with the Services'
//! addresses, apply it (Services first), put back drift, and report phase, health, version and addresses.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use kube::Resource;
use kube::api::{Api, ObjectMeta};
use kube::runtime::controller::Action;
use serde_json::{Value, json};

use super::{
    Context, Result, TenantClients, answers, apply_rendered, cluster_ips, cluster_paused, condition, ensure_leaf,
    keep_transitions, look_again, names_of, owner, paused, report_paused, secret_data, set_status, within,
};
use crate::api::{
    APIServerLimits, CLUSTER_NAME_LABEL, Cluster, Flavor, NestedAPIServer, NestedAPIServerSpec, NestedComponentSpec,
    NestedComponentStatus, NestedControlPlane, NestedControllerManager, NestedControllerManagerSpec, NestedEtcd,
    NestedEtcdSpec,
};
use crate::plan::Plan;
use crate::render::{self, API_SERVER_PORT, Component, ETCD_CLIENT_PORT, Names};

/// What the three component kinds have in common.
pub(super) trait ComponentObject:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + serde::de::DeserializeOwned
    + serde::Serialize
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    const COMPONENT: Component;
    const KIND: &'static str;
    /// The object, with `limits` when it is an API server (other components have none).
    fn build(meta: ObjectMeta, spec: NestedComponentSpec, limits: APIServerLimits) -> Self;
    fn component_spec(&self) -> &NestedComponentSpec;
    fn component_status(&self) -> Option<&NestedComponentStatus>;
    /// What an API server holds its clients to; nothing for the other components.
    fn limits(&self) -> APIServerLimits {
        APIServerLimits::default()
    }
}

macro_rules! component_object {
    ($kind:ident, $spec:ident, $component:expr $(, $limits:ident)?) => {
        impl ComponentObject for $kind {
            const COMPONENT: Component = $component;
            const KIND: &'static str = stringify!($kind);
            #[allow(unused_variables)]
            fn build(metadata: ObjectMeta, component: NestedComponentSpec, limits: APIServerLimits) -> Self {
                $kind { metadata, spec: $spec { component $(, $limits: limits)? }, status: None }
            }
            fn component_spec(&self) -> &NestedComponentSpec {
                &self.spec.component
            }
            fn component_status(&self) -> Option<&NestedComponentStatus> {
                self.status.as_ref()
            }
            $(
                fn $limits(&self) -> APIServerLimits {
                    self.spec.limits.clone()
                }
            )?
        }
    };
}

component_object!(NestedEtcd, NestedEtcdSpec, Component::Etcd);
component_object!(NestedAPIServer, NestedAPIServerSpec, Component::ApiServer, limits);
component_object!(NestedControllerManager, NestedControllerManagerSpec, Component::ControllerManager);

/// The control plane `component` belongs to: its controlling owner, else the one of its cluster.
async fn control_plane_of<K: Resource>(
    context: &Context,
    component: &K,
    names: &Names,
) -> Result<Option<NestedControlPlane>> {
    let planes: Api<NestedControlPlane> = Api::namespaced(context.client.clone(), &names.namespace);
    let owner = component.meta().owner_references.iter().flatten().find(|o| o.kind == "NestedControlPlane");
    if let Some(owner) = owner {
        return Ok(planes.get_opt(&owner.name).await?);
    }
    let selector = format!("{CLUSTER_NAME_LABEL}={}", names.cluster);
    Ok(planes.list(&kube::api::ListParams::default().labels(&selector)).await?.items.into_iter().next())
}

pub(super) async fn reconcile<K: ComponentObject>(component: Arc<K>, context: Arc<Context>) -> Result<Action> {
    if component.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let client = &context.client;
    let names = names_of(&*component);
    let api: Api<K> = Api::namespaced(client.clone(), &names.namespace);
    let previous = component.component_status().cloned();
    let generation = component.meta().generation;
    if paused(&*component) {
        report_paused(&api, &*component, previous.as_ref().and_then(|s| s.conditions.as_ref())).await?;
        return Ok(Action::await_change());
    }
    let report = |phase: &str, reason: &str, message: String| {
        let conditions = keep_transitions(
            previous.as_ref().and_then(|s| s.conditions.as_ref()),
            vec![condition("Ready", false, reason, message, generation), not_paused(generation)],
        );
        json!({"status": {"phase": phase, "healthy": false, "conditions": conditions, "observedGeneration": generation}})
    };
    let Some(plane) = control_plane_of(&context, &*component, &names).await? else {
        let status = report("Pending", "WaitingForControlPlane", "no NestedControlPlane uses this component".into());
        set_status(&api, &*component, &status).await?;
        return Ok(Action::requeue(Duration::from_secs(5)));
    };
    let cluster =
        Api::<Cluster>::namespaced(client.clone(), &names.namespace).get_opt(&names.cluster).await.ok().flatten();
    if cluster_paused(cluster.as_ref()) || paused(&plane) {
        report_paused(&api, &*component, previous.as_ref().and_then(|s| s.conditions.as_ref())).await?;
        return Ok(Action::await_change());
    }
    let plan = Plan::of(&plane, cluster.as_ref());
    let names = plan.names.clone();

    // What is asked, and what of it is refused.
    let mut spec = component.component_spec().clone();
    spec.version.get_or_insert_with(|| plane.spec.version.clone());
    let mut refusals = Vec::new();
    if K::COMPONENT == Component::Etcd {
        let asked = spec.replicas.unwrap_or(1);
        let running = previous.as_ref().and_then(|s| s.replicas);
        if let Some(running) = running.filter(|running| *running != asked) {
            refusals.push(format!(
                "etcd keeps its {running} members: changing the membership of a running etcd is not supported"
            ));
            spec.replicas = Some(running);
        } else if ![1, 3, 5].contains(&asked) {
            let status = report("Failed", "InvalidReplicas", format!("etcd runs 1, 3 or 5 members, not {asked}"));
            set_status(&api, &*component, &status).await?;
            return Ok(Action::await_change());
        }
    }
    let ips = cluster_ips(client, &names).await?;
    let limits = component.limits();
    let inputs = plan.inputs(&spec, &limits, &ips);
    if K::COMPONENT == Component::ApiServer && spec.replicas.unwrap_or(1) > render::replicas(K::COMPONENT, &inputs) {
        refusals.push("without an etcd the API server keeps its data itself, so it runs one replica".into());
    }
    let mut rendered = match render::render(&context.packages, K::COMPONENT, &inputs) {
        Ok(rendered) => rendered,
        Err(error) => {
            let status = report("Failed", "RenderFailed", error.to_string());
            set_status(&api, &*component, &status).await?;
            return Ok(Action::requeue(Duration::from_secs(30)));
        }
    };

    // Every object, and every pod, carries the tenant's key: the node's network wall puts the control plane in its
    // tenant's zone by it.
    let tenant = tenant_key(&names, cluster.as_ref());
    for object in &mut rendered.objects {
        label_tenant(object, &tenant);
    }

    // Services first: the rest may wait for their addresses.
    for object in rendered.objects.iter().filter(|o| o["kind"] == "Service") {
        apply_rendered(client, object.clone(), owner(&*component)).await?;
    }
    if !rendered.waiting.is_empty() {
        let status =
            report("Provisioning", "WaitingForAddresses", format!("waiting for {}", rendered.waiting.join(", ")));
        set_status(&api, &*component, &status).await?;
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    // Serving certificates, for the Services' addresses and names.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &names.namespace);
    if let Some(waiting) =
        serving_certificate(&secrets, &names, &plan, K::COMPONENT, &spec, &ips, &plane, &*component).await?
    {
        let status = report("Provisioning", "WaitingForCertificates", waiting);
        set_status(&api, &*component, &status).await?;
        return Ok(Action::requeue(Duration::from_secs(2)));
    }
    let mut set = None;
    for object in rendered.objects.iter().filter(|o| o["kind"] != "Service") {
        let applied = apply_rendered(client, object.clone(), owner(&*component)).await?;
        if object["kind"] == "StatefulSet" {
            set = Some(serde_json::from_value::<StatefulSet>(applied)?);
        }
    }
    let Some(set) = set else {
        let status = report("Failed", "RenderFailed", "the package renders no StatefulSet".into());
        set_status(&api, &*component, &status).await?;
        return Ok(Action::requeue(Duration::from_secs(30)));
    };

    // Health.
    let (healthy, addresses, service) = match K::COMPONENT {
        Component::ApiServer => {
            let ip = ips.get(&names.api_server()).cloned().unwrap_or_default();
            let ca = secrets.get_opt(&names.ca_secret()).await?.and_then(|s| secret_data(&s, "tls.crt"));
            let server = format!("https://{ip}:{API_SERVER_PORT}");
            let healthy = match &ca {
                Some(ca) => answers(&context.tenants, &server, ca).await,
                None => false,
            };
            (healthy, vec![format!("{ip}:{API_SERVER_PORT}")], Some(names.api_server()))
        }
        Component::Etcd => {
            let ip = ips.get(&names.etcd()).cloned().unwrap_or_default();
            let url = format!("https://{ip}:{ETCD_CLIENT_PORT}");
            let healthy = etcd_healthy(&context.tenants, &secrets, &names, &url).await?;
            let members = (0..render::replicas(K::COMPONENT, &inputs))
                .filter_map(|i| ips.get(&names.etcd_member(i)).map(|ip| format!("https://{ip}:{ETCD_CLIENT_PORT}")));
            let addresses = if plan.flavor == Flavor::Nest { members.collect() } else { vec![url] };
            (healthy, addresses, Some(names.etcd()))
        }
        Component::ControllerManager => (true, Vec::new(), None),
    };
    let mut status = component_status(previous.as_ref(), &set, healthy, spec.version.clone(), &refusals, generation);
    let well = status.phase.as_deref() == Some("Ready");
    if !addresses.is_empty() {
        status.addresses = Some(addresses);
    }
    status.service_ref = service.map(|name| ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Service".into()),
        name: Some(name),
        namespace: Some(names.namespace.clone()),
        ..Default::default()
    });
    set_status(&api, &*component, &json!({"status": status})).await?;
    Ok(look_again(well))
}

fn not_paused(generation: Option<i64>) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    condition("Paused", false, "NotPaused", "", generation)
}

/// Issues the certificate `component` serves with, when it needs one from the controller: etcd's (server and peer,
/// for every member's and the client Service's address and names) and the `kubernetes` flavor's API server's.
/// Returns what it waits for, if anything.
#[allow(clippy::too_many_arguments)]
async fn serving_certificate<K: Resource<DynamicType = ()>>(
    secrets: &Api<Secret>,
    names: &Names,
    plan: &Plan,
    component: Component,
    spec: &NestedComponentSpec,
    ips: &BTreeMap<String, String>,
    plane: &NestedControlPlane,
    owner_object: &K,
) -> Result<Option<String>> {
    let validity = super::control_plane::certificate_validity(plane);
    let ns = &names.namespace;
    let (secret, ca_secret, common_name, mut dns, services): (String, String, &str, Vec<String>, Vec<String>) =
        match (component, plan.flavor) {
            (Component::Etcd, flavor) => {
                let members = (0..spec.replicas.unwrap_or(1)).map(|i| names.etcd_member(i)).collect::<Vec<_>>();
                let mut dns =
                    vec![names.etcd(), format!("{}.{ns}", names.etcd()), format!("{}.{ns}.svc", names.etcd())];
                if flavor == Flavor::Kubernetes {
                    dns.extend(members.iter().map(|m| format!("{m}.{}-etcd-peer.{ns}.svc", names.cluster)));
                }
                let mut services = vec![names.etcd()];
                if flavor == Flavor::Nest {
                    services.extend(members);
                }
                (names.etcd_server_secret(), names.etcd_ca_secret(), "etcd", dns, services)
            }
            (Component::ApiServer, Flavor::Kubernetes) => {
                let service = names.api_server();
                let dns = vec![
                    service.clone(),
                    format!("{service}.{ns}"),
                    format!("{service}.{ns}.svc"),
                    "kubernetes".into(),
                    "kubernetes.default".into(),
                    "kubernetes.default.svc".into(),
                ];
                (names.apiserver_serving_secret(), names.ca_secret(), "kube-apiserver", dns, vec![service])
            }
            _ => return Ok(None),
        };
    let mut addresses = Vec::new();
    for service in &services {
        match ips.get(service) {
            Some(ip) => addresses.push(ip.clone()),
            None => return Ok(Some(format!("the address of Service {service}"))),
        }
    }
    let Some(ca) = secrets.get_opt(&ca_secret).await? else {
        return Ok(Some(format!("the CA Secret {ca_secret}")));
    };
    let ca = nest_pki::Ca(nest_pki::Pair {
        cert: secret_data(&ca, "tls.crt").unwrap_or_default(),
        key: secret_data(&ca, "tls.key").unwrap_or_default(),
    });
    // Loopback too: etcd members are reached through the node's proxy, and health checks run on the node.
    dns.extend(["localhost".to_string(), "127.0.0.1".to_string()]);
    dns.extend(addresses);
    let leaf = nest_pki::Leaf { common_name, organization: None, names: dns, usage: nest_pki::Usage::Both, validity };
    ensure_leaf(secrets, names, secret, &ca, &leaf, owner(owner_object)).await?;
    Ok(None)
}

/// Whether etcd at `url` says it is healthy, asked as the API server's etcd client.
async fn etcd_healthy(tenants: &TenantClients, secrets: &Api<Secret>, names: &Names, url: &str) -> Result<bool> {
    let Some(client_secret) = secrets.get_opt(&names.apiserver_etcd_client_secret()).await? else {
        return Ok(false);
    };
    let pair = nest_pki::Pair {
        cert: secret_data(&client_secret, "tls.crt").unwrap_or_default(),
        key: secret_data(&client_secret, "tls.key").unwrap_or_default(),
    };
    let ca = secret_data(&client_secret, "ca.crt").unwrap_or_default();
    let Some(client) = tenants.get(url, &ca, Some(&pair)).await else { return Ok(false) };
    let request = http::Request::get("/health").body(Vec::new()).expect("a request");
    let answer = within(client.request_text(request)).await.unwrap_or_default();
    Ok(serde_json::from_str::<Value>(&answer).is_ok_and(|v| v["health"] == "true"))
}

/// What a component's StatefulSet says, and the phase that follows: `Ready` once every replica is ready at the
/// current template and the health check passes; `Upgrading` while a new version rolls out; `Unhealthy` when a
/// component that was ready is no longer.
fn component_status(
    previous: Option<&NestedComponentStatus>,
    set: &StatefulSet,
    healthy: bool,
    version: Option<String>,
    refusals: &[String],
    generation: Option<i64>,
) -> NestedComponentStatus {
    let replicas = set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let status = set.status.as_ref();
    let ready_replicas = status.and_then(|s| s.ready_replicas).unwrap_or(0);
    let updated = status.and_then(|s| s.updated_replicas).unwrap_or(0);
    let observed = status.and_then(|s| s.observed_generation).unwrap_or(0) >= set.metadata.generation.unwrap_or(0);
    let rolled_out = observed && updated >= replicas && status.map(|s| s.replicas).unwrap_or(0) == replicas;
    let all_ready = ready_replicas >= replicas && healthy && rolled_out;
    let was = previous.and_then(|p| p.phase.as_deref());
    let running = previous.and_then(|p| p.version.clone());
    let upgrading = running.is_some() && running != version;
    let (phase, reason, message) = if all_ready {
        ("Ready", "Ready", String::new())
    } else if upgrading {
        (
            "Upgrading",
            "Upgrading",
            format!(
                "{} to {}: {updated} of {replicas} updated, {ready_replicas} ready",
                running.as_deref().unwrap_or("?"),
                version.as_deref().unwrap_or("?")
            ),
        )
    } else if !rolled_out && healthy {
        ("Updating", "RollingOut", format!("{updated} of {replicas} updated, {ready_replicas} ready"))
    } else if matches!(was, Some("Ready") | Some("Unhealthy") | Some("Updating")) {
        (
            "Unhealthy",
            "NotHealthy",
            format!("{ready_replicas} of {replicas} ready; health check {}", if healthy { "passes" } else { "fails" }),
        )
    } else {
        ("Provisioning", "Provisioning", format!("{ready_replicas} of {replicas} ready"))
    };
    let mut conditions = vec![condition("Ready", all_ready, reason, message, generation), not_paused(generation)];
    conditions.push(match refusals.first() {
        Some(refusal) => condition("SpecAccepted", false, "Refused", refusal.clone(), generation),
        None => condition("SpecAccepted", true, "Accepted", "", generation),
    });
    NestedComponentStatus {
        phase: Some(phase.into()),
        healthy: all_ready,
        // The version runs once it has rolled out and is ready.
        version: if all_ready { version } else { running },
        replicas: Some(replicas),
        ready_replicas: Some(ready_replicas),
        conditions: Some(keep_transitions(previous.and_then(|p| p.conditions.as_ref()), conditions)),
        observed_generation: generation,
        ..Default::default()
    }
}

/// The tenant key of the cluster `names` name: its Cluster's key, as the syncer computes it
/// ([`nest_core::tenancy::cluster_key`]); without a Cluster (a control plane the syncer does not serve) a key of its
/// own, which no Cluster's can be (a Cluster's starts with its namespace, never with `x.`), so that such a control
/// plane is still walled off from every tenant and from the platform's pods.
fn tenant_key(names: &render::Names, cluster: Option<&Cluster>) -> String {
    match cluster.and_then(|c| c.metadata.uid.clone()) {
        Some(uid) => nest_core::tenancy::cluster_key(&names.namespace, &names.cluster, &uid),
        None => nest_core::tenancy::label_safe(&format!("x.{}.{}", names.namespace, names.cluster)),
    }
}

/// Puts the tenant label on `object`, and on the pods a workload of it makes.
fn label_tenant(object: &mut Value, key: &str) {
    use nest_core::tenancy::TENANT_LABEL;
    object["metadata"]["labels"][TENANT_LABEL] = json!(key);
    if object["spec"]["template"].is_object() {
        object["spec"]["template"]["metadata"]["labels"][TENANT_LABEL] = json!(key);
    }
}
