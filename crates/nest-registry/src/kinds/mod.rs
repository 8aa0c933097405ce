//! Each kind's policy, one file per kind (or kind family), as a [`Strategy`]: what differs between kinds, while the
//! mechanism they share lives once in [`crate::store`]. This file is the table of built-in resources (what discovery
//! serves) and which strategy each one has; the store never asks which kind it is handling.
//!
//! | kind | file |
//! |---|---|
//! | Namespace (and the namespace lifecycle admission) | [`namespace`] |
//! | Pod (and `pods/binding`) | [`pod`] |
//! | Pod Security admission (pods and workload templates) | [`pod_security`] |
//! | Service (ClusterIP allocation) | [`service`] |
//! | ConfigMap, Secret | [`config`] |
//! | Event (core and `events.k8s.io`) | [`event`] |
//! | Deployment, ReplicaSet, ReplicationController, StatefulSet, DaemonSet, Job | [`workload`] |
//! | CustomResourceDefinition | [`crd`] |
//! | custom resources | [`custom`] |
//! | RBAC roles and bindings | [`rbac`] |
//! | CertificateSigningRequest (and `/approval`, who made it) | [`certificate_signing_request`] |
//! | what a new cluster starts with | [`bootstrap`] |

pub mod bootstrap;
pub mod certificate_signing_request;
pub mod config;
pub mod crd;
pub mod custom;
pub mod default_toleration_seconds;
pub mod endpoints;
pub mod event;
pub mod lease;
pub mod limit_range;
pub mod namespace;
pub mod network_policy;
pub mod node;
pub mod node_restriction;
pub mod node_taint;
pub mod persistent_volume;
pub mod pod;
pub mod pod_numbers;
pub mod pod_security;
pub mod priority;
pub mod rbac;
pub mod resource_quota;
pub mod service;
pub mod service_account;
pub mod storage_class;
pub mod storage_protection;
pub mod workload;

use crate::catalog::{ALL, Builtin, ResourceInfo, ScaleSelector, SubresourceInfo};
use crate::strategy::{Generic, Strategy};

const NO_COLLECTION_DELETE: &[&str] = &["create", "delete", "get", "list", "patch", "update", "watch"];

/// What a built-in has unless its row says otherwise.
const PLAIN: Builtin = Builtin {
    group: "",
    version: "",
    kind: "",
    plural: "",
    namespaced: true,
    short: &[],
    categories: &[],
    verbs: ALL,
    status: false,
    scale: None,
    stored_as: None,
    subresources: &[],
    created_status: None,
    generation: false,
};

/// `serviceaccounts/token`: TokenRequest, which the API server answers (it holds the signing key).
const SERVICE_ACCOUNT_SUBRESOURCES: &[SubresourceInfo] =
    &[SubresourceInfo { name: "token", kind: "TokenRequest", verbs: &["create"] }];

