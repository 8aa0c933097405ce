//! What a hostile tenant tries (`../shared/HOSTILE-TENANT.md`, issue 33), done as the attacker would: a tenant admin
//! with kubectl and the images it can run, on `nest up` with two tenants, `demo` and `acme`. Each case checks that the
//! other tenant and the management cluster stay up and unreached, and that no log of the run tells of a panic.
//!
//! One test binary, its cases one after the other: `nest up`'s node has fixed addresses, so no two may run at once.

#[path = "../common/mod.rs"]
mod common;

mod flood;
mod governance_node;
mod governance_tenant;
mod images;
mod network;
mod numbers;
mod platform;
mod syncer;
