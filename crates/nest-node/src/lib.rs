//! nest's node agent: it registers a Node, keeps its Lease in `kube-node-lease` renewed, and runs the pods bound to
//! it with one of two runtimes, chosen per node with [`Mode`]:
//!
//! - [`simulated`], in the manner of kwok: pods are reported Running and Ready after a delay without running anything,
//!   and annotations declare what they do (finish, fail readiness, take time to stop);
//! - [`process`]: pods run as real processes, one per container, in sandboxes of their own, from images the node's
//!   store holds or pulls (or host executables the [`allowlist`] maps images to), with volumes written to disk,
//!   probes, restarts and logs.
//!
//! A `process` node never reports Running what it does not run: an image no source gives leaves the pod waiting
//! (`ErrImagePull`, then `ImagePullBackOff`). It simulates only the pods that ask for it, by a RuntimeClass whose
//! handler is [`SIMULATED_HANDLER`] (`handler`), as a kubelet runs a pod with its RuntimeClass's handler. Either
//! way a deleted pod is stopped as the kubelet stops one, within its grace period, and then removed from the API
//! server.
//!
//! Start with [`run`] and [`Options`].

pub mod addresses;
pub mod allowlist;
mod attach;
pub mod events;
pub mod expand;
pub mod firewall;
pub mod hosts;
pub mod images;
pub mod kubelet;
pub mod network;
pub mod port_forward;
pub mod prerequisites;
pub mod probe;
pub mod process;
pub mod proxy;
pub mod registries;
pub use nest_core::quantity;
pub mod simulated;
pub mod stats;
mod streaming;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures_util::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;

pub use simulated::{EXIT_CODE_ANNOTATION, READY_ANNOTATION, STOP_SECONDS_ANNOTATION};

/// The label naming a node's runtime: `simulated` or `process`.
pub const RUNTIME_LABEL: &str = "nest.dev/runtime";

/// Which runtime a node runs pods with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Every pod simulated.
    Simulated,
    /// Every pod as processes, but those whose RuntimeClass's handler is [`SIMULATED_HANDLER`].
    Process,
}

/// The RuntimeClass handler a `process` node simulates pods with (RuntimeClass `nest-simulated`,
/// [`nest_client::runtime_classes`]).
pub use nest_client::runtime_classes::SIMULATED_HANDLER;
/// The handler a `process` node runs pods with: containerd's default handler's name.
pub const PROCESS_HANDLER: &str = "runc";

