//! The catalogue of resources the API server serves: names, scope, verbs and subresources, as kube-apiserver reports
//! them in discovery (checked against kube-apiserver 1.33's `/api/v1` and `/apis/<group>/<version>`).

use std::sync::Arc;

/// One served resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceInfo {
    /// API group; empty for the core group.
    pub group: String,
    pub version: String,
    pub kind: String,
    /// The plural, lower-case name used in URLs.
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub verbs: Vec<String>,
    /// Whether a `/status` subresource exists (then the main endpoint ignores `.status`).
    pub status: bool,
    /// Where the `/scale` subresource reads and writes, if there is one.
    pub scale: Option<ScalePaths>,
    /// Where the objects are stored, and in which shape, when another resource owns them (events.k8s.io events are
    /// core events; [`crate::convert`]).
    pub stored_as: Option<StoredAs>,
    /// The subresources of this kind's own besides `status` and `scale` (a pod's `binding`, a namespace's
    /// `finalize`), as discovery lists them; the kind's strategy implements them.
    pub subresources: &'static [SubresourceInfo],
    /// The `status` a new object starts with (JSON), as kube-apiserver's create answers have it: Go encodes a
    /// status struct that is not a pointer even when nothing set it (a Service's `{"loadBalancer":{}}`, a
    /// Deployment's `{}`, a DaemonSet's counters at 0).
    pub created_status: Option<&'static str>,
    /// Whether objects have a `metadata.generation` (1 when created, one more with each change of anything but
    /// metadata and status), as the kinds whose upstream strategy sets `Generation = 1` and every custom resource;
    /// a ConfigMap, a Service or a Role has none.
    pub generation: bool,
    /// Defined by a CustomResourceDefinition rather than built in.
    pub custom: bool,
    /// A custom resource's structural schema (`openAPIV3Schema`), if its CRD gives one.
    pub schema: Option<Arc<serde_json::Value>>,
    /// A custom resource's `additionalPrinterColumns` (the columns of `kubectl get`).
    pub printer_columns: Vec<PrinterColumn>,
}

/// Objects served by one resource and stored as another's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredAs {
    /// The group (empty for core) and plural they are stored under.
    pub group: &'static str,
    pub plural: &'static str,
    /// Stored field name, served field name: the top-level fields that differ between the two shapes.
    pub renames: &'static [(&'static str, &'static str)],
}

/// A kind's own subresource, as discovery lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubresourceInfo {
    pub name: &'static str,
    /// The kind a request to it sends (`Binding`), or the resource's own kind.
    pub kind: &'static str,
    pub verbs: &'static [&'static str],
}

/// One column of a custom resource's table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrinterColumn {
    pub name: String,
    /// `integer`, `number`, `string`, `boolean` or `date`.
    pub type_: String,
    pub format: String,
    pub description: String,
    /// 0 for the default columns, more for `-o wide`.
    pub priority: i64,
    /// A simple JSONPath into the object (`.spec.replicas`).
    pub json_path: String,
}

/// What a `/scale` subresource exchanges, as JSON paths into the object (`.spec.replicas`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub selector: ScaleSelector,
}

/// Where a Scale's `status.selector` comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScaleSelector {
    /// The workload's `spec.selector` label selector, formatted (built-in workloads).
    SpecSelector,
    /// The workload's `spec.selector` as a map of labels, formatted `a=b,c=d` (a ReplicationController).
    SpecSet,
    /// A string at this path (a CRD's `labelSelectorPath`).
    Path(String),
    None,
}

impl ScalePaths {
    fn workload(selector: ScaleSelector) -> ScalePaths {
        ScalePaths { spec_replicas: ".spec.replicas".into(), status_replicas: ".status.replicas".into(), selector }
    }
}

impl ResourceInfo {
    /// `group/version`, or `version` for the core group.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() { self.version.clone() } else { format!("{}/{}", self.group, self.version) }
    }

    /// The group's name in storage keys (`core` for the core group).
    pub fn storage_group(&self) -> &str {
        match &self.stored_as {
            Some(stored) => group_or_core(stored.group),
            None => group_or_core(&self.group),
        }
    }

    /// The plural the objects are stored under.
    pub fn storage_plural(&self) -> &str {
        match &self.stored_as {
            Some(stored) => stored.plural,
            None => &self.plural,
        }
    }

    /// `plural.group`, how Kubernetes names a resource in messages (`pods`, `deployments.apps`).
    pub fn qualified(&self) -> String {
        if self.group.is_empty() { self.plural.clone() } else { format!("{}.{}", self.plural, self.group) }
    }
}

fn group_or_core(group: &str) -> &str {
    if group.is_empty() { "core" } else { group }
}

/// Every verb of a resource with every verb.
pub(crate) const ALL: &[&str] = &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

