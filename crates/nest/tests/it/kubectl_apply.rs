//! kubectl's everyday editing commands, with validation on (kubectl's default), against a real `nest apiserver` on
//! every storage backend: `apply -f` (client-side: a strategic merge patch for built-in kinds, a merge patch for
//! custom resources), `diff`, `edit` through a scripted `EDITOR`, `explain` from `/openapi/v3`, and kubectl's
//! strict validation done by the server.

use crate::common;

use crate::common::fixtures::widget_crd;
use crate::common::{Server, backends, eventually};
use serde_json::json;

const FIRST_HEAD: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop, labels: {app: web, tier: front}}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 1}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        env: [{name: COLOR, value: blue}, {name: DEBUG, value: "1"}]
        ports: [{containerPort: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  selector: {app: web}
  ports: [{port: 80}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: shop}
data: {color: blue}
---
"#;

const FIRST_WIDGET: &str = r#"
apiVersion: example.com/v1
kind: Widget
metadata: {name: w1, namespace: shop}
spec: {size: 3, color: red}
"#;

/// The first file applied: a Deployment, a Service and a ConfigMap, the Widget CRD (with a documented schema, for
/// `kubectl explain`) and a Widget.
fn first_file() -> String {
    let crd = widget_crd(json!({"schema": {"openAPIV3Schema": {
        "type": "object",
        "properties": {"spec": {
            "type": "object",
            "description": "What the widget should be.",
            "properties": {
                "size": {"type": "integer", "description": "How big the widget is."},
                "color": {"type": "string"},
            },
        }},
    }}}));
    format!("{FIRST_HEAD}---\n{crd}\n---{FIRST_WIDGET}")
}

fn write(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn kubectl_apply_diff_edit_and_explain_with_validation_on() {
    for (backend, storage) in backends() {
        let server = Server::start(&storage);
        let dir = tempfile::tempdir().unwrap();
        let first = write(dir.path(), "first.yaml", &first_file());
        // As with kube-apiserver, the Widget can be applied once its CRD is served: a second apply of the same file
        // (what users do) completes it.
        eventually(30, "the whole file applied", || server.kubectl(&["apply", "-f", &first]).status.success());
        let widget = server.json(&["get", "widget", "w1", "-n", "shop"]);
        assert_eq!(widget["spec"]["size"], 3, "{backend}");

        // Someone else adds a label and an annotation: an apply that does not mention them keeps them.
        server.ok(&["label", "deployment", "web", "-n", "shop", "owner=ops"]);
        // The edited file drops one env var and one label; exactly those go.
        let edited = first_file().replace(", {name: DEBUG, value: \"1\"}", "").replace(", tier: front", "");
        let edited = write(dir.path(), "edited.yaml", &edited);
        // kubectl diff shows the pending change first (a dry-run patch), and changes nothing.
        let diff = server.kubectl(&["diff", "-f", &edited]);
        let shown = String::from_utf8_lossy(&diff.stdout);
        assert_eq!(diff.status.code(), Some(1), "{backend}: {shown}{}", String::from_utf8_lossy(&diff.stderr));
        assert!(shown.lines().any(|l| l.starts_with('-') && l.contains("name: DEBUG")), "{shown}");
        assert!(shown.contains("tier: front"), "{shown}");
        let deployment = server.json(&["get", "deployment", "web", "-n", "shop"]);
        assert_eq!(deployment["metadata"]["labels"]["tier"], "front", "diff changed nothing");

        server.ok(&["apply", "-f", &edited]);
        let deployment = server.json(&["get", "deployment", "web", "-n", "shop"]);
        let labels = &deployment["metadata"]["labels"];
        assert_eq!(labels, &serde_json::json!({"app": "web", "owner": "ops"}), "{backend}");
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["env"], serde_json::json!([{"name": "COLOR", "value": "blue"}]), "{backend}");
        assert_eq!(container["ports"][0]["containerPort"], 80);
        assert_eq!(deployment["spec"]["strategy"]["rollingUpdate"]["maxSurge"], 1);
        // Applying the same file again changes nothing.
        let again = server.ok(&["apply", "-f", &edited]);
        assert!(again.contains("deployment.apps/web unchanged"), "{again}");

        // Switching the strategy to Recreate clears rollingUpdate ($retainKeys), and a new image merges into the
        // container by name.
        let recreate = std::fs::read_to_string(&edited)
            .unwrap()
            .replace("strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 1}}", "strategy: {type: Recreate}")
            .replace("nginx:1.27", "nginx:1.28");
        let recreate = write(dir.path(), "recreate.yaml", &recreate);
        server.ok(&["apply", "-f", &recreate]);
        let deployment = server.json(&["get", "deployment", "web", "-n", "shop"]);
        assert_eq!(deployment["spec"]["strategy"], serde_json::json!({"type": "Recreate"}), "{backend}");
        assert_eq!(deployment["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:1.28");

        // kubectl's other strategic-merge users: set image, edit (through a scripted editor).
        server.ok(&["set", "image", "deployment/web", "-n", "shop", "web=nginx:1.29"]);
        let image = server.ok(&["get", "deployment", "web", "-n", "shop", "-o", "jsonpath={..containers[0].image}"]);
        assert_eq!(image, "nginx:1.29");
        let edit = std::process::Command::new(common::KUBECTL)
            .args(["edit", "configmap", "settings", "-n", "shop"])
            .env("KUBECONFIG", &server.kubeconfig)
            .env("KUBECACHEDIR", server.cache.path())
            .env("EDITOR", "sed -i s/color:\\ blue/color:\\ green/")
            .output()
            .unwrap();
        assert!(edit.status.success(), "{}", String::from_utf8_lossy(&edit.stderr));
        assert_eq!(server.ok(&["get", "configmap", "settings", "-n", "shop", "-o", "jsonpath={.data.color}"]), "green");
        // A custom resource is applied with a merge patch.
        let widget_edit = first_file().replace("spec: {size: 3, color: red}", "spec: {size: 5}");
        server.ok(&["apply", "-f", &write(dir.path(), "widget.yaml", &widget_edit)]);
        let widget = server.json(&["get", "widget", "w1", "-n", "shop"]);
        assert_eq!(widget["spec"], serde_json::json!({"size": 5}), "{backend}: the dropped field is removed");

        // Validation is the server's (fieldValidation=Strict): a misspelt field is refused, naming it.
        let typo = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: typo, namespace: shop}\ndatta: {a: b}\n";
        let refused = server.kubectl_with_input(&["create", "-f", "-"], Some(typo));
        assert!(!refused.status.success());
        assert!(String::from_utf8_lossy(&refused.stderr).contains("unknown field \"datta\""), "{backend}");
        let typo = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w2, namespace: shop}\nspec: {sise: 1}\n";
        let refused = server.kubectl_with_input(&["apply", "-f", "-"], Some(typo));
        assert!(String::from_utf8_lossy(&refused.stderr).contains("unknown field \"spec.sise\""), "{backend}");

        // explain reads the field documentation from /openapi/v3, for built-in kinds and CRDs alike.
        let explained = server.ok(&["explain", "deployment.spec.strategy"]);
        assert!(explained.contains("rollingUpdate") && explained.contains("Recreate"), "{explained}");
        let explained = server.ok(&["explain", "widget.spec"]);
        assert!(explained.contains("How big the widget is."), "{explained}");
    }
}

const TABLES: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {node-role.kubernetes.io/control-plane: ""}}
status:
  conditions: [{type: Ready, status: "True"}]
  nodeInfo: {kubeletVersion: v1.33.0, osImage: Debian, kernelVersion: "6.1", containerRuntimeVersion: nest://1,
    machineID: m, systemUUID: s, bootID: b, kubeProxyVersion: "", operatingSystem: linux, architecture: amd64}
  addresses: [{type: InternalIP, address: 10.0.0.7}]
