//! `nest bench cluster`: how long a Deployment of 1,000 replicas takes from creation to every pod Running on 10
//! simulated nodes, with the API server, controller-manager, scheduler and nodes as separate `nest` processes; then
//! each process's resident memory.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use super::api::{ApiServer, rss_mib};
use super::stats::round;
use super::{emit, parse_duration};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The Deployment's replicas.
    #[arg(long, default_value_t = 1000)]
    replicas: u32,
    /// Simulated nodes (110 pods each).
    #[arg(long, default_value_t = 10)]
    nodes: u8,
    /// Give up after this long.
    #[arg(long, default_value = "300s", value_parser = parse_duration)]
    timeout: Duration,
}

pub(super) fn component(args: &[&str], kubeconfig: &std::path::Path) -> anyhow::Result<tokio::process::Child> {
    Ok(tokio::process::Command::new(std::env::current_exe()?)
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?)
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let server = ApiServer::start(None).await?;
    let kubeconfig = server.data.path().join("admin.kubeconfig");
    let controllers = component(&["controller-manager"], &kubeconfig)?;
    let scheduler = component(&["scheduler"], &kubeconfig)?;
    let count = args.nodes.to_string();
    let nodes = component(&["node", "--name", "bench", "--count", &count, "--start-delay-ms", "0"], &kubeconfig)?;
    let client = nest_client::connect(&kubeconfig).await?.client;

    let node_api: Api<Node> = Api::all(client.clone());
    let started = Instant::now();
    while node_api.list(&ListParams::default()).await?.items.len() < usize::from(args.nodes) {
        anyhow::ensure!(started.elapsed() < args.timeout, "the simulated nodes did not register");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "bench"},
        "spec": {
            "replicas": args.replicas,
            "selector": {"matchLabels": {"app": "bench"}},
            "template": {"metadata": {"labels": {"app": "bench"}}, "spec": {"containers": [{"name": "c", "image": "bench"}]}},
        },
    }))?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let began = Instant::now();
    deployments.create(&PostParams::default(), &deployment).await.context("creating the Deployment")?;
    let mut running = 0;
    while running < args.replicas as usize {
        anyhow::ensure!(
            began.elapsed() < args.timeout,
            "only {running} of {} pods Running after {:?}",
            args.replicas,
            args.timeout
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        let listed = pods.list(&ListParams::default().labels("app=bench")).await?.items;
        running =
            listed.iter().filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")).count();
    }
    let seconds = began.elapsed().as_secs_f64();
    let rss = |child: &tokio::process::Child| child.id().and_then(rss_mib);
    emit(json!({
        "bench": "cluster", "replicas": args.replicas, "nodes": args.nodes, "seconds_to_all_running": round(seconds),
        "rss_mib": {"apiserver": server.rss_mib(), "controller_manager": rss(&controllers), "scheduler": rss(&scheduler),
                    "nodes": rss(&nodes)},
    }));
    Ok(())
}
