//! What each component runs, rendered from its spec without an API server: the values a package's templates are
//! filled with ([`crate::package`]), the rendering, then the component's `patches`. Pure functions, so that what the
//! controllers apply is also what `nest render` prints and what the golden tests check.
//!
//! Some values are addresses the management cluster gives out: the ClusterIPs of the component's Services (the API
//! server's certificate names its Service's address; etcd members find each other at their Services' addresses in
//! the `nest` flavor). They are inputs; a document that needs one not known yet is left out of [`Rendered::objects`]
//! and named in [`Rendered::waiting`], and the controllers apply the Services first.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::api::{APIServerLimits, CLUSTER_NAME_LABEL, ComponentPatch, Flavor, NestedComponentSpec, PatchType};
use crate::package::{self, DEFAULT_CHANNEL, Packages};

pub use crate::package::Rendered;

/// nest's image, at this build's version (the nodes' allowlist maps it to the `nest` binary).
pub fn nest_image() -> String {
    format!("ghcr.io/nest-dev/nest:{}", env!("CARGO_PKG_VERSION"))
}

/// The port tenant API servers serve on.
pub const API_SERVER_PORT: i32 = 6443;
/// The port etcd serves clients on.
pub const ETCD_CLIENT_PORT: i32 = 2379;
/// The label naming which component a pod or Service belongs to.
pub const COMPONENT_LABEL: &str = "controlplane.cluster.x-k8s.io/component";
/// The tenant's Service range when its Cluster names none (kubeadm's default).
pub const DEFAULT_SERVICE_CIDR: &str = "10.96.0.0/12";

/// The three components of a control plane.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    Etcd,
    ApiServer,
    ControllerManager,
}

impl Component {
    /// The package file and label value of the component.
    pub fn file(self) -> &'static str {
        match self {
            Component::Etcd => "etcd",
            Component::ApiServer => "apiserver",
            Component::ControllerManager => "controller-manager",
        }
    }
}

/// The names of everything one cluster's control plane is made of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Names {
    pub cluster: String,
    pub namespace: String,
}

impl Names {
    pub fn ca_secret(&self) -> String {
        format!("{}-ca", self.cluster)
    }
    /// The etcd CA (Cluster API's `<cluster>-etcd`).
    pub fn etcd_ca_secret(&self) -> String {
        format!("{}-etcd", self.cluster)
    }
    /// etcd's serving and peer certificate, with the etcd CA's certificate.
    pub fn etcd_server_secret(&self) -> String {
        format!("{}-etcd-server", self.cluster)
    }
    pub fn apiserver_etcd_client_secret(&self) -> String {
        format!("{}-apiserver-etcd-client", self.cluster)
    }
    /// The front-proxy CA (Cluster API's `<cluster>-proxy`) and its client.
    pub fn proxy_secret(&self) -> String {
        format!("{}-proxy", self.cluster)
    }
    pub fn proxy_client_secret(&self) -> String {
        format!("{}-proxy-client", self.cluster)
    }
    /// The service-account signing key pair (Cluster API's `<cluster>-sa`).
    pub fn sa_secret(&self) -> String {
        format!("{}-sa", self.cluster)
    }
    /// The kubernetes flavor's API server serving certificate.
    pub fn apiserver_serving_secret(&self) -> String {
        format!("{}-apiserver-serving", self.cluster)
    }
    pub fn kubeconfig_secret(&self) -> String {
        format!("{}-kubeconfig", self.cluster)
    }
    pub fn controller_manager_kubeconfig_secret(&self) -> String {
        format!("{}-controller-manager-kubeconfig", self.cluster)
    }
    /// The syncer's kubeconfig for the tenant ([`crate::identity`]).
    pub fn syncer_kubeconfig_secret(&self) -> String {
        format!("{}-syncer-kubeconfig", self.cluster)
    }
    /// The Service and StatefulSet of the API server.
    pub fn api_server(&self) -> String {
        format!("{}-apiserver", self.cluster)
    }
    pub fn controller_manager(&self) -> String {
        format!("{}-controller-manager", self.cluster)
    }
    /// The etcd client Service and StatefulSet.
    pub fn etcd(&self) -> String {
        format!("{}-etcd", self.cluster)
    }
    /// The name of etcd member `ordinal` (its pod, and in the `nest` flavor its Service).
    pub fn etcd_member(&self, ordinal: i32) -> String {
        format!("{}-etcd-{ordinal}", self.cluster)
    }
    /// The StatefulSet of `component`.
    pub fn workload(&self, component: Component) -> String {
        match component {
            Component::Etcd => self.etcd(),
            Component::ApiServer => self.api_server(),
            Component::ControllerManager => self.controller_manager(),
        }
    }
    /// The labels of `component`'s objects.
    pub fn labels(&self, component: Component) -> Value {
        json!({CLUSTER_NAME_LABEL: self.cluster, COMPONENT_LABEL: component.file()})
    }
}

