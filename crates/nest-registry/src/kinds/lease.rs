//! Leases (`coordination.k8s.io/v1`): no defaults, but a spec that is not a pointer in Go, so a Lease made without
//! one reads `spec: {}` (`pkg/registry/coordination/lease/strategy.go`, 1.33).

use serde_json::{Value, json};

use crate::strategy::Strategy;

/// The strategy.
pub struct Lease;

impl Strategy for Lease {
    fn prepare_for_create(&self, obj: &mut Value) {
        crate::strategy::set_defaults(obj, [("spec", json!({}))]);
    }
}
