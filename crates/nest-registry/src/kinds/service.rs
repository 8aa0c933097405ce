//! Services: the defaults of pkg/apis/core/v1/defaults.go, their checks, and the ClusterIP each gets from the
//! service range ([`crate::ipalloc`]) just before it is stored, given back once it is gone (kube-apiserver does this in
//! the Service REST storage, around the generic store).

use futures_util::future::BoxFuture;
use serde_json::{Value, json};

use crate::catalog::ResourceInfo;
use crate::error::{ApiError, Cause, Result};
use crate::ipalloc;
use crate::meta;
use crate::strategy::{Cluster, Strategy};
use crate::validation;

/// The Service strategy: the defaults of pkg/apis/core/v1/defaults.go (type, session affinity, port protocol and
/// target port), an immutable ClusterIP, and the allocation of that address.
pub struct Service;

impl Strategy for Service {
    /// Gives a new Service its ClusterIP: the one it asks for if free, else the next free one; none for a headless
    /// or ExternalName Service.
    fn reserve<'a>(
        &'a self,
        cluster: Cluster<'a>,
        info: &'a ResourceInfo,
        obj: &'a mut Value,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            if meta::path_str(obj, "spec.type") == "ExternalName" {
                return Ok(());
            }
            let wanted = meta::path_str(obj, "spec.clusterIP");
            if wanted == "None" {
                obj["spec"]["clusterIPs"] = json!(["None"]);
                return Ok(());
            }
            let wanted = match wanted.as_str() {
                "" => None,
                text => Some(text.parse().map_err(|_| {
                    ApiError::invalid(
                        info,
                        meta::name(obj),
                        vec![Cause::invalid(
                            "spec.clusterIP",
                            format!("Invalid value: {text:?}: must be a valid IP address"),
                        )],
                    )
                })?),
            };
            let owner = format!("{}/{}", meta::namespace(obj), meta::name(obj));
            let ip = ipalloc::allocate(cluster.store, cluster.service_cidr, wanted, &owner).await?.to_string();
            obj["spec"]["clusterIP"] = json!(ip);
            obj["spec"]["clusterIPs"] = json!([ip]);
            obj["spec"]["ipFamilies"] = json!(["IPv4"]);
            obj["spec"]["ipFamilyPolicy"] = json!("SingleStack");
            Ok(())
        })
    }

    fn release<'a>(&'a self, cluster: Cluster<'a>, obj: &'a Value) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            for ip in obj["spec"]["clusterIPs"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                if ip == "None" {
                    continue;
                }
                if let Err(error) = ipalloc::release(cluster.store, ip).await {
                    tracing::warn!(%ip, %error, "releasing a service IP");
                }
            }
        })
    }

    fn validate_name(&self, name: &str) -> Result<(), String> {
        validation::dns1035_label(name)
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        if !obj.get("spec").is_some_and(Value::is_object) {
            obj["spec"] = json!({});
        }
        let spec = &mut obj["spec"];
        for (field, default) in [
            ("type", json!("ClusterIP")),
            ("sessionAffinity", json!("None")),
            ("internalTrafficPolicy", json!("Cluster")),
        ] {
            if spec.get(field).is_none_or(Value::is_null) {
                spec[field] = default;
            }
        }
        if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
            for port in ports {
                if port.get("protocol").is_none() {
                    port["protocol"] = json!("TCP");
                }
                if port.get("targetPort").is_none_or(Value::is_null) {
                    port["targetPort"] = port.get("port").cloned().unwrap_or(Value::Null);
                }
            }
        }
    }

    fn prepare_for_update(&self, obj: &mut Value, old: &Value) {
        self.prepare_for_create(obj);
        // An update that leaves the address out keeps the allocated one.
        for field in ["clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy"] {
            if obj["spec"].get(field).is_none_or(|v| v.is_null() || v == "")
                && let Some(value) = old.get("spec").and_then(|s| s.get(field))
            {
                obj["spec"][field] = value.clone();
            }
        }
    }

    fn validate(&self, obj: &Value) -> Vec<Cause> {
        let spec = &obj["spec"];
        let kind = spec.get("type").and_then(Value::as_str).unwrap_or("ClusterIP");
        let mut causes = Vec::new();
        if !["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"].contains(&kind) {
            causes.push(Cause {
                reason: "FieldValueNotSupported",
                message: format!("Unsupported value: {kind:?}: supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\""),
                field: "spec.type".into(),
            });
        }
        let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
        let ports = spec.get("ports").and_then(Value::as_array);
        if kind != "ExternalName" && !headless && ports.is_none_or(|p| p.is_empty()) {
            causes.push(Cause::required("spec.ports"));
        }
        for (i, port) in ports.into_iter().flatten().enumerate() {
            match port.get("port").and_then(Value::as_i64) {
                Some(p) if (1..=65535).contains(&p) => {}
                Some(p) => causes.push(Cause::invalid(
                    format!("spec.ports[{i}].port"),
                    format!("Invalid value: {p}: must be between 1 and 65535, inclusive"),
                )),
                None => causes.push(Cause::required(format!("spec.ports[{i}].port"))),
            }
        }
        causes
    }

    fn validate_update(&self, obj: &Value, old: &Value) -> Vec<Cause> {
        let mut causes = self.validate(obj);
        let (new_ip, old_ip) = (&obj["spec"]["clusterIP"], &old["spec"]["clusterIP"]);
        if !old_ip.is_null() && new_ip != old_ip {
            causes.push(Cause::invalid(
                "spec.clusterIPs[0]",
                format!("Invalid value: {new_ip}: may not change once set"),
            ));
        }
        causes
    }
}
