//! The admission chain: what runs between a decoded, validated object and storage, after kube-apiserver's admission
//! (`k8s.io/apiserver/pkg/admission`, 1.33). Mutating plugins run first, before the kind's strategy prepares the
//! object (where kube-apiserver's mutating admission runs, ahead of `BeforeCreate`); validating plugins run last,
//! on the object as it would be stored, and may only refuse it or add warnings (`Warning` headers).
//!
//! This is the mechanism only: a plugin says which requests it [`handles`](Mutating::handles) (upstream's
//! `Handles`), and the chain asks that once, before it runs the plugin, so no plugin repeats the question in its
//! body. Which plugins there are, and their order, is the caller's choice (nest's own plugins are assembled outside
//! this module, one file each, as kube-apiserver's `pkg/kubeapiserver/options/plugins.go` assembles upstream's).
//!
//! A plugin is written with `async fn` and stored behind a boxed future here ([`Chain`] keeps them as trait
//! objects), so the plugins read like upstream's `Admit` and `Validate`:
//!
//! ```
//! use nest_registry::chain::{Chain, Operation, Request, Validating};
//! use nest_registry::strategy::Cluster;
//! use nest_registry::{ApiError, Result};
//!
//! /// Refuses every delete.
//! struct NoDeletes;
//!
//! impl Validating for NoDeletes {
//!     fn handles(&self, request: &Request<'_>) -> bool {
//!         request.operation == Operation::Delete
//!     }
//!
//!     async fn validate(&self, _: Cluster<'_>, request: &Request<'_>, _: &serde_json::Value) -> Result<()> {
//!         Err(ApiError::forbidden(request.info, request.name, "nothing is deleted here"))
//!     }
//! }
//!
//! let chain = Chain::default().validating("NoDeletes", NoDeletes);
//! assert_eq!(chain.validating_names(), ["NoDeletes"]);
//! ```

use std::future::Future;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::catalog::ResourceInfo;
use crate::error::Result;
use crate::strategy::{Cluster, Subresource};

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

/// One request as admission sees it (upstream's `admission.Attributes`).
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
    /// Where a plugin's warnings go (upstream adds them to the request's context).
    pub warnings: &'a Warnings,
}

impl Request<'_> {
    /// Whether this request is to resource `plural` of `group` itself, not through a subresource.
    pub fn is_main(&self, group: &str, plural: &str) -> bool {
        self.info.group == group && self.info.plural == plural && matches!(self.subresource, Subresource::Main)
    }

    /// Whether this request creates an object of resource `plural` of `group` (not through a subresource).
    pub fn creates(&self, group: &str, plural: &str) -> bool {
        self.operation == Operation::Create && self.is_main(group, plural)
    }

    /// The name refusals give the object: its name, or its `generateName` before one is made (as kube-apiserver's
    /// admission errors do).
    pub fn object_name<'a>(&'a self, object: &'a Value) -> &'a str {
        if self.name.is_empty() { object["metadata"]["generateName"].as_str().unwrap_or_default() } else { self.name }
    }
}

/// A plugin that may change an object before its kind prepares and validates it (upstream's `MutationInterface`).
pub trait Mutating: Send + Sync + 'static {
    /// Whether the plugin has anything to do with `request`; [`Mutating::admit`] runs only when it does.
    fn handles(&self, request: &Request<'_>) -> bool;

    /// Changes `object`, or refuses the request.
    fn admit(
        &self,
        cluster: Cluster<'_>,
        request: &Request<'_>,
        object: &mut Value,
    ) -> impl Future<Output = Result<()>> + Send;
}

/// A plugin that may refuse an object, or warn about it, just before it is stored (upstream's
/// `ValidationInterface`). `object` is the object as it would be stored (for a delete, the stored one).
pub trait Validating: Send + Sync + 'static {
    /// Whether the plugin has anything to do with `request`; [`Validating::validate`] runs only when it does.
    fn handles(&self, request: &Request<'_>) -> bool;

    /// Refuses the request, or passes it (with warnings in `request.warnings`, if any).
    fn validate(
        &self,
        cluster: Cluster<'_>,
        request: &Request<'_>,
        object: &Value,
    ) -> impl Future<Output = Result<()>> + Send;
}

// === impl Chain ===

/// What an object-safe plugin's run returns.
type Admitted<'a> = BoxFuture<'a, Result<()>>;

