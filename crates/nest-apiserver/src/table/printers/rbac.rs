//! rbac.authorization.k8s.io: role bindings print their role and, wide, their subjects (`printRoleBinding`,
//! `printClusterRoleBinding`); roles have the default convertor's `Created At`.

use serde_json::{Value, json};

use crate::table::Printer;
use crate::table::format::{created, name, text};

/// The subjects of `kind`, joined with `, ` (`rbac.SubjectsStrings`); a ServiceAccount as `<namespace>/<name>`.
fn subjects(binding: &Value, kind: &str) -> String {
    let all = binding["subjects"].as_array().into_iter().flatten().filter(|s| s["kind"] == kind);
    all.map(|s| {
        if kind == "ServiceAccount" {
            format!("{}/{}", text(&s["namespace"]), text(&s["name"]))
        } else {
            text(&s["name"])
        }
    })
    .collect::<Vec<_>>()
    .join(", ")
}

const BINDING: Printer = Printer {
    columns: &[
        ("Name", "string", 0),
        ("Role", "string", 0),
        ("Age", "string", 0),
        ("Users", "string", 1),
        ("Groups", "string", 1),
        ("ServiceAccounts", "string", 1),
    ],
    cells: |o, now| {
        vec![
            name(o),
            json!(format!("{}/{}", text(&o["roleRef"]["kind"]), text(&o["roleRef"]["name"]))),
            created(o, now),
            json!(subjects(o, "User")),
            json!(subjects(o, "Group")),
            json!(subjects(o, "ServiceAccount")),
        ]
    },
};

pub(super) fn of(kind: &str) -> Option<&'static Printer> {
    match kind {
        "RoleBinding" | "ClusterRoleBinding" => Some(&BINDING),
        "Role" | "ClusterRole" => Some(&super::CREATED_AT),
        _ => None,
    }
}
