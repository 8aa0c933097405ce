//! A node agent with a simulated runtime, in the manner of kwok: it registers a Node (labelled
//! `nest.dev/runtime=simulated`), keeps its Lease in `kube-node-lease` renewed, and for every pod bound to it reports
//! the pod Running after a delay, with an IP from the node's pod range — without running anything.
//!
//! What the simulated containers do can be declared:
//! - containers are started once their `startupProbe`'s `initialDelaySeconds` have passed and ready once their
//!   `readinessProbe`'s have passed too (probes themselves always succeed);
//! - the annotation `nest.dev/ready: "false"` makes readiness fail (and changing it back makes the pod ready);
//! - `nest.dev/exit-code: "<n>"` makes the pod finish: Succeeded for 0, Failed otherwise, so Job flows can be tested;
//! - `nest.dev/stop-seconds: "<n>"` is how long the containers take to stop once the pod is deleted (default 0).
//!
//! A deleted pod is stopped as the kubelet stops one: its containers get the pod's grace period, at the end of which
//! they are killed (exit code 137), and then the node removes the pod from the API server.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// The label every simulated node carries.
pub const RUNTIME_LABEL: (&str, &str) = ("nest.dev/runtime", "simulated");
/// The annotation that makes a pod finish with an exit code.
pub const EXIT_CODE_ANNOTATION: &str = "nest.dev/exit-code";
/// The annotation that makes a pod's readiness fail (`"false"`).
pub const READY_ANNOTATION: &str = "nest.dev/ready";
/// The annotation saying how many seconds a pod's containers take to stop after SIGTERM.
pub const STOP_SECONDS_ANNOTATION: &str = "nest.dev/stop-seconds";

/// One simulated node.
#[derive(Clone, Debug)]
pub struct Options {
    pub name: String,
    /// Capacity (and allocatable): CPU cores, memory and pod count, as Kubernetes quantities.
    pub cpu: String,
    pub memory: String,
    pub pods: u32,
    /// The node's pod range: a /24, like `10.244.3.0/24`.
    pub pod_cidr: String,
    /// The node's own address.
    pub address: String,
    /// How long a pod takes to become Running and Ready.
    pub start_delay: Duration,
    /// How often the Lease is renewed (its duration is four times this).
    pub lease_every: Duration,
}

impl Options {
    /// Node `name` with index `index` (which picks its pod range and address) and a default size.
    pub fn numbered(name: String, index: u8) -> Options {
        Options {
            name,
            cpu: "4".into(),
            memory: "8Gi".into(),
            pods: 110,
            pod_cidr: format!("10.244.{index}.0/24"),
            address: format!("172.31.0.{}", index.saturating_add(2)),
            start_delay: Duration::from_millis(200),
            lease_every: Duration::from_secs(10),
        }
    }
}

struct Context {
    client: Client,
    options: Options,
    /// Host numbers in the pod range that are taken, by pod UID.
    addresses: Mutex<BTreeMap<String, u8>>,
}

fn now() -> jiff::Timestamp {
    jiff::Timestamp::try_from(SystemTime::now()).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
}

