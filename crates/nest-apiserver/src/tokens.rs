//! ServiceAccount tokens, as kube-apiserver issues and checks them (1.33): the `serviceaccounts/<name>/token`
//! subresource (TokenRequest; `kubectl create token`) signs a JWT with the cluster's service-account key
//! (`--service-account-signing-key-file`; the `<cluster>-sa` key pair of a tenant), for audiences (the API server's
//! own, `--api-audiences`, by default its issuer), for a time (`expirationSeconds`, 10 minutes to 2³² seconds, an
//! hour by default), and optionally bound to a Pod, Secret or Node. Authentication takes a bearer token that is
//! such a JWT when its signature is one of this server's keys (`--service-account-key-file`), its issuer this
//! server's (`--service-account-issuer`), an audience this server's, its time not over, and the ServiceAccount (and
//! bound object) it names still the one it was issued for: deleting the pod invalidates its token at once. The user
//! is `system:serviceaccount:<namespace>:<name>`, in `system:serviceaccounts` and `system:serviceaccounts:<namespace>`.
//! `TokenReview` asks the same question for someone else's token, and OIDC discovery
//! (`/.well-known/openid-configuration`, `/openid/v1/jwks`) publishes the public keys, so that other parties can check
//! tokens themselves.

use std::path::{Path, PathBuf};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use nest_registry::{ApiError, Registry, Result};
use serde_json::{Value, json};
use sha2::Digest as _;

use crate::auth::User;

/// kube-apiserver's default issuer (`--service-account-issuer`).
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// The default, least and most lifetime of a requested token, in seconds.
const DEFAULT_EXPIRATION: i64 = 3600;
const LEAST_EXPIRATION: i64 = 600;
const MOST_EXPIRATION: i64 = 1 << 32;

/// Where the keys come from, and who issues for whom.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// `--service-account-issuer`; [`DEFAULT_ISSUER`] when empty.
    pub issuer: String,
    /// `--api-audiences`; the issuer when empty.
    pub audiences: Vec<String>,
    /// `--service-account-signing-key-file` (PEM: RSA, or EC on P-256; PKCS#1, SEC 1 or PKCS#8); `<data>/pki/sa.key`, made when missing,
    /// when unset.
    pub signing_key_file: Option<PathBuf>,
    /// `--service-account-key-file` (PEM public keys or certificates): what tokens may be signed with; the signing
    /// key's public half when empty.
    pub key_files: Vec<PathBuf>,
}

/// A key tokens may be signed with.
struct Verifier {
    kid: String,
    algorithm: Algorithm,
    key: DecodingKey,
    /// The key as a JSON Web Key, for `/openid/v1/jwks`.
    jwk: Value,
}

/// This server's issuer of ServiceAccount tokens.
pub struct Issuer {
    issuer: String,
    audiences: Vec<String>,
    signing: (String, Algorithm, EncodingKey),
    verifiers: Vec<Verifier>,
}

