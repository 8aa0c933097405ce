//! Images (issue 17), on `nest up` through its demo tenant as the tenant's admin would use them: nest's own image,
//! built with `nest image build` and pushed to a real registry on loopback (Debian's `docker-registry`, which
//! scripts/check installs; named by `--pull-from`, as a loopback registry must be), is pulled by the node and runs the
//! README's echo example from its own root filesystem; a digest the registry does not have and a registry nobody
//! serves give `ErrImagePull`, then `ImagePullBackOff`, with the kubelet's Events, which say what kind of failure it
//! was in fixed words, never the transport's. A private image one namespace pulled with its credentials does not run
//! for another namespace without them, and an image over the node's size limit is not pulled.
//!
//! Its own test binary: `nest up`'s node has fixed addresses, so no other `nest up` may run beside it.

use std::path::Path;
use std::process::Command;

use crate::common::eventually;
use crate::common::registry::{nest, nest_image, push, registry, registry_of};
use crate::common::up::{demo_tenant, kubectl, pod_events, processes_with, stop, up_with};
use nest_testkit::Cases;

fn json(kubeconfig: &Path, cache: &Path, args: &[&str]) -> serde_json::Value {
    let out = kubectl(kubeconfig, cache, &[args, &["-o", "json"]].concat());
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

fn waiting_reason(kubeconfig: &Path, cache: &Path, pod: &str) -> String {
    let pod = json(kubeconfig, cache, &["get", "pod", pod]);
    pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"].as_str().unwrap_or_default().to_string()
}

#[test]
fn nests_image_built_and_pushed_to_a_registry_is_pulled_and_runs_and_bad_references_back_off() {
    let work = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let registry = registry(work.path());
    let archive = nest_image(work.path());
    let archive_path = archive.to_str().unwrap();
    let reference = format!("{}/tools/echo:v1", registry.address);
    let digest = push(&archive, &reference);
    // A private registry, asking for a password, sharing its storage with an open one the test pushes through.
    let private_storage = work.path().join("private");
    let private = registry_of(work.path(), &private_storage, Some(("alice", "s3cret")));
    let open = registry_of(work.path(), &private_storage, None);
    push(&archive, &format!("{}/team/app:v1", open.address));

    // A mirror for Docker Hub (issue 35), on loopback, sharing the first registry's storage: nest's image pushed
    // there as Docker Hub's `library/echoer` is what the mirror serves for `echoer:v1`.
    let mirror = registry_of(work.path(), &work.path().join("storage"), None);
    let mirrored_digest = push(&archive, &format!("{}/library/echoer:v1", registry.address));

    // The node pulls from the two registries the pods name, and from a loopback port where nothing listens; for
    // Docker Hub, from the mirror first.
    let data = tempfile::tempdir().unwrap();
    let mirror_flag = format!("docker.io=http://{}", mirror.address);
    let pull_from = [
        "--pull-from",
        &registry.address,
        "--pull-from",
        &private.address,
        "--pull-from",
        "127.0.0.1:1",
        "--pull-from",
        "*",
        "--registry-mirror",
        &mirror_flag,
    ];
    let (child, _) = up_with(data.path(), &pull_from);
    let admin = data.path().join("admin.kubeconfig");
    let demo = demo_tenant(data.path(), cache.path());
    let wrong = format!("{}/tools/echo@sha256:{}", registry.address, "0".repeat(64));
    let manifest = format!(
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: echo}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: echo}}}}
  template:
    metadata: {{labels: {{app: echo}}}}
    spec:
      containers:
      - name: echo
        image: {reference}
        args: [debug, http-echo, --listen, "$(POD_IP):8080"]
        env: [{{name: POD_IP, valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: wrong-digest}}
spec:
  containers: [{{name: main, image: "{wrong}", args: [debug, http-echo]}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: no-registry}}
spec:
  containers: [{{name: main, image: "127.0.0.1:1/tools/echo:v1", args: [debug, http-echo]}}]
"#
    );
    let file = cache.path().join("pods.yaml");
    std::fs::write(&file, manifest).unwrap();
    let applied = kubectl(&demo, cache.path(), &["apply", "-f", file.to_str().unwrap()]);
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));

    // Images as a kubelet gets them (issue 35), each case on its own.
    let mut cases = Cases::new();
    let mirrored = format!(
        r#"
apiVersion: v1
kind: Pod
metadata: {{name: mirrored}}
spec:
  containers: [{{name: main, image: "echoer:v1", args: [debug, http-echo, --listen, "127.0.0.1:0"]}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: at-mirror}}
spec:
  containers: [{{name: main, image: "{}/library/echoer:v1", args: [debug, http-echo]}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: absent}}
spec:
  containers: [{{name: main, image: nginx}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: simulated}}
spec:
  runtimeClassName: nest-simulated
  containers: [{{name: main, image: nginx}}]
"#,
        mirror.address
    );
    // The syncer makes RuntimeClass nest-simulated in the tenant once it follows it.
    eventually(60, "RuntimeClass nest-simulated in demo", || {
        kubectl(&demo, cache.path(), &["get", "runtimeclass", "nest-simulated"]).status.success()
    });
    let file = cache.path().join("mirrored.yaml");
    std::fs::write(&file, mirrored).unwrap();
    let applied = kubectl(&demo, cache.path(), &["apply", "-f", file.to_str().unwrap()]);
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));
    let events_of = |pod: &str| {
        let selector = format!("involvedObject.name={pod}");
        let events = json(&demo, cache.path(), &["get", "events", "--field-selector", &selector]);
        let items = events["items"].as_array().cloned().unwrap_or_default();
        items
            .iter()
            .map(|e| format!("{}: {}", e["reason"].as_str().unwrap_or(""), e["message"].as_str().unwrap_or("")))
            .collect::<Vec<_>>()
    };
    cases.case("an image named as Docker Hub's is pulled through the mirror and runs", || {
        // Nest's own image holds its debug build (hundreds of megabytes): pulled and unpacked while CI builds and
        // fuzzes beside it, it has taken over two minutes. What the pod and its events said, if it never ran.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
        loop {
            let pod = json(&demo, cache.path(), &["get", "pod", "mirrored"]);
            if pod["status"]["containerStatuses"][0]["state"]["running"].is_object() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "never Running: {}\n{:#?}",
                pod["status"],
                events_of("mirrored")
            );
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
        let status = json(&demo, cache.path(), &["get", "pod", "mirrored"])["status"]["containerStatuses"][0].clone();
        assert_eq!(status["image"], "docker.io/library/echoer:v1", "{status}");
        assert_eq!(status["imageID"], format!("docker.io/library/echoer@{mirrored_digest}"), "{status}");
        let events = events_of("mirrored");
        assert!(events.iter().any(|e| e == "Pulling: Pulling image \"echoer:v1\""), "{events:?}");
        assert!(events.iter().any(|e| e.starts_with("Pulled: Successfully pulled image \"echoer:v1\"")), "{events:?}");
    });
    // Watched for `seconds` at least, and until the pod has waited with `reason`: it never says Running meanwhile,
    // and waits with the kubelet's reasons. What it waited with, if never `reason`.
    let never_running = |pod: &str, seconds: u64, reason: &str| {
        let began = std::time::Instant::now();
        let mut reasons = std::collections::BTreeSet::new();
        while began.elapsed() < std::time::Duration::from_secs(seconds) || !reasons.contains(reason) {
            assert!(began.elapsed() < std::time::Duration::from_secs(120), "{pod} never {reason}: {reasons:?}");
            let status = json(&demo, cache.path(), &["get", "pod", pod])["status"].clone();
            assert_ne!(status["phase"], "Running", "{pod}: {status}");
            assert!(status["containerStatuses"][0]["state"]["running"].is_null(), "{pod}: {status}");
            if let Some(reason) = status["containerStatuses"][0]["state"]["waiting"]["reason"].as_str() {
                reasons.insert(reason.to_string());
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        reasons
    };
    cases.case("a tenant cannot reach the mirror by writing its address into an image", || {
        never_running("at-mirror", 5, "ImagePullBackOff");
        let refused = format!("registry \"{}\" is not allowed for this node", mirror.address);
        let events = events_of("at-mirror");
        assert!(
            events.iter().any(|e| e.starts_with("Failed: Failed to pull image") && e.contains(&refused)),
            "{events:?}"
        );
    });
    cases.case("an image no source gives waits in ErrImagePull and ImagePullBackOff, never Running", || {
        let reasons = never_running("absent", 5, "ImagePullBackOff");
        assert!(
            reasons.iter().all(|r| r == "ErrImagePull" || r == "ImagePullBackOff" || r == "ContainerCreating"),
            "{reasons:?}"
        );
        let told = [
            "Pulling: Pulling image \"nginx\"",
            "Failed: Error: ErrImagePull",
            "BackOff: Back-off pulling image \"nginx\"",
        ];
        eventually(30, "absent's Events: Pulling, ErrImagePull and BackOff", || {
            let events = events_of("absent");
            told.iter().all(|told| events.iter().any(|e| e == told))
        });
        assert_eq!(
            json(&demo, cache.path(), &["get", "pod", "absent"])["status"]["containerStatuses"][0]["image"],
            "nginx"
        );
    });
    cases.case("a pod asking for RuntimeClass nest-simulated is simulated, and one naming no class is refused", || {
        let class = json(&demo, cache.path(), &["get", "runtimeclass", "nest-simulated"]);
        assert_eq!(class["handler"], "simulated", "{class}");
        eventually(60, "simulated Running", || {
            json(&demo, cache.path(), &["get", "pod", "simulated"])["status"]["phase"] == "Running"
        });
        let overrides = r#"{"spec":{"runtimeClassName":"missing"}}"#;
        let refused = kubectl(&demo, cache.path(), &["run", "no-class", "--image=nginx", "--overrides", overrides]);
        assert!(!refused.status.success());
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(said.contains("pod rejected: RuntimeClass \"missing\" not found"), "{said}");
    });

    // The echo example runs from the pulled image: the tenant sees it Running with the image's digest as imageID.
    let running = || {
        let pods = json(&demo, cache.path(), &["get", "pods", "-l", "app=echo"]);
        pods["items"][0]["status"]["containerStatuses"][0]["state"]["running"].is_object()
    };
    eventually(120, "the echo pod Running", running);
    let pods = json(&demo, cache.path(), &["get", "pods", "-l", "app=echo"]);
    let pod = &pods["items"][0];
    let image_id = pod["status"]["containerStatuses"][0]["imageID"].as_str().unwrap_or_default();
    assert_eq!(image_id, format!("{}/tools/echo@{digest}", registry.address), "{pod}");
    let address = format!("{}:8080", pod["status"]["podIP"].as_str().unwrap());
    let name = pod["metadata"]["name"].as_str().unwrap().to_string();
    let answer = eventually_get(&address, "/hello");
    assert!(answer.contains("/hello"), "{answer}");
    // The kubelet's Events for it, as the tenant sees them: the pull, then the container made and started.
    eventually(60, "echo's Pulling, Pulled, Created and Started events", || {
        let described = kubectl(&demo, cache.path(), &["describe", "pod", &name]);
        let described = String::from_utf8_lossy(&described.stdout).into_owned();
        described.contains(&format!("Pulling image \"{reference}\""))
            && described.contains(&format!("Successfully pulled image \"{reference}\" in "))
            && described.contains("Created container: echo")
            && described.contains("Started container echo")
    });
    let logs = kubectl(&demo, cache.path(), &["logs", &name]);
    assert!(logs.status.success(), "{}", String::from_utf8_lossy(&logs.stderr));
    // Its process's root is the image's, not the host's: nest at /usr/local/bin and the image's own /etc/passwd.
    let marker = format!("--listen {address}");
    let pids = processes_with(&marker);
    assert_eq!(pids.len(), 1, "echo's processes: {pids:?}");
    let root = Path::new("/proc").join(pids[0].to_string()).join("root");
    assert!(root.join("usr/local/bin/nest").is_file(), "no nest in the container's /usr/local/bin");
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).unwrap();
    assert!(passwd.contains("nonroot:x:65532"), "{passwd}");
    assert!(!root.join("etc/shadow").exists(), "the host's /etc reached the container");
    let status = std::fs::read_to_string(Path::new("/proc").join(pids[0].to_string()).join("status")).unwrap();
    let uid: u32 = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(uid % 65536, 65532, "the image's user is who the container runs as: {status}");

    // The private image: a pod of namespace team-a pulls it with its Secret; pods of team-b, which hold no
    // credentials, never run the copy team-a's pull left on the node: the node asks the registry again for them
    // (which refuses), and with pull policy Never it does not count as present.
    let app = format!("{}/team/app:v1", private.address);
    for namespace in ["team-a", "team-b"] {
        let created = kubectl(&demo, cache.path(), &["create", "namespace", namespace]);
        assert!(created.status.success(), "{}", String::from_utf8_lossy(&created.stderr));
    }
    let server = format!("--docker-server={}", private.address);
    let login = ["-n", "team-a", "create", "secret", "docker-registry", "login", &server];
    let login =
        kubectl(&demo, cache.path(), &[&login[..], &["--docker-username=alice", "--docker-password=s3cret"]].concat());
    assert!(login.status.success(), "{}", String::from_utf8_lossy(&login.stderr));
    let pod = |namespace: &str, name: &str, extra: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: {namespace}}}\nspec:\n{extra}  containers:\n  \
             - {{name: main, image: \"{app}\", args: [debug, http-echo, --listen, \"127.0.0.1:0\"]POLICY}}\n"
        )
    };
    let owner = pod("team-a", "app", "  imagePullSecrets: [{name: login}]\n").replace("POLICY", "");
    let file = cache.path().join("owner.yaml");
    std::fs::write(&file, owner).unwrap();
    let applied = kubectl(&demo, cache.path(), &["apply", "-f", file.to_str().unwrap()]);
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));
    let state = |namespace: &str, name: &str| {
        let pod = json(&demo, cache.path(), &["-n", namespace, "get", "pod", name]);
        pod["status"]["containerStatuses"][0]["state"].clone()
    };
    eventually(120, "team-a's pod of the private image Running", || state("team-a", "app")["running"].is_object());
    let borrowers = [
        pod("team-b", "borrowed", "").replace("POLICY", ""),
        pod("team-b", "never", "").replace("POLICY", ", imagePullPolicy: Never"),
    ]
    .join("---\n");
    let file = cache.path().join("borrowers.yaml");
    std::fs::write(&file, borrowers).unwrap();
    let applied = kubectl(&demo, cache.path(), &["apply", "-f", file.to_str().unwrap()]);
    assert!(applied.status.success(), "{}", String::from_utf8_lossy(&applied.stderr));
    for (name, reason) in [("borrowed", "ImagePullBackOff"), ("never", "ErrImageNeverPull")] {
        let mut last = serde_json::Value::Null;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while last["waiting"]["reason"] != reason {
            assert!(std::time::Instant::now() < deadline, "team-b's {name} is not {reason}: {last}");
            std::thread::sleep(std::time::Duration::from_millis(200));
            last = state("team-b", name);
        }
    }
    let told = |name: &str, reason: &str, words: &str| {
        pod_events(&demo, cache.path(), &["-n", "team-b"], name).iter().any(|(r, m)| r == reason && m.contains(words))
    };
    let refusal =
        format!("Failed to pull image \"{app}\": failed to pull and unpack image \"{app}\": pull access denied");
    eventually(30, "the registry's refusal told to team-b", || told("borrowed", "Failed", &refusal));
    eventually(30, "the Never pod's Event saying why", || {
        told("never", "ErrImageNeverPull", "credentials have not pulled it")
    });
    for name in ["borrowed", "never"] {
        assert!(state("team-b", name)["running"].is_null(), "team-b's {name} ran team-a's private image");
    }

    // A digest the registry does not have, and a registry nobody serves: ErrImagePull, then ImagePullBackOff.
    // The container's waiting reason goes from ErrImagePull (a moment, after each try) to ImagePullBackOff (until
    // the next try); the kubelet's Events tell both.
    for pod in ["wrong-digest", "no-registry"] {
        eventually(60, &format!("{pod} ImagePullBackOff"), || {
            waiting_reason(&demo, cache.path(), pod) == "ImagePullBackOff"
        });
        let phase = json(&demo, cache.path(), &["get", "pod", pod])["status"]["phase"].clone();
        assert_eq!(phase, "Pending");
        let told = |reason: &str, starts: &str| {
            pod_events(&demo, cache.path(), &[], pod).iter().any(|(r, m)| r == reason && m.starts_with(starts))
        };
        eventually(60, &format!("{pod}'s Events"), || {
            told("Failed", "Failed to pull image")
                && told("Failed", "Error: ErrImagePull")
                && told("BackOff", "Back-off pulling image")
                && told("Failed", "Error: ImagePullBackOff")
        });
    }
    // What failed, in fixed words: the registry's 404 as "not found", the refused connection as "cannot reach", and
    // nothing of what the transport said.
    let failures = |pod: &str| {
        let selector = format!("involvedObject.name={pod}");
        let events = json(&demo, cache.path(), &["get", "events", "--field-selector", &selector]);
        let messages = events["items"].as_array().into_iter().flatten().filter(|e| e["reason"] == "Failed");
        messages.filter_map(|e| e["message"].as_str().map(str::to_string)).collect::<Vec<_>>().join("\n")
    };
    let told = failures("wrong-digest");
    assert!(told.contains(&format!("failed to pull and unpack image \"{wrong}\": {wrong}: not found")), "{told}");
    let told = failures("no-registry");
    let unreachable =
        "failed to pull and unpack image \"127.0.0.1:1/tools/echo:v1\": cannot reach registry \"127.0.0.1:1\"";
    assert!(told.contains(unreachable), "{told}");
    for transport in ["error sending request", "onnection refused", "tcp", "url", "http://"] {
        assert!(!told.contains(transport), "the transport's words reached the pod's Events: {told}");
    }
    // Nothing was pulled for them.
    let node_dir = data.path().join("nodes/nest-node-0");
    let node_dir = node_dir.to_str().unwrap();
    let images = nest(&["image", "list", "--data-dir", node_dir]);
    assert_eq!(images.lines().count(), 3, "{images}");
    assert!(images.contains(&reference) && images.contains(&app), "{images}");
    assert!(images.contains("docker.io/library/echoer:v1"), "the mirrored image, under Docker Hub's name: {images}");

    // An archive imported into the node's store runs from it, under the name the archive gives it.
    let imported = nest(&["image", "import", archive_path, "--data-dir", node_dir]);
    let name = imported.trim().to_string();
    assert!(name.starts_with("docker.io/library/nest:"), "{imported}");
    let tag = name.trim_start_matches("docker.io/library/");
    let run = kubectl(
        &demo,
        cache.path(),
        &["run", "imported", "--image", tag, "--", "debug", "http-echo", "--listen", "127.0.0.1:0"],
    );
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    eventually(60, "the imported image's pod Running", || {
        let pod = json(&demo, cache.path(), &["get", "pod", "imported"]);
        let status = &pod["status"]["containerStatuses"][0];
        status["state"]["running"].is_object()
            && status["imageID"].as_str().is_some_and(|id| id.starts_with("docker.io/library/nest@sha256:"))
    });

    let _ = admin;
    assert!(stop(child).success(), "nest up exits cleanly on SIGTERM");
    assert!(processes_with(&marker).is_empty(), "a container outlived nest up");
    drop(mirror);
    cases.finish();
}