fn rfc3339_now() -> String {
    now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Registers the node and runs it until `shutdown` completes.
pub async fn run(
    client: Client,
    options: Options,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    register(&client, &options).await?;
    let context = Arc::new(Context { client: client.clone(), options: options.clone(), addresses: Mutex::default() });
    let pods: Api<Pod> = Api::all(client.clone());
    let mine = watcher::Config::default().fields(&format!("spec.nodeName={}", options.name));
    let runtime = Controller::new(pods, mine).run(reconcile, error_policy, context).for_each(|result| async move {
        if let Err(error) = result {
            tracing::debug!(%error, "simulated runtime");
        }
    });
    tokio::select! {
        () = runtime => anyhow::bail!("the pod watch of node {} ended", options.name),
        result = heartbeat(&client, &options) => result,
        () = shutdown => Ok(()),
    }
}

/// Creates the Node (or takes over an existing one of this name) and reports it Ready.
async fn register(client: &Client, options: &Options) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), options.name.clone()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), "amd64".to_string()),
        (RUNTIME_LABEL.0.to_string(), RUNTIME_LABEL.1.to_string()),
    ]);
    let node = serde_json::from_value::<Node>(json!({
        "metadata": {"name": options.name, "labels": labels},
        "spec": {"podCIDR": options.pod_cidr, "podCIDRs": [options.pod_cidr]},
    }))?;
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let patch = json!({"metadata": {"labels": labels}, "spec": {"podCIDR": options.pod_cidr}});
            nodes.patch(&options.name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        }
        Err(error) => return Err(error.into()),
    }
    report_ready(&nodes, options).await
}

/// Posts the node's status: capacity, addresses, and `Ready`.
async fn report_ready(nodes: &Api<Node>, options: &Options) -> anyhow::Result<()> {
    let resources = json!({"cpu": options.cpu, "memory": options.memory, "pods": options.pods.to_string()});
    let condition = |kind: &str, status: &str, reason: &str| {
        json!({"type": kind, "status": status, "reason": reason, "lastHeartbeatTime": rfc3339_now(),
               "lastTransitionTime": rfc3339_now()})
    };
    let status = json!({"status": {
        "capacity": resources, "allocatable": resources,
        "conditions": [
            condition("Ready", "True", "KubeletReady"),
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID"),
        ],
        "addresses": [{"type": "InternalIP", "address": options.address}, {"type": "Hostname", "address": options.name}],
        "nodeInfo": {
            "kubeletVersion": "v1.33.0-nest", "kubeProxyVersion": "", "containerRuntimeVersion": "nest-simulated://1",
            "operatingSystem": "linux", "architecture": "amd64", "osImage": "nest simulated node",
            "kernelVersion": "", "machineID": "", "systemUUID": "", "bootID": "",
        },
    }});
    nodes.patch_status(&options.name, &PatchParams::default(), &Patch::Merge(&status)).await?;
    Ok(())
}

/// Renews the node's Lease in `kube-node-lease`, as the kubelet does.
async fn heartbeat(client: &Client, options: &Options) -> anyhow::Result<()> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    loop {
        let renew = MicroTime(now());
        let result = match leases.get_opt(&options.name).await {
            Ok(Some(mut lease)) => {
                lease.spec.get_or_insert_with(Default::default).renew_time = Some(renew);
                leases.replace(&options.name, &PostParams::default(), &lease).await.map(|_| ())
            }
            Ok(None) => {
                let lease = Lease {
                    metadata: ObjectMeta { name: Some(options.name.clone()), ..Default::default() },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(options.name.clone()),
                        lease_duration_seconds: Some((options.lease_every.as_secs() * 4).max(1) as i32),
                        renew_time: Some(renew),
                        ..Default::default()
                    }),
                };
                leases.create(&PostParams::default(), &lease).await.map(|_| ())
            }
            Err(error) => Err(error),
        };
        if let Err(error) = result {
            tracing::warn!(%error, node = %options.name, "renewing the node lease");
        }
        // Back after an outage (the node lifecycle controller marked it NotReady): report Ready again.
        let nodes: Api<Node> = Api::all(client.clone());
        if let Ok(Some(node)) = nodes.get_opt(&options.name).await {
            let ready = node
                .status
                .and_then(|s| s.conditions)
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            if !ready && let Err(error) = report_ready(&nodes, options).await {
                tracing::warn!(%error, node = %options.name, "reporting the node Ready");
            }
        }
        tokio::time::sleep(options.lease_every).await;
    }
}

fn error_policy(_: Arc<Pod>, error: &kube::Error, _: Arc<Context>) -> Action {
    tracing::debug!(%error, "reporting a pod's status");
    Action::requeue(Duration::from_secs(1))
}

