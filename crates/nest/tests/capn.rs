//! The Cluster API provider's CRDs (`nest crds`), installed into a real `nest apiserver` with kubectl: they become
//! Established, carry what Cluster API and clusterctl look for, and their schemas accept good objects and refuse bad
//! ones with messages that name the field.

mod common;

use std::process::Command;

use common::{Server, backends};

fn crds() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_nest")).arg("crds").output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

const CONTROL_PLANE: &str = r#"
apiVersion: controlplane.cluster.x-k8s.io/v1alpha1
kind: NestedControlPlane
metadata: {name: demo, namespace: default, labels: {cluster.x-k8s.io/cluster-name: demo}}
spec:
  version: v1.33.0
  components:
    apiServer:
      replicas: 2
      patches:
      - {kind: StatefulSet, type: json, patch: [{op: add, path: /metadata/labels/extra, value: "yes"}]}
---
apiVersion: controlplane.cluster.x-k8s.io/v1alpha1
kind: NestedEtcd
metadata: {name: demo, namespace: default}
spec: {replicas: 3, version: v1.33.0, channel: stable}
---
apiVersion: infrastructure.cluster.x-k8s.io/v1alpha1
kind: NestedCluster
metadata: {name: demo, namespace: default}
spec: {}
---
apiVersion: cluster.x-k8s.io/v1beta2
kind: Cluster
metadata: {name: demo, namespace: default}
spec:
  clusterNetwork: {services: {cidrBlocks: [10.96.0.0/12]}}
  controlPlaneRef: {apiGroup: controlplane.cluster.x-k8s.io, kind: NestedControlPlane, name: demo}
  infrastructureRef: {apiGroup: infrastructure.cluster.x-k8s.io, kind: NestedCluster, name: demo}
"#;

#[test]
fn the_provider_crds_install_and_validate_their_objects() {
    for (backend, storage) in backends() {
        let server = Server::start(&storage);
        server.apply_manifest(&crds());
        for crd in [
            "clusters.cluster.x-k8s.io",
            "nestedclusters.infrastructure.cluster.x-k8s.io",
            "nestedcontrolplanes.controlplane.cluster.x-k8s.io",
            "nestedetcds.controlplane.cluster.x-k8s.io",
            "nestedapiservers.controlplane.cluster.x-k8s.io",
            "nestedcontrollermanagers.controlplane.cluster.x-k8s.io",
        ] {
            server.ok(&["wait", "--for=condition=Established", &format!("crd/{crd}"), "--timeout=30s"]);
        }
        let labels =
            server.json(&["get", "crd", "nestedcontrolplanes.controlplane.cluster.x-k8s.io"])["metadata"]["labels"]
                .clone();
        assert_eq!(labels["cluster.x-k8s.io/v1beta2"], "v1alpha1", "{backend}: {labels}");

        server.apply_manifest(CONTROL_PLANE);
        // Short names and the category find them.
        for (short, name) in [("ncp", "demo"), ("netcd", "demo"), ("nc", "demo"), ("cl", "demo")] {
            let found = server.ok(&["get", short, "-o", "jsonpath={.items[*].metadata.name}"]);
            assert_eq!(found, name, "{backend}: kubectl get {short}");
        }
        let everything = server.ok(&["get", "capn", "-o", "name"]);
        assert!(
            everything.contains("nestedcontrolplane.controlplane.cluster.x-k8s.io/demo"),
            "{backend}: {everything}"
        );
        assert!(everything.contains("nestedetcd.controlplane.cluster.x-k8s.io/demo"), "{backend}: {everything}");
        // Defaults and free-form patches are kept as written.
        let plane = server.json(&["get", "ncp", "demo"]);
        assert_eq!(plane["spec"]["flavor"], "nest", "{backend}: the default flavor");
        let patch = &plane["spec"]["components"]["apiServer"]["patches"][0]["patch"][0];
        assert_eq!(patch["path"], "/metadata/labels/extra", "{backend}: {plane}");

        // Bad specs are refused, naming the field.
        let refused = [
            ("version: v1.33.0", "version: \"1.33\"", "spec.version"),
            ("version: v1.33.0", "version: v1.33.0\n  flavor: openshift", "spec.flavor"),
        ];
        let plane_doc = CONTROL_PLANE.split("---").next().unwrap().replace("name: demo,", "name: bad,");
        for (from, to, field) in refused {
            let message = server.create_refused(&plane_doc.replace(from, to));
            assert!(message.contains(field), "{backend}: {message}");
        }
        let etcd = CONTROL_PLANE
            .split("---")
            .nth(1)
            .unwrap()
            .replace("name: demo", "name: big")
            .replace("replicas: 3", "replicas: 7");
        let message = server.create_refused(&etcd);
        assert!(message.contains("spec.replicas"), "{backend}: {message}");
    }
}
