//! What every cluster starts with, as kube-apiserver's bootstrap controllers create it: the `default`,
//! `kube-system`, `kube-public` and `kube-node-lease` namespaces, the default RBAC policy
//! ([`crate::kinds::rbac::bootstrap_policy`]), the `system-node-critical` and `system-cluster-critical`
//! PriorityClasses ([`crate::kinds::priority_class`]), and the `kubernetes` Service in `default` on the first address of the
//! service range.

use serde_json::json;

use crate::error::Result;
use crate::store::Registry;

/// The namespaces every cluster has.
pub const NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

/// Creates what is missing; existing objects are left alone, but the `kubernetes` Service's endpoints, which name
/// this API server (`api`). `api`'s port is the Service's target port.
pub async fn run(registry: &Registry, api: std::net::SocketAddr) -> Result<()> {
    let api_port = api.port();
    let namespaces = registry.resource("", "v1", "namespaces").expect("namespaces are built in");
    for name in NAMESPACES {
        match registry.create(&namespaces, "", json!({"metadata": {"name": name}}), false).await {
            Ok(_) => {}
            Err(e) if e.reason == "AlreadyExists" => {}
            Err(e) => return Err(e),
        }
    }
    for (plural, object) in crate::kinds::rbac::bootstrap_policy() {
        let resource = registry.resource("rbac.authorization.k8s.io", "v1", plural).expect("RBAC is built in");
        match registry.create(&resource, "", object, false).await {
            Ok(_) => {}
            Err(e) if e.reason == "AlreadyExists" => {}
            Err(e) => return Err(e),
        }
    }
    let classes = registry.resource("scheduling.k8s.io", "v1", "priorityclasses").expect("built in");
    for (name, value, description) in crate::kinds::priority_class::SYSTEM_CLASSES {
        let class = crate::kinds::priority_class::system_class(name, value, description);
        match registry.create(&classes, "", class, false).await {
            Ok(_) => {}
            Err(e) if e.reason == "AlreadyExists" => {}
            Err(e) => return Err(e),
        }
    }
    let services = registry.resource("", "v1", "services").expect("services are built in");
    // Another API server sharing the store may have created it (and holds its address) already.
    if registry.get(&services, "default", "kubernetes").await.is_ok() {
        return endpoints(registry, api).await;
    }
    let kubernetes = json!({
        "metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {
            "clusterIP": registry.service_cidr().kubernetes_service_ip().to_string(),
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": api_port}],
        },
    });
    match registry.create(&services, "default", kubernetes, false).await {
        Ok(_) => {}
        // Lost a race with another server starting at the same time.
        Err(_) if registry.get(&services, "default", "kubernetes").await.is_ok() => {}
        Err(e) => return Err(e),
    }
    endpoints(registry, api).await
}

/// The `kubernetes` Service's Endpoints and EndpointSlice, naming this API server, as kube-apiserver's endpoint
/// reconciler keeps them (the last server to start names itself), so that in-cluster clients reach it through the
/// Service. An address the Endpoints rules refuse (loopback, in a cluster whose Service range is not) is left out:
/// no pod could reach it there.
async fn endpoints(registry: &Registry, api: std::net::SocketAddr) -> Result<()> {
    let ip = match api.ip() {
        ip if ip.is_unspecified() => std::net::IpAddr::from([127, 0, 0, 1]),
        ip => ip,
    };
    let port = json!({"name": "https", "port": api.port(), "protocol": "TCP"});
    let wanted = [
        (
            ("", "endpoints"),
            json!({
                "apiVersion": "v1", "kind": "Endpoints",
                "metadata": {"name": "kubernetes", "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
                "subsets": [{"addresses": [{"ip": ip.to_string()}], "ports": [port]}],
            }),
        ),
        (
            ("discovery.k8s.io", "endpointslices"),
            json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "kubernetes", "labels": {"kubernetes.io/service-name": "kubernetes"}},
                "addressType": if ip.is_ipv4() { "IPv4" } else { "IPv6" },
                "endpoints": [{"addresses": [ip.to_string()], "conditions": {"ready": true}}],
                "ports": [port],
            }),
        ),
    ];
    for ((group, plural), object) in wanted {
        let resource = registry.resource(group, "v1", plural).expect("built in");
        let result = match registry.get(&resource, "default", "kubernetes").await {
            Ok(existing) => {
                let same = ["subsets", "endpoints", "ports"].iter().all(|f| existing[*f] == object[*f]);
                if same {
                    continue;
                }
                let mut object = object;
                object["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"].clone();
                registry
                    .update(&resource, "default", "kubernetes", object, crate::store::Subresource::Main, false)
                    .await
            }
            Err(_) => registry.create(&resource, "default", object, false).await,
        };
        match result {
            Ok(_) => {}
            // Refused (a loopback address where the Service range is not), or changed by another server meanwhile.
            Err(e) if e.code == 422 || e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