impl Issuer {
    /// The issuer `config` describes, with its keys read (or, without a signing key file, made in `data_dir`).
    pub fn load(config: &Config, data_dir: &Path) -> anyhow::Result<Issuer> {
        use anyhow::Context as _;
        let (signing_path, generated_public) = match &config.signing_key_file {
            Some(path) => (path.clone(), None),
            None => {
                let dir = data_dir.join("pki");
                crate::certs::create_private_dir(&dir)?;
                let (key, public) = (dir.join("sa.key"), dir.join("sa.pub"));
                if !key.exists() || !public.exists() {
                    let (public_pem, private_pem) = nest_pki::key_pair()?;
                    crate::certs::write_private(&key, &private_pem)?;
                    std::fs::write(&public, public_pem)?;
                }
                (key, Some(std::fs::read(&public)?))
            }
        };
        let signing_pem =
            std::fs::read(&signing_path).with_context(|| format!("reading {}", signing_path.display()))?;
        // The algorithm is what the key is (its PEM label, or PKCS#8's algorithm identifier), never a guess from text.
        let signing_key = nest_pki::SigningKey::from_pem(&signing_pem).with_context(|| {
            format!(
                "the service-account signing key {} (PEM: RSA, or EC on P-256; PKCS#1, SEC 1 or PKCS#8)",
                signing_path.display()
            )
        })?;
        let mut public_pems: Vec<Vec<u8>> = Vec::new();
        for path in &config.key_files {
            public_pems.push(std::fs::read(path).with_context(|| format!("reading {}", path.display()))?);
        }
        if public_pems.is_empty() {
            public_pems.push(generated_public.unwrap_or_else(|| signing_key.public_key_pem().into_bytes()));
        }
        let mut verifiers = Vec::new();
        for pem in &public_pems {
            verifiers.extend(verifiers_of(pem)?);
        }
        let (algorithm, key) = match signing_key.algorithm() {
            nest_pki::KeyAlgorithm::Rsa => (Algorithm::RS256, EncodingKey::from_rsa_der(signing_key.der())),
            nest_pki::KeyAlgorithm::EcP256 => (Algorithm::ES256, EncodingKey::from_ec_der(signing_key.der())),
        };
        let kid = key_id(signing_key.public_key_der());
        let issuer = if config.issuer.is_empty() { DEFAULT_ISSUER.to_string() } else { config.issuer.clone() };
        let audiences = if config.audiences.is_empty() { vec![issuer.clone()] } else { config.audiences.clone() };
        Ok(Issuer { issuer, audiences, signing: (kid, algorithm, key), verifiers })
    }

    /// The API server's own audiences.
    pub fn audiences(&self) -> &[String] {
        &self.audiences
    }

    fn sign(&self, claims: &Value) -> Result<String> {
        let (kid, algorithm, key) = &self.signing;
        let mut header = Header::new(*algorithm);
        header.typ = None;
        header.kid = Some(kid.clone());
        jsonwebtoken::encode(&header, claims, key).map_err(|e| ApiError::internal(format!("signing a token: {e}")))
    }

    /// The claims of `token` when one of this server's keys signed it, for this issuer, one of `audiences`, and not
    /// out of time.
    fn verified(&self, token: &str, audiences: &[String]) -> Option<Value> {
        let header = jsonwebtoken::decode_header(token).ok()?;
        for verifier in self.verifiers.iter().filter(|v| header.kid.as_deref().is_none_or(|kid| kid == v.kid)) {
            if verifier.algorithm != header.alg {
                continue;
            }
            let mut validation = Validation::new(verifier.algorithm);
            validation.set_issuer(&[&self.issuer]);
            validation.set_audience(audiences);
            validation.validate_nbf = true;
            validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
            if let Ok(data) = jsonwebtoken::decode::<Value>(token, &verifier.key, &validation) {
                return Some(data.claims);
            }
        }
        None
    }

    /// `/.well-known/openid-configuration`, for a server reached at `address`.
    pub fn discovery(&self, address: &str) -> Value {
        let algorithms: std::collections::BTreeSet<String> =
            self.verifiers.iter().map(|v| format!("{:?}", v.algorithm)).collect();
        json!({
            "issuer": self.issuer,
            "jwks_uri": format!("https://{address}/openid/v1/jwks"),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": algorithms,
        })
    }

    /// `/openid/v1/jwks`: the public keys tokens may be signed with.
    pub fn jwks(&self) -> Value {
        json!({"keys": self.verifiers.iter().map(|v| v.jwk.clone()).collect::<Vec<_>>()})
    }

