//! Table output (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`), what `kubectl get` prints: the columns
//! kube-apiserver's printers (`pkg/printers/internalversion`, 1.33) give each built-in kind — one file per API group
//! under `printers/`, each kind a `Printer` — a custom resource's `additionalPrinterColumns`, and NAME and AGE for
//! everything else. As kube-apiserver's, every table carries the `-o wide` columns (priority 1), which kubectl hides
//! unless asked.
//!
//! Each row carries the object as `includeObject` asks: its metadata as PartialObjectMetadata (the default, what
//! `kubectl get -A`, `--show-labels` and `-L` read), the whole object (`Object`) or nothing (`None`).

mod format;
mod printers;

use nest_registry::{ApiError, ResourceInfo, Result};
use serde_json::{Value, json};

use format::{age, json_path, now};

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

/// How a built-in kind prints: its columns in upstream's order — `(name, type, priority)`, Name among them — and the
/// cells of one object, one per column, given the time now (seconds since the epoch).
pub(crate) struct Printer {
    pub columns: &'static [(&'static str, &'static str, i64)],
    pub cells: fn(&Value, i64) -> Vec<Value>,
}

/// What kube-apiserver prints for a kind without a printer of its own.
const NAME_AND_AGE: Printer = Printer {
    columns: &[("Name", "string", 0), ("Age", "string", 0)],
    cells: |o, now| vec![format::name(o), format::created(o, now)],
};

fn printer(info: &ResourceInfo) -> &'static Printer {
    printers::of(&info.group, &info.kind).unwrap_or(&NAME_AND_AGE)
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
    printer(info).columns.iter().map(|&(name, type_, priority)| column(name, type_, priority)).collect()
}

