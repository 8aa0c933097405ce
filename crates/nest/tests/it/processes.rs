//! The process runtime: pods whose images map to the `nest` binary run as real processes of `nest debug …`, each on
//! its own loopback address, with their volumes and environment, restarted and probed as Kubernetes does, stopped
//! within their grace period, and never left behind or duplicated by a node that stops and starts again.
//!
//! Each test gives its node its own loopback range, so tests running at once never share an address.

use crate::common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use crate::common::fixtures::echo_deployment;
use crate::common::registry::docker_io_mirror;
use crate::common::{Component, ControllerManager, Server, eventually};
use serde_json::Value;

/// A cluster whose one node runs pods as processes: API server (its Services in loopback range `service_cidr`),
/// controller-manager, scheduler, service proxy, and `nest node --runtime process` with its pods in `pod_cidr` and
/// its files in a temporary directory.
struct Cluster {
    server: Server,
    node_dir: tempfile::TempDir,
    node_args: Vec<String>,
    node: Option<Component>,
    _others: [Component; 3],
}

impl Cluster {
    fn start(pod_cidr: &str, service_cidr: &str, extra: &[&str]) -> Cluster {
        let server = Server::start_with(&["--service-cidr", service_cidr, "--enable-admission-plugins=ServiceAccount"]);
        let controllers = ControllerManager::start(&server, "cm", 15);
        let scheduler = Component::run(&server, &["scheduler"]);
        let proxy = Component::run(&server, &["proxy"]);
        let node_dir = tempfile::tempdir().unwrap();
        let mut node_args: Vec<String> =
            ["node", "--name", "proc", "--runtime", "process", "--crash-backoff-seconds", "1"]
                .iter()
                .map(|s| s.to_string())
                .collect();
        node_args.extend([
            "--pod-cidr".into(),
            pod_cidr.into(),
            "--data-dir".into(),
            node_dir.path().display().to_string(),
        ]);
        let ca_dir = server.data_dir().join("pki").display().to_string();
        node_args.extend(["--ca-dir".into(), ca_dir, "--kubelet-port".into(), "0".into()]);
        node_args.extend(extra.iter().map(|s| s.to_string()));
        let mut cluster = Cluster { server, node_dir, node_args, node: None, _others: [controllers, scheduler, proxy] };
        cluster.start_node();
        cluster
    }

    fn start_node(&mut self) {
        let args: Vec<&str> = self.node_args.iter().map(String::as_str).collect();
        self.node = Some(Component::run(&self.server, &args));
    }

    /// The log file of run `restart` of `container` in pod `pod`.
    fn log(&self, pod: &str, container: &str, restart: u32) -> String {
        let uid = self.server.ok(&["get", "pod", pod, "-o", "jsonpath={.metadata.uid}"]);
        let path = self
            .node_dir
            .path()
            .join("proc/pods")
            .join(uid)
            .join("logs")
            .join(container)
            .join(format!("{restart}.log"));
        std::fs::read_to_string(path).unwrap_or_default()
    }
}

fn pod(server: &Server, name: &str) -> Value {
    server.json(&["get", "pod", name])
}

fn ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().into_iter().flatten().any(|c| c["type"] == "Ready" && c["status"] == "True")
}

use crate::common::up::processes_with;

/// GET `path` from `address`: the body, or the error.
fn get(address: &str, path: &str) -> Result<String, String> {
    let mut stream = std::net::TcpStream::connect(address).map_err(|e| e.to_string())?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream.read_to_string(&mut response).map_err(|e| e.to_string())?;
    Ok(response.split("\r\n\r\n").nth(1).unwrap_or_default().to_string())
}

/// The echo pods: (name, IP, ready).
fn echoes(server: &Server) -> Vec<(String, String, bool)> {
    let list = server.json(&["get", "pods", "-l", "app=echo"]);
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let ip = p["status"]["podIP"].as_str().unwrap_or_default().to_string();
            (p["metadata"]["name"].as_str().unwrap().to_string(), ip, ready(p))
        })
        .collect()
}

