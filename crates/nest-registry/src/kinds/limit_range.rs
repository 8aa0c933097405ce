//! LimitRanges (`v1`), as `SetDefaults_LimitRangeItem` defaults them. What their limits do to pods is the
//! `LimitRanger` admission plugin's ([`crate::admission::limit_ranger`]).

use serde_json::Value;

use crate::strategy::Strategy;

/// LimitRanges, as `SetDefaults_LimitRangeItem` defaults them: for a `Container` item, a `default` of its `max` where
/// it gives none, and a `defaultRequest` of its `default`, else its `min`.
pub struct LimitRange;

impl Strategy for LimitRange {
    fn prepare_for_create(&self, obj: &mut Value) {
        for item in obj.pointer_mut("/spec/limits").and_then(Value::as_array_mut).into_iter().flatten() {
            if item["type"] != "Container" {
                continue;
            }
            let amounts = |item: &Value, field: &str| item[field].as_object().cloned().unwrap_or_default();
            let (max, min) = (amounts(item, "max"), amounts(item, "min"));
            let mut default = amounts(item, "default");
            for (resource, amount) in max {
                default.entry(resource).or_insert(amount);
            }
            let mut request = amounts(item, "defaultRequest");
            for (resource, amount) in &default {
                request.entry(resource.clone()).or_insert(amount.clone());
            }
            for (resource, amount) in min {
                request.entry(resource).or_insert(amount);
            }
            if !default.is_empty() {
                item["default"] = Value::Object(default);
            }
            if !request.is_empty() {
                item["defaultRequest"] = Value::Object(request);
            }
        }
    }
}
