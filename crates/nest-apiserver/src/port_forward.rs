//! `pods/<name>/portforward`: connect requests, proxied to the pod's node as kube-apiserver proxies them
//! (`PortForwardLocation` in `pkg/registry/core/pod/strategy.go` writes the kubelet's `/portForward/<namespace>/<pod>`
//! with each of the `ports` as a `port`); the upgrade — a WebSocket GET (the channel protocol, or SPDY tunnelled in
//! it) or a SPDY POST — is spliced as exec's is ([`crate::streams`]). The ports are read and bounded here, where they
//! enter: a number in 1..=65535, or a 400.

use std::sync::Arc;

use hyper::Response;
use nest_registry::{ApiError, Registry, Result};

use crate::handler::Body;
use crate::logs::Kubelet;
use crate::streams::{Client, proxy};

/// The most ports one request may name (the kubelet's channel numbers are bytes, two per port).
pub const MAX_PORTS: usize = 64;

/// The ports of a `ports` query (`PodPortForwardOptions.Ports`): each value repeated or comma-separated.
pub fn ports<'a>(values: impl Iterator<Item = &'a str>) -> Result<Vec<u16>> {
    let mut ports = Vec::new();
    for text in values.flat_map(|v| v.split(',')).map(str::trim).filter(|t| !t.is_empty()) {
        if ports.len() >= MAX_PORTS {
            return Err(ApiError::bad_request(format!("at most {MAX_PORTS} ports may be forwarded at once")));
        }
        let number: i64 = text
            .parse()
            .map_err(|_| ApiError::bad_request(format!("strconv.ParseInt: parsing {text:?}: invalid syntax")))?;
        let port = u16::try_from(number)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| ApiError::bad_request(format!("port {number} must be in the range 1 to 65535")))?;
        ports.push(port);
    }
    Ok(ports)
}

/// Answers `pods/<name>/portforward`: the node's `101` (and from then on, the node's stream), or why not.
pub async fn port_forward(
    registry: &Registry,
    tls: Arc<rustls::ClientConfig>,
    namespace: &str,
    name: &str,
    ports: &[u16],
    client: Client<'_>,
) -> Result<Response<Body>> {
    let pods = registry.resource("", "v1", "pods").expect("pods are built in");
    let pod = registry.get(&pods, namespace, name).await?;
    let kubelet = Kubelet::of(registry, &pod, "port-forward to").await?;
    let query: Vec<String> = ports.iter().map(|port| format!("port={port}")).collect();
    let path = format!("/portForward/{namespace}/{name}?{}", query.join("&"));
    proxy(&kubelet, tls, &path, client).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_numbers_from_1_to_65535() {
        assert_eq!(ports(["80", "8080,443"].into_iter()).unwrap(), [80, 8080, 443]);
        assert_eq!(ports(std::iter::empty()).unwrap(), Vec::<u16>::new());
        for bad in ["0", "70000", "-1", "http", "80x"] {
            let error = ports([bad].into_iter()).unwrap_err();
            assert_eq!(error.code, 400, "{bad}");
        }
        assert!(ports(["1"; MAX_PORTS + 1].into_iter()).is_err());
    }
}
