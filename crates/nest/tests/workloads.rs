//! Workloads on a cluster of real `nest` processes — API server, controller-manager, scheduler and simulated nodes —
//! driven with kubectl: ReplicaSets keep their pods, pods are scheduled where they fit and run on simulated nodes,
//! and a pod that fits nowhere says why.

mod common;

use common::{Component, ControllerManager, Server, backends, eventually};
use serde_json::Value;

const REPLICASET: &str = r#"
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: web, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx, resources: {requests: {cpu: 100m}}}]}
"#;

/// A cluster of processes on `storage`: API server, controller-manager, scheduler, and `nest node <node_args>`.
fn cluster(storage: &common::Storage, node_args: &[&str]) -> (Server, [Component; 3]) {
    let server = Server::start(storage);
    let controllers = ControllerManager::start(&server, "cm", 15);
    let scheduler = Component::run(&server, &["scheduler"]);
    let mut args = vec!["node", "--name", "sim"];
    args.extend_from_slice(node_args);
    let nodes = Component::run(&server, &args);
    (server, [controllers, scheduler, nodes])
}

/// Whether a pod's Ready condition is true.
fn pod_ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// The app=web pods: (name, node, phase, ready).
fn pods(server: &Server) -> Vec<(String, String, String, bool)> {
    let list = server.json(&["get", "pods", "-l", "app=web"]);
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let ready = pod_ready(p);
            let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (text(&p["metadata"]["name"]), text(&p["spec"]["nodeName"]), text(&p["status"]["phase"]), ready)
        })
        .collect()
}

fn running(server: &Server, n: usize) -> bool {
    let pods = pods(server);
    pods.len() == n && pods.iter().all(|(_, node, phase, ready)| !node.is_empty() && phase == "Running" && *ready)
}