#[test]
fn pods_run_as_processes_on_their_own_loopback_addresses() {
    let cluster = Cluster::start("127.11.0.0/16", "127.111.0.0/16", &[]);
    let server = &cluster.server;
    eventually(30, "a process node", || {
        server.ok(&["get", "nodes", "-l", "nest.dev/runtime=process", "-o", "name"]).trim() == "node/proc"
    });
    server.apply_manifest(&echo_deployment(Some("default"), 3, "/"));
    eventually(60, "3 echo pods Ready", || {
        let pods = echoes(server);
        pods.len() == 3 && pods.iter().all(|p| p.2)
    });
    let pods = echoes(server);
    let ips: std::collections::BTreeSet<&str> = pods.iter().map(|p| p.1.as_str()).collect();
    assert_eq!(ips.len(), 3, "distinct addresses: {pods:?}");
    for (name, ip, _) in &pods {
        assert!(ip.starts_with("127.11."), "{ip} is not in the node's range");
        // Each pod listens on the same port of its own address, and answers as itself.
        let body = get(&format!("{ip}:8080"), "/hello").unwrap();
        assert_eq!(body.trim(), format!("{name} {ip}:8080 /hello"));
        // Its output goes to its log, which kubectl reads through the API server and the node's kubelet API.
        eventually(10, "the request logged", || cluster.log(name, "echo", 0).contains("GET /hello 200"));
        let logs = server.ok(&["logs", name]);
        assert!(logs.starts_with(&format!("http-echo {name} listening on {ip}:8080")), "{logs}");
        assert!(logs.contains("GET /hello 200"), "{logs}");
    }
    let (first, first_ip, _) = &pods[0];

    // The kubelet API answers the API server's client certificate only.
    let port = server.json(&["get", "node", "proc"])["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"].clone();
    let url = format!("https://127.0.1.1:{port}/containerLogs/default/{first}/echo");
    let pki = server.data_dir().join("pki");
    let curl = |user: Option<&str>| {
        let mut command = std::process::Command::new("curl");
        command.args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"]).arg(pki.join("ca.crt")).arg(&url);
        if let Some(user) = user {
            command
                .arg("--cert")
                .arg(pki.join(format!("{user}.crt")))
                .arg("--key")
                .arg(pki.join(format!("{user}.key")));
        }
        String::from_utf8_lossy(&command.output().expect("curl").stdout).to_string()
    };
    assert_eq!(curl(Some("apiserver-kubelet-client")), "200");
    assert_eq!(curl(Some("admin")), "403", "a cluster admin's certificate is not the API server's");
    assert_eq!(curl(None), "000", "no client certificate, no TLS session");
    let last = server.ok(&["logs", first, "--tail=1", "--timestamps"]);
    assert_eq!(last.lines().count(), 1, "{last}");
    assert!(last.starts_with("20") && last.contains(" GET /"), "a timestamped line: {last}");

    // kubectl logs -f follows: a request made after it started shows up.
    let mut follow = std::process::Command::new(common::KUBECTL)
        .args(["logs", "-f", first])
        .env("KUBECONFIG", &server.kubeconfig)
        .env("KUBECACHEDIR", server.cache.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (lines, seen) = std::sync::mpsc::channel();
    let stdout = follow.stdout.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    get(&format!("{first_ip}:8080"), "/followed").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let line = seen.recv_timeout(deadline.saturating_duration_since(Instant::now())).expect("the followed line");
        if line.contains("GET /followed 200") {
            break;
        }
    }
    let _ = follow.kill();
    let _ = follow.wait();
    assert_eq!(processes_with("--listen 127.11.").len(), 3, "one process per pod");

    // A ClusterIP Service in front of them answers on this machine, through the proxy, from each pod in turn.
    server.ok(&["expose", "deployment", "echo", "--port=80", "--target-port=8080"]);
    let cluster_ip = server.ok(&["get", "service", "echo", "-o", "jsonpath={.spec.clusterIP}"]);
    assert!(cluster_ip.starts_with("127.111."), "{cluster_ip}");
    let service = format!("{cluster_ip}:80");
    eventually(30, "the Service answering", || get(&service, "/").is_ok());
    let answered: std::collections::BTreeSet<String> = (0..9)
        .map(|_| get(&service, "/via-service").unwrap().split(' ').next().unwrap_or_default().to_string())
        .collect();
    let names: std::collections::BTreeSet<String> = pods.iter().map(|p| p.0.clone()).collect();
    assert_eq!(answered, names, "every pod answers through the Service");

    server.ok(&["scale", "deployment", "echo", "--replicas=0"]);
    eventually(30, "no echo pods", || echoes(server).is_empty());
    for (_, ip, _) in &pods {
        assert!(get(&format!("{ip}:8080"), "/").is_err(), "{ip} still answers after scaling to 0");
    }
    eventually(30, "the Service refusing connections", || get(&service, "/").is_err_and(|e| e.contains("refused")));
    assert!(processes_with("--listen 127.11.").is_empty(), "processes left after their pods went");
}

