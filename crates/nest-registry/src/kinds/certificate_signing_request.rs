//! CertificateSigningRequests (`certificates.k8s.io/v1`), after kube-apiserver's `pkg/registry/certificates` and
//! `pkg/apis/certificates/validation` (1.33): a request records who made it (the requester plugin of
//! [`crate::admission`], which no client can bypass), its spec never changes, conditions change only through `/approval` (Approved, Denied) or
//! `/status` (Failed and others), none of Approved, Denied and Failed is ever removed, Approved and Denied exclude
//! each other, and the certificate is written once, through `/status`. Who may approve or sign for a signer is
//! checked by the API server, which holds the authorizer.

use serde_json::{Value, json};

use crate::catalog::{ResourceInfo, SubresourceInfo};
use crate::error::{Cause, Result};
use crate::strategy::{Strategy, Subresource};

/// `certificatesigningrequests/approval`.
pub const SUBRESOURCES: &[SubresourceInfo] =
    &[SubresourceInfo { name: "approval", kind: "CertificateSigningRequest", verbs: &["get", "patch", "update"] }];

/// The key usages a request may ask for (`certificates.KeyUsage`).
const USAGES: [&str; 23] = [
    "any",
    "cert sign",
    "client auth",
    "code signing",
    "content commitment",
    "crl sign",
    "data encipherment",
    "decipher only",
    "digital signature",
    "email protection",
    "encipher only",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "key agreement",
    "key encipherment",
    "microsoft sgc",
    "netscape sgc",
    "ocsp signing",
    "s/mime",
    "server auth",
    "signing",
    "timestamping",
];

/// The conditions nobody may remove, of which only `True` is a valid status.
const LASTING: [&str; 3] = ["Approved", "Denied", "Failed"];

/// The strategy.
pub struct CertificateSigningRequest;

/// The PEM request in `spec.request` (base64 in JSON).
pub fn request_pem(csr: &Value) -> Option<String> {
    nest_core::base64::decode_text(csr["spec"]["request"].as_str()?)
}

fn conditions(csr: &Value) -> Vec<Value> {
    csr["status"]["conditions"].as_array().cloned().unwrap_or_default()
}

fn count(conditions: &[Value], kind: &str) -> usize {
    conditions.iter().filter(|c| c["type"] == kind).count()
}

/// Fills what a client left out of new conditions: their update and transition times (the transition time of an
/// old condition of the same type and status, if there was one).
fn stamp(conditions: &mut [Value], old: &[Value]) {
    let now = nest_core::clock::rfc3339_now();
    for condition in conditions {
        if condition["lastUpdateTime"].as_str().is_none_or(str::is_empty) {
            condition["lastUpdateTime"] = json!(now);
        }
        if condition["lastTransitionTime"].as_str().is_none_or(str::is_empty) {
            let before = old.iter().find(|o| o["type"] == condition["type"] && o["status"] == condition["status"]);
            condition["lastTransitionTime"] = before.map_or(json!(now), |b| b["lastTransitionTime"].clone());
        }
    }
}

