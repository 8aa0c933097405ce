//! `nest apiserver`: the Kubernetes-compatible API server over the chosen storage backend.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use nest_storage::Store;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Holds the PKI, admin.kubeconfig and, with embedded storage, the database.
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "DIR")]
    data_dir: PathBuf,
    /// Address and port to serve HTTPS on (port 0 picks a free one).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// `embedded` (a database in DATA_DIR/store) or `etcd=URL[,URL…]`.
    #[arg(long, value_name = "BACKEND", default_value = "embedded")]
    storage: String,
    /// Keep every key under this prefix, so several API servers can share one store (like --etcd-prefix).
    #[arg(long, value_name = "PREFIX", default_value = "")]
    storage_prefix: String,
    /// The range ClusterIPs are allocated from.
    #[arg(long, value_name = "CIDR", default_value = "10.96.0.0/12")]
    service_cidr: nest_registry::ipalloc::ServiceCidr,
    /// Static bearer tokens: lines of `token,user,uid,"group1,group2"`.
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "FILE")]
    token_auth_file: Option<PathBuf>,
    /// Another DNS name or IP address for the serving certificate (such as a Service's); repeatable.
    #[arg(long = "tls-san", value_name = "NAME")]
    tls_sans: Vec<String>,
    /// The cluster CA's certificate (PEM), instead of one made in DATA_DIR/pki; with --ca-key-file.
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "FILE", requires = "ca_key_file")]
    ca_cert_file: Option<PathBuf>,
    /// The cluster CA's private key (PEM).
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "FILE", requires = "ca_cert_file")]
    ca_key_file: Option<PathBuf>,
    /// The Kubernetes version to report, a 1.33 patch version such as v1.33.2 (nest serves the 1.33 API).
    #[arg(long, value_name = "VERSION", value_parser = kubernetes_version)]
    kubernetes_version: Option<String>,
    /// Pod Security's policy for namespaces without a `pod-security.kubernetes.io/enforce` label: `LEVEL[:VERSION]`,
    /// such as `baseline` or `restricted:v1.33`.
    #[arg(long, value_name = "POLICY", default_value = "privileged", value_parser = pod_security_policy)]
    pod_security_enforce: nest_registry::admission::pod_security::Policy,
    /// The same for the `warn` mode (Warning headers).
    #[arg(long, value_name = "POLICY", default_value = "privileged", value_parser = pod_security_policy)]
    pod_security_warn: nest_registry::admission::pod_security::Policy,
    /// The same for the `audit` mode.
    #[arg(long, value_name = "POLICY", default_value = "privileged", value_parser = pod_security_policy)]
    pod_security_audit: nest_registry::admission::pod_security::Policy,
    /// Users whose requests Pod Security never checks; repeatable.
    #[arg(long = "pod-security-exempt-user", value_name = "USER")]
    pod_security_exempt_users: Vec<String>,
    /// Namespaces whose pods Pod Security never checks; repeatable.
    #[arg(long = "pod-security-exempt-namespace", value_name = "NAMESPACE")]
    pod_security_exempt_namespaces: Vec<String>,
    /// Runtime classes whose pods Pod Security never checks; repeatable.
    #[arg(long = "pod-security-exempt-runtime-class", value_name = "CLASS")]
    pod_security_exempt_runtime_classes: Vec<String>,
    /// Where the audit log goes: JSON lines of audit.k8s.io/v1 Events, written as --audit-policy-file says.
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "FILE")]
    audit_log_path: Option<PathBuf>,
    /// The audit policy (an audit.k8s.io/v1 Policy, YAML): which requests are recorded, and how much of them.
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "FILE")]
    audit_policy_file: Option<PathBuf>,
    /// Admission plugins to run besides the default ones (comma-separated; nest runs every plugin it has by
    /// default: NamespaceLifecycle, LimitRanger, ServiceAccount, NodeRestriction, PodSecurity, Priority,
    /// DefaultStorageClass, ResourceQuota).
    #[arg(long, value_name = "PLUGINS", value_delimiter = ',')]
    enable_admission_plugins: Vec<String>,
    /// Admission plugins not to run (comma-separated), such as ServiceAccount on a server with no controller-manager
    /// to make each namespace's `default` ServiceAccount.
    #[arg(long, value_name = "PLUGINS", value_delimiter = ',')]
    disable_admission_plugins: Vec<String>,
    /// How requests are authorized: `Node,RBAC` (nodes' credentials reach what their pods use, then the Roles and
    /// bindings stored here decide; `system:masters` may do everything), `RBAC`, or `AlwaysAllow`.
    #[arg(long, value_name = "MODES", default_value = "Node,RBAC")]
    authorization_mode: nest_apiserver::authz::Mode,
    /// The issuer ServiceAccount tokens name (`iss`) and must name to be accepted.
    #[arg(long, value_name = "URL", default_value = nest_apiserver::tokens::DEFAULT_ISSUER)]
    service_account_issuer: String,
    /// The private key (PEM, EC P-256 or RSA, PKCS#8) ServiceAccount tokens are signed with; without it, one made in
    /// DATA_DIR/pki/sa.key.
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "FILE")]
    service_account_signing_key_file: Option<PathBuf>,
    /// A public key or certificate (PEM) ServiceAccount tokens may be signed with; repeatable. Without one, the
    /// signing key's own.
    #[arg(value_parser = crate::cmd::absolute, long = "service-account-key-file", value_name = "FILE")]
    service_account_key_files: Vec<PathBuf>,
    /// The audiences a token must be for to authenticate here (comma-separated); the issuer when unset.
    #[arg(long, value_name = "AUDIENCES", value_delimiter = ',')]
    api_audiences: Vec<String>,
    /// Connections open at once; further ones are closed as soon as they are accepted.
    #[arg(long, value_name = "N", default_value_t = nest_apiserver::limits::Limits::default().max_connections)]
    max_connections: usize,
    /// How long a client has to complete the TLS handshake.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = crate::bench::parse_duration)]
    tls_handshake_timeout: std::time::Duration,
    /// A connection with no request open and nothing sent either way for this long is closed.
    #[arg(long, value_name = "DURATION", default_value = "120s", value_parser = crate::bench::parse_duration)]
    idle_timeout: std::time::Duration,
    /// Requests one user may have in flight (watches and log streams aside); more get 429 Too Many Requests.
    #[arg(long, value_name = "N", default_value_t = nest_apiserver::limits::Limits::default().max_inflight_per_user)]
    max_requests_inflight_per_user: usize,
    /// The largest request body read, in bytes (1024 to 67108864; by default kube-apiserver's 3 MiB, which it gives
    /// no flag); a larger one gets 413 Request Entity Too Large.
    #[arg(long, value_name = "BYTES", default_value_t = nest_apiserver::limits::DEFAULT_MAX_REQUEST_BYTES,
        value_parser = max_request_bytes())]
    max_request_bytes: usize,
    /// Changes the watch cache keeps per resource (1 to 100000), as kube-apiserver's flag of that name: a watch
    /// resumes from any revision they cover, and from an older one gets 410 Gone (`too old resource version`) and
    /// lists again.
    #[arg(long, value_name = "N", default_value_t = nest_registry::cache::DEFAULT_HISTORY,
        value_parser = default_watch_cache_size())]
    default_watch_cache_size: usize,
    /// How often etcd's history is compacted (to the revision of one interval before), as kube-apiserver's
    /// `--etcd-compaction-interval`; API servers sharing an etcd take turns. `0s` never compacts.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = crate::bench::parse_duration)]
    etcd_compaction_interval: std::time::Duration,
    /// The CA that signed etcd's serving certificate (for `--storage etcd=https://…`).
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "FILE", requires_all = ["etcd_certfile", "etcd_keyfile"])]
    etcd_cafile: Option<PathBuf>,
    /// The client certificate presented to etcd.
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "FILE", requires = "etcd_cafile")]
    etcd_certfile: Option<PathBuf>,
    /// The client certificate's key.
    #[arg(value_parser = crate::cmd::absolute, long, value_name = "FILE", requires = "etcd_cafile")]
    etcd_keyfile: Option<PathBuf>,
}

