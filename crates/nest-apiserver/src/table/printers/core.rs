//! core v1: pods, services, nodes, namespaces, config, accounts, endpoints, volumes, events, replication controllers
//! and quotas (`printPod`, `printService`, `printNode`, …).

use serde_json::{Value, json};

use crate::table::Printer;
use crate::table::format::{age, created, int, labels, name, or_none, text};

const POD: Printer = Printer {
    columns: &[
        ("Name", "string", 0),
        ("Ready", "string", 0),
        ("Status", "string", 0),
        ("Restarts", "string", 0),
        ("Age", "string", 0),
        ("IP", "string", 1),
        ("Node", "string", 1),
        ("Nominated Node", "string", 1),
        ("Readiness Gates", "string", 1),
    ],
    cells: |o, now| {
        let (ready, total, restarts) = pod_counts(o);
        vec![
            name(o),
            json!(format!("{ready}/{total}")),
            json!(pod_status(o)),
            json!(restarts.to_string()),
            created(o, now),
            json!(or_none(text(&o["status"]["podIP"]))),
            json!(or_none(text(&o["spec"]["nodeName"]))),
            json!(or_none(text(&o["status"]["nominatedNodeName"]))),
            json!(readiness_gates(o)),
        ]
    },
};

const SERVICE: Printer = Printer {
    columns: &[
        ("Name", "string", 0),
        ("Type", "string", 0),
        ("Cluster-IP", "string", 0),
        ("External-IP", "string", 0),
        ("Port(s)", "string", 0),
        ("Age", "string", 0),
        ("Selector", "string", 1),
    ],
    cells: |o, now| {
        let spec = &o["spec"];
        vec![
            name(o),
            json!(spec["type"].as_str().unwrap_or("ClusterIP")),
            json!(or_none(text(&spec["clusterIP"]))),
            json!(external_ips(o)),
            json!(or_none(ports(&spec["ports"]))),
            created(o, now),
            json!(or_none(labels(&spec["selector"]))),
        ]
    },
};

const NODE: Printer = Printer {
    columns: &[
        ("Name", "string", 0),
        ("Status", "string", 0),
        ("Roles", "string", 0),
        ("Age", "string", 0),
        ("Version", "string", 0),
        ("Internal-IP", "string", 1),
        ("External-IP", "string", 1),
        ("OS-Image", "string", 1),
        ("Kernel-Version", "string", 1),
        ("Container-Runtime", "string", 1),
    ],
    cells: |o, now| {
        let status = &o["status"];
        let address = |kind: &str| {
            let addresses = status["addresses"].as_array().into_iter().flatten();
            or_none(addresses.filter(|a| a["type"] == kind).map(|a| text(&a["address"])).next().unwrap_or_default())
        };
        let info = &status["nodeInfo"];
        vec![
            name(o),
            json!(node_status(o)),
            json!(node_roles(o)),
            created(o, now),
            json!(text(&info["kubeletVersion"])),
            json!(address("InternalIP")),
            json!(address("ExternalIP")),
            json!(or_none(text(&info["osImage"]))),
            json!(or_none(text(&info["kernelVersion"]))),
            json!(or_none(text(&info["containerRuntimeVersion"]))),
        ]
    },
};

const NAMESPACE: Printer = Printer {
    columns: &[("Name", "string", 0), ("Status", "string", 0), ("Age", "string", 0)],
    cells: |o, now| vec![name(o), json!(text(&o["status"]["phase"])), created(o, now)],
};

const CONFIG_MAP: Printer = Printer {
    columns: &[("Name", "string", 0), ("Data", "string", 0), ("Age", "string", 0)],
    cells: |o, now| {
        let count = |f: &str| o[f].as_object().map_or(0, |m| m.len());
        vec![name(o), json!(count("data") + count("binaryData")), created(o, now)]
    },
};

const SECRET: Printer = Printer {
    columns: &[("Name", "string", 0), ("Type", "string", 0), ("Data", "string", 0), ("Age", "string", 0)],
    cells: |o, now| {
        vec![
            name(o),
            json!(o["type"].as_str().unwrap_or("Opaque")),
            json!(o["data"].as_object().map_or(0, |m| m.len())),
            created(o, now),
        ]
    },
};

const SERVICE_ACCOUNT: Printer = Printer {
    columns: &[("Name", "string", 0), ("Secrets", "string", 0), ("Age", "string", 0)],
    cells: |o, now| vec![name(o), json!(o["secrets"].as_array().map_or(0, |s| s.len())), created(o, now)],
};

const ENDPOINTS: Printer = Printer {
    columns: &[("Name", "string", 0), ("Endpoints", "string", 0), ("Age", "string", 0)],
    cells: |o, now| vec![name(o), json!(endpoints(o)), created(o, now)],
};

