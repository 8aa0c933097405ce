//! `nest proxy`: serves the cluster's ClusterIPs on this machine: loopback ones, and those of `--service-cidr` (see
//! `nest_node::proxy`).

use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The cluster whose Services to serve.
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "FILE")]
    kubeconfig: PathBuf,
    /// A Service range (not loopback) to make local to this machine and serve, so that pods in network namespaces of
    /// their own reach its ClusterIPs; repeatable.
    #[arg(long, value_name = "CIDR")]
    service_cidr: Vec<String>,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let client = nest_client::connect(&args.kubeconfig).await?.client;
    eprintln!("nest proxy: serving ClusterIPs");
    tokio::select! {
        () = nest_node::proxy::run(client, args.service_cidr) => anyhow::bail!("the watches of Services and EndpointSlices ended"),
        () = super::shutdown_signal() => {}
    }
    eprintln!("nest proxy: stopped");
    Ok(())
}
