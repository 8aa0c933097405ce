//! Services: what selects and what is served goes down, never an address or a node port (the super cluster's to
//! give); the super Service's cluster IP goes up as an annotation, and optionally as an external IP.

use serde_json::{Value, json};

use super::{Cx, Hooks, Kind, Up, pick, resource, with};
use crate::names::SUPER_CLUSTER_IP;
use crate::policy;

pub fn kind() -> Kind {
    Kind {
        down: |o, m| {
            let mut service = with(o, m, &[]);
            let mut spec = pick(&o["spec"], &["selector", "type", "sessionAffinity", "publishNotReadyAddresses"]);
            // Addresses and node ports are the super cluster's to give.
            let ports: Vec<Value> = o["spec"]["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| pick(p, &["name", "port", "targetPort", "protocol", "appProtocol"]))
                .collect();
            spec["ports"] = json!(ports);
            if o["spec"]["clusterIP"] == "None" {
                spec["clusterIP"] = json!("None");
            }
            service["spec"] = spec;
            Some(service)
        },
        content: &["spec"],
        admit: |o, cx| policy::service(&o["spec"], cx),
        hooks: &ServiceHooks,
        ..Kind::plain("services", resource("", "v1", "Service"))
    }
}

struct ServiceHooks;

impl Hooks for ServiceHooks {
    /// The super Service's cluster IP, as annotation [`SUPER_CLUSTER_IP`] and, with `--service-external-ips`, as
    /// the tenant Service's external IP, which tenant clients resolve like any other.
    fn upward(&self, cx: &Cx<'_>, tenant: &Value, existing: &Value, up: &mut Up) {
        let address = &existing["spec"]["clusterIP"];
        if !address.is_null() && tenant["metadata"]["annotations"][SUPER_CLUSTER_IP] != *address {
            up.metadata("annotations", SUPER_CLUSTER_IP, address.clone());
        }
        let external = json!([address]);
        if cx.syncer.options.service_external_ips
            && address.as_str().is_some_and(|a| !a.is_empty() && a != "None")
            && tenant["spec"]["externalIPs"] != external
        {
            up.spec("externalIPs", external);
        }
    }
}
