//! Server-side apply and `metadata.managedFields`, as kube-apiserver keeps them.
//!
//! Every write made through the API server is recorded in the object's `managedFields`: per field manager and
//! operation, the set of fields it owns, in the `FieldsV1` format (a trie of `f:<field>`, `k:<keys of a list item>`,
//! `v:<set value>`, with `.` marking a node that is itself owned). An update (`Update`) takes ownership of the fields
//! it changed from everyone else; an apply (`Apply`, `application/apply-patch+yaml`) declares the whole set of fields
//! its manager wants:
//! - fields it sets that another manager owns with a different value are conflicts (409 with a
//!   `FieldManagerConflict` cause per field) unless `force=true`, which takes them over;
//! - fields it applied before and no longer applies are removed from the object, unless another manager owns them;
//! - the applied configuration is merged into the object: maps and structures field by field, lists by their
//!   `x-kubernetes-list-type` (`map` items by their keys, `set` items by value, others replaced as a whole), and
//!   `x-kubernetes-map-type: atomic` structures as a whole ([`nest_openapi::list_meta`] for built-in kinds, the
//!   CRD's schema for custom resources).
//!
//! kubectl's upgrade from client-side apply: when manager `kubectl` conflicts only over fields the object's
//! last-applied-configuration annotation sets (fields it applied client-side before), the apply is forced.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, LazyLock};

use nest_openapi::KindSchema;
use nest_openapi::list_meta::{self, ListType as Published};
use serde_json::{Map, Value, json};

use crate::error::{ApiError, Cause, Result};
use crate::resource::Resource;
use crate::strategy::Subresource;

/// One element of a field path, encoded as FieldsV1 encodes it (`f:spec`, `k:{"name":"web"}`, `v:"x"`).
pub type Path = Vec<String>;
/// A set of field paths.
pub type Set = BTreeSet<Path>;

/// kubectl's manager for client-side apply (tests).
#[cfg(test)]
const CLIENT_SIDE_APPLY: &str = "kubectl-client-side-apply";
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Metadata that is the object's identity or the server's, never owned.
const SERVER_METADATA: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
];

/// ObjectMeta's schema, for custom resources' metadata.
static META: LazyLock<Arc<KindSchema>> = LazyLock::new(nest_openapi::object_meta_schema);

/// How a list merges: as a whole, as a set, or as a map by the values of these keys.
enum ListType<'a> {
    Atomic,
    Set,
    Map(Vec<&'a str>),
}

/// Where a value sits in its kind's schema.
#[derive(Clone, Copy)]
enum At<'a> {
    /// A built-in kind: its schema and the node (unknown below fields the schema does not describe).
    Builtin(&'a KindSchema, Option<&'a Value>),
    /// A custom resource: the node of its CRD's structural schema.
    Custom(Option<&'a Value>),
}

impl<'a> At<'a> {
    fn root(resource: &'a Resource) -> At<'a> {
        match &resource.schema {
            Some(schema) => At::Builtin(schema, Some(&schema.root)),
            None => At::Custom(resource.info.schema.as_deref()),
        }
    }

    /// The definition name (built-in) and resolved schema here.
    fn resolved(self) -> (Option<&'a str>, Option<&'a Value>) {
        match self {
            At::Builtin(schema, Some(node)) => {
                let (name, node) = schema.resolve_named(node);
                (name, Some(node))
            }
            At::Builtin(_, None) => (None, None),
            At::Custom(node) => (None, node),
        }
    }

    fn field(self, field: &str, top: bool) -> At<'a> {
        if top && field == "metadata" && matches!(self, At::Custom(_)) {
            let meta: &KindSchema = &META;
            return At::Builtin(meta, Some(&meta.root));
        }
        let (_, node) = self.resolved();
        let child =
            node.and_then(|n| n.get("properties").and_then(|p| p.get(field)).or_else(|| n.get("additionalProperties")));
        match self {
            At::Builtin(schema, _) => At::Builtin(schema, child),
            At::Custom(_) => At::Custom(child.filter(|c| c.is_object())),
        }
    }

