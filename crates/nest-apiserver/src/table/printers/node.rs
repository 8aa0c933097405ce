//! node.k8s.io: RuntimeClasses (`printRuntimeClass`).

use serde_json::json;

use crate::table::Printer;
use crate::table::format::{created, name, text};

const RUNTIME_CLASS: Printer = Printer {
    columns: &[("Name", "string", 0), ("Handler", "string", 0), ("Age", "string", 0)],
    cells: |o, now| vec![name(o), json!(text(&o["handler"])), created(o, now)],
};

pub(super) fn of(kind: &str) -> Option<&'static Printer> {
    (kind == "RuntimeClass").then_some(&RUNTIME_CLASS)
}
