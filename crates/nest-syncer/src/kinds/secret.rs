//! Secrets: their data goes down exactly as it is, but for service-account tokens (the tenant's credentials) and
//! the names of pods' token Secrets, which are the syncer's own ([`crate::tokens`]).

use super::{Kind, resource, with};

pub fn kind() -> Kind {
    Kind {
        down: |o, m| {
            // Service-account tokens are the tenant's credentials; they stay there.
            (o["type"] != "kubernetes.io/service-account-token").then(|| with(o, m, &["type", "data", "immutable"]))
        },
        content: &["data"],
        verbatim: &["data"],
        // Pods' token Secrets are the syncer's own ([`crate::tokens`]).
        super_name: |name| (!name.starts_with(crate::tokens::SECRET_PREFIX)).then_some(name),
        ..Kind::plain("secrets", resource("", "v1", "Secret"))
    }
}
