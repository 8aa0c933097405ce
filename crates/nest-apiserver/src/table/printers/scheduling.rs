//! scheduling.k8s.io: PriorityClasses (`printPriorityClass`; the server prints wide, so PreemptionPolicy is there).

use serde_json::json;

use crate::table::Printer;
use crate::table::format::{created, int, name, text};

const PRIORITY_CLASS: Printer = Printer {
    columns: &[
        ("Name", "string", 0),
        ("Value", "integer", 0),
        ("Global-Default", "boolean", 0),
        ("Age", "string", 0),
        ("PreemptionPolicy", "string", 0),
    ],
    cells: |o, now| {
        vec![
            name(o),
            json!(int(&o["value"])),
            json!(o["globalDefault"].as_bool().unwrap_or(false)),
            created(o, now),
            json!(text(&o["preemptionPolicy"])),
        ]
    },
};

pub(super) fn of(kind: &str) -> Option<&'static Printer> {
    (kind == "PriorityClass").then_some(&PRIORITY_CLASS)
}