const FAILING: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: crasher, namespace: default}
spec:
  containers: [{name: main, image: nest, args: [debug, exit, --code, "3"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: once, namespace: default}
spec:
  restartPolicy: Never
  containers: [{name: main, image: nest, args: [debug, exit, --code, "0"]}]
---
apiVersion: v1
kind: Pod
metadata: {name: sickly, namespace: default}
spec:
  containers:
  - name: main
    image: nest
    args: [debug, http-echo, --listen, "$(POD_IP):8080", --healthy-for-seconds, "2"]
    env: [{name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}]
    livenessProbe: {httpGet: {path: /healthz, port: 8080}, periodSeconds: 1, failureThreshold: 1}
---
apiVersion: v1
kind: Pod
metadata: {name: unready, namespace: default, labels: {app: unready}}
spec:
  containers:
  - name: main
    image: nest
    args: [debug, http-echo, --listen, "$(POD_IP):8080"]
    env: [{name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}]
    ports: [{name: web, containerPort: 8080}]
    readinessProbe: {tcpSocket: {port: 9999}, periodSeconds: 1}
---
apiVersion: v1
kind: Service
metadata: {name: unready, namespace: default}
spec: {selector: {app: unready}, ports: [{port: 80, targetPort: web}]}
---
apiVersion: v1
kind: Pod
metadata: {name: probed, namespace: default}
spec:
  containers:
  - name: main
    image: nest
    args: [debug, cat]
    startupProbe: {exec: {command: [nest, debug, exit, --code, "0"]}, periodSeconds: 1}
    readinessProbe: {exec: {command: [nest, debug, exit, --code, "0"]}, periodSeconds: 1}
---
apiVersion: v1
kind: Pod
metadata: {name: misprobed, namespace: default}
spec:
  containers:
  - name: main
    image: nest
    args: [debug, cat]
    readinessProbe: {exec: {command: [cat, /etc/shadow]}, periodSeconds: 1}
---
apiVersion: v1
kind: Pod
metadata: {name: refused, namespace: default}
spec:
  containers: [{name: main, image: nginx}]
"#;

#[test]
fn crashing_containers_back_off_and_probes_restart_or_unready_them() {
    let cluster = Cluster::start("127.12.0.0/16", "127.112.0.0/16", &[]);
    let server = &cluster.server;
    server.apply_manifest(FAILING);

    // Exits with 3, again and again: restarted, with back-off between the restarts.
    eventually(60, "crasher in CrashLoopBackOff", || {
        let status = &pod(server, "crasher")["status"]["containerStatuses"][0];
        status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
            && status["restartCount"].as_i64().unwrap_or(0) >= 1
            && status["lastState"]["terminated"]["exitCode"] == 3
    });
    assert!(cluster.log("crasher", "main", 0).contains("exiting with code 3"));
    let previous = server.ok(&["logs", "crasher", "--previous"]);
    assert_eq!(previous.trim(), "exiting with code 3 after 0 ms");
    let refused = server.kubectl(&["logs", "once", "--previous"]);
    assert!(!refused.status.success(), "a container never restarted has no previous log");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("previous terminated container"));
    // kubectl describe tells what happened, in the kubelet's words.
    eventually(30, "crasher's events in kubectl describe", || {
        let described = server.ok(&["describe", "pod", "crasher"]);
        described.contains("Created container: main")
            && described.contains("Started container main")
            && described.contains("Back-off restarting failed container main in pod crasher_default(")
    });
    // Counted as the kubelet's recorder counts them: one Event per thing that happened, its count going up with each
    // restart, not an Event per restart.
    eventually(60, "crasher's Started event counted twice or more", || {
        let events = server.json(&["get", "events", "--field-selector", "involvedObject.name=crasher"]);
        let items = events["items"].as_array().cloned().unwrap_or_default();
        let started: Vec<&Value> = items.iter().filter(|e| e["reason"] == "Started").collect();
        started.len() == 1 && started[0]["count"].as_i64().unwrap_or(0) >= 2
    });
    let events = server.json(&["get", "events", "--field-selector", "involvedObject.name=crasher"]);
    let started = events["items"].as_array().unwrap().iter().find(|e| e["reason"] == "Started").unwrap().clone();
    assert_eq!(started["source"]["component"], "kubelet", "{started}");
    assert!(started["source"]["host"].as_str().is_some_and(|h| !h.is_empty()), "{started}");
    assert!(started["lastTimestamp"].as_str() >= started["firstTimestamp"].as_str(), "{started}");
    assert!(started["metadata"]["name"].as_str().unwrap().starts_with("crasher."), "{started}");

    // restartPolicy Never and exit code 0: Succeeded, not restarted.
    eventually(30, "once Succeeded", || pod(server, "once")["status"]["phase"] == "Succeeded");
    assert_eq!(pod(server, "once")["status"]["containerStatuses"][0]["restartCount"], 0);

    // /healthz fails after two seconds: the liveness probe kills the process, which is restarted.
    eventually(60, "sickly restarted by its liveness probe", || {
        let status = &pod(server, "sickly")["status"]["containerStatuses"][0];
        status["restartCount"].as_i64().unwrap_or(0) >= 1 && status["lastState"]["terminated"]["exitCode"] == 137
    });
    eventually(30, "sickly's Unhealthy and Killing events", || {
        let events = server.json(&["get", "events", "--field-selector", "involvedObject.name=sickly"]);
        let told = |reason: &str, starts: &str| {
            events["items"].as_array().into_iter().flatten().any(|e| {
                e["reason"] == reason
                    && e["message"].as_str().is_some_and(|m| m.starts_with(starts))
                    && e["involvedObject"]["fieldPath"] == "spec.containers{main}"
            })
        };
        told("Unhealthy", "Liveness probe failed: ") && told("Killing", "Container main failed liveness probe")
    });

    // A readiness probe that never passes: Running, not Ready, and not an address the Service sends to.
    eventually(30, "unready Running", || pod(server, "unready")["status"]["phase"] == "Running");
    let ip = pod(server, "unready")["status"]["podIP"].as_str().unwrap().to_string();
    eventually(30, "unready among the Service's not-ready addresses", || {
        let endpoints = server.json(&["get", "endpoints", "unready"]);
        endpoints["subsets"][0]["notReadyAddresses"][0]["ip"] == ip.as_str()
    });
    assert!(!ready(&pod(server, "unready")));
    assert!(get(&format!("{ip}:8080"), "/").is_ok(), "the process itself runs");
    let cluster_ip = server.ok(&["get", "service", "unready", "-o", "jsonpath={.spec.clusterIP}"]);
    let refused = get(&format!("{cluster_ip}:80"), "/");
    assert!(refused.as_ref().is_err_and(|e| e.contains("refused")), "the Service sent to an unready pod: {refused:?}");

    // Exec probes run in the container's sandbox: the allowlisted programs by name, the system's programs, and none
    // of the host's files (the host has an /etc/shadow; the sandbox has not).
    eventually(30, "probed Ready", || ready(&pod(server, "probed")));
    assert_eq!(pod(server, "probed")["status"]["containerStatuses"][0]["started"], true);
    eventually(30, "misprobed Running", || pod(server, "misprobed")["status"]["phase"] == "Running");
    assert!(!ready(&pod(server, "misprobed")), "an exec probe read the host's /etc/shadow");

    // nginx, which no registry here serves (no network, no mirror): the pod waits, ErrImagePull then
    // ImagePullBackOff, with the kubelet's Events, and is never reported Running.
    eventually(60, "refused backing off", || {
        let status = pod(server, "refused")["status"].clone();
        assert_ne!(status["phase"], "Running", "a pod whose image no registry gave is Running: {status}");
        assert_ne!(status["containerStatuses"][0]["ready"], true, "{status}");
        status["containerStatuses"][0]["state"]["waiting"]["reason"] == "ImagePullBackOff"
    });
    assert_eq!(pod(server, "refused")["status"]["containerStatuses"][0]["image"], "nginx", "the pod's own text");
    let events = server.ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=refused",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    for told in [
        "Pulling image \"nginx\"",
        "Failed to pull image \"nginx\"",
        "Error: ErrImagePull",
        "Back-off pulling image \"nginx\"",
    ] {
        assert!(events.contains(told), "{told} not in {events}");
    }
}