/// Declares `$object_safe`, plugin trait `$plugin` in a form the chain can hold as a trait object (an `async fn` in
/// a trait cannot be called through `dyn`), with `$run` boxing the future; `$object` is how the object is lent.
macro_rules! object_safe {
    ($object_safe:ident, $plugin:ident, $run:ident, $object:ty) => {
        #[doc = concat!("[`", stringify!($plugin), "`] as a trait object.")]
        trait $object_safe: Send + Sync {
            fn handles(&self, request: &Request<'_>) -> bool;
            fn $run<'a>(&'a self, cluster: Cluster<'a>, request: &'a Request<'a>, object: $object) -> Admitted<'a>;
        }

        impl<P: $plugin> $object_safe for P {
            fn handles(&self, request: &Request<'_>) -> bool {
                $plugin::handles(self, request)
            }

            fn $run<'a>(&'a self, cluster: Cluster<'a>, request: &'a Request<'a>, object: $object) -> Admitted<'a> {
                Box::pin($plugin::$run(self, cluster, request, object))
            }
        }
    };
}

object_safe!(DynMutating, Mutating, admit, &'a mut Value);
object_safe!(DynValidating, Validating, validate, &'a Value);

/// A plugin in the chain, under its name (kube-apiserver's, for nest's own).
struct Registered<P: ?Sized> {
    name: &'static str,
    plugin: Arc<P>,
}

impl<P: ?Sized> Clone for Registered<P> {
    fn clone(&self) -> Self {
        Registered { name: self.name, plugin: self.plugin.clone() }
    }
}

/// The plugins a registry runs, in order: every mutating one, then every validating one.
#[derive(Clone, Default)]
pub struct Chain {
    mutating: Vec<Registered<dyn DynMutating>>,
    validating: Vec<Registered<dyn DynValidating>>,
}

impl Chain {
    /// Adds a mutating plugin after those there are.
    pub fn mutating(mut self, name: &'static str, plugin: impl Mutating) -> Chain {
        self.mutating.push(Registered { name, plugin: Arc::new(plugin) });
        self
    }

    /// Adds a validating plugin after those there are.
    pub fn validating(mut self, name: &'static str, plugin: impl Validating) -> Chain {
        self.validating.push(Registered { name, plugin: Arc::new(plugin) });
        self
    }

    /// Keeps only the plugins whose name `keep` accepts, in their order.
    pub fn only(mut self, keep: impl Fn(&str) -> bool) -> Chain {
        self.mutating.retain(|p| keep(p.name));
        self.validating.retain(|p| keep(p.name));
        self
    }

    /// The mutating plugins' names, in the order they run.
    pub fn mutating_names(&self) -> Vec<&'static str> {
        self.mutating.iter().map(|p| p.name).collect()
    }

    /// The validating plugins' names, in the order they run.
    pub fn validating_names(&self) -> Vec<&'static str> {
        self.validating.iter().map(|p| p.name).collect()
    }

    /// Runs the mutating plugins that handle `request`, in order; the first refusal ends the request.
    pub(crate) async fn admit(&self, cluster: Cluster<'_>, request: &Request<'_>, object: &mut Value) -> Result<()> {
        for registered in self.mutating.iter().filter(|p| p.plugin.handles(request)) {
            registered.plugin.admit(cluster, request, object).await?;
        }
        Ok(())
    }

    /// Runs the validating plugins that handle `request`, in order; the first refusal ends the request.
    pub(crate) async fn validate(&self, cluster: Cluster<'_>, request: &Request<'_>, object: &Value) -> Result<()> {
        for registered in self.validating.iter().filter(|p| p.plugin.handles(request)) {
            registered.plugin.validate(cluster, request, object).await?;
        }
        Ok(())
    }
}

/// What plugins' unit tests of [`Mutating::handles`] and [`Validating::handles`] share.
#[cfg(test)]
pub(crate) mod testing {
    use super::{Operation, Request, UserInfo, Warnings};
    use crate::catalog::{ALL, Builtin};
    use crate::strategy::Subresource;

    /// The resources the tests ask about that are not namespaced.
    const CLUSTER_SCOPED: [&str; 4] = ["namespaces", "nodes", "persistentvolumes", "certificatesigningrequests"];

    /// Asserts which requests of `user` `handles` accepts, as `expected` says for each resource it names:
    /// `"pods: create, update status; apps/deployments: -"` — of create, update and delete, of the resource itself
    /// and through `/status`, those accepted, or `-` for none. A core resource is named by its plural alone.
    pub(crate) fn expect_handled(handles: impl Fn(&Request<'_>) -> bool, user: &str, expected: &str) {
        let groups = if user.starts_with("system:node:") { vec!["system:nodes".to_string()] } else { Vec::new() };
        let user = UserInfo { name: user.to_string(), groups };
        let warnings = Warnings::default();
        let mut found = Vec::new();
        for entry in expected.split("; ") {
            let resource = entry.split_once(':').map_or(entry, |(resource, _)| resource);
            let (group, plural) = resource.split_once('/').unwrap_or(("", resource));
            let info = Builtin {
                group: group.to_string().leak(),
                version: "v1",
                kind: "Test",
                plural: plural.to_string().leak(),
                namespaced: !CLUSTER_SCOPED.contains(&plural),
                short: &[],
                categories: &[],
                verbs: ALL,
                status: true,
                scale: None,
                stored_as: None,
                subresources: &[],
                created_status: None,
                generation: false,
            }
            .resource_info();
            let mut words = Vec::new();
            for (subresource, suffix) in [(Subresource::Main, ""), (Subresource::Status, " status")] {
                for (operation, word) in
                    [(Operation::Create, "create"), (Operation::Update, "update"), (Operation::Delete, "delete")]
                {
                    let request = Request {
                        operation,
                        info: &info,
                        subresource,
                        namespace: "ns",
                        name: "x",
                        old: None,
                        user: &user,
                        dry_run: false,
                        warnings: &warnings,
                    };
                    if handles(&request) {
                        words.push(format!("{word}{suffix}"));
                    }
                }
            }
            let words = if words.is_empty() { "-".to_string() } else { words.join(", ") };
            found.push(format!("{resource}: {words}"));
        }
        assert_eq!(found.join("; "), expected);
    }
}
