//! Certificates for nest: a cluster CA ([`Ca`]), the serving and client certificates it issues ([`Ca::issue`]),
//! key pairs for service-account tokens ([`key_pair`]) and the signing keys read from files ([`SigningKey`]), and
//! kubeconfigs that embed them ([`kubeconfig`]).
//!
//! Everything is PEM text, as Kubernetes keeps it in Secrets and files. Any CA can issue, whether nest made it or not:
//! the issuer's name is read from its certificate.

use std::time::{Duration, SystemTime};

mod signing_key;

pub use signing_key::{KeyAlgorithm, KeyError, SigningKey};

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

/// `lifetime` after `now`, or the last time a certificate can hold (the end of year 9999) when that is further.
fn later(now: time::OffsetDateTime, lifetime: time::Duration) -> time::OffsetDateTime {
    let last = time::PrimitiveDateTime::MAX.assume_utc();
    now.checked_add(lifetime).unwrap_or(last).min(last)
}

fn validity(params: &mut CertificateParams, lifetime: Duration) {
    let now = time::OffsetDateTime::now_utc();
    // A little slack for clocks that disagree.
    params.not_before = now - time::Duration::minutes(5);
    params.not_after = later(now, time::Duration::try_from(lifetime).unwrap_or(time::Duration::days(365)));
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

/// A Go duration of hours, minutes and seconds (`8760h`, `90m`, `1h30m`), as certificate lifetimes are given
/// (`--cluster-signing-duration`, a NestedControlPlane's `certificateValidity`).
pub fn parse_duration(text: &str) -> Option<Duration> {
    let mut total = 0f64;
    let mut number = String::new();
    for c in text.chars() {
        match c {
            '0'..='9' | '.' => number.push(c),
            'h' | 'm' | 's' => {
                let n: f64 = number.parse().ok()?;
                total += n * match c {
                    'h' => 3600.0,
                    'm' => 60.0,
                    _ => 1.0,
                };
                number.clear();
            }
            _ => return None,
        }
    }
    // Go's time.ParseDuration holds at most 2⁶³−1 nanoseconds (about 292 years); a longer text is no duration.
    const MOST_SECONDS: f64 = 9_223_372_036.0;
    (number.is_empty() && total > 0.0 && total <= MOST_SECONDS).then(|| Duration::from_secs_f64(total))
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
    fn a_lifetime_past_what_go_holds_is_no_duration_and_the_longest_one_ends_in_9999() {
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        for refused in [format!("1{}h", "0".repeat(400)), "100000000h".into(), "0h".into(), "h".into(), "1d".into()] {
            assert_eq!(parse_duration(&refused), None, "{refused}");
        }
        let longest = parse_duration("2562047h").unwrap();
        let ca = Ca::generate("tenant-ca").unwrap();
        let leaf =
            Leaf { common_name: "x", organization: None, names: vec![], usage: Usage::Client, validity: longest };
        let issued = ca.issue(&leaf).unwrap();
        assert!(not_after(&issued.cert).unwrap() > SystemTime::now() + Duration::from_secs(200 * 365 * 86400));
        // A lifetime past year 9999: held at its end.
        let leaf = Leaf { validity: Duration::from_secs(9000 * 365 * 86400), ..leaf };
        let issued = ca.issue(&leaf).unwrap();
        let (_, pem) = x509_parser::pem::parse_x509_pem(issued.cert.as_bytes()).unwrap();
        assert_eq!(pem.parse_x509().unwrap().validity().not_after.to_datetime().year(), 9999);
    }

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

/// What a PEM certificate signing request (PKCS#10) asks for, as the CertificateSigningRequest signers read it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    pub common_name: String,
    pub organizations: Vec<String>,
    pub dns_names: Vec<String>,
    pub ip_addresses: Vec<String>,
    pub emails: Vec<String>,
    pub uris: Vec<String>,
}

/// Reads a PEM certificate signing request, its signature checked; the error in the words kube-apiserver uses where
/// it has them (`PEM block type must be CERTIFICATE REQUEST`).
pub fn read_request(pem: &str) -> std::result::Result<Request, String> {
    use x509_parser::prelude::{FromDer, GeneralName, ParsedExtension, X509CertificationRequest};
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes())
        .map_err(|_| "PEM block type must be CERTIFICATE REQUEST".to_string())?;
    if block.label != "CERTIFICATE REQUEST" {
        return Err("PEM block type must be CERTIFICATE REQUEST".into());
    }
    let (_, csr) =
        X509CertificationRequest::from_der(&block.contents).map_err(|e| format!("asn1: structure error: {e}"))?;
    // Parsed again by rcgen, which checks the signature and refuses what it could not sign.
    rcgen::CertificateSigningRequestParams::from_der(&block.contents.clone().into()).map_err(|e| e.to_string())?;
    let info = &csr.certification_request_info;
    let strings = |attributes: Vec<&x509_parser::x509::AttributeTypeAndValue>| -> Vec<String> {
        attributes.into_iter().filter_map(|a| a.as_str().ok().map(str::to_string)).collect()
    };
    let mut request = Request {
        common_name: strings(info.subject.iter_common_name().collect()).into_iter().next().unwrap_or_default(),
        organizations: strings(info.subject.iter_organization().collect()),
        ..Request::default()
    };
    for extension in csr.requested_extensions().into_iter().flatten() {
        if let ParsedExtension::SubjectAlternativeName(names) = extension {
            for name in &names.general_names {
                match name {
                    GeneralName::DNSName(dns) => request.dns_names.push(dns.to_string()),
                    GeneralName::RFC822Name(email) => request.emails.push(email.to_string()),
                    GeneralName::URI(uri) => request.uris.push(uri.to_string()),
                    GeneralName::IPAddress(bytes) => request.ip_addresses.push(match bytes.len() {
                        4 => std::net::Ipv4Addr::new(bytes[0], bytes[1], bytes[2], bytes[3]).to_string(),
                        16 => std::net::Ipv6Addr::from(<[u8; 16]>::try_from(*bytes).unwrap_or_default()).to_string(),
                        _ => String::new(),
                    }),
                    _ => {}
                }
            }
        }
    }
    Ok(request)
}

