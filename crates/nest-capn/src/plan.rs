//! What a control plane is made of, worked out from its NestedControlPlane (and Cluster) alone: the flavor, whether
//! it has an etcd, the tenant's Service range, and each component's spec. The controllers and `nest render` both use
//! it, so that what is printed is what is applied.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::api::{
    APIServerLimits, CLUSTER_NAME_LABEL, Cluster, Flavor, NestedAPIServer, NestedComponentSpec, NestedControlPlane,
    NestedControllerManager, NestedEtcd,
};
use crate::package::Packages;
use crate::render::{self, Component, DEFAULT_SERVICE_CIDR, Inputs, Names};

/// The shape of one control plane.
#[derive(Clone, Debug)]
pub struct Plan {
    pub names: Names,
    pub flavor: Flavor,
    /// Whether an etcd runs: always with the `kubernetes` flavor; with `nest`, when the control plane names or
    /// configures a NestedEtcd.
    pub with_etcd: bool,
    pub service_cidr: String,
}

impl Plan {
    pub fn of(plane: &NestedControlPlane, cluster: Option<&Cluster>) -> Plan {
        let meta = &plane.metadata;
        let label = meta.labels.as_ref().and_then(|l| l.get(CLUSTER_NAME_LABEL)).cloned();
        let names = Names {
            cluster: label.unwrap_or_else(|| meta.name.clone().unwrap_or_default()),
            namespace: meta.namespace.clone().unwrap_or_else(|| "default".into()),
        };
        let with_etcd = plane.spec.flavor == Flavor::Kubernetes
            || plane.spec.etcd.is_some()
            || plane.spec.components.as_ref().is_some_and(|c| c.etcd.is_some());
        let service_cidr = cluster
            .and_then(|c| c.spec.cluster_network.as_ref())
            .and_then(|n| n.services.as_ref())
            .and_then(|s| s.cidr_blocks.first().cloned())
            .unwrap_or_else(|| DEFAULT_SERVICE_CIDR.into());
        Plan { names, flavor: plane.spec.flavor, with_etcd, service_cidr }
    }

    /// The components, in the order they are upgraded: etcd, the API servers, the controller-managers.
    pub fn components(&self) -> Vec<Component> {
        let mut components = vec![Component::ApiServer, Component::ControllerManager];
        if self.with_etcd {
            components.insert(0, Component::Etcd);
        }
        components
    }

    /// The inputs of `component`'s rendering (`limits`: an API server's, else unused).
    pub fn inputs<'a>(
        &'a self,
        spec: &'a NestedComponentSpec,
        limits: &'a APIServerLimits,
        cluster_ips: &'a BTreeMap<String, String>,
    ) -> Inputs<'a> {
        Inputs {
            flavor: self.flavor,
            names: &self.names,
            spec,
            limits,
            with_etcd: self.with_etcd,
            service_cidr: &self.service_cidr,
            cluster_ips,
        }
    }
}

/// The limits a control plane gives the API server it creates (its `components.apiServer`).
pub fn api_server_limits(plane: &NestedControlPlane) -> APIServerLimits {
    plane.spec.components.as_ref().and_then(|c| c.api_server.as_ref()).map(|a| a.limits.clone()).unwrap_or_default()
}

/// The spec a control plane gives the component it creates: its override, at `version` unless that names one.
pub fn component_spec(plane: &NestedControlPlane, component: Component, version: &str) -> NestedComponentSpec {
    let overrides = plane.spec.components.clone().unwrap_or_default();
    let given = match component {
        Component::Etcd => overrides.etcd,
        Component::ApiServer => overrides.api_server.map(|a| a.component),
        Component::ControllerManager => overrides.controller_manager,
    };
    let mut spec = given.unwrap_or_default();
    spec.version = spec.version.or_else(|| Some(version.to_string()));
    spec
}

