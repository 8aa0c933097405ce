//! `nest scheduler`: binds pending pods to nodes, against any API server.

use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The cluster to schedule for.
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "FILE")]
    kubeconfig: PathBuf,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let client = nest_client::connect(&args.kubeconfig).await?.client;
    eprintln!("nest scheduler: scheduling pods for {}", nest_scheduler::SCHEDULER_NAME);
    tokio::select! {
        () = nest_scheduler::run(client) => anyhow::bail!("the scheduler's watches ended"),
        () = super::shutdown_signal() => {}
    }
    eprintln!("nest scheduler: stopped");
    Ok(())
}
