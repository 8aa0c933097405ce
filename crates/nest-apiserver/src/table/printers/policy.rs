//! policy: PodDisruptionBudgets (`printPodDisruptionBudget`).

use serde_json::{Value, json};

use crate::table::Printer;
use crate::table::format::{created, int, name, text};

/// An IntOrString, or `N/A` when unset.
fn int_or_string(value: &Value) -> String {
    if value.is_null() { "N/A".into() } else { text(value) }
}

const POD_DISRUPTION_BUDGET: Printer = Printer {
    columns: &[
        ("Name", "string", 0),
        ("Min Available", "string", 0),
        ("Max Unavailable", "string", 0),
        ("Allowed Disruptions", "integer", 0),
        ("Age", "string", 0),
    ],
    cells: |o, now| {
        vec![
            name(o),
            json!(int_or_string(&o["spec"]["minAvailable"])),
            json!(int_or_string(&o["spec"]["maxUnavailable"])),
            json!(int(&o["status"]["disruptionsAllowed"])),
            created(o, now),
        ]
    },
};

pub(super) fn of(kind: &str) -> Option<&'static Printer> {
    (kind == "PodDisruptionBudget").then_some(&POD_DISRUPTION_BUDGET)
}
