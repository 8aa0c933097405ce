//! The Pod Security Standards, level by level, against upstream's wording: each case a pod spec and the message a
//! client would get (`reason (detail), …`), or nothing.

use serde_json::{Value, json};

use super::standards::{Level, PodView, describe, evaluate};
use super::{Config, PodSecurity, Policy, Version};
use crate::chain::Validating;
use crate::chain::testing::expect_handled;

fn check(level: Level, minor: u32, metadata: Value, spec: Value) -> String {
    describe(&evaluate(level, minor, &PodView { metadata: &metadata, spec: &spec }))
}

fn latest(level: Level, spec: Value) -> String {
    check(level, 33, json!({}), spec)
}

/// A container that meets the restricted level.
fn restricted_container(name: &str) -> Value {
    json!({"name": name, "image": "nginx", "securityContext": {
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
    }})
}

fn restricted_pod(containers: Vec<Value>) -> Value {
    json!({"securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}}, "containers": containers})
}

#[test]
fn baseline_refuses_what_reaches_the_host() {
    let cases: &[(Value, &str)] = &[
        (json!({"containers": [{"name": "a"}]}), ""),
        (
            json!({"hostNetwork": true, "hostPID": true, "hostIPC": false, "containers": [{"name": "a"}]}),
            "host namespaces (hostNetwork=true, hostPID=true)",
        ),
        (
            json!({"containers": [{"name": "a", "securityContext": {"privileged": true}}, {"name": "b", "securityContext": {"privileged": true}}, {"name": "c", "securityContext": {"privileged": false}}]}),
            r#"privileged (containers "a", "b" must not set securityContext.privileged=true)"#,
        ),
        (
            json!({"initContainers": [{"name": "i", "securityContext": {"privileged": true}}], "containers": [{"name": "a"}]}),
            r#"privileged (container "i" must not set securityContext.privileged=true)"#,
        ),
        (
            json!({"containers": [
                {"name": "a", "securityContext": {"capabilities": {"add": ["SYS_ADMIN", "CHOWN"]}}},
                {"name": "b", "securityContext": {"capabilities": {"add": ["NET_RAW"]}}},
                {"name": "c", "securityContext": {"capabilities": {"add": ["KILL", "NET_BIND_SERVICE"]}}},
            ]}),
            r#"non-default capabilities (containers "a", "b" must not include "NET_RAW", "SYS_ADMIN" in securityContext.capabilities.add)"#,
        ),
        (
            json!({"volumes": [{"name": "host", "hostPath": {"path": "/"}}, {"name": "ok", "emptyDir": {}}], "containers": [{"name": "a"}]}),
            r#"hostPath volumes (volume "host")"#,
        ),
        (
            json!({"containers": [
                {"name": "a", "ports": [{"containerPort": 80}]},
                {"name": "b", "ports": [{"containerPort": 80, "hostPort": 20}]},
                {"name": "c", "ports": [{"hostPort": 30}, {"hostPort": 10}, {"hostPort": 20}]},
            ]}),
            "hostPort (containers \"b\", \"c\" use hostPorts 10, 20, 30)",
        ),
        (
            json!({"containers": [{"name": "b", "ports": [{"hostPort": 22}]}]}),
            "hostPort (container \"b\" uses hostPort 22)",
        ),
        (
            json!({"securityContext": {"appArmorProfile": {"type": "Unconfined"}}, "containers": [{"name": "a"}]}),
            r#"forbidden AppArmor profile (pod must not set AppArmor profile type to "Unconfined")"#,
        ),
        (
            json!({"securityContext": {"seLinuxOptions": {"user": "root"}}, "containers": [{"name": "a", "securityContext": {"seLinuxOptions": {"type": "spc_t"}}}, {"name": "b", "securityContext": {"seLinuxOptions": {"type": "container_t"}}}]}),
            r#"seLinuxOptions (pod and container "a" set forbidden securityContext.seLinuxOptions: type "spc_t"; user may not be set)"#,
        ),
        (
            json!({"containers": [{"name": "a", "securityContext": {"procMount": "Unmasked"}}, {"name": "b", "securityContext": {"procMount": "Default"}}]}),
            r#"procMount (container "a" must not set securityContext.procMount to "Unmasked")"#,
        ),
        (
            json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}}, "containers": [{"name": "a", "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}}]}),
            r#"seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")"#,
        ),
        (
            json!({"securityContext": {"sysctls": [{"name": "kernel.msgmax"}, {"name": "net.ipv4.tcp_syncookies"}, {"name": "net.core.somaxconn"}]}, "containers": [{"name": "a"}]}),
            "forbidden sysctls (kernel.msgmax, net.core.somaxconn)",
        ),
        (
            json!({"containers": [{"name": "a", "securityContext": {"windowsOptions": {"hostProcess": true}}}]}),
            r#"hostProcess (container "a" must not set securityContext.windowsOptions.hostProcess=true)"#,
        ),
        // Several at once come in upstream's order (the checks' ids, sorted), not the spec's.
        (
            json!({"hostPID": true, "volumes": [{"name": "v", "hostPath": {"path": "/etc"}}], "containers": [{"name": "a", "securityContext": {"privileged": true, "capabilities": {"add": ["SYS_ADMIN"]}}}]}),
            concat!(
                r#"non-default capabilities (container "a" must not include "SYS_ADMIN" in securityContext.capabilities.add), "#,
                r#"host namespaces (hostPID=true), hostPath volumes (volume "v"), "#,
                r#"privileged (container "a" must not set securityContext.privileged=true)"#
            ),
        ),
    ];
    for (spec, expected) in cases {
        assert_eq!(latest(Level::Baseline, spec.clone()), *expected, "{spec}");
        // Privileged checks nothing.
        assert_eq!(latest(Level::Privileged, spec.clone()), "", "{spec}");
    }
}

#[test]
fn apparmor_annotations_are_checked_too() {
    let metadata = json!({"annotations": {
        "container.apparmor.security.beta.kubernetes.io/e": "unconfined",
        "container.apparmor.security.beta.kubernetes.io/f": "runtime/default",
        "container.apparmor.security.beta.kubernetes.io/g": "localhost/mine",
    }});
    assert_eq!(
        check(Level::Baseline, 33, metadata, json!({"containers": [{"name": "e"}]})),
        r#"forbidden AppArmor profile (annotation must not set AppArmor profile type to "container.apparmor.security.beta.kubernetes.io/e="unconfined"")"#
    );
}

#[test]
fn restricted_asks_for_a_hardened_pod() {
    let plain = json!({"containers": [{"name": "a", "image": "nginx"}]});
    assert_eq!(
        latest(Level::Restricted, plain),
        concat!(
            r#"allowPrivilegeEscalation != false (container "a" must set securityContext.allowPrivilegeEscalation=false), "#,
            r#"unrestricted capabilities (container "a" must set securityContext.capabilities.drop=["ALL"]), "#,
            r#"runAsNonRoot != true (pod or container "a" must set securityContext.runAsNonRoot=true), "#,
            r#"seccompProfile (pod or container "a" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#
        )
    );
    assert_eq!(
        latest(Level::Restricted, restricted_pod(vec![restricted_container("a"), restricted_container("b")])),
        ""
    );

    let cases: Vec<(Value, &str)> = vec![
        (
            {
                let mut pod = restricted_pod(vec![restricted_container("a")]);
                pod["volumes"] = json!([{"name": "a", "hostPath": {"path": "/"}}, {"name": "b", "nfs": {"server": "127.0.0.1", "path": "/"}}, {"name": "c", "secret": {"secretName": "s"}}, {"name": "d", "projected": {"sources": []}}]);
                pod
            },
            // hostPath volumes are reported once: the restricted check replaces the baseline one.
            r#"restricted volume types (volumes "a", "b" use restricted volume types "hostPath", "nfs")"#,
        ),
        (
            {
                let mut pod = restricted_pod(vec![restricted_container("a")]);
                pod["securityContext"]["runAsNonRoot"] = json!(false);
                pod
            },
            r#"runAsNonRoot != true (pod must not set securityContext.runAsNonRoot=false)"#,
        ),
        (
            {
                let mut pod = restricted_pod(vec![restricted_container("a"), restricted_container("b")]);
                pod["containers"][1]["securityContext"]["runAsUser"] = json!(0);
                pod
            },
            r#"runAsUser=0 (container "b" must not set runAsUser=0)"#,
        ),
        (
            {
                let mut pod = restricted_pod(vec![restricted_container("a")]);
                pod["containers"][0]["securityContext"]["capabilities"]["add"] =
                    json!(["SYS_ADMIN", "NET_BIND_SERVICE"]);
                pod
            },
            // Once, from the restricted check (which replaces the baseline one).
            r#"unrestricted capabilities (container "a" must not include "SYS_ADMIN" in securityContext.capabilities.add)"#,
        ),
        (
            {
                let mut pod = restricted_pod(vec![restricted_container("a")]);
                pod["securityContext"].as_object_mut().unwrap().remove("seccompProfile");
                pod["containers"][0]["securityContext"]["seccompProfile"] = json!({"type": "Unconfined"});
                pod
            },
            r#"seccompProfile (container "a" must not set securityContext.seccompProfile.type to "Unconfined")"#,
        ),
        (
            {
                let mut pod = restricted_pod(vec![restricted_container("a")]);
                pod["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = json!(true);
                pod
            },
            r#"allowPrivilegeEscalation != false (container "a" must set securityContext.allowPrivilegeEscalation=false)"#,
        ),
    ];
    for (spec, expected) in cases {
        assert_eq!(latest(Level::Restricted, spec.clone()), expected, "{spec}");
    }
}

#[test]
fn older_policy_versions_run_the_checks_of_their_time() {
    let mut adds = restricted_pod(vec![restricted_container("a")]);
    adds["containers"][0]["securityContext"]["capabilities"] = json!({"add": ["SYS_ADMIN"]});
    adds["containers"][0]["securityContext"]["runAsUser"] = json!(0);
    // Before 1.22 restricted checked capabilities as baseline does; before 1.23 it let uid 0 through.
    assert_eq!(
        check(Level::Restricted, 21, json!({}), adds.clone()),
        r#"non-default capabilities (container "a" must not include "SYS_ADMIN" in securityContext.capabilities.add)"#
    );
    assert!(
        check(Level::Restricted, 23, json!({}), adds.clone())
            .ends_with(r#"runAsUser=0 (container "a" must not set runAsUser=0)"#)
    );
    // Sysctls allowed later are refused by earlier versions.
    let sysctl = json!({"securityContext": {"sysctls": [{"name": "net.ipv4.ip_local_reserved_ports"}]}, "containers": [{"name": "a"}]});
    assert_eq!(
        check(Level::Baseline, 26, json!({}), sysctl.clone()),
        "forbidden sysctls (net.ipv4.ip_local_reserved_ports)"
    );
    assert_eq!(check(Level::Baseline, 27, json!({}), sysctl.clone()), "");
    // Versions after this server's are evaluated as its own.
    assert_eq!(check(Level::Baseline, 99, json!({}), sysctl), "");
}

#[test]
fn windows_pods_are_exempt_from_linux_only_restrictions() {
    let pod =
        json!({"os": {"name": "windows"}, "securityContext": {"runAsNonRoot": true}, "containers": [{"name": "a"}]});
    assert_eq!(latest(Level::Restricted, pod), "");
}

#[test]
fn labels_choose_policies_and_bad_ones_fail_closed_for_enforce() {
    let config = Config::default();
    let policies = config.policies(&json!({
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/enforce-version": "v1.30",
        "pod-security.kubernetes.io/warn": "restricted",
    }));
    assert_eq!(
        (policies.enforce.to_string(), policies.warn.to_string()),
        ("baseline:v1.30".into(), "restricted:latest".into())
    );
    assert!(policies.errors.is_empty());

    let bad = config.policies(&json!({
        "pod-security.kubernetes.io/enforce": "strict",
        "pod-security.kubernetes.io/warn": "loose",
        "pod-security.kubernetes.io/audit-version": "1.30",
    }));
    assert_eq!((bad.enforce.level, bad.warn.level), (Level::Restricted, Level::Privileged));
    let messages: Vec<String> = bad.errors.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
    assert_eq!(
        messages,
        [
            r#"metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "strict": must be one of privileged, baseline, restricted"#,
            r#"metadata.labels[pod-security.kubernetes.io/audit-version]: Invalid value: "1.30": must be "latest" or "v1.x""#,
            r#"metadata.labels[pod-security.kubernetes.io/warn]: Invalid value: "loose": must be one of privileged, baseline, restricted"#,
        ]
    );
    // No labels: the configured defaults.
    let strict = Config { enforce: Policy::parse("restricted:v1.29").unwrap(), ..Config::default() };
    assert_eq!(strict.policies(&Value::Null).enforce.to_string(), "restricted:v1.29");
}

#[test]
fn versions_are_latest_or_canonical_minor_versions() {
    assert_eq!(Version::parse("latest"), Some(Version::Latest));
    assert_eq!(Version::parse("v1.0"), Some(Version::Minor(0)));
    assert_eq!(Version::parse("v1.33"), Some(Version::Minor(33)));
    for bad in ["v1.033", "1.33", "v2.0", "v1.", "v1.3a", "Latest", ""] {
        assert_eq!(Version::parse(bad), None, "{bad}");
    }
    assert!(Policy::parse("baseline").is_ok_and(|p| p.to_string() == "baseline:latest"));
    assert!(Policy::parse("root").is_err());
}

#[test]
fn pods_templates_and_namespaces_are_handled_unless_deleted_or_asked_by_an_exempt_user() {
    let plugin = PodSecurity { config: Config { exempt_users: vec!["admin".into()], ..Config::default() } };
    let writes = "create, update, create status, update status";
    let checked = ["pods", "namespaces", "apps/deployments", "batch/cronjobs"].map(|r| format!("{r}: {writes}"));
    expect_handled(|r| plugin.handles(r), "alice", &format!("{}; configmaps: -", checked.join("; ")));
    expect_handled(|r| plugin.handles(r), "admin", "pods: -");
}
