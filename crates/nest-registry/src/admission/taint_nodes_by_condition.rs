//! The `TaintNodesByCondition` admission plugin (kube-apiserver's `plugin/pkg/admission/nodetaint`, 1.33): every new
//! Node is created tainted `node.kubernetes.io/not-ready:NoSchedule`, so that nothing is scheduled to it before the
//! node lifecycle controller has seen it Ready and lifted the taint.

use serde_json::{Value, json};

use crate::chain::{Mutating, Request};
use crate::error::Result;
use crate::strategy::Cluster;

const KEY: &str = "node.kubernetes.io/not-ready";

/// The plugin.
pub struct TaintNodesByCondition;

impl Mutating for TaintNodesByCondition {
    fn handles(&self, request: &Request<'_>) -> bool {
        request.creates("", "nodes")
    }

    async fn admit(&self, _: Cluster<'_>, _: &Request<'_>, object: &mut Value) -> Result<()> {
        if !object.is_object() {
            return Ok(());
        }
        if !object["spec"].is_object() {
            object["spec"] = json!({});
        }
        let spec = &mut object["spec"];
        let mut taints = spec["taints"].as_array().cloned().unwrap_or_default();
        // A taint matches by key and effect; its value does not count.
        if !taints.iter().any(|t| t["key"] == KEY && t["effect"] == "NoSchedule") {
            taints.push(json!({"key": KEY, "effect": "NoSchedule"}));
            spec["taints"] = Value::Array(taints);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::testing::expect_handled;

    #[test]
    fn only_a_nodes_creation_is_handled() {
        expect_handled(|r| TaintNodesByCondition.handles(r), "alice", "nodes: create; pods: -");
    }
}
