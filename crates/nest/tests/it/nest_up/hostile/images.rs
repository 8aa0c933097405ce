//! References to addresses (issue 33, item 4): a tenant admin writes an image reference naming the host's loopback
//! (`127.0.0.1:<port>/…`, `localhost:<port>/…`, `127.1:<port>/…`) to make the node send requests to a service there,
//! and read from the pod's Events what answered. The node refuses every such reference before any connection (the
//! service sees no request) with the kubelet's `ErrImagePull` and back-off, and an Event saying the registry is not
//! allowed for this node, in which nothing of the service's answer appears. A loopback registry the platform admin
//! named with `--pull-from` still serves the pods whose images name it.

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::platform::{Platform, Who};
use crate::common::eventually;
use crate::common::registry::{nest_image, push, registry};

/// What the service on loopback answers every request with: were it ever in a pod's Event or status, the node would
/// have told the tenant what listens there.
const BANNER: &str = "loopback-service-banner-7d1f";

/// An HTTP service on a free loopback port that answers every request with [`BANNER`] and records the request's
/// first line.
struct Service {
    port: u16,
    requests: Arc<Mutex<Vec<String>>>,
}

impl Service {
    fn start() -> Service {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(2)));
                let mut head = [0u8; 1024];
                let read = stream.read(&mut head).unwrap_or(0);
                let text = String::from_utf8_lossy(&head[..read]);
                seen.lock().unwrap().push(text.lines().next().unwrap_or("(a connection)").to_string());
                let answer = format!(
                    "HTTP/1.1 404 Not Found\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{BANNER}",
                    BANNER.len()
                );
                let _ = stream.write_all(answer.as_bytes());
            }
        });
        Service { port, requests }
    }

    fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

/// A pod of `image` that every tenant's Pod Security level lets through.
fn pod(name: &str, image: &str) -> String {
    format!(
        r#"{{"apiVersion": "v1", "kind": "Pod", "metadata": {{"name": "{name}"}},
  "spec": {{
    "securityContext": {{"runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": {{"type": "RuntimeDefault"}}}},
    "containers": [{{"name": "main", "image": "{image}", "args": ["debug", "http-echo", "--listen", "127.0.0.1:0"],
      "securityContext": {{"allowPrivilegeEscalation": false, "capabilities": {{"drop": ["ALL"]}}}}}}]}}}}"#
    )
}

/// Every Event of `who`'s pod `name`.
fn events(platform: &Platform, who: Who, name: &str) -> Vec<Value> {
    let selector = format!("involvedObject.name={name}");
    let events = platform.json(who, &["get", "events", "--field-selector", &selector]);
    events["items"].as_array().cloned().unwrap_or_default()
}

#[test]
fn image_references_to_the_hosts_loopback_are_refused_before_any_connection() {
    let work = tempfile::tempdir().unwrap();
    let service = Service::start();
    let named = registry(work.path());
    let archive = nest_image(work.path());
    let allowed = format!("{}/tools/echo:v1", named.address);
    push(&archive, &allowed);
    let platform = Platform::start(&["--pull-from", &named.address]);

    // The service's port, as a tenant would write it: plainly, by name, and in a form the HTTP client reads as
    // 127.0.0.1. Each tenant tries.
    let port = service.port;
    let probes = [
        (Who::Demo, "probe-address", format!("127.0.0.1:{port}/x:1"), format!("127.0.0.1:{port}")),
        (Who::Demo, "probe-localhost", format!("localhost:{port}/x:1"), format!("localhost:{port}")),
        (Who::Acme, "probe-short", format!("127.1:{port}/x:1"), format!("127.1:{port}")),
    ];
    for (who, name, image, _) in &probes {
        let created = platform.with_input(*who, &["create", "-f", "-"], &pod(name, image));
        assert!(created.status.success(), "{who:?} {name}: {}", String::from_utf8_lossy(&created.stderr));
    }
    // The admin-named registry still serves: a pod naming it runs, in each tenant.
    for who in [Who::Demo, Who::Acme] {
        let created = platform.with_input(who, &["create", "-f", "-"], &pod("allowed", &allowed));
        assert!(created.status.success(), "{who:?}: {}", String::from_utf8_lossy(&created.stderr));
    }

    for (who, name, image, registry) in &probes {
        let refused = format!("Failed to pull image \"{image}\": registry \"{registry}\" is not allowed for this node");
        eventually(120, &format!("{who:?}'s {name} told its registry is not allowed"), || {
            let events = events(&platform, *who, name);
            let told = |reason: &str, message: &str| {
                events.iter().any(|e| e["reason"] == reason && e["message"].as_str() == Some(message))
            };
            told("Failed", &refused) && told("Failed", "Error: ErrImagePull")
        });
        eventually(60, &format!("{who:?}'s {name} backing off"), || {
            let pod = platform.json(*who, &["get", "pod", name]);
            pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ImagePullBackOff"
        });
    }
    for who in [Who::Demo, Who::Acme] {
        eventually(120, &format!("{who:?}'s pod of the admin-named registry Running"), || {
            let pod = platform.json(who, &["get", "pod", "allowed"]);
            pod["status"]["containerStatuses"][0]["state"]["running"].is_object()
        });
    }

    // Nothing reached the service, and nothing of it reached a tenant: not in an Event, not in a pod's status.
    assert!(service.requests().is_empty(), "the node sent the loopback service: {:?}", service.requests());
    for (who, name, _, _) in &probes {
        let pod = platform.json(*who, &["get", "pod", name]);
        assert_eq!(pod["status"]["phase"], "Pending", "{who:?}'s {name}: {pod}");
        let told = format!("{pod} {}", Value::Array(events(&platform, *who, name)));
        assert!(!told.contains(BANNER), "{who:?}'s {name} learned what answered: {told}");
    }
    platform.assert_serving();
    platform.finish();
}
