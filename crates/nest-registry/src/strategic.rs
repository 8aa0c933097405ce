//! Strategic merge patch, as kube-apiserver applies it to built-in kinds
//! (`application/strategic-merge-patch+json`; what `kubectl apply`, `edit`, `set image` and `rollout restart` send).
//!
//! A patch has the object's shape. Maps merge key by key, `null` removes a key, and anything else replaces — except
//! the fields [`nest_openapi::patch_meta`] lists, reached by walking the kind's schema alongside the patch:
//! - a list with strategy `merge` and a merge key (a pod's `containers` by `name`) merges item by item: a patch
//!   item replaces-by-merging the original item with the same key, or is appended; `{"name": N, "$patch":
//!   "delete"}` removes item N, and an item `{"$patch": "replace"}` makes the rest of the patch list the whole list;
//! - a list of primitives with strategy `merge` (`metadata.finalizers`) is a set: patch values are added, and
//!   `$deleteFromPrimitiveList/<field>` next to it removes values;
//! - `$setElementOrder/<field>` next to a merged list gives the order of the items it names (items only the server
//!   has keep their places);
//! - `$retainKeys` in a map (a Deployment's `strategy`, a pod volume) clears the original's keys not listed;
//! - `{"$patch": "replace"}` in a map replaces the map, `{"$patch": "delete"}` empties it.
//!
//! Directives never reach the stored object.

use nest_openapi::KindSchema;
use nest_openapi::patch_meta::{self, Strategy};
use serde_json::{Map, Value};

use nest_core::patch::PatchError;

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";

fn err(message: impl Into<String>) -> PatchError {
    PatchError(message.into())
}

/// Applies strategic merge patch `patch` to `original`, an object of the kind `schema` describes.
pub fn strategic_merge(original: &Value, patch: &Value, schema: &KindSchema) -> Result<Value, PatchError> {
    let Value::Object(patch) = patch else {
        return Err(err("a strategic merge patch must be a JSON object"));
    };
    let original = match original {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    let at = Place { schema, node: Some(&schema.root) };
    Ok(Value::Object(merge_map(original, patch, at)?))
}

/// Where in the schema a value is: the schema node (unknown below fields the schema does not describe).
#[derive(Clone, Copy)]
struct Place<'a> {
    schema: &'a KindSchema,
    node: Option<&'a Value>,
}

impl<'a> Place<'a> {
    /// The definition name and resolved schema here.
    fn resolved(&self) -> (Option<&'a str>, Option<&'a Value>) {
        match self.node {
            Some(node) => {
                let (name, schema) = self.schema.resolve_named(node);
                (name, Some(schema))
            }
            None => (None, None),
        }
    }

    /// The place of field `field` of the object here, and its patch strategy.
    fn field(&self, field: &str) -> (Place<'a>, Option<Strategy>) {
        let (name, schema) = self.resolved();
        let strategy = name.and_then(|n| patch_meta::strategy(n, field));
        let node = schema.and_then(|s| s.get("properties")?.get(field).or_else(|| s.get("additionalProperties")));
        (Place { schema: self.schema, node }, strategy)
    }

    /// The place of the items of the list here.
    fn items(&self) -> Place<'a> {
        let (_, schema) = self.resolved();
        Place { schema: self.schema, node: schema.and_then(|s| s.get("items")) }
    }
}