    fn items(self) -> At<'a> {
        let (_, node) = self.resolved();
        let items = node.and_then(|n| n.get("items"));
        match self {
            At::Builtin(schema, _) => At::Builtin(schema, items),
            At::Custom(_) => At::Custom(items),
        }
    }

    /// How the list in `field` here merges.
    fn list_type(self, field: &str) -> ListType<'a> {
        match self {
            At::Builtin(..) => match self.resolved().0.map(|definition| list_meta::list_type(definition, field)) {
                Some(Published::Set) => ListType::Set,
                Some(Published::Map(keys)) => ListType::Map(keys.to_vec()),
                Some(Published::Atomic) | None => ListType::Atomic,
            },
            At::Custom(_) => {
                let At::Custom(Some(node)) = self.field(field, false) else { return ListType::Atomic };
                match node["x-kubernetes-list-type"].as_str() {
                    Some("set") => ListType::Set,
                    Some("map") => ListType::Map(
                        node["x-kubernetes-list-map-keys"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(Value::as_str)
                            .collect(),
                    ),
                    _ => ListType::Atomic,
                }
            }
        }
    }

    /// Whether the structure in `field` here is atomic.
    fn atomic(self, field: &str) -> bool {
        match self {
            At::Builtin(..) => {
                let (definition, _) = self.resolved();
                if let Some(kind) = definition.and_then(|d| list_meta::field_map_type(d, field)) {
                    return kind == "atomic";
                }
                let (child, _) = self.field(field, false).resolved();
                child.is_some_and(list_meta::atomic_definition)
            }
            At::Custom(_) => match self.field(field, false) {
                At::Custom(Some(node)) => node["x-kubernetes-map-type"] == "atomic",
                _ => false,
            },
        }
    }
}

/// The values of a list item's keys, as its `k:` element names them (missing `protocol` is TCP, its default).
fn item_key(item: &Value, keys: &[&str]) -> Option<String> {
    let mut map = BTreeMap::new();
    for key in keys {
        match item.get(*key) {
            Some(value) if !value.is_null() => {
                map.insert(key.to_string(), value.clone());
            }
            _ if *key == "protocol" => {
                map.insert(key.to_string(), json!("TCP"));
            }
            _ => {}
        }
    }
    if map.is_empty() {
        return None;
    }
    Some(format!("k:{}", serde_json::to_string(&map).expect("JSON")))
}

/// Whether `element` (`f:…` of the top level) is owned by nobody: identity, server fields, and the status or the
/// rest, depending on the subresource.
fn skipped_top(field: &str, subresource: Subresource, has_status: bool) -> bool {
    match subresource {
        Subresource::Status => field != "status",
        _ => field == "apiVersion" || field == "kind" || (has_status && field == "status"),
    }
}

/// What `object` sets: every field path, with its value (`None` for a list item's own membership, `k:`/`v:`).
type Fields<'v> = BTreeMap<Path, Option<&'v Value>>;

/// The fields `object` sets.
fn fields_of(object: &Value, resource: &Resource, subresource: Subresource) -> Set {
    collect(object, resource, subresource).into_keys().collect()
}

/// The fields `object` sets, with their values.
fn collect<'v>(object: &'v Value, resource: &Resource, subresource: Subresource) -> Fields<'v> {
    let mut set = Fields::new();
    let mut path = Vec::new();
    let Value::Object(map) = object else { return set };
    for (field, value) in map {
        if skipped_top(field, subresource, resource.info.status) {
            continue;
        }
        path.push(format!("f:{field}"));
        if field == "metadata" {
            if let Value::Object(meta) = value {
                let at = At::root(resource).field("metadata", true);
                for (key, value) in meta.iter().filter(|(k, _)| !SERVER_METADATA.contains(&k.as_str())) {
                    path.push(format!("f:{key}"));
                    walk_field(value, at, key, &mut path, &mut set);
                    path.pop();
                }
            }
        } else {
            walk_field(value, At::root(resource), field, &mut path, &mut set);
        }
        path.pop();
    }
    set
}

