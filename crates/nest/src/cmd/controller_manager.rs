//! `nest controller-manager`: the controllers kube-controller-manager runs, against any API server, behind a Lease.

use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The cluster to manage.
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "FILE")]
    kubeconfig: PathBuf,
    /// This instance's name in the leader Lease (default: host name and process id).
    #[arg(long, value_name = "ID")]
    identity: Option<String>,
    /// How long the leader Lease stays held without renewal; another instance takes over after that.
    #[arg(long, value_name = "SECONDS", default_value_t = 15)]
    lease_duration_seconds: u64,
    /// How long a node may go without renewing its Lease before it is marked NotReady.
    #[arg(long, value_name = "SECONDS", default_value_t = 40)]
    node_monitor_grace_period_seconds: u64,
    /// Provision a local volume (a directory on the node that runs the pod) for every claim with no storage class,
    /// as `nest up` does for its own cluster.
    #[arg(long)]
    local_volumes: bool,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let nest_client::Connection { client, ca_pem } = nest_client::connect(&args.kubeconfig).await?;
    let identity = args.identity.unwrap_or_else(default_identity);
    let (namespace, name) = nest_controllers::LEASE;
    eprintln!("nest controller-manager: {identity} waiting for the lease {namespace}/{name}");
    let leading = identity.clone();
    let options = nest_controllers::Options {
        identity,
        ca_pem,
        lease_duration: std::time::Duration::from_secs(args.lease_duration_seconds.max(1)),
        on_leading: Box::new(move || eprintln!("nest controller-manager: {leading} is leading")),
        node_grace: std::time::Duration::from_secs(args.node_monitor_grace_period_seconds),
        local_volumes: args.local_volumes,
    };
    nest_controllers::run(client, options, super::shutdown_signal()).await?;
    eprintln!("nest controller-manager: stopped");
    Ok(())
}

/// `<host>_<pid>`, unique per process as client-go's leader election wants.
pub fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_else(|_| "nest".into());
    format!("{}_{}", host.trim(), std::process::id())
}
