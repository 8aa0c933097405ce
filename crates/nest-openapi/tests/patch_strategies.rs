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

#[test]
fn the_table_is_the_published_one() {
    let path = published_schemas().join("_definitions.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let document: Value = serde_json::from_str(&text).unwrap();
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
