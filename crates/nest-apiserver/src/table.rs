//! Table output (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`), what `kubectl get` prints: the columns
//! kube-apiserver's printers give the common built-in kinds (pods: READY, STATUS, RESTARTS, AGE, and IP and NODE
//! for `-o wide`; deployments: READY, UP-TO-DATE, AVAILABLE; services: TYPE, CLUSTER-IP, EXTERNAL-IP, PORT(S); …),
//! a custom resource's `additionalPrinterColumns`, and NAME and AGE for everything else.
//!
//! Each row carries the object as `includeObject` asks: its metadata as PartialObjectMetadata (the default, what
//! `kubectl get -A`, `--show-labels` and `-L` read), the whole object (`Object`) or nothing (`None`).

use nest_registry::{ApiError, ResourceInfo, Result};
use serde_json::{Value, json};

/// What each row carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Include {
    None,
    Metadata,
    Object,
}

impl Include {
    pub fn parse(value: Option<&str>) -> Result<Include> {
        match value {
            None | Some("") | Some("Metadata") => Ok(Include::Metadata),
            Some("Object") => Ok(Include::Object),
            Some("None") => Ok(Include::None),
            Some(other) => Err(ApiError::bad_request(format!(
                "includeObject: Unsupported value: {other:?}: supported values: \"Metadata\", \"None\", \"Object\""
            ))),
        }
    }
}

/// One column: its name, type and format, description, and priority (0: always shown; 1: with `-o wide`).
struct Column {
    name: String,
    type_: &'static str,
    format: &'static str,
    description: String,
    priority: i64,
}

fn column(name: &str, type_: &'static str, priority: i64) -> Column {
    let format = if name == "Name" { "name" } else { "" };
    Column { name: name.into(), type_, format, description: String::new(), priority }
}

/// A list (its `items` and `metadata`) as a Table.
pub fn list(info: &ResourceInfo, list: &Value, include: Include, api_version: &str) -> Value {
    let columns = columns(info);
    let now = now();
    let rows: Vec<Value> =
        list["items"].as_array().into_iter().flatten().map(|o| row(info, o, include, api_version, now)).collect();
    let definitions: Vec<Value> = columns
        .iter()
        .map(|c| {
            json!({"name": c.name, "type": c.type_, "format": c.format, "description": c.description, "priority": c.priority})
        })
        .collect();
    let mut metadata = json!({});
    for field in ["resourceVersion", "continue", "remainingItemCount"] {
        if let Some(value) = list["metadata"].get(field).filter(|v| !v.is_null()) {
            metadata[field] = value.clone();
        }
    }
    json!({"kind": "Table", "apiVersion": api_version, "metadata": metadata, "columnDefinitions": definitions, "rows": rows})
}

/// One object as a Table of one row.
pub fn object(info: &ResourceInfo, object: &Value, include: Include, api_version: &str) -> Value {
    let wrapper = json!({"metadata": {"resourceVersion": object["metadata"]["resourceVersion"]}, "items": [object]});
    list(info, &wrapper, include, api_version)
}

fn row(info: &ResourceInfo, object: &Value, include: Include, api_version: &str, now: i64) -> Value {
    let mut row = json!({"cells": cells(info, object, now)});
    match include {
        Include::None => {}
        Include::Metadata => {
            row["object"] =
                json!({"kind": "PartialObjectMetadata", "apiVersion": api_version, "metadata": object["metadata"]})
        }
        Include::Object => row["object"] = object.clone(),
    }
    row
}

