//! Numbers at their extremes (issue 33, item 1): every numeric field of a pod, its containers and probes, of
//! DeleteOptions and of PodLogOptions, set by a tenant admin to the largest and smallest values its type holds, to
//! zero and to negatives. The tenant's API server and the management cluster take what kube-apiserver takes and
//! refuse the rest with its 400s and 422s; whatever gets through reaches the syncer, the management API server,
//! the scheduler, the node and the controllers, and none of them may panic or stop serving.

use serde_json::{Value, json};

use super::platform::{Platform, Who};

/// A pod the restricted Pod Security level (a tenant's default) lets through, of an image no registry has, asking for
/// RuntimeClass nest-simulated so that the node simulates it: where a grace period of i64::MAX once panicked the node for every tenant.
fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "runtimeClassName": "nest-simulated",
            "terminationGracePeriodSeconds": 30, "activeDeadlineSeconds": 3600,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "fsGroup": 1000,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "c", "image": "registry.invalid/none:1",
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
                "ports": [{"containerPort": 8080, "hostPort": 0}],
                "livenessProbe": {"tcpSocket": {"port": 8080}, "initialDelaySeconds": 0, "periodSeconds": 10,
                                  "timeoutSeconds": 1, "failureThreshold": 3, "terminationGracePeriodSeconds": 5},
                "readinessProbe": {"tcpSocket": {"port": 8080}, "successThreshold": 1, "initialDelaySeconds": 0},
                "startupProbe": {"tcpSocket": {"port": 8080}, "initialDelaySeconds": 0},
                "lifecycle": {"preStop": {"sleep": {"seconds": 1}}},
                "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}},
            }],
            // A key the syncer's policy lets through (the others are refused before the management cluster).
            "tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": 1}],
            "volumes": [
                {"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}},
                {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "t", "expirationSeconds": 600}}]}},
            ],
        },
    })
}

/// The fields tried, as JSON pointers into [`pod`], with the Go type each holds.
const FIELDS: &[(&str, Kind)] = &[
    ("/spec/terminationGracePeriodSeconds", Kind::Int64),
    ("/spec/activeDeadlineSeconds", Kind::Int64),
    ("/spec/securityContext/runAsUser", Kind::Int64),
    ("/spec/securityContext/fsGroup", Kind::Int64),
    ("/spec/tolerations/0/tolerationSeconds", Kind::Int64),
    ("/spec/containers/0/ports/0/containerPort", Kind::Int32),
    ("/spec/containers/0/ports/0/hostPort", Kind::Int32),
    ("/spec/containers/0/livenessProbe/initialDelaySeconds", Kind::Int32),
    ("/spec/containers/0/livenessProbe/periodSeconds", Kind::Int32),
    ("/spec/containers/0/livenessProbe/timeoutSeconds", Kind::Int32),
    ("/spec/containers/0/livenessProbe/failureThreshold", Kind::Int32),
    ("/spec/containers/0/livenessProbe/terminationGracePeriodSeconds", Kind::Int64),
    ("/spec/containers/0/readinessProbe/successThreshold", Kind::Int32),
    ("/spec/containers/0/readinessProbe/initialDelaySeconds", Kind::Int32),
    ("/spec/containers/0/startupProbe/initialDelaySeconds", Kind::Int32),
    ("/spec/containers/0/startupProbe/tcpSocket/port", Kind::Int32),
    ("/spec/containers/0/lifecycle/preStop/sleep/seconds", Kind::Int64),
    ("/spec/containers/0/resources/limits/cpu", Kind::Quantity),
    ("/spec/containers/0/resources/limits/memory", Kind::Quantity),
    ("/spec/volumes/0/emptyDir/sizeLimit", Kind::Quantity),
    ("/spec/volumes/1/projected/sources/0/serviceAccountToken/expirationSeconds", Kind::Int64),
];

#[derive(Clone, Copy, Debug)]
enum Kind {
    Int32,
    Int64,
    Quantity,
}

impl Kind {
    /// The extremes of the type, zero, and negatives.
    fn extremes(self) -> Vec<Value> {
        match self {
            Kind::Int32 => vec![json!(i32::MAX), json!(i32::MIN), json!(0), json!(-1)],
            Kind::Int64 => vec![json!(i64::MAX), json!(i64::MIN), json!(0), json!(-1)],
            Kind::Quantity => {
                vec![
                    json!("9223372036854775807"),
                    json!("-9223372036854775808"),
                    json!("0"),
                    json!("-1"),
                    json!("1e999"),
                    json!("1n"),
                ]
            }
        }
    }
}

/// Whether kubectl's answer is a clean refusal (the API's 400 or 422) rather than anything else.
fn refused_cleanly(stderr: &str) -> bool {
    stderr.contains("(BadRequest)") || stderr.contains("(Invalid)") || stderr.contains("is invalid")
}

