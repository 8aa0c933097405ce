//! Comparing JSON documents.

use serde_json::Value;

/// Whether `value` is what Go leaves out of JSON as empty (`omitempty`) or holds when nothing was given: null, false,
/// zero, an empty string, list or object.
pub fn is_zero(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

/// Whether `live` has every field `wanted` sets, with the same value (lists item by item, of the same length): what
/// the controllers call drift when it fails. Fields the API server or other controllers add are not drift.
pub fn covers(live: &Value, wanted: &Value) -> bool {
    match (live, wanted) {
        (Value::Object(live), Value::Object(wanted)) => {
            wanted.iter().all(|(key, value)| live.get(key).is_some_and(|l| covers(l, value)))
        }
        (Value::Array(live), Value::Array(wanted)) => {
            live.len() == wanted.len() && live.iter().zip(wanted).all(|(l, w)| covers(l, w))
        }
        // Numbers compare by value (1 and 1.0), quantities as written.
        (Value::Number(live), Value::Number(wanted)) => live.as_f64() == wanted.as_f64(),
        _ => live == wanted,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn go_zero_values_are_empty_and_nothing_else_is() {
        for zero in [json!(null), json!(false), json!(0), json!(0.0), json!(""), json!([]), json!({})] {
            assert!(super::is_zero(&zero), "{zero}");
        }
        for given in [json!(true), json!(1), json!(" "), json!([0]), json!({"a": null})] {
            assert!(!super::is_zero(&given), "{given}");
        }
    }

    #[test]
    fn added_fields_are_not_drift_changed_ones_are() {
        let live = json!({"spec": {"replicas": 1.0, "ports": [{"port": 80, "protocol": "TCP"}]}, "status": {}});
        assert!(super::covers(&live, &json!({"spec": {"replicas": 1, "ports": [{"port": 80}]}})));
        assert!(!super::covers(&live, &json!({"spec": {"replicas": 2}})));
        assert!(!super::covers(&live, &json!({"spec": {"ports": []}})), "a list of another length");
        assert!(!super::covers(&live, &json!({"metadata": {}})), "a missing field");
    }
}
