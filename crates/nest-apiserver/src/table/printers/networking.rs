//! networking.k8s.io: Ingresses, IngressClasses and NetworkPolicies (`printIngress`, `printIngressClass`,
//! `printNetworkPolicy`).

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::table::Printer;
use crate::table::format::{created, name, selector, text, text_or_none};

/// The rules' hosts, three at most (`formatHosts`): rules without a host are skipped; once three are shown any
/// further rule means `+ N more...`, N counting every rule past three; `*` when none has a host.
fn hosts(ingress: &Value) -> String {
    let rules: Vec<&Value> = ingress["spec"]["rules"].as_array().into_iter().flatten().collect();
    let mut shown: Vec<String> = Vec::new();
    let mut more = false;
    for rule in &rules {
        if shown.len() == 3 {
            more = true;
            break;
        }
        if let Some(host) = rule["host"].as_str().filter(|h| !h.is_empty()) {
            shown.push(host.to_string());
        }
    }
    if shown.is_empty() {
        return "*".into();
    }
    let hosts = shown.join(",");
    if more { format!("{hosts} + {} more...", rules.len() - 3) } else { hosts }
}

/// The load balancer's addresses, each its IP or else its hostname, sorted and without repeats.
fn addresses(ingress: &Value) -> String {
    let entries = ingress["status"]["loadBalancer"]["ingress"].as_array().into_iter().flatten();
    let all: BTreeSet<String> = entries
        .filter_map(|i| {
            let ip = text(&i["ip"]);
            let address = if ip.is_empty() { text(&i["hostname"]) } else { ip };
            (!address.is_empty()).then_some(address)
        })
        .collect();
    all.into_iter().collect::<Vec<_>>().join(",")
}

const INGRESS: Printer = Printer {
    columns: &[
        ("Name", "string", 0),
        ("Class", "string", 0),
        ("Hosts", "string", 0),
        ("Address", "string", 0),
        ("Ports", "string", 0),
        ("Age", "string", 0),
    ],
    cells: |o, now| {
        let tls = o["spec"]["tls"].as_array().is_some_and(|t| !t.is_empty());
        vec![
            name(o),
            json!(text_or_none(&o["spec"]["ingressClassName"])),
            json!(hosts(o)),
            json!(addresses(o)),
            json!(if tls { "80, 443" } else { "80" }),
            created(o, now),
        ]
    },
};

/// `Kind[.group]/name` of an IngressClass's parameters, `<none>` without them.
fn parameters(class: &Value) -> String {
    let parameters = &class["spec"]["parameters"];
    if !parameters.is_object() {
        return "<none>".into();
    }
    let mut shown = text(&parameters["kind"]);
    if let Some(group) = parameters["apiGroup"].as_str() {
        shown.push_str(&format!(".{group}"));
    }
    format!("{shown}/{}", text(&parameters["name"]))
}

const INGRESS_CLASS: Printer = Printer {
    columns: &[("Name", "string", 0), ("Controller", "string", 0), ("Parameters", "string", 0), ("Age", "string", 0)],
    cells: |o, now| vec![name(o), json!(text(&o["spec"]["controller"])), json!(parameters(o)), created(o, now)],
};

const NETWORK_POLICY: Printer = Printer {
    columns: &[("Name", "string", 0), ("Pod-Selector", "string", 0), ("Age", "string", 0)],
    cells: |o, now| vec![name(o), json!(selector(&o["spec"]["podSelector"])), created(o, now)],
};

pub(super) fn of(kind: &str) -> Option<&'static Printer> {
    match kind {
        "Ingress" => Some(&INGRESS),
        "IngressClass" => Some(&INGRESS_CLASS),
        "NetworkPolicy" => Some(&NETWORK_POLICY),
        _ => None,
    }
}