/// `--max-request-bytes`: a number of bytes in [`nest_apiserver::limits::MAX_REQUEST_BYTES_RANGE`], refused by clap
/// outside it.
fn max_request_bytes() -> clap::builder::RangedU64ValueParser<usize> {
    let range = nest_apiserver::limits::MAX_REQUEST_BYTES_RANGE;
    clap::builder::RangedU64ValueParser::new().range(*range.start() as u64..=*range.end() as u64)
}

/// `--default-watch-cache-size`: 1 to [`nest_registry::cache::MAX_HISTORY`], refused by clap outside.
fn default_watch_cache_size() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::new().range(1..=nest_registry::cache::MAX_HISTORY as u64)
}

fn pod_security_policy(text: &str) -> Result<nest_registry::admission::pod_security::Policy, String> {
    nest_registry::admission::pod_security::Policy::parse(text)
}

fn kubernetes_version(text: &str) -> Result<String, String> {
    let patch = text.strip_prefix("v1.33.").ok_or("nest serves the Kubernetes 1.33 API: give v1.33.<patch>")?;
    let digits = patch.split(['-', '+']).next().unwrap_or_default();
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return Err(format!("{text:?} is not a version such as v1.33.2"));
    }
    Ok(text.to_string())
}

async fn open_store(args: &Args) -> anyhow::Result<Arc<dyn Store>> {
    let store = open_backend(args).await?;
    if args.storage_prefix.is_empty() {
        return Ok(store);
    }
    Ok(Arc::new(nest_storage::prefixed::Prefixed::new(store, args.storage_prefix.clone().into_bytes())))
}

