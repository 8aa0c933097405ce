//! Issue 19's workload identity, tried on `nest up` through the demo tenant as a tenant's developer would: a pod
//! running the official Python client with its in-cluster configuration (image `python`, Debian's `python3` and
//! `python3-kubernetes` built by `scripts/test-images`, pulled through a mirror for `docker.io`) talks to its
//! *tenant's* API server as its ServiceAccount, with the token the tenant's ServiceAccount admission asked for and the
//! syncer brought down: RBAC in the tenant decides what it may read, deleting the pod ends the token, and the
//! management cluster never accepts it.

use std::path::Path;
use std::process::Command;

use crate::common::up::{demo_tenant, kubectl, stop, up_with};
use crate::common::{KUBECTL, eventually};

/// What the pod runs: every two seconds, what the client can list in its namespace, and its token (so that the test
/// can try it elsewhere).
const PROGRAM: &str = r#"
import time
from kubernetes import client, config
config.load_incluster_config()
api = client.CoreV1Api()
mount = "/var/run/secrets/kubernetes.io/serviceaccount"
namespace = open(mount + "/namespace").read()
while True:
    print("namespace", namespace, flush=True)
    for kind, call in [("configmaps", api.list_namespaced_config_map), ("secrets", api.list_namespaced_secret)]:
        try:
            names = sorted(item.metadata.name for item in call(namespace).items)
            print(kind, "listed", ",".join(names), flush=True)
        except client.ApiException as error:
            print(kind, "refused", error.status, flush=True)
    print("token", open(mount + "/token").read(), flush=True)
    time.sleep(2)
"#;

/// kubectl against the API server of `kubeconfig` with `token` as its only credential.
fn with_token(kubeconfig: &Path, cache: &Path, token: &str, args: &[&str]) -> std::process::Output {
    let config = std::fs::read_to_string(kubeconfig).unwrap();
    let server = config.lines().find_map(|l| l.trim().strip_prefix("server: ")).unwrap().to_string();
    Command::new(KUBECTL)
        .args(["--server", &server, "--insecure-skip-tls-verify", &format!("--token={token}")])
        .args(args)
        .env("KUBECONFIG", "/dev/null")
        .env("KUBECACHEDIR", cache)
        .output()
        .unwrap()
}

