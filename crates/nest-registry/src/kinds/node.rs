//! Nodes, as kube-apiserver 1.33 keeps them (`pkg/registry/core/node/strategy.go`): a node may set its status when
//! it registers (it is not cleared), and Go writes the status structs that are not pointers even when empty — a
//! `daemonEndpoints` with port 0 and a `nodeInfo` of empty strings — and `SetDefaults_NodeStatus` makes the
//! allocatable amounts the capacity when a node gives only its capacity.

use serde_json::{Value, json};

use crate::strategy::Strategy;

/// The strategy.
pub struct Node;

impl Strategy for Node {
    fn prepare_for_create(&self, obj: &mut Value) {
        if !obj.is_object() {
            return;
        }
        if !obj["status"].is_object() {
            obj["status"] = json!({});
        }
        let status = &mut obj["status"];
        super::set_defaults(status, [("daemonEndpoints", json!({"kubeletEndpoint": {"Port": 0}}))]);
        let info = status.as_object_mut().expect("an object").entry("nodeInfo").or_insert_with(|| json!({}));
        for field in [
            "machineID",
            "systemUUID",
            "bootID",
            "kernelVersion",
            "osImage",
            "containerRuntimeVersion",
            "kubeletVersion",
            "kubeProxyVersion",
            "operatingSystem",
            "architecture",
        ] {
            super::set_defaults(info, [(field, json!(""))]);
        }
        if status.get("allocatable").is_none_or(Value::is_null)
            && let Some(capacity) = status.get("capacity").filter(|c| c.is_object()).cloned()
        {
            status["allocatable"] = capacity;
        }
    }
}
