//! Where a node pulls a registry's images from: registry mirrors and per-host settings in containerd's convention
//! (`config_path`, containerd's `docs/hosts.md`), so that an admin who configured containerd configures nest the
//! same way.
//!
//! A directory (`--registry-config DIR`) holds one folder per registry host, named as image references name it
//! (`docker.io`, `ghcr.io`, `127.0.0.1:5000`; `_default` for every host without a folder of its own), each with a
//! `hosts.toml`:
//!
//! ```toml
//! server = "https://registry-1.docker.io"     # the upstream, tried last (default: the registry itself)
//!
//! [host."http://127.0.0.1:5000"]              # mirrors, tried first, in the order written
//!   capabilities = ["pull", "resolve"]
//!
//! [host."https://mirror.example.com"]
//!   ca = "/etc/nest/mirror-ca.pem"            # trusted for this host only (a path, or a list of paths)
//!   skip_verify = false
//! ```
//!
//! As containerd does, the hosts are tried in order and the `server` (or, without one, the registry itself) last; a
//! host is asked for a tag only with the `resolve` capability and for content with `pull` (both when it names none);
//! a `server` whose `capabilities` are empty is never asked, which keeps the node on its mirrors alone. A host is a
//! URL (`https://` when it has no scheme) whose path is empty or `/v2`. `--registry-mirror HOST=ENDPOINT` is the
//! shorthand for a mirror with `pull` and `resolve` (`docker.io=http://127.0.0.1:5000`); such mirrors come before
//! the directory's hosts for the same registry.
//!
//! Every host here is the admin's choice, so it may be on this machine's loopback; the upstream a reference names is
//! still judged as [`registries`](crate::registries) says, and an image reference that names a mirror's address
//! directly is refused like any other of this machine.
//!
//! ```
//! let hosts = nest_node::hosts::Hosts::default().with_mirrors(&["docker.io=http://127.0.0.1:5000".into()]).unwrap();
//! let route = hosts.route("docker.io");
//! assert_eq!(route.mirrors[0].host, "127.0.0.1:5000");
//! assert!(route.mirrors[0].plain_http);
//! assert!(matches!(route.upstream, nest_node::hosts::Upstream::Registry));
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Why a registry configuration cannot be used: what is wrong, and where.
#[derive(Debug, thiserror::Error)]
pub enum HostsError {
    /// A file or folder could not be read.
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A `hosts.toml` is not TOML, or not the shape containerd reads.
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
    /// A `--registry-mirror` value is not `HOST=ENDPOINT`.
    #[error("--registry-mirror {text:?}: {message}")]
    Flag { text: String, message: String },
}

/// One place the node may fetch a registry's images from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `HOST[:PORT]`, as the HTTP client connects to it.
    pub host: String,
    /// Spoken to over plain HTTP (`http://`).
    pub plain_http: bool,
    /// May be asked what a tag names (`resolve`).
    pub resolve: bool,
    /// May be asked for content by digest (`pull`).
    pub pull: bool,
    /// CA certificates (PEM files) trusted for this host, besides the system's.
    pub ca: Vec<PathBuf>,
    /// Whether the host's certificate is not checked at all.
    pub skip_verify: bool,
}

impl Endpoint {
    /// Whether this host may be asked for an image named by a tag (`by_digest` false) or by a digest.
    pub fn serves(&self, by_digest: bool) -> bool {
        self.pull && (by_digest || self.resolve)
    }
}

/// What comes after a registry's mirrors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Upstream {
    /// The registry the reference names, judged by [`registries`](crate::registries).
    Registry,
    /// The `server` the admin named in its stead.
    Server(Endpoint),
    /// Nothing: the `server`'s capabilities are empty.
    None,
}

/// Where a registry's images are fetched from, in order: its mirrors, then its upstream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub mirrors: Vec<Endpoint>,
    pub upstream: Upstream,
}

/// One registry host's configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Namespace {
    mirrors: Vec<Endpoint>,
    /// The `server`, when named; with the capabilities it has.
    server: Option<Endpoint>,
}

/// The node's registry configuration: per registry host, its mirrors and upstream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hosts {
    namespaces: BTreeMap<String, Namespace>,
}

