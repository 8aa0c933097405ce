//! Structural schemas of custom resources: validation, pruning and defaulting, after apiextensions-apiserver
//! (1.33) `pkg/apiserver/schema` — the subset of OpenAPI v3 a structural schema may use.
//!
//! Validation reports every problem with its field path (`spec.size`), as kube-apiserver's 422 causes do. Pruning
//! removes fields the schema does not declare, unless `x-kubernetes-preserve-unknown-fields` keeps them. Defaulting
//! fills missing properties that declare a `default`. The root's `apiVersion`, `kind` and `metadata` are the API
//! server's, not the schema's.
//!
//! The same code checks built-in kinds against their OpenAPI schemas ([`nest_openapi`]), with the rules of Go's JSON
//! decoding instead of a structural schema's: `$ref`s are followed, `null` is a zero value, an object schema without
//! properties is free-form, and `required` and value constraints are left to the kind's own validation.

use nest_openapi::KindSchema;
use serde_json::{Map, Value};

use crate::error::Cause;

/// How a schema is applied.
#[derive(Clone, Copy)]
struct Rules<'a> {
    /// The kind whose definitions `$ref`s name, for a built-in; `None` for a custom resource's structural schema.
    builtin: Option<&'a KindSchema>,
}

impl<'a> Rules<'a> {
    const STRUCTURAL: Rules<'static> = Rules { builtin: None };

    fn resolve(self, schema: &'a Value) -> &'a Value {
        match self.builtin {
            Some(kind) => kind.resolve(schema),
            None => schema,
        }
    }
}

/// The JSON type name Kubernetes messages use for a value.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() { field.to_string() } else { format!("{path}.{field}") }
}

fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

fn flag(schema: &Value, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool).unwrap_or(false)
}

/// Checks `value` against `schema`, adding a cause per problem. `path` is the value's field path ("" at the root).
pub fn validate(schema: &Value, value: &Value, path: &str, causes: &mut Vec<Cause>) {
    check(Rules::STRUCTURAL, schema, value, path, causes)
}

/// Checks a built-in object's field types against its kind's schema, as decoding it in kube-apiserver would.
pub fn validate_builtin(kind: &KindSchema, value: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    check(Rules { builtin: Some(kind) }, &kind.root, value, "", &mut causes);
    causes
}

/// Removes the fields a built-in kind does not have, returning their paths.
pub fn prune_builtin(kind: &KindSchema, value: &mut Value) -> Vec<String> {
    let mut pruned = Vec::new();
    prune_with(Rules { builtin: Some(kind) }, &kind.root, value, true, "", &mut pruned);
    pruned
}

