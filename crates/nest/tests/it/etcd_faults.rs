//! The etcd backend under faults (issue 21), with Debian's etcd: a three-member cluster on loopback behind one
//! `nest apiserver`, written to continuously through kube-rs while its leader and then a follower are SIGKILLed; and
//! a small-quota etcd that keeps taking writes because the API server compacts it.

use crate::common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::Server;
use serde_json::{Value, json};

/// One etcd member on loopback.
struct Member {
    name: String,
    client: u16,
    peer: u16,
    dir: PathBuf,
    child: Option<Child>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Member {
    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client)
    }

    fn start(&mut self, cluster: &str, extra: &[&str]) {
        let log = std::fs::File::create(self.dir.join(format!("{}.log", self.name))).unwrap();
        let child = Command::new("etcd")
            .arg(format!("--name={}", self.name))
            .arg(format!("--data-dir={}", self.dir.join(&self.name).display()))
            .arg(format!("--listen-client-urls={}", self.url()))
            .arg(format!("--advertise-client-urls={}", self.url()))
            .arg(format!("--listen-peer-urls=http://127.0.0.1:{}", self.peer))
            .arg(format!("--initial-advertise-peer-urls=http://127.0.0.1:{}", self.peer))
            .arg(format!("--initial-cluster={cluster}"))
            .arg("--initial-cluster-token=nest-faults")
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start etcd (Debian package etcd-server)");
        self.child = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// etcd's status through its JSON gateway: (this member's ID, its leader's ID), if it answers.
    fn status(&self) -> Option<(String, String)> {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.client)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let request = "POST /v3/maintenance/status HTTP/1.1\r\nhost: etcd\r\ncontent-type: application/json\r\n\
                       content-length: 2\r\nconnection: close\r\n\r\n{}";
        stream.write_all(request.as_bytes()).ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let body: Value = serde_json::from_str(response.split("\r\n\r\n").nth(1)?).ok()?;
        let id = body["header"]["member_id"].as_str()?.to_string();
        let leader = body["leader"].as_str()?.to_string();
        (leader != "0").then_some((id, leader))
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        self.kill();
    }
}

fn cluster(dir: &Path, count: usize, extra: &[&str]) -> Vec<Member> {
    let mut members: Vec<Member> = (0..count)
        .map(|i| Member {
            name: format!("m{i}"),
            client: free_port(),
            peer: free_port(),
            dir: dir.to_path_buf(),
            child: None,
        })
        .collect();
    let initial: Vec<String> = members.iter().map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer)).collect();
    let initial = initial.join(",");
    for member in &mut members {
        member.start(&initial, extra);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while members.iter().any(|m| m.status().is_none()) {
        assert!(Instant::now() < deadline, "the etcd cluster did not elect a leader");
        std::thread::sleep(Duration::from_millis(100));
    }
    members
}

fn leader(members: &[Member]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        for (i, member) in members.iter().enumerate() {
            if member.child.is_some()
                && let Some((id, leader)) = member.status()
                && id == leader
            {
                return i;
            }
        }
        assert!(Instant::now() < deadline, "no etcd member leads");
        std::thread::sleep(Duration::from_millis(100));
    }
}

async fn client(server: &Server) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(&server.kubeconfig).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await.unwrap();
    // kube-rs tries a 503 or 504 again by itself (up to 15 times); this test counts what the server answers.
    config.default_retry = false;
    kube::Client::try_from(config).unwrap()
}

/// What became of one write.
#[derive(Debug)]
struct Outcome {
    name: String,
    at: Duration,
    /// The HTTP code, or 0 when the request got no answer.
    code: u16,
    retry_after: Option<String>,
    /// How long the API server took to answer.
    took: Duration,
}

async fn create(client: &kube::Client, namespace: &str, name: &str) -> (u16, Option<String>) {
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": name}});
    let request = http::Request::post(format!("/api/v1/namespaces/{namespace}/configmaps"))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
    match tokio::time::timeout(Duration::from_secs(20), client.send(request.map(kube::client::Body::from))).await {
        Ok(Ok(response)) => {
            let retry_after = response.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
            (response.status().as_u16(), retry_after)
        }
        _ => (0, None),
    }
}

