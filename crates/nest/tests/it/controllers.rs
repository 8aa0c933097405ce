//! `nest controller-manager` against a real `nest apiserver`, driven with kubectl: namespaces emptied and finalized,
//! every namespace's `default` ServiceAccount and `kube-root-ca.crt`, and leader election between two instances.

use crate::common::fixtures::{open_schema, widget_crd};
use crate::common::{ControllerManager, Server, backends, eventually};

const CONTENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: doomed}
spec:
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: doomed}
spec: {selector: {app: web}, ports: [{port: 80}]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: held, namespace: doomed, finalizers: [example.com/hold]}
---
apiVersion: example.com/v1
kind: Widget
metadata: {name: w, namespace: doomed}
spec: {size: 1}
"#;

#[test]
fn a_deleted_namespace_is_emptied_then_removed() {
    for (backend, storage) in backends() {
        let server = Server::start(&storage);
        let _cm = ControllerManager::start(&server, "only", 15);
        server.apply_manifest(&widget_crd(open_schema()).to_string());
        server.ok(&["wait", "--for=condition=Established", "crd/widgets.example.com", "--timeout=20s"]);
        server.ok(&["create", "namespace", "doomed"]);
        server.apply_manifest(CONTENT);
        server.ok(&["delete", "namespace", "doomed", "--wait=false"]);

        // Everything goes but the ConfigMap its finalizer holds, and the namespace waits for it.
        let names = |kinds: &str| server.ok(&["-n", "doomed", "get", kinds, "-o", "name"]);
        eventually(20, "the namespace's objects to be deleted", || {
            names("deployments,services,widgets,serviceaccounts").trim().is_empty()
        });
        assert_eq!(names("configmaps").trim(), "configmap/held", "{backend}");
        assert_eq!(server.ok(&["get", "namespace", "doomed", "-o", "jsonpath={.status.phase}"]), "Terminating");

        server.ok(&[
            "-n",
            "doomed",
            "patch",
            "configmap",
            "held",
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ]);
        eventually(20, "the namespace to be removed", || {
            !server.kubectl(&["get", "namespace", "doomed"]).status.success()
        });
    }
}

#[test]
fn every_namespace_gets_a_default_service_account_and_the_root_ca() {
    for (backend, storage) in backends() {
        let server = Server::start(&storage);
        let _cm = ControllerManager::start(&server, "only", 15);
        server.ok(&["create", "namespace", "fresh"]);
        eventually(20, "the default ServiceAccount", || {
            server.kubectl(&["-n", "fresh", "get", "serviceaccount", "default"]).status.success()
        });
        let ca = server.ok(&["-n", "fresh", "get", "configmap", "kube-root-ca.crt", "-o", "jsonpath={.data.ca\\.crt}"]);
        assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"), "{backend}: {ca}");
        // Namespaces that existed before the controllers started get them too.
        assert!(server.kubectl(&["-n", "kube-system", "get", "serviceaccount", "default"]).status.success());

        server.ok(&["-n", "fresh", "delete", "serviceaccount", "default"]);
        server.ok(&[
            "-n",
            "fresh",
            "patch",
            "configmap",
            "kube-root-ca.crt",
            "--type=merge",
            "-p",
            r#"{"data":{"ca.crt":"forged"}}"#,
        ]);
        eventually(20, "the ServiceAccount to come back and the CA to be restored", || {
            server.kubectl(&["-n", "fresh", "get", "serviceaccount", "default"]).status.success()
                && server
                    .ok(&["-n", "fresh", "get", "configmap", "kube-root-ca.crt", "-o", "jsonpath={.data.ca\\.crt}"])
                    .starts_with("-----BEGIN")
        });
    }
}

#[test]
fn only_the_lease_holder_acts_and_killing_it_hands_over() {
    let (_, storage) = backends().remove(0);
    let server = Server::start(&storage);
    let mut first = ControllerManager::start(&server, "first", 3);
    eventually(20, "the first instance to lead", || first.is_leading());
    let second = ControllerManager::start(&server, "second", 3);
    let holder = || {
        server.ok(&[
            "-n",
            "kube-system",
            "get",
            "lease",
            "nest-controller-manager",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ])
    };
    std::thread::sleep(std::time::Duration::from_secs(4));
    assert_eq!(holder(), "first");
    assert!(!second.is_leading(), "two leaders: {}", second.log());

    first.kill();
    eventually(20, "the second instance to take over", || second.is_leading());
    assert_eq!(holder(), "second");
    // And it acts.
    server.ok(&["create", "namespace", "after"]);
    eventually(20, "the new leader to create the default ServiceAccount", || {
        server.kubectl(&["-n", "after", "get", "serviceaccount", "default"]).status.success()
    });
}
