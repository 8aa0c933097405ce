//! NodeRestriction admission, as kube-apiserver's (`plugin/pkg/admission/noderestriction`, 1.33): what a node's
//! credential (user `system:node:<name>`, group `system:nodes`) writes is its own. It may create, change and delete
//! only its own Node (and its status) and its own Lease in `kube-node-lease`; of pods, only the status of pods bound
//! to it, and delete only those; it creates no pods (kube-apiserver lets it create mirror pods of static pods, which
//! nest's nodes do not run).

use serde_json::Value;

use crate::chain::{Operation, Request, UserInfo, Validating};
use crate::error::{ApiError, Result};
use crate::strategy::{Cluster, Subresource};

/// The NodeRestriction plugin.
pub struct NodeRestriction;

/// The node a user's credential is, when it is one.
fn node_of(user: &UserInfo) -> Option<&str> {
    let name = user.name.strip_prefix("system:node:")?;
    (!name.is_empty() && user.groups.iter().any(|g| g == "system:nodes")).then_some(name)
}

impl Validating for NodeRestriction {
    fn handles(&self, request: &Request<'_>) -> bool {
        node_of(request.user).is_some()
            && matches!(
                (request.info.group.as_str(), request.info.plural.as_str()),
                ("", "nodes" | "pods") | ("coordination.k8s.io", "leases")
            )
    }

    async fn validate(&self, _: Cluster<'_>, request: &Request<'_>, object: &Value) -> Result<()> {
        let Some(node) = node_of(request.user) else { return Ok(()) };
        let refuse = |message: String| Err(ApiError::forbidden(request.info, request.name, message));
        match (request.info.group.as_str(), request.info.plural.as_str()) {
            ("", "nodes") if request.name != node => {
                refuse(format!("node \"{node}\" is not allowed to modify node \"{}\"", request.name))
            }
            ("", "pods") => {
                let bound_here = |pod: &Value| pod["spec"]["nodeName"].as_str() == Some(node);
                match request.operation {
                    Operation::Create => refuse(format!(
                        "pod does not have \"kubernetes.io/config.mirror\" annotation, node \"{node}\" can only \
                         create mirror pods"
                    )),
                    Operation::Update if request.subresource != Subresource::Status => {
                        refuse(format!("node \"{node}\" can only update pod status"))
                    }
                    Operation::Update if !request.old.is_some_and(bound_here) => refuse(format!(
                        "node \"{node}\" can only update pod status for pods with spec.nodeName set to itself"
                    )),
                    Operation::Delete if !bound_here(object) => {
                        refuse(format!("node \"{node}\" can only delete pods with spec.nodeName set to itself"))
                    }
                    _ => Ok(()),
                }
            }
            ("coordination.k8s.io", "leases") => {
                if request.namespace != "kube-node-lease" {
                    refuse("can only access node lease in the kube-node-lease namespace".into())
                } else if request.name != node {
                    refuse("can only access node lease with the same name as the requesting node".into())
                } else {
                    Ok(())
                }
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::testing::expect_handled;

    #[test]
    fn a_nodes_writes_to_nodes_pods_and_leases_are_handled() {
        let all = "create, update, delete, create status, update status, delete status";
        let own = ["nodes", "pods", "coordination.k8s.io/leases"].map(|r| format!("{r}: {all}"));
        expect_handled(|r| NodeRestriction.handles(r), "system:node:n1", &format!("{}; configmaps: -", own.join("; ")));
        expect_handled(|r| NodeRestriction.handles(r), "alice", "pods: -");
    }
}
