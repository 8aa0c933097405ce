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

/// RoleBindings and ClusterRoleBindings, as `SetDefaults_RoleBinding`, `SetDefaults_ClusterRoleBinding` and
/// `SetDefaults_Subject` default them: the role is RBAC's, and so are users and groups.
pub struct Binding;

impl Strategy for Binding {
    fn validate_name(&self, name: &str) -> Result<(), String> {
        validation::path_segment(name)
    }

    fn prepare_for_create(&self, obj: &mut serde_json::Value) {
        const GROUP: &str = "rbac.authorization.k8s.io";
        if obj["roleRef"].is_object()
            && obj["roleRef"].get("apiGroup").is_none_or(|g| g.as_str().is_none_or(str::is_empty))
        {
            obj["roleRef"]["apiGroup"] = serde_json::json!(GROUP);
        }
        for subject in obj.get_mut("subjects").and_then(serde_json::Value::as_array_mut).into_iter().flatten() {
            let named = matches!(subject["kind"].as_str(), Some("User" | "Group"));
            if named && subject.get("apiGroup").is_none_or(|g| g.as_str().is_none_or(str::is_empty)) {
                subject["apiGroup"] = serde_json::json!(GROUP);
            }
        }
    }
}

/// The default policy kube-apiserver creates at start (`plugin/pkg/auth/authorizer/rbac/bootstrappolicy`, 1.33), the
/// parts nest's components and users need: `cluster-admin` for `system:masters`; `admin`, `edit` and `view`, each
/// aggregating the `system:aggregate-to-*` roles (and `edit` `view`'s, `admin` `edit`'s); discovery, basic-user and
/// public-info-viewer for everyone; service-account-issuer-discovery for ServiceAccounts; and a role for nest's controller-manager, which runs every controller under one
/// identity. Objects that exist are left as they are, so an administrator's changes stay.
pub fn bootstrap_policy() -> Vec<(&'static str, serde_json::Value)> {
    use serde_json::json;
    let meta = |name: &str, labels: serde_json::Value| {
        let mut labels = labels;
        labels["kubernetes.io/bootstrapping"] = json!("rbac-defaults");
        json!({"name": name, "labels": labels, "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}})
    };
    let read = json!(["get", "list", "watch"]);
    let write = json!(["create", "delete", "deletecollection", "patch", "update"]);
    let role = |name: &str, labels: serde_json::Value, rules: serde_json::Value| json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta(name, labels), "rules": rules});
    let aggregated = |name: &str, labels: serde_json::Value, selector: &str| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta(name, labels),
               "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {selector: "true"}}]}, "rules": []})
    };
    let binding = |name: &str, role: &str, subjects: serde_json::Value| {
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": meta(name, json!({})),
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}, "subjects": subjects})
    };
    let group = |name: &str| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": name});
    let user = |name: &str| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name});
    let aggregate = |to: &str| format!("rbac.authorization.k8s.io/aggregate-to-{to}");
    let viewed = json!([
        {"apiGroups": [""], "resources": ["pods", "pods/log", "pods/status", "configmaps", "endpoints", "persistentvolumeclaims",
          "persistentvolumeclaims/status", "replicationcontrollers", "replicationcontrollers/scale", "services", "services/status",
          "serviceaccounts", "events", "limitranges", "resourcequotas", "resourcequotas/status", "bindings"], "verbs": read},
        {"apiGroups": [""], "resources": ["namespaces", "namespaces/status"], "verbs": read},
        {"apiGroups": ["apps"], "resources": ["controllerrevisions", "daemonsets", "daemonsets/status", "deployments",
          "deployments/scale", "deployments/status", "replicasets", "replicasets/scale", "replicasets/status", "statefulsets",
          "statefulsets/scale", "statefulsets/status"], "verbs": read},
        {"apiGroups": ["batch"], "resources": ["cronjobs", "cronjobs/status", "jobs", "jobs/status"], "verbs": read},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": read},
        {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses", "ingresses/status", "networkpolicies"], "verbs": read},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets", "poddisruptionbudgets/status"], "verbs": read},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": read},
    ]);
    let edited = json!([
        {"apiGroups": [""], "resources": ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "configmaps",
          "endpoints", "persistentvolumeclaims", "replicationcontrollers", "replicationcontrollers/scale", "services",
          "services/proxy", "secrets", "serviceaccounts"], "verbs": write},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": read},
        {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
        {"apiGroups": ["apps"], "resources": ["daemonsets", "deployments", "deployments/rollback", "deployments/scale",
          "replicasets", "replicasets/scale", "statefulsets", "statefulsets/scale"], "verbs": write},
        {"apiGroups": ["batch"], "resources": ["cronjobs", "jobs"], "verbs": write},
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": write},
        {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses", "networkpolicies"], "verbs": write},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": write},
    ]);
    let administered = json!([
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"],
         "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]},
        {"apiGroups": ["authorization.k8s.io"], "resources": ["localsubjectaccessreviews"], "verbs": ["create"]},
    ]);
    vec![
        (
            "clusterroles",
            role(
                "cluster-admin",
                json!({}),
                json!([
                    {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                    {"nonResourceURLs": ["*"], "verbs": ["*"]},
                ]),
            ),
        ),
        ("clusterroles", aggregated("admin", json!({}), &aggregate("admin"))),
        ("clusterroles", aggregated("edit", json!({aggregate("admin"): "true"}), &aggregate("edit"))),
        ("clusterroles", aggregated("view", json!({aggregate("edit"): "true"}), &aggregate("view"))),
        ("clusterroles", role("system:aggregate-to-admin", json!({aggregate("admin"): "true"}), administered)),
        ("clusterroles", role("system:aggregate-to-edit", json!({aggregate("edit"): "true"}), edited)),
        ("clusterroles", role("system:aggregate-to-view", json!({aggregate("view"): "true"}), viewed)),
        (
            "clusterroles",
            role(
                "system:basic-user",
                json!({}),
                json!([
                    {"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], "verbs": ["create"]},
                    {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]},
                ]),
            ),
        ),
        (
            "clusterroles",
            role(
                "system:discovery",
                json!({}),
                json!([{"nonResourceURLs": [
            "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*", "/readyz", "/version", "/version/"],
            "verbs": ["get"]}]),
            ),
        ),
        (
            "clusterroles",
            role(
                "system:public-info-viewer",
                json!({}),
                json!([{"nonResourceURLs": [
            "/healthz", "/livez", "/readyz", "/version", "/version/"], "verbs": ["get"]}]),
            ),
        ),
        (
            "clusterroles",
            role(
                "system:service-account-issuer-discovery",
                json!({}),
                json!([{"nonResourceURLs": ["/.well-known/openid-configuration", "/.well-known/openid-configuration/",
                    "/openid/v1/jwks", "/openid/v1/jwks/"], "verbs": ["get"]}]),
            ),
        ),
        // nest's controller-manager runs every controller under its own identity: what they read, and what they
        // make and change (the garbage collector deletes any kind), but nothing of RBAC's to grant.
        (
            "clusterroles",
            role(
                "system:kube-controller-manager",
                json!({}),
                json!([
                    {"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch", "patch", "update", "delete", "deletecollection"]},
                    {"apiGroups": ["", "apps", "batch", "discovery.k8s.io", "coordination.k8s.io", "events.k8s.io", "policy"],
                     "resources": ["*"], "verbs": ["create"]},
                    // The csrsigning controller's signers (kube-controller-manager's bootstrap policy names them).
                    {"apiGroups": ["certificates.k8s.io"], "resources": ["signers"], "resourceNames": [
                      "kubernetes.io/kube-apiserver-client", "kubernetes.io/kube-apiserver-client-kubelet",
                      "kubernetes.io/kubelet-serving", "kubernetes.io/legacy-unknown"], "verbs": ["sign"]},
                ]),
            ),
        ),
        // The scheduler's and the service proxy's, as kube-apiserver's bootstrap policy has them (1.33): what they
        // read, bindings and pod status for the scheduler, Events for both.
        (
            "clusterroles",
            role(
                "system:kube-scheduler",
                json!({}),
                json!([
                    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
                    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
                    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["kube-scheduler"],
                     "verbs": ["get", "update"]},
                    {"apiGroups": [""], "resources": ["nodes", "namespaces", "replicationcontrollers", "services",
                      "persistentvolumeclaims", "persistentvolumes"], "verbs": read},
                    {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete", "get", "list", "watch"]},
                    {"apiGroups": [""], "resources": ["bindings", "pods/binding"], "verbs": ["create"]},
                    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch", "update"]},
                    {"apiGroups": ["apps"], "resources": ["replicasets", "statefulsets"], "verbs": read},
                    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": read},
                    {"apiGroups": ["storage.k8s.io"], "resources": ["csidrivers", "csinodes", "csistoragecapacities",
                      "storageclasses"], "verbs": read},
                    {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
                    {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
                ]),
            ),
        ),
        (
            "clusterroles",
            role(
                "system:node-proxier",
                json!({}),
                json!([
                    {"apiGroups": [""], "resources": ["endpoints", "services"], "verbs": ["list", "watch"]},
                    {"apiGroups": [""], "resources": ["nodes"], "verbs": read},
                    {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
                    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch", "update"]},
                ]),
            ),
        ),
        (
            "clusterrolebindings",
            binding("system:kube-scheduler", "system:kube-scheduler", json!([user("system:kube-scheduler")])),
        ),
        (
            "clusterrolebindings",
            binding("system:node-proxier", "system:node-proxier", json!([user("system:kube-proxy")])),
        ),
        ("clusterrolebindings", binding("cluster-admin", "cluster-admin", json!([group("system:masters")]))),
        (
            "clusterrolebindings",
            binding("system:discovery", "system:discovery", json!([group("system:authenticated")])),
        ),
        (
            "clusterrolebindings",
            binding("system:basic-user", "system:basic-user", json!([group("system:authenticated")])),
        ),
        (
            "clusterrolebindings",
            binding(
                "system:public-info-viewer",
                "system:public-info-viewer",
                json!([group("system:authenticated"), group("system:unauthenticated")]),
            ),
        ),
        (
            "clusterrolebindings",
            binding(
                "system:service-account-issuer-discovery",
                "system:service-account-issuer-discovery",
                json!([group("system:serviceaccounts")]),
            ),
        ),
        (
            "clusterrolebindings",
            binding(
                "system:kube-controller-manager",
                "system:kube-controller-manager",
                json!([user("system:kube-controller-manager")]),
            ),
        ),
    ]
}