fn merge_map(
    mut original: Map<String, Value>,
    patch: &Map<String, Value>,
    at: Place,
) -> Result<Map<String, Value>, PatchError> {
    match patch.get(PATCH) {
        None => {}
        Some(Value::String(directive)) => match directive.as_str() {
            "replace" => return Ok(clean_map(patch)),
            "delete" => return Ok(Map::new()),
            "merge" => {}
            other => return Err(err(format!("unknown patch type: {other} in map: {}", Value::Object(patch.clone())))),
        },
        Some(other) => return Err(err(format!("invalid value for $patch: {other}"))),
    }
    if let Some(retain) = patch.get(RETAIN_KEYS) {
        let retain: Vec<&str> = retain
            .as_array()
            .ok_or_else(|| err("$retainKeys must be a list of strings"))?
            .iter()
            .map(|k| k.as_str().ok_or_else(|| err("$retainKeys must be a list of strings")))
            .collect::<Result<_, _>>()?;
        // (A key set to null may be left out: kubectl sends `rollingUpdate: null` next to `$retainKeys: [type]`.)
        for key in patch.iter().filter(|(k, v)| !k.starts_with('$') && !v.is_null()).map(|(k, _)| k) {
            if !retain.contains(&key.as_str()) {
                return Err(err(format!(
                    "$retainKeys: field {key:?} is in the patch but not in the list of keys to retain"
                )));
            }
        }
        original.retain(|k, _| retain.contains(&k.as_str()));
    }
    // The server's order of the lists the patch orders, from before the merge.
    let server_orders: Vec<(String, Vec<Value>)> = patch
        .keys()
        .filter_map(|k| k.strip_prefix(SET_ELEMENT_ORDER))
        .map(|field| {
            let list = original.get(field).and_then(Value::as_array).cloned().unwrap_or_default();
            (field.to_string(), list)
        })
        .collect();
    // Values to take out of primitive lists, before the merge.
    for (key, values) in patch {
        let Some(field) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) else { continue };
        let values = values.as_array().ok_or_else(|| err(format!("{key} must be a list")))?;
        if let Some(Value::Array(list)) = original.get_mut(field) {
            list.retain(|v| !values.contains(v));
        }
    }
    for (key, value) in patch {
        if key.starts_with('$') {
            continue;
        }
        let (place, strategy) = at.field(key);
        if value.is_null() {
            original.remove(key);
            continue;
        }
        let merged = match (original.remove(key), value) {
            (Some(Value::Object(have)), Value::Object(patch)) => {
                if strategy.is_some_and(|s| s.replace) {
                    Value::Object(clean_map(patch))
                } else {
                    Value::Object(merge_map(have, patch, place)?)
                }
            }
            (Some(Value::Array(have)), Value::Array(patch)) => match strategy.filter(|s| s.merge) {
                Some(strategy) => Value::Array(merge_list(have, patch, strategy, place.items())?),
                None => Value::Array(clean_list(patch)),
            },
            (_, value) => clean(value),
        };
        original.insert(key.clone(), merged);
    }
    for (key, order) in patch {
        let Some(field) = key.strip_prefix(SET_ELEMENT_ORDER) else { continue };
        let order = order.as_array().ok_or_else(|| err(format!("{key} must be a list")))?;
        let (_, strategy) = at.field(field);
        let server = server_orders.iter().find(|(f, _)| f == field).map(|(_, l)| l.as_slice()).unwrap_or_default();
        if let Some(Value::Array(list)) = original.get_mut(field) {
            let ordered = reorder(std::mem::take(list), order, server, strategy.and_then(|s| s.key))?;
            *list = ordered;
        }
    }
    Ok(original)
}

/// Merges list `patch` into `original` by merge key (objects) or as a set (primitives).
fn merge_list(
    original: Vec<Value>,
    patch: &[Value],
    strategy: Strategy,
    items: Place,
) -> Result<Vec<Value>, PatchError> {
    let replace = patch.iter().any(|item| item.get(PATCH).and_then(Value::as_str) == Some("replace"));
    if replace {
        let rest: Vec<Value> =
            patch.iter().filter(|item| item.get(PATCH).and_then(Value::as_str) != Some("replace")).cloned().collect();
        return Ok(clean_list(&rest));
    }
    let Some(key) = strategy.key else {
        // Primitives: a set. Patch values not there yet are appended.
        let mut merged = original;
        for value in patch {
            if value.is_object() {
                return Err(err("a merged list of primitives cannot hold an object"));
            }
            if !merged.contains(value) {
                merged.push(value.clone());
            }
        }
        return Ok(merged);
    };
    let mut merged = original;
    for item in patch {
        let Value::Object(fields) = item else {
            return Err(err(format!("the items of a list merged by {key:?} must be objects, not {item}")));
        };
        let id =
            fields.get(key).ok_or_else(|| err(format!("map: {item} does not contain declared merge key: {key}")))?;
        let position = merged.iter().position(|m| m.get(key) == Some(id));
        match fields.get(PATCH).and_then(Value::as_str) {
            Some("delete") => {
                merged.retain(|m| m.get(key) != Some(id));
            }
            _ => match position {
                Some(i) => {
                    let have = match std::mem::take(&mut merged[i]) {
                        Value::Object(map) => map,
                        _ => Map::new(),
                    };
                    merged[i] = Value::Object(merge_map(have, fields, items)?);
                }
                None => merged.push(Value::Object(clean_map(fields))),
            },
        }
    }
    Ok(merged)
}

