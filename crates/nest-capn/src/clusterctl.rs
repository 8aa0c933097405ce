//! The provider packaged for clusterctl, generated from the same types and CRDs the manager installs itself: per
//! provider (infrastructure `nested`, control plane `nested`) a `metadata.yaml` naming the Cluster API contract, a
//! components file (namespace, CRDs, RBAC — with a role aggregated to the Cluster API manager — and the manager
//! Deployment), and for the infrastructure provider a `cluster-template.yaml` with clusterctl's `${VAR:=default}`
//! variables. `nest clusterctl DIR` writes them in the layout of a clusterctl local repository.

use serde_json::{Value, json};

use crate::api::{CONTROL_PLANE_GROUP, INFRASTRUCTURE_GROUP};
use crate::bundle::DEFAULT_VERSION;
use crate::crds;
use crate::render::nest_image;

/// The two providers of the package.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provider {
    Infrastructure,
    ControlPlane,
}

impl Provider {
    /// clusterctl's name for it: `<type>-<name>`.
    pub fn label(self) -> &'static str {
        match self {
            Provider::Infrastructure => "infrastructure-nested",
            Provider::ControlPlane => "control-plane-nested",
        }
    }
    /// The components file's name clusterctl looks for.
    pub fn components_file(self) -> &'static str {
        match self {
            Provider::Infrastructure => "infrastructure-components.yaml",
            Provider::ControlPlane => "control-plane-components.yaml",
        }
    }
    fn namespace(self) -> &'static str {
        match self {
            Provider::Infrastructure => "capn-system",
            Provider::ControlPlane => "capn-control-plane-system",
        }
    }
    fn group(self) -> &'static str {
        match self {
            Provider::Infrastructure => INFRASTRUCTURE_GROUP,
            Provider::ControlPlane => CONTROL_PLANE_GROUP,
        }
    }
    /// `nest manager --controllers` for this provider.
    fn controllers(self) -> &'static str {
        match self {
            Provider::Infrastructure => "infrastructure",
            Provider::ControlPlane => "control-plane",
        }
    }
}

/// The release of this build, as clusterctl names releases (`v0.1.0`).
pub fn release() -> String {
    format!("v{}", env!("CARGO_PKG_VERSION"))
}

/// `metadata.yaml`: this release series speaks Cluster API's v1beta2 contract (and v1beta1's fields).
pub fn metadata() -> Value {
    let version = env!("CARGO_PKG_VERSION");
    let mut parts = version.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    json!({
        "apiVersion": "clusterctl.cluster.x-k8s.io/v1alpha3",
        "kind": "Metadata",
        "releaseSeries": [{"major": major, "minor": minor, "contract": "v1beta2"}],
    })
}

fn labels(provider: Provider) -> Value {
    json!({"cluster.x-k8s.io/provider": provider.label()})
}

