//! Private keys that sign ServiceAccount tokens, read for what they are.
//!
//! kube-apiserver's `--service-account-signing-key-file` takes a PEM private key in any of the three forms openssl
//! and Go write (`keyutil.ParsePrivateKeyPEM`): `RSA PRIVATE KEY` (PKCS#1), `EC PRIVATE KEY` (SEC 1) and `PRIVATE
//! KEY` (PKCS#8, RSA or EC). The algorithm is decided by the block's label and, for PKCS#8, by the algorithm
//! identifier inside the key; never by searching the text, whose base64 body holds any three letters by chance (one
//! P-256 key in about 1,400 contains "RSA"). What is not an RSA key or an EC key on P-256 is refused with a message
//! that says what was found.
//!
//! ```
//! let (_public, private) = nest_pki::key_pair().unwrap();
//! let key = nest_pki::SigningKey::from_pem(private.as_bytes()).unwrap();
//! assert_eq!(key.algorithm(), nest_pki::KeyAlgorithm::EcP256);
//! ```

use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _, RsaKeyPair};
use yasna::models::ObjectIdentifier;

/// `rsaEncryption` (RFC 8017).
const RSA_ENCRYPTION: &[u64] = &[1, 2, 840, 113549, 1, 1, 1];
/// `id-ecPublicKey` (RFC 5480).
const EC_PUBLIC_KEY: &[u64] = &[1, 2, 840, 10045, 2, 1];
/// `prime256v1`, NIST P-256 (RFC 5480).
const P256: &[u64] = &[1, 2, 840, 10045, 3, 1, 7];

/// Why a PEM text is not a signing key.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    /// No PEM block at all.
    #[error("no PEM block")]
    NotPem,
    /// A PEM block of a kind that is no private key.
    #[error("a PEM block labelled {0:?}, not a private key (RSA PRIVATE KEY, EC PRIVATE KEY or PRIVATE KEY)")]
    Label(String),
    /// A PKCS#8 key of an algorithm other than RSA or EC.
    #[error("a PKCS#8 private key of algorithm {0}, neither RSA (1.2.840.113549.1.1.1) nor EC (1.2.840.10045.2.1)")]
    Algorithm(String),
    /// An EC key on a curve other than P-256.
    #[error("an EC private key on curve {0}; service-account tokens are signed with P-256 (1.2.840.10045.3.1.7)")]
    Curve(String),
    /// The DER inside the block does not parse as the structure its label promises.
    #[error("a {label} block whose contents are not a key of that form: {detail}")]
    Malformed { label: &'static str, detail: String },
}

/// What signs: RS256 with an RSA key, ES256 with a P-256 key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyAlgorithm {
    Rsa,
    EcP256,
}

/// A private key that signs tokens, in the form the signing library takes, with its public half.
#[derive(Clone)]
pub struct SigningKey {
    algorithm: KeyAlgorithm,
    /// PKCS#1 `RSAPrivateKey` for RSA, PKCS#8 for EC: what ring (and so jsonwebtoken) reads.
    der: Vec<u8>,
    /// The public key as a DER `SubjectPublicKeyInfo`.
    public: Vec<u8>,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey").field("algorithm", &self.algorithm).finish_non_exhaustive()
    }
}

impl SigningKey {
    /// The first private key in `pem`, read by its label (and, for PKCS#8, its algorithm identifier). Blocks
    /// before it that hold no private key (parameters, certificates) are passed over as keyutil does; the first
    /// block that is none of them is refused.
    pub fn from_pem(pem: &[u8]) -> Result<SigningKey, KeyError> {
        let mut first = None;
        for block in x509_parser::pem::Pem::iter_from_buffer(pem) {
            let Ok(block) = block else { break };
            match block.label.as_str() {
                "RSA PRIVATE KEY" => return SigningKey::rsa_pkcs1(block.contents, "RSA PRIVATE KEY"),
                "EC PRIVATE KEY" => return SigningKey::ec_sec1(&block.contents),
                "PRIVATE KEY" => return SigningKey::pkcs8(&block.contents),
                // openssl ecparam -genkey writes the curve's parameters before the key.
                "EC PARAMETERS" => {}
                other => {
                    first.get_or_insert_with(|| other.to_string());
                }
            }
        }
        Err(first.map_or(KeyError::NotPem, KeyError::Label))
    }

    /// Which algorithm the key signs with.
    pub fn algorithm(&self) -> KeyAlgorithm {
        self.algorithm
    }

    /// The key as the signing library takes it: PKCS#1 DER for RSA, PKCS#8 DER for EC.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// The public key, DER `SubjectPublicKeyInfo`.
    pub fn public_key_der(&self) -> &[u8] {
        &self.public
    }

    /// The public key, PEM `PUBLIC KEY`.
    pub fn public_key_pem(&self) -> String {
        pem_block("PUBLIC KEY", &self.public)
    }

