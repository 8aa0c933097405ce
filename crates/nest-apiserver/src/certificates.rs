//! The certificate admission plugins of kube-apiserver that ask the authorizer (`plugin/pkg/admission/certificates`,
//! 1.33), checked before a CertificateSigningRequest write reaches the registry:
//!
//! - **CertificateApproval**: writing `/approval` needs the `approve` verb on `signers` named by the request's
//!   signer (or `<domain>/*`);
//! - **CertificateSigning**: setting `status.certificate` through `/status` needs the `sign` verb likewise;
//! - **CertificateSubjectRestriction**: nobody may ask the `kubernetes.io/kube-apiserver-client` signer for a
//!   certificate in the `system:masters` group.

use nest_registry::{ApiError, ResourceInfo, Result};
use serde_json::Value;

use crate::auth::User;
use crate::authz::{Action, Mode};

/// Whether `user` may `verb` for `signer`: by its name, or by its domain's wildcard (`IsAuthorizedForSignerName`).
async fn may(registry: &nest_registry::Registry, mode: Mode, user: &User, verb: &str, signer: &str) -> Result<bool> {
    let domain = format!("{}/*", signer.split_once('/').map_or(signer, |(domain, _)| domain));
    for name in [signer, domain.as_str()] {
        let action = Action::Resource {
            verb,
            group: "certificates.k8s.io",
            resource: "signers",
            subresource: None,
            namespace: None,
            name: Some(name),
        };
        if crate::authz::allowed(registry, mode, user, &action).await? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Refuses what the three plugins refuse. `after` is the object the request would write (for a create, the new
/// request; for an update, the object after it), `old` the stored one.
pub async fn check(
    registry: &nest_registry::Registry,
    mode: Mode,
    user: &User,
    info: &ResourceInfo,
    subresource: Option<&str>,
    after: &Value,
    old: Option<&Value>,
) -> Result<()> {
    let name = after["metadata"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .or_else(|| after["metadata"]["generateName"].as_str())
        .unwrap_or_default();
    let Some(old) = old else {
        if after["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client" {
            let pem = nest_registry::kinds::certificate_signing_request::request_pem(after).unwrap_or_default();
            let request = nest_pki::read_request(&pem)
                .map_err(|e| ApiError::forbidden(info, name, format!("failed to parse CSR: {e}")))?;
            if request.organizations.iter().any(|o| o == "system:masters") {
                return Err(ApiError::forbidden(
                    info,
                    name,
                    "use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed",
                ));
            }
        }
        return Ok(());
    };
    let signer = old["spec"]["signerName"].as_str().unwrap_or_default();
    let certificate = |o: &Value| o["status"]["certificate"].as_str().unwrap_or_default().to_string();
    let (verb, what) = match subresource {
        Some("approval") => ("approve", "approve"),
        Some("status") if certificate(after) != certificate(old) => ("sign", "sign"),
        _ => return Ok(()),
    };
    if may(registry, mode, user, verb, signer).await? {
        return Ok(());
    }
    Err(ApiError::forbidden(info, name, format!("user not permitted to {what} requests with signerName {signer:?}")))
}
