//! CertificateSigningRequests, after kube-controller-manager's `csrsigning` controller
//! (`pkg/controller/certificates/signer`, 1.33): an approved request (Approved, not Denied, not Failed) for one of the
//! standard signers is checked as that signer checks it and signed with the cluster CA, the certificate written to
//! `status.certificate` through `/status`; one the signer refuses gets a `Failed` condition (`SignerValidationFailure`)
//! and no certificate. Requests for other signers are left to whoever runs them.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::certificates::v1::{CertificateSigningRequest, CertificateSigningRequestCondition};
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::{Controller, watcher};
use kube::{Client, ResourceExt};

/// What the controller signs with: the cluster CA and the longest life it gives (`--cluster-signing-duration`).
#[derive(Clone)]
pub struct Signing {
    pub ca: nest_pki::Ca,
    pub duration: Duration,
}

/// The signers this controller runs.
pub const SIGNERS: [&str; 3] = [
    "kubernetes.io/kube-apiserver-client",
    "kubernetes.io/kube-apiserver-client-kubelet",
    "kubernetes.io/kubelet-serving",
];

/// Runs the signer until the watch ends.
pub async fn run(client: Client, signing: Signing) {
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    let context = Arc::new((client, signing));
    let error_policy = |_: Arc<CertificateSigningRequest>, error: &kube::Error, _: Arc<(Client, Signing)>| {
        tracing::debug!(%error, "csrsigning: retrying");
        Action::requeue(Duration::from_secs(1))
    };
    let results = Controller::new(api, watcher::Config::default()).run(reconcile, error_policy, context);
    results.for_each(|_| async {}).await;
}

fn has(csr: &CertificateSigningRequest, kind: &str) -> bool {
    csr.status.as_ref().and_then(|s| s.conditions.as_ref()).into_iter().flatten().any(|c| c.type_ == kind)
}

async fn reconcile(
    csr: Arc<CertificateSigningRequest>,
    context: Arc<(Client, Signing)>,
) -> Result<Action, kube::Error> {
    let (client, signing) = (&context.0, &context.1);
    let issued = csr.status.as_ref().and_then(|s| s.certificate.as_ref()).is_some_and(|c| !c.0.is_empty());
    let signer = csr.spec.signer_name.as_str();
    if issued || !has(&csr, "Approved") || has(&csr, "Denied") || has(&csr, "Failed") || !SIGNERS.contains(&signer) {
        return Ok(Action::await_change());
    }
    let pem = String::from_utf8_lossy(&csr.spec.request.0).to_string();
    let usages = csr.spec.usages.clone().unwrap_or_default();
    let checked = nest_pki::read_request(&pem).and_then(|request| check(signer, &request, &usages));
    let mut next = (*csr).clone();
    let status = next.status.get_or_insert_with(Default::default);
    match checked {
        Err(message) => {
            let failed = CertificateSigningRequestCondition {
                type_: "Failed".into(),
                status: "True".into(),
                reason: Some("SignerValidationFailure".into()),
                message: Some(message),
                last_update_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now())),
                ..Default::default()
            };
            status.conditions.get_or_insert_with(Vec::new).push(failed);
        }
        Ok(()) => {
            let lifetime = match csr.spec.expiration_seconds {
                // At least 10 minutes and at most the signer's duration (which wins should it be shorter).
                Some(seconds) => Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
                    .max(Duration::from_secs(600))
                    .min(signing.duration),
                None => signing.duration,
            };
            let certificate = match nest_pki::sign_request(&signing.ca, &pem, &usages, lifetime) {
                Ok(certificate) => certificate,
                Err(error) => {
                    tracing::warn!(csr = %csr.name_any(), %error, "error auto signing csr");
                    return Ok(Action::requeue(Duration::from_secs(30)));
                }
            };
            status.certificate = Some(k8s_openapi::ByteString(certificate.into_bytes()));
        }
    }
    let api: Api<CertificateSigningRequest> = Api::all(client.clone());
    nest_client::done_unless_gone_or_changed(api.replace_status(&csr.name_any(), &PostParams::default(), &next).await)?;
    Ok(Action::await_change())
}