async fn open_backend(args: &Args) -> anyhow::Result<Arc<dyn Store>> {
    if args.storage == "embedded" {
        let dir = args.data_dir.join("store");
        let store = nest_storage::embedded::EmbeddedStore::open(&dir, Default::default())?;
        return Ok(Arc::new(store));
    }
    if let Some(urls) = args.storage.strip_prefix("etcd=") {
        let urls: Vec<String> = urls.split(',').map(str::to_string).collect();
        return open_etcd(urls, args).await;
    }
    anyhow::bail!("--storage must be `embedded` or `etcd=URL[,URL…]`, not {:?}", args.storage)
}

#[cfg(feature = "etcd")]
async fn open_etcd(urls: Vec<String>, args: &Args) -> anyhow::Result<Arc<dyn Store>> {
    use anyhow::Context as _;
    let read = |path: &PathBuf| std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()));
    let tls = match (&args.etcd_cafile, &args.etcd_certfile, &args.etcd_keyfile) {
        (Some(ca), Some(cert), Some(key)) => {
            Some(nest_storage::etcd::Tls { ca: read(ca)?, cert: read(cert)?, key: read(key)? })
        }
        _ => None,
    };
    let config = nest_storage::etcd::Config { tls, ..Default::default() };
    let store = nest_storage::etcd::EtcdStore::connect(&urls, config).await?;
    if !args.etcd_compaction_interval.is_zero() {
        store.compact_every(args.etcd_compaction_interval);
    }
    Ok(Arc::new(store))
}

