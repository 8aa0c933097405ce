//! The one place nest's kinds ([`crate::kinds::install`]) and admission plugins ([`crate::admission::standard`])
//! are wired into the generic mechanism, as kube-apiserver's `pkg/controlplane` wires storage and admission into
//! `k8s.io/apiserver`: the generic store, catalogue and chain import neither folder, and these constructors are
//! where the two meet. They are the registry's usual front door.

use std::sync::{Arc, LazyLock};

use nest_storage::Store;

use crate::cache;
use crate::catalog::{Catalog, ResourceInfo};
use crate::error::Result;
use crate::resource::Resource;
use crate::serving::Kinds;
use crate::store::Registry;
use crate::strategy::{Generic, Strategy};

/// nest's built-in kinds, made once: their strategies hold no state, so every registry can share them.
static KINDS: LazyLock<Arc<Kinds>> = LazyLock::new(|| Arc::new(crate::kinds::install()));

/// nest's built-in kinds.
pub fn kinds() -> Arc<Kinds> {
    KINDS.clone()
}

impl Registry {
    /// A registry of nest's kinds over `store`, running the standard admission chain, with a watch cache and the
    /// stored CustomResourceDefinitions followed ([`Registry::start`]).
    pub async fn open(store: Arc<dyn Store>) -> Result<Registry> {
        Registry::open_with(store, cache::Config::default()).await
    }

    /// [`Registry::open`] with a watch cache sized by `cache` (`--default-watch-cache-size`).
    pub async fn open_with(store: Arc<dyn Store>, cache: cache::Config) -> Result<Registry> {
        Ok(Registry::start(store, kinds(), cache).await?.with_admission(crate::admission::standard()))
    }

    /// Creates what every cluster starts with ([`crate::kinds::bootstrap`]); existing objects are left alone but the
    /// `kubernetes` Service's endpoints, which name this API server (`api`).
    pub async fn bootstrap(&self, api: std::net::SocketAddr) -> Result<()> {
        crate::kinds::bootstrap::run(self, api).await
    }
}

impl Catalog {
    /// nest's built-in resources, in discovery order.
    pub fn builtin() -> Catalog {
        Catalog::clone(KINDS.serving().catalog())
    }

    /// The built-ins plus what the given CustomResourceDefinitions serve, as a registry whose storage holds them
    /// serves it. A CRD naming a built-in resource adds nothing.
    pub fn with_crds<'a>(crds: impl IntoIterator<Item = &'a serde_json::Value>) -> Catalog {
        let crd = crate::kinds::crd::CustomResourceDefinition;
        Catalog::clone(KINDS.serving_with(crds.into_iter().flat_map(|object| crd.defined_resources(object))).catalog())
    }
}

impl Resource {
    /// `info` with the strategy nest's kinds give it, for a request by the server itself: a built-in's row's, a
    /// custom resource's schema's. A registry makes its own ([`Registry::resource`]); this is for code that has a
    /// catalogue entry and no registry (tests, fuzzing).
    pub fn new(info: Arc<ResourceInfo>) -> Resource {
        let strategy: Arc<dyn Strategy> = if info.custom {
            Arc::new(crate::kinds::custom::Custom::new(info.schema.clone()))
        } else {
            let builtin = KINDS.serving().find(&info.group, &info.version, &info.plural).map(|s| s.strategy.clone());
            builtin.unwrap_or_else(|| Arc::new(Generic))
        };
        Resource::with_strategy(info, strategy)
    }
}
