//! Workloads on a cluster of real `nest` processes — API server, controller-manager, scheduler and simulated nodes —
//! driven with kubectl: ReplicaSets keep their pods, pods are scheduled where they fit and run on simulated nodes,
//! and a pod that fits nowhere says why.

use crate::common;

use crate::common::{Component, ControllerManager, Server, backends, eventually};
use serde_json::{Value, json};

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

/// The Events about `kind` `name`: (type, reason, message).
fn events_of(server: &Server, kind: &str, name: &str) -> Vec<(String, String, String)> {
    let selector = format!("involvedObject.kind={kind},involvedObject.name={name}");
    let events = server.json(&["get", "events", "--field-selector", &selector]);
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| (text(&e["type"]), text(&e["reason"]), text(&e["message"])))
        .collect()
}

/// Whether `events` holds one of `type_` and `reason` whose message starts with `message`.
fn told(events: &[(String, String, String)], type_: &str, reason: &str, message: &str) -> bool {
    events.iter().any(|(t, r, m)| t == type_ && r == reason && m.starts_with(message))
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
/// The pods of `app=web` that are not terminating (those still shutting down count for neither bound, as in
/// Kubernetes), how many are ready, and their images.
fn census(server: &Server) -> (usize, usize, Vec<String>) {
    let list = server.json(&["get", "pods", "-l", "app=web"]);
    let items: Vec<&Value> =
        list["items"].as_array().unwrap().iter().filter(|p| p["metadata"]["deletionTimestamp"].is_null()).collect();
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
    // kubectl describe tells the rollout in the deployment controller's words, and each ReplicaSet its pods.
    let sets = server.json(&["get", "replicasets", "-l", "app=web"]);
    let of_image = |image: &str| {
        let sets = sets["items"].as_array().unwrap();
        let set = sets.iter().find(|s| s["spec"]["template"]["spec"]["containers"][0]["image"] == image).unwrap();
        set["metadata"]["name"].as_str().unwrap().to_string()
    };
    let (first, second) = (&of_image("nginx:1"), &of_image("nginx:2"));
    eventually(30, "ScalingReplicaSet events in kubectl describe deployment", || {
        let described = server.ok(&["describe", "deployment", "web"]);
        described.contains("ScalingReplicaSet")
            && described.contains(&format!("Scaled up replica set {first} from 0 to 3"))
            && described.contains(&format!("Scaled up replica set {first} from 3 to 5"))
            && described.contains(&format!("Scaled down replica set {first} from 5 to 4"))
            && described.contains(&format!("Scaled up replica set {second} from 0 to 1"))
            && described.contains(&format!("Scaled down replica set {first} from 4 to "))
    });
    let described = server.ok(&["describe", "replicaset", second]);
    assert!(described.contains("SuccessfulCreate") && described.contains("Created pod: "), "{described}");

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
        // The owner first: once it is seen gone, a ReplicaSet seen after that outlived it.
        let owner = server.kubectl(&["get", "deployment", "foreground"]).status.success();
        let (sets, pods) = owned_by(&server, "foreground");
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
    // Its only node down, the cluster is in upstream's disruption mode: the node is tainted so that nothing new is
    // scheduled to it, but not NoExecute, so that nothing is evicted for what may be the control plane's trouble.
    let taints = || server.ok(&["get", "node", "lone", "-o", "jsonpath={range .spec.taints[*]}{.key}:{.effect} {end}"]);
    eventually(5, "the node tainted unreachable", || taints().trim() == "node.kubernetes.io/unreachable:NoSchedule");
    eventually(20, "the pod not Ready", || pods(&server).iter().all(|(_, _, _, ready)| !ready));

    // Once the node is deleted, nothing will ever stop its pods: they are removed, and the ReplicaSet makes a new
    // one, which waits for a node.
    let (old, ..) = pods(&server).remove(0);
    server.ok(&["delete", "node", "lone"]);
    eventually(40, "the node's pod removed and replaced", || {
        let now = pods(&server);
        now.len() == 1 && now[0].0 != old && now[0].1.is_empty()
    });
}

/// Taint-based eviction: once a node is unreachable (another still Ready), a pod that tolerates that for 2 s is
/// deleted after 2 s (marked `DisruptionTarget`, with a `TaintManagerEviction` event) and its ReplicaSet makes
/// another, while a pod that tolerates it for ever stays — as does one whose `tolerationSeconds` is the largest
/// number there is, which must not bring the controllers down.
#[test]
fn pods_on_an_unreachable_node_are_evicted_once_their_toleration_runs_out() {
    let (_, storage) = backends().remove(0);
    let server = Server::start(&storage);
    let mut controllers = Component::run(
        &server,
        &["controller-manager", "--identity", "cm", "--node-monitor-grace-period-seconds", "3"],
    );
    let _scheduler = Component::run(&server, &["scheduler"]);
    let mut node =
        Component::run(&server, &["node", "--name", "lone", "--lease-seconds", "1", "--start-delay-ms", "50"]);
    let _other =
        Component::run(&server, &["node", "--name", "other", "--lease-seconds", "1", "--start-delay-ms", "50"]);
    let deployment = |name: &str, seconds: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}}}\nspec:\n  selector: {{matchLabels: {{app: {name}}}}}\n  \
             template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec:\n      nodeSelector: {{kubernetes.io/hostname: lone}}\n      \
             containers: [{{name: c, image: nginx}}]\n      \
             tolerations: [{{key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute{seconds}}}]\n"
        )
    };
    server.apply_manifest(&deployment("brief", ", tolerationSeconds: 2"));
    server.apply_manifest(&deployment("steady", ""));
    server.apply_manifest(&deployment("huge", ", tolerationSeconds: 9223372036854775807"));
    let pods_of =
        |app: &str| server.json(&["get", "pods", "-l", &format!("app={app}")])["items"].as_array().cloned().unwrap();
    let running = |app: &str| pods_of(app).iter().any(|p| p["status"]["phase"] == "Running");
    eventually(30, "the pods running", || running("brief") && running("steady") && running("huge"));
    let brief = pods_of("brief")[0]["metadata"]["name"].as_str().unwrap().to_string();

    node.kill();
    eventually(30, "the brief pod evicted and replaced", || {
        let pods = pods_of("brief");
        let old = pods.iter().find(|p| p["metadata"]["name"] == brief.as_str());
        let marked = old.is_none_or(|p| {
            p["metadata"]["deletionTimestamp"].is_string()
                && p["status"]["conditions"].as_array().into_iter().flatten().any(|c| {
                    c["type"] == "DisruptionTarget" && c["reason"] == "DeletionByTaintManager" && c["status"] == "True"
                })
        });
        marked && pods.iter().any(|p| p["metadata"]["name"] != brief.as_str())
    });
    let events = server.ok(&[
        "get",
        "events",
        "--field-selector",
        &format!("involvedObject.name={brief}"),
        "-o",
        "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}",
    ]);
    assert!(events.contains(&format!("TaintManagerEviction: Marking for deletion Pod default/{brief}")), "{events}");
    for app in ["steady", "huge"] {
        let pods = pods_of(app);
        assert!(pods.len() == 1 && pods[0]["metadata"]["deletionTimestamp"].is_null(), "{app} stays: {pods:?}");
    }
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert!(controllers.alive(), "the controller-manager survives: {}", controllers.log());
}