/// Adds the fields of `value`, the value of `field` of the structure at `parent`, found at `path`.
fn walk_field<'v>(value: &'v Value, parent: At, field: &str, path: &mut Path, set: &mut Fields<'v>) {
    match value {
        Value::Object(map) if !map.is_empty() && !parent.atomic(field) => {
            let at = parent.field(field, false);
            for (key, child) in map {
                path.push(format!("f:{key}"));
                walk_field(child, at, key, path, set);
                path.pop();
            }
        }
        Value::Array(items) if !items.is_empty() => match parent.list_type(field) {
            ListType::Atomic => {
                set.insert(path.clone(), Some(value));
            }
            ListType::Set => {
                for item in items {
                    path.push(format!("v:{}", serde_json::to_string(item).expect("JSON")));
                    set.insert(path.clone(), None);
                    path.pop();
                }
            }
            ListType::Map(keys) => {
                let at = parent.field(field, false).items();
                for item in items {
                    let Some(key) = item_key(item, &keys) else {
                        set.insert(path.clone(), Some(value));
                        continue;
                    };
                    path.push(key);
                    set.insert(path.clone(), None);
                    if let Value::Object(fields) = item {
                        for (name, child) in fields {
                            path.push(format!("f:{name}"));
                            walk_field(child, at, name, path, set);
                            path.pop();
                        }
                    }
                    path.pop();
                }
            }
        },
        _ => {
            set.insert(path.clone(), Some(value));
        }
    }
}

/// The value at `path` in `object`.
fn value_at<'v>(object: &'v Value, path: &[String]) -> Option<&'v Value> {
    let mut at = object;
    for element in path {
        at = step(at, element)?;
    }
    Some(at)
}

fn step<'v>(at: &'v Value, element: &str) -> Option<&'v Value> {
    if let Some(field) = element.strip_prefix("f:") {
        return at.get(field);
    }
    let items = at.as_array()?;
    items.get(position(items, element)?)
}

/// Where in `items` the item `element` (`k:…` or `v:…`) names is; the element is decoded once.
fn position(items: &[Value], element: &str) -> Option<usize> {
    if let Some(key) = element.strip_prefix("k:") {
        let key = serde_json::from_str::<Map<String, Value>>(key).ok()?;
        let keys: Vec<&str> = key.keys().map(String::as_str).collect();
        return items.iter().position(|item| item_key(item, &keys).as_deref() == Some(element));
    }
    let value = serde_json::from_str::<Value>(element.strip_prefix("v:")?).ok()?;
    items.iter().position(|item| *item == value)
}

/// Removes what `path` names from `object`.
fn remove_at(object: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else { return };
    let mut at = object;
    for element in parents {
        let next = match element.strip_prefix("f:") {
            Some(field) => at.get_mut(field),
            None => match at.as_array().and_then(|items| position(items, element)) {
                Some(i) => at.get_mut(i),
                None => None,
            },
        };
        match next {
            Some(next) => at = next,
            None => return,
        }
    }
    if let Some(field) = last.strip_prefix("f:") {
        if let Some(map) = at.as_object_mut() {
            map.remove(field);
        }
    } else if let Some(items) = at.as_array_mut()
        && let Some(i) = position(items, last)
    {
        items.remove(i);
    }
}