/// `GET path` from `address`, retried for a while (the process starts listening a moment after it runs).
fn eventually_get(address: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut answer = String::new();
    eventually(30, &format!("an answer from {address}"), || {
        let Ok(mut stream) = std::net::TcpStream::connect(address) else { return false };
        let request = format!("GET {path} HTTP/1.1\r\nhost: {address}\r\nconnection: close\r\n\r\n");
        if stream.write_all(request.as_bytes()).is_err() {
            return false;
        }
        answer.clear();
        stream.read_to_string(&mut answer).is_ok() && answer.starts_with("HTTP/1.1 200")
    });
    answer
}

#[test]
fn an_image_over_the_nodes_size_limit_is_not_pulled_and_leaves_nothing() {
    let work = tempfile::tempdir().unwrap();
    let registry = registry(work.path());
    let archive = nest_image(work.path());
    let reference = format!("{}/tools/big:v1", registry.address);
    push(&archive, &reference);
    let node = work.path().join("node");
    let node = node.to_str().unwrap();

    // nest's image is megabytes: a node whose limit is 1 MiB refuses it before fetching a layer.
    let pull = |limit: &str| {
        let args = ["image", "pull", &reference, "--data-dir", node, "--image-size-limit", limit];
        Command::new(env!("CARGO_BIN_EXE_nest")).args(args).output().unwrap()
    };
    let refused = pull("1Mi");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "pulled past the limit");
    assert!(stderr.contains("more than this node's image size limit of 1048576 bytes"), "{stderr}");
    let blobs = || std::fs::read_dir(work.path().join("node/images/blobs/sha256")).unwrap().count();
    assert_eq!(blobs(), 0, "a refused image left blobs behind");
    assert!(nest(&["image", "list", "--data-dir", node]).is_empty());

    // Within the limit it is pulled, with all its blobs.
    let pulled = pull("1Gi");
    assert!(pulled.status.success(), "{}", String::from_utf8_lossy(&pulled.stderr));
    assert!(nest(&["image", "list", "--data-dir", node]).contains(&reference));
    assert!(blobs() >= 3, "manifest, config and layer");
}
