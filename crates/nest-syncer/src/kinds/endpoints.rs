//! Endpoints: only those of Services without a selector are the tenant's to sync (the others are the super
//! cluster's endpoints controller's); their addresses are checked against what the tenant may name
//! ([`crate::policy::endpoints`]), and a copy whose address became refused goes.

use super::{Cx, Hooks, Kind, OnRefusal, resource, with};
use crate::policy;

pub fn kind() -> Kind {
    Kind {
        down: |o, m| Some(with(o, m, &["subsets"])),
        content: &["subsets"],
        admit: policy::endpoints,
        // An address allowed when it was copied (the tenant's pod's) can become another tenant's pod's.
        on_refusal: OnRefusal::Remove,
        hooks: &EndpointsHooks,
        ..Kind::plain("endpoints", resource("", "v1", "Endpoints"))
    }
}

struct EndpointsHooks;

impl Hooks for EndpointsHooks {
    /// Gated by the tenant Service of the same name: synced while it exists and has no selector.
    fn synced(&self, cx: &Cx<'_>) -> bool {
        cx.tenant_object("services", cx.namespace, cx.name)
            .is_some_and(|s| s.data["spec"]["selector"].as_object().is_none_or(|m| m.is_empty()))
    }
}
