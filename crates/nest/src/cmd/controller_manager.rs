//! `nest controller-manager`: the controllers kube-controller-manager runs, against any API server, behind a Lease.

use std::path::PathBuf;

use anyhow::Context;

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
    /// The CA certificate (PEM) with which approved CertificateSigningRequests for the kubernetes.io signers are
    /// signed; without it and --cluster-signing-key-file no request is signed.
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "FILE", requires = "cluster_signing_key_file")]
    cluster_signing_cert_file: Option<PathBuf>,
    /// The CA's private key (PEM).
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "FILE", requires = "cluster_signing_cert_file")]
    cluster_signing_key_file: Option<PathBuf>,
    /// The longest life of a signed certificate (a Go duration; a request's expirationSeconds may ask for less).
    #[arg(long, value_name = "DURATION", default_value = "8760h", value_parser = signing_duration)]
    cluster_signing_duration: std::time::Duration,
}

fn signing_duration(text: &str) -> Result<std::time::Duration, String> {
    nest_pki::parse_duration(text).ok_or_else(|| format!("{text:?} is not a duration like 8760h or 90m"))
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let nest_client::Connection { client, ca_pem } = nest_client::connect(&args.kubeconfig).await?;
    let identity = args.identity.unwrap_or_else(default_identity);
    let (namespace, name) = nest_controllers::LEASE;
    eprintln!("nest controller-manager: {identity} waiting for the lease {namespace}/{name}");
    let signing = match (&args.cluster_signing_cert_file, &args.cluster_signing_key_file) {
        (Some(cert), Some(key)) => {
            let read =
                |path: &PathBuf| std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()));
            let ca = nest_pki::Ca(nest_pki::Pair { cert: read(cert)?, key: read(key)? });
            Some(nest_controllers::certificates::Signing { ca, duration: args.cluster_signing_duration })
        }
        _ => None,
    };
    let leading = identity.clone();
    let options = nest_controllers::Options {
        identity,
        ca_pem,
        lease_duration: std::time::Duration::from_secs(args.lease_duration_seconds.max(1)),
        on_leading: Box::new(move || eprintln!("nest controller-manager: {leading} is leading")),
        node_grace: std::time::Duration::from_secs(args.node_monitor_grace_period_seconds),
        local_volumes: args.local_volumes,
        signing,
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
