//! Discovery documents (`/api`, `/api/v1`, `/apis`, `/apis/<group>`, `/apis/<group>/<version>`) in the legacy,
//! non-aggregated format, served as plain `application/json` for both `/api` and `/apis` (clients discard both if
//! the formats are mixed; see KUBE-API-NOTES.md), and `/version`.

use nest_registry::{Catalog, ResourceInfo};
use serde_json::{Value, json};

/// The Kubernetes version nest reports: a minor the machine's kubectl dispatcher has a binary for.
pub const KUBERNETES_MINOR: &str = "33";
pub const GIT_VERSION: &str = "v1.33.0+nest";

/// The `/version` document; `git_version` is the Kubernetes version reported (`v1.33.2`; GIT_VERSION when unset).
pub fn version(git_version: Option<&str>) -> Value {
    let git_version = git_version.map(|v| format!("{}+nest", v.split('+').next().unwrap_or(v)));
    json!({
        "major": "1",
        "minor": KUBERNETES_MINOR,
        "gitVersion": git_version.as_deref().unwrap_or(GIT_VERSION),
        "gitCommit": env!("CARGO_PKG_VERSION"),
        "gitTreeState": "clean",
        "buildDate": "1970-01-01T00:00:00Z",
        "goVersion": "rust",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    })
}

pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_entry(catalog: &Catalog, group: &str) -> Value {
    let versions: Vec<Value> =
        catalog.versions(group).iter().map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v})).collect();
    let preferred = versions.first().cloned().unwrap_or(Value::Null);
    json!({"name": group, "versions": versions, "preferredVersion": preferred})
}

pub fn api_group_list(catalog: &Catalog) -> Value {
    let groups: Vec<Value> = catalog.groups().iter().map(|g| group_entry(catalog, g)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`, or `None` when the group is not served.
pub fn api_group(catalog: &Catalog, group: &str) -> Option<Value> {
    if catalog.versions(group).is_empty() {
        return None;
    }
    let mut entry = group_entry(catalog, group);
    entry["kind"] = json!("APIGroup");
    entry["apiVersion"] = json!("v1");
    Some(entry)
}

/// The resources of one group-version, subresources included, or `None` when it is not served.
pub fn api_resource_list(catalog: &Catalog, group: &str, version: &str) -> Option<Value> {
    let served: Vec<&std::sync::Arc<ResourceInfo>> =
        catalog.resources().iter().filter(|r| r.group == group && r.version == version).collect();
    if served.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for r in served {
        let mut entry = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": r.verbs,
        });
        if !r.short_names.is_empty() {
            entry["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            entry["categories"] = json!(r.categories);
        }
        resources.push(entry);
        let sub = |name: &str, kind: &str, verbs: &[&str]| json!({"name": format!("{}/{name}", r.plural), "singularName": "", "namespaced": r.namespaced, "kind": kind, "verbs": verbs});
        if r.status {
            resources.push(sub("status", &r.kind, &["get", "patch", "update"]));
        }
        if r.scale.is_some() {
            let mut scale = sub("scale", "Scale", &["get", "patch", "update"]);
            scale["group"] = json!("autoscaling");
            scale["version"] = json!("v1");
            resources.push(scale);
        }
        for own in r.subresources {
            resources.push(sub(own.name, own.kind, own.verbs));
        }
    }
    let group_version = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_lists_carry_what_kubectl_reads() {
        let catalog = Catalog::builtin();
        let core = api_resource_list(&catalog, "", "v1").unwrap();
        assert_eq!(core["groupVersion"], "v1");
        let pods = core["resources"].as_array().unwrap().iter().find(|r| r["name"] == "pods").unwrap();
        assert_eq!(pods["shortNames"], json!(["po"]));
        assert_eq!(pods["categories"], json!(["all"]));
        assert_eq!(pods["singularName"], "pod");
        let apps = api_resource_list(&catalog, "apps", "v1").unwrap();
        let scale = apps["resources"].as_array().unwrap().iter().find(|r| r["name"] == "deployments/scale").unwrap();
        assert_eq!((scale["kind"].as_str(), scale["group"].as_str()), (Some("Scale"), Some("autoscaling")));
        assert!(api_resource_list(&catalog, "apps", "v2").is_none());
        assert_eq!(api_group(&catalog, "batch").unwrap()["preferredVersion"]["groupVersion"], "batch/v1");
    }
}