const CONFIGURED: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: default}
data: {greeting: hello, colour: blue}
---
apiVersion: v1
kind: Secret
metadata: {name: creds, namespace: default}
stringData: {password: s3cret}
---
apiVersion: v1
kind: Pod
metadata: {name: reader, namespace: default, labels: {tier: backend}}
spec:
  terminationGracePeriodSeconds: 30
  containers:
  - name: main
    image: nest
    command: [nest]
    args: [debug, cat, /etc/config/greeting, /etc/secret/password, /etc/podinfo/labels,
           --env, GREETING, --env, PASSWORD, --env, CONFIG_DIR, --env, MY_NAMESPACE, --env, CFG_colour, --env, CPUS]
    env:
    - {name: GREETING, valueFrom: {configMapKeyRef: {name: settings, key: greeting}}}
    - {name: PASSWORD, valueFrom: {secretKeyRef: {name: creds, key: password}}}
    - {name: CONFIG_DIR, value: /etc/config}
    - {name: MY_NAMESPACE, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
    - {name: CPUS, valueFrom: {resourceFieldRef: {resource: limits.cpu}}}
    envFrom: [{prefix: CFG_, configMapRef: {name: settings}}]
    resources: {limits: {cpu: "2"}}
    volumeMounts:
    - {name: config, mountPath: /etc/config}
    - {name: secret, mountPath: /etc/secret}
    - {name: podinfo, mountPath: /etc/podinfo}
  volumes:
  - {name: config, configMap: {name: settings}}
  - {name: secret, secret: {secretName: creds}}
  - {name: podinfo, downwardAPI: {items: [{path: labels, fieldRef: {fieldPath: metadata.labels}}]}}
---
apiVersion: v1
kind: Pod
metadata: {name: stubborn, namespace: default}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: busybox
    command: [sh, -c, "trap '' TERM; echo started; while true; do sleep 0.2; done"]
"#;

const KEEPER: &str = r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: data, namespace: default}
spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
---
apiVersion: v1
kind: Pod
metadata: {name: keeper, namespace: default}
spec:
  containers:
  - {name: main, image: nest, args: [debug, cat, /data/note], volumeMounts: [{name: data, mountPath: /data}]}
  volumes: [{name: data, persistentVolumeClaim: {claimName: data}}]
