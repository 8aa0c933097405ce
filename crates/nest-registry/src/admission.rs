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
    /// Adds a warning, once: a message already recorded is not repeated (as upstream's recorder does), which also
    /// keeps an update that started again from storage from warning twice.
    pub fn push(&self, warning: impl Into<String>) {
        let warning = warning.into();
        let mut warnings = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if !warnings.contains(&warning) {
            warnings.push(warning);
        }
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

impl Request<'_> {
    /// Whether this request creates an object of resource `plural` of `group` (not through a subresource).
    pub fn creates(&self, group: &str, plural: &str) -> bool {
        self.operation == Operation::Create
            && self.info.group == group
            && self.info.plural == plural
            && matches!(self.subresource, Subresource::Main)
    }

    /// The name refusals give the object: its name, or its `generateName` before one is made (as kube-apiserver's
    /// admission errors do).
    pub fn object_name<'a>(&'a self, object: &'a Value) -> &'a str {
        if self.name.is_empty() { object["metadata"]["generateName"].as_str().unwrap_or_default() } else { self.name }
    }
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

/// The admission plugins nest has, by kube-apiserver's names, in the order they run (upstream's recommended order).
pub const PLUGINS: [&str; 11] = [
    "NamespaceLifecycle",
    "LimitRanger",
    "ServiceAccount",
    "NodeRestriction",
    "TaintNodesByCondition",
    "PodSecurity",
    "Priority",
    "DefaultTolerationSeconds",
    "DefaultStorageClass",
    "StorageObjectInUseProtection",
    "ResourceQuota",
];

/// Which plugins run: every one of [`PLUGINS`] unless disabled (`--enable-admission-plugins` and
/// `--disable-admission-plugins` as kube-apiserver takes them; every plugin nest has is on by default).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plugins {
    enabled: Vec<&'static str>,
}

impl Default for Plugins {
    fn default() -> Plugins {
        Plugins { enabled: PLUGINS.to_vec() }
    }
}

impl Plugins {
    /// The default set with `enable` added and `disable` taken away; a name nest does not have is an error in
    /// upstream's words, as is a plugin both enabled and disabled.
    pub fn new(enable: &[String], disable: &[String]) -> std::result::Result<Plugins, String> {
        let known = |flag: &str, name: &String| {
            PLUGINS.iter().copied().find(|p| p == name).ok_or_else(|| format!("{flag} plugin {name:?} is unknown"))
        };
        let enable =
            enable.iter().map(|n| known("enable-admission-plugins", n)).collect::<std::result::Result<Vec<_>, _>>()?;
        let disable = disable
            .iter()
            .map(|n| known("disable-admission-plugins", n))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        if let Some(both) = enable.iter().find(|p| disable.contains(p)) {
            return Err(format!("{both} in enable-admission-plugins and disable-admission-plugins overlapped"));
        }
        Ok(Plugins { enabled: PLUGINS.iter().copied().filter(|p| !disable.contains(p)).collect() })
    }

    /// Whether plugin `name` runs.
    pub fn runs(&self, name: &str) -> bool {
        self.enabled.contains(&name)
    }
}

impl Chain {
    /// What every nest API server runs by default, with Pod Security's defaults (unlabelled namespaces are not
    /// checked).
    pub fn standard() -> Chain {
        Chain::with_pod_security(crate::kinds::pod_security::Config::default())
    }

    /// [`Chain::standard`] with Pod Security configured.
    pub fn with_pod_security(config: crate::kinds::pod_security::Config) -> Chain {
        Chain::of(&Plugins::default(), config)
    }

    /// The `plugins` that run, Pod Security configured by `config`: `LimitRanger`, `ServiceAccount`,
    /// `TaintNodesByCondition`, `Priority`, `DefaultTolerationSeconds`, `DefaultStorageClass` and
    /// `StorageObjectInUseProtection` mutating; `NamespaceLifecycle`, `LimitRanger`, `ServiceAccount`,
    /// `NodeRestriction`, `PodSecurity`, then `ResourceQuota` validating.
    pub fn of(plugins: &Plugins, config: crate::kinds::pod_security::Config) -> Chain {
        use crate::kinds::{
            default_toleration_seconds, limit_range, namespace, node_restriction, node_taint, pod_security, priority,
            resource_quota, service_account, storage_class, storage_protection,
        };
        let mut chain = Chain::default();
        // In upstream's order (AllOrderedPlugins).
        let mutating: [(&str, Arc<dyn Mutating>); 7] = [
            ("LimitRanger", Arc::new(limit_range::LimitRanger)),
            ("ServiceAccount", Arc::new(service_account::ServiceAccount)),
            ("TaintNodesByCondition", Arc::new(node_taint::TaintNodesByCondition)),
            ("Priority", Arc::new(priority::Priority)),
            ("DefaultTolerationSeconds", Arc::new(default_toleration_seconds::DefaultTolerationSeconds)),
            ("DefaultStorageClass", Arc::new(storage_class::DefaultStorageClass)),
            ("StorageObjectInUseProtection", Arc::new(storage_protection::StorageObjectInUseProtection)),
        ];
        chain.mutating = mutating.into_iter().filter(|(name, _)| plugins.runs(name)).map(|(_, p)| p).collect();
        // Not a plugin one may turn off: upstream's CSR strategy records the requester.
        chain.mutating.push(Arc::new(crate::kinds::certificate_signing_request::Requester));
        let validating: [(&str, Arc<dyn Validating>); 6] = [
            ("NamespaceLifecycle", Arc::new(namespace::Lifecycle::default())),
            ("LimitRanger", Arc::new(limit_range::LimitRanger)),
            ("ServiceAccount", Arc::new(service_account::ServiceAccount)),
            ("NodeRestriction", Arc::new(node_restriction::NodeRestriction)),
            ("PodSecurity", Arc::new(pod_security::PodSecurity { config })),
            // Last, as upstream: a pod another plugin refuses takes nothing of a quota.
            ("ResourceQuota", Arc::new(resource_quota::ResourceQuota::default())),
        ];
        chain.validating = validating.into_iter().filter(|(name, _)| plugins.runs(name)).map(|(_, p)| p).collect();
        chain
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugins_are_switched_by_upstreams_names_and_flags() {
        let all = Plugins::default();
        assert!(PLUGINS.iter().all(|p| all.runs(p)));
        let off = Plugins::new(&[], &["ServiceAccount".into()]).unwrap();
        assert!(!off.runs("ServiceAccount") && off.runs("PodSecurity"));
        assert_eq!(Plugins::new(&["ServiceAccount".into()], &[]).unwrap(), all);
        assert_eq!(
            Plugins::new(&["AlwaysPullImages".into()], &[]).unwrap_err(),
            "enable-admission-plugins plugin \"AlwaysPullImages\" is unknown"
        );
        assert_eq!(
            Plugins::new(&["ServiceAccount".into()], &["ServiceAccount".into()]).unwrap_err(),
            "ServiceAccount in enable-admission-plugins and disable-admission-plugins overlapped"
        );
        let chain = Chain::of(&off, Default::default());
        // Six switched mutating plugins and the CSR requester, which is not a plugin one turns off.
        assert_eq!((chain.mutating.len(), chain.validating.len()), (7, 5));
        assert_eq!((Chain::standard().mutating.len(), Chain::standard().validating.len()), (8, 6));
    }
}