impl CertificateSigningRequest {
    /// `ValidateCertificateSigningRequestCreate`'s checks of the spec and the conditions.
    fn check(obj: &Value, old: Option<&Value>) -> Vec<Cause> {
        let mut causes = Vec::new();
        let spec = &obj["spec"];
        match request_pem(obj).map(|pem| nest_pki::read_request(&pem)) {
            None => causes.push(Cause::invalid(
                "spec.request",
                "Invalid value: \"\": PEM block type must be CERTIFICATE REQUEST",
            )),
            Some(Err(error)) => {
                causes.push(Cause::invalid("spec.request", format!("Invalid value: \"<request data>\": {error}")))
            }
            Some(Ok(_)) => {}
        }
        let usages: Vec<&str> = spec["usages"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        let old_usages: Vec<&str> = old
            .map(|o| o["spec"]["usages"].as_array().into_iter().flatten().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if usages.is_empty() {
            causes.push(Cause::required("spec.usages"));
        }
        for (i, usage) in usages.iter().enumerate() {
            if !USAGES.contains(usage) && !old_usages.contains(usage) {
                let supported: Vec<String> = USAGES.iter().map(|u| format!("{u:?}")).collect();
                causes.push(Cause {
                    reason: "FieldValueNotSupported",
                    field: format!("spec.usages[{i}]"),
                    message: format!("Unsupported value: {usage:?}: supported values: {}", supported.join(", ")),
                });
            } else if usages[..i].contains(usage) {
                causes.push(Cause {
                    reason: "FieldValueDuplicate",
                    field: format!("spec.usages[{i}]"),
                    message: format!("Duplicate value: {usage:?}"),
                });
            }
        }
        causes.extend(signer_name(spec["signerName"].as_str().unwrap_or_default(), old));
        if let Some(seconds) = spec["expirationSeconds"].as_i64()
            && seconds < 600
        {
            causes.push(Cause::invalid(
                "spec.expirationSeconds",
                format!("Invalid value: {seconds}: may not specify a duration less than 600 seconds (10 minutes)"),
            ));
        }
        let all = conditions(obj);
        for (i, condition) in all.iter().enumerate() {
            let kind = condition["type"].as_str().unwrap_or_default();
            let status = condition["status"].as_str().unwrap_or_default();
            if kind.is_empty() {
                causes.push(Cause::required(format!("status.conditions[{i}].type")));
            }
            if status.is_empty() {
                causes.push(Cause::required(format!("status.conditions[{i}].status")));
            } else if LASTING.contains(&kind) && status != "True" {
                causes.push(Cause {
                    reason: "FieldValueNotSupported",
                    field: format!("status.conditions[{i}].status"),
                    message: format!("Unsupported value: {status:?}: supported values: \"True\""),
                });
            } else if !["True", "False", "Unknown"].contains(&status) {
                causes.push(Cause {
                    reason: "FieldValueNotSupported",
                    field: format!("status.conditions[{i}].status"),
                    message: format!(
                        "Unsupported value: {status:?}: supported values: \"False\", \"True\", \"Unknown\""
                    ),
                });
            }
            if all[..i].iter().any(|c| c["type"] == kind) {
                causes.push(Cause {
                    reason: "FieldValueDuplicate",
                    field: format!("status.conditions[{i}].type"),
                    message: format!("Duplicate value: {kind:?}"),
                });
            }
        }
        let both_before =
            old.is_some_and(|o| count(&conditions(o), "Approved") > 0 && count(&conditions(o), "Denied") > 0);
        if count(&all, "Approved") > 0 && count(&all, "Denied") > 0 && !both_before {
            let later = all.iter().rposition(|c| c["type"] == "Approved" || c["type"] == "Denied").unwrap_or(0);
            causes.push(Cause::invalid(
                format!("status.conditions[{later}].type"),
                format!(
                    "Invalid value: {:?}: Approved and Denied conditions are mutually exclusive",
                    all[later]["type"].as_str().unwrap_or_default()
                ),
            ));
        }
        causes
    }
}

/// `ValidateSignerName`: `example.com/signer-name`, the domain of at least two DNS labels.
fn signer_name(name: &str, old: Option<&Value>) -> Vec<Cause> {
    let field = "spec.signerName";
    if name.is_empty() {
        return vec![Cause::required(field)];
    }
    if name == "kubernetes.io/legacy-unknown" && old.is_none_or(|o| o["spec"]["signerName"] != name) {
        return vec![Cause::invalid(
            field,
            format!("Invalid value: {name:?}: the legacy signerName is not allowed via this API version"),
        )];
    }
    let Some((domain, path)) = name.split_once('/').filter(|(_, path)| !path.contains('/')) else {
        return vec![Cause::invalid(
            field,
            format!(
                "Invalid value: {name:?}: must be a fully qualified domain and path of the form 'example.com/signer-name'"
            ),
        )];
    };
    if domain.len() > 253 {
        return vec![Cause {
            reason: "FieldValueTooLong",
            field: field.into(),
            message: "Too long: may not be more than 253 bytes".into(),
        }];
    }
    for label in domain.split('.') {
        if let Err(message) = crate::validation::dns1123_label(label) {
            return vec![Cause::invalid(
                field,
                format!("Invalid value: {domain:?}: validating label {label:?}: {message}"),
            )];
        }
    }
    if domain.split('.').count() < 2 {
        return vec![Cause::invalid(
            field,
            format!("Invalid value: {domain:?}: should be a domain with at least two segments separated by dots"),
        )];
    }
    for label in path.split('.') {
        if let Err(message) = crate::validation::dns1123_subdomain(label) {
            return vec![Cause::invalid(
                field,
                format!("Invalid value: {path:?}: validating label {label:?}: {message}"),
            )];
        }
    }
    if name.len() > 571 {
        return vec![Cause {
            reason: "FieldValueTooLong",
            field: field.into(),
            message: "Too long: may not be more than 571 bytes".into(),
        }];
    }
    Vec::new()
}

impl Strategy for CertificateSigningRequest {
    /// Any name: `ValidateCertificateRequestName` checks nothing beyond the path-segment rules.
    fn validate_name(&self, name: &str) -> std::result::Result<(), String> {
        crate::validation::path_segment(name)
    }

    /// A new request has no status: nobody creates one approved.
    fn prepare_for_create(&self, obj: &mut Value) {
        if let Some(map) = obj.as_object_mut() {
            map.insert("status".into(), json!({}));
        }
    }

    /// The spec is the request's for good; the status changes through subresources only.
    fn prepare_for_update(&self, obj: &mut Value, old: &Value) {
        obj["spec"] = old["spec"].clone();
    }

    fn validate(&self, obj: &Value) -> Vec<Cause> {
        Self::check(obj, None)
    }

    fn validate_update(&self, obj: &Value, old: &Value) -> Vec<Cause> {
        self.validate_update_of(Subresource::Main, obj, old)
    }

    fn validate_update_of(&self, subresource: Subresource, obj: &Value, old: &Value) -> Vec<Cause> {
        let mut causes = Self::check(obj, Some(old));
        let (now, before) = (conditions(obj), conditions(old));
        for kind in LASTING {
            if count(&now, kind) < count(&before, kind) {
                causes.push(Cause {
                    reason: "FieldValueForbidden",
                    field: "status.conditions".into(),
                    message: format!("Forbidden: updates may not remove a condition of type {kind:?}"),
                });
            }
            if subresource == Subresource::Status
                && ["Approved", "Denied"].contains(&kind)
                && count(&now, kind) > count(&before, kind)
            {
                causes.push(Cause {
                    reason: "FieldValueForbidden",
                    field: "status.conditions".into(),
                    message: format!("Forbidden: updates may not add a condition of type {kind:?}"),
                });
            }
        }
        let certificate = |o: &Value| o["status"]["certificate"].as_str().unwrap_or_default().to_string();
        if certificate(obj) != certificate(old) {
            let message = if subresource != Subresource::Status {
                Some("Forbidden: updates may not set certificate content")
            } else if !certificate(old).is_empty() {
                Some("Forbidden: updates may not modify existing certificate content")
            } else {
                None
            };
            match message {
                Some(message) => causes.push(Cause {
                    reason: "FieldValueForbidden",
                    field: "status.certificate".into(),
                    message: message.into(),
                }),
                None => {
                    let pem = nest_core::base64::decode_text(&certificate(obj)).unwrap_or_default();
                    if let Err(error) = nest_pki::der(&pem) {
                        causes.push(Cause::invalid(
                            "status.certificate",
                            format!("Invalid value: \"<certificate data>\": {error}"),
                        ));
                    }
                }
            }
        }
        causes
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["spec.signerName"]
    }

    /// `/approval`: only the conditions are taken from the body.
    fn update_subresource(&self, _name: &str, _info: &ResourceInfo, current: &Value, body: &Value) -> Result<Value> {
        let mut next = current.clone();
        let mut given = conditions(body);
        stamp(&mut given, &conditions(current));
        next["status"]["conditions"] = json!(given);
        if let Some(rv) =
            body["metadata"].get("resourceVersion").filter(|rv| rv.as_str().is_some_and(|s| !s.is_empty()))
        {
            next["metadata"]["resourceVersion"] = rv.clone();
        }
        Ok(next)
    }
}