fn check(rules: Rules<'_>, schema: &Value, value: &Value, path: &str, causes: &mut Vec<Cause>) {
    let schema = rules.resolve(schema);
    let invalid = |causes: &mut Vec<Cause>, message: String| causes.push(Cause::invalid(path, message));
    if rules.builtin.is_some() {
        check_decoding(rules, schema, value, path, causes);
        return;
    }
    if value.is_null() {
        if !flag(schema, "nullable") && (schema.get("type").is_some() || flag(schema, "x-kubernetes-int-or-string")) {
            let wanted = schema.get("type").and_then(Value::as_str).unwrap_or("integer or string");
            invalid(causes, format!("Invalid value: \"null\": {path} in body must be of type {wanted}: \"null\""));
        }
        return;
    }
    if flag(schema, "x-kubernetes-int-or-string") {
        if !matches!(type_name(value), "integer" | "string") {
            let message = format!("Invalid value: {}: {path} in body must be of type integer or string", shown(value));
            causes.push(Cause { reason: "FieldValueTypeInvalid", message, field: path.into() });
            return;
        }
    } else if let Some(wanted) = schema.get("type").and_then(Value::as_str) {
        let actual = type_name(value);
        let ok = actual == wanted || (wanted == "number" && actual == "integer");
        if !ok {
            let message = format!("Invalid value: \"{actual}\": {path} in body must be of type {wanted}: \"{actual}\"");
            causes.push(Cause { reason: "FieldValueTypeInvalid", message, field: path.into() });
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let supported: Vec<String> = allowed.iter().map(shown).collect();
        causes.push(Cause {
            reason: "FieldValueNotSupported",
            message: format!("Unsupported value: {}: supported values: {}", shown(value), supported.join(", ")),
            field: path.into(),
        });
    }
    match value {
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
                let exclusive = flag(schema, "exclusiveMinimum");
                if x < min || (exclusive && x == min) {
                    let op = if exclusive { "greater than" } else { "greater than or equal to" };
                    invalid(causes, format!("Invalid value: {n}: {path} in body should be {op} {min}"));
                }
            }
            if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
                let exclusive = flag(schema, "exclusiveMaximum");
                if x > max || (exclusive && x == max) {
                    let op = if exclusive { "less than" } else { "less than or equal to" };
                    invalid(causes, format!("Invalid value: {n}: {path} in body should be {op} {max}"));
                }
            }
        }
        Value::String(s) => {
            let len = s.chars().count() as u64;
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
                && len < min
            {
                invalid(causes, format!("Invalid value: {s:?}: {path} in body should be at least {min} chars long"));
            }
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && len > max
            {
                causes.push(Cause {
                    reason: "FieldValueTooLong",
                    message: format!("Too long: may not be more than {max} bytes"),
                    field: path.into(),
                });
            }
            if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
                match regex_lite::Regex::new(pattern) {
                    Ok(re) if !re.is_match(s) => {
                        invalid(causes, format!("Invalid value: {s:?}: {path} in body should match '{pattern}'"))
                    }
                    _ => {}
                }
            }
        }
        Value::Array(items) => {
            let n = items.len() as u64;
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && n < min
            {
                invalid(causes, format!("Invalid value: {n}: {path} in body should have at least {min} items"));
            }
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && n > max
            {
                causes.push(Cause {
                    reason: "FieldValueTooMany",
                    message: format!("Too many: {n}: must have at most {max} items"),
                    field: path.into(),
                });
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(rules, item_schema, item, &format!("{path}[{i}]"), causes);
                }
            }
        }
        Value::Object(map) => validate_object(rules, schema, map, path, causes),
        _ => {}
    }
}