/// Orders a merged list as kube-apiserver does for `$setElementOrder`: the items `order` names, in that order, are
/// interleaved with the items only the server has (in the server's order), an item of either kind going first when
/// it came first in the server's list before the patch (`server`).
fn reorder(list: Vec<Value>, order: &[Value], server: &[Value], key: Option<&str>) -> Result<Vec<Value>, PatchError> {
    let identity = |item: &Value| -> Option<Value> {
        match key {
            Some(key) => item.get(key).cloned(),
            None => Some(item.clone()),
        }
    };
    let wanted: Vec<Value> = order
        .iter()
        .map(|o| identity(o).ok_or_else(|| err(format!("$setElementOrder: {o} does not contain the merge key"))))
        .collect::<Result<_, _>>()?;
    let rank = |item: &Value| identity(item).and_then(|id| wanted.iter().position(|w| *w == id));
    let server_rank =
        |item: &Value| identity(item).and_then(|id| server.iter().position(|s| identity(s) == Some(id.clone())));
    let (mut named, server_only): (Vec<Value>, Vec<Value>) = list.into_iter().partition(|item| rank(item).is_some());
    named.sort_by_key(|item| rank(item));
    let mut merged = Vec::with_capacity(named.len() + server_only.len());
    let (mut left, mut right) = (named.into_iter().peekable(), server_only.into_iter().peekable());
    loop {
        match (left.peek(), right.peek()) {
            (Some(l), Some(r)) => {
                let first = matches!((server_rank(l), server_rank(r)), (Some(a), Some(b)) if a < b);
                let next = if first { left.next() } else { right.next() };
                merged.extend(next);
            }
            (Some(_), None) => merged.extend(left.next()),
            (None, Some(_)) => merged.extend(right.next()),
            (None, None) => break,
        }
    }
    Ok(merged)
}

/// A patch without its directives (what `fieldValidation` looks at).
pub fn without_directives(patch: &Value) -> Value {
    clean(patch)
}

/// A value from the patch as it is stored: without directives, without nulls (they remove nothing that is not there).
fn clean(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(clean_map(map)),
        Value::Array(list) => Value::Array(clean_list(list)),
        other => other.clone(),
    }
}

fn clean_map(map: &Map<String, Value>) -> Map<String, Value> {
    map.iter().filter(|(k, v)| !k.starts_with('$') && !v.is_null()).map(|(k, v)| (k.clone(), clean(v))).collect()
}

