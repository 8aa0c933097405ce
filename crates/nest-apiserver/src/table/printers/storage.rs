//! storage.k8s.io: StorageClasses (`printStorageClass`: the default class is named `<name> (default)`).

use serde_json::{Value, json};

use crate::table::Printer;
use crate::table::format::{created, text};

/// The name, marked when either default-class annotation is exactly `"true"` (`storageutil.IsDefaultAnnotation`).
fn name(class: &Value) -> String {
    let annotations = &class["metadata"]["annotations"];
    let default = ["storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class"]
        .iter()
        .any(|a| annotations[*a] == "true");
    let name = text(&class["metadata"]["name"]);
    if default { format!("{name} (default)") } else { name }
}

const STORAGE_CLASS: Printer = Printer {
    columns: &[
        ("Name", "string", 0),
        ("Provisioner", "string", 0),
        ("ReclaimPolicy", "string", 0),
        ("VolumeBindingMode", "string", 0),
        ("AllowVolumeExpansion", "string", 0),
        ("Age", "string", 0),
    ],
    cells: |o, now| {
        vec![
            json!(name(o)),
            json!(text(&o["provisioner"])),
            json!(o["reclaimPolicy"].as_str().unwrap_or("Delete")),
            json!(o["volumeBindingMode"].as_str().unwrap_or("Immediate")),
            json!(o["allowVolumeExpansion"].as_bool().unwrap_or(false)),
            created(o, now),
        ]
    },
};

pub(super) fn of(kind: &str) -> Option<&'static Printer> {
    (kind == "StorageClass").then_some(&STORAGE_CLASS)
}
