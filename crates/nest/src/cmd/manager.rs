//! `nest manager`: the Cluster API provider's controllers (nested control planes and their components), after
//! installing or updating the provider's CRDs.

use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The management cluster; inside a pod, the pod's service account when unset.
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// A directory of component packages (channels and templated manifests, laid out like the built-in ones under
    /// crates/nest-capn/packages) looked at before the built-in packages.
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "DIR")]
    packages: Option<PathBuf>,
    /// Which controllers run: `all`, or a comma-separated list of `control-plane`, `infrastructure` and `core` (the
    /// Cluster controller, which never runs where the Cluster API core owns the Cluster CRD).
    #[arg(long, value_name = "LIST", default_value = "all", value_parser = parse_set)]
    controllers: nest_capn::controllers::Set,
    /// Install (or update) the CRDs first; off when clusterctl installed them.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    install_crds: bool,
}

fn parse_set(text: &str) -> Result<nest_capn::controllers::Set, String> {
    let mut set = nest_capn::controllers::Set { control_plane: false, infrastructure: false, core: false };
    for part in text.split(',') {
        match part.trim() {
            "all" => set = nest_capn::controllers::Set::ALL,
            "control-plane" => set.control_plane = true,
            "infrastructure" => set.infrastructure = true,
            "core" => set.core = true,
            other => return Err(format!("{other:?} is not one of all, control-plane, infrastructure, core")),
        }
    }
    Ok(set)
}

/// Installs the CRDs (when asked) and runs the controllers until they stop.
pub async fn manage(
    client: kube::Client,
    packages: nest_capn::package::Packages,
    mut set: nest_capn::controllers::Set,
    install_crds: bool,
) -> anyhow::Result<()> {
    const CLUSTER_CRD: &str = "clusters.cluster.x-k8s.io";
    let core_elsewhere = if install_crds {
        let left = nest_capn::crds::install(&client).await?;
        for name in &left {
            eprintln!("nest manager: {name} is installed by someone else (the Cluster API core?); leaving it as it is");
        }
        left.iter().any(|name| name == CLUSTER_CRD)
    } else {
        let crds: kube::Api<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        > = kube::Api::all(client.clone());
        crds.get_opt(CLUSTER_CRD).await?.is_none_or(|crd| {
            crd.metadata.annotations.as_ref().and_then(|a| a.get(nest_capn::crds::MANAGED_BY)).is_none()
        })
    };
    if set.core && core_elsewhere {
        eprintln!("nest manager: the Cluster API core owns Clusters; its Cluster controller does not run here");
        set.core = false;
    }
    nest_capn::controllers::run(client, packages, set).await;
    anyhow::bail!("the watches of the nested control planes ended")
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let client = nest_client::connect_or_in_cluster(args.kubeconfig.as_deref()).await?;
    if let Some(dir) = &args.packages
        && !nest_capn::package::looks_like_packages(dir)
    {
        anyhow::bail!("{} has no <flavor>/channels directory; see crates/nest-capn/packages", dir.display());
    }
    let packages = nest_capn::package::Packages { dir: args.packages.clone() };
    eprintln!("nest manager: running");
    tokio::select! {
        result = manage(client, packages, args.controllers, args.install_crds) => result,
        () = super::shutdown_signal() => {
            eprintln!("nest manager: stopped");
            Ok(())
        }
    }
}
