//! The `RuntimeClass` admission plugin (kube-apiserver's `plugin/pkg/admission/runtimeclass`, 1.33). A new pod's
//! `runtimeClassName` must name a RuntimeClass that exists (403 `pod rejected: RuntimeClass "<name>" not found`); the
//! class's `overhead.podFixed` becomes the pod's `overhead` (a pod that gives another is refused, as is one that
//! gives an overhead without a class), and its `scheduling` is merged into the pod: its `nodeSelector` added to the
//! pod's (a key the pod sets otherwise is a conflict), its `tolerations` appended. The classes themselves are a kind
//! ([`crate::kinds::runtime_class`]).

use serde_json::Value;

use crate::chain::{Mutating, Request};
use crate::error::{ApiError, Result};
use crate::strategy::Cluster;

/// The plugin.
pub struct RuntimeClass;

/// Where RuntimeClass `name` is stored.
fn key(name: &str) -> String {
    format!("/registry/node.k8s.io/runtimeclasses/{name}")
}

impl Mutating for RuntimeClass {
    fn handles(&self, request: &Request<'_>) -> bool {
        request.creates("", "pods")
    }

    async fn admit(&self, cluster: Cluster<'_>, request: &Request<'_>, object: &mut Value) -> Result<()> {
        if !object["spec"].is_object() {
            return Ok(());
        }
        let pod = request.object_name(object).to_string();
        let refuse = |message: String| ApiError::forbidden(request.info, &pod, message);
        let Some(name) = object["spec"]["runtimeClassName"].as_str().filter(|n| !n.is_empty()).map(str::to_string)
        else {
            // `validateOverhead`: an overhead comes only from a class.
            if object["spec"]["overhead"].as_object().is_some_and(|o| !o.is_empty()) {
                return Err(refuse("pod rejected: Pod Overhead set without corresponding RuntimeClass".into()));
            }
            return Ok(());
        };
        let Some(class) = cluster.lookup(&key(&name)).await? else {
            return Err(refuse(format!("pod rejected: RuntimeClass {name:?} not found")));
        };
        apply(&class, &mut object["spec"]).map_err(refuse)
    }
}

/// `setOverhead` and `setScheduling`: what `class` gives the pod `spec`, or why the pod is refused.
fn apply(class: &Value, spec: &mut Value) -> std::result::Result<(), String> {
    if let Some(fixed) = class["overhead"]["podFixed"].as_object() {
        let given = spec["overhead"].as_object().filter(|o| !o.is_empty());
        if given.is_some_and(|given| given != fixed) {
            return Err("pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead".into());
        }
        spec["overhead"] = Value::Object(fixed.clone());
    }
    let scheduling = &class["scheduling"];
    if let Some(wanted) = scheduling["nodeSelector"].as_object() {
        let mut selector = spec["nodeSelector"].as_object().cloned().unwrap_or_default();
        for (key, value) in wanted {
            if let Some(own) = selector.get(key)
                && own != value
            {
                let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
                return Err(format!(
                    "conflict: runtimeClass.scheduling.nodeSelector[{key}] = {}; pod.spec.nodeSelector[{key}] = {}",
                    text(value),
                    text(own)
                ));
            }
            selector.insert(key.clone(), value.clone());
        }
        spec["nodeSelector"] = Value::Object(selector);
    }
    if let Some(tolerations) = scheduling["tolerations"].as_array() {
        let mut merged = spec["tolerations"].as_array().cloned().unwrap_or_default();
        for toleration in tolerations {
            if !merged.contains(toleration) {
                merged.push(toleration.clone());
            }
        }
        spec["tolerations"] = Value::Array(merged);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::testing::expect_handled;
    use serde_json::json;

    #[test]
    fn only_a_pods_creation_is_handled() {
        expect_handled(|r| RuntimeClass.handles(r), "alice", "pods: create; apps/deployments: -");
    }

    #[test]
    fn a_class_gives_its_overhead_and_scheduling_and_refuses_what_contradicts_them() {
        let class = json!({"handler": "h", "overhead": {"podFixed": {"cpu": "250m"}},
                           "scheduling": {"nodeSelector": {"sandbox": "yes"},
                                          "tolerations": [{"key": "sandbox", "operator": "Exists"}]}});
        let mut spec = json!({"nodeSelector": {"disk": "ssd"}, "tolerations": [{"key": "a", "operator": "Exists"}]});
        apply(&class, &mut spec).unwrap();
        assert_eq!(spec["overhead"], json!({"cpu": "250m"}));
        assert_eq!(spec["nodeSelector"], json!({"disk": "ssd", "sandbox": "yes"}));
        assert_eq!(spec["tolerations"].as_array().unwrap().len(), 2);
        // Applied twice (a pod that already has what the class gives): nothing changes.
        let again = spec.clone();
        apply(&class, &mut spec).unwrap();
        assert_eq!(spec, again);
        let mut other = json!({"overhead": {"cpu": "1"}});
        assert_eq!(
            apply(&class, &mut other).unwrap_err(),
            "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"
        );
        let mut conflict = json!({"nodeSelector": {"sandbox": "no"}});
        assert_eq!(
            apply(&class, &mut conflict).unwrap_err(),
            "conflict: runtimeClass.scheduling.nodeSelector[sandbox] = yes; pod.spec.nodeSelector[sandbox] = no"
        );
        // A class with neither leaves the pod alone.
        let mut plain = json!({"containers": []});
        apply(&json!({"handler": "simulated"}), &mut plain).unwrap();
        assert_eq!(plain, json!({"containers": []}));
    }
}