/// The cells of one row.
fn cells(info: &ResourceInfo, o: &Value, now: i64) -> Vec<Value> {
    if info.custom {
        let mut cells = vec![format::name(o)];
        if info.printer_columns.is_empty() {
            cells.push(format::created(o, now));
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
    (printer(info).cells)(o, now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use format::{human_duration, seconds};
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

    /// The header and the cells after NAME of one object of `kind`, as the server's table has them.
    fn row_of(plural: &str, group_version: (&str, &str), object: Value) -> (Vec<String>, Vec<Value>) {
        let catalog = Catalog::builtin();
        let info = catalog.find(group_version.0, group_version.1, plural).unwrap();
        let mut object = object;
        object["metadata"]["creationTimestamp"] = json!("2020-01-01T00:00:00Z");
        let table = super::object(&info, &object, Include::None, "meta.k8s.io/v1");
        let names = table["columnDefinitions"].as_array().unwrap().iter();
        let names = names.map(|c| c["name"].as_str().unwrap().to_string()).collect();
        (names, table["rows"][0]["cells"].as_array().unwrap().clone())
    }

    /// Every cell but the ages, which move with the clock.
    fn without_ages(header: &[String], cells: &[Value]) -> Vec<Value> {
        header
            .iter()
            .zip(cells)
            .filter(|(h, _)| !matches!(h.as_str(), "Age" | "Last Seen" | "First Seen"))
            .map(|(_, c)| c.clone())
            .collect()
    }

    /// A resource (plural, group and version), an object of it, the header upstream prints and the cells but ages.
    type Case<'a> = (&'a str, (&'a str, &'a str), Value, &'a [&'a str], Value);

    #[test]
    fn built_in_kinds_print_upstreams_columns_and_cells() {
        let cases: Vec<Case> = vec![
            (
                "cronjobs",
                ("batch", "v1"),
                json!({"metadata": {"name": "c"}, "spec": {"schedule": "*/5 * * * *", "suspend": false,
                    "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "busybox"}]}}}}}}),
                &[
                    "Name",
                    "Schedule",
                    "Timezone",
                    "Suspend",
                    "Active",
                    "Last Schedule",
                    "Age",
                    "Containers",
                    "Images",
                    "Selector",
                ],
                json!(["c", "*/5 * * * *", "<none>", "False", 0, "<none>", "a", "busybox", "<none>"]),
            ),
            (
                "poddisruptionbudgets",
                ("policy", "v1"),
                json!({"metadata": {"name": "p"}, "spec": {"minAvailable": "50%"}, "status": {"disruptionsAllowed": 2}}),
                &["Name", "Min Available", "Max Unavailable", "Allowed Disruptions", "Age"],
                json!(["p", "50%", "N/A", 2]),
            ),
            (
                "ingresses",
                ("networking.k8s.io", "v1"),
                json!({"metadata": {"name": "i"}, "spec": {"ingressClassName": "nginx", "tls": [{}],
                    "rules": [{"host": "a.example"}, {}, {"host": "b.example"}, {"host": "c.example"}, {"host": "d.example"}]},
                    "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.2"}, {"hostname": "lb.example"}, {"ip": "10.0.0.1"}]}}}),
                &["Name", "Class", "Hosts", "Address", "Ports", "Age"],
                json!([
                    "i",
                    "nginx",
                    "a.example,b.example,c.example + 2 more...",
                    "10.0.0.1,10.0.0.2,lb.example",
                    "80, 443"
                ]),
            ),
            (
                "ingressclasses",
                ("networking.k8s.io", "v1"),
                json!({"metadata": {"name": "nginx"}, "spec": {"controller": "k8s.io/ingress-nginx",
                    "parameters": {"apiGroup": "k8s.example.com", "kind": "IngressParameters", "name": "external-lb"}}}),
                &["Name", "Controller", "Parameters", "Age"],
                json!(["nginx", "k8s.io/ingress-nginx", "IngressParameters.k8s.example.com/external-lb"]),
            ),
            (
                "networkpolicies",
                ("networking.k8s.io", "v1"),
                json!({"metadata": {"name": "n"}, "spec": {"podSelector": {"matchExpressions": [{"key": "z", "operator": "Exists"}], "matchLabels": {"app": "web"}}}}),
                &["Name", "Pod-Selector", "Age"],
                json!(["n", "app=web,z"]),
            ),
            (
                "rolebindings",
                ("rbac.authorization.k8s.io", "v1"),
                json!({"metadata": {"name": "b"}, "roleRef": {"kind": "ClusterRole", "name": "view"}, "subjects": [
                    {"kind": "User", "name": "alice"}, {"kind": "Group", "name": "devs"}, {"kind": "User", "name": "bob"},
                    {"kind": "ServiceAccount", "name": "ci", "namespace": "tools"}]}),
                &["Name", "Role", "Age", "Users", "Groups", "ServiceAccounts"],
                json!(["b", "ClusterRole/view", "alice, bob", "devs", "tools/ci"]),
            ),
            (
                "clusterroles",
                ("rbac.authorization.k8s.io", "v1"),
                json!({"metadata": {"name": "r"}}),
                &["Name", "Created At"],
                json!(["r", "2020-01-01T00:00:00Z"]),
            ),
            (
                "storageclasses",
                ("storage.k8s.io", "v1"),
                json!({"metadata": {"name": "local", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
                    "provisioner": "nest.dev/local", "volumeBindingMode": "WaitForFirstConsumer"}),
                &["Name", "Provisioner", "ReclaimPolicy", "VolumeBindingMode", "AllowVolumeExpansion", "Age"],
                json!(["local (default)", "nest.dev/local", "Delete", "WaitForFirstConsumer", false]),
            ),
            (
                "runtimeclasses",
                ("node.k8s.io", "v1"),
                json!({"metadata": {"name": "nest-simulated"}, "handler": "simulated"}),
                &["Name", "Handler", "Age"],
                json!(["nest-simulated", "simulated"]),
            ),
            (
                "priorityclasses",
                ("scheduling.k8s.io", "v1"),
                json!({"metadata": {"name": "high"}, "value": 1000, "globalDefault": true, "preemptionPolicy": "Never"}),
                &["Name", "Value", "Global-Default", "Age", "PreemptionPolicy"],
                json!(["high", 1000, true, "Never"]),
            ),
            (
                "resourcequotas",
                ("", "v1"),
                json!({"metadata": {"name": "q"}, "status": {"hard": {"pods": "10", "limits.cpu": "2", "requests.cpu": "1", "limits.memory": "1Gi"},
                    "used": {"pods": "1", "limits.cpu": "500m"}}}),
                &["Name", "Request", "Limit", "Age"],
                json!(["q", "pods: 1/10, requests.cpu: 0/1", "limits.cpu: 500m/2, limits.memory: 0/1Gi"]),
            ),
            (
                "endpointslices",
                ("discovery.k8s.io", "v1"),
                json!({"metadata": {"name": "e"}, "addressType": "IPv4", "ports": [{"port": 80}, {"name": "x"}, {}, {"port": 9}],
                    "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2", "10.0.0.3"]}]}),
                &["Name", "AddressType", "Ports", "Endpoints", "Age"],
                json!(["e", "IPv4", "80,x,* + 1 more...", "10.0.0.1,10.0.0.2,10.0.0.3"]),
            ),
            (
                "controllerrevisions",
                ("apps", "v1"),
                json!({"metadata": {"name": "web-1", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "controller": true}]}, "revision": 3}),
                &["Name", "Controller", "Revision", "Age"],
                json!(["web-1", "statefulset.apps/web", 3]),
            ),
            (
                "replicationcontrollers",
                ("", "v1"),
                json!({"metadata": {"name": "rc"}, "spec": {"replicas": 3, "selector": {"b": "2", "a": "1"},
                    "template": {"spec": {"containers": [{"name": "c", "image": "nest"}]}}}, "status": {"replicas": 2, "readyReplicas": 1}}),
                &["Name", "Desired", "Current", "Ready", "Age", "Containers", "Images", "Selector"],
                json!(["rc", 3, 2, 1, "c", "nest", "a=1,b=2"]),
            ),
            (
                "certificatesigningrequests",
                ("certificates.k8s.io", "v1"),
                json!({"metadata": {"name": "csr"}, "spec": {"signerName": "kubernetes.io/kube-apiserver-client", "username": "alice", "expirationSeconds": 86400},
                    "status": {"conditions": [{"type": "Approved", "status": "True"}], "certificate": "LS0t"}}),
                &["Name", "Age", "SignerName", "Requestor", "RequestedDuration", "Condition"],
                json!(["csr", "kubernetes.io/kube-apiserver-client", "alice", "24h", "Approved,Issued"]),
            ),
            (
                "events",
                ("", "v1"),
                json!({"metadata": {"name": "e.1"}, "type": "Normal", "reason": "Started", "message": "Started container a ",
                    "involvedObject": {"kind": "Pod", "name": "p", "fieldPath": "spec.containers{a}"}, "count": 3,
                    "source": {"component": "kubelet", "host": "n1"}, "firstTimestamp": "2020-01-01T00:00:00Z", "lastTimestamp": "2020-01-01T00:00:00Z"}),
                &[
                    "Last Seen",
                    "Type",
                    "Reason",
                    "Object",
                    "Subobject",
                    "Source",
                    "Message",
                    "First Seen",
                    "Count",
                    "Name",
                ],
                json!([
                    "Normal",
                    "Started",
                    "pod/p",
                    "spec.containers{a}",
                    "kubelet, n1",
                    "Started container a",
                    3,
                    "e.1"
                ]),
            ),
        ];
        for (plural, group_version, object, header, cells) in cases {
            let (names, row) = row_of(plural, group_version, object);
            assert_eq!(names, header, "{plural}: columns");
            assert_eq!(row.len(), header.len(), "{plural}: one cell per column");
            assert_eq!(json!(without_ages(&names, &row)), cells, "{plural}: cells");
        }
    }
}