    fn rsa_pkcs1(der: Vec<u8>, label: &'static str) -> Result<SigningKey, KeyError> {
        let pair = RsaKeyPair::from_der(&der).map_err(|e| KeyError::Malformed { label, detail: e.to_string() })?;
        let public = spki(RSA_ENCRYPTION, None, pair.public().as_ref());
        Ok(SigningKey { algorithm: KeyAlgorithm::Rsa, der, public })
    }

    fn ec_pkcs8(pkcs8: Vec<u8>, label: &'static str) -> Result<SigningKey, KeyError> {
        let rng = ring::rand::SystemRandom::new();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &pkcs8, &rng)
            .map_err(|e| KeyError::Malformed { label, detail: e.to_string() })?;
        let public = spki(EC_PUBLIC_KEY, Some(P256), pair.public_key().as_ref());
        Ok(SigningKey { algorithm: KeyAlgorithm::EcP256, der: pkcs8, public })
    }

    /// SEC 1 `ECPrivateKey`: its curve is in its `[0]` parameters (P-256 when absent; ring checks the key against
    /// the curve), and ring takes it wrapped in PKCS#8.
    fn ec_sec1(der: &[u8]) -> Result<SigningKey, KeyError> {
        const LABEL: &str = "EC PRIVATE KEY";
        let malformed = |e: yasna::ASN1Error| KeyError::Malformed { label: LABEL, detail: e.to_string() };
        let curve = yasna::parse_der(der, |reader| {
            reader.read_sequence(|seq| {
                seq.next().read_u8()?;
                seq.next().read_bytes()?;
                let curve = seq.read_optional(|r| r.read_tagged(yasna::Tag::context(0), |r| r.read_oid()))?;
                seq.read_optional(|r| r.read_der())?;
                Ok(curve)
            })
        })
        .map_err(malformed)?;
        if let Some(curve) = curve.filter(|c| c.components().as_slice() != P256) {
            return Err(KeyError::Curve(curve.to_string()));
        }
        let pkcs8 = yasna::construct_der(|writer| {
            writer.write_sequence(|seq| {
                seq.next().write_u8(0);
                seq.next().write_sequence(|alg| {
                    alg.next().write_oid(&ObjectIdentifier::from_slice(EC_PUBLIC_KEY));
                    alg.next().write_oid(&ObjectIdentifier::from_slice(P256));
                });
                seq.next().write_bytes(der);
            })
        });
        SigningKey::ec_pkcs8(pkcs8, LABEL)
    }

    /// PKCS#8 `PrivateKeyInfo` (or its v2, `OneAsymmetricKey`): the algorithm identifier says what is inside.
    fn pkcs8(der: &[u8]) -> Result<SigningKey, KeyError> {
        const LABEL: &str = "PRIVATE KEY";
        let malformed = |e: yasna::ASN1Error| KeyError::Malformed { label: LABEL, detail: e.to_string() };
        let (algorithm, parameters, inner) = yasna::parse_der(der, |reader| {
            reader.read_sequence(|seq| {
                seq.next().read_u8()?;
                let (algorithm, parameters) = seq.next().read_sequence(|alg| {
                    let algorithm = alg.next().read_oid()?;
                    let parameters = alg.read_optional(|r| r.read_der())?;
                    Ok((algorithm, parameters))
                })?;
                let inner = seq.next().read_bytes()?;
                // Attributes and (v2) the public key, which ring finds for itself.
                seq.read_optional(|r| r.read_der())?;
                seq.read_optional(|r| r.read_der())?;
                Ok((algorithm, parameters, inner))
            })
        })
        .map_err(malformed)?;
        match algorithm.components().as_slice() {
            RSA_ENCRYPTION => SigningKey::rsa_pkcs1(inner, LABEL),
            EC_PUBLIC_KEY => {
                let curve = parameters.and_then(|p| yasna::parse_der(&p, |r| r.read_oid()).ok());
                match curve {
                    Some(curve) if curve.components().as_slice() == P256 => SigningKey::ec_pkcs8(der.to_vec(), LABEL),
                    Some(curve) => Err(KeyError::Curve(curve.to_string())),
                    None => Err(KeyError::Curve("(not named)".into())),
                }
            }
            _ => Err(KeyError::Algorithm(algorithm.to_string())),
        }
    }
}

/// A DER `SubjectPublicKeyInfo` of `key` (the RSA public key's DER, or the EC point) for `algorithm`.
fn spki(algorithm: &[u64], curve: Option<&[u64]>, key: &[u8]) -> Vec<u8> {
    yasna::construct_der(|writer| {
        writer.write_sequence(|seq| {
            seq.next().write_sequence(|alg| {
                alg.next().write_oid(&ObjectIdentifier::from_slice(algorithm));
                match curve {
                    Some(curve) => alg.next().write_oid(&ObjectIdentifier::from_slice(curve)),
                    None => alg.next().write_null(),
                }
            });
            seq.next().write_bitvec_bytes(key, key.len() * 8);
        })
    })
}

