//! What a hostile tenant tries (`../shared/HOSTILE-TENANT.md`, issue 33), done as the attacker would: a tenant admin
//! with kubectl and the images it can run, on `nest up` with two tenants, `demo` and `acme`. Each case checks that the
//! other tenant and the management cluster stay up and unreached, and that no log of the run tells of a panic.
//!
//! Its cases run one after the other: `nest up`'s node has fixed addresses, so each holds the machine-wide `nest up` lock.

mod flood;
mod governance_node;
mod governance_tenant;
mod images;
mod network;
mod numbers;
pub(super) mod platform;
mod syncer;
