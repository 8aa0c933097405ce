//! The small vocabulary the server, the controllers, the node, the syncer and the provider all speak, with no I/O
//! and no Kubernetes client: so that a component needing one of these does not link another component for it.
//!
//! - [`base64`]: standard base64, as Kubernetes encodes Secret data and kubeconfigs carry certificates;
//! - [`clock`]: now, as Kubernetes writes timestamps (RFC 3339, whole seconds, UTC);
//! - [`events`]: what an event recorder writes: aggregated, counted or held back, as client-go's correlator decides;
//! - [`quantity`]: resource quantities (`100m`, `1Gi`) as numbers;
//! - [`patch`]: JSON Patch (RFC 6902) and JSON merge patch (RFC 7386), as kube-apiserver applies them;
//! - [`pod_security`]: the lists the Pod Security Standards fix (baseline's capabilities);
//! - [`tenancy`]: a tenant's cluster key, and the label that carries it in the management cluster;
//! - [`json::covers`]: whether one JSON document sets every field of another (what drift means to a controller);
//!   [`json::is_zero`]: whether a value is what Go leaves out as empty.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod base64;
pub mod clock;
pub mod events;
pub mod json;
pub mod patch;
pub mod pod_security;
pub mod quantity;
pub mod tenancy;