impl Mode {
    /// The value of [`RUNTIME_LABEL`].
    pub fn label(self) -> &'static str {
        match self {
            Mode::Simulated => "simulated",
            Mode::Process => "process",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(text: &str) -> Result<Mode, String> {
        match text {
            "simulated" => Ok(Mode::Simulated),
            "process" => Ok(Mode::Process),
            _ => Err(format!("{text:?}: expected simulated or process")),
        }
    }
}

/// One node.
#[derive(Clone, Debug)]
pub struct Options {
    pub name: String,
    /// Capacity (and allocatable): CPU cores, memory and pod count, as Kubernetes quantities.
    pub cpu: String,
    pub memory: String,
    pub pods: u32,
    /// The node's pod range, like `10.244.3.0/24`, or a loopback range such as `127.1.0.0/16` where pods run as
    /// processes (every address of 127.0.0.0/8 is local on Linux, so each pod can listen on its own).
    pub pod_cidr: String,
    /// The node's own address.
    pub address: String,
    /// How long a simulated pod takes to become Running and Ready.
    pub start_delay: Duration,
    /// How often the Lease is renewed (its duration is four times this).
    pub lease_every: Duration,
    pub mode: Mode,
    /// Where the process runtime keeps its files, and what it may run (unused by simulated nodes).
    pub process: process::Config,
    /// The kubelet API's certificates and port (0: any free port); without them the node serves no API, and
    /// `kubectl logs` cannot reach it.
    pub kubelet: Option<(kubelet::Tls, u16)>,
    /// What every pod may reach on this host through the network wall (see [`firewall`]): the platform's shared
    /// services, such as the syncer's kubelet endpoints.
    pub shared: Vec<firewall::Shared>,
}

impl Options {
    /// Node `name` with index `index` (which picks its pod range and address) and a default size. Simulated nodes
    /// get pod range `10.244.<index>.0/24`; nodes that run processes get `10.<128 + index>.0.0/16`, each pod in a
    /// network namespace of its own on the node's bridge (see [`network`]). Either way the node's own address is
    /// `127.0.1.<index + 1>`.
    pub fn numbered(name: String, index: u8, mode: Mode, data_dir: &std::path::Path) -> Options {
        let pod_cidr = match mode {
            Mode::Simulated => format!("10.244.{index}.0/24"),
            Mode::Process => format!("10.{}.0.0/16", index.saturating_add(128)),
        };
        // A loopback address of its own, where its kubelet API listens.
        let address = format!("127.0.1.{}", index.saturating_add(1));
        let nest = std::env::current_exe().unwrap_or_else(|_| "nest".into());
        Options {
            process: process::Config {
                data_dir: data_dir.join(&name),
                allowlist: allowlist::Allowlist::defaults(&nest),
                crash_backoff: Duration::from_secs(10),
                oci_runtime: "runc".into(),
                init: nest.clone(),
                // Any registry, but none of this machine's that the admin did not name.
                pull_from: vec!["*".into()],
                hosts: hosts::Hosts::default(),
                node: name.clone(),
                image_size_limit: images::DEFAULT_SIZE_LIMIT,
                tenant_share: process::tenants::Share::default(),
            },
            name,
            cpu: "4".into(),
            memory: "8Gi".into(),
            pods: 110,
            pod_cidr,
            address,
            start_delay: Duration::from_millis(200),
            lease_every: Duration::from_secs(10),
            shared: Vec::new(),
            mode,
            kubelet: None,
        }
    }
}

pub(crate) struct Context {
    client: Client,
    events: events::Recorder,
    options: Options,
    addresses: Mutex<addresses::Pool>,
    runtime: Option<Arc<process::Runtime>>,
    /// How each pod of a `process` node is run, by UID, once chosen: a pod keeps its handler for its life, as its
    /// sandbox does, even if its RuntimeClass goes away.
    handlers: Mutex<std::collections::HashMap<String, Chosen>>,
    /// What `/stats/summary` and `/metrics/resource` read ([`stats`]).
    stats: stats::Stats,
}

/// A pod's handler, and its `namespace/name` (for the kubelet API, which names pods so).
#[derive(Clone, Debug)]
struct Chosen {
    handler: Handler,
    pod: String,
}

impl Context {
    /// Whether this node simulates pod `namespace/name`: a `simulated` node every pod, a `process` node those of a
    /// RuntimeClass with handler [`SIMULATED_HANDLER`].
    pub(crate) fn simulates(&self, namespace: &str, name: &str) -> bool {
        if self.runtime.is_none() {
            return true;
        }
        let pod = format!("{namespace}/{name}");
        let handlers = self.handlers.lock().unwrap_or_else(|p| p.into_inner());
        handlers.values().any(|c| c.handler == Handler::Simulated && c.pod == pod)
    }
}

pub(crate) use nest_core::clock::{now, rfc3339_now};

/// How long pods get to stop when the node itself stops.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Registers the node and runs it until `shutdown` completes; then stops the processes it runs.
pub async fn run(
    client: Client,
    options: Options,
    shutdown: impl std::future::Future<Output = ()>,
) -> anyhow::Result<()> {
    let pool = addresses::Pool::new(&options.pod_cidr)?;
    let recorder = events::Recorder::new(client.clone(), "kubelet", Some(&options.name));
    let mut walls = None;
    let runtime = match options.mode {
        Mode::Simulated => None,
        Mode::Process => {
            let network = network::Network::for_range(&options.name, &options.pod_cidr)?;
            network.prepare(&options.shared).await?;
            if let network::Network::Bridged(bridge) = &network {
                walls = Some(bridge.firewall.clone());
            }
            Some(Arc::new(process::Runtime::new(client.clone(), recorder.clone(), options.process.clone(), network)?))
        }
    };
    // The wall follows every pod and Service of the cluster: whose each address is.
    let wall = async {
        match &walls {
            Some(firewall) => {
                let (client, firewall) = (client.clone(), firewall.clone());
                nest_client::supervise::restarting("network wall", move || {
                    firewall::follow(client.clone(), firewall.clone())
                })
                .await
            }
            None => std::future::pending().await,
        }
    };
    let kubelet = match &options.kubelet {
        Some((tls, port)) => {
            let listener = tokio::net::TcpListener::bind((options.address.as_str(), *port))
                .await
                .map_err(|error| anyhow::anyhow!("the kubelet API on {}:{port}: {error}", options.address))?;
            let port = listener.local_addr()?.port();
            Some((listener, tls.clone(), port))
        }
        None => None,
    };
    let kubelet_port = kubelet.as_ref().map(|(_, _, port)| *port);
    register(&client, &options, kubelet_port).await?;
    let context = Arc::new(Context {
        client: client.clone(),
        events: recorder,
        options: options.clone(),
        addresses: Mutex::new(pool),
        runtime: runtime.clone(),
        handlers: Mutex::new(Default::default()),
        stats: stats::Stats::new(),
    });
    // The pod loop, and the sweep beside it, each in a task of its own that starts again if it panics, so that one
    // pod (of any tenant) that trips a bug can neither stop the node nor take every pod's processes with it.
    let pod_loop = nest_client::supervise::restarting("pods", {
        let (client, context, name) = (client.clone(), context.clone(), options.name.clone());
        move || {
            let pods: Api<Pod> = Api::all(client.clone());
            let mine = watcher::Config::default().fields(&format!("spec.nodeName={name}"));
            Controller::new(pods, mine).run(reconcile, error_policy, context.clone()).for_each(|result| async move {
                if let Err(error) = result {
                    tracing::debug!(%error, "node runtime");
                }
            })
        }
    });
    // Local storage limits, measured and enforced beside the pod loop (nothing to do without the process runtime).
    let storage = async {
        match runtime.clone() {
            Some(runtime) => {
                nest_client::supervise::restarting("storage", move || runtime.clone().enforce_storage()).await
            }
            None => std::future::pending().await,
        }
    };
    let sweeping = nest_client::supervise::restarting("sweep", {
        let context = context.clone();
        move || {
            let context = context.clone();
            async move { sweep(&context).await }
        }
    });
    let kubelet = async {
        match kubelet {
            Some((listener, tls, _)) => kubelet::serve(listener, tls, context.clone()).await,
            None => std::future::pending().await,
        }
    };
    let result = tokio::select! {
        () = pod_loop => Err(anyhow::anyhow!("the pod watch of node {} ended", options.name)),
        result = kubelet => result,
        result = heartbeat(&client, &options, kubelet_port) => result,
        () = sweeping => Ok(()),
        () = storage => Ok(()),
        () = wall => Err(anyhow::anyhow!("the network wall's watches of node {} ended", options.name)),
        () = shutdown => Ok(()),
    };
    if let Some(runtime) = runtime {
        runtime.stop_all(SHUTDOWN_GRACE).await;
    }
    if let Some(firewall) = walls {
        firewall.uninstall().await;
    }
    result
}

/// Every few seconds: forgets the addresses, and stops the processes, of pods that are gone without the node
/// seeing them go (a forced deletion, or a deletion while the node was down).
async fn sweep(context: &Context) {
    let mine = ListParams::default().fields(&format!("spec.nodeName={}", context.options.name));
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let listed = SystemTime::now();
        let Ok(list) = Api::<Pod>::all(context.client.clone()).list_metadata(&mine).await else { continue };
        let live: BTreeSet<String> = list.items.iter().filter_map(|p| p.uid()).collect();
        context.addresses.lock().unwrap_or_else(|p| p.into_inner()).retain(&live, listed);
        context.handlers.lock().unwrap_or_else(|p| p.into_inner()).retain(|uid, _| live.contains(uid));
        if let Some(runtime) = &context.runtime {
            runtime.keep_only(&live, listed).await;
        }
    }
}