/// TaintNodesByCondition: a node is created tainted `not-ready`, and the taint goes once the node lifecycle controller
/// sees it Ready; each condition that keeps pods away becomes a `NoSchedule` taint, as does cordoning, and the
/// scheduler keeps pods that do not tolerate a taint off the node, saying which taint in kube-scheduler's words.
#[test]
fn a_nodes_conditions_become_taints_that_the_scheduler_keeps_to() {
    let (_, storage) = backends().remove(0);
    let server = Server::start(&storage);
    // No controller-manager yet: the node stays as admission made it, and nothing is scheduled to it.
    let _scheduler = Component::run(&server, &["scheduler"]);
    let _node = Component::run(&server, &["node", "--name", "sim", "--start-delay-ms", "50"]);
    let taints = || server.ok(&["get", "node", "sim", "-o", "jsonpath={range .spec.taints[*]}{.key}:{.effect} {end}"]);
    eventually(30, "the node registered", || server.kubectl(&["get", "node", "sim"]).status.success());
    let ready = server.ok(&["get", "node", "sim", "-o", "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}"]);
    assert_eq!(ready, "True", "the node registers Ready");
    assert_eq!(taints().trim(), "node.kubernetes.io/not-ready:NoSchedule");
    server.ok(&["run", "early", "--image=nginx", "--restart=Never"]);
    let scheduled = |pod: &str| {
        let pod = server.json(&["get", "pod", pod]);
        let condition = pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "PodScheduled")
            .cloned()
            .unwrap_or(Value::Null);
        (pod["spec"]["nodeName"].as_str().unwrap_or_default().to_string(), condition["message"].clone())
    };
    eventually(20, "the pod found unschedulable", || {
        scheduled("early").1
            == "0/1 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }."
    });

    let _controllers = ControllerManager::start(&server, "cm", 15);
    eventually(20, "the not-ready taint lifted", || taints().trim().is_empty());
    eventually(20, "the early pod scheduled", || scheduled("early").0 == "sim");

    // Memory pressure, as a kubelet reports it (a strategic merge of one condition).
    let pressure = |status: &str| {
        let patch = format!(r#"{{"status": {{"conditions": [{{"type": "MemoryPressure", "status": "{status}"}}]}}}}"#);
        server.ok(&["patch", "node", "sim", "--subresource=status", "-p", &patch]);
    };
    pressure("True");
    eventually(20, "the memory-pressure taint", || taints().trim() == "node.kubernetes.io/memory-pressure:NoSchedule");
    server.ok(&["run", "pressed", "--image=nginx", "--restart=Never"]);
    let tolerant = r#"{"spec": {"tolerations": [{"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"}]}}"#;
    server.ok(&["run", "tolerant", "--image=nginx", "--restart=Never", "--overrides", tolerant]);
    eventually(20, "the tolerant pod scheduled", || scheduled("tolerant").0 == "sim");
    eventually(20, "the other found unschedulable", || {
        scheduled("pressed").1
            == "0/1 nodes are available: 1 node(s) had untolerated taint {node.kubernetes.io/memory-pressure: }."
    });
    pressure("False");
    eventually(20, "the memory-pressure taint lifted", || taints().trim().is_empty());
    eventually(20, "the pressed pod scheduled", || scheduled("pressed").0 == "sim");

    // Cordoning is a taint too, and a taint of the admin's own is left alone.
    server.ok(&["taint", "node", "sim", "dedicated=db:NoSchedule"]);
    server.ok(&["cordon", "sim"]);
    eventually(20, "the unschedulable taint", || {
        taints().trim() == "dedicated:NoSchedule node.kubernetes.io/unschedulable:NoSchedule"
    });
    server.ok(&["uncordon", "sim"]);
    eventually(20, "the unschedulable taint lifted", || taints().trim() == "dedicated:NoSchedule");
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

    // kube-apiserver's generated selector: the Job's UID, on the template too, so that `kubectl logs job/batch`
    // and anything else selecting by it finds this Job's pods only.
    let batch = server.json(&["get", "job", "batch"]);
    let uid = batch["metadata"]["uid"].as_str().unwrap();
    assert_eq!(batch["spec"]["selector"], json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}));
    let labels = &batch["spec"]["template"]["metadata"]["labels"];
    for (key, value) in [
        ("batch.kubernetes.io/controller-uid", uid),
        ("batch.kubernetes.io/job-name", "batch"),
        ("controller-uid", uid),
        ("job-name", "batch"),
    ] {
        assert_eq!(labels[key], value, "{labels}");
    }

    server.ok(&["wait", "--for=condition=failed", "job/doomed", "--timeout=60s"]);
    let doomed = server.json(&["get", "job", "doomed"]);
    assert_eq!(doomed["status"]["failed"], 2, "backoffLimit 1: two failures");
    // The second pod waited the Job controller's back-off (10 s) after the first failed, rather than coming at once.
    let pods = server.json(&["get", "pods", "-l", "job-name=doomed"]);
    let mut made: Vec<i64> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["creationTimestamp"].as_str().unwrap().parse::<jiff::Timestamp>().unwrap().as_second())
        .collect();
    made.sort();
    assert_eq!(made.len(), 2);
    assert!(made[1] - made[0] >= 9, "the replacement pod came {} s after the first", made[1] - made[0]);

    // The Job controller's Events, in its words.
    eventually(10, "the Jobs' events", || {
        let (batch, doomed) = (events_of(&server, "Job", "batch"), events_of(&server, "Job", "doomed"));
        batch.iter().filter(|(_, r, m)| r == "SuccessfulCreate" && m.starts_with("Created pod: batch-")).count() == 3
            && told(&batch, "Normal", "Completed", "Job completed")
            && told(&doomed, "Warning", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
    });
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

    // A pod naming the Service as its subdomain is known under the Service by its hostname (`db-0.web`, as a
    // StatefulSet's pods are); one naming another subdomain is not.
    for (name, subdomain) in [("named", "web"), ("elsewhere", "other")] {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": name, "labels": {"app": "web"}},
                         "spec": {"hostname": format!("{name}-0"), "subdomain": subdomain,
                                  "containers": [{"name": "web", "image": "nginx", "ports": [{"containerPort": 8080}]}]}});
        server.apply_manifest(&pod.to_string());
    }
    eventually(30, "four addresses", || addresses().0 == 4);
    let hostnames = || {
        let endpoints = server.json(&["get", "endpoints", "web"]);
        let slices = server.json(&["get", "endpointslices", "-l", "kubernetes.io/service-name=web"]);
        let of = |list: &Value| -> Vec<(String, String)> {
            let mut named: Vec<(String, String)> = list
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|a| Some((a["targetRef"]["name"].as_str()?.into(), a["hostname"].as_str()?.into())))
                .collect();
            named.sort();
            named
        };
        (of(&endpoints["subsets"][0]["addresses"]), of(&slices["items"][0]["endpoints"]))
    };
    let wanted = vec![("named".to_string(), "named-0".to_string())];
    let both = (wanted.clone(), wanted);
    eventually(30, "named's hostname in the Endpoints and the EndpointSlice", || hostnames() == both);
    server.ok(&["delete", "pod", "named", "elsewhere"]);

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
    eventually(10, "the DaemonSet's events", || {
        let events = events_of(&server, "DaemonSet", "agent");
        events.iter().filter(|(_, r, m)| r == "SuccessfulCreate" && m.starts_with("Created pod: agent-")).count() == 6
            && events.iter().filter(|(_, r, m)| r == "SuccessfulDelete" && m.starts_with("Deleted pod: agent-")).count()
                == 3
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

const STATEFULSET: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: db, namespace: default}
spec: {clusterIP: None, selector: {app: db}, ports: [{port: 5432}]}
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db, namespace: default}
spec:
  serviceName: db
  replicas: 3
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}, annotations: {nest.dev/stop-seconds: "1"}}
    spec: {terminationGracePeriodSeconds: 10, containers: [{name: db, image: "postgres:16"}]}
  volumeClaimTemplates:
  - metadata: {name: data}
    spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
