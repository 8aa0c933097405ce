//! Who made a CertificateSigningRequest: upstream's CSR strategy records the requesting user in `spec.username`
//! and `spec.groups` (`pkg/registry/certificates/certificates/strategy.go`, 1.33), whatever the client wrote there,
//! because signers and approvers trust it. nest's strategies do not see the user, so this is a mutating plugin that
//! runs on every create of one; it is not one of kube-apiserver's switchable plugins, and no flag turns it off.

use serde_json::{Value, json};

use crate::chain::{Mutating, Request};
use crate::error::Result;
use crate::strategy::Cluster;

/// The plugin.
pub struct CertificateRequester;

impl Mutating for CertificateRequester {
    fn handles(&self, request: &Request<'_>) -> bool {
        request.creates("certificates.k8s.io", "certificatesigningrequests")
    }

    async fn admit(&self, _: Cluster<'_>, request: &Request<'_>, object: &mut Value) -> Result<()> {
        if object["spec"].is_object() {
            let spec = &mut object["spec"];
            spec["username"] = json!(request.user.name);
            spec["groups"] = json!(request.user.groups);
            if let Some(map) = spec.as_object_mut() {
                map.remove("uid");
                map.remove("extra");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::testing::expect_handled;

    #[test]
    fn only_a_requests_creation_is_handled() {
        expect_handled(
            |r| CertificateRequester.handles(r),
            "alice",
            "certificates.k8s.io/certificatesigningrequests: create; pods: -",
        );
    }
}
