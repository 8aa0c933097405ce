//! Who the management side is in a tenant's cluster: the syncer works there as `nest:syncer`, with a credential of
//! its own (`<cluster>-syncer-kubeconfig`) and the ClusterRole of that name the control plane controller makes in
//! the tenant before the control plane is Ready — never with the tenant's admin kubeconfig, which stays the
//! platform admin's.

use serde_json::{Value, json};

/// The user the syncer is in every tenant, and its ClusterRole and binding there.
pub const SYNCER_USER: &str = "nest:syncer";

/// What the syncer does in a tenant: read everything it syncs, bind pods to virtual nodes and report their status,
/// remove pods whose super pod is gone, keep virtual nodes and their Leases, copy Events, volumes and the shared
/// classes up, make RuntimeClass nest-simulated, write what flows up onto the objects it syncs, and ask for pods' ServiceAccount tokens. (A custom
/// kind synced with `--sync-resource` gets its status up through `*/status`; labels flowing up onto its objects
/// need a binding the platform admin adds.)
pub fn tenant_syncer_rules() -> Value {
    let write = json!(["create", "update", "patch", "delete"]);
    json!([
        {"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["update", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]},
        {"apiGroups": [""], "resources": ["pods/binding", "bindings"], "verbs": ["create"]},
        // What flows up onto the synced objects themselves: labels and annotations under the transparent prefix,
        // Services' addresses, claims' volumes.
        {"apiGroups": [""], "resources": ["pods", "services", "persistentvolumeclaims", "configmaps", "secrets",
                                          "serviceaccounts", "endpoints"], "verbs": ["update", "patch"]},
        {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "update", "patch"]},
        {"apiGroups": [""], "resources": ["nodes", "persistentvolumes"], "verbs": write},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": write},
        {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": write},
        {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": write},
        // RuntimeClass nest-simulated, made once: a tenant's pods ask for simulation by it (nest_client::runtime_classes).
        {"apiGroups": ["node.k8s.io"], "resources": ["runtimeclasses"], "verbs": ["create"]},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": write},
    ])
}

/// The ClusterRole and ClusterRoleBinding of [`SYNCER_USER`] in a tenant.
pub fn tenant_syncer_rbac() -> [Value; 2] {
    [
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": SYNCER_USER}, "rules": tenant_syncer_rules(),
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": SYNCER_USER},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SYNCER_USER},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": SYNCER_USER}],
        }),
    ]
}