#[cfg(not(feature = "etcd"))]
async fn open_etcd(_: Vec<String>, _: &Args) -> anyhow::Result<Arc<dyn Store>> {
    anyhow::bail!("this nest was built without the `etcd` feature; rebuild with `--features etcd`")
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    nest_apiserver::certs::create_private_dir(&args.data_dir)?;
    let store = open_store(&args).await?;
    let config = nest_apiserver::Config {
        data_dir: args.data_dir.clone(),
        listen: args.listen,
        token_file: args.token_auth_file.clone(),
        extra_sans: args.tls_sans.clone(),
        service_cidr: args.service_cidr,
        ca_files: args.ca_cert_file.clone().zip(args.ca_key_file.clone()),
        kubernetes_version: args.kubernetes_version.clone(),
        pod_security: nest_registry::admission::pod_security::Config {
            enforce: args.pod_security_enforce,
            audit: args.pod_security_audit,
            warn: args.pod_security_warn,
            exempt_users: args.pod_security_exempt_users.clone(),
            exempt_namespaces: args.pod_security_exempt_namespaces.clone(),
            exempt_runtime_classes: args.pod_security_exempt_runtime_classes.clone(),
        },
        admission_plugins: nest_registry::admission::Plugins::new(
            &args.enable_admission_plugins,
            &args.disable_admission_plugins,
        )
        .map_err(anyhow::Error::msg)?,
        authorization: args.authorization_mode,
        audit_log: args.audit_log_path.clone(),
        audit_policy: args.audit_policy_file.clone(),
        service_accounts: nest_apiserver::tokens::Config {
            issuer: args.service_account_issuer.clone(),
            audiences: args.api_audiences.clone(),
            signing_key_file: args.service_account_signing_key_file.clone(),
            key_files: args.service_account_key_files.clone(),
        },
        limits: nest_apiserver::limits::Limits {
            max_connections: args.max_connections.max(1),
            handshake_timeout: args.tls_handshake_timeout,
            idle_timeout: args.idle_timeout,
            max_inflight_per_user: args.max_requests_inflight_per_user.max(1),
            max_request_bytes: args.max_request_bytes,
            ..Default::default()
        },
        watch_cache: nest_registry::cache::Config { history: args.default_watch_cache_size },
    };
    let ready = |serving: &nest_apiserver::Serving| {
        eprintln!(
            "nest apiserver: serving https://{} ({} storage), kubeconfig {}",
            serving.address,
            store_name(&args.storage),
            serving.kubeconfig.display()
        );
    };
    nest_apiserver::serve(config, store, ready, super::shutdown_signal()).await?;
    eprintln!("nest apiserver: stopped");
    Ok(())
}

fn store_name(storage: &str) -> &str {
    if storage == "embedded" { "embedded" } else { "etcd" }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    /// `nest apiserver`'s flags alone.
    #[derive(Parser, Debug)]
    struct Command {
        #[command(flatten)]
        args: super::Args,
    }

    fn parse(flags: &[&str]) -> Result<super::Args, clap::Error> {
        let argv = ["apiserver", "--data-dir", "/var/lib/nest"].iter().chain(flags);
        Command::try_parse_from(argv).map(|c| c.args)
    }

    #[test]
    fn the_body_limit_and_the_watch_cache_are_bounded_where_they_enter() {
        let defaults = parse(&[]).unwrap();
        assert_eq!((defaults.max_request_bytes, defaults.default_watch_cache_size), (3 * 1024 * 1024, 1024));
        let set = parse(&["--max-request-bytes=1024", "--default-watch-cache-size=100000"]).unwrap();
        assert_eq!((set.max_request_bytes, set.default_watch_cache_size), (1024, 100_000));
        assert_eq!(parse(&["--max-request-bytes=67108864"]).unwrap().max_request_bytes, 64 * 1024 * 1024);
        for refused in [
            "--max-request-bytes=1023",
            "--max-request-bytes=67108865",
            "--max-request-bytes=0",
            "--max-request-bytes=-1",
            "--max-request-bytes=3Mi",
            "--default-watch-cache-size=0",
            "--default-watch-cache-size=100001",
            "--default-watch-cache-size=18446744073709551616",
        ] {
            let error = parse(&[refused]).unwrap_err();
            assert_eq!(error.kind(), clap::error::ErrorKind::ValueValidation, "{refused}: {error}");
        }
        let error = parse(&["--max-request-bytes=70"]).unwrap_err().to_string();
        assert!(error.contains("70 is not in 1024..=67108864"), "{error}");
    }
}
