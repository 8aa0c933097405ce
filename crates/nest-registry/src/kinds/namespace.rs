//! Namespaces (pkg/registry/core/namespace, 1.33): DNS label names, the `kubernetes` finalizer and phase `Active`,
//! `Terminating` once deleted until `spec.finalizers` are gone (`PUT namespaces/<name>/finalize` removes them), and
//! the `NamespaceLifecycle` admission plugin: nothing new is created in a namespace that does not exist or is being
//! deleted.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use crate::admission::{self, Operation, Warnings};
use crate::catalog::{ResourceInfo, SubresourceInfo};
use crate::error::{ApiError, Result};
use crate::meta;
use crate::strategy::{Cluster, Strategy};
use crate::validation;

/// `namespaces/<name>/finalize`.
pub const SUBRESOURCES: &[SubresourceInfo] =
    &[SubresourceInfo { name: "finalize", kind: "Namespace", verbs: &["update"] }];

/// Where a namespace is stored.
fn key(name: &str) -> String {
    format!("/registry/core/namespaces/{name}")
}

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

/// The namespaces `NamespaceLifecycle` never lets go.
const IMMORTAL: &[&str] = &["default", "kube-system", "kube-public"];

/// How long after a namespace's deletion was asked for creates in it read the namespace from storage (upstream's
/// `forceLiveLookupTTL`).
const LIVE_LOOKUP_FOR: Duration = Duration::from_secs(30);
/// Namespaces remembered that long at most (upstream's LRU holds 4096): a flood of deletions costs bounded memory.
const LIVE_LOOKUP_MAX: usize = 4096;

/// `NamespaceLifecycle`: refuses new objects in a namespace that does not exist (404) or is being deleted (403), and
/// the deletion of the namespaces every cluster needs (403).
///
/// It reads the namespace as upstream's plugin reads it through its lister: from the watch cache, from storage when
/// the cache does not have it, and from storage for 30 s after a deletion of it was asked for here,
/// so that a create straight after `kubectl delete namespace` is refused even before the cache sees `Terminating`.
#[derive(Default)]
pub struct Lifecycle {
    /// Namespaces whose deletion this plugin admitted, with when.
    deleted: Mutex<HashMap<String, Instant>>,
}

impl Lifecycle {
    fn deleting(&self, namespace: &str) {
        let now = Instant::now();
        let mut deleted = self.deleted.lock().unwrap_or_else(|p| p.into_inner());
        if deleted.len() >= LIVE_LOOKUP_MAX {
            deleted.retain(|_, at| now.duration_since(*at) < LIVE_LOOKUP_FOR);
        }
        if deleted.len() >= LIVE_LOOKUP_MAX
            && let Some(oldest) = deleted.iter().min_by_key(|(_, at)| **at).map(|(name, _)| name.clone())
        {
            deleted.remove(&oldest);
        }
        deleted.insert(namespace.to_string(), now);
    }

    fn recently_deleted(&self, namespace: &str) -> bool {
        let deleted = self.deleted.lock().unwrap_or_else(|p| p.into_inner());
        deleted.get(namespace).is_some_and(|at| at.elapsed() < LIVE_LOOKUP_FOR)
    }
}

impl admission::Validating for Lifecycle {
    fn validate<'a>(
        &'a self,
        cluster: Cluster<'a>,
        request: &'a admission::Request<'a>,
        _object: &'a Value,
        _warnings: &'a Warnings,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let namespaces = request.info.plural == "namespaces" && request.info.group.is_empty();
            if request.operation == Operation::Delete && namespaces {
                if IMMORTAL.contains(&request.name) {
                    return Err(ApiError::forbidden(request.info, request.name, "this namespace may not be deleted"));
                }
                self.deleting(request.name);
            }
            if request.operation != Operation::Create || !request.info.namespaced {
                return Ok(());
            }
            let namespace = request.namespace;
            let terminating = |ns: &Value| meta::path_str(ns, "status.phase") == "Terminating" || meta::is_deleting(ns);
            let mut found = cluster.lookup(&key(namespace)).await?;
            if found.as_ref().is_some_and(|ns| !terminating(ns)) && self.recently_deleted(namespace) {
                found = cluster.live(&key(namespace)).await?;
            }
            let Some(ns) = found else {
                return Err(ApiError::not_found_named("", "namespaces", namespace));
            };
            if terminating(&ns) {
                return Err(ApiError::forbidden(
                    request.info,
                    request.name,
                    format!("unable to create new content in namespace {namespace} because it is being terminated"),
                ));
            }
            Ok(())
        })
    }
}