#[test]
fn every_number_a_tenant_sets_at_its_extremes_is_taken_or_refused_and_nothing_panics() {
    let platform = Platform::start(&[]);
    let mut created = Vec::new();
    for (i, (pointer, kind)) in FIELDS.iter().enumerate() {
        for (j, value) in kind.extremes().into_iter().enumerate() {
            let name = format!("n{i}-{j}");
            let mut manifest = pod(&name);
            *manifest.pointer_mut(pointer).unwrap_or_else(|| panic!("{pointer} in the pod")) = value.clone();
            let out = platform.with_input(Who::Demo, &["create", "-f", "-"], &manifest.to_string());
            let stderr = String::from_utf8_lossy(&out.stderr);
            if out.status.success() {
                created.push(name);
            } else {
                assert!(refused_cleanly(&stderr), "{pointer} = {value}: neither taken nor refused cleanly: {stderr}");
                assert!(!stderr.contains("InternalError"), "{pointer} = {value}: {stderr}");
            }
        }
    }
    assert!(created.len() > FIELDS.len(), "most extremes within their type are taken: {created:?}");

    // The reproduction of the audit: a grace period of i64::MAX, an image no one has, then a forced delete in the
    // tenant. The syncer deletes the management copy with the spec's grace period.
    let mut forever = pod("forever");
    forever["spec"]["terminationGracePeriodSeconds"] = json!(i64::MAX);
    let out = platform.with_input(Who::Demo, &["create", "-f", "-"], &forever.to_string());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    while platform.json(Who::Demo, &["get", "pod", "forever"])["status"]["phase"] != "Running" {
        assert!(
            std::time::Instant::now() < deadline,
            "forever not Running: {}\n{}",
            platform.ok(Who::Demo, &["get", "pod", "forever", "-o", "yaml"]),
            platform.ok(Who::Demo, &["get", "events", "--field-selector", "involvedObject.name=forever"])
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
    // What was taken reached the management cluster and its node: (nearly) every such pod runs there.
    crate::common::eventually(180, "the pods with extremes Running", || {
        let pods = platform.json(Who::Demo, &["get", "pods"]);
        let running = pods["items"].as_array().into_iter().flatten().filter(|p| p["status"]["phase"] == "Running");
        running.count() * 10 >= created.len() * 9
    });
    platform.ok(Who::Demo, &["delete", "pod", "forever", "--grace-period=0", "--force"]);

    // DeleteOptions at their extremes, on pods the tenant made, as raw requests.
    for (k, grace) in [i64::MAX, i64::MIN, 0, -1].into_iter().enumerate() {
        let Some(name) = created.get(k) else { break };
        let path = format!("/api/v1/namespaces/default/pods/{name}?gracePeriodSeconds={grace}");
        let out = platform.kubectl(Who::Demo, &["delete", "--raw", &path]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() || refused_cleanly(&stderr), "DELETE with grace {grace}: {stderr}");
    }
    let too_big = format!("/api/v1/namespaces/default/pods/x?gracePeriodSeconds={}0", i64::MAX);
    let out = platform.kubectl(Who::Demo, &["delete", "--raw", &too_big]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("BadRequest"), "a grace period past i64 is a 400");

    // PodLogOptions: refused in upstream's words, or served; never a panic of the log path.
    let log_of = |query: &str| {
        let path = format!("/api/v1/namespaces/default/pods/{}/log?{query}", created[0]);
        platform.kubectl(Who::Demo, &["get", "--raw", &path])
    };
    let out = log_of("sinceSeconds=-5");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&format!(
            "PodLogOptions \"{}\" is invalid: sinceSeconds: Invalid value: -5: must be greater than 0",
            created[0]
        )),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for query in [
        format!("sinceSeconds={}", i64::MAX),
        format!("tailLines={}", i64::MAX),
        format!("limitBytes={}", i64::MAX),
        format!("sinceSeconds={}", i64::MIN),
        format!("tailLines={}", i64::MIN),
        "tailLines=-1".into(),
        "limitBytes=0".into(),
        "sinceTime=9999-12-31T23:59:59Z".into(),
        "sinceTime=0001-01-01T00:00:00Z".into(),
    ] {
        let out = log_of(&query);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("InternalError") && !stderr.contains("(InternalError)"), "{query}: {stderr}");
    }

    // The platform admin's own DELETE of a tenant's management copy with the largest grace period.
    let supers = platform.json(Who::Admin, &["get", "pods", "-A", "-l", "tenancy.nest.dev/cluster"]);
    if let Some(one) = supers["items"].as_array().and_then(|items| items.first()) {
        let (namespace, name) =
            (one["metadata"]["namespace"].as_str().unwrap(), one["metadata"]["name"].as_str().unwrap());
        let path = format!("/api/v1/namespaces/{namespace}/pods/{name}?gracePeriodSeconds={}", i64::MAX);
        platform.ok(Who::Admin, &["delete", "--raw", &path]);
    }

    // Everything still serves, both tenants' pods still run, and the tenants can still make pods.
    std::thread::sleep(std::time::Duration::from_secs(10));
    platform.assert_serving();
    let fresh = pod("after");
    let out = platform.with_input(Who::Acme, &["create", "-f", "-"], &fresh.to_string());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    crate::common::eventually(120, "a new acme pod Running", || {
        platform.json(Who::Acme, &["get", "pod", "after"])["status"]["phase"] == "Running"
    });
    platform.finish();
}