/// The `_default` folder: for every registry without its own.
const DEFAULT_NAMESPACE: &str = "_default";

/// A `hosts.toml`, the fields containerd reads (`server` and the root host's settings, then `[host."…"]`).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HostsFile {
    server: Option<String>,
    #[serde(flatten)]
    root: HostSettings,
    /// In the order written (the `preserve_order` map).
    host: Option<toml::Table>,
}

/// One host's settings.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HostSettings {
    capabilities: Option<Vec<String>>,
    ca: Option<OneOrMany>,
    skip_verify: Option<bool>,
    override_path: Option<bool>,
    /// Read so that a file with them is refused by name rather than as an unknown field.
    client: Option<toml::Value>,
    header: Option<toml::Value>,
}

#[derive(Debug, serde::Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl Hosts {
    /// The configuration in `dir`: each `<dir>/<host>/hosts.toml`. A folder without a `hosts.toml` is skipped, as
    /// containerd skips it; a file it cannot read as containerd would is an error naming the file.
    pub fn load(dir: &Path) -> Result<Hosts, HostsError> {
        fn read(path: &Path) -> impl FnOnce(std::io::Error) -> HostsError + '_ {
            move |source| HostsError::Read { path: path.to_path_buf(), source }
        }
        let mut hosts = Hosts::default();
        let listed = std::fs::read_dir(dir).map_err(read(dir))?;
        let mut entries: Vec<_> = listed.collect::<Result<_, _>>().map_err(read(dir))?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let file = entry.path().join("hosts.toml");
            if !file.is_file() {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(&file).map_err(read(&file))?;
            let namespace = parse(&text, &file)?;
            hosts.namespaces.insert(name, namespace);
        }
        Ok(hosts)
    }

    /// These, with `--registry-mirror` values (`HOST=ENDPOINT`) put before the mirrors already known for each host.
    pub fn with_mirrors(mut self, flags: &[String]) -> Result<Hosts, HostsError> {
        for text in flags.iter().rev() {
            let (host, endpoint) = parse_mirror(text)?;
            self.namespaces.entry(host).or_default().mirrors.insert(0, endpoint);
        }
        Ok(self)
    }

    /// Where the images of `registry` (as a reference names it: `docker.io`, `127.0.0.1:5000`) are fetched from.
    pub fn route(&self, registry: &str) -> Route {
        let namespace = self.namespaces.get(registry).or_else(|| self.namespaces.get(DEFAULT_NAMESPACE));
        let Some(namespace) = namespace else { return Route { mirrors: Vec::new(), upstream: Upstream::Registry } };
        let upstream = match &namespace.server {
            None => Upstream::Registry,
            Some(server) if !server.pull && !server.resolve => Upstream::None,
            Some(server) => Upstream::Server(server.clone()),
        };
        Route { mirrors: namespace.mirrors.clone(), upstream }
    }
}

/// One `hosts.toml` (`file` names it in errors; relative `ca` paths are beneath its folder).
fn parse(text: &str, file: &Path) -> Result<Namespace, HostsError> {
    let invalid = |message: String| HostsError::Invalid { path: file.to_path_buf(), message };
    let parsed: HostsFile = toml::from_str(text).map_err(|e| invalid(e.to_string().trim_end().to_string()))?;
    let base = file.parent().unwrap_or(Path::new("."));
    let mut namespace = Namespace::default();
    for (url, settings) in parsed.host.into_iter().flatten() {
        let settings: HostSettings =
            settings.try_into().map_err(|e: toml::de::Error| invalid(format!("host {url:?}: {}", e.message())))?;
        namespace.mirrors.push(endpoint(&url, settings, base).map_err(|m| invalid(format!("host {url:?}: {m}")))?);
    }
    if let Some(server) = &parsed.server {
        namespace.server = Some(endpoint(server, parsed.root, base).map_err(|m| invalid(format!("server: {m}")))?);
    }
    Ok(namespace)
}

