//! The end-to-end tier: every black-box test of the `nest` binary, in one test binary (one link of the whole program
//! instead of one per file). Each module drives real processes — `nest apiserver` on `127.0.0.1:0`, `nest up`, etcd,
//! runc, a registry — with clients nobody here wrote (kubectl 1.33, kube-rs, the Python client); `common` is the
//! harness they share.
//!
//! Run one module with a filter: `cargo test -p nest --test it kubectl::`. Tests that start `nest up` take a
//! machine-wide lock (`common::up::MACHINE_LOCK`), so they run one at a time whatever the thread count.

mod common;
mod hostile;

mod bench_api;
mod bench_store;
mod bench_sync;
mod bench_tenants;
mod capn;
mod certificates;
mod clusterctl;
mod controllers;
#[cfg(feature = "etcd")]
mod etcd_faults;
mod identities;
mod images;
mod kube_rs;
mod kubectl;
mod kubectl_apply;
mod limits;
mod logging;
mod nested;
mod node_authorizer;
mod processes;
mod python_client;
mod quick_start;
mod sandbox;
mod streams;
mod syncer;
mod tenant_policy;
mod tokens;
mod up;
mod workload_identity;
mod workloads;
