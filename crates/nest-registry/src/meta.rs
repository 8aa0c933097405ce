//! Object metadata helpers over `serde_json::Value`: reading and writing `metadata.*`, timestamps, UIDs and
//! generated names.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// `metadata`, created if missing.
pub fn metadata_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = json!({});
    }
    let map = obj.as_object_mut().expect("an object");
    let meta = map.entry("metadata").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    meta.as_object_mut().expect("an object")
}

/// `metadata.<field>` as a string, or "".
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj.get("metadata").and_then(|m| m.get(field)).and_then(Value::as_str).unwrap_or("")
}

pub fn name(obj: &Value) -> &str {
    meta_str(obj, "name")
}

pub fn namespace(obj: &Value) -> &str {
    meta_str(obj, "namespace")
}

pub fn labels(obj: &Value) -> BTreeMap<String, String> {
    obj.get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .map(|l| l.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect())
        .unwrap_or_default()
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|f| f.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// Leaves out the metadata collections that are empty or null, as kube-apiserver's encoding does (ObjectMeta's
/// `labels`, `annotations`, `finalizers`, `ownerReferences` and `managedFields` are `omitempty` in Go): an object
/// written with `ownerReferences: []` (the garbage collector orphaning it, a client clearing its labels) reads back
/// without the field.
pub fn drop_empty_collections(obj: &mut Value) {
    let Some(metadata) = obj.get_mut("metadata").and_then(Value::as_object_mut) else { return };
    for field in ["labels", "annotations", "finalizers", "ownerReferences", "managedFields"] {
        let empty = match metadata.get(field) {
            Some(Value::Null) => true,
            Some(Value::Array(items)) => items.is_empty(),
            Some(Value::Object(map)) => map.is_empty(),
            _ => false,
        };
        if empty {
            metadata.remove(field);
        }
    }
}

pub fn is_deleting(obj: &Value) -> bool {
    obj.get("metadata").and_then(|m| m.get("deletionTimestamp")).is_some_and(|t| !t.is_null())
}

/// A dotted path such as `status.phase` or `spec.nodeName`, as a string ("" when absent).
pub fn path_str(obj: &Value, path: &str) -> String {
    let mut at = obj;
    for part in path.split('.') {
        match at.get(part) {
            Some(next) => at = next,
            None => return String::new(),
        }
    }
    match at {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A random version-4 UUID.
pub fn new_uid() -> String {
    let mut b: [u8; 16] = fastrand::u128(..).to_le_bytes();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// The characters Kubernetes draws generated name suffixes from (no vowels, no confusable digits).
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `generateName` plus five random characters, the prefix cut to 58 characters.
pub fn generate_name(prefix: &str) -> String {
    let prefix: String = prefix.chars().take(58).collect();
    let suffix: String = (0..5).map(|_| SUFFIX_ALPHABET[fastrand::usize(..SUFFIX_ALPHABET.len())] as char).collect();
    format!("{prefix}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_and_generated_names_have_the_kubernetes_shape() {
        let uid = new_uid();
        assert_eq!(uid.len(), 36);
        assert_eq!(&uid[14..15], "4");
        let name = generate_name(&"x".repeat(70));
        assert_eq!(name.len(), 63);
        assert!(name[58..].bytes().all(|c| SUFFIX_ALPHABET.contains(&c)));
    }

    #[test]
    fn paths_read_nested_fields() {
        let pod = json!({"spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        assert_eq!(path_str(&pod, "spec.nodeName"), "n1");
        assert_eq!(path_str(&pod, "status.podIP"), "");
    }
}