/// Merges `applied` into `live`, as server-side apply merges a configuration into the object.
fn merge_into(live: &mut Value, applied: &Value, at: At, top: bool) {
    let (Value::Object(live_map), Value::Object(applied_map)) = (&mut *live, applied) else {
        *live = applied.clone();
        return;
    };
    for (field, value) in applied_map {
        let child = at.field(field, top);
        let current = live_map.get_mut(field);
        match (current, value) {
            (Some(current @ Value::Object(_)), Value::Object(_)) if !at.atomic(field) => {
                merge_into(current, value, child, false)
            }
            (Some(Value::Array(current)), Value::Array(items)) => match at.list_type(field) {
                ListType::Atomic => *current = items.clone(),
                ListType::Set => {
                    for item in items {
                        if !current.contains(item) {
                            current.push(item.clone());
                        }
                    }
                }
                ListType::Map(keys) => {
                    let item_at = child.items();
                    for item in items {
                        let key = item_key(item, &keys);
                        match current.iter_mut().find(|c| key.is_some() && item_key(c, &keys) == key) {
                            Some(existing) => merge_into(existing, item, item_at, false),
                            None => current.push(item.clone()),
                        }
                    }
                }
            },
            _ => {
                live_map.insert(field.clone(), value.clone());
            }
        }
    }
}

/// One entry of `managedFields`.
#[derive(Clone, Debug)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    subresource: String,
    fields: Set,
}

fn entries(object: &Value) -> Vec<Entry> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| Entry {
            manager: text(&e["manager"]),
            operation: text(&e["operation"]),
            api_version: text(&e["apiVersion"]),
            time: text(&e["time"]),
            subresource: text(&e["subresource"]),
            fields: from_fields_v1(&e["fieldsV1"]),
        })
        .collect()
}

fn set_entries(object: &mut Value, entries: Vec<Entry>) {
    let list: Vec<Value> = entries
        .into_iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut entry = json!({
                "manager": e.manager, "operation": e.operation, "apiVersion": e.api_version, "time": e.time,
                "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(&e.fields),
            });
            if !e.subresource.is_empty() {
                entry["subresource"] = json!(e.subresource);
            }
            entry
        })
        .collect();
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            metadata.remove("managedFields");
        } else {
            metadata.insert("managedFields".into(), Value::Array(list));
        }
    }
}

#[derive(Default)]
struct Node {
    member: bool,
    children: BTreeMap<String, Node>,
}

/// A set as FieldsV1.
pub fn to_fields_v1(set: &Set) -> Value {
    let mut root = Node::default();
    for path in set {
        let mut node = &mut root;
        for element in path {
            node = node.children.entry(element.clone()).or_default();
        }
        node.member = true;
    }
    fn render(node: &Node) -> Value {
        let mut map = Map::new();
        if node.member && !node.children.is_empty() {
            map.insert(".".into(), json!({}));
        }
        for (element, child) in &node.children {
            map.insert(element.clone(), render(child));
        }
        Value::Object(map)
    }
    render(&root)
}

/// FieldsV1 as a set.
pub fn from_fields_v1(fields: &Value) -> Set {
    fn walk(map: &Map<String, Value>, prefix: &mut Path, set: &mut Set) {
        for (element, child) in map {
            if element == "." {
                set.insert(prefix.clone());
                continue;
            }
            prefix.push(element.clone());
            match child.as_object() {
                Some(children) if children.is_empty() => {
                    set.insert(prefix.clone());
                }
                Some(children) => walk(children, prefix, set),
                None => {}
            }
            prefix.pop();
        }
    }
    let mut set = Set::new();
    if let Some(map) = fields.as_object() {
        walk(map, &mut Vec::new(), &mut set);
    }
    set
}

/// A path as kube-apiserver prints it in conflicts: `.spec.replicas`, `.spec.containers[name="web"].image`.
fn display(path: &[String]) -> String {
    let mut out = String::new();
    for element in path {
        if let Some(field) = element.strip_prefix("f:") {
            out.push('.');
            out.push_str(field);
        } else if let Some(key) = element.strip_prefix("k:") {
            let key: Map<String, Value> = serde_json::from_str(key).unwrap_or_default();
            let parts: Vec<String> = key.iter().map(|(k, v)| format!("{k}={v}")).collect();
            out.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(value) = element.strip_prefix("v:") {
            out.push_str(&format!("[={value}]"));
        }
    }
    out
}

fn subresource_name(subresource: Subresource) -> &'static str {
    if subresource == Subresource::Status { "status" } else { "" }
}

