//! The Kubernetes API's generic registry: what every resource means, independent of HTTP.
//!
//! Three layers, after kube-apiserver's `registry/generic`: [`nest_storage`] (compare-and-swap over revisions) below;
//! [`store::Registry`], one generic store implementing every REST verb once (conflicts, generated names, dry-run,
//! finalizers, selectors, pagination, watch); and a small [`strategy::Strategy`] per kind holding only that kind's
//! policy. Between a validated object and storage runs the admission [`chain`]. The [`catalog`] says which
//! resources exist; [`error::ApiError`] is every request error, and [`error::ApiError::to_status`] the one place it
//! becomes a Kubernetes `Status`.
//!
//! The mechanism names no kind and no plugin: it is handed a table of kinds ([`serving::Kinds`]) and a chain of
//! plugins. nest's own are one file each, kinds under [`kinds`] (whose `install()` is the table) and admission
//! plugins under [`admission`] (whose `chain()` orders them); [`install`] is the one place they are wired in, and
//! its constructors ([`Registry::open`], [`Catalog::builtin`]) are the usual front door.
//!
//! Start with [`store::Registry`].

pub mod admission;
pub mod apply;
pub mod cache;
pub mod catalog;
pub mod chain;
pub mod convert;
pub mod error;
pub mod install;
pub mod ipalloc;
pub mod kinds;
pub mod meta;
pub mod resource;
pub mod scale;
pub mod schema;
pub mod selector;
pub mod serving;
pub mod store;
pub mod strategic;
pub mod strategy;
pub mod validation;

/// Standard base64 (continue tokens, Secret data), from the leaf crate every part shares.
pub use nest_core::base64;
/// JSON Patch and JSON merge patch, from the leaf crate every part shares.
pub use nest_core::patch;

pub use catalog::{Catalog, PrinterColumn, ResourceInfo, ScalePaths, ScaleSelector};
pub use error::{ApiError, Cause, Result};
pub use store::{DeleteOptions, ListOptions, Registry, Resource, Subresource};