/// Everything a component's rendering depends on.
#[derive(Clone, Debug)]
pub struct Inputs<'a> {
    pub flavor: Flavor,
    pub names: &'a Names,
    pub spec: &'a NestedComponentSpec,
    /// What an API server holds its clients to (other components have none).
    pub limits: &'a APIServerLimits,
    /// Whether the control plane has an etcd (else a `nest` API server keeps its data itself).
    pub with_etcd: bool,
    /// The tenant's Service range.
    pub service_cidr: &'a str,
    /// The ClusterIPs of the Services that exist: name → address.
    pub cluster_ips: &'a BTreeMap<String, String>,
}

/// Why a component cannot be rendered.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Package(#[from] package::Error),
    #[error("the component has no version")]
    NoVersion,
    #[error("patch {index} ({kind} {name}): {message}")]
    Patch { index: usize, kind: String, name: String, message: String },
}

/// The number of instances `inputs` asks for: etcd members are 1, 3 or 5; an API server without etcd runs alone.
pub fn replicas(component: Component, inputs: &Inputs) -> i32 {
    let asked = inputs.spec.replicas.unwrap_or(1).max(1);
    match component {
        Component::ApiServer if !inputs.with_etcd && inputs.flavor == Flavor::Nest => 1,
        _ => asked,
    }
}

/// What `component` of `flavor` asks for and may take when its spec does not say: requests about what it takes idle
/// and a memory limit, without a CPU limit, as kubeadm-like setups do (a CPU limit throttles an API server answering
/// a burst; memory is what one tenant's flood must not take from the others). The `nest` flavor's are sized to nest's
/// processes (an idle tenant's API server and controller-manager take about 25 MiB together), so that a 4-core,
/// 8 GiB node holds a hundred tenants; the `kubernetes` flavor's CPU requests are kubeadm's.
pub fn default_resources(flavor: Flavor, component: Component) -> Value {
    let (cpu, memory, limit) = match (flavor, component) {
        (Flavor::Nest, Component::ApiServer) => ("10m", "32Mi", "1Gi"),
        (Flavor::Nest, Component::ControllerManager) => ("5m", "16Mi", "512Mi"),
        (Flavor::Nest, Component::Etcd) => ("10m", "64Mi", "1Gi"),
        (Flavor::Kubernetes, Component::ApiServer) => ("250m", "256Mi", "2Gi"),
        (Flavor::Kubernetes, Component::ControllerManager) => ("200m", "128Mi", "1Gi"),
        (Flavor::Kubernetes, Component::Etcd) => ("100m", "128Mi", "2Gi"),
    };
    json!({"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": limit}})
}

/// The resources of `component`'s container: what its spec gives, and for each default it does not give, the
/// default ([`default_resources`]) — a request only where the spec sets neither a request nor a limit of that
/// resource (a limit alone is the request too), and a memory limit never below the memory requested.
pub fn resources(flavor: Flavor, component: Component, spec: &NestedComponentSpec) -> Value {
    let mut out = spec.resources.as_ref().map(|r| serde_json::to_value(r).unwrap_or_default()).unwrap_or(json!({}));
    if !out.is_object() {
        out = json!({});
    }
    let defaults = default_resources(flavor, component);
    let amount = |value: &Value, field: &str, resource: &str| {
        value[field][resource].as_str().and_then(nest_core::quantity::value)
    };
    for (resource, request) in defaults["requests"].as_object().into_iter().flatten() {
        if out["requests"].get(resource).is_none() && out["limits"].get(resource).is_none() {
            out["requests"][resource] = request.clone();
        }
    }
    for (resource, limit) in defaults["limits"].as_object().into_iter().flatten() {
        if out["limits"].get(resource).is_some() {
            continue;
        }
        let asked = out["requests"][resource].clone();
        let above = amount(&out, "requests", resource) > amount(&defaults, "limits", resource);
        out["limits"][resource] = if above { asked } else { limit.clone() };
    }
    out
}