/// Creates the Node with its status, Ready, as the kubelet registers (or takes over an existing one of this name and
/// reports it Ready). Registering with a status lets the node lifecycle controller lift the `not-ready` taint every
/// new node gets the moment it sees the node.
async fn register(client: &Client, options: &Options, kubelet_port: Option<u16>) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_string(), options.name.clone()),
        ("kubernetes.io/os".to_string(), "linux".to_string()),
        ("kubernetes.io/arch".to_string(), "amd64".to_string()),
        (RUNTIME_LABEL.to_string(), options.mode.label().to_string()),
    ]);
    let node = serde_json::from_value::<Node>(json!({
        "metadata": {"name": options.name, "labels": labels},
        "spec": {"podCIDR": options.pod_cidr, "podCIDRs": [options.pod_cidr]},
        "status": status(options, kubelet_port),
    }))?;
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let patch = json!({"metadata": {"labels": labels}, "spec": {"podCIDR": options.pod_cidr}});
            nodes.patch(&options.name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            report_ready(&nodes, options, kubelet_port).await
        }
        Err(error) => Err(error.into()),
    }
}

/// The node's status: capacity, addresses, and `Ready`.
fn status(options: &Options, kubelet_port: Option<u16>) -> serde_json::Value {
    let resources = json!({"cpu": options.cpu, "memory": options.memory, "pods": options.pods.to_string()});
    let condition = |kind: &str, status: &str, reason: &str| {
        json!({"type": kind, "status": status, "reason": reason, "lastHeartbeatTime": rfc3339_now(),
               "lastTransitionTime": rfc3339_now()})
    };
    json!({
        "capacity": resources, "allocatable": resources,
        "conditions": [
            condition("Ready", "True", "KubeletReady"),
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID"),
        ],
        "addresses": [{"type": "InternalIP", "address": options.address}, {"type": "Hostname", "address": options.name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port.unwrap_or(0)}},
        "nodeInfo": {
            "kubeletVersion": "v1.33.0-nest", "kubeProxyVersion": "", "containerRuntimeVersion": format!("nest-{}://1", options.mode.label()),
            "operatingSystem": "linux", "architecture": "amd64", "osImage": format!("nest {} node", options.mode.label()),
            "kernelVersion": "", "machineID": "", "systemUUID": "", "bootID": "",
        },
    })
}