"#;

#[test]
fn volumes_and_environment_reach_the_process_and_deletion_stops_it_within_the_grace_period() {
    // `stubborn` runs the busybox image (`scripts/test-images`) from a loopback Docker Hub mirror.
    let work = tempfile::tempdir().unwrap();
    let (_registry, mirror) = docker_io_mirror(work.path());
    let mirror: Vec<&str> = mirror.iter().map(String::as_str).collect();
    let cluster = Cluster::start("127.13.0.0/16", "127.113.0.0/16", &mirror);
    let server = &cluster.server;
    server.apply_manifest(CONFIGURED);
    server.apply_manifest(KEEPER);
    eventually(30, "reader Running", || pod(server, "reader")["status"]["phase"] == "Running");
    eventually(10, "reader's output", || cluster.log("reader", "main", 0).contains("$CPUS="));
    let log = cluster.log("reader", "main", 0);
    let uid = pod(server, "reader")["metadata"]["uid"].as_str().unwrap().to_string();
    // The volumes are mounted where the pod says, in the container's own filesystem.
    assert!(log.contains("/etc/config/greeting: hello"), "{log}");
    assert!(log.contains("/etc/secret/password: s3cret"), "{log}");
    assert!(log.contains("/etc/podinfo/labels: tier=\"backend\""), "{log}");
    for expected in [
        "$GREETING=hello".to_string(),
        "$PASSWORD=s3cret".to_string(),
        "$CONFIG_DIR=/etc/config".to_string(),
        "$MY_NAMESPACE=default".to_string(),
        "$CFG_colour=blue".to_string(),
        "$CPUS=2".to_string(),
    ] {
        assert!(log.lines().any(|l| l.ends_with(&expected)), "{expected} not in {log}");
    }

    // A claim's directory outlives the pods that mount it.
    let claims = cluster.node_dir.path().join("proc/claims/default/data");
    eventually(30, "keeper Running", || pod(server, "keeper")["status"]["phase"] == "Running");
    std::fs::write(claims.join("note"), "kept").unwrap();
    server.ok(&["delete", "pod", "keeper", "--timeout=60s"]);
    let second = KEEPER.split("---").nth(1).unwrap().replace("name: keeper", "name: keeper-again");
    server.apply_manifest(&second);
    eventually(30, "keeper-again reading the claim", || {
        cluster.log("keeper-again", "main", 0).contains("/data/note: kept")
    });

    // kubectl delete waits for the pod to go: the process stops on SIGTERM at once.
    let started = Instant::now();
    server.ok(&["delete", "pod", "reader", "--timeout=60s"]);
    assert!(started.elapsed() < Duration::from_secs(20), "deleting reader took {:?}", started.elapsed());
    assert!(processes_with(&uid).is_empty(), "reader's sandbox survived its pod");
    assert!(processes_with("cat /etc/config/greeting").is_empty(), "reader's process survived its pod");

    // One that ignores SIGTERM is killed when its grace period of 2 s ends.
    eventually(30, "stubborn Running", || cluster.log("stubborn", "main", 0).contains("started"));
    let started = Instant::now();
    server.ok(&["delete", "pod", "stubborn", "--timeout=60s"]);
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(1500), "stubborn went after {took:?}, before its grace period ended");
    assert!(took < Duration::from_secs(20), "stubborn took {took:?}");
    assert!(processes_with("echo started; while true").is_empty(), "stubborn's process survived its pod");
}

