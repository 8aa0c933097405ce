//! The scheduler, after kube-scheduler's default profile reduced to what nest's clusters need: every pending pod
//! whose `schedulerName` is `default-scheduler` is bound (`pods/binding`) to a node that is schedulable, matches the
//! pod's `nodeSelector` and required node affinity, whose taints the pod tolerates, and that has room for the pod's
//! resource requests and one more pod. As in kube-scheduler, a node's conditions count only through the taints the
//! node lifecycle controller makes of them (a new node is `not-ready` until it reports Ready). Among those it prefers the least allocated. A pod that fits
//! nowhere gets `PodScheduled=False` with reason `Unschedulable` and a `FailedScheduling` event, and is tried again.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{Node, NodeSelectorRequirement, Pod, Taint};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use nest_client::taints;
use serde_json::json;

/// The scheduler name this scheduler serves.
pub const SCHEDULER_NAME: &str = "default-scheduler";

struct Context {
    client: Client,
    events: nest_client::events::Recorder,
    nodes: Store<Node>,
    pods: Store<Pod>,
    /// Pods bound by this scheduler that the pod store may not show bound yet (kube-scheduler's "assumed" pods):
    /// their node by uid, so that the next decisions count them.
    assumed: Mutex<HashMap<String, String>>,
    /// One pod at a time, as kube-scheduler's scheduling cycle: a decision sees every earlier binding.
    cycle: tokio::sync::Mutex<()>,
}

impl Context {
    /// Every pod as this scheduler knows it: the store's, with the nodes of assumed pods filled in.
    fn pods(&self) -> Vec<Arc<Pod>> {
        let mut assumed = self.assumed.lock().unwrap_or_else(|p| p.into_inner());
        let pods: Vec<Arc<Pod>> = self
            .pods
            .state()
            .into_iter()
            .map(|pod| {
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                let bound = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).is_some_and(|n| !n.is_empty());
                match assumed.get(&uid) {
                    Some(_) if bound => {
                        assumed.remove(&uid);
                        pod
                    }
                    Some(node) => {
                        let mut pod = (*pod).clone();
                        pod.spec.get_or_insert_with(Default::default).node_name = Some(node.clone());
                        Arc::new(pod)
                    }
                    None => pod,
                }
            })
            .collect();
        pods
    }
}

/// Runs the scheduler until `client`'s server goes away for good.
pub async fn run(client: Client) {
    let (nodes, node_feed) = nest_client::cache(Api::<Node>::all(client.clone()), Default::default());
    let (pods, pod_feed) = nest_client::cache(Api::<Pod>::all(client.clone()), Default::default());
    let pending = watcher::Config::default().fields("spec.nodeName=");
    let context = Arc::new(Context {
        client: client.clone(),
        events: nest_client::events::Recorder::new(client.clone(), SCHEDULER_NAME, None),
        nodes,
        pods,
        assumed: Mutex::default(),
        cycle: Default::default(),
    });
    let scheduling = Controller::new(Api::<Pod>::all(client), pending).run(reconcile, error_policy, context).for_each(
        |result| async move {
            if let Err(error) = result {
                tracing::debug!(%error, "scheduler");
            }
        },
    );
    tokio::join!(node_feed, pod_feed, scheduling);
}

fn error_policy(_: Arc<Pod>, error: &kube::Error, _: Arc<Context>) -> Action {
    tracing::debug!(%error, "scheduling a pod");
    Action::requeue(Duration::from_secs(1))
}

async fn reconcile(pod: Arc<Pod>, context: Arc<Context>) -> Result<Action, kube::Error> {
    let spec = pod.spec.clone().unwrap_or_default();
    if spec.node_name.as_deref().is_some_and(|n| !n.is_empty())
        || spec.scheduler_name.as_deref().unwrap_or(SCHEDULER_NAME) != SCHEDULER_NAME
        || pod.metadata.deletion_timestamp.is_some()
    {
        return Ok(Action::await_change());
    }
    let _cycle = context.cycle.lock().await;
    let nodes = context.nodes.state();
    let pods = context.pods();
    let (namespace, name) = (pod.namespace().unwrap_or_default(), pod.name_any());
    let api: Api<Pod> = Api::namespaced(context.client.clone(), &namespace);
    match choose(&pod, &nodes, &pods) {
        Ok(node) => {
            let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": namespace},
                                 "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
            let bind: Result<k8s_openapi::apimachinery::pkg::apis::meta::v1::Status, _> =
                api.create_subresource("binding", &name, &PostParams::default(), &binding).await;
            match bind {
                Ok(_) => {
                    tracing::debug!(pod = %name, %node, "bound");
                    let uid = pod.metadata.uid.clone().unwrap_or_default();
                    let message = format!("Successfully assigned {namespace}/{name} to {node}");
                    context.assumed.lock().unwrap_or_else(|p| p.into_inner()).insert(uid, node);
                    context.events.about(&*pod, "Normal", "Scheduled", message);
                }
                Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => {}
                Err(error) => return Err(error),
            }
            Ok(Action::await_change())
        }
        Err(reasons) => {
            let message = format!("0/{} nodes are available: {}.", nodes.len(), summarize(&reasons));
            let already = pod.status.as_ref().and_then(|s| s.conditions.as_ref()).into_iter().flatten().any(|c| {
                c.type_ == "PodScheduled" && c.status == "False" && c.message.as_deref() == Some(message.as_str())
            });
            if !already {
                let now = rfc3339_now();
                let condition = json!({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                       "message": message, "lastProbeTime": null, "lastTransitionTime": now});
                let patch = json!({"status": {"conditions": [condition]}});
                match api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                    Ok(_) | Err(kube::Error::Api(_)) => {}
                    Err(error) => return Err(error),
                }
                context.events.about(&*pod, "Warning", "FailedScheduling", message);
            }
            Ok(Action::requeue(Duration::from_secs(2)))
        }
    }
}

