//! LimitRanger (issue 19), with kubectl on both backends: a namespace's LimitRange gives a new pod's containers the
//! requests and limits they do not set, says so in upstream's annotation, and refuses a container over its `max` or
//! under its `min` with upstream's message.

use crate::Server;

const RANGE: &str = r#"
apiVersion: v1
kind: LimitRange
metadata: {name: sizes, namespace: team}
spec:
  limits:
  - type: Container
    default: {memory: 256Mi}
    defaultRequest: {memory: 128Mi, cpu: 100m}
    max: {memory: 1Gi}
    min: {cpu: 50m}
"#;

fn pod(name: &str, resources: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: team}}\nspec:\n  containers:\n  - name: app\n    \
         image: busybox\n    resources: {resources}\n"
    )
}

#[test]
fn limit_ranges_default_and_bound_containers() {
    for (backend, storage) in crate::backends() {
        let server = Server::start(&storage);
        server.ok(&["create", "namespace", "team"]);
        let applied = server.kubectl_with_input(&["apply", "-f", "-"], Some(RANGE));
        assert!(applied.status.success(), "{backend}: {}", String::from_utf8_lossy(&applied.stderr));

        // Nothing set: the defaults, recorded in upstream's words; the QoS class follows from them.
        let made = server.kubectl_with_input(&["create", "-f", "-", "-o", "json"], Some(&pod("plain", "{}")));
        assert!(made.status.success(), "{backend}: {}", String::from_utf8_lossy(&made.stderr));
        let plain: serde_json::Value = serde_json::from_slice(&made.stdout).unwrap();
        let resources = &plain["spec"]["containers"][0]["resources"];
        assert_eq!(resources["limits"]["memory"], "256Mi", "{backend}: {resources}");
        assert_eq!(resources["requests"]["memory"], "128Mi", "{backend}: {resources}");
        assert_eq!(resources["requests"]["cpu"], "100m", "{backend}: {resources}");
        assert_eq!(
            plain["metadata"]["annotations"]["kubernetes.io/limit-ranger"],
            "LimitRanger plugin set: cpu, memory request for container app; memory limit for container app",
            "{backend}"
        );
        assert_eq!(plain["status"]["qosClass"], "Burstable", "{backend}");

        // A limit given alone is its request too (the API's defaulting), not the LimitRange's default request.
        let made = server.kubectl_with_input(
            &["create", "-f", "-", "-o", "json"],
            Some(&pod("limited", "{limits: {memory: 512Mi, cpu: 200m}}")),
        );
        assert!(made.status.success(), "{backend}: {}", String::from_utf8_lossy(&made.stderr));
        let limited: serde_json::Value = serde_json::from_slice(&made.stdout).unwrap();
        let resources = &limited["spec"]["containers"][0]["resources"];
        assert_eq!(resources["requests"]["memory"], "512Mi", "{backend}: {resources}");
        assert_eq!(resources["requests"]["cpu"], "200m", "{backend}: {resources}");

        // Over the max, under the min: refused, as kube-apiserver words it.
        let over = server.kubectl_with_input(&["create", "-f", "-"], Some(&pod("big", "{limits: {memory: 2Gi}}")));
        let said = String::from_utf8_lossy(&over.stderr);
        assert!(!over.status.success(), "{backend}: a container over the max was admitted");
        assert!(
            said.contains("pods \"big\" is forbidden: maximum memory usage per Container is 1Gi, but limit is 2Gi"),
            "{backend}: {said}"
        );
        let under = server.kubectl_with_input(&["create", "-f", "-"], Some(&pod("tiny", "{requests: {cpu: 10m}}")));
        let said = String::from_utf8_lossy(&under.stderr);
        assert!(
            said.contains("pods \"tiny\" is forbidden: minimum cpu usage per Container is 50m, but request is 10m"),
            "{backend}: {said}"
        );
        // Another namespace has no LimitRange: its pods are left as they are.
        server.ok(&["create", "namespace", "other"]);
        let free = pod("free", "{}").replace("namespace: team", "namespace: other");
        let made = server.kubectl_with_input(&["create", "-f", "-", "-o", "json"], Some(&free));
        let free: serde_json::Value = serde_json::from_slice(&made.stdout).unwrap();
        assert_eq!(free["spec"]["containers"][0]["resources"], serde_json::json!({}), "{backend}");
    }
}
