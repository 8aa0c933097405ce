//! `nest up`: a whole cluster on this machine, in one process — the API server on embedded storage, the
//! controller-manager, the scheduler, one node (`nest-node-0`) that runs every pod from its image in a sandbox
//! (simulating only pods of RuntimeClass `nest-simulated`), and the service proxy, which serves every ClusterIP (from
//! `10.112.0.0/16`) on this machine. Ctrl-C stops it (and every process it started); running it again on the same
//! data directory resumes where it left off.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use tokio::sync::{oneshot, watch};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Holds the database, the PKI and admin.kubeconfig.
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "DIR", default_value = "nest-data")]
    data_dir: PathBuf,
    /// Address and port of the API server (port 0 picks a free one).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Do not create the first tenant cluster, `demo`, on a new data directory.
    #[arg(long)]
    no_demo: bool,
    /// A custom resource kind the syncer copies from tenants too, `GROUP/VERSION/KIND`; repeatable (see `nest
    /// syncer --help`).
    #[arg(long = "sync-resource", value_name = "GROUP/VERSION/KIND", value_parser = super::syncer::parse_gvk)]
    sync_resources: Vec<(String, String, String)>,
    /// How often the syncer compares every object of every tenant, both ways (see `nest syncer --help`).
    #[arg(long, value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    patrol_seconds: u64,
    /// The Pod Security level tenants' pods get in this management cluster unless their Cluster says otherwise
    /// (`nest cluster create --pod-security`).
    #[arg(long, value_name = "LEVEL", default_value = "restricted", value_parser = super::syncer::parse_level)]
    pod_security_level: nest_syncer::tenants::PodSecurityLevel,
    /// Where the node pulls images from: any registry not of this machine unless `--pull-from` says otherwise, with
    /// mirrors (`--registry-mirror docker.io=http://127.0.0.1:5000`, `--registry-config DIR` in containerd's
    /// `hosts.toml` convention); see `nest node --help`.
    #[command(flatten)]
    registries: super::node::Registries,
    /// The most an image may be, pulled and unpacked (see `nest node --help`).
    #[arg(long, value_name = "BYTES", default_value = "8Gi", value_parser = super::node::parse_bytes)]
    image_size_limit: u64,
    /// Each tenant's share of the node (see `nest node --help`).
    #[command(flatten)]
    tenant_share: super::node::TenantShare,
    /// Where the API server's audit log goes (see `nest apiserver --help`); with --audit-policy-file.
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "FILE")]
    audit_log_path: Option<PathBuf>,
    /// The API server's audit policy (an audit.k8s.io/v1 Policy).
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "FILE")]
    audit_policy_file: Option<PathBuf>,
    /// Stop when the machine lacks what the node needs (runc, the CNI plugins, iproute2) rather than install it.
    /// Without it, `nest up` run as root where apt-get works installs what is missing, and says so.
    #[arg(long)]
    no_install: bool,
}

/// The management cluster's Service range: ClusterIPs the proxy serves on this machine. Outside tenants' default
/// range (`10.96.0.0/12`), so that an address a tenant's Service holds in its own cluster never names one of the
/// management cluster's Services.
const SERVICE_CIDR: &str = "10.112.0.0/16";
/// The management store's page cache, in bytes.
const MANAGEMENT_PAGE_CACHE: usize = 16 << 20;

/// The Pod Security level of the `demo` tenant: `baseline`, so that the images people try first (`nginx`, which runs
/// as root in its user namespace) run, while host namespaces, privileges, extra capabilities and host paths stay
/// refused.
const DEMO_POD_SECURITY: &str = "baseline";