fn seconds(duration: i64) -> Duration {
    Duration::from_secs(duration.max(0).unsigned_abs())
}

async fn reconcile(pod: Arc<Pod>, context: Arc<Context>) -> Result<Action, kube::Error> {
    let phase = pod.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
    let uid = pod.uid().unwrap_or_default();
    if let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()) {
        remember(&context, &uid, ip);
    }
    let pods: Api<Pod> = Api::namespaced(context.client.clone(), &pod.namespace().unwrap_or_default());
    if pod.metadata.deletion_timestamp.is_some() {
        return stop(&pod, &pods, &context).await;
    }
    if phase == "Succeeded" || phase == "Failed" {
        return Ok(Action::await_change());
    }
    let exit_code = pod.annotations().get(EXIT_CODE_ANNOTATION).and_then(|c| c.parse::<i32>().ok());
    // Not started yet: wait out the start delay, counted from when the pod was created.
    let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0).unwrap_or_else(now);
    let waited = now().duration_since(created).unsigned_abs();
    let delay = context.options.start_delay;
    if phase != "Running" && waited < delay {
        return Ok(Action::requeue(delay - waited));
    }
    let ip = address(&pod, &context).await?;
    let (status, next) = match exit_code {
        // A pod told to finish runs for the start delay first.
        Some(code) if phase == "Running" => (finished(&pod, code), None),
        Some(_) => (running(&pod, &context, &ip), Some(delay)),
        None => {
            let status = running(&pod, &context, &ip);
            let next = next_transition(&pod);
            if phase == "Running" && !status_changes(&pod, &status) {
                return Ok(next.map_or_else(Action::await_change, Action::requeue));
            }
            (status, next)
        }
    };
    match pods.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&json!({"status": status}))).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(error) => return Err(error),
    }
    Ok(next.map_or_else(Action::await_change, Action::requeue))
}

/// Stops a deleted pod: its containers take `nest.dev/stop-seconds` to exit, or are killed when the grace period ends;
/// then the pod is removed.
async fn stop(pod: &Pod, pods: &Api<Pod>, context: &Context) -> Result<Action, kube::Error> {
    let uid = pod.uid().unwrap_or_default();
    let grace = pod.metadata.deletion_grace_period_seconds.unwrap_or(0).max(0);
    let due = pod.metadata.deletion_timestamp.as_ref().map(|t| t.0).unwrap_or_else(now);
    let asked = due - jiff::SignedDuration::from_secs(grace);
    let stop_seconds = pod.annotations().get(STOP_SECONDS_ANNOTATION).and_then(|s| s.parse::<i64>().ok());
    // Containers still running when the grace period ends are killed.
    let killed = stop_seconds.is_some_and(|s| s > 0 && s >= grace);
    let stopped = asked + jiff::SignedDuration::from_secs(stop_seconds.unwrap_or(0).clamp(0, grace));
    let left = stopped.duration_since(now());
    if left.is_positive() {
        return Ok(Action::requeue(left.unsigned_abs()));
    }
    // Report the containers stopped, once: the report is itself a change that brings the pod back here.
    let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
    let reported = pod
        .status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .all(|c| c.state.as_ref().is_some_and(|s| s.terminated.is_some()));
    if running && !reported {
        let code = if killed { 137 } else { 0 };
        let mut conditions = serde_json::to_value(pod.status.as_ref().and_then(|s| s.conditions.clone()))
            .unwrap_or_default()
            .as_array()
            .cloned()
            .unwrap_or_default();
        for condition in &mut conditions {
            if condition["type"] == "Ready" || condition["type"] == "ContainersReady" {
                *condition = json!({"type": condition["type"], "status": "False", "reason": "PodTerminating",
                                    "lastTransitionTime": rfc3339_now()});
            }
        }
        let status = json!({"status": {
            "conditions": conditions,
            "containerStatuses": container_statuses(pod, |_| (false, false, json!({"terminated": {
                "exitCode": code, "reason": if killed { "Error" } else { "Completed" }, "finishedAt": rfc3339_now()}}))),
        }});
        match pods.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&status)).await {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(error) => return Err(error),
        }
    }
    let remove = kube::api::DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(kube::api::Preconditions { uid: Some(uid.clone()), resource_version: None }),
        ..Default::default()
    };
    match pods.delete(&pod.name_any(), &remove).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
        Err(error) => return Err(error),
    }
    context.addresses.lock().unwrap_or_else(|p| p.into_inner()).remove(&uid);
    Ok(Action::await_change())
}

