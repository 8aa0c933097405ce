//! Objects several tests create, written once: the `widgets.example.com` custom resource and the `echo` Deployment.

use serde_json::{Value, json};

/// The `widgets.example.com` CustomResourceDefinition (namespaced, kind `Widget`, one version `v1`), whose version
/// also holds `version`'s fields: its `schema`, its `subresources`.
pub fn widget_crd(version: Value) -> Value {
    let mut v1 = json!({"name": "v1", "served": true, "storage": true});
    if let (Some(v1), Value::Object(extra)) = (v1.as_object_mut(), version) {
        v1.extend(extra);
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [v1],
        },
    })
}

/// The version fields of a Widget that keeps whatever it holds: a schema that preserves unknown fields.
pub fn open_schema() -> Value {
    json!({"schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}})
}

/// A Deployment `echo` of `replicas` pods of nest's own image answering HTTP on port 8080 of the pod's address
/// (`nest debug http-echo`), ready once `readiness_path` answers; in `namespace`, or kubectl's when `None`.
pub fn echo_deployment(namespace: Option<&str>, replicas: u32, readiness_path: &str) -> String {
    let mut metadata = json!({"name": "echo"});
    if let Some(namespace) = namespace {
        metadata["namespace"] = json!(namespace);
    }
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "echo"}},
            "template": {
                "metadata": {"labels": {"app": "echo"}},
                "spec": {"containers": [{
                    "name": "echo",
                    "image": "ghcr.io/nest-dev/nest:latest",
                    "args": ["debug", "http-echo", "--listen", "$(POD_IP):8080"],
                    "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                    "readinessProbe": {"httpGet": {"path": readiness_path, "port": 8080}, "periodSeconds": 1},
                }]},
            },
        },
    })
    .to_string()
}