    /// Answers a TokenRequest for ServiceAccount `namespace/name`: its spec defaulted and checked, the token in its
    /// status.
    pub async fn token_request(&self, registry: &Registry, namespace: &str, name: &str, body: &Value) -> Result<Value> {
        let accounts = registry.resource("", "v1", "serviceaccounts").expect("serviceaccounts are built in");
        let account = registry.get(&accounts, namespace, name).await?;
        let mut spec = body["spec"].clone();
        if !spec.is_object() {
            spec = json!({});
        }
        let audiences: Vec<String> = match spec["audiences"].as_array() {
            Some(list) if !list.is_empty() => list.iter().filter_map(|a| a.as_str().map(str::to_string)).collect(),
            _ => self.audiences.clone(),
        };
        let seconds = spec["expirationSeconds"].as_i64().unwrap_or(DEFAULT_EXPIRATION);
        if seconds < LEAST_EXPIRATION {
            return Err(invalid(
                name,
                "spec.expirationSeconds",
                seconds,
                "may not specify a duration less than 10 minutes",
            ));
        }
        if seconds > MOST_EXPIRATION {
            return Err(invalid(
                name,
                "spec.expirationSeconds",
                seconds,
                "may not specify a duration larger than 2^32 seconds",
            ));
        }
        let now = nest_core::clock::now().as_second();
        let mut bound = json!({});
        if let Some(reference) = spec["boundObjectRef"].as_object().filter(|r| !r.is_empty()) {
            let kind = reference.get("kind").and_then(Value::as_str).unwrap_or_default();
            let plural = match kind {
                "Pod" => "pods",
                "Secret" => "secrets",
                "Node" => "nodes",
                other => return Err(ApiError::bad_request(format!("cannot bind token to object of type {other}"))),
            };
            let object_name = reference.get("name").and_then(Value::as_str).unwrap_or_default();
            let resource = registry.resource("", "v1", plural).expect("built in");
            let scope = if kind == "Node" { "" } else { namespace };
            let object = registry.get(&resource, scope, object_name).await?;
            let uid = object["metadata"]["uid"].as_str().unwrap_or_default().to_string();
            if let Some(asked) = reference.get("uid").and_then(Value::as_str).filter(|u| !u.is_empty())
                && asked != uid
            {
                return Err(ApiError::new(
                    409,
                    "Conflict",
                    format!(
                        "the UID in the bound object reference ({asked}) does not match the UID in record. The object \
                         might have been deleted and then recreated"
                    ),
                ));
            }
            if kind == "Pod" {
                let runs_as = object["spec"]["serviceAccountName"].as_str().unwrap_or("default");
                if runs_as != name {
                    return Err(ApiError::bad_request(format!(
                        "cannot bind token for serviceaccount \"{name}\" to pod running with different serviceaccount \
                         name."
                    )));
                }
            }
            bound[kind.to_ascii_lowercase()] = json!({"name": object_name, "uid": uid});
            spec["boundObjectRef"]["uid"] = json!(uid);
            spec["boundObjectRef"]["apiVersion"] = json!("v1");
        }
        let mut private = json!({
            "namespace": namespace,
            "serviceaccount": {"name": name, "uid": account["metadata"]["uid"]},
        });
        if let Some(fields) = bound.as_object() {
            for (key, value) in fields {
                private[key] = value.clone();
            }
        }
        let claims = json!({
            "aud": audiences,
            "exp": now + seconds,
            "iat": now,
            "nbf": now,
            "iss": self.issuer,
            "jti": nest_registry::meta::new_uid(),
            "sub": format!("system:serviceaccount:{namespace}:{name}"),
            "kubernetes.io": private,
        });
        let token = self.sign(&claims)?;
        spec["audiences"] = json!(audiences);
        spec["expirationSeconds"] = json!(seconds);
        if spec.get("boundObjectRef").is_none() {
            spec["boundObjectRef"] = Value::Null;
        }
        Ok(json!({
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": namespace, "creationTimestamp": nest_core::clock::rfc3339(now as u64)},
            "spec": spec,
            "status": {"token": token, "expirationTimestamp": nest_core::clock::rfc3339((now + seconds) as u64)},
        }))
    }

