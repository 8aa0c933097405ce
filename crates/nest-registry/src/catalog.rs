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
    /// core events, renamed on the way in and out).
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
    /// A built-in workload's: `.spec.replicas` and `.status.replicas`.
    pub fn workload(selector: ScaleSelector) -> ScalePaths {
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
pub const ALL: &[&str] = &["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"];

/// One built-in resource's catalogue entry, as a kind's row writes it (static, and shorter than [`ResourceInfo`]).
pub struct Builtin {
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

pub(crate) fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

impl Builtin {
    /// The entry as the catalogue serves it.
    pub fn resource_info(&self) -> ResourceInfo {
        ResourceInfo {
            group: self.group.into(),
            version: self.version.into(),
            kind: self.kind.into(),
            plural: self.plural.into(),
            singular: self.kind.to_lowercase(),
            namespaced: self.namespaced,
            short_names: strings(self.short),
            categories: strings(self.categories),
            verbs: strings(self.verbs),
            status: self.status,
            scale: self.scale.clone().map(ScalePaths::workload),
            stored_as: self.stored_as,
            subresources: self.subresources,
            created_status: self.created_status,
            generation: self.generation,
            custom: false,
            schema: None,
            printer_columns: Vec::new(),
        }
    }
}

/// Looks resources up by group, version and plural.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    resources: Vec<Arc<ResourceInfo>>,
}

impl Catalog {
    /// The catalogue of `resources`, in the order discovery lists them.
    pub fn new(resources: Vec<Arc<ResourceInfo>>) -> Catalog {
        Catalog { resources }
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
