//! Nodes, as kube-apiserver 1.33 keeps them (`pkg/registry/core/node/strategy.go`): a node may set its status when
//! it registers (it is not cleared), and Go writes the status structs that are not pointers even when empty — a
//! `daemonEndpoints` with port 0 and a `nodeInfo` of empty strings — and `SetDefaults_NodeStatus` makes the
//! allocatable amounts the capacity when a node gives only its capacity.
//!
//! One check upstream does not make: the kubelet's port (`status.daemonEndpoints.kubeletEndpoint.Port`) lies in
//! 0–65535, 0 meaning none. `ValidateNode` and `ValidateNodeUpdate` (pkg/apis/core/validation, 1.33) leave
//! `daemonEndpoints` alone and the Go type is an `int32`, so kube-apiserver stores 70000 and its kubelet client dials
//! whatever `int` it makes of it; here a tenant's admin may write a Node, and this server dials the port for
//! `pods/log`, so a port no kubelet could have opened is refused where it enters, in upstream's words for a port
//! (`IsValidPortNum`).

use serde_json::{Value, json};

use crate::error::Cause;
use crate::strategy::Strategy;

/// Where the kubelet's port is, as a field path.
const KUBELET_PORT: &str = "status.daemonEndpoints.kubeletEndpoint.Port";

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
        crate::strategy::set_defaults(status, [("daemonEndpoints", json!({"kubeletEndpoint": {"Port": 0}}))]);
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
            crate::strategy::set_defaults(info, [(field, json!(""))]);
        }
        if status.get("allocatable").is_none_or(Value::is_null)
            && let Some(capacity) = status.get("capacity").filter(|c| c.is_object()).cloned()
        {
            status["allocatable"] = capacity;
        }
    }

    fn validate(&self, obj: &Value) -> Vec<Cause> {
        kubelet_port(obj).into_iter().collect()
    }

    /// As [`Strategy::validate`], on every update (the status included); a port stored before it was checked may
    /// stay as it is, so that a node written then can still be labelled or cordoned, but not be set to another bad one.
    fn validate_update(&self, obj: &Value, old: &Value) -> Vec<Cause> {
        let port = |node: &Value| node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"].clone();
        let kept = port(obj) == port(old);
        self.validate(obj).into_iter().filter(|cause| !(kept && cause.field == KUBELET_PORT)).collect()
    }
}

/// What is wrong with the node's kubelet port, if anything: it must be a number in 0–65535 (0, or none, meaning the
/// kubelet serves no API).
fn kubelet_port(obj: &Value) -> Option<Cause> {
    let port = &obj["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"];
    match port.as_i64() {
        _ if port.is_null() => None,
        Some(0..=65535) => None,
        _ => {
            Some(Cause::invalid(KUBELET_PORT, format!("Invalid value: {port}: must be between 1 and 65535, inclusive")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Subresource;

    fn node(port: Value) -> Value {
        json!({"metadata": {"name": "n"}, "status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}})
    }

    fn messages(causes: Vec<Cause>) -> Vec<String> {
        causes.into_iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    #[test]
    fn a_kubelet_port_outside_0_to_65535_is_refused_on_create_update_and_status() {
        let outside =
            |port: i64| format!("{KUBELET_PORT}: Invalid value: {port}: must be between 1 and 65535, inclusive");
        for port in [70000, 65536, -1, i64::from(i32::MIN), i64::from(i32::MAX)] {
            assert_eq!(messages(Node.validate(&node(json!(port)))), [outside(port)], "create");
            let old = node(json!(10250));
            let updated = Node.validate_update_of(Subresource::Main, &node(json!(port)), &old);
            assert_eq!(messages(updated), [outside(port)], "update");
            let status = Node.validate_update_of(Subresource::Status, &node(json!(port)), &old);
            assert_eq!(messages(status), [outside(port)], "status update");
        }
        // 0 is no port (what a Node without one is defaulted to), and every port a kubelet could open is taken.
        for port in [0, 1, 10250, 65535] {
            assert!(Node.validate(&node(json!(port))).is_empty(), "{port}");
            assert!(Node.validate_update_of(Subresource::Status, &node(json!(port)), &node(json!(0))).is_empty());
        }
        let mut defaulted = json!({"metadata": {"name": "n"}});
        Node.prepare_for_create(&mut defaulted);
        assert!(Node.validate(&defaulted).is_empty());
        assert!(Node.validate(&json!({"metadata": {"name": "n"}})).is_empty());
        // A port stored before the check may stay while the rest changes, but not become another bad one.
        let stored = node(json!(70000));
        let mut cordoned = stored.clone();
        cordoned["spec"] = json!({"unschedulable": true});
        assert!(Node.validate_update(&cordoned, &stored).is_empty());
        assert_eq!(messages(Node.validate_update(&node(json!(70001)), &stored)), [outside(70001)]);
    }
}