/// Signs a PEM certificate signing request with the CA, as kube-controller-manager's CSR signer does: the request's
/// subject, names and public key; the key usages and extended key usages Kubernetes names (`digital signature`,
/// `key encipherment`, `client auth`, `server auth`, …) and none of the request's own extensions; not a CA; valid
/// from five minutes ago for `lifetime` (five minutes less for eight hours or more), never past the CA's own end.
/// Returns the certificate, PEM.
pub fn sign_request(ca: &Ca, pem: &str, usages: &[String], lifetime: Duration) -> std::result::Result<String, String> {
    let mut request = rcgen::CertificateSigningRequestParams::from_pem(pem).map_err(|e| e.to_string())?;
    let params = &mut request.params;
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages.clear();
    params.extended_key_usages.clear();
    let mut unknown = Vec::new();
    for usage in usages {
        match usage.as_str() {
            "signing" | "digital signature" => params.key_usages.push(KeyUsagePurpose::DigitalSignature),
            "content commitment" => params.key_usages.push(KeyUsagePurpose::ContentCommitment),
            "key encipherment" => params.key_usages.push(KeyUsagePurpose::KeyEncipherment),
            "key agreement" => params.key_usages.push(KeyUsagePurpose::KeyAgreement),
            "data encipherment" => params.key_usages.push(KeyUsagePurpose::DataEncipherment),
            "cert sign" => params.key_usages.push(KeyUsagePurpose::KeyCertSign),
            "crl sign" => params.key_usages.push(KeyUsagePurpose::CrlSign),
            "encipher only" => params.key_usages.push(KeyUsagePurpose::EncipherOnly),
            "decipher only" => params.key_usages.push(KeyUsagePurpose::DecipherOnly),
            "any" => params.insert_extended_key_usage(ExtendedKeyUsagePurpose::Any),
            "server auth" => params.insert_extended_key_usage(ExtendedKeyUsagePurpose::ServerAuth),
            "client auth" => params.insert_extended_key_usage(ExtendedKeyUsagePurpose::ClientAuth),
            "code signing" => params.insert_extended_key_usage(ExtendedKeyUsagePurpose::CodeSigning),
            "email protection" | "s/mime" => params.insert_extended_key_usage(ExtendedKeyUsagePurpose::EmailProtection),
            "timestamping" => params.insert_extended_key_usage(ExtendedKeyUsagePurpose::TimeStamping),
            "ocsp signing" => params.insert_extended_key_usage(ExtendedKeyUsagePurpose::OcspSigning),
            other => unknown.push(other.to_string()),
        }
    }
    if !unknown.is_empty() {
        return Err(format!("unrecognized usage values: [{}]", unknown.join(" ")));
    }
    params.key_usages.dedup();
    let now = time::OffsetDateTime::now_utc();
    let lifetime = time::Duration::try_from(lifetime).unwrap_or(time::Duration::days(365));
    let backdate = time::Duration::minutes(5);
    params.not_before = now - backdate;
    params.not_after =
        if lifetime < time::Duration::hours(8) { later(now, lifetime) } else { later(now, lifetime) - backdate };
    let ca_end = not_after(&ca.0.cert).map_err(|e| e.to_string())?;
    let ca_end = time::OffsetDateTime::from(ca_end);
    if ca_end < now {
        return Err(format!("the signer has expired: NotAfter={ca_end}"));
    }
    params.not_after = params.not_after.min(ca_end);
    let mut serial = [0u8; 16];
    rand_bytes(&mut serial);
    serial[0] &= 0x7f;
    params.serial_number = Some(rcgen::SerialNumber::from_slice(&serial));
    let key = KeyPair::from_pem(&ca.0.key).map_err(|e| e.to_string())?;
    let issuer = Issuer::from_ca_cert_pem(&ca.0.cert, key).map_err(|e| e.to_string())?;
    Ok(request.signed_by(&issuer).map_err(|e| e.to_string())?.pem())
}

/// Random bytes from the operating system.
fn rand_bytes(out: &mut [u8]) {
    use ring::rand::SecureRandom;
    // The system's randomness source does not fail on Linux; a failure would leave a serial of zeros, still valid.
    let _ = ring::rand::SystemRandom::new().fill(out);
}
