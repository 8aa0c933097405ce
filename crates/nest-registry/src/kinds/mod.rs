//! Each kind's policy, one file per kind (or kind family), as a [`Strategy`]: what differs between kinds, while the
//! mechanism they share lives once in [`crate::store`]. This file is the table of built-in resources, [`install`]:
//! one row a kind, its catalogue entry (what discovery serves) beside its strategy. The store never asks which kind
//! it is handling, and nothing of the mechanism imports this folder: the table is handed to it ([`crate::install`]).
//! Admission plugins are not kinds: they live in [`crate::admission`].
//!
//! | kind | file |
//! |---|---|
//! | Namespace | [`namespace`] |
//! | Pod (and `pods/binding`, `pods/ephemeralcontainers`) | [`pod`], [`pod_ephemeral`], [`pod_numbers`] |
//! | Service (ClusterIP allocation) | [`service`] |
//! | ConfigMap, Secret | [`config`] |
//! | Event (core and `events.k8s.io`) | [`event`] |
//! | Deployment, ReplicaSet, ReplicationController, StatefulSet, DaemonSet, Job | [`workload`] |
//! | CustomResourceDefinition | [`crd`] |
//! | custom resources | [`custom`] |
//! | RBAC roles and bindings | [`rbac`] |
//! | CertificateSigningRequest (and `/approval`) | [`certificate_signing_request`] |
//! | Node | [`node`] |
//! | Endpoints, EndpointSlice | [`endpoints`] |
//! | PersistentVolume, PersistentVolumeClaim | [`persistent_volume`] |
//! | LimitRange | [`limit_range`] |
//! | StorageClass | [`storage_class`] |
//! | PriorityClass (and the classes every cluster has) | [`priority_class`] |
//! | RuntimeClass | [`runtime_class`] |
//! | Lease | [`lease`] |
//! | NetworkPolicy | [`network_policy`] |
//! | what a new cluster starts with | [`bootstrap`] |

pub mod bootstrap;
pub mod certificate_signing_request;
pub mod config;
pub mod crd;
pub mod custom;
pub mod endpoints;
pub mod event;
pub mod lease;
pub mod limit_range;
pub mod namespace;
pub mod network_policy;
pub mod node;
pub mod persistent_volume;
pub mod pod;
pub mod pod_ephemeral;
pub mod pod_numbers;
pub mod priority_class;
pub mod rbac;
pub mod runtime_class;
pub mod service;
pub mod storage_class;
pub mod workload;

use std::sync::Arc;

use crate::catalog::{ALL, Builtin, ScaleSelector, SubresourceInfo};
use crate::serving::{Kind, Kinds};
use crate::strategy::{Generic, Strategy};
use workload::Workload;

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

/// One row: a built-in's catalogue entry and its strategy.
fn kind(info: Builtin, strategy: impl Strategy) -> Kind {
    Kind { info, strategy: Arc::new(strategy) }
}

