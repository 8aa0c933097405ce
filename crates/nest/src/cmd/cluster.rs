//! `nest cluster create|list|describe|kubeconfig|delete`: tenant clusters on any management cluster running
//! `nest manager`, in the spirit of `clusterctl`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use kube::api::{Api, DeleteParams, ListParams};
use kube::{Client, ResourceExt};
use nest_capn::api::{
    Cluster, Flavor, NestedAPIServer, NestedCluster, NestedComponentStatus, NestedControlPlane,
    NestedControllerManager, NestedEtcd,
};
use serde_json::Value;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The management cluster (default: $KUBECONFIG, then nest up's nest-data/admin.kubeconfig).
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "FILE", global = true)]
    kubeconfig: Option<PathBuf>,
    /// The namespace of the clusters.
    #[arg(long, short = 'n', default_value = "default", global = true)]
    namespace: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Creates a Cluster with a NestedCluster and a NestedControlPlane.
    Create {
        name: String,
        /// The Kubernetes version of the control plane.
        #[arg(long, default_value = nest_capn::bundle::DEFAULT_VERSION)]
        version: String,
        /// `nest` or `kubernetes`.
        #[arg(long, default_value = "nest", value_parser = parse_flavor)]
        flavor: Flavor,
        /// Run an etcd of this many members (1, 3 or 5) for the control plane's data; without it, a `nest` API
        /// server keeps its data itself.
        #[arg(long, value_name = "N", value_parser = clap::builder::PossibleValuesParser::new(["1", "3", "5"]))]
        etcd_members: Option<String>,
        /// How many API servers run (more than one needs --etcd-members).
        #[arg(long, value_name = "N", requires = "etcd_members")]
        api_servers: Option<i32>,
        /// The Pod Security level its pods get in the management cluster (the syncer's default, `restricted`, when
        /// unset): sets the Cluster's `tenancy.nest.dev/pod-security` annotation.
        #[arg(long, value_name = "LEVEL", value_parser = clap::builder::PossibleValuesParser::new(["privileged", "baseline", "restricted"]))]
        pod_security: Option<String>,
        /// Wait until the cluster is ready, showing progress.
        #[arg(long)]
        wait: bool,
        /// How long --wait waits.
        #[arg(long, default_value = "120s", value_parser = crate::bench::parse_duration)]
        timeout: Duration,
    },
    /// Lists the clusters.
    List,
    /// Shows a cluster, its infrastructure, its control plane and the control plane's components.
    Describe { name: String },
    /// Prints the cluster's admin kubeconfig, or merges it into the kubeconfig file as context `<name>`.
    Kubeconfig {
        name: String,
        #[arg(long)]
        merge: bool,
    },
    /// Deletes the cluster and everything it made.
    Delete {
        name: String,
        #[arg(long)]
        wait: bool,
        #[arg(long, default_value = "120s", value_parser = crate::bench::parse_duration)]
        timeout: Duration,
    },
}

fn parse_flavor(text: &str) -> Result<Flavor, String> {
    match text {
        "nest" => Ok(Flavor::Nest),
        "kubernetes" => Ok(Flavor::Kubernetes),
        _ => Err(format!("{text:?}: expected nest or kubernetes")),
    }
}

