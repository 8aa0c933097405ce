//! Endpoints and EndpointSlices, after kube-controller-manager's `endpoint` and `endpointslice` controllers (1.33):
//! for every Service with a selector, the pods it selects that have an IP — ready ones as addresses, the others as
//! not-ready addresses — with the Service's ports resolved against each pod (a named `targetPort` is looked up in the
//! pod's container ports), and the pod's `hostname` where it names the Service as its `subdomain`. The Endpoints
//! object has the Service's name; the one EndpointSlice per Service is found
//! by its `kubernetes.io/service-name` label. Both are owned by the Service, so the garbage collector removes them
//! with it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::expectations::{Expectations, version_of};
use crate::informers::{Informers, listed};
use crate::reconciling::Reconciling;
use crate::replicaset::is_ready;

/// The label naming an EndpointSlice's Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
const MANAGED_BY: (&str, &str) = ("endpointslice.kubernetes.io/managed-by", "endpointslice-controller.k8s.io");

struct Context {
    client: Client,
    pods: Store<Pod>,
    slices: Store<EndpointSlice>,
    /// Slices created or replaced that the cache does not show yet, by Service.
    expectations: Expectations<EndpointSlice>,
}

/// Runs the controllers until the process stops. A Service is looked at when it changes and when a pod its selector
/// picks changes.
pub(crate) async fn run(client: Client, caches: Informers) {
    let services = caches.services.store();
    let expectations = Expectations::new(&caches.endpoint_slices);
    let context = Arc::new(Context {
        client,
        pods: caches.pods.store(),
        slices: caches.endpoint_slices.store(),
        expectations: expectations.clone(),
    });
    let endpoints = Reconciling::new(&caches.services)
        .expects(&caches.endpoint_slices, &expectations)
        .watches(&caches.pods, move |pod| selecting_services(&services, pod))
        .run(reconcile, error_policy, context);
    crate::drive(endpoints, "endpoints").await;
}

/// The Services in the pod's namespace whose selectors match it.
fn selecting_services(services: &Store<Service>, pod: &Pod) -> Vec<ObjectRef<Service>> {
    let namespace = pod.namespace();
    services
        .state()
        .iter()
        .filter(|s| s.namespace() == namespace)
        .filter(|s| selects(s, pod.labels()))
        .map(|s| ObjectRef::from_obj(s.as_ref()))
        .collect()
}

fn selects(service: &Service, labels: &BTreeMap<String, String>) -> bool {
    let selector = service.spec.as_ref().and_then(|s| s.selector.as_ref());
    selector.is_some_and(|sel| !sel.is_empty() && sel.iter().all(|(k, v)| labels.get(k) == Some(v)))
}

fn error_policy(_: Arc<Service>, error: &kube::Error, _: Arc<Context>) -> Action {
    tracing::debug!(%error, "syncing a Service's endpoints");
    Action::requeue(Duration::from_secs(1))
}

/// The port a Service port reaches on `pod`, if it has it.
fn target_port(port: &k8s_openapi::api::core::v1::ServicePort, pod: &Pod) -> Option<i32> {
    match &port.target_port {
        None => Some(port.port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(name)) => pod
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .flat_map(|c| c.ports.iter().flatten())
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .map(|p| p.container_port),
    }
}

