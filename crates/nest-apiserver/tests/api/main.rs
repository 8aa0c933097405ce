//! The in-process tier: API behaviour checked against `nest_apiserver::serve` running inside the test process on
//! `127.0.0.1:0` (no `nest` process, no `nest up`), driven with the real kubectl 1.33, on the embedded store and, with
//! the `etcd` feature, on the etcd `scripts/check` starts. `scripts/check --fast` runs this tier.

mod server;

mod defaulting;
mod ephemeral_containers;
mod limit_range;
mod resource_quota;
mod reviews;

pub use nest_testkit::{KUBECTL, Storage, eventually};
pub use server::Server;

/// The backends this build tests: the embedded store, and etcd with the `etcd` feature.
pub fn backends() -> Vec<(&'static str, Storage)> {
    nest_testkit::backends(cfg!(feature = "etcd"))
}