---
apiVersion: v1
kind: Pod
metadata: {name: solo}
spec: {containers: [{name: c, image: nginx}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx}]}
---
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{port: 80}]
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Ready, type: string, jsonPath: '.status.conditions[?(@.type=="Ready")].status'}
    - {name: Color, type: string, jsonPath: .spec.color, priority: 1}
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}, color: {type: string}}}
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

/// The table `kubectl get` printed: the header and each row, split into whitespace-separated words.
fn printed(server: &Server, args: &[&str]) -> Vec<Vec<String>> {
    let text = server.ok(args);
    text.lines().map(|l| l.split_whitespace().map(str::to_string).collect()).collect()
}

#[test]
fn kubectl_get_prints_the_columns_kube_apiserver_prints() {
    for (backend, storage) in backends() {
        let server = Server::start(&storage);
        let dir = tempfile::tempdir().unwrap();
        let manifest = write(dir.path(), "tables.yaml", TABLES);
        eventually(30, "the objects created", || server.kubectl(&["apply", "-f", &manifest]).status.success());

        let pods = printed(&server, &["get", "pods", "-o", "wide"]);
        let header = "NAME READY STATUS RESTARTS AGE IP NODE NOMINATED NODE READINESS GATES";
        assert_eq!(pods[0].join(" "), header, "{backend}");
        assert_eq!(&pods[1][..4], ["solo", "0/1", "Pending", "0"], "{backend}: {pods:?}");
        assert_eq!(&pods[1][5..], ["<none>", "<none>", "<none>", "<none>"], "{backend}: {pods:?}");
        // Without -o wide, only the default columns.
        assert_eq!(printed(&server, &["get", "pods"])[0].join(" "), "NAME READY STATUS RESTARTS AGE");

        let deployments = printed(&server, &["get", "deploy"]);
        assert_eq!(deployments[0].join(" "), "NAME READY UP-TO-DATE AVAILABLE AGE", "{backend}");
        assert_eq!(&deployments[1][..4], ["web", "0/2", "0", "0"], "{backend}");
        let wide = printed(&server, &["get", "deploy", "-o", "wide"]);
        assert_eq!(&wide[1][5..], ["web", "nginx", "app=web"], "{backend}");

        let services = printed(&server, &["get", "svc", "web"]);
        assert_eq!(services[0].join(" "), "NAME TYPE CLUSTER-IP EXTERNAL-IP PORT(S) AGE", "{backend}");
        let address = server.ok(&["get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"]);
        assert_eq!(&services[1][..5], ["web", "ClusterIP", address.as_str(), "<none>", "80/TCP"], "{backend}");

        let nodes = printed(&server, &["get", "nodes", "-o", "wide"]);
        assert_eq!(&nodes[0][..7], ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP", "EXTERNAL-IP"]);
        assert_eq!(&nodes[1][..3], ["n1", "Ready", "control-plane"], "{backend}: {nodes:?}");
        assert_eq!(&nodes[1][4..6], ["v1.33.0", "10.0.0.7"], "{backend}: {nodes:?}");

        // A custom resource's printer columns, the wide one only with -o wide.
        let gadget = "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g1}\nspec: {size: 7, color: teal}\n";
        eventually(30, "the Gadget created", || {
            server.kubectl_with_input(&["apply", "-f", "-"], Some(gadget)).status.success()
        });
        let gadgets = printed(&server, &["get", "gadgets"]);
        assert_eq!(gadgets, [vec!["NAME", "SIZE", "READY"], vec!["g1", "7"]], "{backend}: a missing value is blank");
        let status = r#"{"status":{"conditions":[{"type":"Ready","status":"True"}]}}"#;
        server.ok(&["patch", "gadget", "g1", "--subresource=status", "--type=merge", "-p", status]);
        let gadgets = printed(&server, &["get", "gadgets", "-o", "wide"]);
        assert_eq!(gadgets, [vec!["NAME", "SIZE", "READY", "COLOR"], vec!["g1", "7", "True", "teal"]], "{backend}");
        // -A adds the namespace from each row's metadata; --show-labels reads it too.
        let all = printed(&server, &["get", "deploy", "-A", "--show-labels"]);
        assert_eq!((all[0][0].as_str(), all[1][0].as_str()), ("NAMESPACE", "default"), "{backend}");
        assert_eq!(all[1].last().map(String::as_str), Some("<none>"), "{backend}: {all:?}");
    }
}

/// The manager entries of an object's managedFields: `(manager, operation, fieldsV1)`.
fn managers(object: &serde_json::Value) -> Vec<(String, String, serde_json::Value)> {
    let entries = object["metadata"]["managedFields"].as_array().cloned().unwrap_or_default();
    entries
        .iter()
        .map(|e| {
            let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_string();
            (text(&e["manager"]), text(&e["operation"]), e["fieldsV1"].clone())
        })
        .collect()
}

#[test]
fn kubectl_apply_server_side_conflicts_force_and_the_move_from_client_side() {
    for (backend, storage) in backends() {
        let server = Server::start(&storage);
        let dir = tempfile::tempdir().unwrap();
        let first = write(dir.path(), "first.yaml", &first_file());
        eventually(30, "the whole file applied server-side", || {
            server.kubectl(&["apply", "--server-side", "-f", &first]).status.success()
        });
        let deployment = server.json(&["get", "deployment", "web", "-n", "shop", "--show-managed-fields"]);
        let entries = managers(&deployment);
        let (manager, operation, fields) = &entries[0];
        assert_eq!((manager.as_str(), operation.as_str()), ("kubectl", "Apply"), "{backend}: {entries:?}");
        assert_eq!(fields["f:spec"]["f:replicas"], serde_json::json!({}));
        let container = &fields["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"web\"}"];
        assert!(container["f:env"].get("k:{\"name\":\"DEBUG\"}").is_some(), "{backend}: {fields}");

        // A second manager changes one field: applying the old value conflicts, naming it; forcing wins.
        server.ok(&[
            "patch",
            "deployment",
            "web",
            "-n",
            "shop",
            "--type=merge",
            "-p",
            r#"{"spec":{"replicas":3}}"#,
            "--field-manager=ops",
        ]);
        let conflict = server.kubectl(&["apply", "--server-side", "-f", &first]);
        let stderr = String::from_utf8_lossy(&conflict.stderr);
        assert!(!conflict.status.success(), "{backend}");
        assert!(stderr.contains("conflict with \"ops\"") && stderr.contains(".spec.replicas"), "{backend}: {stderr}");
        assert_eq!(server.ok(&["get", "deployment", "web", "-n", "shop", "-o", "jsonpath={.spec.replicas}"]), "3");
        server.ok(&["apply", "--server-side", "--force-conflicts", "-f", &first]);
        let deployment = server.json(&["get", "deployment", "web", "-n", "shop", "--show-managed-fields"]);
        assert_eq!(deployment["spec"]["replicas"], 1, "{backend}");
        assert!(managers(&deployment).iter().all(|(m, _, _)| m != "ops"), "{backend}: ops lost its only field");

        // Fields no longer applied are removed, unless another manager owns them.
        server.ok(&["label", "deployment", "web", "-n", "shop", "owner=ops"]);
        let edited = first_file().replace(", {name: DEBUG, value: \"1\"}", "").replace(", tier: front", "");
        server.ok(&["apply", "--server-side", "-f", &write(dir.path(), "edited.yaml", &edited)]);
        let deployment = server.json(&["get", "deployment", "web", "-n", "shop"]);
        assert_eq!(deployment["metadata"]["labels"], serde_json::json!({"app": "web", "owner": "ops"}), "{backend}");
        let env = &deployment["spec"]["template"]["spec"]["containers"][0]["env"];
        assert_eq!(env, &serde_json::json!([{"name": "COLOR", "value": "blue"}]), "{backend}");
        // The same for a custom resource.
        let widget = first_file().replace("spec: {size: 3, color: red}", "spec: {size: 4}");
        server.ok(&["apply", "--server-side", "-f", &write(dir.path(), "widget.yaml", &widget)]);
        let w1 = server.json(&["get", "widget", "w1", "-n", "shop"]);
        assert_eq!(w1["spec"], serde_json::json!({"size": 4}), "{backend}");

        // From client-side to server-side apply: kubectl's upgrade takes over what it applied client-side without
        // conflicts.
        let config = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: moved, namespace: shop}\ndata: {a: \"1\"}\n";
        server.ok(&["apply", "-f", &write(dir.path(), "moved.yaml", config)]);
        let changed = config.replace("a: \"1\"", "a: \"2\"");
        server.ok(&["apply", "--server-side", "-f", &write(dir.path(), "moved2.yaml", &changed)]);
        let moved = server.json(&["get", "configmap", "moved", "-n", "shop", "--show-managed-fields"]);
        assert_eq!(moved["data"]["a"], "2", "{backend}");
        assert!(managers(&moved).iter().any(|(m, op, _)| m == "kubectl" && op == "Apply"), "{backend}: {moved}");
    }
}
