//! ResourceQuota admission (issue 19), with kubectl on both backends: a namespace's quota of pods and of memory
//! requests refuses the pod over it with upstream's `exceeded quota` message, refuses a pod that does not say what
//! it requests of a quota'd resource, and lets pods in again once others are gone.

use crate::Server;

const QUOTA: &str = r#"
apiVersion: v1
kind: ResourceQuota
metadata: {name: team-quota, namespace: team}
spec:
  hard: {pods: "3", requests.memory: 1Gi}
"#;

fn pod(name: &str, resources: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: team}}\nspec:\n  containers:\n  - name: app\n    \
         image: busybox\n    resources: {resources}\n"
    )
}

#[test]
fn quotas_refuse_the_pod_over_them() {
    for (backend, storage) in crate::backends() {
        let server = Server::start(&storage);
        server.ok(&["create", "namespace", "team"]);
        server.apply_manifest(QUOTA);
        let create = |name: &str, resources: &str| {
            let out = server.kubectl_with_input(&["create", "-f", "-"], Some(&pod(name, resources)));
            (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
        };
        let half = "{requests: {memory: 512Mi}}";
        assert_eq!(create("a", half), (true, String::new()), "{backend}");
        assert_eq!(create("b", half), (true, String::new()), "{backend}");
        let (admitted, said) = create("c", half);
        assert!(!admitted, "{backend}: a pod over the memory quota was admitted");
        assert!(
            said.contains(
                "pods \"c\" is forbidden: exceeded quota: team-quota, requested: requests.memory=512Mi, used: \
                 requests.memory=1Gi, limited: requests.memory=1Gi"
            ),
            "{backend}: {said}"
        );
        let (admitted, said) = create("d", "{}");
        assert!(
            !admitted
                && said.contains("pods \"d\" is forbidden: failed quota: team-quota: must specify requests.memory"),
            "{backend}: {said}"
        );
        // The quota's status says what it holds.
        let quota = server.json(&["get", "resourcequota", "team-quota", "-n", "team"]);
        assert_eq!(quota["status"]["used"]["requests.memory"], "1Gi", "{backend}: {quota}");
        assert_eq!(quota["status"]["hard"]["pods"], "3", "{backend}: {quota}");

        // Room again once a pod is gone; then the count of pods is what stops the next.
        server.ok(&["delete", "pod", "a", "-n", "team", "--grace-period=0", "--force"]);
        crate::eventually(30, "a gone", || !server.kubectl(&["get", "pod", "a", "-n", "team"]).status.success());
        assert_eq!(create("c", "{requests: {memory: 128Mi}}"), (true, String::new()), "{backend}");
        assert_eq!(create("e", "{requests: {memory: 128Mi}}"), (true, String::new()), "{backend}");
        let (admitted, said) = create("f", "{requests: {memory: 1Mi}}");
        assert!(!admitted, "{backend}: a fourth pod was admitted");
        assert!(
            said.contains("exceeded quota: team-quota, requested: pods=1, used: pods=3, limited: pods=3"),
            "{backend}: {said}"
        );

        // Ten at once against a quota of three pods: three get in, however the admissions interleave.
        server.ok(&["create", "namespace", "burst"]);
        server.apply_manifest("apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: three, namespace: burst}\nspec:\n  hard: {pods: \"3\"}\n");
        let admitted = std::thread::scope(|scope| {
            let tries: Vec<_> = (0..10)
                .map(|i| {
                    let server = &server;
                    scope.spawn(move || {
                        let manifest = pod(&format!("p{i}"), "{}").replace("namespace: team", "namespace: burst");
                        server.kubectl_with_input(&["create", "-f", "-"], Some(&manifest)).status.success()
                    })
                })
                .collect();
            tries.into_iter().map(|t| t.join().unwrap()).filter(|ok| *ok).count()
        });
        assert_eq!(admitted, 3, "{backend}: {admitted} of 10 concurrent pods admitted under a quota of 3");
    }
}
