//! Issue 19, least privilege: every component of `nest up` and of a tenant control plane is someone of its own, and
//! none but the admin kubeconfigs is in `system:masters`. Seen from the management API server's audit log of a run
//! (`nest up --audit-log-path --audit-policy-file`), and from the certificates of the kubeconfigs a tenant's
//! components hold; and the syncer is shown to act in the tenant as `nest:syncer`, by what stops when that
//! identity's binding goes.
//!
//! Its own test binary: `nest up`'s node has fixed addresses, so no other `nest up` may run beside it.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use crate::common::eventually;
use crate::common::up::{demo_tenant, kubectl, stop, up_with};

/// The user and groups of the client certificate in a kubeconfig's text.
fn certificate_user(kubeconfig: &str) -> (String, Vec<String>) {
    let data = kubeconfig.lines().find_map(|l| l.trim().strip_prefix("client-certificate-data:")).unwrap().trim();
    let pem = nest_core::base64::decode_text(data).unwrap();
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = nest_core::base64::decode(&body).unwrap();
    let user = nest_apiserver::auth::user_from_certificate(&der).expect("a client certificate");
    (user.name, user.groups.into_iter().filter(|g| g != "system:authenticated").collect())
}

#[test]
fn every_component_is_someone_of_its_own_and_only_admins_are_masters() {
    let data = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let policy = cache.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n",
    )
    .unwrap();
    let log = cache.path().join("audit.log");
    let (child, _) = up_with(
        data.path(),
        &["--audit-log-path", log.to_str().unwrap(), "--audit-policy-file", policy.to_str().unwrap()],
    );
    let admin = data.path().join("admin.kubeconfig");
    let demo = demo_tenant(data.path(), cache.path());
    let t = |args: &[&str]| kubectl(&demo, cache.path(), args);
    let pod = cache.path().join("pod.yaml");
    std::fs::write(
        &pod,
        common::RESTRICTED_POD
            .replace("image: nginx", "image: nest\n    args: [debug, http-echo, --listen, '127.0.0.1:0']"),
    )
    .unwrap();
    assert!(t(&["create", "-f", pod.to_str().unwrap()]).status.success());
    eventually(90, "the demo pod Running", || {
        String::from_utf8_lossy(&t(&["get", "pod", "hardened", "-o", "jsonpath={.status.phase}"]).stdout) == "Running"
    });

    // Who the management API server saw, from its audit log: each component as itself.
    let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in std::fs::read_to_string(&log).unwrap().lines() {
        let event: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(event["apiVersion"], "audit.k8s.io/v1", "{event}");
        let user = &event["user"];
        let groups = user["groups"].as_array().unwrap().iter().map(|g| g.as_str().unwrap().to_string());
        seen.entry(user["username"].as_str().unwrap().to_string()).or_default().extend(groups);
    }
    for component in [
        "system:kube-controller-manager",
        "system:kube-scheduler",
        "system:kube-proxy",
        "system:node:nest-node-0",
        "nest:manager",
        "nest:syncer",
    ] {
        assert!(seen.contains_key(component), "{component} made no request of its own: {seen:#?}");
    }
    let masters: Vec<&String> = seen.iter().filter(|(_, g)| g.contains("system:masters")).map(|(u, _)| u).collect();
    assert_eq!(masters, ["admin"], "{seen:#?}");
    assert!(seen["system:node:nest-node-0"].contains("system:nodes"), "{seen:#?}");
    // The files nest up keeps for them say the same.
    for (file, user) in [
        ("components/controller-manager.kubeconfig", "system:kube-controller-manager"),
        ("components/scheduler.kubeconfig", "system:kube-scheduler"),
        ("components/proxy.kubeconfig", "system:kube-proxy"),
        ("components/manager.kubeconfig", "nest:manager"),
        ("components/syncer.kubeconfig", "nest:syncer"),
        ("nodes/nest-node-0.kubeconfig", "system:node:nest-node-0"),
    ] {
        let (name, groups) = certificate_user(&std::fs::read_to_string(data.path().join(file)).unwrap());
        assert_eq!(name, user, "{file}");
        assert!(!groups.iter().any(|g| g == "system:masters"), "{file}: {groups:?}");
    }
    let (name, groups) = certificate_user(&std::fs::read_to_string(&admin).unwrap());
    assert_eq!((name.as_str(), groups), ("admin", vec!["system:masters".to_string()]));

    // The tenant's: its admin kubeconfig is the only one in system:masters.
    let secret = |name: &str| {
        let out = kubectl(&admin, cache.path(), &["get", "secret", name, "-o", "jsonpath={.data.value}"]);
        nest_core::base64::decode_text(&String::from_utf8_lossy(&out.stdout)).unwrap_or_else(|| panic!("{name}"))
    };
    assert_eq!(
        certificate_user(&secret("demo-kubeconfig")),
        ("kubernetes-admin".into(), vec!["system:masters".into()])
    );
    let (name, groups) = certificate_user(&secret("demo-controller-manager-kubeconfig"));
    assert_eq!(
        (name.as_str(), groups),
        ("system:kube-controller-manager", vec!["system:kube-controller-manager".to_string()])
    );
    assert_eq!(certificate_user(&secret("demo-syncer-kubeconfig")), ("nest:syncer".into(), Vec::new()));

    // The syncer acts in the tenant as nest:syncer: without that identity's binding there, a new pod is no longer
    // bound to a node.
    assert!(t(&["delete", "clusterrolebinding", "nest:syncer"]).status.success());
    std::fs::write(&pod, common::RESTRICTED_POD.replace("name: hardened", "name: unbound")).unwrap();
    assert!(t(&["create", "-f", pod.to_str().unwrap()]).status.success());
    std::thread::sleep(std::time::Duration::from_secs(10));
    let node = t(&["get", "pod", "unbound", "-o", "jsonpath={.spec.nodeName}"]);
    assert_eq!(String::from_utf8_lossy(&node.stdout), "", "the syncer acted without its binding");
    assert!(stop(child).success(), "nest up exits cleanly on SIGTERM");
}
