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
    /// The group and plural the objects are stored under, when another resource owns them (events.k8s.io events are
    /// core events).
    pub stored_as: Option<(String, String)>,
    /// Defined by a CustomResourceDefinition rather than built in.
    pub custom: bool,
    /// A custom resource's structural schema (`openAPIV3Schema`), if its CRD gives one.
    pub schema: Option<Arc<serde_json::Value>>,
    /// A custom resource's `additionalPrinterColumns` (the columns of `kubectl get`).
    pub printer_columns: Vec<PrinterColumn>,
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
    /// A string at this path (a CRD's `labelSelectorPath`).
    Path(String),
    None,
}

impl ScalePaths {
    fn workload() -> ScalePaths {
        ScalePaths {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.replicas".into(),
            selector: ScaleSelector::SpecSelector,
        }
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
            Some((group, _)) => group_or_core(group),
            None => group_or_core(&self.group),
        }
    }

    /// The plural the objects are stored under.
    pub fn storage_plural(&self) -> &str {
        match &self.stored_as {
            Some((_, plural)) => plural,
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

/// Every built-in verb set used below.
const ALL: &[&str] = &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];
const NO_COLLECTION_DELETE: &[&str] = &["create", "delete", "get", "list", "patch", "update", "watch"];

struct Builtin {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    categories: &'static [&'static str],
    verbs: &'static [&'static str],
    status: bool,
    scale: bool,
}

