//! Black-box tests: a real `nest apiserver` on 127.0.0.1:0, driven by the machine's kubectl (the versioned binary,
//! with a fresh KUBECACHEDIR), on every storage backend.
//!
//! kubectl's generator commands (`kubectl create namespace|configmap|deployment|…`, `expose`) send protobuf bodies;
//! manifests (`create -f`) and patches travel as JSON. Both are tested.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::common::fixtures::widget_crd;
use crate::common::{KUBECTL, Server, Storage, backends};
use serde_json::{Value, json};

const NAMESPACE_AND_CONFIGMAP: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: demo, labels: {app: web}}
data: {color: blue}
"#;

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: demo}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx}]}
"#;

#[test]
fn kubectl_version_and_api_resources() {
    for (backend, storage) in backends() {
        let server = Server::start(&storage);
        let version = server.ok(&["version", "-o", "json"]);
        let version: Value = serde_json::from_str(&version).unwrap();
        assert_eq!(version["serverVersion"]["minor"], "33", "{backend}");
        let resources = server.ok(&["api-resources"]);
        for expected in ["deployments", "deploy", "apps/v1", "customresourcedefinitions", "crd,crds"] {
            assert!(resources.contains(expected), "{backend}: api-resources lacks {expected}:\n{resources}");
        }
        let namespaced = server.ok(&["api-resources", "--namespaced=false", "-o", "name"]);
        assert!(namespaced.lines().any(|l| l == "namespaces") && !namespaced.lines().any(|l| l == "pods"), "{backend}");
    }
}

