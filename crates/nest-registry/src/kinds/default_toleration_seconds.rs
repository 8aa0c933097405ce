//! The `DefaultTolerationSeconds` admission plugin (kube-apiserver's `plugin/pkg/admission/defaulttolerationseconds`,
//! 1.33): a pod that does not tolerate a node being not ready, or unreachable, with `NoExecute` tolerates each for
//! 300 seconds, so that it is evicted five minutes after its node is lost rather than at once.

use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use crate::admission::{Mutating, Operation, Request};
use crate::error::Result;
use crate::strategy::Cluster;

/// The taints, in the order upstream adds their tolerations.
const TAINTS: [&str; 2] = ["node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"];

/// How long (`--default-not-ready-toleration-seconds`, `--default-unreachable-toleration-seconds`).
const SECONDS: i64 = 300;

/// The plugin.
pub struct DefaultTolerationSeconds;

impl Mutating for DefaultTolerationSeconds {
    fn admit<'a>(
        &'a self,
        _cluster: Cluster<'a>,
        request: &'a Request<'a>,
        object: &'a mut Value,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let pods = request.info.group.is_empty() && request.info.plural == "pods";
            let writes = matches!(request.operation, Operation::Create | Operation::Update);
            if !pods || !writes || !matches!(request.subresource, crate::store::Subresource::Main) {
                return Ok(());
            }
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
        })
    }
}
