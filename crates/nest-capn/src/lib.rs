//! nest's Cluster API provider for nested control planes ("CAPN"): the controllers that bring up and keep the
//! components of a [`NestedControlPlane`](api::NestedControlPlane).
//!
//! The API types and their CRDs are the `nest-capn-api` crate's, re-exported here as [`api`] (and the CRDs in
//! [`crds`], which also installs them), so that what only reads these objects need not link the controllers.
//! What each component runs comes from versioned packages of templated manifests ([`package`], the files under
//! `packages/`), rendered by [`render`] with the values [`plan`] works out; [`controllers`] apply them. Start with
//! [`controllers::run`].

/// The API types: `nest-capn-api`'s, under the name the provider's modules have always used.
pub use nest_capn_api as api;

pub mod bundle;
pub mod clusterctl;
pub mod controllers;
pub mod crds;
pub mod identity;
pub mod package;
pub mod plan;
pub mod render;
