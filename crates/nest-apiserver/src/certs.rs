//! The API server's PKI: a cluster CA, a serving certificate with the IP and DNS names it listens on, the `admin`
//! client certificate (CN `admin`, O `system:masters`) written into `admin.kubeconfig`, and the client certificate it
//! presents to kubelets.
//!
//! Everything is created on first start under `DIR/pki/` and reused afterwards, so kubeconfigs stay valid across
//! restarts. A serving certificate lacking a name the server now listens on is issued again from the same CA. The CA
//! may instead be given (`--ca-cert-file`, `--ca-key-file`), as a tenant's control plane gives its API server the
//! cluster's CA; certificates issued by another CA are then issued again.

use std::net::IpAddr;
use std::path::Path;

use anyhow::Context;
use nest_pki::{Ca, Leaf, Pair, Usage};

/// PEM-encoded material the server needs.
#[derive(Clone, Debug)]
pub struct Pki {
    pub ca_cert: String,
    pub serving_cert: String,
    pub serving_key: String,
    pub admin_cert: String,
    pub admin_key: String,
    /// What the server presents to nodes' kubelet APIs (common name `kube-apiserver-kubelet-client`).
    pub kubelet_client_cert: String,
    pub kubelet_client_key: String,
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// Writes a file only its owner may read (a key, a kubeconfig): created 0600, so it is never readable by anyone else,
/// not even between its creation and a later chmod; one that existed with a looser mode is narrowed first.
pub fn write_private(path: &Path, contents: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let context = || format!("writing {}", path.display());
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .with_context(context)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600)).with_context(context)?;
    file.set_len(0).with_context(context)?;
    file.write_all(contents.as_bytes()).with_context(context)
}

/// Creates `dir` and its missing parents, each only its owner may enter (0700); `dir` itself is narrowed to 0700 if
/// it existed (a data directory made beforehand by `mkdir` or `mktemp`), its parents are left as they are.
pub fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    let context = || format!("creating {}", dir.display());
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).with_context(context)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).with_context(context)
}

/// The names the serving certificate must carry.
pub fn serving_names(ips: &[IpAddr], extra_dns: &[String]) -> Vec<String> {
    let mut names: Vec<String> = vec![
        "localhost".into(),
        "kubernetes".into(),
        "kubernetes.default".into(),
        "kubernetes.default.svc".into(),
        "kubernetes.default.svc.cluster.local".into(),
    ];
    names.extend(extra_dns.iter().cloned());
    for ip in ips {
        names.push(ip.to_string());
    }
    if !ips.iter().any(|ip| ip.is_loopback()) {
        names.push("127.0.0.1".into());
    }
    names.sort();
    names.dedup();
    names
}

/// A pair of files under `dir`: `<name>.crt`, `<name>.key`.
fn load(dir: &Path, name: &str) -> anyhow::Result<Option<Pair>> {
    let (cert, key) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
    if !cert.exists() || !key.exists() {
        return Ok(None);
    }
    Ok(Some(Pair { cert: read(&cert)?, key: read(&key)? }))
}

fn store(dir: &Path, name: &str, pair: &Pair) -> anyhow::Result<()> {
    write_private(&dir.join(format!("{name}.key")), &pair.key)?;
    std::fs::write(dir.join(format!("{name}.crt")), &pair.cert)?;
    Ok(())
}

