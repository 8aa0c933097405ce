//! What a registry serves: the table of kinds it is given from outside ([`Kinds`], as kube-apiserver's
//! `pkg/controlplane` hands the generic registry its storage map), and what that makes at one moment ([`Serving`]):
//! every resource with its strategy, and the [`Catalog`] discovery shows of them. A kind is one row of the table —
//! its catalogue entry and its strategy together — so nothing here, nor in the generic store, names a kind.

use std::sync::Arc;

use crate::catalog::{Builtin, Catalog};
use crate::strategy::{Served, Strategy};

/// One built-in kind, one row of [`Kinds`]: what discovery says of it, and its policy.
pub struct Kind {
    pub info: Builtin,
    pub strategy: Arc<dyn Strategy>,
}

/// The built-in kinds, in discovery order, from which a registry makes what it serves; the kinds among them that
/// [`Strategy::defines_resources`] add, while the registry runs, the resources their stored objects define.
pub struct Kinds {
    builtins: Vec<Served>,
}

impl Kinds {
    /// The table of `rows`, in discovery order.
    pub fn new(rows: Vec<Kind>) -> Kinds {
        let builtins = rows
            .into_iter()
            .map(|Kind { info, strategy }| Served { info: Arc::new(info.resource_info()), strategy })
            .collect();
        Kinds { builtins }
    }

    /// The built-ins alone.
    pub fn serving(&self) -> Serving {
        Serving::new(self.builtins.clone())
    }

    /// The built-ins plus `defined`: what stored objects of the kinds that define resources define (each such
    /// kind's [`Strategy::defined_resources`]). A resource already served is not served again.
    pub fn serving_with(&self, defined: impl IntoIterator<Item = Served>) -> Serving {
        let mut resources = self.builtins.clone();
        for served in defined {
            let info = &served.info;
            let taken = resources
                .iter()
                .any(|r| r.info.group == info.group && r.info.version == info.version && r.info.plural == info.plural);
            if !taken {
                resources.push(served);
            }
        }
        Serving::new(resources)
    }

    /// The built-ins whose objects define resources.
    pub fn definers(&self) -> impl Iterator<Item = &Served> {
        self.builtins.iter().filter(|served| served.strategy.defines_resources())
    }
}

/// What a registry serves at one moment: each resource with its strategy, and the catalogue of them.
pub struct Serving {
    resources: Vec<Served>,
    /// The same resources' catalogue entries, in the same order, made once for discovery.
    catalog: Arc<Catalog>,
}

impl Serving {
    fn new(resources: Vec<Served>) -> Serving {
        let catalog = Arc::new(Catalog::new(resources.iter().map(|r| r.info.clone()).collect()));
        Serving { resources, catalog }
    }

    /// The catalogue: what discovery lists.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// The resource `plural` in `group/version`, with its strategy.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<&Served> {
        self.resources.iter().find(|r| r.info.group == group && r.info.version == version && r.info.plural == plural)
    }
}