#[test]
fn kubectl_create_get_label_annotate_patch_describe_delete() {
    for (backend, storage) in backends() {
        let server = Server::start(&storage);
        let created = server.apply_manifest(NAMESPACE_AND_CONFIGMAP);
        assert!(
            created.contains("namespace/demo created") && created.contains("configmap/settings created"),
            "{created}"
        );

        let cm = server.json(&["-n", "demo", "get", "configmap", "settings"]);
        assert_eq!(cm["data"]["color"], "blue", "{backend}");
        assert!(!cm["metadata"]["uid"].as_str().unwrap().is_empty());
        let rv: u64 = cm["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
        assert_eq!(server.ok(&["-n", "demo", "get", "cm", "settings", "-o", "jsonpath={.data.color}"]), "blue");
        assert!(server.ok(&["-n", "demo", "get", "cm", "settings", "-o", "yaml"]).contains("color: blue"));

        server.ok(&["-n", "demo", "label", "cm", "settings", "tier=front"]);
        server.ok(&["-n", "demo", "annotate", "cm", "settings", "owner=team-a"]);
        assert_eq!(
            server.ok(&["-n", "demo", "get", "cm", "-l", "tier=front,app in (web)", "-o", "name"]).trim(),
            "configmap/settings"
        );
        assert_eq!(server.ok(&["-n", "demo", "get", "cm", "-l", "tier!=front", "-o", "name"]).trim(), "");

        server.ok(&["-n", "demo", "patch", "cm", "settings", "--type=merge", "-p", r#"{"data":{"size":"large"}}"#]);
        server.ok(&[
            "-n",
            "demo",
            "patch",
            "cm",
            "settings",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/data/color","value":"green"}]"#,
        ]);
        let cm = server.json(&["-n", "demo", "get", "cm", "settings"]);
        assert_eq!(
            (cm["data"]["color"].as_str(), cm["data"]["size"].as_str()),
            (Some("green"), Some("large")),
            "{backend}"
        );
        assert_eq!(cm["metadata"]["annotations"]["owner"], "team-a");
        let new_rv: u64 = cm["metadata"]["resourceVersion"].as_str().unwrap().parse().unwrap();
        assert!(new_rv > rv, "{backend}: resourceVersion grows with every write");

        let bad = server.kubectl(&[
            "-n",
            "demo",
            "patch",
            "cm",
            "settings",
            "--type=json",
            "-p",
            r#"[{"op":"test","path":"/data/color","value":"red"}]"#,
        ]);
        assert!(!bad.status.success(), "{backend}: a failed JSON Patch test must be refused");

        let described = server.ok(&["-n", "demo", "describe", "cm", "settings"]);
        assert!(described.contains("tier=front") && described.contains("owner: team-a"), "{described}");

        assert!(server.ok(&["-n", "demo", "delete", "cm", "settings"]).contains("deleted"));
        let gone = server.kubectl(&["-n", "demo", "get", "cm", "settings"]);
        assert!(String::from_utf8_lossy(&gone.stderr).contains("NotFound"), "{backend}");

        // Objects are refused in a namespace that does not exist.
        let missing =
            server.create_refused("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, namespace: nowhere}\n");
        assert!(missing.contains("namespaces \"nowhere\" not found"), "{backend}: {missing}");
    }
}

#[test]
fn kubectl_scale_and_wait_for_jsonpath() {
    for (backend, storage) in backends() {
        let server = Server::start(&storage);
        server.apply_manifest(NAMESPACE_AND_CONFIGMAP);
        server.apply_manifest(DEPLOYMENT);
        server.ok(&["-n", "demo", "scale", "deployment", "web", "--replicas=3"]);
        let out =
            server.ok(&["-n", "demo", "wait", "--for=jsonpath={.spec.replicas}=3", "deployment/web", "--timeout=20s"]);
        assert!(out.contains("condition met"), "{backend}: {out}");
        let deployment = server.json(&["-n", "demo", "get", "deployment", "web"]);
        assert_eq!(deployment["metadata"]["generation"], 2, "{backend}: a spec change bumps generation");
        assert_eq!(deployment["spec"]["strategy"]["type"], "RollingUpdate", "{backend}: workload defaults");

        server.apply_manifest("apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: demo}\nspec: {selector: {app: web}, ports: [{port: 80}]}\n");
        let ip: std::net::Ipv4Addr =
            server.ok(&["-n", "demo", "get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"]).parse().unwrap();
        assert!((96..112).contains(&ip.octets()[1]) && ip.octets()[0] == 10, "{backend}: {ip} is in 10.96.0.0/12");
    }
}

#[test]
fn kubectl_get_watch_sees_an_update() {
    for (backend, storage) in backends() {
        let server = Server::start(&storage);
        server.apply_manifest(NAMESPACE_AND_CONFIGMAP);
        let mut watch = Command::new(KUBECTL)
            .args(["-n", "demo", "get", "cm", "settings", "-w", "-o", "jsonpath={.data.color}{\"\\n\"}"])
            .env("KUBECONFIG", &server.kubeconfig)
            .env("KUBECACHEDIR", server.cache.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(watch.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().unwrap().unwrap(), "blue", "{backend}: the current state first");
        server.ok(&["-n", "demo", "patch", "cm", "settings", "--type=merge", "-p", r#"{"data":{"color":"red"}}"#]);
        assert_eq!(lines.next().unwrap().unwrap(), "red", "{backend}: then the update");
        let _ = watch.kill();
        let _ = watch.wait();
    }
}

#[test]
fn kubectl_delete_with_finalizers_and_wait_for_delete() {
    for (backend, storage) in backends() {
        let server = Server::start(&storage);
        server.apply_manifest(NAMESPACE_AND_CONFIGMAP);
        server.apply_manifest("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: held, namespace: demo, finalizers: [example.com/hold]}\n");
        server.ok(&["-n", "demo", "delete", "cm", "held", "--wait=false"]);
        let held = server.json(&["-n", "demo", "get", "cm", "held"]);
        assert!(held["metadata"]["deletionTimestamp"].is_string(), "{backend}: a finalizer keeps the object, marked");

        let wait = Command::new(KUBECTL)
            .args(["-n", "demo", "wait", "--for=delete", "cm/held", "--timeout=30s"])
            .env("KUBECONFIG", &server.kubeconfig)
            .env("KUBECACHEDIR", server.cache.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(500));
        server.ok(&[
            "-n",
            "demo",
            "patch",
            "cm",
            "held",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
        ]);
        let waited = wait.wait_with_output().unwrap();
        assert!(waited.status.success(), "{backend}: wait --for=delete: {}", String::from_utf8_lossy(&waited.stderr));

        // Orphan and foreground deletion leave the finalizers the garbage collector acts on.
        server.apply_manifest(DEPLOYMENT);
        server.ok(&["-n", "demo", "delete", "deployment", "web", "--cascade=orphan", "--wait=false"]);
        let orphaned = server.json(&["-n", "demo", "get", "deployment", "web"]);
        assert_eq!(orphaned["metadata"]["finalizers"], json!(["orphan"]), "{backend}");
        server.ok(&["-n", "demo", "delete", "cm", "settings", "--cascade=background"]);
        assert!(!server.kubectl(&["-n", "demo", "get", "cm", "settings"]).status.success());

        // Deleting the namespace marks it Terminating; new content is refused.
        server.ok(&["delete", "namespace", "demo", "--wait=false"]);
        assert_eq!(server.ok(&["get", "ns", "demo", "-o", "jsonpath={.status.phase}"]), "Terminating");
        let refused =
            server.create_refused("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: late, namespace: demo}\n");
        assert!(refused.contains("is being terminated"), "{backend}: {refused}");
    }
}

#[test]
fn unauthenticated_requests_get_401_but_health_and_version_answer() {
    let server = Server::start(&Storage::Embedded);
    let url = std::fs::read_to_string(&server.kubeconfig).unwrap();
    let url = url.lines().find_map(|l| l.trim().strip_prefix("server: ")).unwrap().to_string();
    let raw = |path: &str| {
        Command::new(KUBECTL)
            .args(["--server", &url, "--insecure-skip-tls-verify", "--token=not-a-valid-token", "get", "--raw", path])
            .env("KUBECONFIG", "/dev/null")
            .env("KUBECACHEDIR", server.cache.path())
            .output()
            .unwrap()
    };
    assert_eq!(String::from_utf8_lossy(&raw("/healthz").stdout), "ok");
    let version: Value = serde_json::from_slice(&raw("/version").stdout).unwrap();
    assert_eq!(version["minor"], "33");
    let denied = raw("/api/v1/namespaces");
    assert!(!denied.status.success());
    assert!(
        String::from_utf8_lossy(&denied.stderr).contains("Unauthorized"),
        "{}",
        String::from_utf8_lossy(&denied.stderr)
    );
    // Issue 18: an anonymous body over the size limit is refused for who sends it (401), before it is read (413).
    let big = server.cache.path().join("big.json");
    std::fs::write(&big, format!("{{\"data\": {{\"k\": \"{}\"}}}}", "x".repeat(4 << 20))).unwrap();
    let posted = Command::new(KUBECTL)
        .args(["--server", &url, "--insecure-skip-tls-verify", "--token=not-a-valid-token", "create", "--raw"])
        .args(["/api/v1/namespaces/default/configmaps", "-f"])
        .arg(&big)
        .env("KUBECONFIG", "/dev/null")
        .env("KUBECACHEDIR", server.cache.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&posted.stderr);
    assert!(!posted.status.success() && stderr.contains("Unauthorized"), "{stderr}");
    // And with no credential at all (curl: kubectl would ask for a user name), over HTTP/1.1 as most clients speak.
    let posted = Command::new("curl")
        .args(["-sk", "--http1.1", "-X", "POST", "-H", "Content-Type: application/json", "-w", "\n%{http_code}"])
        .arg("--data-binary")
        .arg(format!("@{}", big.display()))
        .arg(format!("{url}/api/v1/namespaces/default/configmaps"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&posted.stdout);
    assert!(stdout.ends_with("\n401") && stdout.contains(r#""reason":"Unauthorized""#), "{stdout}");
    assert!(server.ok(&["get", "--raw", "/healthz"]) == "ok", "the server keeps serving");
}

/// Widgets with a status and a scale subresource, a required `size`, a defaulted `mode` and a short name.
fn widget_crd_with_scale() -> String {
    let mut crd = widget_crd(json!({
        "subresources": {
            "status": {},
            "scale": {
                "specReplicasPath": ".spec.size",
                "statusReplicasPath": ".status.replicas",
                "labelSelectorPath": ".status.selector",
            },
        },
        "schema": {"openAPIV3Schema": {
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["size"],
                    "properties": {
                        "size": {"type": "integer", "minimum": 1},
                        "mode": {"type": "string", "enum": ["fast", "slow"], "default": "fast"},
                    },
                },
                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            },
        }},
    }));
    crd["spec"]["names"]["shortNames"] = json!(["wd"]);
    crd.to_string()
}

#[test]
fn kubectl_custom_resource_definitions_come_and_go() {
    for (backend, storage) in backends() {
        let server = Server::start(&storage);
        server.apply_manifest(&widget_crd_with_scale());
        let established =
            server.ok(&["wait", "--for=condition=Established", "crd/widgets.example.com", "--timeout=20s"]);
        assert!(established.contains("condition met"), "{backend}");
        let resources = server.ok(&["api-resources", "--api-group=example.com"]);
        assert!(resources.contains("widgets") && resources.contains("wd"), "{backend}: {resources}");

        // kubectl's default validation is strict (the server refuses the undeclared field); with `warn` the server
        // prunes it and warns.
        let w1 = "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w1, namespace: default}\nspec: {size: 3, color: red}\n";
        let strict = server.kubectl_with_input(&["create", "-f", "-"], Some(w1));
        assert!(String::from_utf8_lossy(&strict.stderr).contains("unknown field \"spec.color\""), "{backend}");
        let warned = server.kubectl_with_input(&["create", "--validate=warn", "-f", "-"], Some(w1));
        assert!(warned.status.success(), "{backend}: {}", String::from_utf8_lossy(&warned.stderr));
        assert!(String::from_utf8_lossy(&warned.stderr).contains("unknown field \"spec.color\""), "{backend}");
        assert_eq!(server.ok(&["get", "wd", "w1", "-o", "jsonpath={.spec.size}"]), "3", "{backend}");
        let w1 = server.json(&["get", "wd", "w1"]);
        assert_eq!(w1["spec"]["mode"], "fast", "{backend}: schema defaults apply");
        assert!(w1["spec"].get("color").is_none(), "{backend}: undeclared fields are pruned");
        let invalid = server.create_refused(
            "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w2, namespace: default}\nspec: {size: 0, mode: medium}\n",
        );
        assert!(invalid.contains("spec.size") && invalid.contains("spec.mode"), "{backend}: {invalid}");
        server.ok(&["patch", "widget", "w1", "--type=merge", "-p", r#"{"spec":{"size":4}}"#]);
        assert_eq!(server.ok(&["get", "widgets.example.com", "w1", "-o", "jsonpath={.spec.size}"]), "4");

        // The scale subresource reads and writes the paths the definition names, and the schema still applies.
        server.ok(&["scale", "widget", "w1", "--replicas=6"]);
        assert_eq!(server.ok(&["get", "widget", "w1", "-o", "jsonpath={.spec.size}"]), "6", "{backend}");
        let scale: Value = serde_json::from_str(&server.ok(&[
            "get",
            "--raw",
            "/apis/example.com/v1/namespaces/default/widgets/w1/scale",
        ]))
        .unwrap();
        assert_eq!((scale["kind"].as_str(), scale["spec"]["replicas"].as_i64()), (Some("Scale"), Some(6)));
        let below_minimum = server.kubectl(&["scale", "widget", "w1", "--replicas=0"]);
        let stderr = String::from_utf8_lossy(&below_minimum.stderr);
        assert!(!below_minimum.status.success() && stderr.contains("spec.size"), "{backend}: {stderr}");

        // Deleting the definition removes its objects and its endpoints.
        server.ok(&["delete", "crd", "widgets.example.com"]);
        let gone = server.kubectl(&["get", "widgets.example.com"]);
        assert!(!gone.status.success(), "{backend}: the resource is no longer served");
        server.apply_manifest(&widget_crd_with_scale());
        server.ok(&["wait", "--for=condition=Established", "crd/widgets.example.com", "--timeout=20s"]);
        assert_eq!(
            server.ok(&["get", "widgets", "-A", "-o", "name"]).trim(),
            "",
            "{backend}: old objects do not come back"
        );
    }
}

#[test]
fn a_restarted_server_keeps_its_objects_and_its_credentials() {
    let server = Server::start(&Storage::Embedded);
    server.apply_manifest(NAMESPACE_AND_CONFIGMAP);
    let before = server.json(&["-n", "demo", "get", "cm", "settings"]);
    let server = server.restart();
    let after = server.json(&["-n", "demo", "get", "cm", "settings"]);
    assert_eq!(after["metadata"]["uid"], before["metadata"]["uid"]);
    assert_eq!(after["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"]);
    assert_eq!(server.ok(&["get", "svc", "kubernetes", "-o", "jsonpath={.spec.clusterIP}"]), "10.96.0.1");
}

#[test]
fn a_new_server_starts_with_the_bootstrap_namespaces_and_the_kubernetes_service() {
    let server = Server::start(&Storage::Embedded);
    let namespaces = server.ok(&["get", "ns", "-o", "name"]);
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(namespaces.lines().any(|l| l == format!("namespace/{ns}")), "{namespaces}");
    }
    assert_eq!(server.ok(&["get", "svc", "kubernetes", "-o", "jsonpath={.spec.clusterIP}"]), "10.96.0.1");
}

/// Two API servers on one etcd (as in a highly available control plane) serve each other's CRDs and objects.
#[cfg(feature = "etcd")]
#[test]
fn two_servers_sharing_etcd_serve_each_others_custom_resources() {
    let url = std::env::var("NEST_TEST_ETCD").expect("NEST_TEST_ETCD (scripts/check sets it)");
    let storage = Storage::Etcd(url);
    let prefix = format!("/shared-{}-{}", std::process::id(), fastrand::u64(..));
    let a = Server::start_sharing(&storage, &prefix);
    let b = Server::start_sharing(&storage, &prefix);
    a.apply_manifest(&widget_crd_with_scale());
    a.ok(&["wait", "--for=condition=Established", "crd/widgets.example.com", "--timeout=20s"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !b.ok(&["api-resources", "--api-group=example.com"]).contains("widgets") {
        assert!(std::time::Instant::now() < deadline, "server b never served the CRD created through server a");
        std::thread::sleep(Duration::from_millis(100));
    }
    b.apply_manifest(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: shared, namespace: default}\nspec: {size: 2}\n",
    );
    assert_eq!(a.ok(&["get", "wd", "shared", "-o", "jsonpath={.spec.mode}"]), "fast");
}

#[test]
fn built_in_objects_are_decoded_against_their_schema() {
    for (backend, storage) in backends() {
        let server = Server::start(&storage);
        let refused = server.create_refused(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: three\n  \
             selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    \
             spec: {containers: [{name: web, image: nginx}]}\n",
        );
        assert!(refused.contains("BadRequest") && refused.contains("spec.replicas"), "{backend}: {refused}");

        // Fields the kind does not have: refused with fieldValidation=Strict, else a warning, and never stored.
        let body = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"a":"b"},"colour":"blue"}"#;
        let path = "/api/v1/namespaces/default/configmaps";
        let strict = server
            .kubectl_with_input(&["create", "--raw", &format!("{path}?fieldValidation=Strict"), "-f", "-"], Some(body));
        let stderr = String::from_utf8_lossy(&strict.stderr);
        assert!(!strict.status.success() && stderr.contains(r#"unknown field "colour""#), "{backend}: {stderr}");
        let warned = server.kubectl_with_input(&["create", "--raw", path, "-f", "-"], Some(body));
        let stderr = String::from_utf8_lossy(&warned.stderr);
        assert!(warned.status.success(), "{backend}: {stderr}");
        assert!(stderr.contains(r#"Warning: unknown field "colour""#), "{backend}: {stderr}");
        let stored = server.json(&["get", "configmap", "x"]);
        assert!(stored.get("colour").is_none() && stored["data"]["a"] == "b", "{backend}: {stored}");
    }
}

#[test]
fn kubectl_generator_commands_send_protobuf_and_are_understood() {
    for (backend, storage) in backends() {
        let server = Server::start(&storage);
        server.ok(&["create", "namespace", "gen"]);
        server.ok(&["-n", "gen", "create", "configmap", "settings", "--from-literal=color=blue"]);
        server.ok(&["-n", "gen", "create", "secret", "generic", "token", "--from-literal=password=hunter2"]);
        server.ok(&["-n", "gen", "create", "deployment", "web", "--image=nginx", "--replicas=0", "--port=8080"]);
        server.ok(&["-n", "gen", "expose", "deployment", "web", "--port=80", "--target-port=8080"]);
        server.ok(&["-n", "gen", "create", "serviceaccount", "robot"]);
        server.ok(&["-n", "gen", "create", "job", "once", "--image=busybox", "--", "true"]);
        server.ok(&["-n", "gen", "create", "ingress", "site", "--rule=example.com/=web:80"]);

        assert_eq!(server.ok(&["get", "namespace", "gen", "-o", "jsonpath={.status.phase}"]), "Active", "{backend}");
        let cm = server.json(&["-n", "gen", "get", "configmap", "settings"]);
        assert_eq!(cm["data"]["color"], "blue", "{backend}");
        let secret = server.json(&["-n", "gen", "get", "secret", "token"]);
        assert_eq!(
            (secret["type"].as_str(), secret["data"]["password"].as_str()),
            (Some("Opaque"), Some("aHVudGVyMg=="))
        );
        let deployment = server.json(&["-n", "gen", "get", "deployment", "web"]);
        assert_eq!(deployment["spec"]["replicas"], 0, "{backend}: an explicit zero survives");
        assert_eq!(deployment["spec"]["strategy"]["type"], "RollingUpdate", "{backend}: defaults still apply");
        let container = &deployment["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(
            (container["image"].as_str(), container["ports"][0]["containerPort"].as_i64()),
            (Some("nginx"), Some(8080))
        );
        let service = server.json(&["-n", "gen", "get", "service", "web"]);
        assert_eq!(service["spec"]["ports"][0]["targetPort"], 8080, "{backend}");
        assert_eq!(service["spec"]["selector"]["app"], "web");
        let job = server.json(&["-n", "gen", "get", "job", "once"]);
        assert_eq!(job["spec"]["template"]["spec"]["containers"][0]["command"][0], "true", "{backend}");
        let ingress = server.json(&["-n", "gen", "get", "ingress", "site"]);
        let rule = &ingress["spec"]["rules"][0];
        assert_eq!(
            (rule["host"].as_str(), rule["http"]["paths"][0]["backend"]["service"]["name"].as_str()),
            (Some("example.com"), Some("web"))
        );
    }
}

const PRIVILEGED_POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: escape, namespace: locked}
spec:
  hostPID: true
  containers: [{name: c, image: nginx, securityContext: {privileged: true}}]
"#;

#[test]
fn pod_security_labels_refuse_and_warn_as_kube_apiserver_does() {
    let server = Server::start(&Storage::Embedded);
    server.ok(&["create", "namespace", "locked"]);
    server.ok(&[
        "label",
        "namespace",
        "locked",
        "pod-security.kubernetes.io/enforce=baseline",
        "pod-security.kubernetes.io/warn=restricted",
    ]);
    let refused = server.create_refused(PRIVILEGED_POD);
    assert!(
        refused.contains(concat!(
            r#"pods "escape" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostPID=true), "#,
            r#"privileged (container "c" must not set securityContext.privileged=true)"#
        )),
        "{refused}"
    );
    // Workloads are warned about, not refused; kubectl prints the server's Warning header.
    let out = server.kubectl(&["-n", "locked", "create", "deployment", "web", "--image=nginx"]);
    assert!(out.status.success());
    let warning = String::from_utf8_lossy(&out.stderr);
    assert!(
        warning.contains(r#"Warning: would violate PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "nginx" must set securityContext.allowPrivilegeEscalation=false)"#),
        "{warning}"
    );
    // A pod that meets the restricted level is created without a word.
    server.ok(&["label", "namespace", "locked", "pod-security.kubernetes.io/enforce=restricted", "--overwrite"]);
    let out = server.kubectl_with_input(&["-n", "locked", "create", "-f", "-"], Some(common::RESTRICTED_POD));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("Warning"));
    // Labels must name a level.
    let out =
        server.kubectl(&["label", "namespace", "locked", "pod-security.kubernetes.io/enforce=strict", "--overwrite"]);
    let error = String::from_utf8_lossy(&out.stderr);
    assert!(
        error.contains(r#"metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "strict": must be one of privileged, baseline, restricted"#),
        "{error}"
    );
}

#[test]
fn pod_security_defaults_and_exemptions_come_from_flags() {
    let server =
        Server::start_with(&["--pod-security-enforce=baseline", "--pod-security-exempt-namespace=kube-system"]);
    server.ok(&["create", "namespace", "locked"]);
    let refused = server.create_refused(PRIVILEGED_POD);
    assert!(refused.contains(r#"violates PodSecurity "baseline:latest""#), "{refused}");
    server.apply_manifest(&PRIVILEGED_POD.replace("namespace: locked", "namespace: kube-system"));
    // A namespace can still choose for itself.
    server.ok(&["label", "namespace", "locked", "pod-security.kubernetes.io/enforce=privileged"]);
    server.apply_manifest(PRIVILEGED_POD);
}

/// A Node object is writable by whoever may patch nodes (a tenant's admin, in its own cluster): `kubectl logs` must
/// not make this server dial what it names. A port beyond 65535 is refused where it enters (422), never truncated
/// (65558 would be 22); a node with no port (0) serves no kubelet API.
#[test]
fn pod_logs_never_dial_a_port_no_kubelet_could_have_registered() {
    let server = Server::start(&Storage::Embedded);
    server.apply_manifest("apiVersion: v1\nkind: Node\nmetadata: {name: liar}\n");
    let status = |port: i64| {
        format!(
            r#"{{"status":{{"addresses":[{{"type":"InternalIP","address":"127.0.0.1"}}],"daemonEndpoints":{{"kubeletEndpoint":{{"Port":{port}}}}}}}}}"#
        )
    };
    let refused =
        server.kubectl(&["patch", "node", "liar", "--subresource=status", "--type=merge", "-p", &status(65558)]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success()
            && said.contains(
                "status.daemonEndpoints.kubeletEndpoint.Port: Invalid value: 65558: must be between 1 and 65535, inclusive"
            ),
        "{said}"
    );
    server.ok(&["patch", "node", "liar", "--subresource=status", "--type=merge", "-p", &status(0)]);
    server.apply_manifest(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: default}\nspec: {nodeName: liar, containers: [{name: c, image: nginx}]}\n",
    );
    let out = server.kubectl(&["logs", "p"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("node liar does not serve the kubelet API"), "{said}");
}

/// Names that are paths and paths that climb (issue 18), sent as a tenant's admin would send them: each is a 422
/// `Invalid` naming the field, with kube-apiserver's message (validation of 1.33: `ValidateDNS1123Label` for names,
/// `validateLocalDescendingPath` for `subPath` and item paths, `IsConfigMapKey` for keys), on every backend.
#[test]
fn names_and_paths_that_climb_are_422_with_upstreams_messages() {
    const LABEL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and \
                         must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used \
                         for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
    const KEY: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  \
                       or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: climber, namespace: default}\nspec:\n  containers:\n  \
               - name: ../../c\n    image: nest\n    volumeMounts: [{name: ../v, mountPath: /v, subPath: \
               ../../../../etc}]\n  volumes:\n  - {name: ../v, configMap: {name: c, items: [{key: k, path: \
               /etc/passwd}]}}\n  - {name: d, downwardAPI: {items: [{path: ../x, fieldRef: {fieldPath: \
               metadata.name}}]}}\n";
    let configmap = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: keys, namespace: default}\ndata: {/etc/passwd: x, '..': v}\n";
    let secret = "apiVersion: v1\nkind: Secret\nmetadata: {name: keys, namespace: default}\nstringData: {../s: x}\n";
    for (backend, storage) in backends() {
        let server = Server::start(&storage);
        // -v=6 has kubectl print each response's status line.
        let refused = |manifest: &str| {
            let out = server.kubectl_with_input(&["create", "-f", "-", "-v=6"], Some(manifest));
            assert!(!out.status.success(), "{backend}: accepted {manifest}");
            String::from_utf8_lossy(&out.stderr).into_owned()
        };
        let said = refused(pod);
        assert!(said.contains("422 Unprocessable Entity"), "{backend}: {said}");
        assert!(said.contains(r#"The Pod "climber" is invalid: "#), "{backend}: {said}");
        for expected in [
            format!(r#"spec.containers[0].name: Invalid value: "../../c": {LABEL}"#),
            format!(r#"spec.volumes[0].name: Invalid value: "../v": {LABEL}"#),
            r#"spec.containers[0].volumeMounts[0].subPath: Invalid value: "../../../../etc": must not contain '..'"#
                .into(),
            r#"spec.volumes[0].configMap.items[0].path: Invalid value: "/etc/passwd": must be a relative path"#.into(),
            r#"spec.volumes[1].downwardAPI.items[0].path: Invalid value: "../x": must not contain '..'"#.into(),
            r#"spec.volumes[1].downwardAPI.items[0].path: Invalid value: "../x": must not start with '..'"#.into(),
        ] {
            assert!(said.contains(&expected), "{backend}: {expected}\nnot in {said}");
        }
        let said = refused(configmap);
        assert!(said.contains("422 Unprocessable Entity"), "{backend}: {said}");
        for expected in [
            format!(r#"data[/etc/passwd]: Invalid value: "/etc/passwd": {KEY}"#),
            r#"data[..]: Invalid value: "..": must not be '..'"#.into(),
        ] {
            assert!(said.contains(&expected), "{backend}: {expected}\nnot in {said}");
        }
        let said = refused(secret);
        assert!(said.contains("422 Unprocessable Entity"), "{backend}: {said}");
        let expected = format!(r#"data[../s]: Invalid value: "../s": {KEY}"#);
        assert!(said.contains(&expected), "{backend}: {expected}\nnot in {said}");
        assert!(said.contains(r#"data[../s]: Invalid value: "../s": must not start with '..'"#), "{backend}: {said}");
        assert!(!server.kubectl(&["get", "pod", "climber"]).status.success(), "{backend}: the pod was stored");
    }
}

/// kubectl as a user of the token file, with the server's CA.
fn as_user(server: &Server, token: &str, args: &[&str]) -> std::process::Output {
    server.with_token(token, args)
}

/// A server on `storage` whose token file knows alice (in group team-a) and bob.
fn rbac_server(storage: &Storage) -> (Server, tempfile::NamedTempFile) {
    use std::io::Write as _;
    let mut tokens = tempfile::NamedTempFile::new().unwrap();
    writeln!(tokens, "alice-token,alice,1,\"team-a\"\nbob-token,bob,2,\"\"").unwrap();
    let server = Server::start_on(storage, &["--token-auth-file", tokens.path().to_str().unwrap()]);
    (server, tokens)
}

#[test]
fn rbac_bindings_decide_what_a_user_may_do_and_revoke_at_once() {
    for (_, storage) in backends() {
        rbac_bindings_decide_what_a_user_may_do_and_revoke_at_once_on(&storage);
    }
}

fn rbac_bindings_decide_what_a_user_may_do_and_revoke_at_once_on(storage: &Storage) {
    let (server, _tokens) = rbac_server(storage);
    for namespace in ["team", "other"] {
        server.ok(&["create", "namespace", namespace]);
        server.ok(&["-n", namespace, "create", "configmap", "settings", "--from-literal=k=v"]);
    }
    // Nothing bound: discovery works, reading does not.
    let out = as_user(&server, "alice-token", &["-n", "team", "get", "configmaps"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains(r#"configmaps is forbidden: User "alice" cannot list resource "configmaps" in API group "" in the namespace "team""#),
        "{said}"
    );
    // view in team: reads there, not elsewhere, and no writes.
    server.ok(&["-n", "team", "create", "rolebinding", "alice-view", "--clusterrole=view", "--user=alice"]);
    let out = as_user(&server, "alice-token", &["-n", "team", "get", "configmaps", "-o", "name"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "configmap/settings",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = as_user(&server, "alice-token", &["-n", "team", "get", "pods"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = as_user(&server, "alice-token", &["-n", "other", "get", "pods"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains(
            r#"pods is forbidden: User "alice" cannot list resource "pods" in API group "" in the namespace "other""#
        ),
        "{said}"
    );
    let out = as_user(&server, "alice-token", &["-n", "other", "get", "configmap", "settings"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains(r#"configmaps "settings" is forbidden: User "alice" cannot get resource "configmaps" in API group "" in the namespace "other""#),
        "{said}"
    );
    let out = as_user(&server, "alice-token", &["-n", "team", "delete", "configmap", "settings"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains(r#"cannot delete resource "configmaps""#));
    let out = as_user(&server, "alice-token", &["get", "nodes"]);
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains(r#"cannot list resource "nodes" in API group "" at the cluster scope"#)
    );
    // A group binding counts too; deleting the binding revokes at once.
    server.ok(&["-n", "other", "create", "rolebinding", "team-a-view", "--clusterrole=view", "--group=team-a"]);
    assert!(as_user(&server, "alice-token", &["-n", "other", "get", "configmap", "settings"]).status.success());
    server.ok(&["-n", "other", "delete", "rolebinding", "team-a-view"]);
    assert!(!as_user(&server, "alice-token", &["-n", "other", "get", "configmap", "settings"]).status.success());
    // Paths that are not resources: discovery for everyone, metrics not.
    assert!(as_user(&server, "bob-token", &["get", "--raw", "/api"]).status.success());
    let out = as_user(&server, "bob-token", &["get", "--raw", "/metrics"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains(r#"forbidden: User "bob" cannot get path "/metrics""#));
}

#[test]
fn a_user_may_grant_only_what_it_holds() {
    for (_, storage) in backends() {
        a_user_may_grant_only_what_it_holds_on(&storage);
    }
}

fn a_user_may_grant_only_what_it_holds_on(storage: &Storage) {
    let (server, _tokens) = rbac_server(storage);
    server.ok(&["create", "namespace", "team"]);
    server.ok(&["-n", "team", "create", "rolebinding", "alice-admin", "--clusterrole=admin", "--user=alice"]);
    // admin in team: alice may give bob view there (admin holds all of view)…
    let granted = as_user(
        &server,
        "alice-token",
        &["-n", "team", "create", "rolebinding", "bob-view", "--clusterrole=view", "--user=bob"],
    );
    assert!(granted.status.success(), "{}", String::from_utf8_lossy(&granted.stderr));
    // …but not cluster-admin, nor a Role with more than she holds.
    let out = as_user(
        &server,
        "alice-token",
        &["-n", "team", "create", "rolebinding", "bob-root", "--clusterrole=cluster-admin", "--user=bob"],
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("is attempting to grant RBAC permissions not currently held"),
        "{said}"
    );
    let out =
        as_user(&server, "alice-token", &["-n", "team", "create", "role", "nodes", "--verb=get", "--resource=nodes"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("is attempting to grant RBAC permissions not currently held"),
        "{said}"
    );
    let out =
        as_user(&server, "alice-token", &["-n", "team", "create", "role", "reader", "--verb=get", "--resource=pods"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Nor may she bind outside her namespace.
    let out = as_user(
        &server,
        "alice-token",
        &["create", "clusterrolebinding", "alice-root", "--clusterrole=cluster-admin", "--user=alice"],
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("forbidden"));
}

#[test]
fn kubectl_auth_can_i_whoami_and_as_answer_for_the_right_user() {
    for (_, storage) in backends() {
        kubectl_auth_can_i_whoami_and_as_answer_for_the_right_user_on(&storage);
    }
}

fn kubectl_auth_can_i_whoami_and_as_answer_for_the_right_user_on(storage: &Storage) {
    let (server, _tokens) = rbac_server(storage);
    server.ok(&["create", "namespace", "team"]);
    server.ok(&["-n", "team", "create", "rolebinding", "alice-view", "--clusterrole=view", "--user=alice"]);
    let can = |args: &[&str]| String::from_utf8_lossy(&as_user(&server, "alice-token", args).stdout).trim().to_string();
    assert_eq!(can(&["-n", "team", "auth", "can-i", "list", "pods"]), "yes");
    assert_eq!(can(&["-n", "team", "auth", "can-i", "delete", "pods"]), "no");
    assert_eq!(can(&["-n", "other", "auth", "can-i", "list", "pods"]), "no");
    assert_eq!(can(&["auth", "can-i", "get", "/metrics"]), "no");
    assert_eq!(can(&["auth", "can-i", "get", "/api"]), "yes");
    let listed = can(&["-n", "team", "auth", "can-i", "--list"]);
    let pods = listed.lines().find(|l| l.starts_with("pods ")).unwrap_or_else(|| panic!("{listed}"));
    assert!(pods.ends_with("[get list watch]"), "{pods}");
    let whoami = can(&["auth", "whoami"]);
    assert!(whoami.contains("alice") && whoami.contains("[team-a system:authenticated]"), "{whoami}");
    // The admin asks as alice: alice's answers, not the admin's.
    assert_eq!(server.ok(&["-n", "team", "auth", "can-i", "list", "pods", "--as=alice"]).trim(), "yes");
    // (`can-i` exits 1 for no.)
    let no = server.kubectl(&["-n", "team", "auth", "can-i", "delete", "pods", "--as=alice"]);
    assert_eq!((no.status.code(), String::from_utf8_lossy(&no.stdout).trim()), (Some(1), "no"));
    let out = server.kubectl(&["-n", "team", "delete", "configmap", "x", "--as=alice"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains(r#"User "alice" cannot delete resource "configmaps""#));
    assert!(server.ok(&["auth", "whoami", "--as=carol", "--as-group=devs"]).contains("[devs system:authenticated]"));
    // Alice may not act as anyone else.
    let out = as_user(&server, "alice-token", &["get", "pods", "--as=bob"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains(r#"users "bob" is forbidden: User "alice" cannot impersonate resource "users" in API group "" at the cluster scope"#),
        "{said}"
    );
}

/// What a create answers is what a GET right after returns (issue 20: a Service's create response had no `status`),
/// kind by kind, for a minimal object of each built-in kind a user creates; and so is an update's answer.
#[test]
fn create_and_update_answers_are_what_a_get_returns_right_after() {
    let server = Server::start(&Storage::Embedded);
    let pod_template = "{metadata: {labels: {app: a}}, spec: {containers: [{name: c, image: nest}]}}";
    let objects = [
        ("services", "web", "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {ports: [{port: 80}]}".to_string()),
        ("pods", "p", "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, image: nest}]}".into()),
        ("configmaps", "cm", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm}\ndata: {a: b}".into()),
        ("secrets", "s", "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {a: b}".into()),
        ("namespaces", "ns", "apiVersion: v1\nkind: Namespace\nmetadata: {name: ns}".into()),
        ("serviceaccounts", "sa", "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: sa}".into()),
        (
            "persistentvolumeclaims",
            "pvc",
            "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: pvc}\n\
             spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}"
                .into(),
        ),
        (
            "deployments",
            "d",
            format!("apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: d}}\nspec: {{selector: {{matchLabels: {{app: a}}}}, template: {pod_template}}}"),
        ),
        (
            "statefulsets",
            "st",
            format!("apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {{name: st}}\nspec: {{selector: {{matchLabels: {{app: a}}}}, template: {pod_template}}}"),
        ),
        (
            "daemonsets",
            "ds",
            format!("apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {{name: ds}}\nspec: {{selector: {{matchLabels: {{app: a}}}}, template: {pod_template}}}"),
        ),
        (
            "jobs",
            "j",
            "apiVersion: batch/v1\nkind: Job\nmetadata: {name: j}\n\
             spec: {template: {spec: {restartPolicy: Never, containers: [{name: c, image: nest}]}}}"
                .into(),
        ),
        (
            "cronjobs",
            "cj",
            "apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: cj}\nspec: {schedule: '* * * * *', \
             jobTemplate: {spec: {template: {spec: {restartPolicy: Never, containers: [{name: c, image: nest}]}}}}}"
                .into(),
        ),
        ("leases", "l", "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {name: l}".into()),
        (
            "roles",
            "r",
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {name: r}\nrules: []".into(),
        ),
        (
            "poddisruptionbudgets",
            "pdb",
            "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: pdb}\nspec: {minAvailable: 1}".into(),
        ),
        (
            "ingresses",
            "i",
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: i}\nspec: {defaultBackend: {service: {name: web, port: {number: 80}}}}".into(),
        ),
    ];
    for (plural, name, manifest) in &objects {
        let created = server.kubectl_with_input(&["create", "-f", "-", "-o", "json"], Some(manifest));
        assert!(created.status.success(), "{plural}: {}", String::from_utf8_lossy(&created.stderr));
        let created: Value = serde_json::from_slice(&created.stdout).unwrap();
        let read = server.json(&["get", plural, name]);
        // The status kube-apiserver 1.33's create answer has (Go encodes a status struct that nothing set).
        let upstream = match *plural {
            "services" | "ingresses" => json!({"loadBalancer": {}}),
            "pods" => json!({"phase": "Pending", "qosClass": "BestEffort"}),
            "namespaces" => json!({"phase": "Active"}),
            "persistentvolumeclaims" => json!({"phase": "Pending"}),
            "deployments" | "jobs" | "cronjobs" => json!({}),
            "statefulsets" => json!({"replicas": 0, "availableReplicas": 0}),
            "daemonsets" => json!({"currentNumberScheduled": 0, "numberMisscheduled": 0,
                                   "desiredNumberScheduled": 0, "numberReady": 0}),
            "poddisruptionbudgets" => json!({"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0,
                                             "expectedPods": 0}),
            _ => Value::Null,
        };
        assert_eq!(created["status"], upstream, "{plural}: the create answer's status");
        assert_eq!(created, read, "{plural}: the create answer differs from a GET right after");
        // (kubectl patch prints the server's answer; kubectl label -o prints the object it computed itself.)
        let patch = r#"{"metadata":{"labels":{"touched":"yes"}}}"#;
        let args = ["patch", plural, name, "--type", "merge", "-p", patch, "-o", "json", "--show-managed-fields"];
        let patched = server.kubectl(&args);
        assert!(patched.status.success(), "{plural}: {}", String::from_utf8_lossy(&patched.stderr));
        let patched: Value = serde_json::from_slice(&patched.stdout).unwrap();
        let read = server.json(&["get", plural, name, "--show-managed-fields"]);
        assert_eq!(patched, read, "{plural}: the update answer differs from a GET right after");
    }
}

/// Issue 19: the Priority and DefaultStorageClass admission plugins, as kube-apiserver runs them, on every backend.
#[test]
fn priority_classes_and_the_default_storage_class_are_admitted_as_upstream() {
    let pod = |name: &str, extra: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n{extra}  containers: \
             [{{name: c, image: nginx}}]\n"
        )
    };
    for (backend, storage) in backends() {
        let server = Server::start(&storage);
        let classes = server.ok(&["get", "priorityclasses", "-o", "name"]);
        for class in ["system-node-critical", "system-cluster-critical"] {
            assert!(classes.contains(class), "{backend}: {classes}");
        }
        let refused = server.create_refused(&pod("nameless", "  priorityClassName: nope\n"));
        assert!(
            refused.contains(r#"pods "nameless" is forbidden: no PriorityClass with name nope was found"#),
            "{backend}: {refused}"
        );
        server.apply_manifest(&pod("plain", ""));
        assert_eq!(server.json(&["get", "pod", "plain"])["spec"]["priority"], 0, "{backend}");
        server.apply_manifest(
            "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\nglobalDefault: true\n",
        );
        server.apply_manifest(&pod("defaulted", ""));
        let spec = server.json(&["get", "pod", "defaulted"])["spec"].clone();
        assert_eq!(
            (spec["priorityClassName"].as_str(), spec["priority"].as_i64()),
            (Some("high"), Some(1000)),
            "{backend}"
        );
        assert_eq!(spec["preemptionPolicy"], "PreemptLowerPriority");
        server.apply_manifest(&pod("critical", "  priorityClassName: system-node-critical\n"));
        assert_eq!(server.json(&["get", "pod", "critical"])["spec"]["priority"], 2_000_001_000, "{backend}");
        let refused = server.create_refused(&pod("forged", "  priority: 5\n"));
        assert!(
            refused.contains(
                "the integer value of priority (5) must not be provided in pod spec; priority admission controller \
                 computed 1000 from the given PriorityClass name"
            ),
            "{backend}: {refused}"
        );

        let claim = |name: &str, class: &str| {
            format!(
                "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {name}, namespace: default}}\nspec: \
                 {{accessModes: [ReadWriteOnce], resources: {{requests: {{storage: 1Gi}}}}{class}}}\n"
            )
        };
        server.apply_manifest(&claim("before", ""));
        assert!(server.json(&["get", "pvc", "before"])["spec"].get("storageClassName").is_none(), "{backend}");
        server.apply_manifest(
            "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: fast, annotations: \
             {storageclass.kubernetes.io/is-default-class: \"true\"}}\nprovisioner: example.com/fast\n",
        );
        server.apply_manifest(&claim("after", ""));
        assert_eq!(server.json(&["get", "pvc", "after"])["spec"]["storageClassName"], "fast", "{backend}");
        server.apply_manifest(&claim("classless", ", storageClassName: ''"));
        assert_eq!(server.json(&["get", "pvc", "classless"])["spec"]["storageClassName"], "", "{backend}");
    }
}

/// `kubectl get` of kinds whose columns were only NAME and AGE (issue 20), made with kubectl's own generators: the
/// headers and cells kube-apiserver 1.33's printers give.
#[test]
fn kubectl_get_prints_upstreams_columns_for_every_kind() {
    let server = Server::start(&Storage::Embedded);
    server.ok(&["create", "cronjob", "nightly", "--image=busybox", "--schedule=0 3 * * *"]);
    server.ok(&["create", "pdb", "web", "--selector=app=web", "--min-available=1"]);
    server.ok(&["create", "priorityclass", "high", "--value=1000", "--description=important"]);
    server.ok(&["create", "ingress", "web", "--rule=example.com/=web:80"]);
    server.ok(&["create", "rolebinding", "viewers", "--clusterrole=view", "--user=alice", "--group=devs"]);
    let table = |args: &[&str]| -> Vec<Vec<String>> {
        let out = server.ok(args);
        // Columns are separated by two or more spaces (cells such as `0 3 * * *` hold single ones).
        out.lines()
            .map(|l| l.split("  ").map(str::trim).filter(|c| !c.is_empty()).map(str::to_string).collect())
            .collect()
    };
    let without_age = |rows: Vec<Vec<String>>, age: usize| -> Vec<Vec<String>> {
        rows.into_iter()
            .map(|mut r| {
                r.remove(age);
                r
            })
            .collect()
    };
    assert_eq!(
        without_age(table(&["get", "cronjob"]), 6),
        [
            vec!["NAME", "SCHEDULE", "TIMEZONE", "SUSPEND", "ACTIVE", "LAST SCHEDULE"],
            vec!["nightly", "0 3 * * *", "<none>", "False", "0", "<none>"]
        ]
    );
    assert_eq!(
        without_age(table(&["get", "pdb"]), 4),
        [vec!["NAME", "MIN AVAILABLE", "MAX UNAVAILABLE", "ALLOWED DISRUPTIONS"], vec!["web", "1", "N/A", "0"]]
    );
    let classes = table(&["get", "priorityclass", "high"]);
    assert_eq!(classes[0], ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]);
    assert_eq!(
        (&classes[1][..3], &classes[1][4]),
        (&["high", "1000", "false"].map(String::from)[..], &"PreemptLowerPriority".to_string())
    );
    // No address yet: that cell is empty, so the row splits into one fewer.
    let ingresses = table(&["get", "ingress"]);
    assert_eq!(ingresses[0], ["NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"]);
    assert_eq!(ingresses[1][..4], ["web", "<none>", "example.com", "80"]);
    assert_eq!(
        table(&["get", "rolebinding", "viewers", "-o", "wide"])[0],
        ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"]
    );
    let row = &table(&["get", "rolebinding", "viewers", "-o", "wide"])[1];
    assert_eq!(
        (&row[0], &row[1], &row[3], &row[4]),
        (&"viewers".into(), &"ClusterRole/view".into(), &"alice".into(), &"devs".into())
    );
}

/// A 422 reads as `apierrors.NewInvalid` writes it: the kind qualified by its group, and several errors bracketed.
#[test]
fn an_invalid_object_is_a_422_worded_as_kube_apiservers() {
    let server = Server::start(&Storage::Embedded);
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "c"}},
                 "spec": {"containers": [{"name": "c", "image": ""}]}}}});
    let (code, answer) = server.post_raw("/apis/apps/v1/namespaces/default/deployments", &deployment);
    assert_eq!(code, 422);
    let labels = r#"Invalid value: map[string]string{\"a\":\"c\"}: `selector` does not match template `labels`"#;
    let expected = format!(
        r#"{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure","message":"Deployment.apps \"x\" is invalid: [spec.template.metadata.labels: {labels}, spec.template.spec.containers[0].image: Required value]","reason":"Invalid","details":{{"name":"x","group":"apps","kind":"Deployment","causes":[{{"reason":"FieldValueInvalid","message":"{labels}","field":"spec.template.metadata.labels"}},{{"reason":"FieldValueRequired","message":"Required value","field":"spec.template.spec.containers[0].image"}}]}},"code":422}}"#
    );
    assert_eq!(answer.trim_end(), expected);
    // A core kind is not qualified, and one error is not bracketed.
    let (code, answer) = server.post_raw(
        "/api/v1/namespaces/default/configmaps",
        &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "X"}}),
    );
    assert_eq!(code, 422);
    assert!(
        answer.contains(
            r#""message":"ConfigMap \"X\" is invalid: metadata.name: Invalid value: \"X\": a lowercase RFC 1123"#
        ),
        "{answer}"
    );
}