impl Pki {
    /// Loads the PKI under `data_dir/pki`, creating what is missing, with a serving certificate for `names`. With
    /// `given_ca` (certificate and key files), that CA is the cluster's.
    pub fn load_or_create(data_dir: &Path, names: &[String], given_ca: Option<(&Path, &Path)>) -> anyhow::Result<Pki> {
        let dir = data_dir.join("pki");
        create_private_dir(&dir)?;
        let stored = load(&dir, "ca")?;
        let ca = match given_ca {
            Some((cert, key)) => {
                let given = Pair { cert: read(cert)?, key: read(key)? };
                if stored.as_ref() != Some(&given) {
                    // Everything issued by another CA goes.
                    for name in ["apiserver", "admin", "apiserver-kubelet-client"] {
                        let _ = std::fs::remove_file(dir.join(format!("{name}.crt")));
                    }
                    store(&dir, "ca", &given)?;
                }
                Ca(given)
            }
            None => match stored {
                Some(pair) => Ca(pair),
                None => {
                    let ca = Ca::generate("nest-ca")?;
                    store(&dir, "ca", &ca.0)?;
                    ca
                }
            },
        };
        let issue = |name: &str, leaf: Leaf, fresh: bool| -> anyhow::Result<Pair> {
            if !fresh && let Some(pair) = load(&dir, name)? {
                return Ok(pair);
            }
            let pair = ca.issue(&leaf)?;
            store(&dir, name, &pair)?;
            Ok(pair)
        };
        let names_file = dir.join("apiserver.names");
        let have_names = std::fs::read_to_string(&names_file).is_ok_and(|have| {
            let have: Vec<&str> = have.trim().split(',').collect();
            names.iter().all(|n| have.contains(&n.as_str()))
        });
        let validity = nest_pki::LEAF_VALIDITY;
        let serving = issue(
            "apiserver",
            Leaf {
                common_name: "kube-apiserver",
                organization: None,
                names: names.to_vec(),
                usage: Usage::Server,
                validity,
            },
            !have_names,
        )?;
        std::fs::write(&names_file, names.join(","))?;
        let client = |common_name, organization| Leaf {
            common_name,
            organization: Some(organization),
            names: Vec::new(),
            usage: Usage::Client,
            validity,
        };
        let admin = issue("admin", client("admin", "system:masters"), false)?;
        // The API server's credential for kubelets is no admin of the cluster (no `system:masters`): kubelets check
        // its name. (kubeadm's file name; an earlier version's `kubelet-client`, in the group, is not used.)
        let kubelet_client =
            issue("apiserver-kubelet-client", Leaf { organization: None, ..client(KUBELET_CLIENT, "") }, false)?;
        Ok(Pki {
            ca_cert: ca.0.cert,
            serving_cert: serving.cert,
            serving_key: serving.key,
            admin_cert: admin.cert,
            admin_key: admin.key,
            kubelet_client_cert: kubelet_client.cert,
            kubelet_client_key: kubelet_client.key,
        })
    }
}

/// The common name of the API server's client certificate for kubelets.
pub const KUBELET_CLIENT: &str = "kube-apiserver-kubelet-client";

/// A kubelet serving certificate for node `node` at `ips`, issued by the CA in `pki_dir` (`ca.crt`, `ca.key`, as
/// [`Pki::load_or_create`] keeps them); returns (certificate PEM, key PEM, CA certificate PEM).
pub fn issue_kubelet_serving(pki_dir: &Path, node: &str, ips: &[IpAddr]) -> anyhow::Result<(String, String, String)> {
    let ca = cluster_ca(pki_dir)?;
    let mut names: Vec<String> = ips.iter().map(IpAddr::to_string).collect();
    names.push(node.to_string());
    let common_name = format!("system:node:{node}");
    let leaf = Leaf {
        common_name: &common_name,
        organization: Some("system:nodes"),
        names,
        usage: Usage::Server,
        validity: nest_pki::LEAF_VALIDITY,
    };
    let pair = ca.issue(&leaf)?;
    Ok((pair.cert, pair.key, ca.0.cert))
}

/// The cluster CA kept in `pki_dir` (`ca.crt`, `ca.key`), with which the controller-manager signs approved
/// CertificateSigningRequests.
pub fn cluster_ca(pki_dir: &Path) -> anyhow::Result<Ca> {
    Ok(Ca(load(pki_dir, "ca")?.with_context(|| format!("no ca.crt and ca.key in {}", pki_dir.display()))?))
}

/// A client certificate for `user` in `group` (its organization), issued by the CA in `pki_dir`; returns
/// (certificate PEM, key PEM, CA certificate PEM).
pub fn issue_client(pki_dir: &Path, user: &str, group: Option<&str>) -> anyhow::Result<(String, String, String)> {
    let ca = cluster_ca(pki_dir)?;
    let leaf = Leaf {
        common_name: user,
        organization: group,
        names: Vec::new(),
        usage: Usage::Client,
        validity: nest_pki::LEAF_VALIDITY,
    };
    let pair = ca.issue(&leaf)?;
    Ok((pair.cert, pair.key, ca.0.cert))
}

/// A kubeconfig for `user` with embedded certificates, pointing at `server`.
pub fn kubeconfig(server: &str, ca_pem: &str, cert_pem: &str, key_pem: &str, user: &str) -> String {
    nest_pki::kubeconfig(server, ca_pem, &Pair { cert: cert_pem.into(), key: key_pem.into() }, user)
}