/// A volume's or claim's STATUS: its phase, or `Terminating` once it is being deleted (a protection finalizer may
/// hold it a while), as `printPersistentVolume` and `printPersistentVolumeClaim` show it.
fn volume_phase(o: &Value) -> &str {
    if o["metadata"]["deletionTimestamp"].is_string() {
        return "Terminating";
    }
    o["status"]["phase"].as_str().unwrap_or("Pending")
}

const PERSISTENT_VOLUME_CLAIM: Printer = Printer {
    columns: &[
        ("Name", "string", 0),
        ("Status", "string", 0),
        ("Volume", "string", 0),
        ("Capacity", "string", 0),
        ("Access Modes", "string", 0),
        ("StorageClass", "string", 0),
        ("VolumeAttributesClass", "string", 0),
        ("Age", "string", 0),
        ("VolumeMode", "string", 1),
    ],
    cells: |o, now| {
        let (spec, status) = (&o["spec"], &o["status"]);
        vec![
            name(o),
            json!(volume_phase(o)),
            json!(text(&spec["volumeName"])),
            json!(text(&status["capacity"]["storage"])),
            json!(access_modes(&status["accessModes"])),
            json!(or_none(text(&spec["storageClassName"]))),
            json!(or_none(text(&spec["volumeAttributesClassName"]))),
            created(o, now),
            json!(spec["volumeMode"].as_str().unwrap_or("Filesystem")),
        ]
    },
};

const PERSISTENT_VOLUME: Printer = Printer {
    columns: &[
        ("Name", "string", 0),
        ("Capacity", "string", 0),
        ("Access Modes", "string", 0),
        ("Reclaim Policy", "string", 0),
        ("Status", "string", 0),
        ("Claim", "string", 0),
        ("StorageClass", "string", 0),
        ("VolumeAttributesClass", "string", 0),
        ("Reason", "string", 0),
        ("Age", "string", 0),
        ("VolumeMode", "string", 1),
    ],
    cells: |o, now| {
        let (spec, status) = (&o["spec"], &o["status"]);
        let claim = &spec["claimRef"];
        let claim = if claim.is_object() {
            format!("{}/{}", text(&claim["namespace"]), text(&claim["name"]))
        } else {
            String::new()
        };
        vec![
            name(o),
            json!(text(&spec["capacity"]["storage"])),
            json!(access_modes(&spec["accessModes"])),
            json!(spec["persistentVolumeReclaimPolicy"].as_str().unwrap_or("Retain")),
            json!(volume_phase(o)),
            json!(claim),
            json!(text(&spec["storageClassName"])),
            json!(or_none(text(&spec["volumeAttributesClassName"]))),
            json!(text(&status["reason"])),
            created(o, now),
            json!(spec["volumeMode"].as_str().unwrap_or("Filesystem")),
        ]
    },
};

/// `printEvent`: NAME last and wide, no AGE; times from the series, the last or first timestamp, or the event time.
const EVENT: Printer = Printer {
    columns: &[
        ("Last Seen", "string", 0),
        ("Type", "string", 0),
        ("Reason", "string", 0),
        ("Object", "string", 0),
        ("Subobject", "string", 1),
        ("Source", "string", 1),
        ("Message", "string", 0),
        ("First Seen", "string", 1),
        ("Count", "string", 1),
        ("Name", "string", 1),
    ],
    cells: |o, now| {
        let set = |v: &Value| v.as_str().is_some_and(|s| !s.is_empty());
        let first = if set(&o["firstTimestamp"]) { age(&o["firstTimestamp"], now) } else { age(&o["eventTime"], now) };
        let (mut last, mut count) =
            (if set(&o["lastTimestamp"]) { age(&o["lastTimestamp"], now) } else { first.clone() }, int(&o["count"]));
        if o["series"].is_object() {
            last = age(&o["series"]["lastObservedTime"], now);
            count = int(&o["series"]["count"]);
        } else if count == 0 {
            count = 1;
        }
        let involved = &o["involvedObject"];
        let mut object = text(&involved["kind"]).to_lowercase();
        if set(&involved["name"]) {
            object = format!("{object}/{}", text(&involved["name"]));
        }
        let source = &o["source"];
        let component =
            if set(&source["component"]) { text(&source["component"]) } else { text(&o["reportingComponent"]) };
        let instance = if set(&source["host"]) { text(&source["host"]) } else { text(&o["reportingInstance"]) };
        let source = if instance.is_empty() { component } else { format!("{component}, {instance}") };
        vec![
            json!(last),
            json!(text(&o["type"])),
            json!(text(&o["reason"])),
            json!(object),
            json!(text(&involved["fieldPath"])),
            json!(source),
            json!(text(&o["message"]).trim()),
            json!(first),
            json!(count),
            name(o),
        ]
    },
};

