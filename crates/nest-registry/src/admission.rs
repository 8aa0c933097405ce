//! The admission chain: what runs between a decoded, validated object and storage, after kube-apiserver's admission
//! (`k8s.io/apiserver/pkg/admission`, 1.33). Mutating plugins run first, before the kind's strategy prepares the
//! object (where kube-apiserver's mutating admission runs, ahead of `BeforeCreate`); validating plugins run last,
//! on the object as it would be stored, and may only refuse it or add warnings (`Warning` headers).
//!
//! Plugins that belong to a kind live in that kind's file under [`crate::kinds`] (the namespace lifecycle in
//! [`crate::kinds::namespace`]); [`Chain::standard`] is the order they run in.

use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::catalog::ResourceInfo;
use crate::error::Result;
use crate::store::Subresource;
use crate::strategy::Cluster;

/// What a request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
}

/// Who is asking, as the authenticator found them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub groups: Vec<String>,
}

/// Warnings a request collects on its way (sent back as `Warning: 299 - "…"` headers).
#[derive(Clone, Debug, Default)]
pub struct Warnings(Arc<Mutex<Vec<String>>>);

impl Warnings {
    pub fn push(&self, warning: impl Into<String>) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(warning.into());
    }

    /// Everything collected so far, emptying the list.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// One request as admission sees it.
pub struct Request<'a> {
    pub operation: Operation,
    pub info: &'a ResourceInfo,
    pub subresource: Subresource,
    pub namespace: &'a str,
    pub name: &'a str,
    /// The stored object, on an update or a delete.
    pub old: Option<&'a Value>,
    pub user: &'a UserInfo,
    pub dry_run: bool,
}

/// A plugin that may change an object before its kind prepares and validates it.
pub trait Mutating: Send + Sync {
    fn admit<'a>(
        &'a self,
        cluster: Cluster<'a>,
        request: &'a Request<'a>,
        object: &'a mut Value,
    ) -> BoxFuture<'a, Result<()>>;
}

/// A plugin that may refuse an object, or warn about it, just before it is stored. `object` is the object as it
/// would be stored (for a delete, the stored one).
pub trait Validating: Send + Sync {
    fn validate<'a>(
        &'a self,
        cluster: Cluster<'a>,
        request: &'a Request<'a>,
        object: &'a Value,
        warnings: &'a Warnings,
    ) -> BoxFuture<'a, Result<()>>;
}

/// The plugins a registry runs, in order.
#[derive(Clone, Default)]
pub struct Chain {
    pub mutating: Vec<Arc<dyn Mutating>>,
    pub validating: Vec<Arc<dyn Validating>>,
}

impl Chain {
    /// What every nest API server runs, with Pod Security's defaults (unlabelled namespaces are not checked).
    pub fn standard() -> Chain {
        Chain::with_pod_security(crate::kinds::pod_security::Config::default())
    }

    /// [`Chain::standard`] with Pod Security configured: `LimitRanger` mutating; `NamespaceLifecycle`, `LimitRanger`,
    /// `NodeRestriction`, `PodSecurity`, then `ResourceQuota` validating.
    pub fn with_pod_security(config: crate::kinds::pod_security::Config) -> Chain {
        Chain {
            mutating: vec![Arc::new(crate::kinds::limit_range::LimitRanger)],
            validating: vec![
                Arc::new(crate::kinds::namespace::Lifecycle),
                Arc::new(crate::kinds::limit_range::LimitRanger),
                Arc::new(crate::kinds::node_restriction::NodeRestriction),
                Arc::new(crate::kinds::pod_security::PodSecurity { config }),
                // Last, as upstream: a pod another plugin refuses takes nothing of a quota.
                Arc::new(crate::kinds::resource_quota::ResourceQuota::default()),
            ],
        }
    }

    /// Adds a validating plugin at the end.
    pub fn with_validating(mut self, plugin: Arc<dyn Validating>) -> Chain {
        self.validating.push(plugin);
        self
    }

    pub(crate) async fn admit(&self, cluster: Cluster<'_>, request: &Request<'_>, object: &mut Value) -> Result<()> {
        for plugin in &self.mutating {
            plugin.admit(cluster, request, object).await?;
        }
        Ok(())
    }

    pub(crate) async fn validate(
        &self,
        cluster: Cluster<'_>,
        request: &Request<'_>,
        object: &Value,
        warnings: &Warnings,
    ) -> Result<()> {
        for plugin in &self.validating {
            plugin.validate(cluster, request, object, warnings).await?;
        }
        Ok(())
    }
}