/// Posts the node's status.
async fn report_ready(nodes: &Api<Node>, options: &Options, kubelet_port: Option<u16>) -> anyhow::Result<()> {
    let status = json!({"status": status(options, kubelet_port)});
    nodes.patch_status(&options.name, &PatchParams::default(), &Patch::Merge(&status)).await?;
    Ok(())
}

/// Renews the node's Lease in `kube-node-lease`, as the kubelet does.
async fn heartbeat(client: &Client, options: &Options, kubelet_port: Option<u16>) -> anyhow::Result<()> {
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
            if !ready && let Err(error) = report_ready(&nodes, options, kubelet_port).await {
                tracing::warn!(%error, node = %options.name, "reporting the node Ready");
            }
        }
        tokio::time::sleep(options.lease_every).await;
    }
}

fn error_policy(_: Arc<Pod>, error: &kube::Error, _: Arc<Context>) -> Action {
    tracing::debug!(%error, "running a pod");
    Action::requeue(Duration::from_secs(1))
}

async fn reconcile(pod: Arc<Pod>, context: Arc<Context>) -> Result<Action, kube::Error> {
    let uid = pod.uid().unwrap_or_default();
    if let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.as_deref()) {
        context.addresses.lock().unwrap_or_else(|p| p.into_inner()).remember(&uid, ip);
    }
    let Some(runtime) = context.runtime.clone() else { return simulated::reconcile(&pod, &context).await };
    if runtime.knows(&uid) {
        return process_reconcile(&pod, &context, &runtime).await;
    }
    let chosen = context.handlers.lock().unwrap_or_else(|p| p.into_inner()).get(&uid).map(|c| c.handler);
    let chosen = match chosen {
        Some(chosen) => chosen,
        None => match handler(&pod, &context).await? {
            Ok(handler) => {
                let pod = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
                context.handlers.lock().unwrap_or_else(|p| p.into_inner()).insert(uid.clone(), Chosen { handler, pod });
                handler
            }
            Err(message) => return no_sandbox(&pod, &context, &message).await,
        },
    };
    if chosen == Handler::Simulated {
        return simulated::reconcile(&pod, &context).await;
    }
    process_reconcile(&pod, &context, &runtime).await
}

