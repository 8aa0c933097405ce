//! certificates.k8s.io: CertificateSigningRequests (`printCertificateSigningRequest`: AGE second, the condition as
//! `Approved,Issued`).

use serde_json::{Value, json};

use crate::table::Printer;
use crate::table::format::{created, human_duration, name, text, text_or_none};

/// `extractCSRStatus`: Denied, else Approved, else Pending (by the presence of the condition); then `,Failed` and
/// `,Issued`.
fn condition(csr: &Value) -> String {
    let conditions = csr["status"]["conditions"].as_array().cloned().unwrap_or_default();
    let has = |kind: &str| conditions.iter().any(|c| c["type"] == kind);
    let mut shown = if has("Denied") {
        "Denied".to_string()
    } else if has("Approved") {
        "Approved".into()
    } else {
        "Pending".into()
    };
    if has("Failed") {
        shown.push_str(",Failed");
    }
    if csr["status"]["certificate"].as_str().is_some_and(|c| !c.is_empty()) {
        shown.push_str(",Issued");
    }
    shown
}

const CERTIFICATE_SIGNING_REQUEST: Printer = Printer {
    columns: &[
        ("Name", "string", 0),
        ("Age", "string", 0),
        ("SignerName", "string", 0),
        ("Requestor", "string", 0),
        ("RequestedDuration", "string", 0),
        ("Condition", "string", 0),
    ],
    cells: |o, now| {
        let spec = &o["spec"];
        let duration = spec["expirationSeconds"].as_i64().map_or("<none>".into(), human_duration);
        vec![
            name(o),
            created(o, now),
            json!(text_or_none(&spec["signerName"])),
            json!(text(&spec["username"])),
            json!(duration),
            json!(condition(o)),
        ]
    },
};

pub(super) fn of(kind: &str) -> Option<&'static Printer> {
    (kind == "CertificateSigningRequest").then_some(&CERTIFICATE_SIGNING_REQUEST)
}
