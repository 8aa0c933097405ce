//! RBAC roles and bindings: named by any path segment, as kube-apiserver allows (`ValidateRBACName`).

use crate::strategy::Strategy;
use crate::validation;

/// Roles, ClusterRoles and their bindings.
pub struct PathSegmentNames;

impl Strategy for PathSegmentNames {
    fn validate_name(&self, name: &str) -> Result<(), String> {
        validation::path_segment(name)
    }
}