use nest_core::clock::rfc3339_now;

/// Requests of a pod (CPU in millicores, memory in bytes), summed over its containers.
fn requests(pod: &Pod) -> (f64, f64) {
    let mut total = (0.0, 0.0);
    for container in pod.spec.iter().flat_map(|s| s.containers.iter()) {
        let requests = container.resources.as_ref().and_then(|r| r.requests.as_ref());
        if let Some(cpu) = requests.and_then(|r| r.get("cpu")) {
            total.0 += quantity(&cpu.0) * 1000.0;
        }
        if let Some(memory) = requests.and_then(|r| r.get("memory")) {
            total.1 += quantity(&memory.0);
        }
    }
    total
}

pub use nest_core::quantity::parse as quantity;

/// Why a node was passed over, as kube-scheduler words it.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Reason {
    Unschedulable,
    Selector,
    /// The first taint the pod does not tolerate: key and value.
    Taint(String, String),
    Cpu,
    Memory,
    Pods,
}

impl Reason {
    fn text(&self) -> String {
        match self {
            Reason::Unschedulable => "node(s) were unschedulable".into(),
            Reason::Selector => "node(s) didn't match Pod's node affinity/selector".into(),
            Reason::Taint(key, value) => format!("node(s) had untolerated taint {{{key}: {value}}}"),
            Reason::Cpu => "Insufficient cpu".into(),
            Reason::Memory => "Insufficient memory".into(),
            Reason::Pods => "Too many pods".into(),
        }
    }
}

/// The reasons counted, as kube-scheduler's `FitError` words them: "<count> <reason>" sorted as text.
fn summarize(reasons: &[Reason]) -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for reason in reasons {
        *counts.entry(reason.text()).or_default() += 1;
    }
    if counts.is_empty() {
        return "no nodes registered".into();
    }
    let mut counted: Vec<String> = counts.iter().map(|(reason, n)| format!("{n} {reason}")).collect();
    counted.sort();
    counted.join(", ")
}

/// The node for `pod`, or why every node was passed over.
fn choose(pod: &Pod, nodes: &[Arc<Node>], pods: &[Arc<Pod>]) -> Result<String, Vec<Reason>> {
    let (cpu, memory) = requests(pod);
    let mut reasons = Vec::new();
    let mut best: Option<(f64, String)> = None;
    for node in nodes {
        let name = node.name_any();
        let on_node: Vec<&Arc<Pod>> = pods
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name.as_str()))
            .filter(|p| !matches!(p.status.as_ref().and_then(|s| s.phase.as_deref()), Some("Succeeded" | "Failed")))
            .collect();
        match fits(pod, node, &on_node, cpu, memory) {
            Err(reason) => reasons.push(reason),
            Ok(score) => {
                if best.as_ref().is_none_or(|(s, n)| score < *s || (score == *s && name < *n)) {
                    best = Some((score, name));
                }
            }
        }
    }
    best.map(|(_, name)| name).ok_or(reasons)
}