/// The columns of `info`'s kind.
fn columns(info: &ResourceInfo) -> Vec<Column> {
    let named = |rest: &[(&str, &'static str, i64)]| -> Vec<Column> {
        let mut all = vec![column("Name", "string", 0)];
        all.extend(rest.iter().map(|&(n, t, p)| column(n, t, p)));
        all
    };
    if info.custom {
        let mut all = vec![column("Name", "string", 0)];
        if info.printer_columns.is_empty() {
            all.push(column("Age", "date", 0));
        }
        for c in &info.printer_columns {
            all.push(Column {
                name: c.name.clone(),
                type_: match c.type_.as_str() {
                    "integer" => "integer",
                    "number" => "number",
                    "boolean" => "boolean",
                    "date" => "date",
                    _ => "string",
                },
                format: "",
                description: c.description.clone(),
                priority: c.priority,
            });
        }
        return all;
    }
    match (info.group.as_str(), info.kind.as_str()) {
        ("", "Pod") => named(&[
            ("Ready", "string", 0),
            ("Status", "string", 0),
            ("Restarts", "string", 0),
            ("Age", "string", 0),
            ("IP", "string", 1),
            ("Node", "string", 1),
            ("Nominated Node", "string", 1),
            ("Readiness Gates", "string", 1),
        ]),
        ("apps", "Deployment") => named(&[
            ("Ready", "string", 0),
            ("Up-to-date", "string", 0),
            ("Available", "string", 0),
            ("Age", "string", 0),
            ("Containers", "string", 1),
            ("Images", "string", 1),
            ("Selector", "string", 1),
        ]),
        ("apps", "ReplicaSet") => named(&[
            ("Desired", "integer", 0),
            ("Current", "integer", 0),
            ("Ready", "integer", 0),
            ("Age", "string", 0),
            ("Containers", "string", 1),
            ("Images", "string", 1),
            ("Selector", "string", 1),
        ]),
        ("apps", "StatefulSet") => {
            named(&[("Ready", "string", 0), ("Age", "string", 0), ("Containers", "string", 1), ("Images", "string", 1)])
        }
        ("apps", "DaemonSet") => named(&[
            ("Desired", "integer", 0),
            ("Current", "integer", 0),
            ("Ready", "integer", 0),
            ("Up-to-date", "integer", 0),
            ("Available", "integer", 0),
            ("Node Selector", "string", 0),
            ("Age", "string", 0),
            ("Containers", "string", 1),
            ("Images", "string", 1),
            ("Selector", "string", 1),
        ]),
        ("batch", "Job") => named(&[
            ("Status", "string", 0),
            ("Completions", "string", 0),
            ("Duration", "string", 0),
            ("Age", "string", 0),
            ("Containers", "string", 1),
            ("Images", "string", 1),
            ("Selector", "string", 1),
        ]),
        ("", "Service") => named(&[
            ("Type", "string", 0),
            ("Cluster-IP", "string", 0),
            ("External-IP", "string", 0),
            ("Port(s)", "string", 0),
            ("Age", "string", 0),
            ("Selector", "string", 1),
        ]),
        ("", "Node") => named(&[
            ("Status", "string", 0),
            ("Roles", "string", 0),
            ("Age", "string", 0),
            ("Version", "string", 0),
            ("Internal-IP", "string", 1),
            ("External-IP", "string", 1),
            ("OS-Image", "string", 1),
            ("Kernel-Version", "string", 1),
            ("Container-Runtime", "string", 1),
        ]),
        ("", "Namespace") => named(&[("Status", "string", 0), ("Age", "string", 0)]),
        ("", "ConfigMap") => named(&[("Data", "integer", 0), ("Age", "string", 0)]),
        ("", "Secret") => named(&[("Type", "string", 0), ("Data", "integer", 0), ("Age", "string", 0)]),
        ("", "ServiceAccount") => named(&[("Secrets", "integer", 0), ("Age", "string", 0)]),
        ("", "Endpoints") => named(&[("Endpoints", "string", 0), ("Age", "string", 0)]),
        ("", "PersistentVolumeClaim") => named(&[
            ("Status", "string", 0),
            ("Volume", "string", 0),
            ("Capacity", "string", 0),
            ("Access Modes", "string", 0),
            ("StorageClass", "string", 0),
            ("VolumeAttributesClass", "string", 0),
            ("Age", "string", 0),
            ("VolumeMode", "string", 1),
        ]),
        ("", "PersistentVolume") => named(&[
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
        ]),
        ("", "Event") => named(&[
            ("Last Seen", "string", 0),
            ("Type", "string", 0),
            ("Reason", "string", 0),
            ("Object", "string", 0),
            ("Message", "string", 0),
        ]),
        ("coordination.k8s.io", "Lease") => named(&[("Holder", "string", 0), ("Age", "string", 0)]),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => named(&[("Created At", "date", 0)]),
        _ => named(&[("Age", "string", 0)]),
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn int(value: &Value) -> i64 {
    value.as_i64().unwrap_or(0)
}

fn or_none(text: String) -> String {
    if text.is_empty() { "<none>".into() } else { text }
}

/// The cells of one row.
fn cells(info: &ResourceInfo, o: &Value, now: i64) -> Vec<Value> {
    let name = json!(o["metadata"]["name"]);
    let created = json!(age(&o["metadata"]["creationTimestamp"], now));
    let status = &o["status"];
    let spec = &o["spec"];
    if info.custom {
        let mut cells = vec![name];
        if info.printer_columns.is_empty() {
            cells.push(created.clone());
        }
        for c in &info.printer_columns {
            let value = json_path(o, &c.json_path);
            cells.push(match (c.type_.as_str(), value) {
                (_, None) => Value::Null,
                ("date", Some(v)) => json!(age(&v, now)),
                (_, Some(v)) => v,
            });
        }
        return cells;
    }
    let mut cells = vec![name];
    let rest: Vec<Value> = match (info.group.as_str(), info.kind.as_str()) {
        ("", "Pod") => {
            let (ready, total, restarts) = pod_counts(o);
            vec![
                json!(format!("{ready}/{total}")),
                json!(pod_status(o)),
                json!(restarts.to_string()),
                created.clone(),
                json!(or_none(text(&status["podIP"]))),
                json!(or_none(text(&spec["nodeName"]))),
                json!(or_none(text(&status["nominatedNodeName"]))),
                json!(readiness_gates(o)),
            ]
        }
        ("apps", "Deployment") => vec![
            json!(format!("{}/{}", int(&status["readyReplicas"]), int(&spec["replicas"]))),
            json!(int(&status["updatedReplicas"])),
            json!(int(&status["availableReplicas"])),
            created.clone(),
            json!(containers(&spec["template"]["spec"], "name")),
            json!(containers(&spec["template"]["spec"], "image")),
            json!(selector(&spec["selector"])),
        ],
        ("apps", "ReplicaSet") => vec![
            json!(int(&spec["replicas"])),
            json!(int(&status["replicas"])),
            json!(int(&status["readyReplicas"])),
            created.clone(),
            json!(containers(&spec["template"]["spec"], "name")),
            json!(containers(&spec["template"]["spec"], "image")),
            json!(selector(&spec["selector"])),
        ],
        ("apps", "StatefulSet") => vec![
            json!(format!("{}/{}", int(&status["readyReplicas"]), int(&spec["replicas"]))),
            created.clone(),
            json!(containers(&spec["template"]["spec"], "name")),
            json!(containers(&spec["template"]["spec"], "image")),
        ],
        ("apps", "DaemonSet") => vec![
            json!(int(&status["desiredNumberScheduled"])),
            json!(int(&status["currentNumberScheduled"])),
            json!(int(&status["numberReady"])),
            json!(int(&status["updatedNumberScheduled"])),
            json!(int(&status["numberAvailable"])),
            json!(or_none(labels(&spec["template"]["spec"]["nodeSelector"]))),
            created.clone(),
            json!(containers(&spec["template"]["spec"], "name")),
            json!(containers(&spec["template"]["spec"], "image")),
            json!(selector(&spec["selector"])),
        ],
        ("batch", "Job") => vec![
            json!(job_status(o)),
            json!(format!("{}/{}", int(&status["succeeded"]), spec["completions"].as_i64().unwrap_or(1))),
            json!(job_duration(o, now)),
            created.clone(),
            json!(containers(&spec["template"]["spec"], "name")),
            json!(containers(&spec["template"]["spec"], "image")),
            json!(selector(&spec["selector"])),
        ],
        ("", "Service") => vec![
            json!(spec["type"].as_str().unwrap_or("ClusterIP")),
            json!(or_none(text(&spec["clusterIP"]))),
            json!(external_ips(o)),
            json!(or_none(ports(&spec["ports"]))),
            created.clone(),
            json!(or_none(labels(&spec["selector"]))),
        ],
        ("", "Node") => {
            let address = |kind: &str| {
                let addresses = status["addresses"].as_array().into_iter().flatten();
                or_none(addresses.filter(|a| a["type"] == kind).map(|a| text(&a["address"])).next().unwrap_or_default())
            };
            let info = &status["nodeInfo"];
            vec![
                json!(node_status(o)),
                json!(node_roles(o)),
                created.clone(),
                json!(text(&info["kubeletVersion"])),
                json!(address("InternalIP")),
                json!(address("ExternalIP")),
                json!(or_none(text(&info["osImage"]))),
                json!(or_none(text(&info["kernelVersion"]))),
                json!(or_none(text(&info["containerRuntimeVersion"]))),
            ]
        }
        ("", "Namespace") => vec![json!(status["phase"].as_str().unwrap_or("Active")), created.clone()],
        ("", "ConfigMap") => {
            let count = |f: &str| o[f].as_object().map_or(0, |m| m.len());
            vec![json!(count("data") + count("binaryData")), created.clone()]
        }
        ("", "Secret") => vec![
            json!(o["type"].as_str().unwrap_or("Opaque")),
            json!(o["data"].as_object().map_or(0, |m| m.len())),
            created.clone(),
        ],
        ("", "ServiceAccount") => vec![json!(o["secrets"].as_array().map_or(0, |s| s.len())), created.clone()],
        ("", "Endpoints") => vec![json!(endpoints(o)), created.clone()],
        ("", "PersistentVolumeClaim") => vec![
            json!(status["phase"].as_str().unwrap_or("Pending")),
            json!(text(&spec["volumeName"])),
            json!(text(&status["capacity"]["storage"])),
            json!(access_modes(&status["accessModes"])),
            json!(or_none(text(&spec["storageClassName"]))),
            json!(or_none(text(&spec["volumeAttributesClassName"]))),
            created.clone(),
            json!(spec["volumeMode"].as_str().unwrap_or("Filesystem")),
        ],
        ("", "PersistentVolume") => {
            let claim = &spec["claimRef"];
            let claim = if claim.is_object() {
                format!("{}/{}", text(&claim["namespace"]), text(&claim["name"]))
            } else {
                String::new()
            };
            vec![
                json!(text(&spec["capacity"]["storage"])),
                json!(access_modes(&spec["accessModes"])),
                json!(spec["persistentVolumeReclaimPolicy"].as_str().unwrap_or("Retain")),
                json!(status["phase"].as_str().unwrap_or("Pending")),
                json!(claim),
                json!(text(&spec["storageClassName"])),
                json!(or_none(text(&spec["volumeAttributesClassName"]))),
                json!(text(&status["reason"])),
                created.clone(),
                json!(spec["volumeMode"].as_str().unwrap_or("Filesystem")),
            ]
        }
        ("", "Event") => {
            let last = [&o["lastTimestamp"], &o["eventTime"], &o["metadata"]["creationTimestamp"]]
                .into_iter()
                .find(|t| t.as_str().is_some_and(|s| !s.is_empty()))
                .cloned()
                .unwrap_or(Value::Null);
            let involved = &o["involvedObject"];
            vec![
                json!(age(&last, now)),
                json!(text(&o["type"])),
                json!(text(&o["reason"])),
                json!(format!("{}/{}", text(&involved["kind"]).to_lowercase(), text(&involved["name"]))),
                json!(text(&o["message"])),
            ]
        }
        ("coordination.k8s.io", "Lease") => vec![json!(text(&spec["holderIdentity"])), created.clone()],
        ("apiextensions.k8s.io", "CustomResourceDefinition") => vec![o["metadata"]["creationTimestamp"].clone()],
        _ => vec![created.clone()],
    };
    cells.extend(rest);
    cells
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

fn containers(pod_spec: &Value, field: &str) -> String {
    let all = pod_spec["containers"].as_array().into_iter().flatten();
    all.map(|c| text(&c[field])).collect::<Vec<_>>().join(",")
}

fn labels(map: &Value) -> String {
    let pairs = map.as_object().into_iter().flatten();
    pairs.map(|(k, v)| format!("{k}={}", text(v))).collect::<Vec<_>>().join(",")
}

fn selector(selector: &Value) -> String {
    let mut parts = Vec::new();
    if let Some(labels) = selector["matchLabels"].as_object() {
        parts.extend(labels.iter().map(|(k, v)| format!("{k}={}", text(v))));
    }
    for expression in selector["matchExpressions"].as_array().into_iter().flatten() {
        let key = text(&expression["key"]);
        let values: Vec<String> = expression["values"].as_array().into_iter().flatten().map(text).collect();
        parts.push(match expression["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key,
            "DoesNotExist" => format!("!{key}"),
            other => format!("{key} {other}"),
        });
    }
    or_none(parts.join(","))
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

fn job_status(job: &Value) -> String {
    let conditions = job["status"]["conditions"].as_array().cloned().unwrap_or_default();
    let holds = |kind: &str| conditions.iter().any(|c| c["type"] == kind && c["status"] == "True");
    if holds("Complete") {
        "Complete".into()
    } else if holds("Failed") {
        "Failed".into()
    } else if !job["metadata"]["deletionTimestamp"].is_null() {
        "Terminating".into()
    } else if holds("Suspended") {
        "Suspended".into()
    } else {
        "Running".into()
    }
}

fn job_duration(job: &Value, now: i64) -> String {
    let Some(start) = seconds(&job["status"]["startTime"]) else { return String::new() };
    let end = seconds(&job["status"]["completionTime"]).unwrap_or(now);
    human_duration(end - start)
}

/// The time since `timestamp` (RFC 3339), as kubectl prints ages; `<unknown>` without one.
fn age(timestamp: &Value, now: i64) -> String {
    match seconds(timestamp) {
        Some(then) => human_duration(now - then),
        None => "<unknown>".into(),
    }
}

fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

/// Seconds since the epoch of an RFC 3339 timestamp (`2026-11-30T07:16:26Z`, fractions and offsets allowed).
fn seconds(timestamp: &Value) -> Option<i64> {
    let text = timestamp.as_str()?;
    let (date, time) = text.split_once(['T', 't'])?;
    let mut date = date.split('-').map(|p| p.parse::<i64>().ok());
    let (year, month, day) = (date.next()??, date.next()??, date.next()??);
    let (clock, offset) = match time.find(['Z', 'z', '+', '-']) {
        Some(at) => time.split_at(at),
        None => (time, ""),
    };
    let mut clock = clock.split(':');
    let hour: i64 = clock.next()?.parse().ok()?;
    let minute: i64 = clock.next()?.parse().ok()?;
    let second: i64 = clock.next()?.split('.').next()?.parse().ok()?;
    let offset = match offset.as_bytes().first() {
        Some(b'+' | b'-') => {
            let sign = if offset.starts_with('-') { -1 } else { 1 };
            let (h, m) = offset[1..].split_once(':')?;
            sign * (h.parse::<i64>().ok()? * 3600 + m.parse::<i64>().ok()? * 60)
        }
        _ => 0,
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hour * 3600 + minute * 60 + second - offset)
}

/// A duration as kubectl prints ages: `45s`, `5m3s`, `65m`, `3h5m`, `30h`, `2d5h`, `65d`, `2y30d`, `9y`.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    let seconds = seconds.max(0);
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        return if seconds % 60 == 0 { format!("{minutes}m") } else { format!("{minutes}m{}s", seconds % 60) };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        return if minutes % 60 == 0 { format!("{hours}h") } else { format!("{hours}h{}m", minutes % 60) };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        return if hours % 24 == 0 { format!("{}d", hours / 24) } else { format!("{}d{}h", hours / 24, hours % 24) };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 { format!("{}y", hours / 24 / 365) } else { format!("{}y{days}d", hours / 24 / 365) };
    }
    format!("{}y", hours / 24 / 365)
}

/// The value at a simple JSONPath (`.spec.size`, `.status.conditions[0].type`,
/// `.status.conditions[?(@.type=="Ready")].status`), as a printer column reads it.
fn json_path(object: &Value, path: &str) -> Option<Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}').trim_start_matches('$');
    let mut at = object.clone();
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            at = at.get(&after[..end])?.clone();
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix('[') {
            let end = after.find(']')?;
            let inside = &after[..end];
            rest = &after[end + 1..];
            if let Some(filter) = inside.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')')) {
                let (field, wanted) = filter.split_once("==")?;
                let wanted = wanted.trim().trim_matches(['"', '\'']);
                let items = at.as_array()?;
                at = items.iter().find(|i| text(&i[field.trim()]) == wanted)?.clone();
            } else {
                let index: usize = inside.parse().ok()?;
                at = at.get(index)?.clone();
            }
        } else {
            return None;
        }
    }
    (!at.is_null()).then_some(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use nest_registry::Catalog;

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        for (seconds, shown) in [
            (5, "5s"),
            (119, "119s"),
            (125, "2m5s"),
            (600, "10m"),
            (7200, "120m"),
            (3 * 3600 + 300, "3h5m"),
            (30 * 3600, "30h"),
            (2 * 86400 + 5 * 3600, "2d5h"),
            (65 * 86400, "65d"),
            (800 * 86400, "2y70d"),
        ] {
            assert_eq!(human_duration(seconds), shown, "{seconds}");
        }
        assert_eq!(seconds(&json!("1970-01-02T00:00:01Z")), Some(86_401));
        assert_eq!(seconds(&json!("2026-11-30T00:53:20Z")), Some(1_796_000_000));
        assert_eq!(seconds(&json!("2026-11-30T01:53:20.5+01:00")), Some(1_796_000_000));
    }

    #[test]
    fn a_pod_row_has_ready_status_restarts_and_wide_columns() {
        let catalog = Catalog::builtin();
        let pods = catalog.find("", "v1", "pods").unwrap();
        let pod = json!({
            "metadata": {"name": "web", "creationTimestamp": "2026-11-30T00:00:00Z"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
            "status": {"phase": "Running", "podIP": "10.0.0.5", "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 2, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
            ]},
        });
        let table = list(
            &pods,
            &json!({"metadata": {"resourceVersion": "7"}, "items": [pod]}),
            Include::Metadata,
            "meta.k8s.io/v1",
        );
        let names: Vec<&str> =
            table["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(&names[..6], ["Name", "Ready", "Status", "Restarts", "Age", "IP"]);
        let cells = &table["rows"][0]["cells"];
        assert_eq!(cells[1], "1/2");
        assert_eq!(cells[2], "CrashLoopBackOff");
        assert_eq!(cells[3], "3");
        assert_eq!((cells[5].as_str(), cells[6].as_str()), (Some("10.0.0.5"), Some("n1")));
        assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(table["metadata"]["resourceVersion"], "7");
    }

    #[test]
    fn printer_column_paths() {
        let object = json!({"spec": {"size": 3}, "status": {"conditions": [{"type": "A", "status": "x"}, {"type": "Ready", "status": "True"}]}});
        assert_eq!(json_path(&object, ".spec.size"), Some(json!(3)));
        assert_eq!(json_path(&object, ".status.conditions[?(@.type==\"Ready\")].status"), Some(json!("True")));
        assert_eq!(json_path(&object, ".status.conditions[0].type"), Some(json!("A")));
        assert_eq!(json_path(&object, ".spec.missing"), None);
    }
}