/// What `provider`'s manager may do in the management cluster: its own kinds, Clusters to read, Events, and what its
/// controllers make (the control plane's Secrets, Services and StatefulSets).
pub fn manager_rules(provider: Provider) -> Vec<Value> {
    let own_kinds: Vec<String> = crds::provider()
        .into_iter()
        .filter(|c| c.spec.group == provider.group())
        .flat_map(|c| {
            let plural = c.spec.names.plural;
            [plural.clone(), format!("{plural}/status"), format!("{plural}/finalizers")]
        })
        .collect();
    let mut rules = vec![
        json!({"apiGroups": [provider.group()], "resources": own_kinds, "verbs": ["*"]}),
        json!({"apiGroups": ["cluster.x-k8s.io"], "resources": ["clusters", "clusters/status"],
               "verbs": ["get", "list", "watch"]}),
        json!({"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]}),
    ];
    match provider {
        Provider::Infrastructure => rules.push(json!({
            "apiGroups": [CONTROL_PLANE_GROUP], "resources": ["nestedcontrolplanes"], "verbs": ["get", "list", "watch"],
        })),
        Provider::ControlPlane => {
            rules.push(json!({"apiGroups": [""], "resources": ["secrets", "services"], "verbs": ["*"]}));
            rules.push(json!({"apiGroups": [""], "resources": ["persistentvolumeclaims", "pods"],
                              "verbs": ["get", "list", "watch"]}));
            rules.push(json!({"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["*"]}));
        }
    }
    // With `--install-crds=false` the manager reads the Cluster CRD once, to know whether the Cluster API core owns
    // Clusters (`nest manager`).
    rules.push(json!({"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
                      "resourceNames": ["clusters.cluster.x-k8s.io"], "verbs": ["get"]}));
    rules
}

/// Everything in one `nest manager` (as `nest up` runs it): both providers' rules, the Cluster controller's (which
/// the Cluster API core has elsewhere), and installing the CRDs.
pub fn all_in_one_manager_rules() -> Vec<Value> {
    let mut rules = manager_rules(Provider::Infrastructure);
    rules.extend(manager_rules(Provider::ControlPlane));
    rules.push(json!({"apiGroups": ["cluster.x-k8s.io"], "resources": ["clusters", "clusters/status"],
                      "verbs": ["get", "list", "watch", "update", "patch"]}));
    rules.push(json!({"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
                      "verbs": ["get", "list", "watch", "create", "update", "patch"]}));
    rules
}

/// Everything `clusterctl init` installs for `provider`, in order.
pub fn components(provider: Provider) -> Vec<Value> {
    let namespace = provider.namespace();
    let name = format!("capn-{}", provider.controllers());
    let mut objects = vec![json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": namespace, "labels": labels(provider)},
    })];
    for crd in crds::provider() {
        if crd.spec.group == provider.group() {
            objects.push(serde_json::to_value(crd).unwrap_or_default());
        }
    }
    objects.extend(account(provider, &name, &format!("{name}-manager"), Value::Array(manager_rules(provider))));
    // The Cluster API core manager reads and updates the provider's objects (it adopts them and copies their
    // status): its role aggregates this one.
    objects.push(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {
            "name": format!("{name}-aggregated-manager"),
            "labels": {"cluster.x-k8s.io/provider": provider.label(), "cluster.x-k8s.io/aggregate-to-manager": "true"},
        },
        "rules": [{"apiGroups": [provider.group()], "resources": ["*"],
                   "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}],
    }));
    let container = json!({
        "name": "manager",
        "image": nest_image(),
        "args": ["manager", format!("--controllers={}", provider.controllers()), "--install-crds=false"],
        "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "256Mi"}},
        "securityContext": restricted(),
    });
    objects.push(deployment(provider, &name, "controller-manager", container));
    if provider == Provider::ControlPlane {
        objects.extend(syncer(provider));
    }
    objects
}

/// A Deployment of one replica of `container` in `provider`'s namespace, running as the ServiceAccount `name`, its
/// pods labelled `control-plane: <role>`.
fn deployment(provider: Provider, name: &str, role: &str, container: Value) -> Value {
    let selector = json!({"cluster.x-k8s.io/provider": provider.label(), "control-plane": role});
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": provider.namespace(), "labels": labels(provider)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {"serviceAccountName": name, "terminationGracePeriodSeconds": 10, "containers": [container]},
            },
        },
    })
}