/// Server-side apply of `applied` by `manager` to `live` (`None`: the object does not exist yet). Returns the object
/// to store, its `managedFields` updated; a 409 lists the conflicts unless `force`.
pub fn apply(
    resource: &Resource,
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    subresource: Subresource,
    now: &str,
) -> Result<Value> {
    if !applied.is_object() {
        return Err(ApiError::bad_request("an apply configuration must be an object"));
    }
    let info = &resource.info;
    let wanted = fields_of(applied, resource, subresource);
    let mut entries = live.map(entries).unwrap_or_default();
    let sub = subresource_name(subresource);
    let mine = |e: &Entry| e.manager == manager && e.operation == "Apply" && e.subresource == sub;
    let before: Set = entries.iter().filter(|e| mine(e)).flat_map(|e| e.fields.iter().cloned()).collect();
    // Conflicts: fields another manager owns with another value.
    let empty = json!({});
    let live_value = live.unwrap_or(&empty);
    let mut conflicts: Vec<(usize, Path)> = Vec::new();
    for (index, entry) in entries.iter().enumerate().filter(|(_, e)| !mine(e)) {
        for path in wanted.intersection(&entry.fields) {
            if path.last().is_some_and(|e| e.starts_with("k:") || e.starts_with("v:")) {
                continue;
            }
            if value_at(live_value, path) != value_at(applied, path) {
                conflicts.push((index, path.clone()));
            }
        }
    }
    // kubectl moving from client-side apply: conflicts over what it applied client-side are no conflicts.
    let upgrading = manager == "kubectl"
        && !conflicts.is_empty()
        && live
            .and_then(|l| l["metadata"]["annotations"][LAST_APPLIED].as_str())
            .and_then(|text| serde_json::from_str::<Value>(text).ok())
            .is_some_and(|last| {
                let applied_before = fields_of(&last, resource, subresource);
                conflicts.iter().all(|(_, path)| applied_before.contains(path))
            });
    if !conflicts.is_empty() && !force && !upgrading {
        let causes: Vec<Cause> = conflicts
            .iter()
            .map(|(index, path)| Cause {
                reason: "FieldManagerConflict",
                message: format!("conflict with {:?}", entries[*index].manager),
                field: display(path),
            })
            .collect();
        let listed: Vec<String> = conflicts
            .iter()
            .map(|(index, path)| {
                let entry = &entries[*index];
                format!("conflict with {:?} using {}: {}", entry.manager, entry.api_version, display(path))
            })
            .collect();
        let mut error = ApiError::new(
            409,
            "Conflict",
            format!(
                "Apply failed with {} conflict{}: {}",
                conflicts.len(),
                if conflicts.len() == 1 { "" } else { "s" },
                listed.join("\n")
            ),
        );
        error.details.name = Some(crate::meta::name(live_value).to_string());
        error.details.group = Some(info.group.clone());
        error.details.kind = Some(info.plural.clone());
        error.details.causes = causes;
        return Err(error);
    }
    for (index, path) in &conflicts {
        entries[*index].fields.remove(path);
    }
    // The object: the configuration merged into what is there.
    let mut object = live.cloned().unwrap_or_else(|| json!({}));
    let mut configuration = applied.clone();
    if let Some(map) = configuration.as_object_mut() {
        map.retain(|field, _| {
            field == "metadata"
                || field == "apiVersion"
                || field == "kind"
                || !skipped_top(field, subresource, info.status)
        });
        if let Some(Value::Object(meta)) = map.get_mut("metadata") {
            meta.retain(|k, _| {
                !SERVER_METADATA.contains(&k.as_str()) || (live.is_none() && (k == "name" || k == "namespace"))
            });
        }
    }
    merge_into(&mut object, &configuration, At::root(resource), true);
    // Fields it applied before and no longer does go, unless someone else owns them (or something below them).
    let others: Vec<&Set> = entries.iter().filter(|e| !mine(e)).map(|e| &e.fields).collect();
    // Outermost first: a list item goes whole (removing its key field first would lose track of it).
    let mut dropped: Vec<&Path> = before.difference(&wanted).collect();
    dropped.sort_by_key(|p| p.len());
    for path in dropped {
        let owned = others.iter().any(|set| set.range(path.clone()..).next().is_some_and(|p| p.starts_with(path)));
        if !owned {
            remove_at(&mut object, path);
        }
    }
    // The time is that of the last change of the manager's fields (an apply that changes nothing changes nothing).
    let time = entries
        .iter()
        .find(|e| mine(e) && e.fields == wanted)
        .map(|e| e.time.clone())
        .unwrap_or_else(|| now.to_string());
    entries.retain(|e| !mine(e));
    entries.push(Entry {
        manager: manager.to_string(),
        operation: "Apply".into(),
        api_version: info.api_version(),
        time,
        subresource: sub.to_string(),
        fields: wanted,
    });
    set_entries(&mut object, entries);
    Ok(object)
}