"#;

/// The pods of `app`, by name: (image, ready, terminating).
fn members(server: &Server, app: &str) -> std::collections::BTreeMap<String, (String, bool, bool)> {
    let list = server.json(&["get", "pods", "-l", &format!("app={app}")]);
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let image = p["spec"]["containers"][0]["image"].as_str().unwrap_or_default().to_string();
            let terminating = !p["metadata"]["deletionTimestamp"].is_null();
            (p["metadata"]["name"].as_str().unwrap().to_string(), (image, pod_ready(p), terminating))
        })
        .collect()
}

/// Polls the pods of `app` until `done` holds of them, checking `invariant` on every look.
fn watch_members(
    server: &Server,
    app: &str,
    what: &str,
    mut invariant: impl FnMut(&std::collections::BTreeMap<String, (String, bool, bool)>),
    done: impl Fn(&std::collections::BTreeMap<String, (String, bool, bool)>) -> bool,
) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let seen = members(server, app);
        invariant(&seen);
        if done(&seen) {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: still {seen:?}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn all_ready(seen: &std::collections::BTreeMap<String, (String, bool, bool)>, names: &[&str], image: &str) -> bool {
    seen.len() == names.len()
        && names.iter().all(|n| seen.get(*n).is_some_and(|(i, ready, gone)| i == image && *ready && !gone))
}

#[test]
fn a_stateful_set_creates_removes_and_updates_its_pods_in_ordinal_order() {
    let (_, storage) = backends().remove(0);
    let (server, _cluster) = cluster(&storage, &["--count", "2", "--start-delay-ms", "500"]);
    server.apply_manifest(STATEFULSET);

    // OrderedReady: no pod exists before the one below it is Ready.
    let ordered = |seen: &std::collections::BTreeMap<String, (String, bool, bool)>| {
        for k in 1..3 {
            if seen.contains_key(&format!("db-{k}")) {
                let below = seen.get(&format!("db-{}", k - 1));
                assert!(below.is_some_and(|p| p.1), "db-{k} exists before db-{} is Ready: {seen:?}", k - 1);
            }
        }
    };
    let names = ["db-0", "db-1", "db-2"];
    watch_members(&server, "db", "3 pods Ready in order", ordered, |seen| all_ready(seen, &names, "postgres:16"));
    server.ok(&["rollout", "status", "statefulset/db", "--timeout=60s"]);
    let pod = server.json(&["get", "pod", "db-1"]);
    assert_eq!(pod["spec"]["hostname"], "db-1");
    assert_eq!(pod["spec"]["subdomain"], "db");
    assert_eq!(pod["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"], "db-1");
    assert_eq!(pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"], "data-db-1");
    let claims = server.ok(&["get", "pvc", "-l", "app=db", "-o", "jsonpath={.items[*].metadata.name}"]);
    assert_eq!(claims, "data-db-0 data-db-1 data-db-2");
    // The StatefulSet controller's Events (recordPodEvent and the claim's), in its words.
    eventually(10, "the StatefulSet's events", || {
        let events = events_of(&server, "StatefulSet", "db");
        (0..3).all(|k| {
            told(&events, "Normal", "SuccessfulCreate", &format!("create Pod db-{k} in StatefulSet db successful"))
                && told(
                    &events,
                    "Normal",
                    "SuccessfulCreate",
                    &format!("create Claim data-db-{k} Pod db-{k} in StatefulSet db success"),
                )
        })
    });

    // A partitioned rolling update touches only the ordinals at or above the partition.
    let patch = r#"{"spec":{"updateStrategy":{"rollingUpdate":{"partition":2}},"template":{"spec":{"containers":[{"name":"db","image":"postgres:17"}]}}}}"#;
    server.ok(&["patch", "statefulset", "db", "--type=merge", "-p", patch]);
    watch_members(
        &server,
        "db",
        "db-2 updated",
        |_| {},
        |seen| seen.get("db-2").is_some_and(|p| p.0 == "postgres:17" && p.1 && !p.2),
    );
    let out = server.ok(&["rollout", "status", "statefulset/db", "--timeout=60s"]);
    assert!(out.contains("partitioned roll out complete: 1 new pods"), "{out}");
    let seen = members(&server, "db");
    assert_eq!((seen["db-0"].0.as_str(), seen["db-1"].0.as_str()), ("postgres:16", "postgres:16"));

    // Without the partition the rest follow, highest first, one at a time.
    server.ok(&[
        "patch",
        "statefulset",
        "db",
        "--type=merge",
        "-p",
        r#"{"spec":{"updateStrategy":{"rollingUpdate":{"partition":0}}}}"#,
    ]);
    let one_at_a_time = |seen: &std::collections::BTreeMap<String, (String, bool, bool)>| {
        let down = names.iter().filter(|n| seen.get(**n).is_none_or(|p| !p.1 || p.2)).count();
        assert!(down <= 1, "more than one pod down during the update: {seen:?}");
        if seen.get("db-0").is_some_and(|p| p.0 == "postgres:17") {
            assert_eq!(seen["db-1"].0, "postgres:17", "db-0 updated before db-1: {seen:?}");
        }
    };
    watch_members(&server, "db", "all updated", one_at_a_time, |seen| all_ready(seen, &names, "postgres:17"));
    // kubectl reports any set with a partition (0 included) this way.
    let out = server.ok(&["rollout", "status", "statefulset/db", "--timeout=60s"]);
    assert!(out.contains("partitioned roll out complete: 3 new pods"), "{out}");
    let history = server.ok(&["rollout", "history", "statefulset/db"]);
    assert_eq!(history.lines().filter(|l| l.trim_start().starts_with(['1', '2'])).count(), 2, "{history}");

    // Scaling down removes the highest ordinal first, and keeps the claims.
    server.ok(&["scale", "statefulset", "db", "--replicas=1"]);
    let highest_first = |seen: &std::collections::BTreeMap<String, (String, bool, bool)>| {
        if seen.get("db-1").is_none_or(|p| p.2) {
            assert!(!seen.contains_key("db-2"), "db-1 went before db-2 was gone: {seen:?}");
        }
    };
    watch_members(&server, "db", "scaled to 1", highest_first, |seen| all_ready(seen, &["db-0"], "postgres:17"));
    let claims = server.ok(&["get", "pvc", "-l", "app=db", "-o", "jsonpath={.items[*].metadata.name}"]);
    assert_eq!(claims, "data-db-0 data-db-1 data-db-2", "claims are retained");
    eventually(30, "status counts 1", || {
        let status = server.json(&["get", "sts", "db"])["status"].clone();
        status["replicas"] == 1 && status["readyReplicas"] == 1
    });
}

const PARALLEL: &str = r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: cache, namespace: default}
spec:
  replicas: 3
  podManagementPolicy: Parallel
  updateStrategy: {type: OnDelete}
  selector: {matchLabels: {app: cache}}
  template:
    metadata: {labels: {app: cache}}
    spec: {containers: [{name: cache, image: "redis:7"}]}
"#;

#[test]
fn a_parallel_stateful_set_starts_together_and_on_delete_waits_for_deletions() {
    let (_, storage) = backends().remove(0);
    let (server, _cluster) = cluster(&storage, &["--start-delay-ms", "1500"]);
    server.apply_manifest(PARALLEL);
    let names = ["cache-0", "cache-1", "cache-2"];
    let mut together = false;
    watch_members(
        &server,
        "cache",
        "3 pods Ready",
        |seen| together |= seen.len() == 3 && seen.values().all(|p| !p.1),
        |seen| all_ready(seen, &names, "redis:7"),
    );
    assert!(together, "Parallel: all three pods should exist before any is Ready");

    let patch = r#"{"spec":{"template":{"spec":{"containers":[{"name":"cache","image":"redis:8"}]}}}}"#;
    server.ok(&["patch", "statefulset", "cache", "--type=merge", "-p", patch]);
    eventually(30, "the new revision observed", || {
        let set = server.json(&["get", "sts", "cache"]);
        set["status"]["observedGeneration"] == set["metadata"]["generation"]
            && set["status"]["updateRevision"] != set["status"]["currentRevision"]
    });
    let seen = members(&server, "cache");
    assert!(all_ready(&seen, &names, "redis:7"), "OnDelete replaced pods by itself: {seen:?}");
    // Without waiting: kubectl's wait for the deletion can miss it when the set recreates the pod at once (the
    // list it watches from already holds the new cache-1), and would then wait forever.
    server.ok(&["delete", "pod", "cache-1", "--wait=false"]);
    watch_members(
        &server,
        "cache",
        "cache-1 recreated",
        |_| {},
        |seen| seen.get("cache-1").is_some_and(|p| p.0 == "redis:8" && p.1 && !p.2),
    );
    let seen = members(&server, "cache");
    assert_eq!((seen["cache-0"].0.as_str(), seen["cache-2"].0.as_str()), ("redis:7", "redis:7"));
    assert_eq!(server.json(&["get", "sts", "cache"])["status"]["updatedReplicas"], 1);
}

const PODS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: slow, namespace: default, annotations: {nest.dev/stop-seconds: "60"}}
spec: {terminationGracePeriodSeconds: 3, containers: [{name: c, image: app}]}
---
apiVersion: v1
kind: Pod
metadata: {name: quick, namespace: default, annotations: {nest.dev/stop-seconds: "1"}}
spec: {terminationGracePeriodSeconds: 600, containers: [{name: c, image: app}]}
---
apiVersion: v1
kind: Pod
metadata: {name: warming, namespace: default}
spec: {containers: [{name: c, image: app, readinessProbe: {initialDelaySeconds: 3, tcpSocket: {port: 80}}}]}
---
apiVersion: v1
kind: Pod
metadata: {name: sick, namespace: default, labels: {app: sick}, annotations: {nest.dev/ready: "false"}}
spec: {containers: [{name: c, image: app}]}
"#;

