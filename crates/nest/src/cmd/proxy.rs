//! `nest proxy`: serves every loopback ClusterIP of the cluster on this machine (see `nest_node::proxy`).

use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The cluster whose Services to serve.
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "FILE")]
    kubeconfig: PathBuf,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let client = nest_client::connect(&args.kubeconfig).await?.client;
    eprintln!("nest proxy: serving ClusterIPs");
    tokio::select! {
        () = nest_node::proxy::run(client) => anyhow::bail!("the watches of Services and EndpointSlices ended"),
        () = super::shutdown_signal() => {}
    }
    eprintln!("nest proxy: stopped");
    Ok(())
}