/// A built-in's value as Go's JSON decoder sees it: only the types matter; `null` is always a zero value.
fn check_decoding(rules: Rules<'_>, schema: &Value, value: &Value, path: &str, causes: &mut Vec<Cause>) {
    if value.is_null() {
        return;
    }
    let actual = type_name(value);
    let wanted = if flag(schema, nest_openapi::QUANTITY) {
        Some((matches!(actual, "string" | "integer" | "number"), "quantity (string or number)"))
    } else if flag(schema, "x-kubernetes-int-or-string") {
        Some((matches!(actual, "string" | "integer"), "integer or string"))
    } else {
        schema
            .get("type")
            .and_then(Value::as_str)
            .map(|wanted| (actual == wanted || (wanted == "number" && actual == "integer"), wanted))
    };
    if let Some((false, wanted)) = wanted {
        let message = format!("Invalid value: {}: must be of type {wanted}", shown_short(value));
        causes.push(Cause { reason: "FieldValueTypeInvalid", message, field: path.into() });
        return;
    }
    // An integer must fit the Go type it decodes into, as Go's decoder refuses a number that overflows it: int32
    // fields (ports, counts, IntOrString's number) and int64 ones (seconds, generations). Without this, a number
    // past i64 would be kept as a float, which no client of the typed API can read back.
    if let Value::Number(number) = value {
        let format = if flag(schema, "x-kubernetes-int-or-string") {
            Some("int32")
        } else {
            schema.get("format").and_then(Value::as_str).filter(|f| matches!(*f, "int32" | "int64"))
        };
        let fits = match format {
            Some("int32") => number.as_i64().is_some_and(|n| i32::try_from(n).is_ok()),
            Some(_) => number.is_i64(),
            None => true,
        };
        if let (false, Some(format)) = (fits, format) {
            let message = format!("Invalid value: {}: must be of type {format}", shown_short(value));
            causes.push(Cause { reason: "FieldValueTypeInvalid", message, field: path.into() });
            return;
        }
    }
    // A quantity's text must be one by resource.ParseQuantity's grammar, as Go's decoder of resource.Quantity refuses
    // any other (so that no reader of the object later counts an unreadable quantity as nothing).
    if let Value::String(s) = value
        && flag(schema, nest_openapi::QUANTITY)
        && nest_core::quantity::value(s).is_none()
    {
        causes.push(Cause::invalid(path, nest_core::quantity::FORMAT_ERROR));
        return;
    }
    // A time is RFC 3339 within what a timestamp holds, as metav1.Time's decoder takes it ("" is the zero time).
    if let Value::String(s) = value
        && schema.get("format").and_then(Value::as_str) == Some("date-time")
        && !s.is_empty()
        && s.parse::<jiff::Timestamp>().is_err()
    {
        causes.push(Cause::invalid(
            path,
            format!("Invalid value: {s:?}: must be an RFC 3339 time, such as \"2006-01-02T15:04:05Z\""),
        ));
        return;
    }
    if let Value::String(s) = value
        && schema.get("format").and_then(Value::as_str) == Some("byte")
        && nest_core::base64::decode(s).is_none()
    {
        causes.push(Cause::invalid(path, "Invalid value: must be base64-encoded data"));
    }
    match value {
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(rules, item_schema, item, &format!("{path}[{i}]"), causes);
                }
            }
        }
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (key, child) in map {
                match (properties.and_then(|p| p.get(key)), additional) {
                    (Some(child_schema), _) | (None, Some(child_schema)) => {
                        check(rules, child_schema, child, &join(path, key), causes)
                    }
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

/// A value for a message, cut short.
fn shown_short(value: &Value) -> String {
    match value {
        Value::Array(_) => "array".into(),
        Value::Object(_) => "object".into(),
        other => {
            let text = shown(other);
            if text.chars().count() > 64 { format!("{}…", text.chars().take(64).collect::<String>()) } else { text }
        }
    }
}

fn validate_object(rules: Rules<'_>, schema: &Value, map: &Map<String, Value>, path: &str, causes: &mut Vec<Cause>) {
    let root = path.is_empty();
    if flag(schema, "x-kubernetes-embedded-resource") {
        for field in ["apiVersion", "kind"] {
            if map.get(field).and_then(Value::as_str).is_none_or(str::is_empty) {
                causes.push(Cause::required(join(path, field)));
            }
        }
    }
    for required in schema.get("required").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str) {
        if !map.contains_key(required) {
            causes.push(Cause::required(join(path, required)));
        }
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    for (key, child) in map {
        if root && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
            continue;
        }
        let child_path = join(path, key);
        match (properties.and_then(|p| p.get(key)), schema.get("additionalProperties")) {
            (Some(child_schema), _) => check(rules, child_schema, child, &child_path, causes),
            (None, Some(additional)) if additional.is_object() => check(rules, additional, child, &child_path, causes),
            _ => {}
        }
    }
}

/// Removes fields `schema` does not declare, except below `x-kubernetes-preserve-unknown-fields`; returns their
/// paths.
pub fn prune(schema: &Value, value: &mut Value, root: bool) -> Vec<String> {
    let mut pruned = Vec::new();
    prune_with(Rules::STRUCTURAL, schema, value, root, "", &mut pruned);
    pruned
}

fn prune_with(rules: Rules<'_>, schema: &Value, value: &mut Value, root: bool, path: &str, pruned: &mut Vec<String>) {
    let schema = rules.resolve(schema);
    if flag(schema, "x-kubernetes-preserve-unknown-fields") && schema.get("properties").is_none() {
        return;
    }
    match value {
        Value::Object(map) => {
            let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
            let embedded = flag(schema, "x-kubernetes-embedded-resource");
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            // Built-in objects without declared fields (FieldsV1, RawExtension) hold anything.
            let free_form = rules.builtin.is_some() && properties.is_none();
            map.retain(|key, child| {
                let declared = properties.and_then(|p| p.get(key));
                // Type and object metadata belong to the API server; a built-in's schema describes them, a custom
                // resource's does not.
                if (root || embedded)
                    && matches!(key.as_str(), "apiVersion" | "kind" | "metadata")
                    && (rules.builtin.is_none() || declared.is_none())
                {
                    return true;
                }
                let child_path = join(path, key);
                match (declared, additional) {
                    (Some(child_schema), _) | (None, Some(child_schema)) => {
                        prune_with(rules, child_schema, child, false, &child_path, pruned);
                        true
                    }
                    _ => {
                        let keep = preserve
                            || free_form
                            || (properties.is_none() && schema.get("additionalProperties") == Some(&Value::Bool(true)));
                        if !keep {
                            pruned.push(child_path);
                        }
                        keep
                    }
                }
            });
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_with(rules, item_schema, item, false, &format!("{path}[{i}]"), pruned);
                }
            }
        }
        _ => {}
    }
}

