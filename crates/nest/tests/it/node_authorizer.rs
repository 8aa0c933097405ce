//! The Node authorizer and NodeRestriction (issue 19), with kubectl 1.33 holding a node's credential as a kubelet
//! holds it (a client certificate for `system:node:<name>` in `system:nodes`, from `nest kubeconfig`): it reads the
//! Secrets and ConfigMaps its pods use and no others, asks for tokens only for its pods' ServiceAccounts, and writes
//! only its own Node, Lease and its pods' status.

use std::process::{Command, Output};

use crate::common::{KUBECTL, Server, backends};

const POD: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: NAME, namespace: team}
spec:
  nodeName: NODE
  serviceAccountName: ACCOUNT
  containers:
  - name: main
    image: nest
    env: [{name: K, valueFrom: {configMapKeyRef: {name: CONFIG, key: k}}}]
  volumes: [{name: s, secret: {secretName: SECRET}}]
"#;

#[test]
fn a_nodes_credential_reaches_only_what_its_pods_use_and_writes_only_its_own() {
    for (backend, storage) in backends() {
        let server = Server::start(&storage);
        let config = std::fs::read_to_string(&server.kubeconfig).unwrap();
        let url = config.lines().find_map(|l| l.trim().strip_prefix("server: ")).unwrap().to_string();
        let pki = server.data_dir().join("pki");
        let kubeconfig = server.cache.path().join("node.kubeconfig");
        let issued = Command::new(env!("CARGO_BIN_EXE_nest"))
            .args(["kubeconfig", "--ca-dir", pki.to_str().unwrap(), "--server", &url])
            .args(["--user", "system:node:n1", "--group", "system:nodes"])
            .output()
            .unwrap();
        assert!(issued.status.success(), "{}", String::from_utf8_lossy(&issued.stderr));
        std::fs::write(&kubeconfig, &issued.stdout).unwrap();
        // The same credential as files, for curl.
        let text = String::from_utf8_lossy(&issued.stdout).into_owned();
        let field = |key: &str| {
            let value = text.lines().find_map(|l| l.trim().strip_prefix(key)).unwrap().trim();
            let pem = Command::new("base64")
                .arg("-d")
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            use std::io::Write as _;
            pem.stdin.as_ref().unwrap().write_all(value.as_bytes()).unwrap();
            pem.wait_with_output().unwrap().stdout
        };
        let cert_files = (
            server.cache.path().join("ca.pem"),
            server.cache.path().join("node.pem"),
            server.cache.path().join("node-key.pem"),
        );
        std::fs::write(&cert_files.0, field("certificate-authority-data:")).unwrap();
        std::fs::write(&cert_files.1, field("client-certificate-data:")).unwrap();
        std::fs::write(&cert_files.2, field("client-key-data:")).unwrap();
        let as_node = |args: &[&str]| -> Output {
            Command::new(KUBECTL)
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(args)
                .env("KUBECACHEDIR", server.cache.path().join("node-cache"))
                .output()
                .unwrap()
        };
        let refused = |args: &[&str], words: &str| {
            let out = as_node(args);
            let said = String::from_utf8_lossy(&out.stderr).into_owned();
            assert!(!out.status.success() && said.contains(words), "{backend}: {args:?}: {said}");
        };
        let allowed = |args: &[&str]| {
            let out = as_node(args);
            assert!(out.status.success(), "{backend}: {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };

        server.ok(&["create", "namespace", "team"]);
        for node in ["n1", "n2"] {
            server.apply_manifest(&format!("apiVersion: v1\nkind: Node\nmetadata: {{name: {node}}}\n"));
        }
        for account in ["mine", "theirs"] {
            server.ok(&["-n", "team", "create", "serviceaccount", account]);
        }
        for name in ["mine", "theirs", "unused"] {
            server.ok(&["-n", "team", "create", "secret", "generic", name, "--from-literal=k=v"]);
            server.ok(&["-n", "team", "create", "configmap", name, "--from-literal=k=v"]);
        }
        for (pod, node, uses) in [("here", "n1", "mine"), ("there", "n2", "theirs")] {
            let manifest = POD
                .replace("NAME", pod)
                .replace("NODE", node)
                .replace("ACCOUNT", uses)
                .replace("CONFIG", uses)
                .replace("SECRET", uses);
            server.apply_manifest(&manifest);
        }

        // Reads: what its own pods use, nothing else.
        allowed(&["-n", "team", "get", "secret", "mine"]);
        allowed(&["-n", "team", "get", "configmap", "mine"]);
        let unrelated = "no relationship found between node 'n1' and this object";
        for name in ["theirs", "unused"] {
            refused(&["-n", "team", "get", "secret", name], unrelated);
            refused(&["-n", "team", "get", "configmap", name], unrelated);
        }
        refused(
            &["-n", "team", "get", "secrets"],
            r#"User "system:node:n1" cannot list resource "secrets" in API group "" in the namespace "team""#,
        );
        allowed(&["-n", "team", "create", "token", "mine", "--bound-object-kind=Pod", "--bound-object-name=here"]);
        refused(&["-n", "team", "create", "token", "theirs"], unrelated);
        // What every kubelet reads.
        allowed(&["get", "pods", "-A"]);
        allowed(&["get", "nodes"]);
        allowed(&["get", "services", "-A"]);

        // Writes: its own Node, Lease and pods' status only.
        allowed(&["label", "node", "n1", "zone=a"]);
        refused(&["label", "node", "n2", "zone=a"], r#"node "n1" is not allowed to modify node "n2""#);
        // A pod's status as a kubelet patches it: PATCH pods/<name>/status, with no GET first (kubectl's patch
        // reads the subresource first, which nodes may not).
        let patch_status = |pod: &str| -> (String, String) {
            let out = Command::new("curl")
                .args(["-s", "-o", "-", "-w", "\n%{http_code}", "--cacert", cert_files.0.to_str().unwrap()])
                .args(["--cert", cert_files.1.to_str().unwrap(), "--key", cert_files.2.to_str().unwrap()])
                .args(["-X", "PATCH", "-H", "Content-Type: application/merge-patch+json"])
                .args(["-d", r#"{"status":{"phase":"Running"}}"#])
                .arg(format!("{url}/api/v1/namespaces/team/pods/{pod}/status"))
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let (body, code) = text.rsplit_once('\n').unwrap_or_default();
            (code.to_string(), body.to_string())
        };
        assert_eq!(patch_status("here").0, "200", "{backend}: {:?}", patch_status("here"));
        let (code, body) = patch_status("there");
        assert_eq!(code, "403", "{backend}: {body}");
        assert!(
            body.contains(r#"node \"n1\" can only update pod status for pods with spec.nodeName set to itself"#),
            "{body}"
        );
        refused(
            &["-n", "team", "label", "pod", "here", "x=y"],
            r#"User "system:node:n1" cannot patch resource "pods""#,
        );
        refused(&["-n", "team", "delete", "pod", "there"], "can only delete pods with spec.nodeName set to itself");
        refused(&["-n", "team", "run", "planted", "--image=nest"], "can only create mirror pods");
        let lease = |name: &str| {
            format!(
                "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata: {{name: {name}, namespace: kube-node-lease}}\n\
                 spec: {{holderIdentity: {name}}}\n"
            )
        };
        for (name, fine) in [("n1", true), ("n2", false)] {
            let file = server.cache.path().join(format!("lease-{name}.yaml"));
            std::fs::write(&file, lease(name)).unwrap();
            let args = ["create", "--validate=false", "-f", file.to_str().unwrap()];
            if fine {
                allowed(&args);
            } else {
                refused(&args, "can only access node lease with the same name as the requesting node");
            }
        }
        allowed(&["-n", "team", "delete", "pod", "here", "--wait=false"]);
    }
}