#[test]
fn simulated_pods_are_ready_as_declared_and_stop_within_their_grace_period() {
    let (_, storage) = backends().remove(0);
    let (server, _cluster) = cluster(&storage, &["--start-delay-ms", "100"]);
    server.apply_manifest(PODS);
    let phase = |pod: &str| server.ok(&["get", "pod", pod, "-o", "jsonpath={.status.phase}"]);
    let ready = |pod: &str| pod_ready(&server.json(&["get", "pod", pod]));
    eventually(30, "all Running", || ["slow", "quick", "warming", "sick"].iter().all(|p| phase(p) == "Running"));

    // Readiness as declared: after the probe's initial delay, and never while the annotation says it fails.
    let started = std::time::Instant::now();
    assert!(!ready("warming"), "Ready before its readiness probe's initial delay");
    eventually(30, "warming Ready", || ready("warming"));
    assert!(started.elapsed() >= std::time::Duration::from_secs(1), "Ready too soon: {:?}", started.elapsed());
    assert!(!ready("sick"));
    server.ok(&["annotate", "pod", "sick", "--overwrite", "nest.dev/ready=true"]);
    eventually(30, "sick Ready once its probe passes", || ready("sick"));

    // A pod whose containers ignore SIGTERM stays until its grace period of 3 s ends, then goes.
    let asked = std::time::Instant::now();
    server.ok(&["delete", "pod", "slow", "--wait=false"]);
    let deleting = server.json(&["get", "pod", "slow"]);
    assert_eq!(deleting["metadata"]["deletionGracePeriodSeconds"], 3, "{deleting}");
    eventually(30, "slow gone", || !server.ok(&["get", "pods", "-o", "name"]).contains("pod/slow"));
    let took = asked.elapsed();
    assert!(took >= std::time::Duration::from_secs(2), "removed after {took:?}, before its grace period ended");

    // One that stops in a second does not wait out its grace period of ten minutes.
    server.ok(&["delete", "pod", "quick", "--timeout=60s"]);
    // And a forced deletion does not wait for the node at all.
    server.ok(&["delete", "pod", "sick", "--grace-period=0", "--force"]);
    assert!(server.kubectl(&["get", "pod", "sick"]).status.code() != Some(0), "sick survived a forced deletion");
}

