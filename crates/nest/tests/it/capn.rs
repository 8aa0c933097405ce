//! The Cluster API provider's CRDs (`nest crds`), installed into a real `nest apiserver` with kubectl: they become
//! Established, carry what Cluster API and clusterctl look for, and their schemas accept good objects and refuse bad
//! ones with messages that name the field.

use crate::common;

use std::process::Command;

use crate::common::{Server, backends};

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

/// The golden manifests of both flavors (`crates/nest-capn/tests/golden`, which the golden tests hold equal to what
/// the packages render) are accepted by an API server's validation: `kubectl apply --dry-run=server` creates nothing
/// and refuses a broken one.
#[test]
fn both_flavors_render_manifests_an_api_server_accepts() {
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../nest-capn/tests/golden");
    let server = Server::start(&common::Storage::Embedded);
    server.ok(&["create", "namespace", "tenants"]);
    for flavor in ["nest", "kubernetes"] {
        let file = golden.join(format!("{flavor}.yaml")).display().to_string();
        let out = server.ok(&["apply", "--dry-run=server", "-f", &file]);
        assert!(out.contains("statefulset.apps/") && out.contains("(server dry run)"), "{flavor}: {out}");
    }
    let left = server.ok(&["get", "statefulsets,services", "-n", "tenants", "-o", "name"]);
    assert!(left.trim().is_empty(), "a dry run created {left}");
    let manifests = std::fs::read_to_string(golden.join("kubernetes.yaml")).unwrap();
    let broken = manifests.replacen("replicas: 3", "replicas: -3", 1);
    let out = server.kubectl_with_input(&["apply", "--dry-run=server", "-f", "-"], Some(&broken));
    assert!(!out.status.success(), "a StatefulSet with -3 replicas passed");
    assert!(String::from_utf8_lossy(&out.stderr).contains("replicas"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `nest clusterctl DIR` writes the provider as clusterctl installs it; an API server accepts every object of both
/// components files and of the cluster template (with clusterctl's variables filled in), in a server-side dry run.
#[test]
fn the_clusterctl_package_is_accepted_by_an_api_server() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_nest")).args(["clusterctl"]).arg(dir.path()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let release = format!("v{}", env!("CARGO_PKG_VERSION"));
    let infrastructure = dir.path().join("infrastructure-nested").join(&release);
    let control_plane = dir.path().join("control-plane-nested").join(&release);
    let config = std::fs::read_to_string(dir.path().join("clusterctl.yaml")).unwrap();
    assert!(
        config.contains("type: InfrastructureProvider") && config.contains("type: ControlPlaneProvider"),
        "{config}"
    );
    let metadata = std::fs::read_to_string(control_plane.join("metadata.yaml")).unwrap();
    assert!(metadata.contains("contract: v1beta2"), "{metadata}");

    let server = Server::start(&common::Storage::Embedded);
    for namespace in ["capn-system", "capn-control-plane-system", "tenants"] {
        server.ok(&["create", "namespace", namespace]);
    }
    for (file, namespace) in [
        (infrastructure.join("infrastructure-components.yaml"), "capn-system"),
        (control_plane.join("control-plane-components.yaml"), "capn-control-plane-system"),
    ] {
        // The provider's namespace exists already (created above: a dry run cannot create what the rest needs).
        let text = std::fs::read_to_string(&file).unwrap();
        let (namespaces, rest): (Vec<&str>, Vec<&str>) =
            text.split("\n---\n").partition(|d| d.contains("kind: Namespace\n"));
        assert_eq!(namespaces.len(), 1, "{}", file.display());
        assert!(namespaces[0].lines().any(|l| l.trim() == format!("name: {namespace}")), "{}", namespaces[0]);
        let manifest = rest.join("\n---\n");
        let out = server.kubectl_with_input(&["create", "--dry-run=server", "-f", "-"], Some(&manifest));
        let created = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}: {}", file.display(), String::from_utf8_lossy(&out.stderr));
        for kind in ["customresourcedefinition", "clusterrole", "clusterrolebinding", "serviceaccount", "deployment"] {
            assert!(created.lines().any(|l| l.starts_with(kind)), "{}: no {kind} in {created}", file.display());
        }
    }
    assert!(server.ok(&["get", "deployments", "-A", "-o", "name"]).trim().is_empty(), "the dry run created objects");

    // The template, as `clusterctl generate cluster t1 --target-namespace tenants` fills it in.
    server.apply_manifest(&crds());
    let template = std::fs::read_to_string(infrastructure.join("cluster-template.yaml")).unwrap();
    assert!(template.contains("${KUBERNETES_VERSION:="), "{template}");
    let filled = fill(&template, &[("CLUSTER_NAME", "t1"), ("NAMESPACE", "tenants"), ("ETCD_REPLICAS", "3")]);
    let out = server.kubectl_with_input(&["create", "--dry-run=server", "-f", "-"], Some(&filled));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}\n{filled}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout.matches("(server dry run)").count(), 3, "{stdout}");
    // A value the CRD's schema refuses is caught.
    let bad = fill(&template, &[("CLUSTER_NAME", "t2"), ("NAMESPACE", "tenants"), ("ETCD_REPLICAS", "9")]);
    let out = server.kubectl_with_input(&["create", "--dry-run=server", "-f", "-"], Some(&bad));
    assert!(!out.status.success(), "9 etcd members passed");
}

/// clusterctl's variable syntax: `${NAME}` and `${NAME:=default}`.
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}').unwrap() + start;
        let expression = &rest[start + 2..end];
        let (name, default) = expression.split_once(":=").map_or((expression, None), |(n, d)| (n, Some(d)));
        let value = values.iter().find(|(n, _)| *n == name).map(|(_, v)| *v).or(default);
        out.push_str(value.unwrap_or_else(|| panic!("no value for {name}")));
        rest = &rest[end + 1..];
    }
    out + rest
}
