//! Certificates for nest: a cluster CA ([`Ca`]), the serving and client certificates it issues ([`Ca::issue`]),
//! key pairs for service-account tokens ([`key_pair`]) and kubeconfigs that embed them ([`kubeconfig`]).
//!
//! Everything is PEM text, as Kubernetes keeps it in Secrets and files. Any CA can issue, whether nest made it or not:
//! the issuer's name is read from its certificate.

use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A certificate operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Generating, signing or reading a certificate or key failed.
    #[error("certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    /// A PEM text is not a certificate.
    #[error("not a PEM certificate")]
    NotACertificate,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How long a CA made here is valid.
pub const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 3600);
/// How long leaf certificates are valid unless asked otherwise (one year, as kubeadm's).
pub const LEAF_VALIDITY: Duration = Duration::from_secs(365 * 24 * 3600);

/// A certificate and its private key, PEM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pair {
    pub cert: String,
    pub key: String,
}

/// A certificate authority: its certificate and key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ca(pub Pair);

/// What a certificate is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Usage {
    Server,
    Client,
    Both,
}

/// A certificate to issue.
#[derive(Clone, Debug)]
pub struct Leaf<'a> {
    pub common_name: &'a str,
    /// The organization, which Kubernetes reads as the user's group.
    pub organization: Option<&'a str>,
    /// DNS names and IP addresses (as text) the certificate is valid for.
    pub names: Vec<String>,
    pub usage: Usage,
    pub validity: Duration,
}

fn name(common_name: &str, organization: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    if let Some(organization) = organization {
        dn.push(DnType::OrganizationName, organization);
    }
    dn
}

fn validity(params: &mut CertificateParams, lifetime: Duration) {
    let now = time::OffsetDateTime::now_utc();
    // A little slack for clocks that disagree.
    params.not_before = now - time::Duration::minutes(5);
    params.not_after = now + time::Duration::try_from(lifetime).unwrap_or(time::Duration::days(365));
}

impl Ca {
    /// A new self-signed CA named `common_name`.
    pub fn generate(common_name: &str) -> Result<Ca> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name = name(common_name, None);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        validity(&mut params, CA_VALIDITY);
        let cert = params.self_signed(&key)?;
        Ok(Ca(Pair { cert: cert.pem(), key: key.serialize_pem() }))
    }

    /// Issues `leaf` with a new key.
    pub fn issue(&self, leaf: &Leaf) -> Result<Pair> {
        let issuer = Issuer::from_ca_cert_pem(&self.0.cert, KeyPair::from_pem(&self.0.key)?)?;
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(leaf.names.clone())?;
        params.distinguished_name = name(leaf.common_name, leaf.organization);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        params.extended_key_usages = match leaf.usage {
            Usage::Server => vec![ExtendedKeyUsagePurpose::ServerAuth],
            Usage::Client => vec![ExtendedKeyUsagePurpose::ClientAuth],
            Usage::Both => vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth],
        };
        validity(&mut params, leaf.validity);
        let cert = params.signed_by(&key, &issuer)?;
        Ok(Pair { cert: cert.pem(), key: key.serialize_pem() })
    }
}

/// A new key pair for signing service-account tokens: (public key PEM, private key PEM).
pub fn key_pair() -> Result<(String, String)> {
    let key = KeyPair::generate()?;
    Ok((key.public_key_pem(), key.serialize_pem()))
}

/// The public key (PEM SubjectPublicKeyInfo) of a PEM PKCS#8 private key.
pub fn public_key_pem(private_pem: &str) -> Result<String> {
    Ok(KeyPair::from_pem(private_pem)?.public_key_pem())
}

/// When a PEM certificate stops being valid.
pub fn not_after(cert: &str) -> Result<SystemTime> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert.as_bytes()).map_err(|_| Error::NotACertificate)?;
    let parsed = pem.parse_x509().map_err(|_| Error::NotACertificate)?;
    let seconds = parsed.validity().not_after.timestamp();
    Ok(SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(seconds).unwrap_or(0)))
}

/// The DER bytes of a PEM certificate.
pub fn der(cert: &str) -> Result<Vec<u8>> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(cert.as_bytes()).map_err(|_| Error::NotACertificate)?;
    Ok(pem.contents)
}

/// A kubeconfig for `user` with embedded certificates, pointing at `server`.
pub fn kubeconfig(server: &str, ca: &str, client: &Pair, user: &str) -> String {
    let b64 = nest_core::base64::encode;
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: nest\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\n\
         users:\n- name: {user}\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n\
         contexts:\n- name: nest\n  context:\n    cluster: nest\n    user: {user}\ncurrent-context: nest\n",
        b64(ca),
        b64(&client.cert),
        b64(&client.key),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_issues_certificates_that_chain_to_it_and_expire_when_asked() {
        let ca = Ca::generate("tenant-ca").unwrap();
        let leaf = Leaf {
            common_name: "kube-apiserver",
            organization: None,
            names: vec!["10.0.0.1".into(), "kubernetes.default".into()],
            usage: Usage::Server,
            validity: Duration::from_secs(3600),
        };
        let issued = ca.issue(&leaf).unwrap();
        let (_, pem) = x509_parser::pem::parse_x509_pem(issued.cert.as_bytes()).unwrap();
        let cert = pem.parse_x509().unwrap();
        let (_, ca_pem) = x509_parser::pem::parse_x509_pem(ca.0.cert.as_bytes()).unwrap();
        let ca_cert = ca_pem.parse_x509().unwrap();
        assert_eq!(cert.issuer(), ca_cert.subject());
        assert!(cert.verify_signature(Some(ca_cert.public_key())).is_ok());
        let left = not_after(&issued.cert).unwrap().duration_since(SystemTime::now()).unwrap();
        assert!(left <= Duration::from_secs(3600) && left > Duration::from_secs(3500), "{left:?}");
    }
}