fn remember(context: &Context, uid: &str, ip: &str) {
    let prefix = context.options.pod_cidr.trim_end_matches("0/24");
    if let Some(host) = ip.strip_prefix(prefix).and_then(|h| h.parse::<u8>().ok()) {
        context.addresses.lock().unwrap_or_else(|p| p.into_inner()).insert(uid.to_string(), host);
    }
}

/// The next free address of the node's pod range for pod `uid`. Addresses of pods removed without the node seeing
/// them go (a forced deletion) are only found free again when the range runs out and the node's pods are counted.
fn allocate(context: &Context, uid: &str, live: Option<&BTreeSet<String>>) -> Option<String> {
    let prefix = context.options.pod_cidr.trim_end_matches("0/24");
    let mut taken = context.addresses.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(live) = live {
        taken.retain(|uid, _| live.contains(uid));
    }
    if let Some(host) = taken.get(uid) {
        return Some(format!("{prefix}{host}"));
    }
    let used: BTreeSet<u8> = taken.values().copied().collect();
    let host = (2..=254u8).find(|h| !used.contains(h))?;
    taken.insert(uid.to_string(), host);
    Some(format!("{prefix}{host}"))
}

/// The pod's address: the one it has, else a free one of the node's range.
async fn address(pod: &Pod, context: &Context) -> Result<String, kube::Error> {
    if let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) {
        return Ok(ip);
    }
    let uid = pod.uid().unwrap_or_default();
    if let Some(ip) = allocate(context, &uid, None) {
        return Ok(ip);
    }
    let mine = kube::api::ListParams::default().fields(&format!("spec.nodeName={}", context.options.name));
    let live = Api::<Pod>::all(context.client.clone()).list(&mine).await?;
    let live: BTreeSet<String> = live.items.iter().filter_map(|p| p.uid()).collect();
    Ok(allocate(context, &uid, Some(&live)).unwrap_or_default())
}

/// How long after the pod started its containers are started and ready: (name, started after, ready after). A
/// container is started when its startup probe's initial delay has passed, and ready when its readiness probe's has
/// too; `None` is never (readiness made to fail by annotation).
fn container_plan(pod: &Pod) -> Vec<(String, Duration, Option<Duration>)> {
    let failing = pod.annotations().get(READY_ANNOTATION).is_some_and(|v| v == "false");
    let delay = |probe: Option<&k8s_openapi::api::core::v1::Probe>| {
        seconds(probe.and_then(|p| p.initial_delay_seconds).unwrap_or(0).into())
    };
    pod.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| {
            let started = delay(c.startup_probe.as_ref());
            let ready = started + delay(c.readiness_probe.as_ref());
            (c.name.clone(), started, (!failing).then_some(ready))
        })
        .collect()
}

/// How long the pod has been running.
fn running_for(pod: &Pod) -> Duration {
    let started = pod.status.as_ref().and_then(|s| s.start_time.as_ref()).map(|t| t.0).unwrap_or_else(now);
    now().duration_since(started).unsigned_abs()
}