#[test]
fn a_node_that_stops_and_starts_again_neither_orphans_nor_duplicates_processes() {
    let mut cluster = Cluster::start("127.14.0.0/16", "127.114.0.0/16", &[]);
    cluster.server.apply_manifest(&echo_deployment(Some("default"), 2, "/"));
    let all_ready = |server: &Server| {
        let pods = echoes(server);
        pods.len() == 2 && pods.iter().all(|p| p.2)
    };
    eventually(60, "2 echo pods Ready", || all_ready(&cluster.server));
    assert_eq!(processes_with("--listen 127.14.").len(), 2);

    // SIGTERM: the node stops its processes before it exits.
    cluster.node.as_mut().unwrap().terminate();
    assert!(processes_with("--listen 127.14.").is_empty(), "processes left after the node stopped");
    cluster.start_node();
    eventually(60, "the pods running again", || {
        processes_with("--listen 127.14.").len() == 2 && all_ready(&cluster.server)
    });
    for (_, ip, _) in echoes(&cluster.server) {
        eventually(10, "an answer", || get(&format!("{ip}:8080"), "/").is_ok());
    }

    // SIGKILL: the processes die with the node, and a new node starts each pod once.
    cluster.node.as_mut().unwrap().kill();
    eventually(10, "the processes gone with their node", || processes_with("--listen 127.14.").is_empty());
    cluster.start_node();
    eventually(60, "the pods running again", || {
        processes_with("--listen 127.14.").len() == 2 && all_ready(&cluster.server)
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(processes_with("--listen 127.14.").len(), 2, "duplicates after the restart");
}

/// Issue 17's escapes through a pod spec, tried as a tenant admin would write them: keys and `items[].path` that are
/// absolute or climb out with `..`, a `subPath` that climbs out, a claim named into another namespace's directory,
/// and a `hostPath` volume. The paths the API server refuses as kube-apiserver does (a 422 naming the field); the
/// rest, which upstream lets through too, the node refuses with `CreateContainerConfigError` naming the field, and
/// nothing is written outside the pod's directories. (The node's own checks of the refused paths are unit tests of
/// `nest-node/src/process/paths.rs`.)
#[test]
fn names_and_paths_in_a_pod_spec_never_lead_outside_the_pods_directories() {
    let cluster = Cluster::start("127.15.0.0/16", "127.115.0.0/16", &[]);
    let server = &cluster.server;
    let marker = format!("nest-escape-{}", std::process::id());
    let outside = tempfile::tempdir().unwrap();
    let absolute = outside.path().join(format!("{marker}-absolute"));
    server.apply_manifest(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bait, namespace: default}\ndata: {k: planted}\n",
    );
    // One pod per escape: (name, its volume, the container's mount, what the refusal names).
    let escapes = [
        (
            "climbing-items",
            format!("configMap: {{name: bait, items: [{{key: k, path: ../../../../../{marker}}}]}}"),
            "",
            "items[0].path",
        ),
        (
            "absolute-items",
            format!("configMap: {{name: bait, items: [{{key: k, path: {}}}]}}", absolute.display()),
            "",
            "must be a relative path",
        ),
        (
            "climbing-downward",
            format!("downwardAPI: {{items: [{{path: ../../../{marker}, fieldRef: {{fieldPath: metadata.name}}}}]}}"),
            "",
            "downwardAPI items[0].path",
        ),
        ("climbing-subpath", "emptyDir: {}".to_string(), ", subPath: ../../../..", "subPath"),
        (
            "other-namespace-claim",
            "persistentVolumeClaim: {claimName: ../kube-system/data}".to_string(),
            "",
            "claimName",
        ),
        ("host-files", "hostPath: {path: /}".to_string(), "", "hostPath"),
    ];
    let manifest = |name: &str, volume: &str, mount: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  containers:\n  \
             - name: main\n    image: nest\n    args: [debug, cat, /v/k]\n    volumeMounts: [{{name: v, mountPath: /v{mount}}}]\n  \
             volumes:\n  - name: v\n    {volume}\n"
        )
    };
    let (refused, passed): (Vec<_>, Vec<_>) = escapes.iter().partition(|(name, ..)| {
        ["climbing-items", "absolute-items", "climbing-downward", "climbing-subpath"].contains(name)
    });
    for (name, volume, mount, names) in &refused {
        let error = server.create_refused(&manifest(name, volume, mount));
        let field = names.replace(' ', ".");
        assert!(error.contains("is invalid") && (error.contains(names) || error.contains(&field)), "{name}: {error}");
    }
    for (name, volume, mount, _) in &passed {
        server.apply_manifest(&manifest(name, volume, mount));
    }
    for (name, _, _, names) in &passed {
        eventually(30, &format!("{name} refused by the node"), || {
            let waiting = &pod(server, name)["status"]["containerStatuses"][0]["state"]["waiting"];
            waiting["reason"] == "CreateContainerConfigError"
                && waiting["message"].as_str().is_some_and(|m| m.contains(names))
        });
        assert_ne!(pod(server, name)["status"]["phase"], "Running", "{name}");
    }
    assert!(processes_with("/v/k").is_empty(), "a refused pod started a process");
    // Nothing was written outside: not beside the node's directory, not at the absolute path, nowhere under /tmp.
    assert!(!absolute.exists());
    let mut found = Vec::new();
    let mut dirs = vec![std::env::temp_dir(), cluster.node_dir.path().to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if entry.file_name().to_string_lossy().contains(&marker) {
                found.push(path.clone());
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) && path.starts_with(cluster.node_dir.path()) {
                dirs.push(path);
            }
        }
    }
    assert!(found.is_empty(), "files escaped their volumes: {found:?}");
    assert!(!cluster.node_dir.path().join("proc/claims/kube-system").exists(), "a claim reached another namespace");
}