#[test]
fn a_lost_etcd_member_costs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut members = cluster(dir.path(), 3, &[]);
    let urls: Vec<String> = members.iter().map(Member::url).collect();
    let server = Server::start(&common::Storage::Etcd(urls.join(",")));
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let client = runtime.block_on(client(&server));
    server.ok(&["create", "namespace", "faults"]);

    // A watch opened before the kills, from the list's resourceVersion: it must see every acknowledged ConfigMap
    // exactly once.
    let configmaps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> = kube::Api::namespaced(client.clone(), "faults");
    let watched = runtime.block_on(async {
        let list = configmaps.list(&Default::default()).await.unwrap();
        let version = list.metadata.resource_version.unwrap();
        let stream = configmaps.watch(&kube::api::WatchParams::default().timeout(290), &version).await.unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(String, String)>::new()));
        let into = seen.clone();
        tokio::spawn(async move {
            use futures_util::StreamExt;
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                let line = match event {
                    Ok(kube::api::WatchEvent::Added(cm)) => ("ADDED".to_string(), cm.metadata.name.unwrap()),
                    Ok(other) => ("OTHER".to_string(), format!("{other:?}")),
                    Err(error) => ("ERROR".to_string(), error.to_string()),
                };
                into.lock().unwrap().push(line);
            }
            into.lock().unwrap().push(("END".into(), String::new()));
        });
        seen
    });

    // Writes, one after another, while the leader is killed at 3 s and started again at 9 s, and then (once it is
    // back) a follower is killed at 15 s and started again at 21 s.
    let initial: Vec<String> = members.iter().map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer)).collect();
    let initial = initial.join(",");
    let began = Instant::now();
    let mut outcomes = Vec::new();
    let mut kills = Vec::new();
    let mut killed: Option<usize> = None;
    let mut step = 0;
    let mut i = 0;
    while began.elapsed() < Duration::from_secs(27) {
        let at = began.elapsed();
        match step {
            0 if at > Duration::from_secs(3) => {
                let victim = leader(&members);
                members[victim].kill();
                kills.push(("leader", began.elapsed()));
                killed = Some(victim);
                step = 1;
            }
            1 if at > Duration::from_secs(9) => {
                members[killed.unwrap()].start(&initial, &["--initial-cluster-state=existing"]);
                step = 2;
            }
            2 if at > Duration::from_secs(15) => {
                let lead = leader(&members);
                let victim = (0..3).find(|m| *m != lead && members[*m].child.is_some()).unwrap();
                members[victim].kill();
                kills.push(("follower", began.elapsed()));
                killed = Some(victim);
                step = 3;
            }
            3 if at > Duration::from_secs(21) => {
                members[killed.unwrap()].start(&initial, &["--initial-cluster-state=existing"]);
                step = 4;
            }
            _ => {}
        }
        let name = format!("cm-{i}");
        i += 1;
        let (code, retry_after) = runtime.block_on(create(&client, "faults", &name));
        outcomes.push(Outcome { name, at, code, retry_after, took: began.elapsed() - at });
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(kills.len(), 2, "both kills happened: {kills:?}");
    for (what, at) in &kills {
        let slowest =
            outcomes.iter().filter(|o| o.at + Duration::from_secs(1) >= *at && o.at < *at + Duration::from_secs(5));
        let slowest = slowest.map(|o| o.took).max().unwrap_or_default();
        eprintln!("killing the {what}: the slowest write around it took {slowest:?}");
    }

    let failures: Vec<&Outcome> = outcomes.iter().filter(|o| o.code != 201).collect();
    let acknowledged: Vec<&Outcome> = outcomes.iter().filter(|o| o.code == 201).collect();
    eprintln!(
        "{} writes, {} failed: {:?}; kills at {kills:?}",
        outcomes.len(),
        failures.len(),
        failures.iter().map(|o| (o.at.as_millis(), o.code)).collect::<Vec<_>>()
    );
    for failure in &failures {
        assert!(
            matches!(failure.code, 503 | 504) && failure.retry_after.is_some(),
            "a failed write is a 503 or 504 with Retry-After: {failure:?}"
        );
    }
    // At most 2 s of failed writes around each kill: from the first failure after it to the last before the next.
    for (k, (what, at)) in kills.iter().enumerate() {
        let until = kills.get(k + 1).map_or(Duration::MAX, |next| next.1);
        let around: Vec<&&Outcome> =
            failures.iter().filter(|o| o.at + Duration::from_secs(1) >= *at && o.at < until).collect();
        if let (Some(first), Some(last)) = (around.first(), around.last()) {
            let window = last.at - first.at;
            eprintln!("killing the {what}: {} failed writes over {window:?}", around.len());
            assert!(window <= Duration::from_secs(2), "killing the {what} failed writes for {window:?}");
        }
    }

    // Nothing acknowledged was lost, nothing refused (503) was committed.
    let stored: Vec<String> = runtime.block_on(async {
        let list = configmaps.list(&Default::default()).await.unwrap();
        list.items.into_iter().filter_map(|c| c.metadata.name).filter(|n| n.starts_with("cm-")).collect()
    });
    for write in &acknowledged {
        assert!(stored.contains(&write.name), "acknowledged {} was lost", write.name);
    }
    for write in failures.iter().filter(|o| o.code == 503) {
        assert!(!stored.contains(&write.name), "refused {} was committed", write.name);
    }
    // The watch saw each stored ConfigMap once, and nothing else.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let seen = watched.lock().unwrap().clone();
        let added: Vec<&String> = seen.iter().filter(|(kind, _)| kind == "ADDED").map(|(_, name)| name).collect();
        let others: Vec<&(String, String)> = seen.iter().filter(|(kind, _)| kind != "ADDED").collect();
        assert!(others.is_empty(), "the watch saw more than additions: {others:?}");
        if added.len() >= stored.len() || Instant::now() > deadline {
            let mut sorted = added.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted.len(), added.len(), "the watch saw a ConfigMap twice");
            for name in &stored {
                assert!(added.contains(&name), "the watch missed {name}");
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }

    // Two members of three lost: no quorum. Writes are refused honestly — a 503 or 504 with Retry-After, in bounded
    // time, never a 500 — and once a member is back (a quorum again) they succeed.
    let lead = leader(&members);
    let follower = (0..3).find(|m| *m != lead).unwrap();
    members[lead].kill();
    members[follower].kill();
    let mut refused = Vec::new();
    for k in 0..3 {
        let asked = Instant::now();
        let (code, retry_after) = runtime.block_on(create(&client, "faults", &format!("no-quorum-{k}")));
        refused.push((code, retry_after.clone(), asked.elapsed()));
        assert!(
            matches!(code, 503 | 504) && retry_after.is_some() && asked.elapsed() < Duration::from_secs(15),
            "a write without a quorum: {refused:?}"
        );
    }
    eprintln!("without a quorum: {refused:?}");
    members[follower].start(&initial, &["--initial-cluster-state=existing"]);
    let back = Instant::now();
    let mut code = 0;
    while back.elapsed() < Duration::from_secs(30) && code != 201 {
        code = runtime.block_on(create(&client, "faults", &format!("quorum-again-{}", back.elapsed().as_millis()))).0;
    }
    assert_eq!(code, 201, "writes succeed once a quorum is back");
    eprintln!("a quorum again: writes succeed {:?} after the member was started", back.elapsed());
}

