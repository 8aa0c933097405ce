//! The API server's PKI: a cluster CA, a serving certificate with the IP and DNS names it listens on, and the
//! `admin` client certificate (CN `admin`, O `system:masters`) written into `admin.kubeconfig`.
//!
//! Everything is created on first start under `DIR/pki/` and reused afterwards, so kubeconfigs stay valid across
//! restarts. A serving certificate lacking a name the server now listens on is issued again from the same CA.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

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

fn dn(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    if let Some(organization) = organization {
        dn.push(DnType::OrganizationName, organization);
    }
    dn
}

fn read(path: &Path) -> anyhow::Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

fn write_private(path: &Path, contents: &str) -> anyhow::Result<()> {
    std::fs::write(path, contents).with_context(|| format!("writing {}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
}

fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = dn("nest-ca", None);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params
}

fn leaf(
    names: Vec<String>,
    common_name: &str,
    organization: Option<&str>,
    usage: ExtendedKeyUsagePurpose,
) -> anyhow::Result<CertificateParams> {
    let mut params = CertificateParams::new(names)?;
    params.distinguished_name = dn(common_name, organization);
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![usage];
    Ok(params)
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

struct Files {
    dir: PathBuf,
}

impl Files {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Pki {
    /// Loads the PKI under `data_dir/pki`, creating what is missing, with a serving certificate for `names`.
    pub fn load_or_create(data_dir: &Path, names: &[String]) -> anyhow::Result<Pki> {
        let files = Files { dir: data_dir.join("pki") };
        std::fs::create_dir_all(&files.dir).with_context(|| format!("creating {}", files.dir.display()))?;
        let (ca_cert, ca_key) = if files.path("ca.crt").exists() && files.path("ca.key").exists() {
            (read(&files.path("ca.crt"))?, read(&files.path("ca.key"))?)
        } else {
            let key = KeyPair::generate()?;
            let cert = ca_params().self_signed(&key)?;
            write_private(&files.path("ca.key"), &key.serialize_pem())?;
            std::fs::write(files.path("ca.crt"), cert.pem())?;
            (cert.pem(), key.serialize_pem())
        };
        // The CA's parameters are only needed to sign; its subject is fixed, so they can be rebuilt.
        let ca_key = KeyPair::from_pem(&ca_key).context("reading the CA key")?;
        let issuer = Issuer::new(ca_params(), ca_key);

        let names_file = files.path("apiserver.names");
        let wanted = names.join(",");
        let have_serving = files.path("apiserver.crt").exists()
            && files.path("apiserver.key").exists()
            && std::fs::read_to_string(&names_file).is_ok_and(|have| {
                let have: Vec<&str> = have.trim().split(',').collect();
                names.iter().all(|n| have.contains(&n.as_str()))
            });
        let (serving_cert, serving_key) = if have_serving {
            (read(&files.path("apiserver.crt"))?, read(&files.path("apiserver.key"))?)
        } else {
            let key = KeyPair::generate()?;
            let cert = leaf(names.to_vec(), "kube-apiserver", None, ExtendedKeyUsagePurpose::ServerAuth)?
                .signed_by(&key, &issuer)?;
            write_private(&files.path("apiserver.key"), &key.serialize_pem())?;
            std::fs::write(files.path("apiserver.crt"), cert.pem())?;
            std::fs::write(&names_file, &wanted)?;
            (cert.pem(), key.serialize_pem())
        };

        let (admin_cert, admin_key) = if files.path("admin.crt").exists() && files.path("admin.key").exists() {
            (read(&files.path("admin.crt"))?, read(&files.path("admin.key"))?)
        } else {
            let (cert, key) = issue_client(&issuer, "admin", Some("system:masters"))?;
            write_private(&files.path("admin.key"), &key)?;
            std::fs::write(files.path("admin.crt"), &cert)?;
            (cert, key)
        };
        let (kubelet_client_cert, kubelet_client_key) =
            if files.path("kubelet-client.crt").exists() && files.path("kubelet-client.key").exists() {
                (read(&files.path("kubelet-client.crt"))?, read(&files.path("kubelet-client.key"))?)
            } else {
                let (cert, key) = issue_client(&issuer, KUBELET_CLIENT, Some("system:masters"))?;
                write_private(&files.path("kubelet-client.key"), &key)?;
                std::fs::write(files.path("kubelet-client.crt"), &cert)?;
                (cert, key)
            };
        Ok(Pki { ca_cert, serving_cert, serving_key, admin_cert, admin_key, kubelet_client_cert, kubelet_client_key })
    }
}

/// The common name of the API server's client certificate for kubelets.
pub const KUBELET_CLIENT: &str = "kube-apiserver-kubelet-client";

/// A kubelet serving certificate for node `node` at `ips`, issued by the CA in `pki_dir` (`ca.crt`, `ca.key`, as
/// [`Pki::load_or_create`] keeps them); returns (certificate PEM, key PEM, CA certificate PEM).
pub fn issue_kubelet_serving(pki_dir: &Path, node: &str, ips: &[IpAddr]) -> anyhow::Result<(String, String, String)> {
    let ca_cert = read(&pki_dir.join("ca.crt"))?;
    let ca_key = KeyPair::from_pem(&read(&pki_dir.join("ca.key"))?).context("reading the CA key")?;
    let issuer = Issuer::new(ca_params(), ca_key);
    let mut names: Vec<String> = ips.iter().map(IpAddr::to_string).collect();
    names.push(node.to_string());
    let key = KeyPair::generate()?;
    let cert = leaf(names, &format!("system:node:{node}"), Some("system:nodes"), ExtendedKeyUsagePurpose::ServerAuth)?
        .signed_by(&key, &issuer)?;
    Ok((cert.pem(), key.serialize_pem(), ca_cert))
}

/// Issues a client certificate for `user` in `group`; returns (certificate PEM, key PEM).
fn issue_client(issuer: &Issuer<'_, KeyPair>, user: &str, group: Option<&str>) -> anyhow::Result<(String, String)> {
    let key = KeyPair::generate()?;
    let cert = leaf(Vec::new(), user, group, ExtendedKeyUsagePurpose::ClientAuth)?.signed_by(&key, issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A kubeconfig for `user` with embedded certificates, pointing at `server`.
pub fn kubeconfig(server: &str, ca_pem: &str, cert_pem: &str, key_pem: &str, user: &str) -> String {
    let b64 = |s: &str| nest_registry::base64::encode(s.as_bytes());
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: nest\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\n\
         users:\n- name: {user}\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n\
         contexts:\n- name: nest\n  context:\n    cluster: nest\n    user: {user}\ncurrent-context: nest\n",
        b64(ca_pem),
        b64(cert_pem),
        b64(key_pem),
    )
}