const SUB_PATHS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: sub}
spec:
  initContainers:
  - name: swapper
    image: busybox
    command: [sh, -c, "mkdir -p /data/inner && echo hi > /data/inner/f && rmdir /data/out && ln -s / /data/out && ls -l /data"]
    volumeMounts: [{name: data, mountPath: /data}]
  containers:
  - {name: main, image: nest, args: [debug, cat, /s/f], volumeMounts: [{name: data, mountPath: /s, subPath: inner}]}
  - name: climber
    image: nest
    args: [debug, cat, /s/etc/hostname, /s/etc/shadow]
    volumeMounts: [{name: data, mountPath: /s, subPath: out}]
  volumes: [{name: data, emptyDir: {}}]
"#;

/// A `subPath` is mounted from the directory it named when the node looked: held by a descriptor and bind-mounted in
/// the pod's directory, so that a link a container of the pod swaps in afterwards (here an init container replacing
/// the `out` directory the node made with a link to `/`) is never followed; the bind mounts go with the pod.
#[test]
fn a_sub_path_mounts_what_it_named_never_a_link_swapped_in_and_goes_with_its_pod() {
    // The swapper runs the busybox image (`scripts/test-images`) from a loopback Docker Hub mirror.
    let work = tempfile::tempdir().unwrap();
    let (_registry, mirror) = docker_io_mirror(work.path());
    let mirror: Vec<&str> = mirror.iter().map(String::as_str).collect();
    let cluster = Cluster::start("127.16.0.0/16", "127.116.0.0/16", &mirror);
    let server = &cluster.server;
    server.apply_manifest(SUB_PATHS);
    eventually(60, "main's output", || cluster.log("sub", "main", 0).contains("/s/f: hi"));
    // The climber's mount is the directory the node held, which the swap unlinked: the runtime will not mount it,
    // so the container never starts, and it never sees the host's root.
    eventually(60, "the climber refused its start", || {
        let statuses = pod(server, "sub")["status"]["containerStatuses"].clone();
        statuses
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| s["name"] == "climber" && s["lastState"]["terminated"]["reason"] == "StartError")
    });
    let swapped = cluster.log("sub", "swapper", 0);
    assert!(swapped.contains("out -> /"), "the link was not swapped in: {swapped}");
    let climbed = cluster.log("sub", "climber", 0);
    assert!(!climbed.contains("/s/etc/"), "the climber ran: {climbed}");
    let uid = pod(server, "sub")["metadata"]["uid"].as_str().unwrap().to_string();
    let held = |which: &str| {
        let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        table.lines().filter(|l| l.contains(&uid) && l.contains(which)).count()
    };
    assert_eq!(held("volume-subpaths/data/1/0"), 1, "main's subPath is not held by a bind mount of the node's");
    assert_eq!(held("volume-subpaths/data/2/0"), 1, "the climber's subPath is not held by a bind mount of the node's");
    server.ok(&["delete", "pod", "sub", "--timeout=60s"]);
    eventually(30, "the bind mounts released", || held("") == 0);
}