    /// The ServiceAccount `token` stands for, when it is valid for one of `audiences` (and the API server's own
    /// when empty): signed here, in time, and naming objects that still exist as they were. The audiences the
    /// token was valid for come with it.
    pub async fn authenticate(
        &self,
        registry: &Registry,
        token: &str,
        audiences: &[String],
    ) -> Option<(User, Vec<String>)> {
        let audiences = if audiences.is_empty() { &self.audiences[..] } else { audiences };
        let claims = self.verified(token, audiences)?;
        let private = &claims["kubernetes.io"];
        let namespace = private["namespace"].as_str()?;
        let name = private["serviceaccount"]["name"].as_str()?;
        if claims["sub"].as_str()? != format!("system:serviceaccount:{namespace}:{name}") {
            return None;
        }
        let still = |plural: &'static str, scope: &'static str, key: &'static str| {
            let reference = private[key].clone();
            async move {
                let Some(object_name) = reference["name"].as_str() else { return reference.is_null() };
                let Some(resource) = registry.resource("", "v1", plural) else { return false };
                let scope = if scope.is_empty() { "" } else { namespace };
                match registry.get(&resource, scope, object_name).await {
                    Ok(object) => {
                        object["metadata"]["uid"] == reference["uid"]
                            && object["metadata"]["deletionTimestamp"].as_str().is_none_or(|at| {
                                at.parse::<jiff::Timestamp>().is_ok_and(|at| at > nest_core::clock::now())
                            })
                    }
                    Err(_) => false,
                }
            }
        };
        let alive = still("serviceaccounts", "namespaced", "serviceaccount").await
            && still("pods", "namespaced", "pod").await
            && still("secrets", "namespaced", "secret").await
            && still("nodes", "", "node").await;
        if !alive {
            return None;
        }
        let valid_for: Vec<String> = match &claims["aud"] {
            Value::String(one) => vec![one.clone()],
            Value::Array(list) => list.iter().filter_map(|a| a.as_str().map(str::to_string)).collect(),
            _ => Vec::new(),
        };
        let valid_for = valid_for.into_iter().filter(|a| audiences.contains(a)).collect();
        let groups = vec!["system:serviceaccounts".to_string(), format!("system:serviceaccounts:{namespace}")];
        Some((User::new(format!("system:serviceaccount:{namespace}:{name}"), groups), valid_for))
    }

    /// Answers a TokenReview: whether its `spec.token` authenticates, as whom, for which of its `spec.audiences`;
    /// a review without a token is a 400, as upstream's.
    pub async fn review(&self, registry: &Registry, body: &Value) -> Result<Value> {
        let token = body["spec"]["token"].as_str().unwrap_or_default();
        if token.is_empty() {
            return Err(ApiError::bad_request("token is required for TokenReview in authentication"));
        }
        let asked: Vec<String> = body["spec"]["audiences"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a.as_str().map(str::to_string))
            .collect();
        let mut review = json!({"metadata": {"creationTimestamp": Value::Null}, "spec": body["spec"].clone()});
        review["status"] = match self.authenticate(registry, token, &asked).await {
            Some((user, audiences)) => json!({
                "authenticated": true,
                "user": {"username": user.name, "groups": user.groups},
                "audiences": audiences,
            }),
            // What kube-apiserver's bearer-token authenticator says when no authenticator knows the token.
            None => json!({"user": {}, "error": "invalid bearer token"}),
        };
        Ok(review)
    }
}

/// A 422 for a TokenRequest, as upstream words it.
fn invalid(name: &str, field: &str, value: i64, detail: &str) -> ApiError {
    let message = format!("Invalid value: {value}: {detail}");
    let mut error = ApiError::new(
        422,
        "Invalid",
        format!("TokenRequest.authentication.k8s.io \"{name}\" is invalid: {field}: {message}"),
    );
    error.details.name = Some(name.to_string());
    error.details.group = Some("authentication.k8s.io".into());
    error.details.kind = Some("TokenRequest".into());
    error.details.causes = vec![nest_registry::error::Cause::invalid(field, message)];
    error
}

/// kube-apiserver's key ID: the unpadded base64url SHA-256 of the key's DER SubjectPublicKeyInfo.
fn key_id(der: &[u8]) -> String {
    nest_core::base64::encode_url(sha2::Sha256::digest(der))
}

/// The DER SubjectPublicKeyInfos of a PEM file of public keys and certificates.
fn spki_ders(pem: &[u8]) -> anyhow::Result<Vec<Vec<u8>>> {
    let mut ders = Vec::new();
    for block in x509_parser::pem::Pem::iter_from_buffer(pem) {
        let block = block?;
        match block.label.as_str() {
            "PUBLIC KEY" => ders.push(block.contents.clone()),
            "CERTIFICATE" => {
                let cert = block.parse_x509()?;
                ders.push(cert.public_key().raw.to_vec());
            }
            _ => {}
        }
    }
    Ok(ders)
}

