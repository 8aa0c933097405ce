//! What a tenant may put in a pod, and in its Services and Endpoints (issue 18), tried on `nest up` as a tenant admin
//! would: a tenant the platform admin created with `nest cluster create` (Pod Security restricted, the management
//! cluster's default), then relaxed to baseline. Its own API server takes what kube-apiserver takes; what reaches
//! the management cluster is what Pod Security admission and the syncer's policy let through, and the tenant sees
//! why as a SyncFailed Event naming the field.
//!
//! Its own test binary: `nest up`'s node has fixed addresses, so no other `nest up` may run beside it.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use crate::common::eventually;
use crate::common::up::{kubectl, stop, up};
use serde_json::Value;

fn nest(admin: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_nest")).args(args).env("KUBECONFIG", admin).output().unwrap();
    assert!(out.status.success(), "nest {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn succeeded(out: Output, args: &[&str]) -> String {
    assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What a tenant asks of the host is refused by the management cluster's Pod Security admission, at the level the
/// platform admin chose for the tenant (the syncer's default, restricted, unless its Cluster's
/// `tenancy.nest.dev/pod-security` annotation says otherwise), and the tenant sees why as a SyncFailed Event naming
/// the field.
#[test]
fn pod_security_and_the_syncers_policy_decide_what_a_tenant_puts_on_the_host() {
    let data = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let (child, _) = up(data.path());
    let admin = data.path().join("admin.kubeconfig");
    let k = |args: &[&str]| kubectl(&admin, cache.path(), args);
    let ok = |args: &[&str]| succeeded(k(args), args);
    let json = |args: &[&str]| -> Value { serde_json::from_str(&ok(&[args, &["-o", "json"]].concat())).unwrap() };
    eventually(120, "the manager's CRDs served", || k(&["get", "nestedcontrolplanes"]).status.success());
    nest(&admin, &["cluster", "create", "strict", "--wait", "--timeout", "120s"]);
    let strict = cache.path().join("strict.kubeconfig");
    std::fs::write(&strict, nest(&admin, &["cluster", "kubeconfig", "strict"])).unwrap();
    let t = |args: &[&str]| kubectl(&strict, cache.path(), args);
    let t_ok = |args: &[&str]| succeeded(t(args), args);
    let t_json = |args: &[&str]| -> Value { serde_json::from_str(&t_ok(&[args, &["-o", "json"]].concat())).unwrap() };
    let super_namespace = |namespace: &str| -> Option<String> {
        let list = json(&["get", "namespaces", "-l", "tenancy.nest.dev/cluster"]);
        list["items"].as_array()?.iter().find_map(|n| {
            let annotations = &n["metadata"]["annotations"];
            (annotations["tenancy.nest.dev/cluster-name"] == "default/strict"
                && annotations["tenancy.nest.dev/namespace"] == namespace)
                .then(|| n["metadata"]["name"].as_str().unwrap().to_string())
        })
    };
    let items = |list: &Value| list["items"].as_array().cloned().unwrap_or_default();
    let sync_failed = |pod: &str, needle: &str| {
        let selector = format!("involvedObject.name={pod}");
        let events = items(&t_json(&["get", "events", "--field-selector", &selector]));
        events.iter().any(|e| e["reason"] == "SyncFailed" && e["message"].as_str().is_some_and(|m| m.contains(needle)))
    };

    // Restricted: a plain pod is refused, naming every field; a hardened one runs.
    // Both ask for simulation (RuntimeClass nest-simulated, which the syncer makes in the tenant): this machine
    // pulls no nginx.
    eventually(60, "the syncer's RuntimeClass in the tenant", || {
        t(&["get", "runtimeclass", "nest-simulated"]).status.success()
    });
    t_ok(&["run", "plain", "--image=nginx", "--overrides", r#"{"spec":{"runtimeClassName":"nest-simulated"}}"#]);
    let hardened = cache.path().join("hardened.yaml");
    std::fs::write(&hardened, common::RESTRICTED_POD.replace("spec:\n", "spec:\n  runtimeClassName: nest-simulated\n"))
        .unwrap();
    t_ok(&["create", "-f", hardened.to_str().unwrap()]);
    eventually(60, "a SyncFailed Event saying what restricted refuses", || {
        sync_failed(
            "plain",
            concat!(
                r#"violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (container "plain" must "#,
                r#"set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "plain" "#,
                r#"must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true"#
            ),
        )
    });
    eventually(60, "the hardened pod Running", || t_json(&["get", "pod", "hardened"])["status"]["phase"] == "Running");
    // Root, even a hardened pod's: refused by restricted. nest's own annotations from a tenant never go down.
    let rooted =
        common::RESTRICTED_POD.replace("name: hardened", "name: as-root").replace("runAsUser: 1000", "runAsUser: 0");
    let forger = common::RESTRICTED_POD.replace(
        "metadata: {name: hardened}",
        "metadata: {name: forger, annotations: {nest.dev/stop-seconds: \"86400\", nest.dev/exit-code: \"3\"}}",
    );
    let file = cache.path().join("rooted.yaml");
    std::fs::write(&file, format!("{rooted}---\n{forger}")).unwrap();
    t_ok(&["create", "-f", file.to_str().unwrap()]);
    eventually(60, "the root pod refused by name", || {
        sync_failed("as-root", r#"runAsUser=0 (pod must not set runAsUser=0)"#)
    });
    eventually(60, "the forger's pod down", || {
        super_namespace("default").is_some_and(|ns| k(&["get", "pod", "forger", "-n", &ns]).status.success())
    });
    let strict_default = super_namespace("default").unwrap();
    let forged = json(&["get", "pod", "forger", "-n", &strict_default]);
    let annotations = forged["metadata"]["annotations"].as_object().cloned().unwrap_or_default();
    assert!(
        !annotations.keys().any(|k| k.starts_with("nest.dev/")),
        "a tenant's nest.dev annotation went down: {annotations:?}"
    );
    let level = |mode: &str| {
        let labels = json(&["get", "namespace", &strict_default])["metadata"]["labels"].clone();
        labels[format!("pod-security.kubernetes.io/{mode}")].as_str().unwrap_or_default().to_string()
    };
    assert_eq!([level("enforce"), level("audit"), level("warn")], ["restricted", "restricted", "restricted"]);
    assert!(!k(&["get", "pod", "plain", "-n", &strict_default]).status.success());

    // The platform admin relaxes the tenant to baseline: its namespaces follow, and the plain pod runs. A tenant
    // cannot do this itself: the annotation is on its Cluster, in the management cluster.
    ok(&["annotate", "cluster", "strict", "tenancy.nest.dev/pod-security=baseline"]);
    eventually(60, "the super namespace at baseline", || level("enforce") == "baseline");
    eventually(60, "the plain pod Running", || t_json(&["get", "pod", "plain"])["status"]["phase"] == "Running");
    // Baseline still refuses what reaches the host.
    let escape = cache.path().join("escape.yaml");
    std::fs::write(
        &escape,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: escape}\nspec:\n  hostNetwork: true\n  containers:\n  - {name: c, \
         image: nginx, securityContext: {privileged: true, capabilities: {add: [SYS_ADMIN]}}, ports: [{containerPort: \
         22, hostPort: 22}]}\n",
    )
    .unwrap();
    t_ok(&["create", "-f", escape.to_str().unwrap()]);
    eventually(60, "a SyncFailed Event naming each escape", || {
        sync_failed(
            "escape",
            concat!(
                r#"violates PodSecurity "baseline:latest": non-default capabilities (container "c" must not include "#,
                r#""SYS_ADMIN" in securityContext.capabilities.add), host namespaces (hostNetwork=true), "#,
                r#"hostPort (container "c" uses hostPort 22), privileged (container "c" must "#,
                r#"not set securityContext.privileged=true)"#
            ),
        )
    });
    assert!(!k(&["get", "pod", "escape", "-n", &strict_default]).status.success());

    // Beyond Pod Security, the syncer's policy: what baseline lets through but a tenant may not ask of the
    // management cluster, each refused by name.
    let asks = [
        (
            "nfs",
            "volumes: [{name: v, nfs: {server: 127.0.0.1, path: /}}]",
            "spec.volumes[0].nfs: \"nfs\" is not allowed",
        ),
        (
            "rooted",
            "volumes: [{name: root, hostPath: {path: /}}]",
            "spec.volumes[0].hostPath: \"hostPath\" is not allowed",
        ),
        (
            "critical",
            "priorityClassName: system-node-critical",
            "spec.priorityClassName: \"system-node-critical\" is not allowed",
        ),
        (
            "tolerant",
            "tolerations: [{operator: Exists}]",
            "spec.tolerations[0]: a toleration of every taint is not allowed",
        ),
        ("pinned", "nodeSelector: {kubernetes.io/hostname: host}", "spec.nodeSelector[kubernetes.io/hostname]"),
        ("scheduled", "schedulerName: mine", "spec.schedulerName: \"mine\" is not allowed"),
        ("classy", "runtimeClassName: kata", "spec.runtimeClassName: \"kata\" is not allowed"),
    ];
    // The tenant's own RuntimeClass `kata` (its API server refuses a pod naming a class it lacks, as
    // kube-apiserver's RuntimeClass admission does): the management cluster's policy still refuses it.
    let kata = cache.path().join("kata.yaml");
    std::fs::write(&kata, "apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: kata}\nhandler: kata\n")
        .unwrap();
    t_ok(&["create", "-f", kata.to_str().unwrap()]);
    for (name, field, _) in asks {
        let file = cache.path().join(format!("{name}.yaml"));
        let manifest = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  {field}\n  containers: [{{name: c, image: nginx}}]\n"
        );
        std::fs::write(&file, manifest).unwrap();
        t_ok(&["create", "-f", file.to_str().unwrap()]);
    }
    for (name, _, refusal) in asks {
        eventually(60, &format!("a SyncFailed Event for {name}"), || sync_failed(name, refusal));
        assert!(!k(&["get", "pod", name, "-n", &strict_default]).status.success(), "{name} went down");
    }
    // Services: ClusterIP only unless the admin opts the tenant in; Endpoints never to the host or the API server:
    // the tenant's own API server refuses loopback ones, as kube-apiserver does, and the syncer's policy refuses the
    // management cluster's API server (its `kubernetes` Service's address, which the tenant's API server cannot
    // know to refuse); nodes and other tenants' pods are unit-tested in policy.rs.
    let services = cache.path().join("services.yaml");
    std::fs::write(
        &services,
        "apiVersion: v1\nkind: Service\nmetadata: {name: exposed}\nspec: {type: NodePort, selector: {app: x}, ports: \
         [{port: 80}]}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: sideways}\nspec: {ports: [{port: 443}]}\n\
         ---\napiVersion: v1\nkind: Service\nmetadata: {name: upward}\nspec: {ports: [{port: 443}]}\n\
         ---\napiVersion: v1\nkind: Service\nmetadata: {name: balanced}\nspec: {type: LoadBalancer, selector: {app: x}, \
         ports: [{port: 80}]}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: named}\nspec: {type: ExternalName, \
         externalName: example.com}\n",
    )
    .unwrap();
    t_ok(&["create", "-f", services.to_str().unwrap()]);
    let endpoints = cache.path().join("endpoints.yaml");
    std::fs::write(
        &endpoints,
        "apiVersion: v1\nkind: Endpoints\nmetadata: {name: sideways}\nsubsets: [{addresses: [{ip: 127.0.0.1}], \
         ports: [{port: 6443}]}]\n",
    )
    .unwrap();
    let refused = t(&["create", "-f", endpoints.to_str().unwrap()]);
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains(r#"subsets[0].addresses[0].ip: Invalid value: "127.0.0.1": may not be in the loopback range"#),
        "{said}"
    );
    let api_server = ok(&["get", "service", "kubernetes", "-n", "default", "-o", "jsonpath={.spec.clusterIP}"]);
    assert!(!api_server.is_empty() && !api_server.starts_with("127."), "{api_server}");
    let upward = cache.path().join("upward.yaml");
    std::fs::write(
        &upward,
        format!(
            "apiVersion: v1\nkind: Endpoints\nmetadata: {{name: upward}}\nsubsets: [{{addresses: [{{ip: {api_server}}}], \
             ports: [{{port: 443}}]}}]\n"
        ),
    )
    .unwrap();
    t_ok(&["create", "-f", upward.to_str().unwrap()]);
    eventually(60, "the Endpoints to the management API server refused", || {
        sync_failed(
            "upward",
            &format!(
                "subsets[0].addresses[0].ip: \"{api_server}\" is the management cluster's API server, which the \
                 management cluster's policy for tenants does not allow"
            ),
        )
    });
    assert!(!k(&["get", "endpoints", "upward", "-n", &strict_default]).status.success());
    eventually(60, "the NodePort Service refused", || sync_failed("exposed", "spec.type: \"NodePort\" is not allowed"));
    eventually(60, "the LoadBalancer Service refused", || {
        sync_failed("balanced", "spec.type: \"LoadBalancer\" is not allowed")
    });
    eventually(60, "the ExternalName Service refused", || {
        sync_failed("named", "spec.type: \"ExternalName\" is not allowed")
    });
    assert!(!k(&["get", "endpoints", "sideways", "-n", &strict_default]).status.success());
    assert!(!k(&["get", "service", "exposed", "-n", &strict_default]).status.success());
    // Caps: at 300 KiB of ConfigMaps for this tenant, the fourth of 100 KiB waits, with an Event, and the super
    // cluster never holds more than the cap of the tenant's ConfigMaps.
    ok(&["annotate", "cluster", "strict", "tenancy.nest.dev/cap-configmaps-bytes=300Ki"]);
    let blob = cache.path().join("blob");
    std::fs::write(&blob, "x".repeat(100 * 1024)).unwrap();
    for i in 0..4 {
        let from = format!("--from-file=data={}", blob.display());
        t_ok(&["create", "configmap", &format!("big{i}"), &from]);
    }
    let held = || {
        let listed = json(&["get", "configmaps", "-n", &strict_default]);
        let big: Vec<usize> = listed["items"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["metadata"]["name"].as_str().is_some_and(|n| n.starts_with("big")))
            .map(|c| c["data"]["data"].as_str().map_or(0, str::len))
            .collect();
        (big.len(), big.iter().sum::<usize>())
    };
    // Two fit (each is a little more than 100 KiB as JSON); a third would pass the cap.
    eventually(60, "two ConfigMaps down and the others waiting, told why", || {
        held() == (2, 2 * 100 * 1024)
            && (0..4)
                .filter(|i| sync_failed(&format!("big{i}"), "the tenant's cap of 307200 bytes of configmaps"))
                .count()
                == 2
    });
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(held(), (2, 2 * 100 * 1024), "the super cluster grew past the cap after a patrol");

    // The admin lets this tenant have NodePorts: the Service goes down.
    ok(&["annotate", "cluster", "strict", "tenancy.nest.dev/allow-service-types=NodePort"]);
    eventually(60, "the NodePort Service synced once allowed", || {
        k(&["get", "service", "exposed", "-n", &strict_default]).status.success()
    });
    assert!(stop(child).success(), "nest up exits cleanly on SIGTERM");
}
