//! Golden tests: what both flavors render for the clusters in `golden/input.yaml` (the way `nest render` reads them)
//! is compared with `golden/<flavor>.yaml`. After a deliberate change to a package, regenerate the files with
//! `NEST_UPDATE_GOLDEN=1 cargo test -p nest-capn --test golden` and review the diff.

use std::path::PathBuf;

use serde::Deserialize;
use serde_json::Value;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

fn input() -> Vec<Value> {
    let text = std::fs::read_to_string(dir().join("input.yaml")).unwrap();
    let mut objects = Vec::new();
    for document in serde_norway::Deserializer::from_str(&text) {
        let value = Value::deserialize(document).unwrap();
        match value["kind"].as_str() {
            Some("List") => objects.extend(value["items"].as_array().unwrap().iter().cloned()),
            _ => objects.push(value),
        }
    }
    objects
}

fn yaml(objects: &[Value]) -> String {
    objects.iter().map(|o| format!("---\n{}", serde_norway::to_string(o).unwrap())).collect()
}

fn check(flavor: &str, planes: &[&str]) {
    let objects: Vec<Value> = input()
        .into_iter()
        .filter(|o| o["kind"] != "NestedControlPlane" || planes.contains(&o["metadata"]["name"].as_str().unwrap()))
        .collect();
    let (manifests, notes) = nest_capn::plan::render_objects(&objects, &Default::default()).unwrap();
    assert!(notes.is_empty(), "everything renders with the given addresses: {notes:?}");
    // The image of the running build is not part of what is checked.
    let rendered = yaml(&manifests).replace(&nest_capn::render::nest_image(), "ghcr.io/nest-dev/nest:VERSION");
    let path = dir().join(format!("{flavor}.yaml"));
    if std::env::var_os("NEST_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &rendered).unwrap();
    }
    let golden = std::fs::read_to_string(&path).unwrap_or_default();
    if golden != rendered {
        let line = golden.lines().zip(rendered.lines()).position(|(g, r)| g != r);
        panic!(
            "{flavor}: the rendered manifests differ from {} (first at line {:?}); if the change is meant, run with \
             NEST_UPDATE_GOLDEN=1 and review the diff\n{rendered}",
            path.display(),
            line.map(|l| l + 1)
        );
    }
}

#[test]
fn the_nest_flavor_renders_as_recorded() {
    check("nest", &["small", "big"]);
}

#[test]
fn the_kubernetes_flavor_renders_as_recorded() {
    check("kubernetes", &["kube"]);
}
