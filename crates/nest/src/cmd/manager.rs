//! `nest manager`: the Cluster API provider's controllers (nested control planes and their components), after
//! installing or updating the provider's CRDs.

use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The management cluster.
    #[arg(long, value_name = "FILE")]
    kubeconfig: PathBuf,
}

/// Installs the CRDs and runs the controllers until they stop.
pub async fn manage(client: kube::Client) -> anyhow::Result<()> {
    for name in nest_capn::crds::install(&client).await? {
        eprintln!("nest manager: {name} is installed by someone else (the Cluster API core?); leaving it as it is");
    }
    nest_capn::controllers::run(client).await;
    anyhow::bail!("the watches of the nested control planes ended")
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let (client, _) = nest_controllers::connect(&args.kubeconfig).await?;
    eprintln!("nest manager: running");
    tokio::select! {
        result = manage(client) => result,
        () = super::shutdown_signal() => {
            eprintln!("nest manager: stopped");
            Ok(())
        }
    }
}