/// How a `process` node runs a pod: the handler of its RuntimeClass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Handler {
    /// As processes (no RuntimeClass, or one with handler [`PROCESS_HANDLER`]).
    Process,
    /// Simulated (handler [`SIMULATED_HANDLER`]).
    Simulated,
}

/// The handler of the pod's RuntimeClass, as the kubelet's runtime class manager looks it up
/// (`pkg/kubelet/runtimeclass`, 1.33) before it makes the pod's sandbox; or why the sandbox cannot be made: the
/// class is missing (`runtimeclass.node.k8s.io "<name>" not found`) or names a handler this node lacks (containerd's
/// `no runtime for "<handler>" is configured`).
async fn handler(pod: &Pod, context: &Context) -> Result<Result<Handler, String>, kube::Error> {
    use k8s_openapi::api::node::v1::RuntimeClass;
    let Some(name) = pod.spec.as_ref().and_then(|s| s.runtime_class_name.as_deref()).filter(|n| !n.is_empty()) else {
        return Ok(Ok(Handler::Process));
    };
    let classes: Api<RuntimeClass> = Api::all(context.client.clone());
    let Some(class) = classes.get_opt(name).await? else {
        return Ok(Err(format!("runtimeclass.node.k8s.io {name:?} not found")));
    };
    Ok(match class.handler.as_str() {
        SIMULATED_HANDLER => Ok(Handler::Simulated),
        PROCESS_HANDLER => Ok(Handler::Process),
        other => Err(format!("failed to get sandbox runtime: no runtime for {other:?} is configured")),
    })
}

/// A pod whose sandbox cannot be made (its RuntimeClass): it waits in `ContainerCreating`, and the kubelet's
/// `FailedCreatePodSandBox` Event says why, once for each new reason; looked at again every few seconds, since the
/// class may come.
async fn no_sandbox(pod: &Pod, context: &Context, why: &str) -> Result<Action, kube::Error> {
    if pod.metadata.deletion_timestamp.is_some() {
        remove(pod, context).await?;
        return Ok(Action::await_change());
    }
    let message = format!("Failed to create pod sandbox: {why}");
    if waiting_message(pod) != Some(message.as_str()) {
        let waiting = json!({"waiting": {"reason": "ContainerCreating", "message": message}});
        report_waiting(pod, context, "", waiting).await?;
        event(pod, context, "Warning", "FailedCreatePodSandBox", &message);
    }
    Ok(Action::requeue(Duration::from_secs(5)))
}

/// The pod's address: the one it has, else a free one of the node's range.
pub(crate) fn address(pod: &Pod, context: &Context) -> String {
    if let Some(ip) = pod.status.as_ref().and_then(|s| s.pod_ip.clone()) {
        return ip;
    }
    let uid = pod.uid().unwrap_or_default();
    let ip = context.addresses.lock().unwrap_or_else(|p| p.into_inner()).allocate(&uid);
    ip.map(|ip| ip.to_string()).unwrap_or_default()
}

