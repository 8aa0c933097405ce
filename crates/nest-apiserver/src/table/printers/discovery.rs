//! discovery.k8s.io: EndpointSlices (`printEndpointSlice`: ports and addresses, three of each at most).

use serde_json::{Value, json};

use crate::table::Printer;
use crate::table::format::{created, first_three, name, text};

fn ports(slice: &Value) -> String {
    let ports = slice["ports"].as_array().into_iter().flatten();
    first_three(
        ports
            .map(|p| match (p["port"].as_i64(), p["name"].as_str()) {
                (Some(port), _) => port.to_string(),
                (None, Some(name)) => name.to_string(),
                (None, None) => "*".into(),
            })
            .collect(),
    )
}

fn addresses(slice: &Value) -> String {
    let endpoints = slice["endpoints"].as_array().into_iter().flatten();
    first_three(endpoints.flat_map(|e| e["addresses"].as_array().into_iter().flatten().map(text)).collect())
}

const ENDPOINT_SLICE: Printer = Printer {
    columns: &[
        ("Name", "string", 0),
        ("AddressType", "string", 0),
        ("Ports", "string", 0),
        ("Endpoints", "string", 0),
        ("Age", "string", 0),
    ],
    cells: |o, now| {
        vec![name(o), json!(text(&o["addressType"])), json!(ports(o)), json!(addresses(o)), created(o, now)]
    },
};

pub(super) fn of(kind: &str) -> Option<&'static Printer> {
    (kind == "EndpointSlice").then_some(&ENDPOINT_SLICE)
}