/// `der` as a PEM block labelled `label`, 64 characters a line.
fn pem_block(label: &str, der: &[u8]) -> String {
    let text = nest_core::base64::encode(der);
    let mut pem = format!("-----BEGIN {label}-----\n");
    for line in text.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).unwrap_or_default());
        pem.push('\n');
    }
    pem.push_str(&format!("-----END {label}-----\n"));
    pem
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An RSA key (2048 bits, made with openssl genrsa), in both forms openssl writes.
    const RSA_PKCS1: &str = include_str!("../testdata/rsa-pkcs1.pem");
    const RSA_PKCS8: &str = include_str!("../testdata/rsa-pkcs8.pem");
    /// A P-256 key as `openssl ecparam -name prime256v1 -genkey` writes it: parameters, then SEC 1.
    const EC_SEC1: &str = include_str!("../testdata/ec-sec1.pem");
    /// A P-384 key, PKCS#8.
    const EC_P384: &str = include_str!("../testdata/ec-p384-pkcs8.pem");
    /// An Ed25519 key, PKCS#8.
    const ED25519: &str = include_str!("../testdata/ed25519-pkcs8.pem");

    fn body(pem: &str) -> String {
        pem.lines().filter(|l| !l.starts_with("-----")).collect()
    }

    #[test]
    fn a_p256_key_whose_text_holds_rsa_is_read_as_ec() {
        // About one freshly made P-256 key in 1,400 has "RSA" in its base64 body; the old check read those as RSA.
        let private = (0..200_000)
            .map(|_| crate::key_pair().unwrap().1)
            .find(|pem| body(pem).contains("RSA"))
            .expect("a P-256 key with RSA in its text within 200,000 tries");
        let key = SigningKey::from_pem(private.as_bytes()).unwrap();
        assert_eq!(key.algorithm(), KeyAlgorithm::EcP256);
        // Its public half is the one rcgen computes.
        let rcgen_public = rcgen::KeyPair::from_pem(&private).unwrap().public_key_pem();
        assert_eq!(key.public_key_pem().replace('\n', ""), rcgen_public.replace(['\n', '\r'], ""));
    }

    #[test]
    fn an_rsa_key_reads_the_same_in_pkcs1_and_pkcs8() {
        let pkcs1 = SigningKey::from_pem(RSA_PKCS1.as_bytes()).unwrap();
        let pkcs8 = SigningKey::from_pem(RSA_PKCS8.as_bytes()).unwrap();
        assert_eq!(pkcs1.algorithm(), KeyAlgorithm::Rsa);
        assert_eq!(pkcs8.algorithm(), KeyAlgorithm::Rsa);
        assert_eq!(pkcs1.der(), pkcs8.der());
        assert_eq!(pkcs1.public_key_der(), pkcs8.public_key_der());
        // The public key parses as what it is.
        use x509_parser::prelude::FromDer as _;
        let (_, spki) = x509_parser::x509::SubjectPublicKeyInfo::from_der(pkcs1.public_key_der()).unwrap();
        assert!(matches!(spki.parsed().unwrap(), x509_parser::public_key::PublicKey::RSA(_)));
    }

    #[test]
    fn a_sec1_ec_key_after_its_parameters_is_read() {
        let key = SigningKey::from_pem(EC_SEC1.as_bytes()).unwrap();
        assert_eq!(key.algorithm(), KeyAlgorithm::EcP256);
        assert!(key.public_key_pem().starts_with("-----BEGIN PUBLIC KEY-----\n"));
    }

    #[test]
    fn anything_else_is_refused_saying_what_it_is() {
        assert_eq!(SigningKey::from_pem(b"RSA").unwrap_err(), KeyError::NotPem);
        let certificate = crate::Ca::generate("x").unwrap().0.cert;
        assert_eq!(
            SigningKey::from_pem(certificate.as_bytes()).unwrap_err().to_string(),
            "a PEM block labelled \"CERTIFICATE\", not a private key (RSA PRIVATE KEY, EC PRIVATE KEY or PRIVATE KEY)"
        );
        assert_eq!(SigningKey::from_pem(EC_P384.as_bytes()).unwrap_err(), KeyError::Curve("1.3.132.0.34".into()));
        assert_eq!(SigningKey::from_pem(ED25519.as_bytes()).unwrap_err(), KeyError::Algorithm("1.3.101.112".into()));
        // An RSA label over an EC key's contents.
        let (_, ec) = crate::key_pair().unwrap();
        let relabelled = ec.replace("PRIVATE KEY", "RSA PRIVATE KEY");
        assert!(matches!(
            SigningKey::from_pem(relabelled.as_bytes()),
            Err(KeyError::Malformed { label: "RSA PRIVATE KEY", .. })
        ));
    }
}
