//! Namespaces (pkg/registry/core/namespace, 1.33): DNS label names, the `kubernetes` finalizer and phase `Active`,
//! `Terminating` once deleted until `spec.finalizers` are gone (`PUT namespaces/<name>/finalize` removes them).
//! That nothing new is created in a namespace that does not exist or is being deleted is the `NamespaceLifecycle`
//! admission plugin's ([`crate::admission::namespace_lifecycle`]).

use serde_json::{Value, json};

use crate::catalog::{ResourceInfo, SubresourceInfo};
use crate::error::Result;
use crate::meta;
use crate::strategy::Strategy;
use crate::validation;

/// `namespaces/<name>/finalize`.
pub const SUBRESOURCES: &[SubresourceInfo] =
    &[SubresourceInfo { name: "finalize", kind: "Namespace", verbs: &["update"] }];

/// The namespace strategy.
pub struct Namespace;

fn label_with_name(obj: &mut Value) {
    let name = meta::name(obj).to_string();
    let labels = meta::metadata_mut(obj).entry("labels").or_insert_with(|| json!({}));
    if let Some(labels) = labels.as_object_mut() {
        labels.insert("kubernetes.io/metadata.name".into(), Value::String(name));
    }
}

impl Strategy for Namespace {
    fn validate_name(&self, name: &str) -> Result<(), String> {
        validation::dns1123_label(name)
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        obj["spec"]["finalizers"] = json!(["kubernetes"]);
        obj["status"] = json!({"phase": "Active"});
        label_with_name(obj);
    }

    fn prepare_for_update(&self, obj: &mut Value, old: &Value) {
        // The finalizers are changed only through the `finalize` subresource.
        obj["spec"]["finalizers"] = old["spec"]["finalizers"].clone();
        label_with_name(obj);
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["status.phase"]
    }

    fn holds_removal(&self, obj: &Value) -> bool {
        obj.get("spec").and_then(|s| s.get("finalizers")).and_then(Value::as_array).is_some_and(|f| !f.is_empty())
    }

    fn prepare_for_delete(&self, obj: &mut Value) {
        obj["status"]["phase"] = json!("Terminating");
    }

    /// `finalize` replaces `spec.finalizers` (and only that), honouring the body's resourceVersion.
    fn update_subresource(&self, _name: &str, _info: &ResourceInfo, current: &Value, body: &Value) -> Result<Value> {
        let mut obj = current.clone();
        obj["spec"]["finalizers"] =
            body.get("spec").and_then(|s| s.get("finalizers")).cloned().unwrap_or_else(|| json!([]));
        let wanted = meta::meta_str(body, "resourceVersion");
        if !wanted.is_empty() {
            meta::metadata_mut(&mut obj).insert("resourceVersion".into(), json!(wanted));
        }
        Ok(obj)
    }
}
