//! nest's admission plugins, one file each, and [`chain`], which puts them in the order they run: the one place
//! the generic admission chain ([`crate::chain`]) is given plugins, as kube-apiserver's
//! `pkg/kubeapiserver/options/plugins.go` registers and orders upstream's. Each plugin says which requests it
//! [`handles`](crate::chain::Mutating::handles), and is asked nothing else unless it does.
//!
//! | plugin (kube-apiserver's name) | file | runs as |
//! |---|---|---|
//! | NamespaceLifecycle | [`namespace_lifecycle`] | validating |
//! | LimitRanger | [`limit_ranger`] | mutating, validating |
//! | ServiceAccount | [`service_account`] | mutating, validating |
//! | NodeRestriction | [`node_restriction`] | validating |
//! | TaintNodesByCondition | [`taint_nodes_by_condition`] | mutating |
//! | PodSecurity | [`pod_security`] | validating |
//! | Priority | [`priority`] | mutating |
//! | DefaultTolerationSeconds | [`default_toleration_seconds`] | mutating |
//! | DefaultStorageClass | [`default_storage_class`] | mutating |
//! | StorageObjectInUseProtection | [`storage_object_in_use_protection`] | mutating |
//! | RuntimeClass | [`runtime_class`] | mutating |
//! | ResourceQuota | [`resource_quota`] | validating |
//! | (who made a CertificateSigningRequest; always on) | [`certificate_requester`] | mutating |
//!
//! A new plugin (an admission webhook, say) is a new file here implementing [`Mutating`] or [`Validating`], and a
//! line in [`chain`].

pub mod certificate_requester;
pub mod default_storage_class;
pub mod default_toleration_seconds;
pub mod limit_ranger;
pub mod namespace_lifecycle;
pub mod node_restriction;
pub mod pod_security;
pub mod priority;
pub mod resource_quota;
pub mod runtime_class;
pub mod service_account;
pub mod storage_object_in_use_protection;
pub mod taint_nodes_by_condition;

/// The chain's types, under the names plugins and callers have always used for them.
pub use crate::chain::{Chain, Mutating, Operation, Request, UserInfo, Validating, Warnings};

/// The admission plugins nest has, by kube-apiserver's names, in the order they run (upstream's recommended order).
pub const PLUGINS: [&str; 12] = [
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
    "RuntimeClass",
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

/// The `plugins` that run, in upstream's order (`AllOrderedPlugins`), Pod Security configured by `pod_security`:
/// `LimitRanger`, `ServiceAccount`, `TaintNodesByCondition`, `Priority`, `DefaultTolerationSeconds`,
/// `DefaultStorageClass` and `StorageObjectInUseProtection` mutating, then the CSR requester; `NamespaceLifecycle`,
/// `LimitRanger`, `ServiceAccount`, `NodeRestriction`, `PodSecurity`, then `ResourceQuota` validating.
pub fn chain(plugins: &Plugins, pod_security: pod_security::Config) -> Chain {
    let switched = Chain::default()
        .mutating("LimitRanger", limit_ranger::LimitRanger)
        .mutating("ServiceAccount", service_account::ServiceAccount)
        .mutating("TaintNodesByCondition", taint_nodes_by_condition::TaintNodesByCondition)
        .mutating("Priority", priority::Priority)
        .mutating("DefaultTolerationSeconds", default_toleration_seconds::DefaultTolerationSeconds)
        .mutating("DefaultStorageClass", default_storage_class::DefaultStorageClass)
        .mutating("StorageObjectInUseProtection", storage_object_in_use_protection::StorageObjectInUseProtection)
        .mutating("RuntimeClass", runtime_class::RuntimeClass)
        .validating("NamespaceLifecycle", namespace_lifecycle::NamespaceLifecycle::default())
        .validating("LimitRanger", limit_ranger::LimitRanger)
        .validating("ServiceAccount", service_account::ServiceAccount)
        .validating("NodeRestriction", node_restriction::NodeRestriction)
        .validating("PodSecurity", pod_security::PodSecurity { config: pod_security })
        // Last, as upstream: a pod another plugin refuses takes nothing of a quota.
        .validating("ResourceQuota", resource_quota::ResourceQuota::default())
        .only(|name| plugins.runs(name));
    // Not a plugin one may turn off: upstream's CSR strategy records the requester.
    switched.mutating("CertificateRequester", certificate_requester::CertificateRequester)
}

/// What every nest API server runs by default: every plugin, with Pod Security's defaults (unlabelled namespaces
/// are not checked).
pub fn standard() -> Chain {
    chain(&Plugins::default(), pod_security::Config::default())
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
        let chain = chain(&off, Default::default());
        // Seven switched mutating plugins and the CSR requester, which is not a plugin one turns off.
        assert_eq!((chain.mutating_names().len(), chain.validating_names().len()), (8, 5));
        assert!(!chain.mutating_names().contains(&"ServiceAccount"));
        assert_eq!((standard().mutating_names().len(), standard().validating_names().len()), (9, 6));
        assert_eq!(
            standard().validating_names(),
            ["NamespaceLifecycle", "LimitRanger", "ServiceAccount", "NodeRestriction", "PodSecurity", "ResourceQuota"]
        );
    }
}