/// Makes RuntimeClass `nest-simulated` in the management cluster, trying again while the API server starts.
async fn ensure_simulated_class(client: kube::Client) {
    for _ in 0..120 {
        match nest_client::runtime_classes::ensure_simulated(&client).await {
            Ok(()) => return,
            Err(error) => tracing::debug!(%error, "making RuntimeClass nest-simulated"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    tracing::warn!("RuntimeClass nest-simulated could not be made: pods naming it wait for it");
}

/// Creates the `demo` cluster once the manager has installed the CRDs, and marks the data directory so that it is
/// created only once (a deleted demo stays deleted).
async fn create_demo(client: kube::Client, marker: PathBuf) {
    for _ in 0..120 {
        let shape = nest_capn::bundle::Shape { pod_security: Some(DEMO_POD_SECURITY.into()), ..Default::default() };
        let result = nest_capn::bundle::create(&client, "demo", "default", &shape).await;
        match result {
            Ok(()) => {
                let _ = std::fs::write(&marker, "the demo cluster was created\n");
                return;
            }
            // The CRDs are not served yet.
            Err(error) => tracing::debug!(%error, "creating the demo cluster"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    eprintln!("nest up: could not create the demo cluster");
}

/// A client of the API server at `address` as `user` (in `group`), its kubeconfig kept in `<data>/<dir>/<name>.kubeconfig`:
/// each component of `nest up` has a credential of its own, none of them in `system:masters`.
async fn component_client(
    data_dir: &std::path::Path,
    (dir, name): (&str, &str),
    (user, group): (&str, Option<&str>),
    address: &SocketAddr,
) -> anyhow::Result<kube::Client> {
    let pki = data_dir.join("pki");
    let (cert, key, ca) = nest_apiserver::certs::issue_client(&pki, user, group)?;
    nest_apiserver::certs::create_private_dir(&data_dir.join(dir))?;
    let path = data_dir.join(dir).join(format!("{name}.kubeconfig"));
    let host =
        if address.ip().is_unspecified() { format!("127.0.0.1:{}", address.port()) } else { address.to_string() };
    let server = format!("https://{host}");
    nest_apiserver::certs::write_private(&path, &nest_apiserver::certs::kubeconfig(&server, &ca, &cert, &key, user))?;
    Ok(nest_client::connect(&path).await?.client)
}

/// The users nest up's own Cluster API manager and syncer run as, and the ClusterRoles it gives them: the rules the
/// clusterctl package grants (`nest_capn::clusterctl`), so that they need here no more than they would there.
const MANAGER_USER: &str = "nest:manager";
const SYNCER_USER: &str = "nest:syncer";

/// Makes (or puts back) the ClusterRoles and bindings of [`MANAGER_USER`] and [`SYNCER_USER`], as the admin.
async fn component_roles(admin: &kube::Client) -> anyhow::Result<()> {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let roles: kube::Api<ClusterRole> = kube::Api::all(admin.clone());
    let bindings: kube::Api<ClusterRoleBinding> = kube::Api::all(admin.clone());
    let params = kube::api::PatchParams::apply("nest-up").force();
    let wanted = [
        (MANAGER_USER, serde_json::Value::Array(nest_capn::clusterctl::all_in_one_manager_rules())),
        (SYNCER_USER, nest_capn::clusterctl::syncer_rules()),
    ];
    for (user, rules) in wanted {
        let role = serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": user}, "rules": rules,
        });
        roles.patch(user, &params, &kube::api::Patch::Apply(&role)).await?;
        let binding = serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": user},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        });
        bindings.patch(user, &params, &kube::api::Patch::Apply(&binding)).await?;
    }
    Ok(())
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    // The registry configuration first: a mistake in it stops nest up before anything starts.
    let hosts = args.registries.hosts()?;
    super::prerequisites::ensure(!args.no_install)?;
    nest_apiserver::certs::create_private_dir(&args.data_dir)?;
    // The API server reads from its watch cache; the store's page cache serves writes, and what it holds stays held
    // (a tenant's flood of ConfigMaps, copied down and deleted, left 64 MiB of it: issue 33).
    let storage = nest_storage::embedded::Config { cache_size: MANAGEMENT_PAGE_CACHE, ..Default::default() };
    let store = nest_storage::embedded::EmbeddedStore::open(args.data_dir.join("store"), storage)
        .with_context(|| format!("opening the store in {}", args.data_dir.display()))?;
    let config = nest_apiserver::Config {
        data_dir: args.data_dir.clone(),
        listen: args.listen,
        token_file: None,
        extra_sans: Vec::new(),
        // The proxy makes it local to this machine, where pods reach it through the node's bridge.
        service_cidr: SERVICE_CIDR.parse().expect("a valid range"),
        ca_files: None,
        kubernetes_version: None,
        pod_security: Default::default(),
        admission_plugins: Default::default(),
        limits: Default::default(),
        watch_cache: Default::default(),
        authorization: nest_apiserver::authz::Mode::NodeRbac,
        service_accounts: Default::default(),
        audit_log: args.audit_log_path.clone(),
        audit_policy: args.audit_policy_file.clone(),
    };
    let (stop, stopped) = watch::channel(false);
    let until_stopped = |mut stopped: watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    let (ready, serving) = oneshot::channel();
    let apiserver = tokio::spawn(nest_apiserver::serve(
        config,
        Arc::new(store),
        move |serving: &nest_apiserver::Serving| {
            let _ = ready.send((serving.address, serving.kubeconfig.clone()));
        },
        until_stopped(stopped.clone()),
    ));
    let (address, kubeconfig) = match serving.await {
        Ok(serving) => serving,
        Err(_) => return apiserver.await?.context("the API server did not start"),
    };
    // The admin's credential makes the components' roles, and the demo tenant (as the person running nest up
    // would); every component then runs as itself.
    let nest_client::Connection { client, ca_pem } = nest_client::connect(&kubeconfig).await?;
    component_roles(&client).await?;
    let as_component = async |name: &str, user: &str| {
        component_client(&args.data_dir, ("components", name), (user, None), &address).await
    };
    let controllers_client = as_component("controller-manager", "system:kube-controller-manager").await?;
    let scheduler_client = as_component("scheduler", "system:kube-scheduler").await?;
    let proxy_client = as_component("proxy", "system:kube-proxy").await?;
    let manager_client = as_component("manager", MANAGER_USER).await?;
    let syncer_client = as_component("syncer", SYNCER_USER).await?;
    let options = nest_controllers::Options {
        identity: super::controller_manager::default_identity(),
        ca_pem,
        lease_duration: std::time::Duration::from_secs(15),
        on_leading: Box::new(|| {}),
        node_grace: std::time::Duration::from_secs(40),
        local_volumes: true,
        signing: Some(nest_controllers::certificates::Signing {
            ca: nest_apiserver::certs::cluster_ca(&args.data_dir.join("pki"))?,
            duration: nest_pki::LEAF_VALIDITY,
        }),
    };
    let controllers = tokio::spawn(nest_controllers::run(controllers_client, options, until_stopped(stopped.clone())));
    // Every component in a task of its own that starts again if it panics (a bug, tripped perhaps by what one tenant
    // wrote, costs that component a back-off, never the platform).
    use nest_client::supervise::restarting;
    tokio::spawn(restarting("scheduler", move || nest_scheduler::run(scheduler_client.clone())));
    tokio::spawn(restarting("proxy", move || {
        nest_node::proxy::run(proxy_client.clone(), vec![SERVICE_CIDR.to_string()])
    }));
    let mut node =
        nest_node::Options::numbered("nest-node-0".into(), 0, nest_node::Mode::Process, &args.data_dir.join("nodes"));
    // The node's bridge, before anything listens on its address: the syncer's kubelet endpoints, which tenants'
    // API servers (pods) reach there.
    let network = nest_node::network::Network::for_range(&node.name, &node.pod_cidr)?;
    // What every pod may reach on this host through the wall between tenants: the syncer's kubelet endpoints there.
    node.shared = network
        .host_address()
        .map(|gateway| nest_node::firewall::Shared {
            address: gateway,
            protocol: nest_node::firewall::Protocol::Tcp,
            ports: nest_syncer::KUBELET_PORTS,
        })
        .into_iter()
        .collect();
    network.prepare(&node.shared).await?;
    tokio::spawn(restarting("manager", move || {
        let client = manager_client.clone();
        async move {
            if let Err(error) =
                super::manager::manage(client, Default::default(), nest_capn::controllers::Set::ALL, true).await
            {
                tracing::error!(%error, "the manager stopped");
            }
        }
    }));
    let syncing = nest_syncer::Options {
        custom: args.sync_resources.clone(),
        pod_security: args.pod_security_level,
        patrol: std::time::Duration::from_secs(args.patrol_seconds),
        kubelet_address: network.host_address().map_or(std::net::Ipv4Addr::LOCALHOST, |a| a).into(),
        // What tenants' Endpoints may not name: the node's pod range but for their own pods, and the Services.
        pod_ranges: vec![node.pod_cidr.parse().map_err(anyhow::Error::msg)?],
        service_ranges: vec![SERVICE_CIDR.parse().map_err(anyhow::Error::msg)?],
        ..Default::default()
    };
    tokio::spawn(restarting("syncer", move || nest_syncer::run(syncer_client.clone(), syncing.clone())));
    // The RuntimeClass pods ask for simulation with (the node simulates nothing else).
    tokio::spawn(ensure_simulated_class(client.clone()));
    let marker = args.data_dir.join("demo-created");
    let demo = !args.no_demo && !marker.exists();
    if demo {
        tokio::spawn(create_demo(client.clone(), marker));
    }
    let (cert, key, client_ca) =
        nest_apiserver::certs::issue_kubelet_serving(&args.data_dir.join("pki"), &node.name, &[node.address.parse()?])?;
    node.process.pull_from = args.registries.pull_from.clone();
    node.process.hosts = hosts;
    node.process.image_size_limit = args.image_size_limit;
    node.process.tenant_share = args.tenant_share.share();
    // Any free port: the API server finds it in the Node's status.
    node.kubelet = Some((nest_node::kubelet::Tls { cert, key, client_ca }, 0));
    // The node holds a node's credential: the Node authorizer and NodeRestriction keep it to what its pods use and
    // to its own objects.
    let user = format!("system:node:{}", node.name);
    let node_client =
        component_client(&args.data_dir, ("nodes", &node.name), (&user, Some("system:nodes")), &address).await?;
    let node = tokio::spawn(nest_node::run(node_client, node, until_stopped(stopped.clone())));
    println!(
        "nest is up: API server at https://{address}; controllers, scheduler, node nest-node-0, the service proxy and the syncer running."
    );
    println!();
    println!("  export KUBECONFIG={}", kubeconfig.display());
    println!("  kubectl get namespaces");
    println!("  kubectl create namespace demo && kubectl get serviceaccounts -n demo");
    println!("  kubectl get nodes");
    println!();
    if demo {
        println!("A first tenant cluster, demo, is starting. To use it:");
        println!();
        println!("  kubectl wait nestedcontrolplane/demo --for=condition=Ready --timeout=60s");
        println!("  kubectl get secret demo-kubeconfig -o jsonpath='{{.data.value}}' | base64 -d > demo.kubeconfig");
        println!("  kubectl --kubeconfig demo.kubeconfig get namespaces");
        println!();
    }
    println!("Ctrl-C stops it; `nest up --data-dir {}` again resumes.", args.data_dir.display());

    tokio::select! {
        () = super::shutdown_signal() => {}
        result = apiserver => { result??; anyhow::bail!("the API server stopped") }
    }
    eprintln!("nest up: stopping");
    let _ = stop.send(true);
    controllers.await??;
    // The node stops the processes it started before it returns.
    node.await??;
    eprintln!("nest up: stopped");
    Ok(())
}