/// A container's securityContext that Pod Security `restricted` admits: nest's image's own non-root user.
fn restricted() -> Value {
    json!({"allowPrivilegeEscalation": false, "runAsNonRoot": true, "runAsUser": 65532,
           "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}})
}

/// What the syncer reads and writes in the management cluster: the tenants' objects it copies down (in namespaces
/// it makes), what it copies up (nodes, volumes, events, shared classes), the control planes it serves and their
/// kubeconfig Secrets.
pub fn syncer_rules() -> Value {
    let all = json!(["get", "list", "watch", "create", "update", "patch", "delete"]);
    let read = json!(["get", "list", "watch"]);
    json!([
        {"apiGroups": [""], "resources": ["namespaces", "pods", "services", "configmaps", "secrets", "serviceaccounts",
                                          "endpoints", "persistentvolumeclaims"], "verbs": all},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        // Tenants' exec, attach and port-forward, proxied to their pods' copies (nest_syncer::kubelet::streams), which
        // it checks are the tenant's own. Cluster-wide, as every rule here: RBAC cannot name "the namespaces the
        // syncer made", and a RoleBinding per super namespace would need the syncer to hold `bind` and write
        // RoleBindings, more than this grants; the syncer already writes every pod of every namespace.
        // `get` too: a WebSocket opens them with a GET, which must be allowed both (upstream's
        // `AuthorizePodWebsocketUpgradeCreatePermission`).
        {"apiGroups": [""], "resources": ["pods/exec", "pods/attach", "pods/portforward"], "verbs": ["get", "create"]},
        // Tenants' ephemeral containers (`kubectl debug`), added to their pods' copies (nest_syncer's pod kind): a
        // pod's main endpoint does not change them. The super namespace's Pod Security judges each.
        {"apiGroups": [""], "resources": ["pods/ephemeralcontainers"], "verbs": ["patch", "update"]},
        // The tenant's container defaults in each of its namespaces (nest_syncer::compute).
        {"apiGroups": [""], "resources": ["limitranges"],
         "verbs": ["get", "list", "watch", "create", "update", "patch"]},
        {"apiGroups": [""], "resources": ["nodes", "persistentvolumes", "events"], "verbs": read},
        {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses"], "verbs": read},
        {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": read},
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": read},
        {"apiGroups": [CONTROL_PLANE_GROUP], "resources": ["nestedcontrolplanes"], "verbs": read},
        {"apiGroups": ["cluster.x-k8s.io"], "resources": ["clusters"], "verbs": read},
    ])
}

/// The syncer, with the control plane provider: its ServiceAccount, role and binding, and Deployment (`nest syncer`
/// with the pod's own account, its kubelet endpoints on the pod's address).
fn syncer(provider: Provider) -> Vec<Value> {
    let name = "capn-syncer";
    let mut objects = account(provider, name, name, syncer_rules()).to_vec();
    objects.push(deployment(
        provider,
        name,
        "syncer",
        json!({
            "name": "syncer",
            "image": nest_image(),
            "args": ["syncer", "--kubelet-address=$(POD_IP)"],
            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "1Gi"}},
            "securityContext": restricted(),
        }),
    ));
    objects
}

/// The ServiceAccount `name` in `provider`'s namespace, and the ClusterRole `role` of `rules` bound to it.
fn account(provider: Provider, name: &str, role: &str, rules: Value) -> [Value; 3] {
    let namespace = provider.namespace();
    [
        json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": namespace, "labels": labels(provider)},
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": role, "labels": labels(provider)},
            "rules": rules,
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": role, "labels": labels(provider)},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        }),
    ]
}

/// `cluster-template.yaml`: a Cluster with a NestedCluster and a NestedControlPlane, shaped by clusterctl variables.
pub fn cluster_template() -> String {
    format!(
        r#"# A nested cluster: clusterctl generate cluster NAME --infrastructure nested
# Variables: KUBERNETES_VERSION, NEST_FLAVOR (nest | kubernetes), ETCD_REPLICAS (1, 3 or 5),
# API_SERVER_REPLICAS, CONTROLLER_MANAGER_REPLICAS, SERVICE_CIDR.
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata:
  name: "${{CLUSTER_NAME}}"
  namespace: "${{NAMESPACE}}"
spec:
  clusterNetwork:
    services:
      cidrBlocks: ["${{SERVICE_CIDR:=10.96.0.0/12}}"]
  controlPlaneRef:
    apiGroup: {CONTROL_PLANE_GROUP}
    kind: NestedControlPlane
    name: "${{CLUSTER_NAME}}"
  infrastructureRef:
    apiGroup: {INFRASTRUCTURE_GROUP}
    kind: NestedCluster
    name: "${{CLUSTER_NAME}}"
---
apiVersion: {INFRASTRUCTURE_GROUP}/v1alpha1
kind: NestedCluster
metadata:
  name: "${{CLUSTER_NAME}}"
  namespace: "${{NAMESPACE}}"
spec: {{}}
---
apiVersion: {CONTROL_PLANE_GROUP}/v1alpha1
kind: NestedControlPlane
metadata:
  name: "${{CLUSTER_NAME}}"
  namespace: "${{NAMESPACE}}"
spec:
  version: "${{KUBERNETES_VERSION:={DEFAULT_VERSION}}}"
  flavor: "${{NEST_FLAVOR:=nest}}"
  components:
    etcd:
      replicas: ${{ETCD_REPLICAS:=1}}
    apiServer:
      replicas: ${{API_SERVER_REPLICAS:=1}}
    controllerManager:
      replicas: ${{CONTROLLER_MANAGER_REPLICAS:=1}}
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_hold_their_providers_crds_rbac_and_manager() {
        let control_plane = components(Provider::ControlPlane);
        let kinds: Vec<&str> = control_plane.iter().filter_map(|o| o["kind"].as_str()).collect();
        assert_eq!(kinds.iter().filter(|k| **k == "CustomResourceDefinition").count(), 4, "{kinds:?}");
        let aggregated = control_plane
            .iter()
            .find(|o| o["metadata"]["labels"]["cluster.x-k8s.io/aggregate-to-manager"] == "true")
            .expect("a role for the Cluster API manager");
        assert_eq!(aggregated["rules"][0]["apiGroups"][0], CONTROL_PLANE_GROUP);
        let deployment = control_plane.iter().find(|o| o["kind"] == "Deployment").unwrap();
        let args = &deployment["spec"]["template"]["spec"]["containers"][0]["args"];
        assert_eq!(args[1], "--controllers=control-plane");
        let infrastructure = components(Provider::Infrastructure);
        let crds: Vec<&str> = infrastructure
            .iter()
            .filter(|o| o["kind"] == "CustomResourceDefinition")
            .filter_map(|o| o["metadata"]["name"].as_str())
            .collect();
        assert_eq!(crds, ["nestedclusters.infrastructure.cluster.x-k8s.io"]);
    }

    #[test]
    fn the_template_takes_clusterctl_variables() {
        let template = cluster_template();
        for variable in ["${CLUSTER_NAME}", "${NAMESPACE}", "${ETCD_REPLICAS:=1}", "${NEST_FLAVOR:=nest}"] {
            assert!(template.contains(variable), "{variable} missing from {template}");
        }
        assert!(template.contains(&format!("${{KUBERNETES_VERSION:={DEFAULT_VERSION}}}")), "{template}");
    }
}