/// Records an update (create, PUT, or a patch other than apply) by `manager` in `new`'s `managedFields`: the fields
/// it changed become its own (under operation `Update`) and no one else's. `managedFields` the client set itself are
/// kept as they are (kubectl rewrites them when it moves an object from client-side to server-side apply).
pub fn track_update(
    resource: &Resource,
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: Subresource,
    now: &str,
) {
    let given = new["metadata"].get("managedFields").cloned();
    let kept = old.and_then(|o| o["metadata"].get("managedFields").cloned());
    let mut entries = match (&given, old) {
        (Some(given), _) if Some(given) != kept.as_ref() && !given.as_array().is_some_and(Vec::is_empty) => return,
        (Some(given), Some(_)) if given.as_array().is_some_and(Vec::is_empty) => Vec::new(),
        _ => old.map(entries).unwrap_or_default(),
    };
    let (changed, gone): (Set, Set) = {
        let after = collect(new, resource, subresource);
        let before = old.map(|o| collect(o, resource, subresource)).unwrap_or_default();
        // A list item's own membership changes hands only when the item is new.
        let changed = after.iter().filter(|(p, v)| before.get(*p) != Some(*v)).map(|(p, _)| p.clone()).collect();
        let gone = before.keys().filter(|p| !after.contains_key(*p)).cloned().collect();
        (changed, gone)
    };
    for entry in entries.iter_mut() {
        entry.fields.retain(|p| !changed.contains(p) && !gone.contains(p));
    }
    if !changed.is_empty() {
        let sub = subresource_name(subresource);
        match entries.iter_mut().find(|e| e.manager == manager && e.operation == "Update" && e.subresource == sub) {
            Some(entry) => {
                entry.fields.extend(changed);
                entry.time = now.to_string();
                entry.api_version = resource.info.api_version();
            }
            None => entries.push(Entry {
                manager: manager.to_string(),
                operation: "Update".into(),
                api_version: resource.info.api_version(),
                time: now.to_string(),
                subresource: sub.to_string(),
                fields: changed,
            }),
        }
    }
    set_entries(new, entries);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::Catalog;

    fn resource(group: &str, plural: &str) -> Resource {
        let info = Catalog::builtin().find(group, "v1", plural).unwrap();
        Resource::new(info)
    }

    const NOW: &str = "2026-11-30T00:00:00Z";

    fn deployment(replicas: i64, image: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "labels": {"app": "web"}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": image}]}}}})
    }

    #[test]
    fn managed_fields_are_recorded_as_kubernetes_records_them() {
        let deployments = resource("apps", "deployments");
        let object = apply(&deployments, None, &deployment(2, "nginx"), "ci", false, Subresource::Main, NOW).unwrap();
        let entry = &object["metadata"]["managedFields"][0];
        assert_eq!((entry["manager"].as_str(), entry["operation"].as_str()), (Some("ci"), Some("Apply")));
        assert_eq!(entry["fieldsType"], "FieldsV1");
        let fields = &entry["fieldsV1"];
        assert_eq!(fields["f:metadata"], json!({"f:labels": {"f:app": {}}}));
        assert_eq!(fields["f:spec"]["f:replicas"], json!({}));
        // The selector is atomic; containers are a map keyed by name.
        assert_eq!(fields["f:spec"]["f:selector"], json!({}));
        let containers = &fields["f:spec"]["f:template"]["f:spec"]["f:containers"];
        assert_eq!(containers["k:{\"name\":\"web\"}"], json!({".": {}, "f:image": {}, "f:name": {}}));
        assert_eq!(from_fields_v1(fields), fields_of(&deployment(2, "nginx"), &deployments, Subresource::Main));
    }

    #[test]
    fn conflicts_force_and_removal_of_fields_no_longer_applied() {
        let deployments = resource("apps", "deployments");
        let object = apply(&deployments, None, &deployment(2, "nginx"), "ci", false, Subresource::Main, NOW).unwrap();
        // Another manager changes replicas with an update: it owns them now.
        let mut scaled = object.clone();
        scaled["spec"]["replicas"] = json!(5);
        track_update(&deployments, Some(&object), &mut scaled, "hpa", Subresource::Main, NOW);
        // Applying replicas 2 again conflicts with it; the same value would not.
        let error = apply(&deployments, Some(&scaled), &deployment(2, "nginx"), "ci", false, Subresource::Main, NOW)
            .unwrap_err();
        assert_eq!(error.code, 409);
        assert_eq!(error.details.causes[0].field, ".spec.replicas");
        assert_eq!(error.details.causes[0].reason, "FieldManagerConflict");
        assert!(error.message.contains("conflict with \"hpa\""), "{}", error.message);
        let forced =
            apply(&deployments, Some(&scaled), &deployment(2, "nginx:2"), "ci", true, Subresource::Main, NOW).unwrap();
        assert_eq!(forced["spec"]["replicas"], 2);
        assert_eq!(forced["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:2");
        let hpa = forced["metadata"]["managedFields"].as_array().unwrap().iter().find(|e| e["manager"] == "hpa");
        assert!(hpa.is_none(), "hpa lost its only field: {:?}", forced["metadata"]["managedFields"]);
        // A label no longer applied is removed; one another manager owns stays.
        let mut labelled = forced.clone();
        labelled["metadata"]["labels"]["team"] = json!("a");
        track_update(&deployments, Some(&forced), &mut labelled, "kubectl-label", Subresource::Main, NOW);
        let mut without = deployment(2, "nginx:2");
        without["metadata"]["labels"] = json!({"other": "x"});
        let after = apply(&deployments, Some(&labelled), &without, "ci", false, Subresource::Main, NOW).unwrap();
        assert_eq!(after["metadata"]["labels"], json!({"team": "a", "other": "x"}));
        // An env var (an item of a list keyed by name) no longer applied goes whole.
        let mut two = deployment(2, "nginx:2");
        two["spec"]["template"]["spec"]["containers"][0]["env"] =
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]);
        let with_two = apply(&deployments, Some(&after), &two, "ci", false, Subresource::Main, NOW).unwrap();
        let mut one = two.clone();
        one["spec"]["template"]["spec"]["containers"][0]["env"] = json!([{"name": "A", "value": "1"}]);
        let with_one = apply(&deployments, Some(&with_two), &one, "ci", false, Subresource::Main, NOW).unwrap();
        assert_eq!(with_one["spec"]["template"]["spec"]["containers"][0]["env"], json!([{"name": "A", "value": "1"}]));
    }

    #[test]
    fn a_custom_resource_list_merges_by_the_keys_its_schema_declares() {
        let crd = json!({
            "spec": {"group": "example.com", "scope": "Namespaced", "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                    "type": "object", "properties": {"spec": {"type": "object", "properties": {
                        "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                            "items": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}}},
                        "tags": {"type": "array", "items": {"type": "string"}}}}}}}}]},
            "status": {"conditions": [{"type": "Established", "status": "True"}]},
        });
        let catalog = Catalog::with_crds([&crd]);
        let widgets = Resource::new(catalog.find("example.com", "v1", "widgets").unwrap());
        let widget = |ports: Value, tags: Value| json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"ports": ports, "tags": tags}});
        let first = widget(json!([{"name": "http", "port": 80}]), json!(["a"]));
        let object = apply(&widgets, None, &first, "one", false, Subresource::Main, NOW).unwrap();
        let second = widget(json!([{"name": "https", "port": 443}]), json!(["b"]));
        let merged = apply(&widgets, Some(&object), &second, "two", false, Subresource::Main, NOW);
        // The map list merges by name; the untyped list is atomic, so the second manager's tags conflict.
        let error = merged.unwrap_err();
        assert_eq!(error.details.causes.len(), 1, "{error:?}");
        assert_eq!(error.details.causes[0].field, ".spec.tags");
        let merged = apply(&widgets, Some(&object), &second, "two", true, Subresource::Main, NOW).unwrap();
        assert_eq!(merged["spec"]["ports"], json!([{"name": "http", "port": 80}, {"name": "https", "port": 443}]));
        assert_eq!(merged["spec"]["tags"], json!(["b"]));
        let entries = merged["metadata"]["managedFields"].as_array().unwrap();
        let one = entries.iter().find(|e| e["manager"] == "one").unwrap();
        assert!(one["fieldsV1"]["f:spec"]["f:ports"].get("k:{\"name\":\"http\"}").is_some(), "{one}");
    }

    #[test]
    fn kubectl_upgrades_from_client_side_apply_without_conflicts() {
        let cms = resource("", "configmaps");
        let config = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
        let mut live = config.clone();
        live["metadata"]["annotations"] = json!({LAST_APPLIED: config.to_string()});
        track_update(&cms, None, &mut live, CLIENT_SIDE_APPLY, Subresource::Main, NOW);
        let mut changed = config.clone();
        changed["data"]["a"] = json!("2");
        // Another manager would conflict over the value kubectl-client-side-apply owns.
        assert!(apply(&cms, Some(&live), &changed, "ci", false, Subresource::Main, NOW).is_err());
        // kubectl applied that field client-side before: the field changes hands.
        let upgraded = apply(&cms, Some(&live), &changed, "kubectl", false, Subresource::Main, NOW).unwrap();
        assert_eq!(upgraded["data"]["a"], "2");
        let entries = upgraded["metadata"]["managedFields"].as_array().unwrap();
        let kubectl = entries.iter().find(|e| e["manager"] == "kubectl").expect("kubectl's entry");
        assert_eq!(kubectl["fieldsV1"]["f:data"], json!({"f:a": {}}));
        let csa = entries.iter().find(|e| e["manager"] == CLIENT_SIDE_APPLY).expect("what it still owns");
        assert!(csa["fieldsV1"].get("f:data").is_none(), "{csa}");
        // A field it never applied client-side still conflicts.
        let mut other = changed.clone();
        other["data"]["b"] = json!("x");
        let mut owned = upgraded.clone();
        owned["data"]["b"] = json!("y");
        track_update(&cms, Some(&upgraded), &mut owned, "someone", Subresource::Main, NOW);
        assert!(apply(&cms, Some(&owned), &other, "kubectl", false, Subresource::Main, NOW).is_err());
    }
}
