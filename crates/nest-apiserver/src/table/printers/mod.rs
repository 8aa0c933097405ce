//! The printers of the built-in kinds, one file per API group, as kube-apiserver's `printers.go` (1.33) defines
//! them: each file's `of` names the [`Printer`] of each kind it knows.

mod apiextensions;
mod apps;
mod batch;
mod certificates;
mod coordination;
mod core;
mod discovery;
mod networking;
mod node;
mod policy;
mod rbac;
mod scheduling;
mod storage;

use super::Printer;

/// The printer of `kind` in `group`, if upstream has one beyond NAME and AGE.
pub(super) fn of(group: &str, kind: &str) -> Option<&'static Printer> {
    match group {
        "" => core::of(kind),
        "apps" => apps::of(kind),
        "batch" => batch::of(kind),
        "certificates.k8s.io" => certificates::of(kind),
        "coordination.k8s.io" => coordination::of(kind),
        "discovery.k8s.io" => discovery::of(kind),
        "networking.k8s.io" => networking::of(kind),
        "node.k8s.io" => node::of(kind),
        "policy" => policy::of(kind),
        "rbac.authorization.k8s.io" => rbac::of(kind),
        "scheduling.k8s.io" => scheduling::of(kind),
        "storage.k8s.io" => storage::of(kind),
        "apiextensions.k8s.io" => apiextensions::of(kind),
        _ => None,
    }
}

/// Name and `Created At` (the creation time itself, RFC 3339), what `rest.NewDefaultTableConvertor` prints for the
/// kinds whose storage uses it (Role, ClusterRole, LimitRange, CustomResourceDefinition).
pub(super) const CREATED_AT: Printer = Printer {
    columns: &[("Name", "string", 0), ("Created At", "date", 0)],
    cells: |o, _| vec![super::format::name(o), o["metadata"]["creationTimestamp"].clone()],
};
