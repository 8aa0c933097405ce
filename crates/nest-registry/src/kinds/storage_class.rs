//! The `DefaultStorageClass` admission plugin (kube-apiserver's `plugin/pkg/admission/storage/storageclass/setdefault`,
//! 1.33): a new PersistentVolumeClaim that names no storage class (`storageClassName` absent; an empty string means
//! "no class" and stays) gets the cluster's default one — the StorageClass annotated
//! `storageclass.kubernetes.io/is-default-class: "true"` (or the beta annotation), the newest when there are several.

use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use crate::admission::{Mutating, Request};
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
    fn admit<'a>(
        &'a self,
        cluster: Cluster<'a>,
        request: &'a Request<'a>,
        object: &'a mut Value,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            if !request.creates("", "persistentvolumeclaims") || !object["spec"].is_object() {
                return Ok(());
            }
            if object["spec"].get("storageClassName").is_some_and(|c| !c.is_null()) {
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
        })
    }
}

/// StorageClasses, as `SetDefaults_StorageClass` defaults them: volumes are deleted with their claims and bound at
/// once.
pub struct StorageClass;

impl crate::strategy::Strategy for StorageClass {
    fn prepare_for_create(&self, obj: &mut Value) {
        super::set_defaults(obj, [("reclaimPolicy", json!("Delete")), ("volumeBindingMode", json!("Immediate"))]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