/// The values `component`'s templates are filled with.
pub fn values(component: Component, inputs: &Inputs) -> Result<BTreeMap<String, String>, Error> {
    let names = inputs.names;
    let version = inputs.spec.version.clone().ok_or(Error::NoVersion)?;
    let mut values: BTreeMap<String, String> = [
        ("cluster", names.cluster.clone()),
        ("namespace", names.namespace.clone()),
        ("version", version),
        ("replicas", replicas(component, inputs).to_string()),
        ("resources", resources(inputs.flavor, component, inputs.spec).to_string()),
        ("nestImage", nest_image()),
        ("serviceCIDR", inputs.service_cidr.to_string()),
        ("etcd", if inputs.with_etcd { "true" } else { "" }.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    if component == Component::ApiServer {
        // Bounded by the CRD's schema; held again here, for `nest render`'s input, which no server checked: a value
        // outside what the schema allows is left out (the flag keeps its default) rather than given to a server
        // that would refuse to start with it.
        let limits = [
            ("maxConnections", inputs.limits.max_connections, 1..=1_048_576),
            ("maxRequestsInflightPerUser", inputs.limits.max_requests_inflight_per_user, 1..=100_000),
            ("maxRequestBytes", inputs.limits.max_request_bytes, 1024..=67_108_864),
            ("watchCacheSize", inputs.limits.watch_cache_size, 1..=100_000),
        ];
        for (name, limit, allowed) in limits {
            if let Some(limit) = limit.filter(|n| allowed.contains(n)) {
                values.insert(name.into(), limit.to_string());
            }
        }
    }
    let ip = |service: &str| inputs.cluster_ips.get(service).cloned();
    if let Some(address) = ip(&names.api_server()) {
        values.insert("apiServerIP".into(), address);
    }
    if let Some(address) = ip(&names.etcd()) {
        values.insert("etcdClientIP".into(), address);
    }
    if component == Component::Etcd {
        let members: Vec<String> = (0..replicas(component, inputs)).map(|i| names.etcd_member(i)).collect();
        values.insert("members".into(), members.join(","));
        let by_name: Vec<String> = members
            .iter()
            .map(|m| format!("{m}=https://{m}.{}-etcd-peer.{}.svc:2380", names.cluster, names.namespace))
            .collect();
        values.insert("initialClusterByName".into(), by_name.join(","));
        let by_address: Option<Vec<String>> =
            members.iter().map(|m| ip(m).map(|address| format!("{m}=https://{address}:2380"))).collect();
        if let Some(by_address) = by_address {
            values.insert("initialClusterByAddress".into(), by_address.join(","));
        }
    }
    Ok(values)
}

/// Renders `component` from its package and applies its patches.
pub fn render(packages: &Packages, component: Component, inputs: &Inputs) -> Result<Rendered, Error> {
    let version = inputs.spec.version.clone().ok_or(Error::NoVersion)?;
    let channel = inputs.spec.channel.as_deref().unwrap_or(DEFAULT_CHANNEL);
    let template = packages.template(inputs.flavor, channel, &version, component.file())?;
    let mut rendered = template.render(&values(component, inputs)?)?;
    // While some documents wait for a value (the API server's StatefulSet for its Service's address), a patch of
    // them has nothing to change yet; it is applied, and a misspelt one refused, once they are rendered.
    let partial = !rendered.waiting.is_empty();
    for (index, patch) in inputs.spec.patches.iter().flatten().enumerate() {
        apply_patch(&mut rendered.objects, patch, partial).map_err(|message| Error::Patch {
            index,
            kind: patch.kind.clone(),
            name: patch.name.clone().unwrap_or_else(|| "*".into()),
            message,
        })?;
    }
    Ok(rendered)
}

/// Applies one patch to the rendered objects it chooses; with `partial` (not every document rendered yet), choosing
/// none is no mistake.
fn apply_patch(objects: &mut [Value], patch: &ComponentPatch, partial: bool) -> Result<(), String> {
    let mut matched = false;
    for object in objects.iter_mut() {
        let kind_matches = object["kind"].as_str() == Some(patch.kind.as_str());
        let name_matches = patch.name.as_deref().is_none_or(|n| object["metadata"]["name"].as_str() == Some(n));
        if !(kind_matches && name_matches) {
            continue;
        }
        matched = true;
        match patch.type_ {
            PatchType::Json => nest_core::patch::json_patch(object, &patch.patch).map_err(|e| e.0)?,
            PatchType::Merge => merge_by_name(object, &patch.patch),
        }
    }
    // A patch that changes nothing is a mistake the user wants to hear about (a misspelt name).
    if !matched && !partial {
        return Err("no rendered object has this kind and name".into());
    }
    Ok(())
}

/// A merge patch (RFC 7386) whose lists of named objects (containers, env, volumes, ports…) merge item by item by
/// name, as strategic merge patch does for them; an item `{"name": N, "$patch": "delete"}` removes N.
pub fn merge_by_name(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    target.remove(key);
                } else if let Some(existing) = target.get_mut(key) {
                    merge_by_name(existing, value);
                } else {
                    let mut fresh = Value::Null;
                    merge_by_name(&mut fresh, value);
                    target.insert(key.clone(), fresh);
                }
            }
        }
        (Value::Array(target), Value::Array(patch)) if named(target) && named(patch) => {
            for item in patch {
                let name = item["name"].clone();
                let position = target.iter().position(|t| t["name"] == name);
                let delete = item.get("$patch").and_then(Value::as_str) == Some("delete");
                match (position, delete) {
                    (Some(at), true) => {
                        target.remove(at);
                    }
                    (Some(at), false) => merge_by_name(&mut target[at], item),
                    (None, true) => {}
                    (None, false) => target.push(item.clone()),
                }
            }
        }
        (target, patch) => *target = strip_directives(patch),
    }
}

