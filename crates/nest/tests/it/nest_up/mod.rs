//! The tests that start `nest up`: a whole management cluster on this machine, whose node has fixed addresses (its
//! bridge and pod range), so no two may run at once. Each takes the machine-wide lock (`common::up::MACHINE_LOCK`)
//! for as long as its `nest up` lives; a test that starts `nest up` anywhere else fails when `scripts/check` runs it
//! (see `common::up::machine_lock`), since there it would hold one of the other lane's threads while it waits.

mod attach;
mod hostile;
mod identities;
mod images;
mod port_forward;
mod quick_start;
mod rootfs;
mod sandbox;
mod streams;
mod tenant_policy;
mod tenant_streams;
mod up;
mod workload_identity;
