//! apps: Deployments, ReplicaSets, StatefulSets, DaemonSets and ControllerRevisions (`printDeployment`,
//! `printReplicaSet`, `printStatefulSet`, `printDaemonSet`, `printControllerRevision`).

use serde_json::{Value, json};

use crate::table::Printer;
use crate::table::format::{created, int, labels, name, or_none, selector, template_cells, text};

/// The template's container names and images, and the selector: the three wide columns workloads share.
const DEPLOYMENT: Printer = Printer {
    columns: &[
        ("Name", "string", 0),
        ("Ready", "string", 0),
        ("Up-to-date", "string", 0),
        ("Available", "string", 0),
        ("Age", "string", 0),
        ("Containers", "string", 1),
        ("Images", "string", 1),
        ("Selector", "string", 1),
    ],
    cells: |o, now| {
        let (spec, status) = (&o["spec"], &o["status"]);
        let mut cells = vec![
            name(o),
            json!(format!("{}/{}", int(&status["readyReplicas"]), int(&spec["replicas"]))),
            json!(int(&status["updatedReplicas"])),
            json!(int(&status["availableReplicas"])),
            created(o, now),
        ];
        cells.extend(template_cells(&o["spec"]));
        cells
    },
};

/// The columns of ReplicaSets, and of core v1's ReplicationControllers.
pub(super) const REPLICA_COLUMNS: &[(&str, &str, i64)] = &[
    ("Name", "string", 0),
    ("Desired", "integer", 0),
    ("Current", "integer", 0),
    ("Ready", "integer", 0),
    ("Age", "string", 0),
    ("Containers", "string", 1),
    ("Images", "string", 1),
    ("Selector", "string", 1),
];

/// The cells of a ReplicaSet or a ReplicationController, whose selector each formats its own way.
pub(super) fn replica_cells(o: &Value, now: i64, selector: String) -> Vec<Value> {
    let (spec, status) = (&o["spec"], &o["status"]);
    let [names, images, _] = template_cells(&o["spec"]);
    vec![
        name(o),
        json!(int(&spec["replicas"])),
        json!(int(&status["replicas"])),
        json!(int(&status["readyReplicas"])),
        created(o, now),
        names,
        images,
        json!(selector),
    ]
}

const REPLICA_SET: Printer =
    Printer { columns: REPLICA_COLUMNS, cells: |o, now| replica_cells(o, now, selector(&o["spec"]["selector"])) };

const STATEFUL_SET: Printer = Printer {
    columns: &[
        ("Name", "string", 0),
        ("Ready", "string", 0),
        ("Age", "string", 0),
        ("Containers", "string", 1),
        ("Images", "string", 1),
    ],
    cells: |o, now| {
        let [names, images, _] = template_cells(&o["spec"]);
        vec![
            name(o),
            json!(format!("{}/{}", int(&o["status"]["readyReplicas"]), int(&o["spec"]["replicas"]))),
            created(o, now),
            names,
            images,
        ]
    },
};

const DAEMON_SET: Printer = Printer {
    columns: &[
        ("Name", "string", 0),
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
    ],
    cells: |o, now| {
        let status = &o["status"];
        let mut cells = vec![
            name(o),
            json!(int(&status["desiredNumberScheduled"])),
            json!(int(&status["currentNumberScheduled"])),
            json!(int(&status["numberReady"])),
            json!(int(&status["updatedNumberScheduled"])),
            json!(int(&status["numberAvailable"])),
            json!(or_none(labels(&o["spec"]["template"]["spec"]["nodeSelector"]))),
            created(o, now),
        ];
        cells.extend(template_cells(&o["spec"]));
        cells
    },
};

/// The controller of a revision as `kind.group/name` in lower case (`statefulset.apps/web`), `<none>` without one.
fn controller(revision: &Value) -> String {
    let references = revision["metadata"]["ownerReferences"].as_array().into_iter().flatten();
    let Some(owner) = references.into_iter().find(|r| r["controller"] == true) else { return "<none>".into() };
    let api_version = text(&owner["apiVersion"]);
    let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
    let kind = text(&owner["kind"]);
    let group_kind = if group.is_empty() { kind } else { format!("{kind}.{group}") };
    if group_kind.is_empty() {
        return text(&owner["name"]);
    }
    format!("{}/{}", group_kind.to_lowercase(), text(&owner["name"]))
}

const CONTROLLER_REVISION: Printer = Printer {
    columns: &[("Name", "string", 0), ("Controller", "string", 0), ("Revision", "string", 0), ("Age", "string", 0)],
    cells: |o, now| vec![name(o), json!(controller(o)), json!(int(&o["revision"])), created(o, now)],
};

pub(super) fn of(kind: &str) -> Option<&'static Printer> {
    match kind {
        "Deployment" => Some(&DEPLOYMENT),
        "ReplicaSet" => Some(&REPLICA_SET),
        "StatefulSet" => Some(&STATEFUL_SET),
        "DaemonSet" => Some(&DAEMON_SET),
        "ControllerRevision" => Some(&CONTROLLER_REVISION),
        _ => None,
    }
}