async fn reconcile(service: Arc<Service>, context: Arc<Context>) -> Result<Action, kube::Error> {
    let spec = service.spec.clone().unwrap_or_default();
    if service.metadata.deletion_timestamp.is_some() || spec.selector.as_ref().is_none_or(BTreeMap::is_empty) {
        return Ok(Action::await_change());
    }
    let (namespace, name) = (service.namespace().unwrap_or_default(), service.name_any());
    let uid = service.uid().unwrap_or_default();
    // A slice just created or replaced that the cache does not show yet would be created again.
    if !context.expectations.satisfied(&uid) {
        return Ok(Action::requeue(crate::expectations::EXPECTING));
    }
    let selected = listed(&context.pods, |p| {
        p.metadata.namespace.as_deref() == Some(namespace.as_str())
            && selects(&service, p.labels())
            && p.metadata.deletion_timestamp.is_none()
            && p.status.as_ref().and_then(|s| s.pod_ip.as_deref()).is_some_and(|ip| !ip.is_empty())
    });
    let ports = spec.ports.clone().unwrap_or_default();
    // `publishNotReadyAddresses`: every selected pod counts as ready (peers that must find each other before they
    // are ready, such as etcd members).
    let publish_all = spec.publish_not_ready_addresses == Some(true);
    let is_ready = |pod: &Pod| publish_all || is_ready(pod);

    // Endpoints: pods grouped by the ports they resolve to.
    let mut subsets: BTreeMap<String, Subset> = BTreeMap::new();
    let mut slice_endpoints = Vec::new();
    let mut slice_ports: Vec<Value> = Vec::new();
    for pod in &selected {
        let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap_or_default();
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        let target = json!({"kind": "Pod", "name": pod.name_any(), "namespace": namespace, "uid": pod.uid()});
        let resolved: Vec<Value> = ports
            .iter()
            .filter_map(|p| {
                target_port(p, pod).map(|port| {
                    json!({"name": p.name.clone().unwrap_or_default(), "port": port,
                           "protocol": p.protocol.clone().unwrap_or_else(|| "TCP".into())})
                })
            })
            .collect();
        let key = serde_json::to_string(&resolved).unwrap_or_default();
        let entry = subsets.entry(key).or_insert_with(|| (Vec::new(), Vec::new(), resolved.clone()));
        // The pod's own DNS name under the Service (`db-0.db`), as upstream sets it: the pod names a hostname and
        // this Service as its subdomain (a StatefulSet's pods do).
        let hostname = pod
            .spec
            .as_ref()
            .filter(|s| s.subdomain.as_deref() == Some(name.as_str()))
            .and_then(|s| s.hostname.clone())
            .filter(|h| !h.is_empty());
        let mut address = json!({"ip": ip, "nodeName": node, "targetRef": target});
        if let Some(hostname) = &hostname {
            address["hostname"] = json!(hostname);
        }
        if is_ready(pod) {
            entry.0.push(address)
        } else {
            entry.1.push(address)
        }
        if slice_ports.is_empty() {
            slice_ports = resolved.clone();
        }
        let mut endpoint = json!({
            "addresses": [ip], "nodeName": node, "targetRef": target,
            "conditions": {"ready": is_ready(pod), "serving": is_ready(pod), "terminating": false},
        });
        if let Some(hostname) = hostname {
            endpoint["hostname"] = json!(hostname);
        }
        slice_endpoints.push(endpoint);
    }
    let subsets: Vec<Value> = subsets
        .into_values()
        .map(|(ready, not_ready, ports)| {
            let mut subset = json!({"ports": ports});
            if !ready.is_empty() {
                subset["addresses"] = json!(ready);
            }
            if !not_ready.is_empty() {
                subset["notReadyAddresses"] = json!(not_ready);
            }
            subset
        })
        .collect();
    let owner = json!([{"apiVersion": "v1", "kind": "Service", "name": name, "uid": service.uid(),
                         "controller": true, "blockOwnerDeletion": true}]);

    let endpoints_api: Api<Endpoints> = Api::namespaced(context.client.clone(), &namespace);
    let wanted = json!({"apiVersion": "v1", "kind": "Endpoints",
                        "metadata": {"name": name, "namespace": namespace, "labels": service.labels(),
                                     "ownerReferences": owner},
                        "subsets": subsets});
    let current = endpoints_api.get_opt(&name).await?;
    let current_subsets = current.as_ref().map(|e| serde_json::to_value(&e.subsets).unwrap_or_default());
    let wanted_subsets = if subsets.is_empty() { Value::Null } else { wanted["subsets"].clone() };
    if current_subsets.as_ref() != Some(&wanted_subsets) {
        let mut endpoints: Endpoints = serde_json::from_value(wanted).map_err(kube::Error::SerdeError)?;
        match current {
            None => ignore_conflict(endpoints_api.create(&PostParams::default(), &endpoints).await)?,
            Some(current) => {
                endpoints.metadata.resource_version = current.metadata.resource_version;
                ignore_conflict(endpoints_api.replace(&name, &PostParams::default(), &endpoints).await)?
            }
        }
    }

    let slices: Api<EndpointSlice> = Api::namespaced(context.client.clone(), &namespace);
    let existing = listed(&context.slices, |s| {
        s.metadata.namespace.as_deref() == Some(namespace.as_str()) && s.labels().get(SERVICE_NAME_LABEL) == Some(&name)
    });
    let wanted = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"generateName": format!("{name}-"), "namespace": namespace,
                     "labels": {SERVICE_NAME_LABEL: name, MANAGED_BY.0: MANAGED_BY.1}, "ownerReferences": owner},
        "addressType": "IPv4", "endpoints": slice_endpoints, "ports": slice_ports,
    });
    let mut slice: EndpointSlice = serde_json::from_value(wanted).map_err(kube::Error::SerdeError)?;
    let expectations = &context.expectations;
    match existing.into_iter().next() {
        None => {
            expectations.expect_creations(&uid, 1);
            let created = slices.create(&PostParams::default(), &slice).await;
            if created.is_err() {
                expectations.creation_failed(&uid);
            }
            ignore_conflict(created)?
        }
        Some(current) if current.endpoints != slice.endpoints || current.ports != slice.ports => {
            slice.metadata.name = current.metadata.name.clone();
            slice.metadata.generate_name = None;
            slice.metadata.resource_version = current.metadata.resource_version.clone();
            expectations.expect_change(&uid, &current);
            let replaced = slices.replace(&current.name_any(), &PostParams::default(), &slice).await;
            expectations.answered(&uid, &current, &replaced, version_of);
            ignore_conflict(replaced)?
        }
        Some(_) => {}
    }
    Ok(Action::await_change())
}

/// One Endpoints subset being built: ready addresses, not-ready addresses, ports.
type Subset = (Vec<Value>, Vec<Value>, Vec<Value>);

fn ignore_conflict<T>(result: kube::Result<T>) -> kube::Result<()> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(error) => Err(error),
    }
}
