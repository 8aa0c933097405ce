//! Endpoints and EndpointSlices: their addresses and ports checked as kube-apiserver checks them
//! (`ValidateEndpointIP` in pkg/apis/core/validation, 1.33). An endpoint address is a valid IP that is not
//! unspecified, loopback, link-local or link-local multicast — addresses nothing in a cluster should be sent to
//! through a Service (the host's own services, a cloud's metadata endpoint) — and a port lies in 1–65535. One
//! exception, nest's own: in a cluster whose Service range is loopback (kept whole on one machine's loopback, with
//! nodes whose pods listen on loopback addresses), loopback endpoints are its pods' and are taken.

use serde_json::Value;

use crate::error::Cause;
use crate::strategy::{Cluster, Strategy};

/// The Endpoints strategy.
pub struct Endpoints;

/// The EndpointSlice strategy.
pub struct EndpointSlice;

fn invalid(field: String, value: &str, message: &str) -> Cause {
    Cause::invalid(field, format!("Invalid value: {value:?}: {message}"))
}

/// What is wrong with `address` as an endpoint, at `field`; a loopback address is wrong unless `loopback_pods`.
fn endpoint_ip(address: &Value, field: String, loopback_pods: bool, causes: &mut Vec<Cause>) {
    let text = address.as_str().unwrap_or_default();
    let Ok(ip) = text.parse::<std::net::IpAddr>() else {
        causes.push(invalid(field, text, "must be a valid IP address"));
        return;
    };
    // An IPv4-mapped address (`::ffff:127.0.0.1`) is judged as the IPv4 address it is, as Go's net.IP judges it.
    let (unspecified, loopback, link_local, link_local_multicast) = match ip.to_canonical() {
        std::net::IpAddr::V4(v4) => {
            (v4.is_unspecified(), v4.is_loopback(), v4.is_link_local(), v4.octets()[..3] == [224, 0, 0])
        }
        std::net::IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            (v6.is_unspecified(), v6.is_loopback(), first & 0xffc0 == 0xfe80, first & 0xff0f == 0xff02)
        }
    };
    if unspecified {
        causes.push(invalid(field.clone(), text, &format!("may not be unspecified ({text})")));
    }
    if loopback && !loopback_pods {
        causes.push(invalid(field.clone(), text, "may not be in the loopback range (127.0.0.0/8, ::1/128)"));
    }
    if link_local {
        causes.push(invalid(field.clone(), text, "may not be in the link-local range (169.254.0.0/16, fe80::/10)"));
    }
    if link_local_multicast {
        causes.push(invalid(field, text, "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)"));
    }
}

/// What is wrong with `port` (a port number, when set), at `field`.
fn port(port: &Value, field: String, causes: &mut Vec<Cause>) {
    match port.as_i64() {
        None if port.is_null() => {}
        Some(1..=65535) => {}
        _ => {
            causes.push(Cause::invalid(field, format!("Invalid value: {port}: must be between 1 and 65535, inclusive")))
        }
    }
}

fn items(value: &Value) -> impl Iterator<Item = (usize, &Value)> {
    value.as_array().into_iter().flatten().enumerate()
}

impl Strategy for Endpoints {
    /// `SetDefaults_Endpoints`: a port's protocol is TCP.
    fn prepare_for_create(&self, obj: &mut Value) {
        for subset in obj.get_mut("subsets").and_then(Value::as_array_mut).into_iter().flatten() {
            for port in subset.get_mut("ports").and_then(Value::as_array_mut).into_iter().flatten() {
                crate::strategy::set_defaults(port, [("protocol", serde_json::json!("TCP"))]);
            }
        }
    }

    fn validate_in(&self, cluster: &Cluster<'_>, obj: &Value) -> Vec<Cause> {
        Endpoints::causes(obj, cluster.service_cidr.is_loopback())
    }
}

impl Endpoints {
    fn causes(obj: &Value, loopback_pods: bool) -> Vec<Cause> {
        let mut causes = Vec::new();
        for (s, subset) in items(&obj["subsets"]) {
            for list in ["addresses", "notReadyAddresses"] {
                for (a, address) in items(&subset[list]) {
                    let field = format!("subsets[{s}].{list}[{a}].ip");
                    endpoint_ip(&address["ip"], field, loopback_pods, &mut causes);
                }
            }
            for (p, entry) in items(&subset["ports"]) {
                let field = format!("subsets[{s}].ports[{p}].port");
                if entry["port"].is_null() {
                    causes.push(invalid(field, "0", "must be between 1 and 65535, inclusive"));
                } else {
                    port(&entry["port"], field, &mut causes);
                }
            }
        }
        causes
    }
}

