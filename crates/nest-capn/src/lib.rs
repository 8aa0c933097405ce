//! nest's Cluster API provider for nested control planes ("CAPN"): the API types and their CRDs.
//!
//! A `Cluster` (`cluster.x-k8s.io`, served by nest when no Cluster API core is installed) points at a
//! [`NestedCluster`](api::NestedCluster) (its infrastructure) and a [`NestedControlPlane`](api::NestedControlPlane),
//! which is made of three separately upgradable components: [`NestedEtcd`](api::NestedEtcd),
//! [`NestedAPIServer`](api::NestedAPIServer) and [`NestedControllerManager`](api::NestedControllerManager).
//!
//! Start with [`api`] for the types and [`crds::all`] for the CustomResourceDefinitions (`nest crds` prints them).
//! What each component runs comes from versioned packages of templated manifests ([`package`], the files under
//! `packages/`), rendered by [`render`] with the values [`plan`] works out; [`controllers`] apply them.

pub mod api;
pub mod bundle;
pub mod clusterctl;
pub mod controllers;
pub mod crds;
pub mod identity;
pub mod package;
pub mod plan;
pub mod render;
