//! CustomResourceDefinitions (apiextensions-apiserver's strategy and validation, 1.33, the parts nest uses). A write
//! changes what the registry serves; removing one removes its instances first (kube-apiserver does this behind the
//! `customresourcecleanup.apiextensions.k8s.io` finalizer).

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::Value;

use super::custom::Custom;
use crate::catalog::{ALL, PrinterColumn, ResourceInfo, ScalePaths, ScaleSelector, strings};
use crate::error::{ApiError, Cause, Result};
use crate::meta;
use crate::strategy::{Cluster, Served, Strategy};
use crate::validation;

/// The CustomResourceDefinition strategy: the name is `<plural>.<group>`; names, scope and exactly one storage version are required. nest accepts names and
/// establishes the CRD in the same write, so `NamesAccepted` and `Established` are true as soon as it exists.
pub struct CustomResourceDefinition;

impl CustomResourceDefinition {
    /// `SetDefaults_CustomResourceDefinitionSpec`: the singular and list kind from the kind, no conversion.
    fn default_spec(obj: &mut Value) {
        let kind = meta::path_str(obj, "spec.names.kind");
        if let Some(names) = obj.pointer_mut("/spec/names").filter(|n| n.is_object()) {
            if names.get("singular").is_none_or(|s| s.as_str().is_none_or(str::is_empty)) {
                names["singular"] = serde_json::json!(kind.to_lowercase());
            }
            if names.get("listKind").is_none_or(|s| s.as_str().is_none_or(str::is_empty)) {
                names["listKind"] = serde_json::json!(format!("{kind}List"));
            }
        }
        if obj["spec"].is_object() && obj["spec"].get("conversion").is_none_or(Value::is_null) {
            obj["spec"]["conversion"] = serde_json::json!({"strategy": "None"});
        }
    }

    fn status(obj: &Value) -> Value {
        let now = nest_core::clock::rfc3339_now();
        let mut accepted = obj["spec"]["names"].clone();
        if accepted.get("singular").is_none_or(|s| s.as_str().is_none_or(str::is_empty)) {
            accepted["singular"] = serde_json::json!(meta::path_str(obj, "spec.names.kind").to_lowercase());
        }
        if accepted.get("listKind").is_none_or(|s| s.as_str().is_none_or(str::is_empty)) {
            accepted["listKind"] = serde_json::json!(format!("{}List", meta::path_str(obj, "spec.names.kind")));
        }
        let stored: Vec<Value> = obj["spec"]["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|v| v["storage"].as_bool() == Some(true))
            .map(|v| v["name"].clone())
            .collect();
        serde_json::json!({
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found", "lastTransitionTime": now},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted", "lastTransitionTime": now},
            ],
            "acceptedNames": accepted,
            "storedVersions": stored,
        })
    }
}

impl Strategy for CustomResourceDefinition {
    fn defines_resources(&self) -> bool {
        true
    }

    /// What an Established CRD serves, each version with the custom resource strategy of its schema.
    fn defined_resources(&self, crd: &Value) -> Vec<Served> {
        served_resources(crd)
            .into_iter()
            .map(|info| Served { strategy: Arc::new(Custom::new(info.schema.clone())), info })
            .collect()
    }

    /// Removes every instance of the custom resource the CRD defines.
    fn before_remove<'a>(&'a self, cluster: Cluster<'a>, crd: &'a Value) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let group = meta::path_str(crd, "spec.group");
            let plural = meta::path_str(crd, "spec.names.plural");
            if group.is_empty() || plural.is_empty() {
                return Ok(());
            }
            let prefix = format!("/registry/{group}/{plural}/");
            let listed = cluster
                .store
                .list(prefix.as_bytes(), nest_storage::ListOptions::default())
                .await
                .map_err(ApiError::from_storage)?;
            for item in listed.items {
                match cluster.store.delete(&item.key, None).await {
                    Ok(_) | Err(nest_storage::Error::NotFound { .. }) => {}
                    Err(e) => return Err(ApiError::from_storage(e)),
                }
            }
            Ok(())
        })
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        Self::default_spec(obj);
        obj["status"] = Self::status(obj);
    }

    /// The defaults again; `storedVersions` only grows (a version objects were stored in stays listed until an
    /// administrator removes it through `/status`).
    fn prepare_for_update(&self, obj: &mut Value, old: &Value) {
        Self::default_spec(obj);
        obj["status"] = Self::status(obj);
        let mut stored: Vec<Value> = old["status"]["storedVersions"].as_array().cloned().unwrap_or_default();
        for version in obj["status"]["storedVersions"].as_array().cloned().unwrap_or_default() {
            if !stored.contains(&version) {
                stored.push(version);
            }
        }
        obj["status"]["storedVersions"] = Value::Array(stored);
    }

    fn validate(&self, obj: &Value) -> Vec<Cause> {
        let mut causes = Vec::new();
        let group = meta::path_str(obj, "spec.group");
        let plural = meta::path_str(obj, "spec.names.plural");
        for (field, value) in [("spec.group", &group), ("spec.names.plural", &plural)] {
            if value.is_empty() {
                causes.push(Cause::required(field));
            }
        }
        if meta::path_str(obj, "spec.names.kind").is_empty() {
            causes.push(Cause::required("spec.names.kind"));
        }
        if !plural.is_empty()
            && let Err(message) = validation::dns1123_label(&plural)
        {
            causes.push(Cause::invalid("spec.names.plural", format!("Invalid value: {plural:?}: {message}")));
        }
        if !group.is_empty() && !plural.is_empty() && meta::name(obj) != format!("{plural}.{group}") {
            causes.push(Cause::invalid(
                "metadata.name",
                format!("Invalid value: {:?}: must be spec.names.plural+\".\"+spec.group", meta::name(obj)),
            ));
        }
        let scope = meta::path_str(obj, "spec.scope");
        if scope != "Namespaced" && scope != "Cluster" {
            causes.push(Cause {
                reason: "FieldValueNotSupported",
                message: format!("Unsupported value: {scope:?}: supported values: \"Cluster\", \"Namespaced\""),
                field: "spec.scope".into(),
            });
        }
        let versions = obj["spec"]["versions"].as_array();
        match versions {
            Some(v) if !v.is_empty() => {
                if v.iter().filter(|v| v["storage"].as_bool() == Some(true)).count() != 1 {
                    causes.push(Cause::invalid(
                        "spec.versions",
                        "Invalid value: must have exactly one version marked as storage version",
                    ));
                }
                for (i, version) in v.iter().enumerate() {
                    if version["name"].as_str().is_none_or(str::is_empty) {
                        causes.push(Cause::required(format!("spec.versions[{i}].name")));
                    }
                }
            }
            _ => causes.push(Cause::required("spec.versions")),
        }
        causes
    }
}

/// The resources an Established CustomResourceDefinition serves: one per served version.
fn served_resources(crd: &Value) -> Vec<Arc<ResourceInfo>> {
    let established = crd["status"]["conditions"]
        .as_array()
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Established" && c["status"] == "True"));
    if !established {
        return Vec::new();
    }
    let spec = &crd["spec"];
    let names = &spec["names"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let list = |v: &Value| -> Vec<String> {
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
