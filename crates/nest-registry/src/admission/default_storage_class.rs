//! The `DefaultStorageClass` admission plugin (kube-apiserver's `plugin/pkg/admission/storage/storageclass/setdefault`,
//! 1.33): a new PersistentVolumeClaim that names no storage class (`storageClassName` absent; an empty string means
//! "no class" and stays) gets the cluster's default one — the StorageClass annotated
//! `storageclass.kubernetes.io/is-default-class: "true"` (or the beta annotation), the newest when there are several.

use serde_json::{Value, json};

use crate::chain::{Mutating, Request};
use crate::error::{ApiError, Result};
use crate::strategy::Cluster;

/// The annotations that mark a default StorageClass.
const DEFAULT: [&str; 2] =
    ["storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class"];

/// The plugin.
pub struct DefaultStorageClass;

/// The default class among `classes`: the newest marked one (then by name, as upstream breaks ties).
fn default_class(classes: &[Value]) -> Option<&str> {
    classes
        .iter()
        .filter(|c| DEFAULT.iter().any(|key| c["metadata"]["annotations"][key] == "true"))
        .max_by(|a, b| {
            let created = |c: &Value| c["metadata"]["creationTimestamp"].as_str().unwrap_or_default().to_string();
            let name = |c: &Value| c["metadata"]["name"].as_str().unwrap_or_default().to_string();
            created(a).cmp(&created(b)).then_with(|| name(b).cmp(&name(a)))
        })
        .and_then(|c| c["metadata"]["name"].as_str())
}

impl Mutating for DefaultStorageClass {
    fn handles(&self, request: &Request<'_>) -> bool {
        request.creates("", "persistentvolumeclaims")
    }

    async fn admit(&self, cluster: Cluster<'_>, _: &Request<'_>, object: &mut Value) -> Result<()> {
        // A claim that names a class, or `""` for none, keeps it.
        let named = object["spec"].get("storageClassName").is_some_and(|c| !c.is_null());
        if !object["spec"].is_object() || named {
            return Ok(());
        }
        let listed = cluster
            .store
            .list(b"/registry/storage.k8s.io/storageclasses/", Default::default())
            .await
            .map_err(ApiError::from_storage)?;
        let classes: Vec<Value> =
            listed.items.iter().filter_map(|item| serde_json::from_slice(&item.value).ok()).collect();
        if let Some(name) = default_class(&classes) {
            object["spec"]["storageClassName"] = json!(name);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::testing::expect_handled;

    #[test]
    fn only_a_claims_creation_is_handled() {
        expect_handled(
            |r| DefaultStorageClass.handles(r),
            "alice",
            "persistentvolumeclaims: create; persistentvolumes: -",
        );
    }

    #[test]
    fn the_newest_class_marked_default_is_the_default() {
        let class = |name: &str, created: &str, default: Option<&str>| {
            let annotations = match default {
                Some(key) => json!({key: "true"}),
                None => json!({}),
            };
            json!({"metadata": {"name": name, "creationTimestamp": created, "annotations": annotations}})
        };
        let classes = [
            class("old", "2026-01-01T00:00:00Z", Some(DEFAULT[0])),
            class("new", "2026-06-01T00:00:00Z", Some(DEFAULT[1])),
            class("plain", "2026-12-01T00:00:00Z", None),
        ];
        assert_eq!(default_class(&classes), Some("new"));
        assert_eq!(default_class(&classes[2..]), None);
    }
}