/// Removes a pod whose containers have stopped (grace period 0: nothing is left to wait for).
pub(crate) async fn remove(pod: &Pod, context: &Context) -> Result<(), kube::Error> {
    let uid = pod.uid().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(context.client.clone(), &pod.namespace().unwrap_or_default());
    let remove = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions { uid: Some(uid.clone()), resource_version: None }),
        ..Default::default()
    };
    match pods.delete(&pod.name_any(), &remove).await {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
        Err(error) => return Err(error),
    }
    context.addresses.lock().unwrap_or_else(|p| p.into_inner()).release(&uid);
    Ok(())
}

/// The grace period a deleted pod's processes get. Like the kubelet, the node counts `deletionGracePeriodSeconds`
/// from when it sees the deletion, since the deletionTimestamp has only whole seconds.
pub(crate) fn grace_period(pod: &Pod) -> Duration {
    Duration::from_secs(pod.metadata.deletion_grace_period_seconds.unwrap_or(0).max(0).unsigned_abs())
}

async fn process_reconcile(pod: &Pod, context: &Context, runtime: &process::Runtime) -> Result<Action, kube::Error> {
    let uid = pod.uid().unwrap_or_default();
    if pod.metadata.deletion_timestamp.is_some() {
        runtime.stop(&uid, grace_period(pod)).await;
        remove(pod, context).await?;
        runtime.remove(&uid).await;
        return Ok(Action::await_change());
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or_default();
    if phase == "Succeeded" || phase == "Failed" {
        return Ok(Action::await_change());
    }
    let ip = address(pod, context);
    let facts = process::prepare::PodFacts {
        pod,
        pod_ip: &ip,
        host_ip: &context.options.address,
        node_cpu: quantity::parse(&context.options.cpu),
        node_memory: quantity::parse(&context.options.memory),
    };
    if runtime.knows(&uid) {
        // Running: ephemeral containers it gained are started (`kubectl debug`); its volumes are kept up to date,
        // its tokens renewed; a failure is tried again at the next look.
        runtime.start_ephemeral(pod, &facts).await;
        let again = match runtime.refresh(pod, &facts).await {
            Ok(again) => again,
            Err(error) => {
                tracing::info!(pod = %pod.name_any(), %error, "refreshing a pod's volumes");
                Duration::from_secs(10)
            }
        };
        return Ok(Action::requeue(again));
    }
    // An image pull failed a moment ago: the pod waits out the back-off, as the kubelet's does.
    if let Some(backoff) = runtime.pull_backoff(&uid) {
        let message = format!("Back-off pulling image \"{}\"", backoff.image);
        if waiting_reason(pod) != Some("ImagePullBackOff") {
            report_waiting(pod, context, &ip, json!({"waiting": {"reason": "ImagePullBackOff", "message": message}}))
                .await?;
            event(pod, context, "Normal", "BackOff", &message);
            event(pod, context, "Warning", "Failed", "Error: ImagePullBackOff");
        }
        let left = backoff.until.saturating_duration_since(std::time::Instant::now());
        return Ok(Action::requeue(left + Duration::from_millis(100)));
    }
    match runtime.start(pod, &facts).await {
        Ok(()) => Ok(Action::requeue(process::VOLUME_REFRESH)),
        Err(error) => {
            tracing::info!(pod = %pod.name_any(), %error, "cannot start a pod");
            let waiting = json!({"waiting": {"reason": error.reason(), "message": error.to_string()}});
            report_waiting(pod, context, &ip, waiting).await?;
            // What the pod lacks (a ConfigMap, a Secret) is often being made at this moment, by whoever made the pod:
            // look again soon, as the kubelet's volume manager does, since this node watches pods, not them.
            let again = match &error {
                process::PrepareError::Config(_) | process::PrepareError::Api(_) => Duration::from_secs(1),
                process::PrepareError::Io(_) => Duration::from_secs(10),
                // Then the back-off is reported (above) until the next try.
                process::PrepareError::Pull { reason, .. } if *reason == NEVER_PULL => Duration::from_secs(5),
                process::PrepareError::Pull { .. } => Duration::from_secs(1),
                // A claim is bound a moment after it is made.
                process::PrepareError::Mount { .. } => Duration::from_millis(500),
                process::PrepareError::Network(_) => Duration::from_secs(5),
            };
            if let process::PrepareError::Network(_) = &error
                && waiting_message(pod) != Some(error.to_string().as_str())
            {
                event(pod, context, "Warning", "FailedCreatePodSandBox", &error.to_string());
            }
            if let process::PrepareError::Mount { .. } = &error
                && waiting_message(pod) != Some(error.to_string().as_str())
            {
                event(pod, context, "Warning", "FailedMount", &error.to_string());
            }
            // What the pod's spec asks and the node will not do (CreateContainerConfigError): the kubelet's
            // `Failed` Event, once for each new message.
            if let process::PrepareError::Config(_) = &error
                && waiting_message(pod) != Some(error.to_string().as_str())
            {
                event(pod, context, "Warning", "Failed", &format!("Error: {error}"));
            }
            // The kubelet's two Events for a failed pull: what failed, and the container's new waiting reason. An
            // image a Never policy keeps from being pulled is told once, not at every look.
            if let process::PrepareError::Pull { image, message, reason } = &error {
                if *reason != NEVER_PULL {
                    let failed = format!("Failed to pull image \"{image}\": {message}");
                    event(pod, context, "Warning", "Failed", &failed);
                    event(pod, context, "Warning", "Failed", &format!("Error: {reason}"));
                } else if waiting_message(pod) != Some(error.to_string().as_str()) {
                    event(pod, context, "Warning", NEVER_PULL, message);
                    event(pod, context, "Warning", "Failed", &format!("Error: {reason}"));
                }
            }
            Ok(Action::requeue(again))
        }
    }
}

/// The waiting reason, and the Event's, of a container whose image is absent and may not be pulled.
const NEVER_PULL: &str = "ErrImageNeverPull";

/// Reports every container of the pod waiting, for the given reason.
async fn report_waiting(pod: &Pod, context: &Context, ip: &str, waiting: serde_json::Value) -> Result<(), kube::Error> {
    let statuses: Vec<serde_json::Value> = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| {
            json!({"name": c.name, "image": c.image, "imageID": "", "ready": false, "started": false,
                        "restartCount": 0, "state": waiting})
        })
        .collect();
    let mut status = json!({"phase": "Pending", "hostIP": context.options.address, "containerStatuses": statuses});
    if !ip.is_empty() {
        status["podIP"] = json!(ip);
        status["podIPs"] = json!([{"ip": ip}]);
    }
    let pods: Api<Pod> = Api::namespaced(context.client.clone(), &pod.namespace().unwrap_or_default());
    match pods.patch_status(&pod.name_any(), &PatchParams::default(), &Patch::Merge(&json!({"status": status}))).await {
        Ok(_) | Err(kube::Error::Api(_)) => Ok(()),
        Err(error) => Err(error),
    }
}

/// The message of the pod's first container's waiting state, as last reported.
fn waiting_message(pod: &Pod) -> Option<&str> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    statuses.first()?.state.as_ref()?.waiting.as_ref()?.message.as_deref()
}

/// The reason the pod's first container waits for, as last reported.
fn waiting_reason(pod: &Pod) -> Option<&str> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    statuses.first()?.state.as_ref()?.waiting.as_ref()?.reason.as_deref()
}

/// Records an Event about the pod from this node's kubelet.
fn event(pod: &Pod, context: &Context, type_: &str, reason: &str, message: &str) {
    events::record(&context.events, &about(pod), type_, reason, message);
}

/// The pod, as its Events name it.
pub(crate) fn about(pod: &Pod) -> events::About {
    events::About {
        namespace: pod.namespace().unwrap_or_default(),
        name: pod.name_any(),
        uid: pod.uid().unwrap_or_default(),
        field_path: None,
    }
}
