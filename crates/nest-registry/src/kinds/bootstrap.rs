//! What every cluster starts with, as kube-apiserver's bootstrap controllers create it: the `default`,
//! `kube-system`, `kube-public` and `kube-node-lease` namespaces, the default RBAC policy
//! ([`crate::kinds::rbac::bootstrap_policy`]), and the `kubernetes` Service in `default` on the first address of the
//! service range.

use serde_json::json;

use crate::error::Result;
use crate::store::Registry;

/// The namespaces every cluster has.
pub const NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

/// Creates what is missing; existing objects are left alone. `api_port` is the `kubernetes` Service's target port.
pub async fn run(registry: &Registry, api_port: u16) -> Result<()> {
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
    let services = registry.resource("", "v1", "services").expect("services are built in");
    // Another API server sharing the store may have created it (and holds its address) already.
    if registry.get(&services, "default", "kubernetes").await.is_ok() {
        return Ok(());
    }
    let kubernetes = json!({
        "metadata": {"name": "kubernetes", "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {
            "clusterIP": registry.service_cidr().kubernetes_service_ip().to_string(),
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": api_port}],
        },
    });
    match registry.create(&services, "default", kubernetes, false).await {
        Ok(_) => Ok(()),
        // Lost a race with another server starting at the same time.
        Err(_) if registry.get(&services, "default", "kubernetes").await.is_ok() => Ok(()),
        Err(e) => Err(e),
    }
}