/// A host's URL and settings as an [`Endpoint`], or what is wrong with them.
fn endpoint(text: &str, settings: HostSettings, base: &Path) -> Result<Endpoint, String> {
    let with_scheme = if text.contains("://") { text.to_string() } else { format!("https://{text}") };
    let url = url::Url::parse(&with_scheme).map_err(|e| format!("not a URL: {e}"))?;
    let plain_http = match url.scheme() {
        "http" => true,
        "https" => false,
        other => return Err(format!("scheme {other:?}: expected http or https")),
    };
    let Some(host) = url.host_str() else { return Err("no host".into()) };
    if !url.username().is_empty() || url.password().is_some() || url.query().is_some() || url.fragment().is_some() {
        return Err("a host is scheme, host, port and path only".into());
    }
    if !matches!(url.path(), "" | "/" | "/v2" | "/v2/") {
        return Err(format!("path {:?}: this node speaks to a registry at /v2 only", url.path()));
    }
    if settings.override_path == Some(true) {
        return Err("override_path is not supported: this node speaks to a registry at /v2 only".into());
    }
    if settings.client.is_some() {
        return Err("client certificates (client) are not supported".into());
    }
    if settings.header.is_some() {
        return Err("headers (header) are not supported".into());
    }
    let host = match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    };
    let (mut pull, mut resolve) = (true, true);
    if let Some(capabilities) = &settings.capabilities {
        (pull, resolve) = (false, false);
        for capability in capabilities {
            match capability.as_str() {
                "pull" => pull = true,
                "resolve" => resolve = true,
                // The node never pushes; containerd's third capability is accepted and unused.
                "push" => {}
                other => return Err(format!("capability {other:?}: expected pull, resolve or push")),
            }
        }
    }
    let ca = match settings.ca {
        None => Vec::new(),
        Some(OneOrMany::One(path)) => vec![path],
        Some(OneOrMany::Many(paths)) => paths,
    };
    let ca = ca.into_iter().map(|path| base.join(path)).collect();
    Ok(Endpoint { host, plain_http, resolve, pull, ca, skip_verify: settings.skip_verify.unwrap_or(false) })
}

/// One `--registry-mirror` value: `HOST=ENDPOINT`.
fn parse_mirror(text: &str) -> Result<(String, Endpoint), HostsError> {
    let bad = |message: String| HostsError::Flag { text: text.to_string(), message };
    let (host, url) = text.split_once('=').ok_or_else(|| bad("expected HOST=ENDPOINT".into()))?;
    if crate::registries::Registry::parse(host).is_none() {
        return Err(bad(format!("{host:?} is not a registry host")));
    }
    let settings = HostSettings { capabilities: Some(vec!["pull".into(), "resolve".into()]), ..Default::default() };
    let endpoint = endpoint(url, settings, Path::new(".")).map_err(bad)?;
    Ok((host.to_ascii_lowercase(), endpoint))
}

