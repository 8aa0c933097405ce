//! A node agent with a simulated runtime, in the manner of kwok: it registers a Node (labelled
//! `nest.dev/runtime=simulated`), keeps its Lease in `kube-node-lease` renewed, and for every pod bound to it reports
//! the pod Running and Ready after a delay, with an IP from the node's pod range — without running anything. A pod
//! annotated `nest.dev/exit-code: "<n>"` finishes instead: Succeeded for 0, Failed otherwise, so Job flows can be
//! tested.
//!
//! Pods that are deleted are gone at once (the API server does not wait for the node yet), so there is nothing to
//! stop.

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
    /// Host numbers in the pod range that are taken.
    addresses: Mutex<BTreeSet<u8>>,
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

async fn reconcile(pod: Arc<Pod>, context: Arc<Context>) -> Result<Action, kube::Error> {
    let phase = pod.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
    if let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()) {
        remember(&context, ip);
    }
    if pod.metadata.deletion_timestamp.is_some() || phase == "Succeeded" || phase == "Failed" {
        return Ok(Action::await_change());
    }
    let exit_code = pod.annotations().get(EXIT_CODE_ANNOTATION).and_then(|c| c.parse::<i32>().ok());
    if phase == "Running" && exit_code.is_none() {
        return Ok(Action::await_change());
    }
    // Not started yet: wait out the start delay, counted from when the pod was bound.
    let bound = pod.metadata.creation_timestamp.as_ref().map(|t| t.0).unwrap_or_else(now);
    let waited = now().duration_since(bound).unsigned_abs();
    let delay = context.options.start_delay;
    if phase != "Running" && waited < delay {
        return Ok(Action::requeue(delay - waited));
    }
    let pods: Api<Pod> = Api::namespaced(context.client.clone(), &pod.namespace().unwrap_or_default());
    let status = match exit_code {
        Some(code) if phase == "Running" => finished(&pod, code),
        _ => running(&pod, &context),
    };
    match pods.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&json!({"status": status}))).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(error) => return Err(error),
    }
    // A pod told to finish runs for the start delay first.
    Ok(if exit_code.is_some() && phase != "Running" { Action::requeue(delay) } else { Action::await_change() })
}

fn remember(context: &Context, ip: &str) {
    let prefix = context.options.pod_cidr.trim_end_matches("0/24");
    if let Some(host) = ip.strip_prefix(prefix).and_then(|h| h.parse::<u8>().ok()) {
        context.addresses.lock().unwrap_or_else(|p| p.into_inner()).insert(host);
    }
}

/// The next free address of the node's pod range.
fn allocate(context: &Context) -> String {
    let prefix = context.options.pod_cidr.trim_end_matches("0/24");
    let mut taken = context.addresses.lock().unwrap_or_else(|p| p.into_inner());
    let host = (2..=254u8).find(|h| !taken.contains(h)).unwrap_or(254);
    taken.insert(host);
    format!("{prefix}{host}")
}

fn containers(pod: &Pod) -> Vec<(String, String)> {
    pod.spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
        .collect()
}

fn running(pod: &Pod, context: &Context) -> Value {
    let started = rfc3339_now();
    let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap_or_else(|| allocate(context));
    let uid = pod.uid().unwrap_or_default();
    let statuses: Vec<Value> = containers(pod)
        .into_iter()
        .map(|(name, image)| {
            json!({"name": name, "image": image, "imageID": format!("simulated://{image}"),
                   "containerID": format!("simulated://{uid}/{name}"), "ready": true, "started": true,
                   "restartCount": 0, "state": {"running": {"startedAt": started}}})
        })
        .collect();
    let condition =
        |kind: &str| json!({"type": kind, "status": "True", "lastProbeTime": null, "lastTransitionTime": started});
    json!({
        "phase": "Running",
        "hostIP": context.options.address, "hostIPs": [{"ip": context.options.address}],
        "podIP": ip, "podIPs": [{"ip": ip}],
        "startTime": started,
        "conditions": [condition("PodReadyToStartContainers"), condition("Initialized"), condition("Ready"),
                       condition("ContainersReady"), condition("PodScheduled")],
        "containerStatuses": statuses,
        "qosClass": "BestEffort",
    })
}

fn finished(pod: &Pod, code: i32) -> Value {
    let at = rfc3339_now();
    let statuses: Vec<Value> = containers(pod)
        .into_iter()
        .map(|(name, image)| {
            json!({"name": name, "image": image, "imageID": format!("simulated://{image}"), "ready": false,
                   "started": false, "restartCount": 0,
                   "state": {"terminated": {"exitCode": code, "reason": if code == 0 { "Completed" } else { "Error" },
                                            "finishedAt": at}}})
        })
        .collect();
    let condition = |kind: &str, status: &str| json!({"type": kind, "status": status, "reason": "PodCompleted", "lastProbeTime": null, "lastTransitionTime": at});
    json!({
        "phase": if code == 0 { "Succeeded" } else { "Failed" },
        "conditions": [condition("PodScheduled", "True"), condition("Initialized", "True"),
                       condition("Ready", "False"), condition("ContainersReady", "False")],
        "containerStatuses": statuses,
    })
}