/// What `signer` accepts (`ValidateKubeletServingCSR`, `ValidateKubeletClientCSR`, the client signer's usages), in
/// upstream's order and words.
fn check(signer: &str, request: &nest_pki::Request, usages: &[String]) -> Result<(), String> {
    let set = |items: &[&str]| -> std::collections::BTreeSet<String> { items.iter().map(|s| s.to_string()).collect() };
    let asked: std::collections::BTreeSet<String> = usages.iter().cloned().collect();
    let nodes = request.organizations == ["system:nodes"];
    let node_name = request.common_name.starts_with("system:node:");
    match signer {
        "kubernetes.io/kubelet-serving" => {
            if !nodes {
                return Err("subject organization is not system:nodes".into());
            }
            if request.dns_names.is_empty() && request.ip_addresses.is_empty() {
                return Err("DNS or IP subjectAltName is required".into());
            }
            if !request.emails.is_empty() {
                return Err("Email subjectAltNames are not allowed".into());
            }
            if !request.uris.is_empty() {
                return Err("URI subjectAltNames are not allowed".into());
            }
            let allowed = [
                set(&["digital signature", "key encipherment", "server auth"]),
                set(&["digital signature", "server auth"]),
            ];
            if !allowed.contains(&asked) {
                return Err("usages did not match [digital signature key encipherment server auth]".into());
            }
            if !node_name {
                return Err("subject common name does not begin with system:node:".into());
            }
        }
        "kubernetes.io/kube-apiserver-client-kubelet" => {
            if !nodes {
                return Err("subject organization is not system:nodes".into());
            }
            for (names, what) in [
                (&request.dns_names, "DNS"),
                (&request.emails, "Email"),
                (&request.ip_addresses, "IP"),
                (&request.uris, "URI"),
            ] {
                if !names.is_empty() {
                    return Err(format!("{what} subjectAltNames are not allowed"));
                }
            }
            if !node_name {
                return Err("subject common name does not begin with system:node:".into());
            }
            let allowed = [
                set(&["digital signature", "key encipherment", "client auth"]),
                set(&["digital signature", "client auth"]),
            ];
            if !allowed.contains(&asked) {
                return Err("usages did not match [client auth digital signature key encipherment]".into());
            }
        }
        _ => {
            if let Some(other) =
                usages.iter().find(|u| !["digital signature", "key encipherment", "client auth"].contains(&u.as_str()))
            {
                return Err(format!("invalid usage for client certificate: {other}"));
            }
            if !asked.contains("client auth") {
                return Err("missing required usage for client certificate: client auth".into());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn each_signer_refuses_what_upstreams_refuses_in_its_words() {
        let node = nest_pki::Request {
            common_name: "system:node:n1".into(),
            organizations: strings(&["system:nodes"]),
            ..Default::default()
        };
        let client = ["digital signature", "key encipherment", "client auth"];
        assert_eq!(check("kubernetes.io/kube-apiserver-client-kubelet", &node, &strings(&client)), Ok(()));
        let with_dns = nest_pki::Request { dns_names: strings(&["n1"]), ..node.clone() };
        assert_eq!(
            check("kubernetes.io/kube-apiserver-client-kubelet", &with_dns, &strings(&client)),
            Err("DNS subjectAltNames are not allowed".into())
        );
        assert_eq!(
            check("kubernetes.io/kubelet-serving", &node, &strings(&["digital signature", "server auth"])),
            Err("DNS or IP subjectAltName is required".into())
        );
        assert_eq!(
            check("kubernetes.io/kubelet-serving", &with_dns, &strings(&["digital signature", "server auth"])),
            Ok(())
        );
        let alice = nest_pki::Request { common_name: "alice".into(), ..Default::default() };
        assert_eq!(
            check("kubernetes.io/kube-apiserver-client", &alice, &strings(&["server auth"])),
            Err("invalid usage for client certificate: server auth".into())
        );
        assert_eq!(
            check("kubernetes.io/kube-apiserver-client", &alice, &strings(&["digital signature"])),
            Err("missing required usage for client certificate: client auth".into())
        );
        assert_eq!(
            check("kubernetes.io/kube-apiserver-client-kubelet", &alice, &strings(&client)),
            Err("subject organization is not system:nodes".into())
        );
    }
}
