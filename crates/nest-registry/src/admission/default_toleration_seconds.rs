//! The `DefaultTolerationSeconds` admission plugin (kube-apiserver's `plugin/pkg/admission/defaulttolerationseconds`,
//! 1.33): a pod that does not tolerate a node being not ready, or unreachable, with `NoExecute` tolerates each for
//! 300 seconds, so that it is evicted five minutes after its node is lost rather than at once.

use serde_json::{Value, json};

use crate::chain::{Mutating, Operation, Request};
use crate::error::Result;
use crate::strategy::Cluster;

/// The taints, in the order upstream adds their tolerations.
const TAINTS: [&str; 2] = ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"];

/// How long (`--default-not-ready-toleration-seconds`, `--default-unreachable-toleration-seconds`).
const SECONDS: i64 = 300;

/// The plugin.
pub struct DefaultTolerationSeconds;

impl Mutating for DefaultTolerationSeconds {
    fn handles(&self, request: &Request<'_>) -> bool {
        request.is_main("", "pods") && matches!(request.operation, Operation::Create | Operation::Update)
    }

    async fn admit(&self, _: Cluster<'_>, _: &Request<'_>, object: &mut Value) -> Result<()> {
        let spec = &mut object["spec"];
        if !spec.is_object() {
            return Ok(());
        }
        let tolerations = spec["tolerations"].as_array().cloned().unwrap_or_default();
        // A toleration of the taint's NoExecute effect, or of every effect, is the pod's own choice.
        let tolerated = |taint: &str| {
            tolerations.iter().any(|t| {
                let key = t["key"].as_str().unwrap_or_default();
                let effect = t["effect"].as_str().unwrap_or_default();
                (key == taint || (key.is_empty() && t["operator"] == "Exists"))
                    && (effect.is_empty() || effect == "NoExecute")
            })
        };
        let missing: Vec<Value> = TAINTS
            .iter()
            .filter(|taint| !tolerated(taint))
            .map(|taint| {
                json!({"key": taint, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": SECONDS})
            })
            .collect();
        if !missing.is_empty() {
            let mut all = tolerations;
            all.extend(missing);
            spec["tolerations"] = Value::Array(all);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::testing::expect_handled;

    #[test]
    fn a_pods_writes_are_handled() {
        expect_handled(|r| DefaultTolerationSeconds.handles(r), "alice", "pods: create, update; nodes: -");
    }
}
