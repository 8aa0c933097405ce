//! `pods/ephemeralcontainers` (issue 35), with kubectl on both backends: read as the pod, written (PATCH, PUT) only
//! in `spec.ephemeralContainers`, entries only added; a pod is never created with them, nor given them through the
//! pod itself (an update of the pod that changes them is upstream's 422); upstream's 422s and Pod Security's 403 for
//! what may not be.

use crate::Server;

const PODS: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: locked
  labels: {pod-security.kubernetes.io/enforce: baseline}
---
apiVersion: v1
kind: Pod
metadata: {name: app, namespace: default}
spec:
  containers: [{name: app, image: busybox}]
---
apiVersion: v1
kind: Pod
metadata: {name: guarded, namespace: locked}
spec:
  containers: [{name: app, image: busybox}]
"#;

const SUB: &str = "--subresource=ephemeralcontainers";

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn ephemeral_containers_are_only_added_through_their_subresource() {
    for (backend, storage) in crate::backends() {
        let server = Server::start(&storage);
        server.ok_with_input(&["create", "-f", "-"], PODS);

        // Read: the pod itself.
        let read: serde_json::Value = serde_json::from_str(&server.ok(&[
            "get",
            "--raw",
            "/api/v1/namespaces/default/pods/app/ephemeralcontainers",
        ]))
        .unwrap();
        assert_eq!((read["kind"].as_str(), read["metadata"]["name"].as_str()), (Some("Pod"), Some("app")), "{backend}");

        // Added by a strategic merge patch, as kubectl debug sends it; defaulted as a container is.
        let add = r#"{"spec":{"ephemeralContainers":[{"name":"d1","image":"busybox","stdin":true,"tty":true}]}}"#;
        server.ok(&["patch", "pod", "app", SUB, "--type=strategic", "-p", add]);
        let pod = server.json(&["get", "pod", "app"]);
        assert_eq!(pod["spec"]["ephemeralContainers"][0]["name"], "d1", "{backend}: {pod}");
        assert_eq!(pod["spec"]["ephemeralContainers"][0]["terminationMessagePolicy"], "File", "{backend}");

        // PUT: only the ephemeral containers of the body count; the rest of it is ignored.
        let mut body = pod.clone();
        body["spec"]["containers"][0]["image"] = serde_json::json!("nginx");
        body["metadata"]["labels"] = serde_json::json!({"sneaked": "in"});
        body["spec"]["ephemeralContainers"]
            .as_array_mut()
            .unwrap()
            .push(serde_json::json!({"name": "d2", "image": "busybox"}));
        let path = "/api/v1/namespaces/default/pods/app/ephemeralcontainers";
        server.ok_with_input(&["replace", "--raw", path, "-f", "-"], &body.to_string());
        let pod = server.json(&["get", "pod", "app"]);
        let names: Vec<&str> =
            pod["spec"]["ephemeralContainers"].as_array().unwrap().iter().filter_map(|c| c["name"].as_str()).collect();
        assert_eq!(names, ["d1", "d2"], "{backend}");
        assert_eq!(pod["spec"]["containers"][0]["image"], "busybox", "{backend}");
        assert!(pod["metadata"]["labels"].is_null(), "{backend}: {pod}");

        // Edited or removed: upstream's 422.
        for (patch, refusal) in [
            (
                r#"[{"op":"replace","path":"/spec/ephemeralContainers/0/image","value":"nginx"}]"#,
                r#"spec.ephemeralContainers[d1]: Forbidden: existing ephemeral containers "d1" may not be changed"#,
            ),
            (
                r#"[{"op":"remove","path":"/spec/ephemeralContainers/0"}]"#,
                r#"spec.ephemeralContainers: Forbidden: existing ephemeral containers "d1" may not be removed"#,
            ),
        ] {
            let out = server.kubectl(&["patch", "pod", "app", SUB, "--type=json", "-p", patch]);
            let said = stderr(&out);
            assert!(!out.status.success() && said.contains(r#"The Pod "app" is invalid"#), "{backend}: {said}");
            assert!(said.contains(refusal), "{backend}: {said}");
        }
        // What an ephemeral container may not have.
        let ports =
            r#"{"spec":{"ephemeralContainers":[{"name":"p","image":"busybox","ports":[{"containerPort":80}]}]}}"#;
        let said = stderr(&server.kubectl(&["patch", "pod", "app", SUB, "--type=strategic", "-p", ports]));
        assert!(
            said.contains("spec.ephemeralContainers[2].ports: Forbidden: cannot be set for an Ephemeral Container"),
            "{backend}: {said}"
        );

        // Not through the pod itself: a PATCH or PUT of the pod that changes them is upstream's 422, and changes
        // nothing; one that leaves them as they are goes through.
        let upstream = "The Pod \"app\" is invalid: spec: Forbidden: pod updates may not change fields other than \
                        `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,\
                        `spec.tolerations` (only additions to existing tolerations),\
                        `spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";
        let removed = r#"[{"op":"remove","path":"/spec/ephemeralContainers"}]"#;
        let added = r#"[{"op":"add","path":"/spec/ephemeralContainers/-","value":{"name":"d3","image":"busybox"}}]"#;
        for patch in [removed, added] {
            let out = server.kubectl(&["patch", "pod", "app", "--type=json", "-p", patch]);
            let said = stderr(&out);
            assert!(!out.status.success() && said.contains(upstream), "{backend}: {said}");
        }
        let mut body = server.json(&["get", "pod", "app"]);
        body["spec"]["ephemeralContainers"][0]["image"] = serde_json::json!("nginx");
        let out = server.kubectl_with_input(&["replace", "-f", "-"], Some(&body.to_string()));
        let said = stderr(&out);
        assert!(!out.status.success() && said.contains(upstream), "{backend}: {said}");
        let pod = server.json(&["get", "pod", "app"]);
        let names: Vec<&str> =
            pod["spec"]["ephemeralContainers"].as_array().unwrap().iter().filter_map(|c| c["name"].as_str()).collect();
        assert_eq!(names, ["d1", "d2"], "{backend}");
        assert_eq!(pod["spec"]["ephemeralContainers"][0]["image"], "busybox", "{backend}");
        server.ok(&["label", "pod", "app", "touched=yes"]);
        let mut body = server.json(&["get", "pod", "app"]);
        body["spec"]["containers"][0]["image"] = serde_json::json!("busybox:1");
        server.ok_with_input(&["replace", "-f", "-"], &body.to_string());
        // Nor at create.
        let created = "apiVersion: v1\nkind: Pod\nmetadata: {name: born}\nspec:\n  containers: [{name: a, image: busybox}]\n  \
                       ephemeralContainers: [{name: e, image: busybox}]\n";
        let said = server.create_refused(created);
        assert!(said.contains("spec.ephemeralContainers: Forbidden: cannot be set on create"), "{backend}: {said}");

        // Pod Security judges them as the pod's other containers.
        let evil = r#"{"spec":{"ephemeralContainers":[{"name":"evil","image":"busybox","securityContext":{"privileged":true}}]}}"#;
        let out = server.kubectl(&["patch", "pod", "guarded", "-n", "locked", SUB, "--type=strategic", "-p", evil]);
        let said = stderr(&out);
        let refusal = r#"pods "guarded" is forbidden: violates PodSecurity "baseline:latest": privileged (container "evil" must not set securityContext.privileged=true)"#;
        assert!(!out.status.success() && said.contains(refusal), "{backend}: {said}");
        let fine = r#"{"spec":{"ephemeralContainers":[{"name":"fine","image":"busybox"}]}}"#;
        server.ok(&["patch", "pod", "guarded", "-n", "locked", SUB, "--type=strategic", "-p", fine]);
    }
}