/// When the pod's containers next become started or ready, from now.
fn next_transition(pod: &Pod) -> Option<Duration> {
    let elapsed = running_for(pod);
    container_plan(pod)
        .into_iter()
        .flat_map(|(_, started, ready)| [Some(started), ready])
        .flatten()
        .filter(|at| *at > elapsed)
        .map(|at| at - elapsed + Duration::from_millis(50))
        .min()
}

/// Whether `status` says something about the pod's containers that its current status does not.
fn status_changes(pod: &Pod, status: &Value) -> bool {
    let current = serde_json::to_value(pod.status.clone().unwrap_or_default()).unwrap_or_default();
    let flags = |status: &Value| -> Vec<(Value, Value, Value)> {
        status["containerStatuses"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| (c["name"].clone(), c["ready"].clone(), c["started"].clone()))
            .collect()
    };
    flags(&current) != flags(status) || current["podIP"] != status["podIP"]
}

/// Each container's status: `state(name)` gives (ready, started, state).
fn container_statuses(pod: &Pod, state: impl Fn(&str) -> (bool, bool, Value)) -> Vec<Value> {
    let uid = pod.uid().unwrap_or_default();
    let restarts: BTreeMap<String, i32> = pod
        .status
        .iter()
        .flat_map(|s| s.container_statuses.iter().flatten())
        .map(|c| (c.name.clone(), c.restart_count))
        .collect();
    pod.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| {
            let image = c.image.clone().unwrap_or_default();
            let (ready, started, state) = state(&c.name);
            json!({"name": c.name, "image": image, "imageID": format!("simulated://{image}"),
                   "containerID": format!("simulated://{uid}/{}", c.name), "ready": ready, "started": started,
                   "restartCount": restarts.get(&c.name).copied().unwrap_or(0), "state": state})
        })
        .collect()
}

fn running(pod: &Pod, context: &Context, ip: &str) -> Value {
    let at = rfc3339_now();
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map_or_else(|| at.clone(), |t| t.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
    let elapsed = running_for(pod);
    let plan = container_plan(pod);
    let state = |name: &str| {
        let (_, start, ready) = plan.iter().find(|(n, ..)| n == name).cloned().unwrap_or_default();
        let running = json!({"running": {"startedAt": started}});
        (ready.is_some_and(|r| elapsed >= r), elapsed >= start, running)
    };
    let statuses = container_statuses(pod, state);
    let all_ready = statuses.iter().all(|c| c["ready"] == true);
    let condition = |kind: &str, ok: bool| {
        let reason = if ok { Value::Null } else { json!("ContainersNotReady") };
        json!({"type": kind, "status": if ok { "True" } else { "False" }, "reason": reason, "lastProbeTime": null,
               "lastTransitionTime": at})
    };
    json!({
        "phase": "Running",
        "hostIP": context.options.address, "hostIPs": [{"ip": context.options.address}],
        "podIP": ip, "podIPs": [{"ip": ip}],
        "startTime": started,
        "conditions": [condition("PodReadyToStartContainers", true), condition("Initialized", true),
                       condition("Ready", all_ready), condition("ContainersReady", all_ready),
                       condition("PodScheduled", true)],
        "containerStatuses": statuses,
        "qosClass": "BestEffort",
    })
}

fn finished(pod: &Pod, code: i32) -> Value {
    let at = rfc3339_now();
    let statuses = container_statuses(pod, |_| {
        let reason = if code == 0 { "Completed" } else { "Error" };
        (false, false, json!({"terminated": {"exitCode": code, "reason": reason, "finishedAt": at}}))
    });
    let condition = |kind: &str, status: &str| json!({"type": kind, "status": status, "reason": "PodCompleted", "lastProbeTime": null, "lastTransitionTime": at});
    json!({
        "phase": if code == 0 { "Succeeded" } else { "Failed" },
        "conditions": [condition("PodScheduled", "True"), condition("Initialized", "True"),
                       condition("Ready", "False"), condition("ContainersReady", "False")],
        "containerStatuses": statuses,
    })
}
