//! CustomResourceDefinitions (apiextensions-apiserver's strategy and validation, 1.33, the parts nest uses). A write
//! changes what the registry serves; removing one removes its instances first (kube-apiserver does this behind the
//! `customresourcecleanup.apiextensions.k8s.io` finalizer).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use nest_storage::{Revision, Store};
use serde_json::Value;

use crate::catalog::Catalog;
use crate::error::{ApiError, Cause, Result, StorageResult};
use crate::meta;
use crate::strategy::{Cluster, Strategy};
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

/// Where CRDs are stored.
const CRD_PREFIX: &[u8] = b"/registry/apiextensions.k8s.io/customresourcedefinitions/";

/// Reads the stored CRDs and installs the catalogue they make; returns the revision read at.
pub async fn load_catalog(store: &dyn Store, catalog: &RwLock<Arc<Catalog>>) -> Result<Revision> {
    let listed = store.list(CRD_PREFIX, nest_storage::ListOptions::default()).await.storage()?;
    let crds: Vec<Value> = listed.items.iter().filter_map(|item| serde_json::from_slice(&item.value).ok()).collect();
    *catalog.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(Catalog::with_crds(&crds));
    Ok(listed.revision)
}

/// Reloads the catalogue whenever a CRD changes in storage, whoever changed it.
pub async fn follow(store: Arc<dyn Store>, catalog: Arc<RwLock<Arc<Catalog>>>, mut from: Revision) {
    loop {
        let mut changes = match store.watch(CRD_PREFIX, from).await {
            Ok(changes) => changes,
            Err(_) => return,
        };
        while let Some(change) = changes.next().await {
            match change {
                Ok(event) => {
                    from = event.revision.next();
                    if let Err(error) = load_catalog(store.as_ref(), &catalog).await {
                        tracing::warn!(%error, "reloading CustomResourceDefinitions");
                    }
                }
                Err(nest_storage::Error::Closed) => return,
                Err(error) => {
                    // Fell behind or history was compacted: reload everything and watch again from there.
                    tracing::debug!(%error, "CRD watch ended; reloading");
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        match load_catalog(store.as_ref(), &catalog).await {
            Ok(revision) => from = revision.next(),
            Err(error) => tracing::warn!(%error, "reloading CustomResourceDefinitions"),
        }
    }
}
