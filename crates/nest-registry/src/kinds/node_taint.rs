//! The `TaintNodesByCondition` admission plugin (kube-apiserver's `plugin/pkg/admission/nodetaint`, 1.33): every new
//! Node is created tainted `node.kubernetes.io/not-ready:NoSchedule`, so that nothing is scheduled to it before the
//! node lifecycle controller has seen it Ready and lifted the taint.

use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use crate::admission::{Mutating, Operation, Request};
use crate::error::Result;
use crate::strategy::Cluster;

const KEY: &str = "node.kubernetes.io/not-ready";

/// The plugin.
pub struct TaintNodesByCondition;

impl Mutating for TaintNodesByCondition {
    fn admit<'a>(
        &'a self,
        _cluster: Cluster<'a>,
        request: &'a Request<'a>,
        object: &'a mut Value,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let nodes = request.info.group.is_empty() && request.info.plural == "nodes";
            let main = matches!(request.subresource, crate::store::Subresource::Main);
            if !nodes || !main || !matches!(request.operation, Operation::Create) || !object.is_object() {
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
        })
    }
}