/// The built-in resources, in discovery order (checked against kube-apiserver 1.33's `/api/v1` and
/// `/apis/<group>/<version>`), each with its strategy.
#[rustfmt::skip]
pub fn install() -> Kinds {
    Kinds::new(vec![
        kind(Builtin { group: "", version: "v1", kind: "Namespace", plural: "namespaces", namespaced: false, short: &["ns"], categories: &[], verbs: NO_COLLECTION_DELETE, status: true, scale: None, subresources: namespace::SUBRESOURCES, ..PLAIN }, namespace::Namespace),
        kind(Builtin { group: "", version: "v1", kind: "Pod", plural: "pods", namespaced: true, short: &["po"], categories: &["all"], verbs: ALL, status: true, scale: None, subresources: pod::SUBRESOURCES, generation: true, ..PLAIN }, pod::Pod),
        kind(Builtin { group: "", version: "v1", kind: "Service", plural: "services", namespaced: true, short: &["svc"], categories: &["all"], verbs: ALL, status: true, scale: None, created_status: Some(r#"{"loadBalancer":{}}"#), ..PLAIN }, service::Service),
        kind(Builtin { group: "", version: "v1", kind: "Endpoints", plural: "endpoints", namespaced: true, short: &["ep"], categories: &[], verbs: ALL, status: false, scale: None, ..PLAIN }, endpoints::Endpoints),
        kind(Builtin { group: "", version: "v1", kind: "ReplicationController", plural: "replicationcontrollers", namespaced: true, short: &["rc"], categories: &["all"], verbs: ALL, status: true, scale: Some(ScaleSelector::SpecSet), created_status: Some(r#"{"replicas":0}"#), generation: true, ..PLAIN }, Workload::ReplicationController),
        kind(Builtin { group: "", version: "v1", kind: "ConfigMap", plural: "configmaps", namespaced: true, short: &["cm"], categories: &[], verbs: ALL, status: false, scale: None, ..PLAIN }, config::ConfigMap),
        kind(Builtin { group: "", version: "v1", kind: "Secret", plural: "secrets", namespaced: true, short: &[], categories: &[], verbs: ALL, status: false, scale: None, ..PLAIN }, config::Secret),
        kind(Builtin { group: "", version: "v1", kind: "ServiceAccount", plural: "serviceaccounts", namespaced: true, short: &["sa"], categories: &[], verbs: ALL, status: false, scale: None, subresources: SERVICE_ACCOUNT_SUBRESOURCES, ..PLAIN }, Generic),
        kind(Builtin { group: "", version: "v1", kind: "Event", plural: "events", namespaced: true, short: &["ev"], categories: &[], verbs: ALL, status: false, scale: None, ..PLAIN }, event::Event { events_v1: false }),
        kind(Builtin { group: "", version: "v1", kind: "Node", plural: "nodes", namespaced: false, short: &["no"], categories: &[], verbs: ALL, status: true, scale: None, ..PLAIN }, node::Node),
        kind(Builtin { group: "", version: "v1", kind: "PersistentVolumeClaim", plural: "persistentvolumeclaims", namespaced: true, short: &["pvc"], categories: &[], verbs: ALL, status: true, scale: None, created_status: Some(r#"{"phase":"Pending"}"#), ..PLAIN }, persistent_volume::PersistentVolumeClaim),
        kind(Builtin { group: "", version: "v1", kind: "PersistentVolume", plural: "persistentvolumes", namespaced: false, short: &["pv"], categories: &[], verbs: ALL, status: true, scale: None, created_status: Some(r#"{"phase":"Pending"}"#), ..PLAIN }, persistent_volume::PersistentVolume),
        kind(Builtin { group: "", version: "v1", kind: "ResourceQuota", plural: "resourcequotas", namespaced: true, short: &["quota"], categories: &[], verbs: ALL, status: true, scale: None, created_status: Some(r#"{}"#), ..PLAIN }, Generic),
        kind(Builtin { group: "", version: "v1", kind: "LimitRange", plural: "limitranges", namespaced: true, short: &["limits"], categories: &[], verbs: ALL, status: false, scale: None, ..PLAIN }, limit_range::LimitRange),
        kind(Builtin { group: "apps", version: "v1", kind: "Deployment", plural: "deployments", namespaced: true, short: &["deploy"], categories: &["all"], verbs: ALL, status: true, scale: Some(ScaleSelector::SpecSelector), created_status: Some(r#"{}"#), generation: true, ..PLAIN }, Workload::Deployment),
        kind(Builtin { group: "apps", version: "v1", kind: "ReplicaSet", plural: "replicasets", namespaced: true, short: &["rs"], categories: &["all"], verbs: ALL, status: true, scale: Some(ScaleSelector::SpecSelector), created_status: Some(r#"{"replicas":0}"#), generation: true, ..PLAIN }, Workload::ReplicaSet),
        kind(Builtin { group: "apps", version: "v1", kind: "StatefulSet", plural: "statefulsets", namespaced: true, short: &["sts"], categories: &["all"], verbs: ALL, status: true, scale: Some(ScaleSelector::SpecSelector), created_status: Some(r#"{"replicas":0,"availableReplicas":0}"#), generation: true, ..PLAIN }, Workload::StatefulSet),
        kind(Builtin { group: "apps", version: "v1", kind: "DaemonSet", plural: "daemonsets", namespaced: true, short: &["ds"], categories: &["all"], verbs: ALL, status: true, scale: None, created_status: Some(r#"{"currentNumberScheduled":0,"numberMisscheduled":0,"desiredNumberScheduled":0,"numberReady":0}"#), generation: true, ..PLAIN }, Workload::DaemonSet),
        kind(Builtin { group: "apps", version: "v1", kind: "ControllerRevision", plural: "controllerrevisions", namespaced: true, short: &[], categories: &[], verbs: ALL, status: false, scale: None, ..PLAIN }, Generic),
        kind(Builtin { group: "batch", version: "v1", kind: "Job", plural: "jobs", namespaced: true, short: &[], categories: &["all"], verbs: ALL, status: true, scale: None, created_status: Some(r#"{}"#), generation: true, ..PLAIN }, Workload::Job),
        kind(Builtin { group: "batch", version: "v1", kind: "CronJob", plural: "cronjobs", namespaced: true, short: &["cj"], categories: &["all"], verbs: ALL, status: true, scale: None, created_status: Some(r#"{}"#), generation: true, ..PLAIN }, Workload::CronJob),
        kind(Builtin { group: "coordination.k8s.io", version: "v1", kind: "Lease", plural: "leases", namespaced: true, short: &[], categories: &[], verbs: ALL, status: false, scale: None, ..PLAIN }, lease::Lease),
        kind(Builtin { group: "rbac.authorization.k8s.io", version: "v1", kind: "Role", plural: "roles", namespaced: true, short: &[], categories: &[], verbs: ALL, status: false, scale: None, ..PLAIN }, rbac::PathSegmentNames),
        kind(Builtin { group: "rbac.authorization.k8s.io", version: "v1", kind: "RoleBinding", plural: "rolebindings", namespaced: true, short: &[], categories: &[], verbs: ALL, status: false, scale: None, ..PLAIN }, rbac::Binding),
        kind(Builtin { group: "rbac.authorization.k8s.io", version: "v1", kind: "ClusterRole", plural: "clusterroles", namespaced: false, short: &[], categories: &[], verbs: ALL, status: false, scale: None, ..PLAIN }, rbac::PathSegmentNames),
        kind(Builtin { group: "rbac.authorization.k8s.io", version: "v1", kind: "ClusterRoleBinding", plural: "clusterrolebindings", namespaced: false, short: &[], categories: &[], verbs: ALL, status: false, scale: None, ..PLAIN }, rbac::Binding),
        kind(Builtin { group: "apiextensions.k8s.io", version: "v1", kind: "CustomResourceDefinition", plural: "customresourcedefinitions", namespaced: false, short: &["crd", "crds"], categories: &["api-extensions"], verbs: ALL, status: true, scale: None, generation: true, ..PLAIN }, crd::CustomResourceDefinition),
        kind(Builtin { group: "discovery.k8s.io", version: "v1", kind: "EndpointSlice", plural: "endpointslices", namespaced: true, short: &[], categories: &[], verbs: ALL, status: false, scale: None, generation: true, ..PLAIN }, endpoints::EndpointSlice),
        kind(Builtin { group: "networking.k8s.io", version: "v1", kind: "Ingress", plural: "ingresses", namespaced: true, short: &["ing"], categories: &[], verbs: ALL, status: true, scale: None, created_status: Some(r#"{"loadBalancer":{}}"#), generation: true, ..PLAIN }, Generic),
        kind(Builtin { group: "networking.k8s.io", version: "v1", kind: "IngressClass", plural: "ingressclasses", namespaced: false, short: &[], categories: &[], verbs: ALL, status: false, scale: None, generation: true, ..PLAIN }, Generic),
        kind(Builtin { group: "networking.k8s.io", version: "v1", kind: "NetworkPolicy", plural: "networkpolicies", namespaced: true, short: &["netpol"], categories: &[], verbs: ALL, status: false, scale: None, generation: true, ..PLAIN }, network_policy::NetworkPolicy),
        kind(Builtin { group: "storage.k8s.io", version: "v1", kind: "StorageClass", plural: "storageclasses", namespaced: false, short: &["sc"], categories: &[], verbs: ALL, status: false, scale: None, ..PLAIN }, storage_class::StorageClass),
        kind(Builtin { group: "events.k8s.io", version: "v1", kind: "Event", plural: "events", namespaced: true, short: &["ev"], categories: &[], verbs: ALL, status: false, scale: None, stored_as: Some(event::CORE_EVENTS), ..PLAIN }, event::Event { events_v1: true }),
        kind(Builtin { group: "certificates.k8s.io", version: "v1", kind: "CertificateSigningRequest", plural: "certificatesigningrequests", namespaced: false, short: &["csr"], categories: &[], verbs: ALL, status: true, scale: None, subresources: certificate_signing_request::SUBRESOURCES, ..PLAIN }, certificate_signing_request::CertificateSigningRequest),
        kind(Builtin { group: "policy", version: "v1", kind: "PodDisruptionBudget", plural: "poddisruptionbudgets", namespaced: true, short: &["pdb"], categories: &[], verbs: ALL, status: true, scale: None, created_status: Some(r#"{"disruptionsAllowed":0,"currentHealthy":0,"desiredHealthy":0,"expectedPods":0}"#), generation: true, ..PLAIN }, Generic),
        kind(Builtin { group: "scheduling.k8s.io", version: "v1", kind: "PriorityClass", plural: "priorityclasses", namespaced: false, short: &["pc"], categories: &[], verbs: ALL, status: false, scale: None, generation: true, ..PLAIN }, priority_class::PriorityClass),
        kind(Builtin { group: "node.k8s.io", version: "v1", kind: "RuntimeClass", plural: "runtimeclasses", namespaced: false, short: &[], categories: &[], verbs: ALL, status: false, scale: None, ..PLAIN }, runtime_class::RuntimeClass),
        // Reviews (`kubectl auth can-i`, `whoami`): created and answered, never stored (nest-apiserver's reviews.rs).
        kind(Builtin { group: "authorization.k8s.io", version: "v1", kind: "SelfSubjectAccessReview", plural: "selfsubjectaccessreviews", namespaced: false, verbs: &["create"], ..PLAIN }, Generic),
        kind(Builtin { group: "authorization.k8s.io", version: "v1", kind: "SelfSubjectRulesReview", plural: "selfsubjectrulesreviews", namespaced: false, verbs: &["create"], ..PLAIN }, Generic),
        kind(Builtin { group: "authorization.k8s.io", version: "v1", kind: "SubjectAccessReview", plural: "subjectaccessreviews", namespaced: false, verbs: &["create"], ..PLAIN }, Generic),
        kind(Builtin { group: "authorization.k8s.io", version: "v1", kind: "LocalSubjectAccessReview", plural: "localsubjectaccessreviews", namespaced: true, verbs: &["create"], ..PLAIN }, Generic),
        kind(Builtin { group: "authentication.k8s.io", version: "v1", kind: "SelfSubjectReview", plural: "selfsubjectreviews", namespaced: false, verbs: &["create"], ..PLAIN }, Generic),
        kind(Builtin { group: "authentication.k8s.io", version: "v1", kind: "TokenReview", plural: "tokenreviews", namespaced: false, verbs: &["create"], ..PLAIN }, Generic),
    ])
}