#[rustfmt::skip]
const BUILTINS: &[Builtin] = &[
    Builtin { group: "", version: "v1", kind: "Namespace", plural: "namespaces", namespaced: false, short: &["ns"], categories: &[], verbs: NO_COLLECTION_DELETE, status: true, scale: false },
    Builtin { group: "", version: "v1", kind: "Pod", plural: "pods", namespaced: true, short: &["po"], categories: &["all"], verbs: ALL, status: true, scale: false },
    Builtin { group: "", version: "v1", kind: "Service", plural: "services", namespaced: true, short: &["svc"], categories: &["all"], verbs: ALL, status: true, scale: false },
    Builtin { group: "", version: "v1", kind: "Endpoints", plural: "endpoints", namespaced: true, short: &["ep"], categories: &[], verbs: ALL, status: false, scale: false },
    Builtin { group: "", version: "v1", kind: "ConfigMap", plural: "configmaps", namespaced: true, short: &["cm"], categories: &[], verbs: ALL, status: false, scale: false },
    Builtin { group: "", version: "v1", kind: "Secret", plural: "secrets", namespaced: true, short: &[], categories: &[], verbs: ALL, status: false, scale: false },
    Builtin { group: "", version: "v1", kind: "ServiceAccount", plural: "serviceaccounts", namespaced: true, short: &["sa"], categories: &[], verbs: ALL, status: false, scale: false },
    Builtin { group: "", version: "v1", kind: "Event", plural: "events", namespaced: true, short: &["ev"], categories: &[], verbs: ALL, status: false, scale: false },
    Builtin { group: "", version: "v1", kind: "Node", plural: "nodes", namespaced: false, short: &["no"], categories: &[], verbs: ALL, status: true, scale: false },
    Builtin { group: "", version: "v1", kind: "PersistentVolumeClaim", plural: "persistentvolumeclaims", namespaced: true, short: &["pvc"], categories: &[], verbs: ALL, status: true, scale: false },
    Builtin { group: "", version: "v1", kind: "PersistentVolume", plural: "persistentvolumes", namespaced: false, short: &["pv"], categories: &[], verbs: ALL, status: true, scale: false },
    Builtin { group: "", version: "v1", kind: "ResourceQuota", plural: "resourcequotas", namespaced: true, short: &["quota"], categories: &[], verbs: ALL, status: true, scale: false },
    Builtin { group: "", version: "v1", kind: "LimitRange", plural: "limitranges", namespaced: true, short: &["limits"], categories: &[], verbs: ALL, status: false, scale: false },
    Builtin { group: "apps", version: "v1", kind: "Deployment", plural: "deployments", namespaced: true, short: &["deploy"], categories: &["all"], verbs: ALL, status: true, scale: true },
    Builtin { group: "apps", version: "v1", kind: "ReplicaSet", plural: "replicasets", namespaced: true, short: &["rs"], categories: &["all"], verbs: ALL, status: true, scale: true },
    Builtin { group: "apps", version: "v1", kind: "StatefulSet", plural: "statefulsets", namespaced: true, short: &["sts"], categories: &["all"], verbs: ALL, status: true, scale: true },
    Builtin { group: "apps", version: "v1", kind: "DaemonSet", plural: "daemonsets", namespaced: true, short: &["ds"], categories: &["all"], verbs: ALL, status: true, scale: false },
    Builtin { group: "apps", version: "v1", kind: "ControllerRevision", plural: "controllerrevisions", namespaced: true, short: &[], categories: &[], verbs: ALL, status: false, scale: false },
    Builtin { group: "batch", version: "v1", kind: "Job", plural: "jobs", namespaced: true, short: &[], categories: &["all"], verbs: ALL, status: true, scale: false },
    Builtin { group: "batch", version: "v1", kind: "CronJob", plural: "cronjobs", namespaced: true, short: &["cj"], categories: &["all"], verbs: ALL, status: true, scale: false },
    Builtin { group: "coordination.k8s.io", version: "v1", kind: "Lease", plural: "leases", namespaced: true, short: &[], categories: &[], verbs: ALL, status: false, scale: false },
    Builtin { group: "rbac.authorization.k8s.io", version: "v1", kind: "Role", plural: "roles", namespaced: true, short: &[], categories: &[], verbs: ALL, status: false, scale: false },
    Builtin { group: "rbac.authorization.k8s.io", version: "v1", kind: "RoleBinding", plural: "rolebindings", namespaced: true, short: &[], categories: &[], verbs: ALL, status: false, scale: false },
    Builtin { group: "rbac.authorization.k8s.io", version: "v1", kind: "ClusterRole", plural: "clusterroles", namespaced: false, short: &[], categories: &[], verbs: ALL, status: false, scale: false },
    Builtin { group: "rbac.authorization.k8s.io", version: "v1", kind: "ClusterRoleBinding", plural: "clusterrolebindings", namespaced: false, short: &[], categories: &[], verbs: ALL, status: false, scale: false },
    Builtin { group: "apiextensions.k8s.io", version: "v1", kind: "CustomResourceDefinition", plural: "customresourcedefinitions", namespaced: false, short: &["crd", "crds"], categories: &["api-extensions"], verbs: ALL, status: true, scale: false },
    Builtin { group: "discovery.k8s.io", version: "v1", kind: "EndpointSlice", plural: "endpointslices", namespaced: true, short: &[], categories: &[], verbs: ALL, status: false, scale: false },
    Builtin { group: "networking.k8s.io", version: "v1", kind: "Ingress", plural: "ingresses", namespaced: true, short: &["ing"], categories: &[], verbs: ALL, status: true, scale: false },
    Builtin { group: "networking.k8s.io", version: "v1", kind: "IngressClass", plural: "ingressclasses", namespaced: false, short: &[], categories: &[], verbs: ALL, status: false, scale: false },
    Builtin { group: "networking.k8s.io", version: "v1", kind: "NetworkPolicy", plural: "networkpolicies", namespaced: true, short: &["netpol"], categories: &[], verbs: ALL, status: false, scale: false },
    Builtin { group: "storage.k8s.io", version: "v1", kind: "StorageClass", plural: "storageclasses", namespaced: false, short: &["sc"], categories: &[], verbs: ALL, status: false, scale: false },
    Builtin { group: "events.k8s.io", version: "v1", kind: "Event", plural: "events", namespaced: true, short: &["ev"], categories: &[], verbs: ALL, status: false, scale: false },
    Builtin { group: "policy", version: "v1", kind: "PodDisruptionBudget", plural: "poddisruptionbudgets", namespaced: true, short: &["pdb"], categories: &[], verbs: ALL, status: true, scale: false },
    Builtin { group: "scheduling.k8s.io", version: "v1", kind: "PriorityClass", plural: "priorityclasses", namespaced: false, short: &["pc"], categories: &[], verbs: ALL, status: false, scale: false },
];

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// The built-in resources, in discovery order.
pub fn builtins() -> Vec<Arc<ResourceInfo>> {
    BUILTINS
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
                scale: b.scale.then(ScalePaths::workload),
                // events.k8s.io/v1 events are core events in another shape (`convert.rs`).
                stored_as: (b.group == "events.k8s.io").then(|| (String::new(), "events".to_string())),
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
