//! What each component runs, rendered from its spec without an API server: the `nest` flavor's Service and
//! StatefulSets. Pure functions, so that what the controllers apply can be printed and checked on its own.
//!
//! The `nest` flavor runs nest's own binary from nest's image, which the embedded super cluster's nodes run as
//! processes: the tenant API server keeps its data in a volume claim (embedded storage) and is given the cluster CA
//! from the `<cluster>-ca` Secret; the controller-manager reaches it through its Service with the
//! `<cluster>-controller-manager-kubeconfig` Secret.

use serde_json::{Value, json};

use crate::api::{CLUSTER_NAME_LABEL, NestedComponentSpec};

/// nest's image, at this build's version (the nodes' allowlist maps it to the `nest` binary).
pub fn nest_image() -> String {
    format!("ghcr.io/nest-dev/nest:{}", env!("CARGO_PKG_VERSION"))
}

/// The port tenant API servers serve on.
pub const API_SERVER_PORT: i32 = 6443;
/// The label naming which component a pod or Service belongs to.
pub const COMPONENT_LABEL: &str = "controlplane.cluster.x-k8s.io/component";

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
    pub fn kubeconfig_secret(&self) -> String {
        format!("{}-kubeconfig", self.cluster)
    }
    pub fn controller_manager_kubeconfig_secret(&self) -> String {
        format!("{}-controller-manager-kubeconfig", self.cluster)
    }
    /// The Service and StatefulSet of the API server.
    pub fn api_server(&self) -> String {
        format!("{}-apiserver", self.cluster)
    }
    pub fn controller_manager(&self) -> String {
        format!("{}-controller-manager", self.cluster)
    }
    fn labels(&self, component: &str) -> Value {
        json!({CLUSTER_NAME_LABEL: self.cluster, COMPONENT_LABEL: component})
    }
}

fn resources(spec: &NestedComponentSpec) -> Value {
    spec.resources.as_ref().map(|r| serde_json::to_value(r).unwrap_or_default()).unwrap_or_else(|| json!({}))
}

/// The API server's Service: a ClusterIP on port 6443 in front of its pods.
pub fn api_server_service(names: &Names) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": names.api_server(), "namespace": names.namespace, "labels": names.labels("apiserver")},
        "spec": {
            "selector": names.labels("apiserver"),
            "ports": [{"name": "https", "port": API_SERVER_PORT, "targetPort": API_SERVER_PORT, "protocol": "TCP"}],
        },
    })
}

/// The API server's StatefulSet; `service_ip` (the Service's ClusterIP) goes into its serving certificate.
pub fn api_server_statefulset(names: &Names, spec: &NestedComponentSpec, service_ip: &str) -> Value {
    let service = names.api_server();
    let args = vec![
        "apiserver".to_string(),
        format!("--listen=$(POD_IP):{API_SERVER_PORT}"),
        "--data-dir=/var/lib/nest".into(),
        "--ca-cert-file=/etc/nest/ca/tls.crt".into(),
        "--ca-key-file=/etc/nest/ca/tls.key".into(),
        format!("--tls-san={service_ip}"),
        format!("--tls-san={service}"),
        format!("--tls-san={service}.{}", names.namespace),
        format!("--tls-san={service}.{}.svc", names.namespace),
    ];
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": service, "namespace": names.namespace, "labels": names.labels("apiserver")},
        "spec": {
            "replicas": spec.replicas.unwrap_or(1),
            "serviceName": service,
            // The claim goes with the StatefulSet, and so with the cluster.
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Retain"},
            "selector": {"matchLabels": names.labels("apiserver")},
            "template": {
                "metadata": {"labels": names.labels("apiserver")},
                "spec": {
                    "containers": [{
                        "name": "apiserver",
                        "image": nest_image(),
                        "args": args,
                        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                        "ports": [{"name": "https", "containerPort": API_SERVER_PORT}],
                        "readinessProbe": {"httpGet": {"path": "/readyz", "port": API_SERVER_PORT, "scheme": "HTTPS"},
                                           "periodSeconds": 2},
                        "resources": resources(spec),
                        "volumeMounts": [
                            {"name": "ca", "mountPath": "/etc/nest/ca", "readOnly": true},
                            {"name": "data", "mountPath": "/var/lib/nest"},
                        ],
                    }],
                    "volumes": [{"name": "ca", "secret": {"secretName": names.ca_secret()}}],
                },
            },
            "volumeClaimTemplates": [{
                "metadata": {"name": "data"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
            }],
        },
    })
}

/// The controller-manager's StatefulSet.
pub fn controller_manager_statefulset(names: &Names, spec: &NestedComponentSpec) -> Value {
    let name = names.controller_manager();
    json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": names.namespace, "labels": names.labels("controller-manager")},
        "spec": {
            "replicas": spec.replicas.unwrap_or(1),
            "serviceName": name,
            "selector": {"matchLabels": names.labels("controller-manager")},
            "template": {
                "metadata": {"labels": names.labels("controller-manager")},
                "spec": {
                    "containers": [{
                        "name": "controller-manager",
                        "image": nest_image(),
                        "args": ["controller-manager", "--kubeconfig=/etc/nest/kubeconfig/value",
                                 "--identity=$(POD_NAME)"],
                        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                        "resources": resources(spec),
                        "volumeMounts": [{"name": "kubeconfig", "mountPath": "/etc/nest/kubeconfig", "readOnly": true}],
                    }],
                    "volumes": [{"name": "kubeconfig",
                                 "secret": {"secretName": names.controller_manager_kubeconfig_secret()}}],
                },
            },
        },
    })
}

/// Whether `live` has every field `wanted` sets, with the same value (lists item by item, of the same length): what
/// the controllers call drift when it fails. Fields the API server or other controllers add are not drift.
pub fn covers(live: &Value, wanted: &Value) -> bool {
    match (live, wanted) {
        (Value::Object(live), Value::Object(wanted)) => {
            wanted.iter().all(|(key, value)| live.get(key).is_some_and(|l| covers(l, value)))
        }
        (Value::Array(live), Value::Array(wanted)) => {
            live.len() == wanted.len() && live.iter().zip(wanted).all(|(l, w)| covers(l, w))
        }
        // Numbers compare by value (1 and 1.0), quantities as written.
        (Value::Number(live), Value::Number(wanted)) => live.as_f64() == wanted.as_f64(),
        _ => live == wanted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drift_is_a_change_to_what_was_rendered_not_an_addition() {
        let names = Names { cluster: "demo".into(), namespace: "tenants".into() };
        let wanted = api_server_statefulset(&names, &NestedComponentSpec::default(), "127.96.0.10");
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
}