/// What `nest render` prints for a set of objects read from YAML: every manifest of every component of every
/// NestedControlPlane among them, with the components' own objects (NestedEtcd, …) used where given and the Services
/// given supplying ClusterIPs. Returns the manifests and notes on what could not be rendered yet.
pub fn render_objects(objects: &[Value], packages: &Packages) -> Result<(Vec<Value>, Vec<String>), String> {
    fn of_kind<'a>(objects: &'a [Value], kind: &'a str) -> impl Iterator<Item = &'a Value> {
        objects.iter().filter(move |o| o["kind"] == kind)
    }
    let cluster_ips: BTreeMap<String, String> = of_kind(objects, "Service")
        .filter_map(|s| {
            let ip = s["spec"]["clusterIP"].as_str().filter(|ip| !ip.is_empty() && *ip != "None")?;
            Some((s["metadata"]["name"].as_str()?.to_string(), ip.to_string()))
        })
        .collect();
    let clusters: Vec<Cluster> = parse_all(of_kind(objects, "Cluster"))?;
    let etcds: Vec<NestedEtcd> = parse_all(of_kind(objects, "NestedEtcd"))?;
    let api_servers: Vec<NestedAPIServer> = parse_all(of_kind(objects, "NestedAPIServer"))?;
    let managers: Vec<NestedControllerManager> = parse_all(of_kind(objects, "NestedControllerManager"))?;
    let mut manifests = Vec::new();
    let mut notes = Vec::new();
    let planes: Vec<NestedControlPlane> = parse_all(of_kind(objects, "NestedControlPlane"))?;
    if planes.is_empty() {
        return Err("no NestedControlPlane among the objects read".into());
    }
    for mut plane in planes {
        plane.metadata.namespace.get_or_insert_with(|| "default".into());
        let cluster = clusters.iter().find(|c| {
            c.spec.control_plane_ref.as_ref().is_some_and(|r| Some(&r.name) == plane.metadata.name.as_ref())
                && c.metadata.namespace.as_deref().unwrap_or("default") == plane.metadata.namespace.as_deref().unwrap()
        });
        let plan = Plan::of(&plane, cluster);
        for component in plan.components() {
            let reference = match component {
                Component::Etcd => plane.spec.etcd.as_ref(),
                Component::ApiServer => plane.spec.api_server.as_ref(),
                Component::ControllerManager => plane.spec.controller_manager.as_ref(),
            }
            .and_then(|r| r.name.clone());
            let named = |meta: &kube::api::ObjectMeta| reference.is_some() && meta.name == reference;
            let given = reference.as_ref().and_then(|_| match component {
                Component::Etcd => etcds.iter().find(|e| named(&e.metadata)).map(|e| e.spec.component.clone()),
                Component::ApiServer => {
                    api_servers.iter().find(|a| named(&a.metadata)).map(|a| a.spec.component.clone())
                }
                Component::ControllerManager => {
                    managers.iter().find(|m| named(&m.metadata)).map(|m| m.spec.component.clone())
                }
            });
            let limits = match api_servers.iter().find(|a| named(&a.metadata)) {
                Some(api_server) => api_server.spec.limits.clone(),
                None => api_server_limits(&plane),
            };
            let mut spec = match (&reference, given) {
                (_, Some(spec)) => spec,
                (None, None) => component_spec(&plane, component, &plane.spec.version),
                (Some(name), None) => {
                    return Err(format!("the control plane names {name}, which is not among the objects read"));
                }
            };
            spec.version.get_or_insert_with(|| plane.spec.version.clone());
            let rendered = render::render(packages, component, &plan.inputs(&spec, &limits, &cluster_ips))
                .map_err(|e| format!("{} of {}: {e}", component.file(), plan.names.cluster))?;
            manifests.extend(rendered.objects);
            if !rendered.waiting.is_empty() {
                notes.push(format!(
                    "{} of {}: not everything is rendered; it needs {} (give the Services, with their clusterIP, \
                     as input)",
                    component.file(),
                    plan.names.cluster,
                    rendered.waiting.join(", ")
                ));
            }
        }
    }
    Ok((manifests, notes))
}

fn parse_all<'a, K: serde::de::DeserializeOwned>(objects: impl Iterator<Item = &'a Value>) -> Result<Vec<K>, String> {
    objects
        .map(|o| serde_json::from_value(o.clone()).map_err(|e| format!("{} {}: {e}", o["kind"], o["metadata"]["name"])))
        .collect()
}
