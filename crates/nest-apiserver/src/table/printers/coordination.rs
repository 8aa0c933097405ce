//! coordination.k8s.io: Leases (`printLease`).

use serde_json::json;

use crate::table::Printer;
use crate::table::format::{created, name, text};

const LEASE: Printer = Printer {
    columns: &[("Name", "string", 0), ("Holder", "string", 0), ("Age", "string", 0)],
    cells: |o, now| vec![name(o), json!(text(&o["spec"]["holderIdentity"])), created(o, now)],
};

pub(super) fn of(kind: &str) -> Option<&'static Printer> {
    (kind == "Lease").then_some(&LEASE)
}
