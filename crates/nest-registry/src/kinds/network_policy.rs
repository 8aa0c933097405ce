//! NetworkPolicies (`networking.k8s.io/v1`), as `SetDefaults_NetworkPolicy` and `SetDefaults_NetworkPolicyPort`
//! default them (pkg/apis/networking/v1/defaults.go, 1.33): without `policyTypes` a policy is about `Ingress`, and
//! `Egress` too when it has egress rules; a port's protocol is TCP.

use serde_json::{Value, json};

use crate::strategy::Strategy;

/// The strategy.
pub struct NetworkPolicy;

impl Strategy for NetworkPolicy {
    fn prepare_for_create(&self, obj: &mut Value) {
        let Some(spec) = obj.get_mut("spec").filter(|s| s.is_object()) else { return };
        if spec.get("policyTypes").is_none_or(|t| t.as_array().is_none_or(Vec::is_empty)) {
            let egress = spec.get("egress").is_some_and(|e| e.as_array().is_some_and(|e| !e.is_empty()));
            spec["policyTypes"] = if egress { json!(["Ingress", "Egress"]) } else { json!(["Ingress"]) };
        }
        for direction in ["ingress", "egress"] {
            for rule in spec.get_mut(direction).and_then(Value::as_array_mut).into_iter().flatten() {
                for port in rule.get_mut("ports").and_then(Value::as_array_mut).into_iter().flatten() {
                    crate::strategy::set_defaults(port, [("protocol", json!("TCP"))]);
                }
            }
        }
    }
}