fn named(items: &[Value]) -> bool {
    !items.is_empty() && items.iter().all(|i| i.get("name").is_some_and(Value::is_string))
}

fn strip_directives(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, v)| !k.starts_with("$patch") && !v.is_null())
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

pub use nest_core::json::covers;

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs<'a>(
        names: &'a Names,
        spec: &'a NestedComponentSpec,
        ips: &'a BTreeMap<String, String>,
        with_etcd: bool,
    ) -> Inputs<'a> {
        static NO_LIMITS: APIServerLimits = APIServerLimits {
            max_connections: None,
            max_requests_inflight_per_user: None,
            max_request_bytes: None,
            watch_cache_size: None,
        };
        Inputs {
            flavor: Flavor::Nest,
            names,
            spec,
            limits: &NO_LIMITS,
            with_etcd,
            service_cidr: DEFAULT_SERVICE_CIDR,
            cluster_ips: ips,
        }
    }

    fn spec() -> NestedComponentSpec {
        NestedComponentSpec { version: Some("v1.33.0".into()), ..Default::default() }
    }

    #[test]
    fn drift_is_a_change_to_what_was_rendered_not_an_addition() {
        let names = Names { cluster: "demo".into(), namespace: "tenants".into() };
        let ips = BTreeMap::from([("demo-apiserver".to_string(), "127.96.0.10".to_string())]);
        let spec = spec();
        let rendered = render(&Packages::default(), Component::ApiServer, &inputs(&names, &spec, &ips, false)).unwrap();
        let wanted = rendered.objects.iter().find(|o| o["kind"] == "StatefulSet").unwrap().clone();
        let mut live = wanted.clone();
        live["spec"]["template"]["spec"]["containers"][0]["terminationMessagePath"] = json!("/dev/termination-log");
        live["spec"]["podManagementPolicy"] = json!("OrderedReady");
        assert!(covers(&live, &wanted), "server defaults are not drift");
        live["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx");
        assert!(!covers(&live, &wanted), "a changed image is drift");
        let args = wanted["spec"]["template"]["spec"]["containers"][0]["args"].as_array().unwrap();
        assert!(args.iter().any(|a| a == "--tls-san=127.96.0.10"), "{args:?}");
        assert!(args.iter().any(|a| a == "--tls-san=demo-apiserver.tenants.svc"), "{args:?}");
    }

    #[test]
    fn the_statefulset_waits_for_its_service_address() {
        let names = Names { cluster: "demo".into(), namespace: "tenants".into() };
        let none = BTreeMap::new();
        let spec = spec();
        let rendered =
            render(&Packages::default(), Component::ApiServer, &inputs(&names, &spec, &none, false)).unwrap();
        let kinds: Vec<&str> = rendered.objects.iter().filter_map(|o| o["kind"].as_str()).collect();
        assert_eq!(kinds, ["Service"]);
        assert_eq!(rendered.waiting, ["apiServerIP"]);
    }

    #[test]
    fn etcd_members_know_each_other() {
        let names = Names { cluster: "t".into(), namespace: "ns".into() };
        let spec = NestedComponentSpec { replicas: Some(3), ..spec() };
        let ips: BTreeMap<String, String> =
            (0..3).map(|i| (format!("t-etcd-{i}"), format!("127.96.0.{}", 20 + i))).collect();
        let rendered = render(&Packages::default(), Component::Etcd, &inputs(&names, &spec, &ips, true)).unwrap();
        let services: Vec<&str> = rendered
            .objects
            .iter()
            .filter(|o| o["kind"] == "Service")
            .filter_map(|o| o["metadata"]["name"].as_str())
            .collect();
        assert_eq!(services, ["t-etcd", "t-etcd-0", "t-etcd-1", "t-etcd-2"]);
        let set = rendered.objects.iter().find(|o| o["kind"] == "StatefulSet").unwrap();
        assert_eq!(set["spec"]["replicas"], 3);
        let args = set["spec"]["template"]["spec"]["containers"][0]["args"].as_array().unwrap();
        let initial = "--initial-cluster=t-etcd-0=https://127.96.0.20:2380,t-etcd-1=https://127.96.0.21:2380,\
                       t-etcd-2=https://127.96.0.22:2380";
        assert!(args.iter().any(|a| a == initial), "{args:?}");

        // The kubernetes flavor finds members by DNS name, so it waits for no address.
        let no_addresses = BTreeMap::new();
        let kubernetes = Inputs { flavor: Flavor::Kubernetes, ..inputs(&names, &spec, &no_addresses, true) };
        let rendered = render(&Packages::default(), Component::Etcd, &kubernetes).unwrap();
        assert!(rendered.waiting.is_empty(), "{:?}", rendered.waiting);
        let set = rendered.objects.iter().find(|o| o["kind"] == "StatefulSet").unwrap();
        let command = set["spec"]["template"]["spec"]["containers"][0]["command"].as_array().unwrap();
        assert!(command.iter().any(|a| a
            == "--initial-cluster=t-etcd-0=https://t-etcd-0.t-etcd-peer.ns.svc:2380,\
                                             t-etcd-1=https://t-etcd-1.t-etcd-peer.ns.svc:2380,\
                                             t-etcd-2=https://t-etcd-2.t-etcd-peer.ns.svc:2380"));
    }

    #[test]
    fn an_api_server_without_etcd_runs_alone() {
        let names = Names { cluster: "t".into(), namespace: "ns".into() };
        let spec = NestedComponentSpec { replicas: Some(3), ..spec() };
        let ips = BTreeMap::from([("t-apiserver".to_string(), "10.0.0.1".to_string())]);
        assert_eq!(replicas(Component::ApiServer, &inputs(&names, &spec, &ips, false)), 1);
        assert_eq!(replicas(Component::ApiServer, &inputs(&names, &spec, &ips, true)), 3);
    }

    #[test]
    fn patches_change_what_they_name_and_fail_on_nothing() {
        let names = Names { cluster: "t".into(), namespace: "ns".into() };
        let ips = BTreeMap::from([("t-apiserver".to_string(), "10.0.0.1".to_string())]);
        let mut spec = spec();
        spec.patches = Some(vec![
            ComponentPatch {
                kind: "StatefulSet".into(),
                name: None,
                type_: PatchType::Merge,
                patch: json!({"spec": {"template": {"spec": {"containers": [
                    {"name": "apiserver", "env": [{"name": "RUST_LOG", "value": "debug"}]},
                ]}}}}),
            },
            ComponentPatch {
                kind: "Service".into(),
                name: Some("t-apiserver".into()),
                type_: PatchType::Json,
                patch: json!([{"op": "add", "path": "/spec/type", "value": "NodePort"}]),
            },
        ]);
        let rendered = render(&Packages::default(), Component::ApiServer, &inputs(&names, &spec, &ips, false)).unwrap();
        let set = rendered.objects.iter().find(|o| o["kind"] == "StatefulSet").unwrap();
        let container = &set["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["image"], nest_image(), "the rest of the container stays");
        let env = container["env"].as_array().unwrap();
        assert_eq!(env.len(), 2, "merged by name into the rendered env: {env:?}");
        let service = rendered.objects.iter().find(|o| o["kind"] == "Service").unwrap();
        assert_eq!(service["spec"]["type"], "NodePort");

        spec.patches = Some(vec![ComponentPatch {
            kind: "Deployment".into(),
            name: None,
            type_: PatchType::Merge,
            patch: json!({}),
        }]);
        let error =
            render(&Packages::default(), Component::ApiServer, &inputs(&names, &spec, &ips, false)).unwrap_err();
        assert!(error.to_string().contains("no rendered object"), "{error}");

        // Before its Service has an address, the API server's StatefulSet is not rendered: a patch of it (a larger
        // data claim) waits for it rather than failing the component.
        let claim = "/spec/volumeClaimTemplates/0/spec/resources/requests/storage";
        spec.patches = Some(vec![ComponentPatch {
            kind: "StatefulSet".into(),
            name: None,
            type_: PatchType::Json,
            patch: json!([{"op": "replace", "path": claim, "value": "4Gi"}]),
        }]);
        let no_address = BTreeMap::new();
        let waiting = render(&Packages::default(), Component::ApiServer, &inputs(&names, &spec, &no_address, false));
        let waiting = waiting.unwrap();
        assert!(!waiting.waiting.is_empty() && waiting.objects.iter().all(|o| o["kind"] != "StatefulSet"));
        let rendered = render(&Packages::default(), Component::ApiServer, &inputs(&names, &spec, &ips, false)).unwrap();
        let set = rendered.objects.iter().find(|o| o["kind"] == "StatefulSet").unwrap();
        assert_eq!(set["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"], "4Gi");
    }

    #[test]
    fn every_component_asks_for_what_it_takes_and_has_a_memory_limit_unless_its_spec_says_otherwise() {
        let names = Names { cluster: "t".into(), namespace: "ns".into() };
        let ips: BTreeMap<String, String> =
            [("t-apiserver", "10.0.0.1"), ("t-etcd", "10.0.0.2"), ("t-etcd-0", "10.0.0.3")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        let container = |component: Component, spec: &NestedComponentSpec| {
            let rendered = render(&Packages::default(), component, &inputs(&names, spec, &ips, true)).unwrap();
            let set = rendered.objects.iter().find(|o| o["kind"] == "StatefulSet").unwrap().clone();
            set["spec"]["template"]["spec"]["containers"][0]["resources"].clone()
        };
        let spec = spec();
        for (component, wanted) in [
            (Component::ApiServer, json!({"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "1Gi"}})),
            (
                Component::ControllerManager,
                json!({"requests": {"cpu": "5m", "memory": "16Mi"}, "limits": {"memory": "512Mi"}}),
            ),
            (Component::Etcd, json!({"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "1Gi"}})),
        ] {
            assert_eq!(container(component, &spec), wanted, "{component:?}");
        }
        for component in [Component::ApiServer, Component::ControllerManager, Component::Etcd] {
            let upstream = default_resources(Flavor::Kubernetes, component);
            assert!(upstream["requests"]["cpu"].is_string() && upstream["limits"]["memory"].is_string());
            assert!(upstream["limits"].get("cpu").is_none(), "no CPU limit throttles a control plane");
        }
        // Given in part: the rest defaulted resource by resource.
        let given = |resources: Value| NestedComponentSpec {
            resources: Some(serde_json::from_value(resources).unwrap()),
            ..spec.clone()
        };
        assert_eq!(
            container(Component::ApiServer, &given(json!({"requests": {"cpu": "1"}}))),
            json!({"requests": {"cpu": "1", "memory": "32Mi"}, "limits": {"memory": "1Gi"}})
        );
        assert_eq!(
            container(Component::ApiServer, &given(json!({"limits": {"memory": "4Gi", "cpu": "2"}}))),
            json!({"limits": {"memory": "4Gi", "cpu": "2"}}),
            "a limit alone is the request too"
        );
        assert_eq!(
            container(Component::ApiServer, &given(json!({"requests": {"memory": "3Gi"}}))),
            json!({"requests": {"cpu": "10m", "memory": "3Gi"}, "limits": {"memory": "3Gi"}}),
            "a memory limit never below what is asked for"
        );
    }

    #[test]
    fn the_api_servers_limits_are_its_flags() {
        let names = Names { cluster: "t".into(), namespace: "ns".into() };
        let ips = BTreeMap::from([("t-apiserver".to_string(), "10.0.0.1".to_string())]);
        let spec = spec();
        let args = |limits: &APIServerLimits, component: Component| -> Vec<Value> {
            let inputs = Inputs { limits, ..inputs(&names, &spec, &ips, false) };
            let rendered = render(&Packages::default(), component, &inputs).unwrap();
            let set = rendered.objects.iter().find(|o| o["kind"] == "StatefulSet").unwrap().clone();
            set["spec"]["template"]["spec"]["containers"][0]["args"].as_array().unwrap().clone()
        };
        let flags = |args: &[Value]| -> Vec<String> {
            args.iter()
                .filter_map(Value::as_str)
                .filter(|a| a.starts_with("--max-") || a.starts_with("--default-watch-cache-size"))
                .map(str::to_string)
                .collect()
        };
        assert!(
            flags(&args(&APIServerLimits::default(), Component::ApiServer)).is_empty(),
            "nest apiserver's defaults"
        );
        let limits = APIServerLimits {
            max_connections: Some(500),
            max_requests_inflight_per_user: Some(20),
            max_request_bytes: Some(1_048_576),
            watch_cache_size: Some(100),
        };
        assert_eq!(
            flags(&args(&limits, Component::ApiServer)),
            [
                "--max-connections=500",
                "--max-requests-inflight-per-user=20",
                "--max-request-bytes=1048576",
                "--default-watch-cache-size=100"
            ]
        );
        assert!(flags(&args(&limits, Component::ControllerManager)).is_empty());
        // Past the schema (`nest render` reads objects no server checked): nothing outside it is rendered.
        let nonsense = APIServerLimits {
            max_connections: Some(0),
            max_requests_inflight_per_user: Some(i32::MIN),
            max_request_bytes: Some(-1),
            watch_cache_size: Some(0),
        };
        assert!(flags(&args(&nonsense, Component::ApiServer)).is_empty());
        let beyond = APIServerLimits {
            max_connections: Some(i32::MAX),
            max_requests_inflight_per_user: Some(100_001),
            max_request_bytes: Some(1023),
            watch_cache_size: Some(100_001),
        };
        assert!(flags(&args(&beyond, Component::ApiServer)).is_empty());
        let too_big = APIServerLimits { max_request_bytes: Some(67_108_865), ..Default::default() };
        assert!(flags(&args(&too_big, Component::ApiServer)).is_empty());
        // The bounds themselves are taken.
        let edges = APIServerLimits {
            max_connections: Some(1_048_576),
            max_requests_inflight_per_user: Some(1),
            max_request_bytes: Some(1024),
            watch_cache_size: Some(100_000),
        };
        assert_eq!(flags(&args(&edges, Component::ApiServer)).len(), 4);
    }

    #[test]
    fn merge_by_name_deletes_and_replaces() {
        let mut target = json!({"env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}], "args": ["x"]});
        merge_by_name(&mut target, &json!({"env": [{"name": "A", "$patch": "delete"}], "args": ["y", "z"]}));
        assert_eq!(target, json!({"env": [{"name": "B", "value": "2"}], "args": ["y", "z"]}));
    }
}
