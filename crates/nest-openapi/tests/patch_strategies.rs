//! The patch strategies nest applies ([`nest_openapi::patch_meta`]) are exactly those Kubernetes 1.33 publishes:
//! every `x-kubernetes-patch-strategy` and `x-kubernetes-patch-merge-key` in the JSON schemas generated from the
//! Kubernetes OpenAPI document, as the PyPI package `kubernetes-validate` ships them (pinned and installed into
//! `NEST_TEST_PYTHON`'s environment by scripts/check).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// The directory of kubernetes-validate's schemas for Kubernetes 1.33.
fn published_schemas() -> PathBuf {
    let python = std::env::var("NEST_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let find = "import importlib.util as u; s = u.find_spec('kubernetes_validate'); \
                print(s.submodule_search_locations[0] if s else '')";
    let out = Command::new(&python).args(["-c", find]).output().expect("run python");
    let package = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        !package.is_empty(),
        "{python} has no kubernetes_validate; run scripts/check, or pip install kubernetes-validate==1.37.0"
    );
    PathBuf::from(package).join("kubernetes-json-schema/v1.33.0-local")
}

fn published_definitions() -> (PathBuf, Value) {
    let path = published_schemas().join("_definitions.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (path.clone(), serde_json::from_str(&text).unwrap())
}

#[test]
fn the_table_is_the_published_one() {
    let (path, document) = published_definitions();
    let mut published = BTreeSet::new();
    for (definition, schema) in document["$defs"].as_object().expect("$defs") {
        for (field, property) in schema["properties"].as_object().into_iter().flatten() {
            let strategy = property["x-kubernetes-patch-strategy"].as_str();
            let key = property["x-kubernetes-patch-merge-key"].as_str();
            if strategy.is_some() || key.is_some() {
                let entry =
                    (definition.clone(), field.clone(), strategy.unwrap_or("").to_string(), key.map(str::to_string));
                published.insert(entry);
            }
        }
    }
    assert!(published.len() > 50, "too few published strategies: the schemas moved? {}", path.display());
    let ours: BTreeSet<_> = nest_openapi::patch_meta::all()
        .map(|(d, f, s, k)| (d.to_string(), f.to_string(), s.to_string(), k.map(str::to_string)))
        .collect();
    let missing: Vec<_> = published.difference(&ours).collect();
    let extra: Vec<_> = ours.difference(&published).collect();
    assert!(missing.is_empty() && extra.is_empty(), "not in the table: {missing:?}\nnot published: {extra:?}");
}

/// The list and map types server-side apply uses ([`nest_openapi::list_meta`]) are the published ones.
#[test]
fn the_list_and_map_types_are_the_published_ones() {
    let (path, document) = published_definitions();
    let (mut lists, mut atomic, mut fields) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    for (definition, schema) in document["$defs"].as_object().expect("$defs") {
        if schema["x-kubernetes-map-type"] == "atomic" {
            atomic.insert(definition.clone());
        }
        for (field, property) in schema["properties"].as_object().into_iter().flatten() {
            if let Some(kind @ ("map" | "set")) = property["x-kubernetes-list-type"].as_str() {
                let keys: Vec<String> = property["x-kubernetes-list-map-keys"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|k| k.as_str().map(str::to_string))
                    .collect();
                lists.insert((definition.clone(), field.clone(), kind.to_string(), keys));
            }
            if let Some(kind) = property["x-kubernetes-map-type"].as_str() {
                fields.insert((definition.clone(), field.clone(), kind.to_string()));
            }
        }
    }
    assert!(lists.len() > 50 && atomic.len() > 10, "too few published list types: {}", path.display());
    let (our_lists, our_atomic, our_fields) = nest_openapi::list_meta::all();
    let our_lists: BTreeSet<_> = our_lists
        .into_iter()
        .map(|(d, f, t, k)| (d.to_string(), f.to_string(), t.to_string(), k.iter().map(|k| k.to_string()).collect()))
        .collect();
    let our_atomic: BTreeSet<String> = our_atomic.into_iter().map(str::to_string).collect();
    let our_fields: BTreeSet<_> =
        our_fields.into_iter().map(|(d, f, t)| (d.to_string(), f.to_string(), t.to_string())).collect();
    assert_eq!(our_lists, lists);
    assert_eq!(our_atomic, atomic);
    assert_eq!(our_fields, fields);
}