/// The built-in resources, in discovery order (checked against kube-apiserver 1.33's `/api/v1` and
/// `/apis/<group>/<version>`).
#[rustfmt::skip]
pub(crate) const BUILTINS: &[Builtin] = &[
    Builtin { group: "", version: "v1", kind: "Namespace", plural: "namespaces", namespaced: false, short: &["ns"], categories: &[], verbs: NO_COLLECTION_DELETE, status: true, scale: None, subresources: namespace::SUBRESOURCES, ..PLAIN },
    Builtin { group: "", version: "v1", kind: "Pod", plural: "pods", namespaced: true, short: &["po"], categories: &["all"], verbs: ALL, status: true, scale: None, subresources: pod::SUBRESOURCES, generation: true, ..PLAIN },
    Builtin { group: "", version: "v1", kind: "Service", plural: "services", namespaced: true, short: &["svc"], categories: &["all"], verbs: ALL, status: true, scale: None, created_status: Some(r#"{"loadBalancer":{}}"#), ..PLAIN },
    Builtin { group: "", version: "v1", kind: "Endpoints", plural: "endpoints", namespaced: true, short: &["ep"], categories: &[], verbs: ALL, status: false, scale: None, ..PLAIN },
    Builtin { group: "", version: "v1", kind: "ReplicationController", plural: "replicationcontrollers", namespaced: true, short: &["rc"], categories: &["all"], verbs: ALL, status: true, scale: Some(ScaleSelector::SpecSet), created_status: Some(r#"{"replicas":0}"#), generation: true, ..PLAIN },
    Builtin { group: "", version: "v1", kind: "ConfigMap", plural: "configmaps", namespaced: true, short: &["cm"], categories: &[], verbs: ALL, status: false, scale: None, ..PLAIN },
    Builtin { group: "", version: "v1", kind: "Secret", plural: "secrets", namespaced: true, short: &[], categories: &[], verbs: ALL, status: false, scale: None, ..PLAIN },
    Builtin { group: "", version: "v1", kind: "ServiceAccount", plural: "serviceaccounts", namespaced: true, short: &["sa"], categories: &[], verbs: ALL, status: false, scale: None, subresources: SERVICE_ACCOUNT_SUBRESOURCES, ..PLAIN },
    Builtin { group: "", version: "v1", kind: "Event", plural: "events", namespaced: true, short: &["ev"], categories: &[], verbs: ALL, status: false, scale: None, ..PLAIN },
    Builtin { group: "", version: "v1", kind: "Node", plural: "nodes", namespaced: false, short: &["no"], categories: &[], verbs: ALL, status: true, scale: None, ..PLAIN },
    Builtin { group: "", version: "v1", kind: "PersistentVolumeClaim", plural: "persistentvolumeclaims", namespaced: true, short: &["pvc"], categories: &[], verbs: ALL, status: true, scale: None, created_status: Some(r#"{"phase":"Pending"}"#), ..PLAIN },
    Builtin { group: "", version: "v1", kind: "PersistentVolume", plural: "persistentvolumes", namespaced: false, short: &["pv"], categories: &[], verbs: ALL, status: true, scale: None, created_status: Some(r#"{"phase":"Pending"}"#), ..PLAIN },
    Builtin { group: "", version: "v1", kind: "ResourceQuota", plural: "resourcequotas", namespaced: true, short: &["quota"], categories: &[], verbs: ALL, status: true, scale: None, created_status: Some(r#"{}"#), ..PLAIN },
    Builtin { group: "", version: "v1", kind: "LimitRange", plural: "limitranges", namespaced: true, short: &["limits"], categories: &[], verbs: ALL, status: false, scale: None, ..PLAIN },
    Builtin { group: "apps", version: "v1", kind: "Deployment", plural: "deployments", namespaced: true, short: &["deploy"], categories: &["all"], verbs: ALL, status: true, scale: Some(ScaleSelector::SpecSelector), created_status: Some(r#"{}"#), generation: true, ..PLAIN },
    Builtin { group: "apps", version: "v1", kind: "ReplicaSet", plural: "replicasets", namespaced: true, short: &["rs"], categories: &["all"], verbs: ALL, status: true, scale: Some(ScaleSelector::SpecSelector), created_status: Some(r#"{"replicas":0}"#), generation: true, ..PLAIN },
    Builtin { group: "apps", version: "v1", kind: "StatefulSet", plural: "statefulsets", namespaced: true, short: &["sts"], categories: &["all"], verbs: ALL, status: true, scale: Some(ScaleSelector::SpecSelector), created_status: Some(r#"{"replicas":0,"availableReplicas":0}"#), generation: true, ..PLAIN },
    Builtin { group: "apps", version: "v1", kind: "DaemonSet", plural: "daemonsets", namespaced: true, short: &["ds"], categories: &["all"], verbs: ALL, status: true, scale: None, created_status: Some(r#"{"currentNumberScheduled":0,"numberMisscheduled":0,"desiredNumberScheduled":0,"numberReady":0}"#), generation: true, ..PLAIN },
    Builtin { group: "apps", version: "v1", kind: "ControllerRevision", plural: "controllerrevisions", namespaced: true, short: &[], categories: &[], verbs: ALL, status: false, scale: None, ..PLAIN },
    Builtin { group: "batch", version: "v1", kind: "Job", plural: "jobs", namespaced: true, short: &[], categories: &["all"], verbs: ALL, status: true, scale: None, created_status: Some(r#"{}"#), generation: true, ..PLAIN },
    Builtin { group: "batch", version: "v1", kind: "CronJob", plural: "cronjobs", namespaced: true, short: &["cj"], categories: &["all"], verbs: ALL, status: true, scale: None, created_status: Some(r#"{}"#), generation: true, ..PLAIN },
    Builtin { group: "coordination.k8s.io", version: "v1", kind: "Lease", plural: "leases", namespaced: true, short: &[], categories: &[], verbs: ALL, status: false, scale: None, ..PLAIN },
    Builtin { group: "rbac.authorization.k8s.io", version: "v1", kind: "Role", plural: "roles", namespaced: true, short: &[], categories: &[], verbs: ALL, status: false, scale: None, ..PLAIN },
    Builtin { group: "rbac.authorization.k8s.io", version: "v1", kind: "RoleBinding", plural: "rolebindings", namespaced: true, short: &[], categories: &[], verbs: ALL, status: false, scale: None, ..PLAIN },
    Builtin { group: "rbac.authorization.k8s.io", version: "v1", kind: "ClusterRole", plural: "clusterroles", namespaced: false, short: &[], categories: &[], verbs: ALL, status: false, scale: None, ..PLAIN },
    Builtin { group: "rbac.authorization.k8s.io", version: "v1", kind: "ClusterRoleBinding", plural: "clusterrolebindings", namespaced: false, short: &[], categories: &[], verbs: ALL, status: false, scale: None, ..PLAIN },
    Builtin { group: "apiextensions.k8s.io", version: "v1", kind: "CustomResourceDefinition", plural: "customresourcedefinitions", namespaced: false, short: &["crd", "crds"], categories: &["api-extensions"], verbs: ALL, status: true, scale: None, generation: true, ..PLAIN },
    Builtin { group: "discovery.k8s.io", version: "v1", kind: "EndpointSlice", plural: "endpointslices", namespaced: true, short: &[], categories: &[], verbs: ALL, status: false, scale: None, generation: true, ..PLAIN },
    Builtin { group: "networking.k8s.io", version: "v1", kind: "Ingress", plural: "ingresses", namespaced: true, short: &["ing"], categories: &[], verbs: ALL, status: true, scale: None, created_status: Some(r#"{"loadBalancer":{}}"#), generation: true, ..PLAIN },
    Builtin { group: "networking.k8s.io", version: "v1", kind: "IngressClass", plural: "ingressclasses", namespaced: false, short: &[], categories: &[], verbs: ALL, status: false, scale: None, generation: true, ..PLAIN },
    Builtin { group: "networking.k8s.io", version: "v1", kind: "NetworkPolicy", plural: "networkpolicies", namespaced: true, short: &["netpol"], categories: &[], verbs: ALL, status: false, scale: None, generation: true, ..PLAIN },
    Builtin { group: "storage.k8s.io", version: "v1", kind: "StorageClass", plural: "storageclasses", namespaced: false, short: &["sc"], categories: &[], verbs: ALL, status: false, scale: None, ..PLAIN },
    Builtin { group: "events.k8s.io", version: "v1", kind: "Event", plural: "events", namespaced: true, short: &["ev"], categories: &[], verbs: ALL, status: false, scale: None, stored_as: Some(event::CORE_EVENTS), ..PLAIN },
    Builtin { group: "certificates.k8s.io", version: "v1", kind: "CertificateSigningRequest", plural: "certificatesigningrequests", namespaced: false, short: &["csr"], categories: &[], verbs: ALL, status: true, scale: None, subresources: certificate_signing_request::SUBRESOURCES, ..PLAIN },
    Builtin { group: "policy", version: "v1", kind: "PodDisruptionBudget", plural: "poddisruptionbudgets", namespaced: true, short: &["pdb"], categories: &[], verbs: ALL, status: true, scale: None, created_status: Some(r#"{"disruptionsAllowed":0,"currentHealthy":0,"desiredHealthy":0,"expectedPods":0}"#), generation: true, ..PLAIN },
    Builtin { group: "scheduling.k8s.io", version: "v1", kind: "PriorityClass", plural: "priorityclasses", namespaced: false, short: &["pc"], categories: &[], verbs: ALL, status: false, scale: None, generation: true, ..PLAIN },
    // Reviews (`kubectl auth can-i`, `whoami`): created and answered, never stored (nest-apiserver's reviews.rs).
    Builtin { group: "authorization.k8s.io", version: "v1", kind: "SelfSubjectAccessReview", plural: "selfsubjectaccessreviews", namespaced: false, verbs: &["create"], ..PLAIN },
    Builtin { group: "authorization.k8s.io", version: "v1", kind: "SelfSubjectRulesReview", plural: "selfsubjectrulesreviews", namespaced: false, verbs: &["create"], ..PLAIN },
    Builtin { group: "authorization.k8s.io", version: "v1", kind: "SubjectAccessReview", plural: "subjectaccessreviews", namespaced: false, verbs: &["create"], ..PLAIN },
    Builtin { group: "authorization.k8s.io", version: "v1", kind: "LocalSubjectAccessReview", plural: "localsubjectaccessreviews", namespaced: true, verbs: &["create"], ..PLAIN },
    Builtin { group: "authentication.k8s.io", version: "v1", kind: "SelfSubjectReview", plural: "selfsubjectreviews", namespaced: false, verbs: &["create"], ..PLAIN },
    Builtin { group: "authentication.k8s.io", version: "v1", kind: "TokenReview", plural: "tokenreviews", namespaced: false, verbs: &["create"], ..PLAIN },
];

/// Sets each of `fields` that `target` (an object) lacks or has as `null`: the shape of most `SetDefaults_*`.
pub(crate) fn set_defaults<const N: usize>(target: &mut serde_json::Value, fields: [(&str, serde_json::Value); N]) {
    if !target.is_object() {
        return;
    }
    for (field, default) in fields {
        if target.get(field).is_none_or(serde_json::Value::is_null) {
            target[field] = default;
        }
    }
}

/// The strategy for a resource.
pub fn for_resource(info: &ResourceInfo) -> Box<dyn Strategy> {
    if info.custom {
        return Box::new(custom::Custom::new(info.schema.clone()));
    }
    match (info.group.as_str(), info.plural.as_str()) {
        ("", "namespaces") => Box::new(namespace::Namespace),
        ("", "pods") => Box::new(pod::Pod),
        ("", "secrets") => Box::new(config::Secret),
        ("", "configmaps") => Box::new(config::ConfigMap),
        ("", "services") => Box::new(service::Service),
        ("", "endpoints") => Box::new(endpoints::Endpoints),
        ("", "nodes") => Box::new(node::Node),
        ("", "persistentvolumes") => Box::new(persistent_volume::PersistentVolume),
        ("", "persistentvolumeclaims") => Box::new(persistent_volume::PersistentVolumeClaim),
        ("", "limitranges") => Box::new(limit_range::LimitRange),
        ("coordination.k8s.io", "leases") => Box::new(lease::Lease),
        ("networking.k8s.io", "networkpolicies") => Box::new(network_policy::NetworkPolicy),
        ("scheduling.k8s.io", "priorityclasses") => Box::new(priority::PriorityClass),
        ("storage.k8s.io", "storageclasses") => Box::new(storage_class::StorageClass),
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => Box::new(rbac::Binding),
        ("discovery.k8s.io", "endpointslices") => Box::new(endpoints::EndpointSlice),
        ("certificates.k8s.io", "certificatesigningrequests") => {
            Box::new(certificate_signing_request::CertificateSigningRequest)
        }
        ("apps", "deployments") => Box::new(workload::Workload::Deployment),
        ("apps", "replicasets") => Box::new(workload::Workload::ReplicaSet),
        ("", "replicationcontrollers") => Box::new(workload::Workload::ReplicationController),
        ("apps", "statefulsets") => Box::new(workload::Workload::StatefulSet),
        ("apps", "daemonsets") => Box::new(workload::Workload::DaemonSet),
        ("batch", "jobs") => Box::new(workload::Workload::Job),
        ("batch", "cronjobs") => Box::new(workload::Workload::CronJob),
        ("", "events") => Box::new(event::Event { events_v1: false }),
        ("events.k8s.io", "events") => Box::new(event::Event { events_v1: true }),
        ("rbac.authorization.k8s.io", _) => Box::new(rbac::PathSegmentNames),
        ("apiextensions.k8s.io", "customresourcedefinitions") => Box::new(crd::CustomResourceDefinition),
        _ => Box::new(Generic),
    }
}