impl Strategy for EndpointSlice {
    /// `endpoints` and `ports` are not `omitempty`, and an empty list is nil after kube-apiserver's protobuf
    /// storage: both read `null` when there are none. Ports default to TCP and a name of `""`
    /// (`SetDefaults_EndpointPort`).
    fn prepare_for_create(&self, obj: &mut Value) {
        if !obj.is_object() {
            return;
        }
        for list in ["endpoints", "ports"] {
            if obj.get(list).is_none_or(|l| l.as_array().is_some_and(Vec::is_empty)) {
                obj[list] = Value::Null;
            }
        }
        for port in obj["ports"].as_array_mut().into_iter().flatten() {
            if port.is_object() {
                if port.get("protocol").is_none_or(Value::is_null) {
                    port["protocol"] = serde_json::json!("TCP");
                }
                if port.get("name").is_none_or(Value::is_null) {
                    port["name"] = serde_json::json!("");
                }
            }
        }
    }

    fn validate_in(&self, cluster: &Cluster<'_>, obj: &Value) -> Vec<Cause> {
        EndpointSlice::causes(obj, cluster.service_cidr.is_loopback())
    }
}

impl EndpointSlice {
    fn causes(obj: &Value, loopback_pods: bool) -> Vec<Cause> {
        let mut causes = Vec::new();
        let ips = matches!(obj["addressType"].as_str(), Some("IPv4" | "IPv6"));
        for (e, endpoint) in items(&obj["endpoints"]) {
            for (a, address) in items(&endpoint["addresses"]) {
                if ips {
                    endpoint_ip(address, format!("endpoints[{e}].addresses[{a}]"), loopback_pods, &mut causes);
                }
            }
        }
        for (p, entry) in items(&obj["ports"]) {
            port(&entry["port"], format!("ports[{p}].port"), &mut causes);
        }
        causes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn messages(causes: Vec<Cause>) -> Vec<String> {
        causes.into_iter().map(|c| format!("{}: {}", c.field, c.message)).collect()
    }

    #[test]
    fn an_ipv4_mapped_address_is_judged_as_its_ipv4_address() {
        let endpoints = json!({"subsets": [{"addresses": [{"ip": "::ffff:127.0.0.1"}, {"ip": "::ffff:169.254.169.254"},
                                                          {"ip": "::ffff:10.1.2.3"}]}]});
        assert_eq!(
            messages(Endpoints::causes(&endpoints, false)),
            [
                r#"subsets[0].addresses[0].ip: Invalid value: "::ffff:127.0.0.1": may not be in the loopback range (127.0.0.0/8, ::1/128)"#,
                r#"subsets[0].addresses[1].ip: Invalid value: "::ffff:169.254.169.254": may not be in the link-local range (169.254.0.0/16, fe80::/10)"#,
            ]
        );
    }

    #[test]
    fn endpoints_never_point_at_the_host_or_the_link() {
        let endpoints = json!({"subsets": [{"addresses": [{"ip": "10.1.2.3"}, {"ip": "127.0.0.1"}, {"ip": "169.254.169.254"}],
            "notReadyAddresses": [{"ip": "0.0.0.0"}, {"ip": "not-an-ip"}, {"ip": "::1"}, {"ip": "224.0.0.251"}],
            "ports": [{"port": 80}, {"port": 70000}]}]});
        assert_eq!(
            messages(Endpoints::causes(&endpoints, false)),
            [
                r#"subsets[0].addresses[1].ip: Invalid value: "127.0.0.1": may not be in the loopback range (127.0.0.0/8, ::1/128)"#,
                r#"subsets[0].addresses[2].ip: Invalid value: "169.254.169.254": may not be in the link-local range (169.254.0.0/16, fe80::/10)"#,
                r#"subsets[0].notReadyAddresses[0].ip: Invalid value: "0.0.0.0": may not be unspecified (0.0.0.0)"#,
                r#"subsets[0].notReadyAddresses[1].ip: Invalid value: "not-an-ip": must be a valid IP address"#,
                r#"subsets[0].notReadyAddresses[2].ip: Invalid value: "::1": may not be in the loopback range (127.0.0.0/8, ::1/128)"#,
                r#"subsets[0].notReadyAddresses[3].ip: Invalid value: "224.0.0.251": may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)"#,
                "subsets[0].ports[1].port: Invalid value: 70000: must be between 1 and 65535, inclusive",
            ]
        );
        let slice = json!({"addressType": "IPv4", "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["127.0.0.2"]}],
            "ports": [{"port": 0}]});
        assert_eq!(
            messages(EndpointSlice::causes(&slice, false)),
            [
                r#"endpoints[1].addresses[0]: Invalid value: "127.0.0.2": may not be in the loopback range (127.0.0.0/8, ::1/128)"#,
                "ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive",
            ]
        );
        let names = json!({"addressType": "FQDN", "endpoints": [{"addresses": ["db.example.com"]}]});
        assert!(EndpointSlice::causes(&names, false).is_empty());
        // A cluster on loopback: its pods' loopback addresses are taken, the rest is refused as before.
        let on_loopback = messages(Endpoints::causes(&endpoints, true));
        assert_eq!(on_loopback.len(), 5, "{on_loopback:?}");
        assert!(!on_loopback.iter().any(|m| m.contains("127.0.0.1")), "{on_loopback:?}");
    }
}