/// The verifiers of the keys in `pem`, with their JSON Web Keys.
fn verifiers_of(pem: &[u8]) -> anyhow::Result<Vec<Verifier>> {
    use x509_parser::prelude::FromDer as _;
    use x509_parser::public_key::PublicKey;
    let mut verifiers = Vec::new();
    for der in spki_ders(pem)? {
        let (_, spki) = x509_parser::x509::SubjectPublicKeyInfo::from_der(&der)?;
        let kid = key_id(&der);
        let url = nest_core::base64::encode_url;
        let (algorithm, key, jwk) = match spki.parsed()? {
            PublicKey::EC(point) => {
                let data = point.data();
                anyhow::ensure!(data.len() == 65 && data[0] == 4, "only P-256 EC keys sign service-account tokens");
                let (x, y) = (url(&data[1..33]), url(&data[33..]));
                let key = DecodingKey::from_ec_components(&x, &y)?;
                (
                    Algorithm::ES256,
                    key,
                    json!({"use": "sig", "kty": "EC", "kid": kid, "crv": "P-256", "alg": "ES256", "x": x, "y": y}),
                )
            }
            PublicKey::RSA(rsa) => {
                let strip = |bytes: &[u8]| bytes.iter().skip_while(|b| **b == 0).copied().collect::<Vec<u8>>();
                let (n, e) = (url(&strip(rsa.modulus)), url(&strip(rsa.exponent)));
                let key = DecodingKey::from_rsa_components(&n, &e)?;
                (Algorithm::RS256, key, json!({"use": "sig", "kty": "RSA", "kid": kid, "alg": "RS256", "n": n, "e": e}))
            }
            _ => anyhow::bail!("service-account keys are EC P-256 or RSA"),
        };
        verifiers.push(Verifier { kid, algorithm, key, jwk });
    }
    Ok(verifiers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issuer() -> (tempfile::TempDir, Issuer) {
        let dir = tempfile::tempdir().unwrap();
        let issuer = Issuer::load(&Config::default(), dir.path()).unwrap();
        (dir, issuer)
    }

    fn claims(overrides: Value) -> Value {
        let now = nest_core::clock::now().as_second();
        let mut claims = json!({"aud": [DEFAULT_ISSUER], "exp": now + 600, "iat": now, "nbf": now, "iss": DEFAULT_ISSUER,
            "sub": "system:serviceaccount:ns:sa", "kubernetes.io": {"namespace": "ns", "serviceaccount": {"name": "sa"}}});
        for (key, value) in overrides.as_object().unwrap() {
            claims[key] = value.clone();
        }
        claims
    }

    #[test]
    fn only_tokens_of_this_issuer_in_their_time_and_for_its_audience_verify() {
        let (_dir, issuer) = issuer();
        let audiences = issuer.audiences().to_vec();
        let good = issuer.sign(&claims(json!({}))).unwrap();
        assert!(issuer.verified(&good, &audiences).is_some());
        let now = nest_core::clock::now().as_second();
        for (what, overrides) in [
            ("expired", json!({"exp": now - 3600})),
            ("not yet valid", json!({"nbf": now + 3600})),
            ("another issuer", json!({"iss": "https://elsewhere"})),
            ("another audience", json!({"aud": ["vault"]})),
        ] {
            let token = issuer.sign(&claims(overrides)).unwrap();
            assert!(issuer.verified(&token, &audiences).is_none(), "{what}");
        }
        // A changed payload, or another cluster's key.
        let mut parts: Vec<String> = good.split('.').map(str::to_string).collect();
        parts[1] = nest_core::base64::encode_url(
            claims(json!({"sub": "system:serviceaccount:kube-system:admin"})).to_string(),
        );
        assert!(issuer.verified(&parts.join("."), &audiences).is_none(), "a forged payload");
        let (_other_dir, other) = self::issuer();
        assert!(other.verified(&good, &audiences).is_none(), "another cluster's token");
    }

    #[test]
    fn the_published_keys_are_this_issuers_and_the_key_is_kept_across_restarts() {
        let (dir, issuer) = issuer();
        let jwks = issuer.jwks();
        assert_eq!(jwks["keys"][0]["kty"], "EC");
        assert_eq!(jwks["keys"][0]["kid"], issuer.signing.0);
        let again = Issuer::load(&Config::default(), dir.path()).unwrap();
        let token = issuer.sign(&claims(json!({}))).unwrap();
        assert!(again.verified(&token, issuer.audiences()).is_some(), "a restarted server takes its earlier tokens");
        assert_eq!(issuer.discovery("127.0.0.1:6443")["jwks_uri"], "https://127.0.0.1:6443/openid/v1/jwks");
    }

    /// An issuer whose `--service-account-signing-key-file` holds `pem`.
    fn issuer_of_key(pem: &str) -> anyhow::Result<(tempfile::TempDir, Issuer)> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("signing.key");
        std::fs::write(&file, pem).unwrap();
        let config = Config { signing_key_file: Some(file), ..Config::default() };
        let issuer = Issuer::load(&config, dir.path())?;
        Ok((dir, issuer))
    }

    /// Signs and verifies a token with `issuer`, and checks the published key is of `kty`.
    fn signs_and_verifies(issuer: &Issuer, kty: &str) {
        let token = issuer.sign(&claims(json!({}))).unwrap();
        assert!(issuer.verified(&token, issuer.audiences()).is_some());
        assert_eq!(issuer.jwks()["keys"][0]["kty"], kty);
        assert_eq!(issuer.jwks()["keys"][0]["kid"], issuer.signing.0);
    }

    #[test]
    fn a_p256_key_whose_pem_text_holds_rsa_signs_as_ec() {
        // Issue 39: about one new P-256 key in 1,400 has "RSA" in its base64 body, and was read as an RSA key.
        let body = |pem: &str| pem.lines().filter(|l| !l.starts_with("-----")).collect::<String>();
        let private = (0..200_000)
            .map(|_| nest_pki::key_pair().unwrap().1)
            .find(|pem| body(pem).contains("RSA"))
            .expect("a P-256 key with RSA in its text within 200,000 tries");
        let (_dir, issuer) = issuer_of_key(&private).unwrap();
        assert_eq!(issuer.signing.1, Algorithm::ES256);
        signs_and_verifies(&issuer, "EC");
    }

    #[test]
    fn an_rsa_key_signs_in_pkcs1_and_pkcs8_form() {
        let (_a, pkcs1) = issuer_of_key(include_str!("../../nest-pki/testdata/rsa-pkcs1.pem")).unwrap();
        let (_b, pkcs8) = issuer_of_key(include_str!("../../nest-pki/testdata/rsa-pkcs8.pem")).unwrap();
        for issuer in [&pkcs1, &pkcs8] {
            assert_eq!(issuer.signing.1, Algorithm::RS256);
            signs_and_verifies(issuer, "RSA");
        }
        // The same key: each takes the other's tokens.
        assert_eq!(pkcs1.signing.0, pkcs8.signing.0);
        let token = pkcs1.sign(&claims(json!({}))).unwrap();
        assert!(pkcs8.verified(&token, pkcs8.audiences()).is_some());
        // openssl ecparam -genkey's SEC 1 form (after its EC PARAMETERS block) signs as EC.
        let (_c, sec1) = issuer_of_key(include_str!("../../nest-pki/testdata/ec-sec1.pem")).unwrap();
        signs_and_verifies(&sec1, "EC");
    }

    #[test]
    fn a_key_that_signs_nothing_is_refused_naming_the_file_and_what_it_holds() {
        let error = issuer_of_key(include_str!("../../nest-pki/testdata/ed25519-pkcs8.pem")).err().unwrap();
        let message = format!("{error:#}");
        assert!(message.contains("signing.key"), "{message}");
        assert!(message.contains("algorithm 1.3.101.112"), "{message}");
    }
}