/// Fills missing properties that declare a `default`, depth first.
pub fn default(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (key, child_schema) in properties {
                    if !map.contains_key(key)
                        && let Some(default) = child_schema.get("default")
                    {
                        map.insert(key.clone(), default.clone());
                    }
                    if let Some(child) = map.get_mut(key) {
                        self::default(child_schema, child);
                    }
                }
            }
            if let Some(additional) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                let declared = schema.get("properties").and_then(Value::as_object);
                for (key, child) in map.iter_mut() {
                    if declared.is_none_or(|d| !d.contains_key(key)) {
                        self::default(additional, child);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    self::default(item_schema, item);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["size"],
                    "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 10},
                        "mode": {"type": "string", "enum": ["fast", "slow"], "default": "fast"},
                        "name": {"type": "string", "minLength": 2, "maxLength": 5, "pattern": "^[a-z]+$"},
                        "tags": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
                        "port": {"x-kubernetes-int-or-string": true},
                        "note": {"type": "string", "nullable": true},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "template": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true},
                    },
                },
                "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
            },
        })
    }

    fn fields(obj: Value) -> Vec<String> {
        let mut causes = Vec::new();
        validate(&schema(), &obj, "", &mut causes);
        causes.into_iter().map(|c| c.field).collect()
    }

    #[test]
    fn a_valid_object_passes() {
        let obj = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"}, "spec": {"size": 3, "mode": "slow", "name": "ab", "tags": ["a"], "port": "http", "note": null, "labels": {"a": "b"}, "free": {"anything": [1]}, "template": {"apiVersion": "v1", "kind": "Pod"}}});
        assert_eq!(fields(obj), Vec::<String>::new());
    }

    #[test]
    fn every_rule_reports_its_field() {
        assert_eq!(fields(json!({"spec": {}})), ["spec.size"]);
        assert_eq!(fields(json!({"spec": {"size": "three"}})), ["spec.size"]);
        assert_eq!(fields(json!({"spec": {"size": 11}})), ["spec.size"]);
        assert_eq!(fields(json!({"spec": {"size": 1, "mode": "medium"}})), ["spec.mode"]);
        assert_eq!(fields(json!({"spec": {"size": 1, "name": "a"}})), ["spec.name"]);
        assert_eq!(fields(json!({"spec": {"size": 1, "name": "abcdef"}})), ["spec.name"]);
        assert_eq!(fields(json!({"spec": {"size": 1, "name": "AB"}})), ["spec.name"]);
        assert_eq!(fields(json!({"spec": {"size": 1, "tags": ["a", "b", "c"]}})), ["spec.tags"]);
        assert_eq!(fields(json!({"spec": {"size": 1, "tags": [1]}})), ["spec.tags[0]"]);
        assert_eq!(fields(json!({"spec": {"size": 1, "port": 1.5}})), ["spec.port"]);
        assert_eq!(fields(json!({"spec": {"size": 1, "labels": {"a": 1}}})), ["spec.labels.a"]);
        assert_eq!(fields(json!({"spec": {"size": 1, "template": {"kind": "Pod"}}})), ["spec.template.apiVersion"]);
        assert_eq!(fields(json!({"spec": {"size": null}})), ["spec.size"]);
        let mut causes = Vec::new();
        validate(&schema(), &json!({"spec": {"size": "three"}}), "", &mut causes);
        assert_eq!(
            causes[0].message,
            "Invalid value: \"string\": spec.size in body must be of type integer: \"string\""
        );
    }

    #[test]
    fn a_built_in_integer_must_fit_its_go_type() {
        let pods = nest_openapi::kind_schema("", "v1", "Pod").unwrap();
        let pod = |grace: Value, port: Value, probe_port: Value| {
            json!({"spec": {"terminationGracePeriodSeconds": grace, "containers": [{"name": "c", "image": "i",
                "ports": [{"containerPort": port}], "livenessProbe": {"tcpSocket": {"port": probe_port}}}]}})
        };
        let causes = |obj: Value| -> Vec<String> {
            validate_builtin(&pods, &obj).into_iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
        };
        // A quantity is text of resource.ParseQuantity's grammar, or a number.
        let limits = |cpu: Value| json!({"spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": cpu}}}]}});
        assert!(causes(limits(json!("8000000000n"))).is_empty());
        assert!(causes(limits(json!(0.5))).is_empty());
        assert_eq!(
            causes(limits(json!("lots"))),
            [format!("spec.containers[0].resources.limits.cpu: {}", nest_core::quantity::FORMAT_ERROR)]
        );
        // A time is RFC 3339, within the years a timestamp holds.
        let events = nest_openapi::kind_schema("", "v1", "Event").unwrap();
        let event = |time: &str| json!({"lastTimestamp": time, "involvedObject": {}});
        assert!(validate_builtin(&events, &event("2026-12-04T10:00:00.5+01:00")).is_empty());
        assert!(validate_builtin(&events, &event("")).is_empty());
        for bad in ["yesterday", "99999999999999999-01-01T00:00:00Z", "2026-13-01T00:00:00Z"] {
            assert_eq!(validate_builtin(&events, &event(bad))[0].field, "lastTimestamp", "{bad}");
        }
        let (max32, max64) = (json!(i32::MAX), json!(i64::MAX));
        assert!(causes(pod(max64.clone(), max32.clone(), max32.clone())).is_empty());
        assert!(causes(pod(json!(i64::MIN), json!(i32::MIN), json!("http"))).is_empty());
        assert_eq!(
            causes(pod(json!(u64::MAX), json!(i64::from(i32::MAX) + 1), json!(i64::from(i32::MIN) - 1))),
            [
                "spec.containers[0].livenessProbe.tcpSocket.port: Invalid value: -2147483649: must be of type int32",
                "spec.containers[0].ports[0].containerPort: Invalid value: 2147483648: must be of type int32",
                "spec.terminationGracePeriodSeconds: Invalid value: 18446744073709551615: must be of type int64",
            ]
        );
    }

    #[test]
    fn pruning_drops_undeclared_fields_but_keeps_preserved_ones() {
        let mut obj = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"}, "extra": 1, "spec": {"size": 1, "unknown": true, "free": {"kept": 1}, "labels": {"a": "b"}, "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {}}}, "status": {"ready": true, "junk": 1}});
        prune(&schema(), &mut obj, true);
        assert_eq!(
            obj,
            json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"}, "spec": {"size": 1, "free": {"kept": 1}, "labels": {"a": "b"}, "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {}}}, "status": {"ready": true}})
        );
    }

    #[test]
    fn defaults_fill_missing_properties() {
        let mut obj = json!({"spec": {"size": 1}});
        default(&schema(), &mut obj);
        assert_eq!(obj["spec"]["mode"], "fast");
        let mut explicit = json!({"spec": {"size": 1, "mode": "slow"}});
        default(&schema(), &mut explicit);
        assert_eq!(explicit["spec"]["mode"], "slow");
    }
}