/// A `--registry-mirror` value, checked as [`Hosts::with_mirrors`] reads it (for the command line's parser).
pub fn check_mirror(text: &str) -> Result<String, String> {
    parse_mirror(text).map(|_| text.to_string()).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<Namespace, String> {
        parse(text, Path::new("/etc/nest/certs.d/docker.io/hosts.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn hosts_are_tried_in_the_order_written_then_the_server() {
        let namespace = parsed(
            r#"
            server = "https://registry-1.docker.io"

            [host."http://127.0.0.1:5000"]
              capabilities = ["pull", "resolve"]

            [host."mirror.example.com:8443"]
              capabilities = ["pull"]
              ca = "mirror-ca.pem"

            [host."https://a.example.com/v2"]
              skip_verify = true
              ca = ["/etc/one.pem", "two.pem"]
            "#,
        )
        .unwrap();
        let hosts: Vec<_> = namespace.mirrors.iter().map(|m| m.host.as_str()).collect();
        assert_eq!(hosts, ["127.0.0.1:5000", "mirror.example.com:8443", "a.example.com"]);
        let [local, pull_only, verified_not] = &namespace.mirrors[..] else { panic!() };
        assert!(local.plain_http && local.serves(false));
        assert!(!pull_only.plain_http && !pull_only.serves(false) && pull_only.serves(true), "digests only");
        assert_eq!(pull_only.ca, [PathBuf::from("/etc/nest/certs.d/docker.io/mirror-ca.pem")]);
        assert!(verified_not.skip_verify && verified_not.serves(false));
        assert_eq!(verified_not.ca.len(), 2);
        let server = namespace.server.unwrap();
        assert_eq!((server.host.as_str(), server.pull, server.resolve), ("registry-1.docker.io", true, true));
    }

    #[test]
    fn the_upstream_comes_last_unless_the_file_says_otherwise() {
        let mut hosts = Hosts::default();
        hosts.namespaces.insert("docker.io".into(), parsed("[host.\"http://127.0.0.1:5000\"]\n").unwrap());
        assert_eq!(hosts.route("docker.io").upstream, Upstream::Registry);
        assert_eq!(hosts.route("ghcr.io"), Route { mirrors: Vec::new(), upstream: Upstream::Registry });
        // A server with no capabilities: the mirrors alone.
        let only =
            parsed("server = \"https://registry-1.docker.io\"\ncapabilities = []\n[host.\"http://127.0.0.1:5000\"]\n");
        hosts.namespaces.insert("docker.io".into(), only.unwrap());
        assert_eq!(hosts.route("docker.io").upstream, Upstream::None);
        // `_default` for every registry without a folder.
        hosts.namespaces.insert(DEFAULT_NAMESPACE.into(), parsed("[host.\"http://10.0.0.9:5000\"]\n").unwrap());
        assert_eq!(hosts.route("ghcr.io").mirrors[0].host, "10.0.0.9:5000");
    }

    #[test]
    fn flags_come_before_the_files_mirrors_in_their_own_order() {
        let mut hosts = Hosts::default();
        hosts.namespaces.insert("docker.io".into(), parsed("[host.\"https://file.example.com\"]\n").unwrap());
        let hosts = hosts
            .with_mirrors(&["docker.io=http://127.0.0.1:5000".into(), "docker.io=https://second.example.com".into()])
            .unwrap();
        let order: Vec<_> = hosts.route("docker.io").mirrors.into_iter().map(|m| m.host).collect();
        assert_eq!(order, ["127.0.0.1:5000", "second.example.com", "file.example.com"]);
    }

    #[test]
    fn bad_configurations_are_refused_saying_what_and_where() {
        let table = [
            ("server = ", "/etc/nest/certs.d/docker.io/hosts.toml: TOML parse error"),
            ("sever = \"https://x\"\n", "unknown field `sever`"),
            ("[host.\"ftp://x\"]\n", "host \"ftp://x\": scheme \"ftp\": expected http or https"),
            ("[host.\"https://x/mirror\"]\n", "path \"/mirror\": this node speaks to a registry at /v2 only"),
            ("[host.\"https://x\"]\noverride_path = true\n", "override_path is not supported"),
            ("[host.\"https://x\"]\ncapabilities = [\"fetch\"]\n", "capability \"fetch\""),
            ("[host.\"https://x\"]\nclient = \"c.pem\"\n", "client certificates (client) are not supported"),
            ("[host.\"https://x\"]\nskip_verify = \"yes\"\n", "host \"https://x\": invalid type"),
            ("server = \"https://user:pw@x\"\n", "server: a host is scheme, host, port and path only"),
        ];
        for (text, wanted) in table {
            let error = parsed(text).unwrap_err();
            assert!(error.contains(wanted), "{text:?}: {error}");
        }
        for bad in ["docker.io", "=http://x", "docker.io=ftp://x", "a/b=http://x"] {
            assert!(check_mirror(bad).is_err(), "{bad}");
        }
        assert!(check_mirror("docker.io=http://127.0.0.1:5000").is_ok());
    }

    #[test]
    fn a_directory_is_read_folder_by_folder() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("docker.io")).unwrap();
        std::fs::write(dir.path().join("docker.io/hosts.toml"), "[host.\"http://127.0.0.1:5000\"]\n").unwrap();
        std::fs::create_dir_all(dir.path().join("empty")).unwrap();
        let hosts = Hosts::load(dir.path()).unwrap();
        assert_eq!(hosts.route("docker.io").mirrors.len(), 1);
        std::fs::write(dir.path().join("empty/hosts.toml"), "[host]\nx = 1\n").unwrap();
        let error = Hosts::load(dir.path()).unwrap_err().to_string();
        assert!(error.contains("empty/hosts.toml") && error.contains("host \"x\""), "{error}");
        assert!(Hosts::load(&dir.path().join("missing")).unwrap_err().to_string().starts_with("reading "));
    }
}