/// A ReplicationController and the Service in front of it, one multi-document file as old manifests have them.
const REPLICATION_CONTROLLER: &str = r#"
apiVersion: v1
kind: ReplicationController
metadata: {name: web, namespace: default}
spec:
  replicas: 3
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx, resources: {requests: {cpu: 100m}}}]}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  selector: {app: web}
  ports: [{port: 80}]
"#;

#[test]
fn replication_controllers_keep_their_pods_and_orphan_them_by_default() {
    for (backend, storage) in backends() {
        let (server, _cluster) = cluster(&storage, &["--count", "2", "--start-delay-ms", "100"]);
        let created = server.apply_manifest(REPLICATION_CONTROLLER);
        assert!(created.contains("replicationcontroller/web created") && created.contains("service/web created"));
        // Defaulted from the template, as SetDefaults_ReplicationController does.
        let rc = server.json(&["get", "rc", "web"]);
        assert_eq!(rc["spec"]["selector"], json!({"app": "web"}), "{backend}: {rc}");
        assert_eq!(rc["metadata"]["labels"], json!({"app": "web"}), "{backend}: {rc}");
        eventually(30, "3 pods Running and Ready", || running(&server, 3));
        eventually(30, "the controller's status", || {
            server.json(&["get", "rc", "web"])["status"]["readyReplicas"] == 3
        });
        let table = server.ok(&["get", "rc", "web", "-o", "wide"]);
        let mut lines = table.lines().map(|l| l.split_whitespace().collect::<Vec<_>>());
        assert_eq!(
            lines.next().unwrap(),
            ["NAME", "DESIRED", "CURRENT", "READY", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"],
            "{table}"
        );
        let row = lines.next().unwrap();
        assert_eq!(
            (row[0], row[1], row[2], row[3], row[5], row[6], row[7]),
            ("web", "3", "3", "3", "web", "nginx", "app=web")
        );
        // Each pod is the controller's.
        let owners =
            server.ok(&["get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].metadata.ownerReferences[0].kind}"]);
        assert_eq!(owners.split_whitespace().collect::<Vec<_>>(), ["ReplicationController"; 3], "{backend}");

        assert!(server.ok(&["scale", "rc", "web", "--replicas=1"]).contains("replicationcontroller/web scaled"));
        eventually(30, "1 pod left", || running(&server, 1));
        server.ok(&["scale", "rc", "web", "--replicas=2"]);
        eventually(30, "2 pods", || running(&server, 2));

        // A DELETE that says nothing of propagation orphans a ReplicationController's pods (its strategy's default):
        // they stay, no longer owned.
        server.ok(&["delete", "--raw", "/api/v1/namespaces/default/replicationcontrollers/web"]);
        eventually(30, "the controller gone", || !server.kubectl(&["get", "rc", "web"]).status.success());
        eventually(30, "the pods orphaned", || {
            let owners =
                server.ok(&["get", "pods", "-l", "app=web", "-o", "jsonpath={.items[*].metadata.ownerReferences}"]);
            owners.trim().is_empty()
        });
        std::thread::sleep(std::time::Duration::from_secs(2));
        assert!(running(&server, 2), "{backend}: {:?}", pods(&server));
    }
}

/// StorageObjectInUseProtection and the pvc- and pv-protection controllers: a claim a pod uses outlives its deletion
/// until the pod is gone, and its volume goes once Released.
#[test]
fn a_claim_in_use_is_kept_until_its_pod_is_gone() {
    let (_, storage) = backends().remove(0);
    let (server, _cluster) = cluster(&storage, &[]);
    server.apply_manifest(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data, namespace: default}\n\
         spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {name: user, namespace: default}\n\
         spec: {containers: [{name: c, image: nginx}], volumes: [{name: d, persistentVolumeClaim: {claimName: data}}]}\n",
    );
    let claim = server.json(&["get", "pvc", "data"]);
    assert_eq!(claim["metadata"]["finalizers"], json!(["kubernetes.io/pvc-protection"]), "{claim}");
    eventually(30, "the claim Bound to a local volume", || {
        server.json(&["get", "pvc", "data"])["status"]["phase"] == "Bound"
    });
    let volume = server.json(&["get", "pvc", "data"])["spec"]["volumeName"].as_str().unwrap().to_string();
    assert_eq!(server.json(&["get", "pv", &volume])["metadata"]["finalizers"], json!(["kubernetes.io/pv-protection"]));

    server.ok(&["delete", "pvc", "data", "--wait=false"]);
    std::thread::sleep(std::time::Duration::from_secs(3));
    let claim = server.json(&["get", "pvc", "data"]);
    assert!(claim["metadata"]["deletionTimestamp"].is_string(), "the pod still uses it: {claim}");
    let table = server.ok(&["get", "pvc", "data", "--no-headers"]);
    assert!(table.contains("Terminating"), "{table}");

    server.ok(&["delete", "pod", "user", "--grace-period=0", "--force"]);
    eventually(30, "the claim gone", || !server.kubectl(&["get", "pvc", "data"]).status.success());
    eventually(30, "its volume gone", || !server.kubectl(&["get", "pv", &volume]).status.success());
}