#[test]
fn compaction_keeps_a_small_etcd_writable() {
    let dir = tempfile::tempdir().unwrap();
    // 24 MiB of quota; 1,200 updates of a 32 KiB ConfigMap are 37.5 MiB of history, and more changes than the API
    // server's watch cache holds (1,024), so that a watch from the first goes to etcd.
    let quota = (24u64 << 20).to_string();
    let limits = [format!("--quota-backend-bytes={quota}"), "--max-request-bytes=2097152".to_string()];
    let limits: Vec<&str> = limits.iter().map(String::as_str).collect();
    let mut members = cluster(dir.path(), 1, &limits);
    let server = Server::start_in_etcd(&members[0].url(), &["--etcd-compaction-interval", "2s"]);
    let value = "x".repeat(32 << 10);
    server.ok(&["create", "configmap", "big", "--from-literal", "k=v"]);
    let first = server.json(&["get", "configmap", "big"])["metadata"]["resourceVersion"].as_str().unwrap().to_string();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let client = runtime.block_on(client(&server));
    let configmaps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> = kube::Api::namespaced(client, "default");
    let began = Instant::now();
    for i in 0..1200 {
        let patch = json!({"data": {"k": format!("{i}{value}")}});
        let patched = runtime.block_on(configmaps.patch("big", &Default::default(), &kube::api::Patch::Merge(&patch)));
        assert!(patched.is_ok(), "update {i} refused after {:?}: {patched:?}", began.elapsed());
        if i % 200 == 199 {
            // Compaction runs every 2 s: give it its turns.
            std::thread::sleep(Duration::from_secs(3));
        }
    }
    // The first revision is long compacted: a watch from it is 410 Expired, as kube-apiserver answers.
    let output = server.kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={first}&timeoutSeconds=2"),
    ]);
    // The answer is a watch whose only event is an ERROR carrying the 410 Status (no change replayed before it).
    let text = String::from_utf8_lossy(&output.stdout);
    let events: Vec<serde_json::Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    assert_eq!(
        events.len(),
        1,
        "a watch from a compacted revision: {text} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let (kind, status) = (&events[0]["type"], &events[0]["object"]);
    assert_eq!(
        (kind.as_str(), status["code"].as_i64(), status["reason"].as_str()),
        (Some("ERROR"), Some(410), Some("Expired")),
        "{text}"
    );
    assert!(status["message"].as_str().is_some_and(|m| m.starts_with("too old resource version")), "{text}");

    // With its etcd gone the server is alive but not ready, and says which check fails; ready again once it is back.
    let readyz = |server: &Server| {
        let output = server.kubectl(&["get", "--raw", "/readyz?verbose"]);
        (
            output.status.success(),
            format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr)),
        )
    };
    assert!(readyz(&server).0, "ready with etcd up: {}", readyz(&server).1);
    members[0].kill();
    let (ready, text) = readyz(&server);
    assert!(!ready && text.contains("[-]etcd failed"), "/readyz with etcd down: {text}");
    let livez = server.kubectl(&["get", "--raw", "/livez"]);
    assert!(livez.status.success(), "/livez with etcd down: {}", String::from_utf8_lossy(&livez.stderr));
    let initial = format!("m0=http://127.0.0.1:{}", members[0].peer);
    members[0].start(&initial, &limits);
    common::eventually(30, "ready again", || readyz(&server).0);
}