/// Whether `pod` fits `node`; if so, how allocated the node would be (lower is better). The checks run in the order
/// of kube-scheduler's filters (NodeUnschedulable, TaintToleration, NodeAffinity, NodeResourcesFit), and the first
/// that fails is the reason.
fn fits(pod: &Pod, node: &Node, on_node: &[&Arc<Pod>], cpu: f64, memory: f64) -> Result<f64, Reason> {
    let status = node.status.clone().unwrap_or_default();
    let spec = node.spec.clone().unwrap_or_default();
    let pod_spec = pod.spec.clone().unwrap_or_default();
    let tolerations = pod_spec.tolerations.unwrap_or_default();
    let cordoned =
        Taint { key: "node.kubernetes.io/unschedulable".into(), effect: "NoSchedule".into(), ..Taint::default() };
    if spec.unschedulable == Some(true) && !tolerations.iter().any(|t| taints::tolerates(t, &cordoned)) {
        return Err(Reason::Unschedulable);
    }
    let node_taints = spec.taints.unwrap_or_default();
    if let Some(taint) = taints::untolerated(&node_taints, &tolerations, &["NoSchedule", "NoExecute"]) {
        return Err(Reason::Taint(taint.key.clone(), taint.value.clone().unwrap_or_default()));
    }
    let labels = node.labels();
    if !pod_spec.node_selector.iter().flatten().all(|(k, v)| labels.get(k) == Some(v)) || !affinity_allows(pod, labels)
    {
        return Err(Reason::Selector);
    }
    let allocatable = status.allocatable.unwrap_or_default();
    let capacity = |name: &str| allocatable.get(name).map(|q| quantity(&q.0));
    let (used_cpu, used_memory) = on_node.iter().fold((0.0, 0.0), |(c, m), p| {
        let (pc, pm) = requests(p);
        (c + pc, m + pm)
    });
    let cpu_capacity = capacity("cpu").map(|c| c * 1000.0);
    let memory_capacity = capacity("memory");
    let pod_capacity = capacity("pods").unwrap_or(110.0);
    if cpu_capacity.is_some_and(|c| used_cpu + cpu > c) {
        return Err(Reason::Cpu);
    }
    if memory_capacity.is_some_and(|m| used_memory + memory > m) {
        return Err(Reason::Memory);
    }
    if on_node.len() as f64 + 1.0 > pod_capacity {
        return Err(Reason::Pods);
    }
    // Least allocated: the larger of the CPU and memory fractions, with the pod count breaking ties.
    let fraction = |used: f64, capacity: Option<f64>| capacity.filter(|c| *c > 0.0).map_or(0.0, |c| used / c);
    let resources = fraction(used_cpu + cpu, cpu_capacity).max(fraction(used_memory + memory, memory_capacity));
    Ok(resources + (on_node.len() as f64 + 1.0) / pod_capacity / 1000.0)
}

/// `requiredDuringSchedulingIgnoredDuringExecution`: any one term must match all its expressions.
fn affinity_allows(pod: &Pod, labels: &BTreeMap<String, String>) -> bool {
    let required = pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref());
    let Some(required) = required else { return true };
    required
        .node_selector_terms
        .iter()
        .any(|term| term.match_expressions.iter().flatten().all(|e| requirement(e, labels)))
}

fn requirement(e: &NodeSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let values = e.values.clone().unwrap_or_default();
    let value = labels.get(&e.key);
    match e.operator.as_str() {
        "In" => value.is_some_and(|v| values.contains(v)),
        "NotIn" => value.is_none_or(|v| !values.contains(v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), Some(bound)) =
                (value.and_then(|v| v.parse::<i64>().ok()), values.first().and_then(|b| b.parse::<i64>().ok()))
            else {
                return false;
            };
            if e.operator == "Gt" { v > bound } else { v < bound }
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, labels: serde_json::Value, pods: &str) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels},
                "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": pods},
                           "conditions": [{"type": "Ready", "status": "True"}]}}))
            .unwrap(),
        )
    }

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
    }

    #[test]
    fn the_least_allocated_fitting_node_wins_and_misfits_say_why() {
        let nodes = vec![node("a", json!({"zone": "x"}), "110"), node("b", json!({"zone": "y"}), "110")];
        let busy: Arc<Pod> = Arc::new(pod(
            json!({"nodeName": "a", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}),
        ));
        let wanted = pod(json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "500m"}}}]}));
        assert_eq!(choose(&wanted, &nodes, std::slice::from_ref(&busy)), Ok("b".to_string()));
        let pinned = pod(json!({"nodeSelector": {"zone": "x"}, "containers": [{"name": "c"}]}));
        assert_eq!(choose(&pinned, &nodes, std::slice::from_ref(&busy)), Ok("a".to_string()));
        let nowhere = pod(json!({"nodeSelector": {"zone": "z"}, "containers": [{"name": "c"}]}));
        assert_eq!(choose(&nowhere, &nodes, &[]), Err(vec![Reason::Selector, Reason::Selector]));
        let huge = pod(json!({"containers": [{"name": "c", "resources": {"requests": {"cpu": "3"}}}]}));
        assert_eq!(summarize(&choose(&huge, &nodes, &[]).unwrap_err()), "2 Insufficient cpu");
    }

    #[test]
    fn a_tainted_node_is_passed_over_unless_tolerated_and_the_reasons_read_as_upstreams() {
        let mut tainted = (*node("t", json!({}), "110")).clone();
        tainted.spec = Some(
            serde_json::from_value(
                json!({"taints": [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]}),
            )
            .unwrap(),
        );
        let mut full = (*node("f", json!({}), "0")).clone();
        full.metadata.name = Some("f".into());
        let nodes = vec![Arc::new(tainted), Arc::new(full)];
        let plain = pod(json!({"containers": [{"name": "c"}]}));
        assert_eq!(
            summarize(&choose(&plain, &nodes, &[]).unwrap_err()),
            "1 Too many pods, 1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }"
        );
        let tolerant = pod(json!({"containers": [{"name": "c"}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}]}));
        assert_eq!(choose(&tolerant, &nodes, &[]), Ok("t".to_string()));
    }
}