#[test]
fn replica_sets_keep_their_pods_running_on_simulated_nodes() {
    for (backend, storage) in backends() {
        let (server, _cluster) = cluster(&storage, &["--count", "2", "--start-delay-ms", "100"]);
        eventually(30, "two Ready nodes", || {
            server.ok(&["get", "nodes", "-l", "nest.dev/runtime=simulated", "-o", "name"]).lines().count() == 2
        });

        server.apply_manifest(REPLICASET);
        eventually(30, "3 pods Running and Ready", || running(&server, 3));
        // Spread by the least-allocated rule: both nodes are used.
        let nodes: std::collections::BTreeSet<String> = pods(&server).into_iter().map(|p| p.1).collect();
        assert_eq!(nodes.len(), 2, "{backend}: {nodes:?}");
        let status = server.json(&["get", "rs", "web"])["status"].clone();
        eventually(30, "the ReplicaSet's status", || {
            server.json(&["get", "rs", "web"])["status"]["readyReplicas"] == 3
        });
        assert_eq!(status["replicas"], 3, "{backend}");

        server.ok(&["scale", "rs", "web", "--replicas=5"]);
        eventually(30, "5 pods Running", || running(&server, 5));
        server.ok(&["scale", "rs", "web", "--replicas=1"]);
        eventually(30, "1 pod left", || running(&server, 1));

        // A pod deleted by hand is replaced.
        let (survivor, ..) = pods(&server).remove(0);
        server.ok(&["delete", "pod", &survivor, "--wait=false"]);
        eventually(30, "a replacement", || running(&server, 1) && pods(&server)[0].0 != survivor);

        // A pod that fits nowhere is told why.
        server.ok(&["run", "lost", "--image=x", r#"--overrides={"spec":{"nodeSelector":{"zone":"nowhere"}}}"#]);
        eventually(30, "PodScheduled=False", || {
            server.ok(&[
                "get",
                "pod",
                "lost",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"PodScheduled\")].reason}",
            ]) == "Unschedulable"
        });
        let events = server.ok(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=lost",
            "-o",
            "jsonpath={.items[*].reason}",
        ]);
        assert!(events.contains("FailedScheduling"), "{backend}: {events}");
    }
}

/// The app=web pods' images, and how many of them exist and are ready.
fn census(server: &Server) -> (usize, usize, Vec<String>) {
    let list = server.json(&["get", "pods", "-l", "app=web"]);
    let items = list["items"].as_array().unwrap();
    let ready = items.iter().filter(|p| pod_ready(p)).count();
    let images = items.iter().map(|p| p["spec"]["containers"][0]["image"].as_str().unwrap_or("").to_string()).collect();
    (items.len(), ready, images)
}

fn set_image(server: &Server, image: &str) {
    let patch = format!(r#"[{{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"{image}"}}]"#);
    server.ok(&["patch", "deployment", "web", "--type=json", "-p", &patch]);
}

#[test]
fn deployments_roll_out_within_their_surge_and_unavailability_and_undo() {
    let (_, storage) = backends().remove(0);
    let (server, _cluster) = cluster(&storage, &["--count", "2", "--start-delay-ms", "300"]);

    server.ok(&["create", "deployment", "web", "--image=nginx:1", "--replicas=3"]);
    server.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    eventually(30, "3 pods Running", || running(&server, 3));
    server.ok(&["scale", "deployment", "web", "--replicas=5"]);
    eventually(30, "5 pods Running", || running(&server, 5));
    server.ok(&["scale", "deployment", "web", "--replicas=4"]);
    eventually(30, "4 pods Running", || running(&server, 4));

    // Replicas 4, maxSurge and maxUnavailable 25%: at most 5 pods, at least 3 of them ready, all along.
    set_image(&server, "nginx:2");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (count, ready, images) = census(&server);
        assert!(count <= 5, "more pods than replicas + maxSurge: {count}");
        assert!(ready >= 3, "fewer ready pods than replicas - maxUnavailable: {ready}");
        if count == 4 && ready == 4 && images.iter().all(|i| i == "nginx:2") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the rollout did not finish: {images:?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    server.ok(&["rollout", "status", "deployment/web", "--timeout=60s"]);
    let history = server.ok(&["rollout", "history", "deployment/web"]);
    assert!(history.contains('1') && history.contains('2'), "{history}");

    server.ok(&["rollout", "undo", "deployment/web"]);
    eventually(60, "the previous template back", || {
        let (count, ready, images) = census(&server);
        count == 4 && ready == 4 && images.iter().all(|i| i == "nginx:1")
    });
    let replica_sets = server.ok(&["get", "replicasets", "-o", "name"]);
    assert_eq!(replica_sets.lines().count(), 2, "one ReplicaSet per template: {replica_sets}");
}

/// How many ReplicaSets and pods of deployment `app` exist.
fn owned_by(server: &Server, app: &str) -> (usize, usize) {
    let selector = format!("app={app}");
    let count = |kind: &str| server.ok(&["get", kind, "-l", &selector, "-o", "name"]).lines().count();
    (count("replicasets"), count("pods"))
}

#[test]
fn owners_take_their_dependents_along_as_the_propagation_policy_says() {
    let (_, storage) = backends().remove(0);
    let (server, _cluster) = cluster(&storage, &["--start-delay-ms", "50"]);
    for app in ["background", "orphan", "foreground"] {
        server.ok(&["create", "deployment", app, "--image=nginx", "--replicas=2"]);
        eventually(30, "the deployment's pods", || owned_by(&server, app) == (1, 2));
    }

    // Background (kubectl's default): the owner goes at once, its dependents after it.
    server.ok(&["delete", "deployment", "background"]);
    eventually(30, "the ReplicaSet and pods to be collected", || owned_by(&server, "background") == (0, 0));

    // Orphan: the dependents stay, without the reference.
    server.ok(&["delete", "deployment", "orphan", "--cascade=orphan"]);
    eventually(30, "the orphaned Deployment to go", || {
        !server.kubectl(&["get", "deployment", "orphan"]).status.success()
    });
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert_eq!(owned_by(&server, "orphan"), (1, 2), "orphaned dependents stay");
    let rs = server.json(&["get", "replicasets", "-l", "app=orphan"]);
    assert!(rs["items"][0]["metadata"].get("ownerReferences").is_none_or(|r| r.as_array().unwrap().is_empty()));

    // Foreground: the owner stays, marked for deletion, until its blocking dependents are gone.
    server.ok(&["delete", "deployment", "foreground", "--cascade=foreground", "--wait=false"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (sets, pods) = owned_by(&server, "foreground");
        let owner = server.kubectl(&["get", "deployment", "foreground"]).status.success();
        assert!(owner || sets == 0, "the owner went before its ReplicaSet");
        if !owner && sets == 0 && pods == 0 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "foreground deletion did not finish: {sets} {pods} {owner}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn a_node_whose_agent_stops_goes_not_ready_within_the_grace_period() {
    let (_, storage) = backends().remove(0);
    let server = Server::start(&storage);
    let _controllers = Component::run(
        &server,
        &["controller-manager", "--identity", "cm", "--node-monitor-grace-period-seconds", "3"],
    );
    let _scheduler = Component::run(&server, &["scheduler"]);
    let mut node =
        Component::run(&server, &["node", "--name", "lone", "--lease-seconds", "1", "--start-delay-ms", "50"]);
    server.ok(&["create", "deployment", "web", "--image=nginx", "--replicas=1"]);
    eventually(30, "the pod Running", || running(&server, 1));

    node.kill();
    let stopped = std::time::Instant::now();
    let ready =
        || server.ok(&["get", "node", "lone", "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}"]);
    eventually(20, "the node NotReady", || ready() == "Unknown");
    // The Lease was last renewed up to a second before the kill; the controller looks every second.
    let took = stopped.elapsed();
    assert!(took <= std::time::Duration::from_secs(3 + 3), "NotReady after {took:?}, grace 3 s");
    let taints = server.ok(&["get", "node", "lone", "-o", "jsonpath={.spec.taints[*].key}"]);
    assert!(taints.contains("node.kubernetes.io/unreachable"), "{taints}");
    eventually(20, "the pod not Ready", || pods(&server).iter().all(|(_, _, _, ready)| !ready));
}

const JOBS: &str = r#"
apiVersion: batch/v1
kind: Job
metadata: {name: batch, namespace: default}
spec:
  completions: 3
  parallelism: 2
  template:
    metadata: {annotations: {nest.dev/exit-code: "0"}}
    spec: {restartPolicy: Never, containers: [{name: work, image: busybox}]}
---
apiVersion: batch/v1
kind: Job
metadata: {name: doomed, namespace: default}
spec:
  backoffLimit: 1
  template:
    metadata: {annotations: {nest.dev/exit-code: "1"}}
    spec: {restartPolicy: Never, containers: [{name: work, image: busybox}]}
"#;

#[test]
fn jobs_complete_within_their_parallelism_or_fail_past_their_backoff_limit() {
    let (_, storage) = backends().remove(0);
    let (server, _cluster) = cluster(&storage, &["--start-delay-ms", "200"]);
    server.apply_manifest(JOBS);

    let mut most_running = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let pods = server.json(&["get", "pods", "-l", "job-name=batch"]);
        let items = pods["items"].as_array().unwrap();
        let running =
            items.iter().filter(|p| !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))).count();
        most_running = most_running.max(running);
        let job = server.json(&["get", "job", "batch"]);
        let complete = job["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Complete" && c["status"] == "True");
        if complete {
            assert_eq!(job["status"]["succeeded"], 3);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the Job did not complete: {}", job["status"]);
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(most_running <= 2, "{most_running} pods ran at once, parallelism is 2");
    assert_eq!(server.ok(&["get", "pods", "-l", "job-name=batch", "-o", "name"]).lines().count(), 3);
    server.ok(&["wait", "--for=condition=complete", "job/batch", "--timeout=10s"]);

    server.ok(&["wait", "--for=condition=failed", "job/doomed", "--timeout=60s"]);
    let doomed = server.json(&["get", "job", "doomed"]);
    assert_eq!(doomed["status"]["failed"], 2, "backoffLimit 1: two failures");
}

#[test]
fn services_get_endpoints_and_endpoint_slices_of_their_pods() {
    let (_, storage) = backends().remove(0);
    let (server, _cluster) = cluster(&storage, &["--start-delay-ms", "50"]);
    server.ok(&["create", "deployment", "web", "--image=nginx", "--replicas=2", "--port=8080"]);
    server.ok(&["expose", "deployment", "web", "--port=80", "--target-port=8080"]);

    let addresses = || {
        let endpoints = server.kubectl(&["get", "endpoints", "web", "-o", "json"]);
        let endpoints: Value = serde_json::from_slice(&endpoints.stdout).unwrap_or(Value::Null);
        let subset = &endpoints["subsets"][0];
        (subset["addresses"].as_array().map_or(0, Vec::len), subset["ports"][0]["port"].as_i64())
    };
    eventually(30, "two ready addresses on port 8080", || addresses() == (2, Some(8080)));
    let slices = server.json(&["get", "endpointslices", "-l", "kubernetes.io/service-name=web"]);
    let endpoints = slices["items"][0]["endpoints"].as_array().unwrap();
    assert_eq!(endpoints.len(), 2);
    assert!(endpoints.iter().all(|e| e["conditions"]["ready"] == true), "{endpoints:?}");

    server.ok(&["scale", "deployment", "web", "--replicas=3"]);
    eventually(30, "three addresses", || addresses().0 == 3);
    server.ok(&["delete", "service", "web"]);
    eventually(30, "the Endpoints and EndpointSlice to go with the Service", || {
        !server.kubectl(&["get", "endpoints", "web"]).status.success()
            && server.ok(&["get", "endpointslices", "-o", "name"]).trim().is_empty()
    });
}

const DAEMONSET: &str = r#"
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: default}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: {containers: [{name: agent, image: agent:1}]}
"#;

#[test]
fn a_daemon_set_puts_one_pod_on_each_node() {
    let (_, storage) = backends().remove(0);
    let server = Server::start(&storage);
    let _controllers = ControllerManager::start(&server, "cm", 15);
    let _nodes = Component::run(&server, &["node", "--name", "sim", "--count", "3", "--start-delay-ms", "50"]);
    eventually(30, "three nodes", || server.ok(&["get", "nodes", "-o", "name"]).lines().count() == 3);
    server.apply_manifest(DAEMONSET);

    let placement = || -> Vec<(String, bool)> {
        let pods = server.json(&["get", "pods", "-l", "app=agent"]);
        let mut placed: Vec<(String, bool)> = pods["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (p["spec"]["nodeName"].as_str().unwrap_or("").to_string(), pod_ready(p)))
            .collect();
        placed.sort();
        placed
    };
    let expected: Vec<(String, bool)> = ["sim-0", "sim-1", "sim-2"].iter().map(|n| (n.to_string(), true)).collect();
    eventually(30, "one Ready pod per node", || placement() == expected);
    eventually(30, "the DaemonSet's status", || server.json(&["get", "ds", "agent"])["status"]["numberReady"] == 3);

    // A new template replaces the pods, one node at a time, ending with one new pod per node.
    let patch = r#"[{"op":"replace","path":"/spec/template/spec/containers/0/image","value":"agent:2"}]"#;
    server.ok(&["patch", "ds", "agent", "--type=json", "-p", patch]);
    eventually(60, "every node running the new template", || {
        let pods = server.json(&["get", "pods", "-l", "app=agent"]);
        let items = pods["items"].as_array().unwrap();
        items.len() == 3
            && items.iter().all(|p| p["spec"]["containers"][0]["image"] == "agent:2")
            && placement() == expected
    });
}

#[test]
fn recreate_replaces_every_pod_at_once_and_a_paused_deployment_waits() {
    let (_, storage) = backends().remove(0);
    let (server, _cluster) = cluster(&storage, &["--count", "2", "--start-delay-ms", "200"]);
    server.ok(&["create", "deployment", "web", "--image=nginx:1", "--replicas=3"]);
    server.ok(&[
        "patch",
        "deployment",
        "web",
        "--type=merge",
        "-p",
        r#"{"spec":{"strategy":{"type":"Recreate","rollingUpdate":null}}}"#,
    ]);
    eventually(30, "3 pods Running", || running(&server, 3));

    // Recreate: no new pod before every old one is gone.
    set_image(&server, "nginx:2");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (count, ready, images) = census(&server);
        assert!(
            !(images.contains(&"nginx:1".to_string()) && images.contains(&"nginx:2".to_string())),
            "old and new together: {images:?}"
        );
        if count == 3 && ready == 3 && images.iter().all(|i| i == "nginx:2") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the Recreate rollout did not finish: {images:?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    // Paused: a template change makes no new pods until resumed. (`kubectl rollout pause|resume` send strategic merge
    // patches, which nest does not serve yet; a merge patch sets the same field.)
    let pause = |paused: bool| format!(r#"{{"spec":{{"paused":{paused}}}}}"#);
    server.ok(&["patch", "deployment", "web", "--type=merge", "-p", &pause(true)]);
    set_image(&server, "nginx:3");
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert!(census(&server).2.iter().all(|i| i == "nginx:2"), "a paused Deployment rolled");
    server.ok(&["patch", "deployment", "web", "--type=merge", "-p", &pause(false)]);
    eventually(60, "the rollout after resuming", || {
        let (count, ready, images) = census(&server);
        count == 3 && ready == 3 && images.iter().all(|i| i == "nginx:3")
    });
}