const REPLICATION_CONTROLLER: Printer = Printer {
    columns: super::apps::REPLICA_COLUMNS,
    cells: |o, now| super::apps::replica_cells(o, now, or_none(labels(&o["spec"]["selector"]))),
};

/// `printResourceQuota`: each resource of `status.hard`, sorted, as `name: used/hard`; `limits.*` under LIMIT, the
/// rest under REQUEST.
fn quota(o: &Value, limits: bool) -> String {
    let hard = o["status"]["hard"].as_object().cloned().unwrap_or_default();
    let used = &o["status"]["used"];
    let mut names: Vec<&String> = hard.keys().collect();
    names.sort();
    names
        .into_iter()
        .filter(|n| n.split_once('.').is_some_and(|(first, _)| first == "limits") == limits)
        .map(|n| {
            let used = used[n.as_str()].as_str().unwrap_or("0");
            format!("{n}: {used}/{}", text(&hard[n.as_str()]))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

const RESOURCE_QUOTA: Printer = Printer {
    columns: &[("Name", "string", 0), ("Request", "string", 0), ("Limit", "string", 0), ("Age", "string", 0)],
    cells: |o, now| vec![name(o), json!(quota(o, false)), json!(quota(o, true)), created(o, now)],
};

pub(super) fn of(kind: &str) -> Option<&'static Printer> {
    match kind {
        "Pod" => Some(&POD),
        "Service" => Some(&SERVICE),
        "Node" => Some(&NODE),
        "Namespace" => Some(&NAMESPACE),
        "ConfigMap" => Some(&CONFIG_MAP),
        "Secret" => Some(&SECRET),
        "ServiceAccount" => Some(&SERVICE_ACCOUNT),
        "Endpoints" => Some(&ENDPOINTS),
        "PersistentVolumeClaim" => Some(&PERSISTENT_VOLUME_CLAIM),
        "PersistentVolume" => Some(&PERSISTENT_VOLUME),
        "Event" => Some(&EVENT),
        "ReplicationController" => Some(&REPLICATION_CONTROLLER),
        "ResourceQuota" => Some(&RESOURCE_QUOTA),
        "LimitRange" => Some(&super::CREATED_AT),
        _ => None,
    }
}

fn pod_counts(pod: &Value) -> (usize, usize, i64) {
    let statuses = pod["status"]["containerStatuses"].as_array().cloned().unwrap_or_default();
    let total = pod["spec"]["containers"].as_array().map_or(0, |c| c.len());
    let ready = statuses.iter().filter(|s| s["ready"] == true).count();
    let restarts = statuses.iter().map(|s| int(&s["restartCount"])).sum();
    (ready, total, restarts)
}

/// The STATUS column of a pod, as kubectl shows it: the phase, or what holds the pod up (init containers, a
/// waiting or terminated container's reason), or Terminating.
fn pod_status(pod: &Value) -> String {
    let status = &pod["status"];
    let mut reason = text(&status["phase"]);
    if let Some(r) = status["reason"].as_str().filter(|r| !r.is_empty()) {
        reason = r.to_string();
    }
    let init = status["initContainerStatuses"].as_array().cloned().unwrap_or_default();
    let init_total = pod["spec"]["initContainers"].as_array().map_or(0, |c| c.len());
    let mut initializing = false;
    for (i, container) in init.iter().enumerate() {
        let terminated = &container["state"]["terminated"];
        let waiting = &container["state"]["waiting"];
        if terminated.is_object() && int(&terminated["exitCode"]) == 0 {
            continue;
        }
        initializing = true;
        reason = if terminated.is_object() {
            match terminated["reason"].as_str().filter(|r| !r.is_empty()) {
                Some(r) => format!("Init:{r}"),
                None if int(&terminated["signal"]) != 0 => format!("Init:Signal:{}", int(&terminated["signal"])),
                None => format!("Init:ExitCode:{}", int(&terminated["exitCode"])),
            }
        } else if let Some(r) = waiting["reason"].as_str().filter(|r| !r.is_empty() && *r != "PodInitializing") {
            format!("Init:{r}")
        } else {
            format!("Init:{i}/{init_total}")
        };
        break;
    }
    if !initializing {
        let mut running = false;
        let containers = status["containerStatuses"].as_array().cloned().unwrap_or_default();
        for container in containers.iter().rev() {
            let state = &container["state"];
            if let Some(r) = state["waiting"]["reason"].as_str().filter(|r| !r.is_empty()) {
                reason = r.to_string();
            } else if state["terminated"].is_object() {
                let terminated = &state["terminated"];
                reason = match terminated["reason"].as_str().filter(|r| !r.is_empty()) {
                    Some(r) => r.to_string(),
                    None if int(&terminated["signal"]) != 0 => format!("Signal:{}", int(&terminated["signal"])),
                    None => format!("ExitCode:{}", int(&terminated["exitCode"])),
                };
            } else if container["ready"] == true && state["running"].is_object() {
                running = true;
            }
        }
        if reason == "Completed" && running {
            let ready = status["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            reason = if ready { "Running".into() } else { "NotReady".into() };
        }
    }
    if !pod["metadata"]["deletionTimestamp"].is_null() {
        reason = if status["reason"] == "NodeLost" { "Unknown".into() } else { "Terminating".into() };
    }
    reason
}

fn readiness_gates(pod: &Value) -> String {
    let gates = pod["spec"]["readinessGates"].as_array().cloned().unwrap_or_default();
    if gates.is_empty() {
        return "<none>".into();
    }
    let conditions = pod["status"]["conditions"].as_array().cloned().unwrap_or_default();
    let met = gates
        .iter()
        .filter(|g| conditions.iter().any(|c| c["type"] == g["conditionType"] && c["status"] == "True"))
        .count();
    format!("{met}/{}", gates.len())
}

fn ports(ports: &Value) -> String {
    let all = ports.as_array().into_iter().flatten();
    all.map(|p| {
        let protocol = p["protocol"].as_str().unwrap_or("TCP");
        match p["nodePort"].as_i64().filter(|n| *n != 0) {
            Some(node_port) => format!("{}:{node_port}/{protocol}", int(&p["port"])),
            None => format!("{}/{protocol}", int(&p["port"])),
        }
    })
    .collect::<Vec<_>>()
    .join(",")
}

fn external_ips(service: &Value) -> String {
    let spec = &service["spec"];
    let mut ips: Vec<String> = spec["externalIPs"].as_array().into_iter().flatten().map(text).collect();
    match spec["type"].as_str().unwrap_or("ClusterIP") {
        "ExternalName" => return text(&spec["externalName"]),
        "LoadBalancer" => {
            let ingress = service["status"]["loadBalancer"]["ingress"].as_array().into_iter().flatten();
            ips.extend(ingress.map(|i| if i["ip"].is_string() { text(&i["ip"]) } else { text(&i["hostname"]) }));
            if ips.is_empty() {
                return "<pending>".into();
            }
        }
        _ => {}
    }
    or_none(ips.join(","))
}

fn node_status(node: &Value) -> String {
    let conditions = node["status"]["conditions"].as_array().cloned().unwrap_or_default();
    let ready = conditions.iter().find(|c| c["type"] == "Ready");
    let mut status = match ready.map(|c| c["status"].as_str().unwrap_or_default()) {
        Some("True") => "Ready".to_string(),
        _ => "NotReady".to_string(),
    };
    if node["spec"]["unschedulable"] == true {
        status.push_str(",SchedulingDisabled");
    }
    status
}

fn node_roles(node: &Value) -> String {
    let labels = node["metadata"]["labels"].as_object().cloned().unwrap_or_default();
    let mut roles: Vec<String> = labels
        .iter()
        .filter_map(|(k, v)| {
            k.strip_prefix("node-role.kubernetes.io/")
                .map(str::to_string)
                .or_else(|| (k == "kubernetes.io/role").then(|| text(v)))
        })
        .filter(|r| !r.is_empty())
        .collect();
    roles.sort();
    if roles.is_empty() { "<none>".into() } else { roles.join(",") }
}

fn endpoints(endpoints: &Value) -> String {
    let mut shown = Vec::new();
    let mut count = 0;
    for subset in endpoints["subsets"].as_array().into_iter().flatten() {
        let addresses: Vec<String> =
            subset["addresses"].as_array().into_iter().flatten().map(|a| text(&a["ip"])).collect();
        let ports: Vec<i64> = subset["ports"].as_array().into_iter().flatten().map(|p| int(&p["port"])).collect();
        for address in &addresses {
            if ports.is_empty() {
                count += 1;
                if shown.len() < 3 {
                    shown.push(address.clone());
                }
            }
            for port in &ports {
                count += 1;
                if shown.len() < 3 {
                    shown.push(format!("{address}:{port}"));
                }
            }
        }
    }
    if count == 0 {
        return "<none>".into();
    }
    let mut text = shown.join(",");
    if count > shown.len() {
        text.push_str(&format!(" + {} more...", count - shown.len()));
    }
    text
}

fn access_modes(modes: &Value) -> String {
    let all = modes.as_array().into_iter().flatten();
    all.filter_map(|m| match m.as_str()? {
        "ReadWriteOnce" => Some("RWO"),
        "ReadOnlyMany" => Some("ROX"),
        "ReadWriteMany" => Some("RWX"),
        "ReadWriteOncePod" => Some("RWOP"),
        _ => None,
    })
    .collect::<Vec<_>>()
    .join(",")
}