#[test]
fn a_tenant_pods_in_cluster_client_is_its_service_account_in_its_own_cluster_only() {
    let data = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let (_mirror, flags) = crate::common::registry::docker_io_mirror(cache.path());
    let (child, _) = up_with(data.path(), &[&flags[0], &flags[1]]);
    let admin = data.path().join("admin.kubeconfig");
    let demo = demo_tenant(data.path(), cache.path());
    let t = |args: &[&str]| {
        let out = kubectl(&demo, cache.path(), args);
        assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };

    // A ServiceAccount allowed to read ConfigMaps in its namespace, and nothing else.
    t(&["create", "serviceaccount", "reader"]);
    t(&["create", "role", "configmap-reader", "--verb=get,list", "--resource=configmaps"]);
    t(&["create", "rolebinding", "reader-configmaps", "--role=configmap-reader", "--serviceaccount=default:reader"]);
    t(&["create", "configmap", "settings", "--from-literal=color=blue"]);
    t(&["create", "secret", "generic", "hidden", "--from-literal=k=v"]);
    let manifest = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: client}}\nspec:\n  serviceAccountName: reader\n  containers:\n  \
         - name: main\n    image: python\n    command: [python3, '-c', {program:?}]\n",
        program = PROGRAM
    );
    let file = cache.path().join("client.yaml");
    std::fs::write(&file, manifest).unwrap();
    t(&["create", "-f", file.to_str().unwrap()]);

    // The tenant's ServiceAccount admission gave the pod its token volume.
    let pod: serde_json::Value = serde_json::from_str(&t(&["get", "pod", "client", "-o", "json"])).unwrap();
    let volumes = pod["spec"]["volumes"].as_array().unwrap();
    assert!(
        volumes.iter().any(|v| v["name"].as_str().is_some_and(|n| n.starts_with("kube-api-access-"))
            && v["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"] == 3607),
        "{volumes:?}"
    );

    // Nothing to read while the image is pulled.
    let logs = || {
        String::from_utf8_lossy(&kubectl(&demo, cache.path(), &["logs", "client", "--tail", "4"]).stdout).into_owned()
    };
    eventually(120, "the client listing its ConfigMaps", || logs().contains("configmaps listed"));
    let said = logs();
    assert!(said.contains("namespace default"), "the tenant's namespace: {said}");
    assert!(said.contains("configmaps listed kube-root-ca.crt,settings"), "{said}");
    assert!(said.contains("secrets refused 403"), "{said}");

    // A Role for Secrets: the same token now lists them.
    t(&["create", "role", "secret-reader", "--verb=list", "--resource=secrets"]);
    t(&["create", "rolebinding", "reader-secrets", "--role=secret-reader", "--serviceaccount=default:reader"]);
    eventually(30, "the client listing Secrets once a Role allows it", || logs().contains("secrets listed hidden"));

    // The token is the tenant's: the tenant's API server knows it as the ServiceAccount, bound to the pod; the
    // management cluster does not accept it.
    let said = logs();
    let token = said.lines().rev().find_map(|l| l.strip_prefix("token ")).unwrap().trim().to_string();
    let whoami = with_token(&demo, cache.path(), &token, &["auth", "whoami", "-o", "json"]);
    let whoami = String::from_utf8_lossy(&whoami.stdout);
    assert!(whoami.contains("system:serviceaccount:default:reader"), "{whoami}");
    let payload = token.split('.').nth(1).expect("a JWT");
    let claims: serde_json::Value = serde_json::from_slice(&nest_core::base64::decode_url(payload).unwrap()).unwrap();
    assert_eq!(claims["kubernetes.io"]["pod"]["name"], "client", "bound to the pod: {claims}");
    assert_eq!(claims["kubernetes.io"]["namespace"], "default", "{claims}");
    let refused = with_token(&admin, cache.path(), &token, &["get", "namespaces"]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && said.contains("Unauthorized"), "the management cluster took it: {said}");
    // Nothing of the management cluster is in the pod: its super pod mounts no token of the super cluster.
    let super_pods =
        kubectl(&admin, cache.path(), &["get", "pods", "-A", "-l", "tenancy.nest.dev/cluster", "-o", "json"]);
    let super_pods: serde_json::Value = serde_json::from_slice(&super_pods.stdout).unwrap();
    let super_pod = super_pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["metadata"]["name"] == "client")
        .expect("the client's super pod")
        .clone();
    assert_eq!(super_pod["spec"]["automountServiceAccountToken"], false);
    let sources: Vec<&serde_json::Value> = super_pod["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|v| v["projected"]["sources"].as_array().into_iter().flatten())
        .collect();
    assert!(sources.iter().all(|s| s.get("serviceAccountToken").is_none()), "a super token: {sources:?}");

    // Deleting the pod ends its token.
    t(&["delete", "pod", "client", "--wait=true", "--timeout=60s"]);
    eventually(30, "the token refused once its pod is gone", || {
        let out = with_token(&demo, cache.path(), &token, &["get", "configmaps"]);
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("Unauthorized")
    });
    // And its token Secret goes from the management cluster with the super pod.
    let namespace = super_pod["metadata"]["namespace"].as_str().unwrap();
    eventually(30, "the token Secret gone", || {
        let secrets = kubectl(&admin, cache.path(), &["get", "secrets", "-n", namespace, "-o", "name"]);
        !String::from_utf8_lossy(&secrets.stdout).contains("nest-token-")
    });
    assert!(stop(child).success(), "nest up exits cleanly on SIGTERM");
}