fn clean_list(list: &[Value]) -> Vec<Value> {
    list.iter()
        .filter(|item| !matches!(item.get(PATCH).and_then(Value::as_str), Some("delete" | "replace")))
        .map(clean)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patched(kind: (&str, &str, &str), original: Value, patch: Value) -> Value {
        let schema = nest_openapi::kind_schema(kind.0, kind.1, kind.2).unwrap();
        strategic_merge(&original, &patch, &schema).unwrap()
    }

    /// What the case shows, the kind, the original, the patch and the result.
    type Case = (&'static str, (&'static str, &'static str, &'static str), Value, Value, Value);

    const POD: (&str, &str, &str) = ("", "v1", "Pod");
    const DEPLOYMENT: (&str, &str, &str) = ("apps", "v1", "Deployment");

    /// Cases from Kubernetes' documentation of strategic merge patch ("Update API Objects in Place Using kubectl
    /// patch") and of the patch directives (the `strategic-merge-patch.md` design document), one per row.
    #[test]
    fn documented_cases() {
        let cases: Vec<Case> = vec![
            (
                "containers merge by name: a patch container is added to the list",
                POD,
                json!({"spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}),
                json!({"spec": {"containers": [{"name": "redis", "image": "redis"}]}}),
                json!({"spec": {"containers": [{"name": "nginx", "image": "nginx"}, {"name": "redis", "image": "redis"}]}}),
            ),
            (
                "a container of the same name is merged field by field",
                POD,
                json!({"spec": {"containers": [{"name": "web", "image": "nginx:1", "args": ["a"]}]}}),
                json!({"spec": {"containers": [{"name": "web", "image": "nginx:2"}]}}),
                json!({"spec": {"containers": [{"name": "web", "image": "nginx:2", "args": ["a"]}]}}),
            ),
            (
                "tolerations have no strategy: the list is replaced",
                POD,
                json!({"spec": {"tolerations": [{"key": "a", "effect": "NoSchedule"}]}}),
                json!({"spec": {"tolerations": [{"key": "b", "effect": "NoSchedule"}]}}),
                json!({"spec": {"tolerations": [{"key": "b", "effect": "NoSchedule"}]}}),
            ),
            (
                "env merges by name; null removes a field of an item",
                POD,
                json!({"spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}]}}),
                json!({"spec": {"containers": [{"name": "c", "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}]}]}}),
                json!({"spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C", "value": "4"}]}]}}),
            ),
            (
                "$patch: delete removes the item with that key",
                POD,
                json!({"spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}]}}),
                json!({"spec": {"containers": [{"name": "c", "env": [{"name": "A", "$patch": "delete"}]}]}}),
                json!({"spec": {"containers": [{"name": "c", "env": [{"name": "B", "value": "2"}]}]}}),
            ),
            (
                "an item {$patch: replace} makes the patch list the whole list",
                POD,
                json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}}),
                json!({"spec": {"containers": [{"name": "c", "image": "z"}, {"$patch": "replace"}]}}),
                json!({"spec": {"containers": [{"name": "c", "image": "z"}]}}),
            ),
            (
                "ports merge by containerPort",
                POD,
                json!({"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80, "name": "http"}]}]}}),
                json!({"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 443}]}]}}),
                json!({"spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80, "name": "http", "protocol": "TCP"}, {"containerPort": 443}]}]}}),
            ),
            (
                "finalizers are a set; $deleteFromPrimitiveList removes values",
                POD,
                json!({"metadata": {"finalizers": ["a", "b"]}}),
                json!({"metadata": {"finalizers": ["c", "a"], "$deleteFromPrimitiveList/finalizers": ["b"]}}),
                json!({"metadata": {"finalizers": ["a", "c"]}}),
            ),
            (
                "ownerReferences merge by uid",
                POD,
                json!({"metadata": {"ownerReferences": [{"uid": "1", "name": "a", "kind": "K", "apiVersion": "v1"}]}}),
                json!({"metadata": {"ownerReferences": [{"uid": "1", "controller": true}, {"uid": "2", "name": "b", "kind": "K", "apiVersion": "v1"}]}}),
                json!({"metadata": {"ownerReferences": [{"uid": "1", "name": "a", "kind": "K", "apiVersion": "v1", "controller": true}, {"uid": "2", "name": "b", "kind": "K", "apiVersion": "v1"}]}}),
            ),
            (
                "labels (a map) merge; null removes one",
                POD,
                json!({"metadata": {"labels": {"a": "1", "b": "2"}}}),
                json!({"metadata": {"labels": {"b": null, "c": "3"}}}),
                json!({"metadata": {"labels": {"a": "1", "c": "3"}}}),
            ),
            (
                "$retainKeys: changing a Deployment's strategy to Recreate clears rollingUpdate",
                DEPLOYMENT,
                json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}}),
                json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": null, "type": "Recreate"}}}),
                json!({"spec": {"strategy": {"type": "Recreate"}}}),
            ),
            (
                "$retainKeys in a volume: a new source replaces the old one",
                POD,
                json!({"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}}),
                json!({"spec": {"volumes": [{"name": "v", "$retainKeys": ["configMap", "name"], "configMap": {"name": "cm"}}]}}),
                json!({"spec": {"volumes": [{"name": "v", "configMap": {"name": "cm"}}]}}),
            ),
            (
                "$patch: replace on a map replaces it",
                DEPLOYMENT,
                json!({"spec": {"selector": {"matchLabels": {"a": "1", "b": "2"}}}}),
                json!({"spec": {"selector": {"$patch": "replace", "matchLabels": {"c": "3"}}}}),
                json!({"spec": {"selector": {"matchLabels": {"c": "3"}}}}),
            ),
            (
                "$setElementOrder orders the named items; the server's own go where they were relative to them",
                POD,
                json!({"spec": {"containers": [{"name": "a"}, {"name": "s"}, {"name": "b"}]}}),
                json!({"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}], "containers": [{"name": "b", "image": "x"}]}}),
                json!({"spec": {"containers": [{"name": "s"}, {"name": "b", "image": "x"}, {"name": "a"}]}}),
            ),
            (
                "conditions in status merge by type",
                DEPLOYMENT,
                json!({"status": {"conditions": [{"type": "Available", "status": "True"}, {"type": "Progressing", "status": "True"}]}}),
                json!({"status": {"conditions": [{"type": "Available", "status": "False"}]}}),
                json!({"status": {"conditions": [{"type": "Available", "status": "False"}, {"type": "Progressing", "status": "True"}]}}),
            ),
            (
                "a new field's nested directives and nulls are not stored",
                POD,
                json!({"spec": {}}),
                json!({"spec": {"containers": [{"name": "c", "env": [{"name": "X", "$patch": "delete"}], "args": null}]}}),
                json!({"spec": {"containers": [{"name": "c", "env": []}]}}),
            ),
        ];
        for (what, kind, original, patch, want) in cases {
            assert_eq!(patched(kind, original, patch), want, "{what}");
        }
    }

    #[test]
    fn malformed_patches_are_errors() {
        let schema = nest_openapi::kind_schema("", "v1", "Pod").unwrap();
        let original = json!({"spec": {"containers": [{"name": "a"}], "volumes": [{"name": "v", "emptyDir": {}}]}});
        for patch in [
            json!({"spec": {"containers": [{"image": "no-name"}]}}),
            json!({"spec": {"$patch": "explode"}}),
            json!({"spec": {"containers": ["a string"]}}),
            json!({"spec": {"volumes": [{"name": "v", "$retainKeys": "emptyDir"}]}}),
            json!({"spec": {"volumes": [{"name": "v", "$retainKeys": ["name"], "hostPath": {"path": "/"}}]}}),
            json!([1]),
        ] {
            assert!(strategic_merge(&original, &patch, &schema).is_err(), "{patch}");
        }
    }
}
