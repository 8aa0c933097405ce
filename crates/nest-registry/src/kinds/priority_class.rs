//! PriorityClasses (`scheduling.k8s.io/v1`), and the ones every cluster has: `system-cluster-critical` and
//! `system-node-critical` are made at start, as kube-apiserver's scheduling bootstrap does. Pods take their priority
//! from a class in the `Priority` admission plugin ([`crate::admission::priority`]).

use serde_json::{Value, json};

use crate::strategy::{Strategy, set_defaults};

/// The PriorityClasses kube-apiserver makes at start: (name, value, description).
pub const SYSTEM_CLASSES: [(&str, i64, &str); 2] = [
    (
        "system-node-critical",
        2_000_001_000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    (
        "system-cluster-critical",
        2_000_000_000,
        "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
    ),
];

/// A PriorityClass object as kube-apiserver's bootstrap makes it.
pub fn system_class(name: &str, value: i64, description: &str) -> Value {
    json!({
        "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": name}, "value": value, "description": description,
        "preemptionPolicy": "PreemptLowerPriority",
    })
}

/// PriorityClasses, as `SetDefaults_PriorityClass` defaults them: they preempt lower priorities unless told
/// otherwise.
pub struct PriorityClass;

impl Strategy for PriorityClass {
    fn prepare_for_create(&self, obj: &mut Value) {
        set_defaults(obj, [("preemptionPolicy", json!("PreemptLowerPriority"))]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_classes_are_upstreams() {
        let node = system_class(SYSTEM_CLASSES[0].0, SYSTEM_CLASSES[0].1, SYSTEM_CLASSES[0].2);
        assert_eq!(
            (node["metadata"]["name"].as_str(), node["value"].as_i64()),
            (Some("system-node-critical"), Some(2_000_001_000))
        );
    }
}