/// One built-in resource, as [`crate::kinds::BUILTINS`] lists it.
pub(crate) struct Builtin {
    pub group: &'static str,
    pub version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub namespaced: bool,
    pub short: &'static [&'static str],
    pub categories: &'static [&'static str],
    pub verbs: &'static [&'static str],
    pub status: bool,
    /// A `/scale` subresource, and where its selector comes from.
    pub scale: Option<ScaleSelector>,
    pub stored_as: Option<StoredAs>,
    pub subresources: &'static [SubresourceInfo],
    pub created_status: Option<&'static str>,
    /// Whether the kind's objects count changes to their spec in `metadata.generation`.
    pub generation: bool,
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// The built-in resources, in discovery order.
pub fn builtins() -> Vec<Arc<ResourceInfo>> {
    crate::kinds::BUILTINS
        .iter()
        .map(|b| {
            Arc::new(ResourceInfo {
                group: b.group.into(),
                version: b.version.into(),
                kind: b.kind.into(),
                plural: b.plural.into(),
                singular: b.kind.to_lowercase(),
                namespaced: b.namespaced,
                short_names: strings(b.short),
                categories: strings(b.categories),
                verbs: strings(b.verbs),
                status: b.status,
                scale: b.scale.clone().map(ScalePaths::workload),
                stored_as: b.stored_as,
                subresources: b.subresources,
                created_status: b.created_status,
                generation: b.generation,
                custom: false,
                schema: None,
                printer_columns: Vec::new(),
            })
        })
        .collect()
}

/// The resources an Established CustomResourceDefinition serves: one per served version.
pub fn from_crd(crd: &serde_json::Value) -> Vec<Arc<ResourceInfo>> {
    let established = crd["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Established" && c["status"] == "True"));
    if !established {
        return Vec::new();
    }
    let spec = &crd["spec"];
    let names = &spec["names"];
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
    let list = |v: &serde_json::Value| -> Vec<String> {
        v.as_array().map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect()).unwrap_or_default()
    };
    let kind = text(&names["kind"]);
    let singular = match text(&names["singular"]) {
        s if s.is_empty() => kind.to_lowercase(),
        s => s,
    };
    spec["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["served"].as_bool().unwrap_or(false))
        .map(|v| {
            Arc::new(ResourceInfo {
                group: text(&spec["group"]),
                version: text(&v["name"]),
                kind: kind.clone(),
                plural: text(&names["plural"]),
                singular: singular.clone(),
                namespaced: spec["scope"] != "Cluster",
                short_names: list(&names["shortNames"]),
                categories: list(&names["categories"]),
                verbs: strings(ALL),
                status: v["subresources"].get("status").is_some(),
                scale: v["subresources"].get("scale").map(|scale| ScalePaths {
                    spec_replicas: text(&scale["specReplicasPath"]),
                    status_replicas: text(&scale["statusReplicasPath"]),
                    selector: match scale["labelSelectorPath"].as_str() {
                        Some(path) if !path.is_empty() => ScaleSelector::Path(path.to_string()),
                        _ => ScaleSelector::None,
                    },
                }),
                stored_as: None,
                subresources: &[],
                created_status: None,
                generation: true,
                custom: true,
                schema: v["schema"].get("openAPIV3Schema").cloned().map(Arc::new),
                printer_columns: v["additionalPrinterColumns"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| PrinterColumn {
                        name: text(&c["name"]),
                        type_: text(&c["type"]),
                        format: text(&c["format"]),
                        description: text(&c["description"]),
                        priority: c["priority"].as_i64().unwrap_or(0),
                        json_path: text(&c["jsonPath"]),
                    })
                    .collect(),
            })
        })
        .collect()
}

/// Looks resources up by group, version and plural.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    resources: Vec<Arc<ResourceInfo>>,
}

impl Catalog {
    /// The built-ins.
    pub fn builtin() -> Catalog {
        Catalog { resources: builtins() }
    }

    /// The built-ins plus what the given CustomResourceDefinitions serve. A CRD naming a built-in resource adds
    /// nothing.
    pub fn with_crds<'a>(crds: impl IntoIterator<Item = &'a serde_json::Value>) -> Catalog {
        let mut catalog = Catalog::builtin();
        for crd in crds {
            for info in from_crd(crd) {
                if catalog.find(&info.group, &info.version, &info.plural).is_none() {
                    catalog.resources.push(info);
                }
            }
        }
        catalog
    }

    /// Every served resource.
    pub fn resources(&self) -> &[Arc<ResourceInfo>] {
        &self.resources
    }

    /// The resource `plural` in `group/version`.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        self.resources.iter().find(|r| r.group == group && r.version == version && r.plural == plural).cloned()
    }

    /// The versions served for `group`, preferred first.
    pub fn versions(&self, group: &str) -> Vec<String> {
        let mut versions: Vec<String> = Vec::new();
        for r in self.resources.iter().filter(|r| r.group == group) {
            if !versions.contains(&r.version) {
                versions.push(r.version.clone());
            }
        }
        versions
    }

    /// The groups (other than core), in the order first served.
    pub fn groups(&self) -> Vec<String> {
        let mut groups: Vec<String> = Vec::new();
        for r in self.resources.iter().filter(|r| !r.group.is_empty()) {
            if !groups.contains(&r.group) {
                groups.push(r.group.clone());
            }
        }
        groups
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookups_use_group_version_and_plural() {
        let catalog = Catalog::builtin();
        let deployments = catalog.find("apps", "v1", "deployments").unwrap();
        assert_eq!((deployments.kind.as_str(), deployments.scale.is_some()), ("Deployment", true));
        assert_eq!(deployments.qualified(), "deployments.apps");
        assert!(catalog.find("", "v1", "deployments").is_none());
        let pods = catalog.find("", "v1", "pods").unwrap();
        assert_eq!((pods.storage_group(), pods.storage_plural()), ("core", "pods"));
        assert_eq!(catalog.find("", "v1", "pods").unwrap().api_version(), "v1");
        assert!(catalog.groups().contains(&"apps".to_string()));
    }
}
