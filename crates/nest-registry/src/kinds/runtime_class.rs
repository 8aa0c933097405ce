//! RuntimeClasses (`node.k8s.io/v1`): which runtime handler of the node runs a pod. Cluster-scoped; the `handler`
//! is a DNS label and never changes (`ValidateRuntimeClass` and `ValidateRuntimeClassUpdate`,
//! `pkg/apis/node/validation/validation.go`, 1.33). Pods name one in `spec.runtimeClassName`; the `RuntimeClass`
//! admission plugin ([`crate::admission::runtime_class`]) refuses a pod naming none that exists and copies its
//! overhead and scheduling onto the pod; the node runs the pod with the class's handler.

use serde_json::Value;

use crate::error::Cause;
use crate::strategy::Strategy;
use crate::validation::dns1123_label;

/// RuntimeClasses, as upstream's strategy validates them.
pub struct RuntimeClass;

fn handler(obj: &Value) -> Vec<Cause> {
    match obj["handler"].as_str() {
        None | Some("") => vec![Cause::required("handler")],
        Some(handler) => match dns1123_label(handler) {
            Ok(()) => Vec::new(),
            Err(message) => vec![Cause::invalid("handler", format!("Invalid value: {handler:?}: {message}"))],
        },
    }
}

impl Strategy for RuntimeClass {
    fn validate(&self, obj: &Value) -> Vec<Cause> {
        handler(obj)
    }

    fn validate_update(&self, obj: &Value, old: &Value) -> Vec<Cause> {
        let mut causes = handler(obj);
        if obj["handler"] != old["handler"] {
            let shown = obj["handler"].as_str().unwrap_or_default();
            causes.push(Cause::invalid("handler", format!("Invalid value: {shown:?}: field is immutable")));
        }
        causes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_handler_is_a_dns_label_that_never_changes() {
        let class = |handler: Value| json!({"metadata": {"name": "c"}, "handler": handler});
        assert!(RuntimeClass.validate(&class(json!("simulated"))).is_empty());
        for bad in [json!(""), json!(null), json!("Simulated"), json!("a.b"), json!("-x"), json!("x".repeat(64))] {
            let causes = RuntimeClass.validate(&class(bad.clone()));
            assert_eq!(causes.len(), 1, "{bad}");
            assert_eq!(causes[0].field, "handler", "{bad}");
        }
        let changed = RuntimeClass.validate_update(&class(json!("runc")), &class(json!("simulated")));
        assert_eq!(changed.len(), 1);
        assert!(changed[0].message.contains("field is immutable"), "{:?}", changed[0].message);
        assert!(RuntimeClass.validate_update(&class(json!("runc")), &class(json!("runc"))).is_empty());
    }
}