/// The management cluster's kubeconfig: the flag, else `$KUBECONFIG`, else `nest up`'s.
fn kubeconfig_path(flag: &Option<PathBuf>) -> PathBuf {
    flag.clone()
        .or_else(|| std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("nest-data/admin.kubeconfig"))
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let path = kubeconfig_path(&args.kubeconfig);
    let client = nest_client::connect(&path).await?.client;
    let namespace = args.namespace.as_str();
    match args.command {
        Command::Create { name, version, flavor, etcd_members, api_servers, pod_security, wait, timeout } => {
            let etcd_members = etcd_members.map(|n| n.parse().expect("one of 1, 3, 5"));
            let shape = nest_capn::bundle::Shape { version, flavor, etcd_members, api_servers, pod_security };
            nest_capn::bundle::create(&client, &name, namespace, &shape)
                .await
                .context("creating the cluster (is `nest manager` running, with its CRDs installed?)")?;
            println!("cluster {namespace}/{name} created");
            if wait {
                wait_ready(&client, namespace, &name, timeout).await?;
            }
            Ok(())
        }
        Command::List => list(&client, namespace).await,
        Command::Describe { name } => describe(&client, namespace, &name).await,
        Command::Kubeconfig { name, merge } => {
            let config = tenant_kubeconfig(&client, namespace, &name).await?;
            if merge {
                let merged = merge_into(&path, &name, &config)?;
                println!("context {name} added to {}; kubectl --context {name} …", merged.display());
            } else {
                print!("{config}");
            }
            Ok(())
        }
        Command::Delete { name, wait, timeout } => {
            let clusters: Api<Cluster> = Api::namespaced(client.clone(), namespace);
            clusters.delete(&name, &DeleteParams::default()).await.with_context(|| format!("deleting {name}"))?;
            println!("cluster {namespace}/{name} deleting");
            if wait {
                let began = Instant::now();
                while clusters.get_opt(&name).await?.is_some() {
                    anyhow::ensure!(began.elapsed() < timeout, "cluster {name} still there after {timeout:?}");
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                println!("cluster {namespace}/{name} deleted after {:.1} s", began.elapsed().as_secs_f64());
            }
            Ok(())
        }
    }
}

/// Waits for the cluster to be Provisioned with its control plane ready, printing each new state.
async fn wait_ready(client: &Client, namespace: &str, name: &str, timeout: Duration) -> anyhow::Result<()> {
    let began = Instant::now();
    let mut last = String::new();
    loop {
        let state = summary(client, namespace, name).await?;
        if state != last {
            println!("{:>5.1} s  {state}", began.elapsed().as_secs_f64());
            last = state.clone();
        }
        if state.starts_with("Provisioned, control plane ready") {
            println!("cluster {namespace}/{name} is ready: nest cluster kubeconfig {name} > {name}.kubeconfig");
            return Ok(());
        }
        anyhow::ensure!(began.elapsed() < timeout, "cluster {name} not ready after {timeout:?}: {state}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn summary(client: &Client, namespace: &str, name: &str) -> anyhow::Result<String> {
    let cluster = Api::<Cluster>::namespaced(client.clone(), namespace).get_opt(name).await?;
    let plane = Api::<NestedControlPlane>::namespaced(client.clone(), namespace).get_opt(name).await?;
    let phase = cluster.and_then(|c| c.status.and_then(|s| s.phase)).unwrap_or_else(|| "Pending".into());
    let (ready, reason) = plane
        .as_ref()
        .and_then(|p| condition(p.status.as_ref().and_then(|s| s.conditions.as_ref()), "Ready"))
        .map(|c| (c.status == "True", c.reason.clone()))
        .unwrap_or((false, "Pending".into()));
    Ok(if ready {
        format!("{phase}, control plane ready")
    } else {
        format!("{phase}, control plane not ready ({reason})")
    })
}

fn condition<'a>(
    conditions: Option<&'a Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>,
    kind: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    conditions.into_iter().flatten().find(|c| c.type_ == kind)
}

fn age(created: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> String {
    let Some(created) = created else { return "-".into() };
    let seconds = jiff::Timestamp::now().duration_since(created.0).as_secs().max(0);
    match seconds {
        0..120 => format!("{seconds}s"),
        120..7200 => format!("{}m", seconds / 60),
        7200..172_800 => format!("{}h", seconds / 3600),
        _ => format!("{}d", seconds / 86_400),
    }
}

async fn list(client: &Client, namespace: &str) -> anyhow::Result<()> {
    let clusters = Api::<Cluster>::namespaced(client.clone(), namespace).list(&ListParams::default()).await?.items;
    let planes: Api<NestedControlPlane> = Api::namespaced(client.clone(), namespace);
    println!("{:<20} {:<12} {:<6} {:<10} {:<22} {:>5}", "NAME", "PHASE", "READY", "VERSION", "ENDPOINT", "AGE");
    for cluster in clusters {
        let name = cluster.name_any();
        let plane = planes.get_opt(&name).await?;
        let ready = plane.as_ref().and_then(|p| p.status.as_ref()).is_some_and(|s| s.ready);
        let version = plane.as_ref().map(|p| p.spec.version.clone()).unwrap_or_default();
        let endpoint = cluster.spec.control_plane_endpoint.as_ref().map(|e| format!("{}:{}", e.host, e.port));
        let phase = cluster.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_else(|| "Pending".into());
        println!(
            "{:<20} {:<12} {:<6} {:<10} {:<22} {:>5}",
            name,
            phase,
            ready,
            version,
            endpoint.unwrap_or_else(|| "-".into()),
            age(cluster.metadata.creation_timestamp.as_ref())
        );
    }
    Ok(())
}

/// One line of the describe tree: the object, whether it is ready, why, its age and message.
fn row(prefix: &str, kind_name: String, ready: Option<bool>, reason: &str, age: String, message: &str) {
    let ready = match ready {
        Some(true) => "True",
        Some(false) => "False",
        None => "-",
    };
    println!("{:<48} {:<6} {:<22} {:>5}  {message}", format!("{prefix}{kind_name}"), ready, reason, age);
}

fn component_row(
    prefix: &str,
    kind: &str,
    name: &str,
    status: Option<&NestedComponentStatus>,
    created: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
) {
    let ready = condition(status.and_then(|s| s.conditions.as_ref()), "Ready");
    let replicas =
        status.map(|s| format!("{}/{} ", s.ready_replicas.unwrap_or(0), s.replicas.unwrap_or(0))).unwrap_or_default();
    let phase = status.and_then(|s| s.phase.clone()).unwrap_or_else(|| "Pending".into());
    row(
        prefix,
        format!("{kind}/{name}"),
        ready.map(|c| c.status == "True"),
        &format!("{replicas}{phase}"),
        age(created),
        ready.map(|c| c.message.as_str()).unwrap_or(""),
    );
}

async fn describe(client: &Client, namespace: &str, name: &str) -> anyhow::Result<()> {
    let cluster = Api::<Cluster>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await?
        .with_context(|| format!("no cluster {namespace}/{name}"))?;
    println!("{:<48} {:<6} {:<22} {:>5}  MESSAGE", "NAME", "READY", "REASON", "AGE");
    let status = cluster.status.clone().unwrap_or_default();
    let available = condition(status.conditions.as_ref(), "ControlPlaneAvailable");
    row(
        "",
        format!("Cluster/{name}"),
        available.map(|c| c.status == "True"),
        status.phase.as_deref().unwrap_or("Pending"),
        age(cluster.metadata.creation_timestamp.as_ref()),
        available.map(|c| c.message.as_str()).unwrap_or(""),
    );
    if let Some(reference) = &cluster.spec.infrastructure_ref {
        let infrastructure =
            Api::<NestedCluster>::namespaced(client.clone(), namespace).get_opt(&reference.name).await?;
        let ready = infrastructure
            .as_ref()
            .and_then(|i| condition(i.status.as_ref().and_then(|s| s.conditions.as_ref()), "Ready"));
        row(
            "├─ ",
            format!("{}/{}", reference.kind, reference.name),
            ready.map(|c| c.status == "True"),
            ready.map(|c| c.reason.as_str()).unwrap_or("NotFound"),
            age(infrastructure.as_ref().and_then(|i| i.metadata.creation_timestamp.as_ref())),
            ready.map(|c| c.message.as_str()).unwrap_or(""),
        );
    }
    let Some(reference) = &cluster.spec.control_plane_ref else { return Ok(()) };
    let plane = Api::<NestedControlPlane>::namespaced(client.clone(), namespace).get_opt(&reference.name).await?;
    let ready = plane.as_ref().and_then(|p| condition(p.status.as_ref().and_then(|s| s.conditions.as_ref()), "Ready"));
    row(
        "└─ ",
        format!("{}/{}", reference.kind, reference.name),
        ready.map(|c| c.status == "True"),
        ready.map(|c| c.reason.as_str()).unwrap_or("NotFound"),
        age(plane.as_ref().and_then(|p| p.metadata.creation_timestamp.as_ref())),
        ready.map(|c| c.message.as_str()).unwrap_or(""),
    );
    let Some(plane) = plane else { return Ok(()) };
    if nest_capn::plan::Plan::of(&plane, Some(&cluster)).with_etcd {
        let component = plane.spec.etcd.as_ref().and_then(|r| r.name.clone()).unwrap_or_else(|| plane.name_any());
        let etcd = Api::<NestedEtcd>::namespaced(client.clone(), namespace).get_opt(&component).await?;
        component_row(
            "   ├─ ",
            "NestedEtcd",
            &component,
            etcd.as_ref().and_then(|c| c.status.as_ref()),
            etcd.as_ref().and_then(|c| c.metadata.creation_timestamp.as_ref()),
        );
    }
    let component = plane.spec.api_server.as_ref().and_then(|r| r.name.clone()).unwrap_or_else(|| plane.name_any());
    let api_server = Api::<NestedAPIServer>::namespaced(client.clone(), namespace).get_opt(&component).await?;
    component_row(
        "   ├─ ",
        "NestedAPIServer",
        &component,
        api_server.as_ref().and_then(|c| c.status.as_ref()),
        api_server.as_ref().and_then(|c| c.metadata.creation_timestamp.as_ref()),
    );
    let component =
        plane.spec.controller_manager.as_ref().and_then(|r| r.name.clone()).unwrap_or_else(|| plane.name_any());
    let manager = Api::<NestedControllerManager>::namespaced(client.clone(), namespace).get_opt(&component).await?;
    component_row(
        "   └─ ",
        "NestedControllerManager",
        &component,
        manager.as_ref().and_then(|c| c.status.as_ref()),
        manager.as_ref().and_then(|c| c.metadata.creation_timestamp.as_ref()),
    );
    Ok(())
}

/// Tenant `name`'s admin kubeconfig, from its Secret `<name>-kubeconfig` in the management cluster.
pub(crate) async fn tenant_kubeconfig(client: &Client, namespace: &str, name: &str) -> anyhow::Result<String> {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), namespace);
    let secret = secrets
        .get_opt(&format!("{name}-kubeconfig"))
        .await?
        .with_context(|| format!("no Secret {name}-kubeconfig yet: is the cluster's control plane up?"))?;
    let value = secret.data.as_ref().and_then(|d| d.get("value")).context("the Secret has no `value`")?;
    Ok(String::from_utf8(value.0.clone())?)
}

/// Adds the tenant's cluster, user and context (all named `name`) to the kubeconfig file at `path`.
fn merge_into(path: &std::path::Path, name: &str, tenant: &str) -> anyhow::Result<PathBuf> {
    let tenant: Value = serde_norway::from_str(tenant)?;
    let mut merged: Value = match std::fs::read_to_string(path) {
        Ok(text) => serde_norway::from_str(&text)?,
        Err(_) => serde_json::json!({"apiVersion": "v1", "kind": "Config"}),
    };
    let renamed = |section: &str, key: &str| {
        let mut entry = tenant[section][0].clone();
        entry["name"] = Value::String(name.into());
        if key == "context" {
            entry["context"]["cluster"] = Value::String(name.into());
            entry["context"]["user"] = Value::String(name.into());
        }
        entry
    };
    for (section, key) in [("clusters", "cluster"), ("users", "user"), ("contexts", "context")] {
        let list = merged[section].as_array().cloned().unwrap_or_default();
        let mut list: Vec<Value> = list.into_iter().filter(|e| e["name"] != name).collect();
        list.push(renamed(section, key));
        merged[section] = Value::Array(list);
    }
    std::fs::write(path, serde_norway::to_string(&merged)?)?;
    Ok(path.to_path_buf())
}
