//! The `NamespaceLifecycle` admission plugin (kube-apiserver's `plugin/pkg/admission/namespace/lifecycle`, 1.33):
//! nothing new is created in a namespace that does not exist (404) or is being deleted (403), and the namespaces
//! every cluster needs are never deleted (403).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::chain::{Operation, Request, Validating};
use crate::error::{ApiError, Result};
use crate::meta;
use crate::strategy::Cluster;

/// Where a namespace is stored.
fn key(name: &str) -> String {
    format!("/registry/core/namespaces/{name}")
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
pub struct NamespaceLifecycle {
    /// Namespaces whose deletion this plugin admitted, with when.
    deleted: Mutex<HashMap<String, Instant>>,
}

impl NamespaceLifecycle {
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

impl Validating for NamespaceLifecycle {
    fn handles(&self, request: &Request<'_>) -> bool {
        let namespaces = request.info.group.is_empty() && request.info.plural == "namespaces";
        (request.operation == Operation::Delete && namespaces)
            || (request.operation == Operation::Create && request.info.namespaced)
    }

    async fn validate(&self, cluster: Cluster<'_>, request: &Request<'_>, _: &Value) -> Result<()> {
        if request.operation == Operation::Delete {
            // The deletion of a namespace (the only delete handled).
            if IMMORTAL.contains(&request.name) {
                return Err(ApiError::forbidden(request.info, request.name, "this namespace may not be deleted"));
            }
            self.deleting(request.name);
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::testing::expect_handled;

    #[test]
    fn namespaced_creates_and_namespace_deletes_are_handled() {
        expect_handled(
            |r| NamespaceLifecycle::default().handles(r),
            "alice",
            "namespaces: delete, delete status; configmaps: create, create status; nodes: -",
        );
    }
}
