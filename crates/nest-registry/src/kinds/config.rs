//! ConfigMaps and Secrets: keys that can be file names in a volume (`ValidateConfigMap`, `ValidateSecret`), what
//! `immutable: true` freezes (`ValidateConfigMapUpdate`, `ValidateSecretUpdate`), and a Secret's default type, fixed
//! once set, and write-only `stringData`.

use serde_json::Value;

use crate::error::Cause;
use crate::strategy::Strategy;
use crate::validation;

/// The keys of `obj`'s `data` and `binaryData` as config keys, each refusal a cause at `data[<key>]`, and a key in
/// both a cause too (`ValidateConfigMap` and `ValidateSecret` in pkg/apis/core/validation, 1.33).
fn config_keys(obj: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    for field in ["data", "binaryData"] {
        for key in obj[field].as_object().into_iter().flat_map(|m| m.keys()) {
            for message in validation::config_map_key(key) {
                causes.push(Cause::invalid(format!("{field}[{key}]"), format!("Invalid value: {key:?}: {message}")));
            }
            if field == "binaryData" && obj["data"].get(key).is_some() {
                causes.push(Cause::invalid(
                    format!("{field}[{key}]"),
                    format!("Invalid value: {key:?}: duplicate of key present in data"),
                ));
            }
        }
    }
    causes
}

/// What an update may not change once the old object says `immutable: true`: the flag itself and `fields`.
fn frozen(obj: &Value, old: &Value, fields: &[&str]) -> Vec<Cause> {
    if old["immutable"] != Value::Bool(true) {
        return Vec::new();
    }
    let forbidden = |field: &str| Cause {
        reason: "FieldValueForbidden",
        message: "Forbidden: field is immutable when `immutable` is set".into(),
        field: field.into(),
    };
    let mut causes = Vec::new();
    if obj["immutable"] != Value::Bool(true) {
        causes.push(forbidden("immutable"));
    }
    causes.extend(fields.iter().filter(|field| obj.get(**field) != old.get(**field)).map(|field| forbidden(field)));
    causes
}

/// ConfigMaps: their keys, which become file names in volumes.
pub struct ConfigMap;

impl Strategy for ConfigMap {
    fn validate(&self, obj: &Value) -> Vec<Cause> {
        config_keys(obj)
    }

    fn validate_update(&self, obj: &Value, old: &Value) -> Vec<Cause> {
        let mut causes = frozen(obj, old, &["data", "binaryData"]);
        causes.extend(config_keys(obj));
        causes
    }
}

/// Secrets: a default type, the `type` field selector, and keys that can be file names.
pub struct Secret;

impl Strategy for Secret {
    fn prepare_for_create(&self, obj: &mut Value) {
        if obj.get("type").is_none_or(|t| t.as_str().is_none_or(str::is_empty)) {
            obj["type"] = Value::String("Opaque".into());
        }
        // `stringData` is write-only: its entries go into `data`, winning over entries of the same key, as the core
        // v1 conversion does.
        if let Some(Value::Object(strings)) = obj.as_object_mut().and_then(|o| o.remove("stringData")) {
            if !obj.get("data").is_some_and(Value::is_object) {
                obj["data"] = serde_json::json!({});
            }
            for (key, value) in strings {
                let text = value.as_str().unwrap_or_default();
                obj["data"][key] = Value::String(nest_core::base64::encode(text.as_bytes()));
            }
        }
    }

    fn validate(&self, obj: &Value) -> Vec<Cause> {
        config_keys(obj)
    }

    fn validate_update(&self, obj: &Value, old: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        if obj["type"] != old["type"] {
            let shown = obj["type"].as_str().unwrap_or_default();
            causes.push(Cause::invalid("type", format!("Invalid value: {shown:?}: field is immutable")));
        }
        causes.extend(frozen(obj, old, &["data"]));
        causes.extend(config_keys(obj));
        causes
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["type"]
    }
}
