//! CertificateSigningRequests (issue 20) as users make them: a key and request from openssl, `kubectl create`,
//! `kubectl certificate approve|deny`, and the certificate the controller-manager signs with the cluster CA
//! authenticating its subject. Who may approve, who may ask for what, and what each signer refuses, as
//! kube-apiserver's admission plugins and kube-controller-manager's csrsigning controller answer.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{Component, KUBECTL, Server, Storage, backends, eventually};
use serde_json::Value;

/// A P-256 key and a PEM request for `subject` (`/CN=alice/O=devs`), made by openssl in `dir`.
fn openssl_request(dir: &Path, name: &str, subject: &str) -> (PathBuf, String) {
    let key = dir.join(format!("{name}.key"));
    let request = dir.join(format!("{name}.csr"));
    let out = Command::new("openssl")
        .args(["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", subject])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&request)
        .output()
        .expect("openssl (scripts/check installs it)");
    assert!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
    (key, std::fs::read_to_string(request).unwrap())
}

fn manifest(name: &str, pem: &str, signer: &str, usages: &str) -> String {
    let request = nest_core::base64::encode(pem);
    format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata: {{name: {name}}}\n\
         spec: {{request: {request}, signerName: {signer}, expirationSeconds: 86400, usages: [{usages}]}}\n"
    )
}

/// A server whose token file knows bob, and a controller-manager signing with the server's CA.
fn signing_cluster(storage: &Storage) -> (Server, Component, tempfile::NamedTempFile) {
    use std::io::Write as _;
    let mut tokens = tempfile::NamedTempFile::new().unwrap();
    writeln!(tokens, "bob-token,bob,2,\"\"").unwrap();
    let server = Server::start_on(storage, &["--token-auth-file", tokens.path().to_str().unwrap()]);
    let pki = server.data_dir().join("pki");
    let (cert, key) = (pki.join("ca.crt"), pki.join("ca.key"));
    let args = [
        "controller-manager",
        "--identity",
        "cm",
        "--cluster-signing-cert-file",
        cert.to_str().unwrap(),
        "--cluster-signing-key-file",
        key.to_str().unwrap(),
    ];
    let controllers = Component::run(&server, &args);
    (server, controllers, tokens)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).to_string()
}

/// kubectl authenticating with a client certificate and key only.
fn with_certificate(server: &Server, cert: &Path, key: &Path, args: &[&str]) -> Output {
    let config = std::fs::read_to_string(&server.kubeconfig).unwrap();
    let url = config.lines().find_map(|l| l.trim().strip_prefix("server: ")).unwrap().to_string();
    let ca = server.data_dir().join("pki/ca.crt");
    Command::new(KUBECTL)
        .args(["--server", &url, "--certificate-authority", ca.to_str().unwrap()])
        .arg(format!("--client-certificate={}", cert.display()))
        .arg(format!("--client-key={}", key.display()))
        .args(args)
        .env("KUBECONFIG", "/dev/null")
        .env("KUBECACHEDIR", server.cache.path())
        .output()
        .unwrap()
}

#[test]
fn an_approved_request_yields_a_certificate_that_authenticates_its_subject() {
    for (backend, storage) in backends() {
        let (server, _controllers, _tokens) = signing_cluster(&storage);
        let dir = tempfile::tempdir().unwrap();
        let (key, pem) = openssl_request(dir.path(), "alice", "/CN=alice/O=devs");
        let created =
            server.apply_manifest(&manifest("alice", &pem, "kubernetes.io/kube-apiserver-client", "client auth"));
        assert!(created.contains("certificatesigningrequest.certificates.k8s.io/alice created"), "{created}");

        // The request records who made it, and waits.
        let csr = server.json(&["get", "csr", "alice"]);
        assert_eq!(csr["spec"]["username"], "admin", "{backend}: {csr}");
        assert!(csr["spec"]["groups"].as_array().unwrap().iter().any(|g| g == "system:masters"), "{csr}");
        let table = server.ok(&["get", "csr", "alice"]);
        let mut lines = table.lines();
        let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(header, ["NAME", "AGE", "SIGNERNAME", "REQUESTOR", "REQUESTEDDURATION", "CONDITION"], "{table}");
        let row: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
        assert_eq!(
            (row[0], row[2], row[3], row[4], row[5]),
            ("alice", "kubernetes.io/kube-apiserver-client", "admin", "24h", "Pending"),
            "{backend}: {table}"
        );
        assert!(server.json(&["get", "csr", "alice"])["status"]["certificate"].is_null());

        // Bob may write the approval but holds no approve verb for the signer: the CertificateApproval plugin's
        // answer.
        server.ok(&[
            "create",
            "clusterrole",
            "csr-writer",
            "--verb=get,list,update",
            "--resource=certificatesigningrequests,certificatesigningrequests/approval",
        ]);
        server.ok(&["create", "clusterrolebinding", "bob-csr", "--clusterrole=csr-writer", "--user=bob"]);
        let refused = server.with_token("bob-token", &["certificate", "approve", "alice"]);
        assert!(
            stderr(&refused).contains(
                r#"certificatesigningrequests.certificates.k8s.io "alice" is forbidden: user not permitted to approve requests with signerName "kubernetes.io/kube-apiserver-client""#
            ),
            "{backend}: {}",
            stderr(&refused)
        );

        let approved = server.ok(&["certificate", "approve", "alice"]);
        assert!(approved.contains("certificatesigningrequest.certificates.k8s.io/alice approved"), "{approved}");
        eventually(30, "the certificate issued", || {
            server.json(&["get", "csr", "alice"])["status"]["certificate"].as_str().is_some_and(|c| !c.is_empty())
        });
        let table = server.ok(&["get", "csr", "alice", "--no-headers"]);
        assert_eq!(table.split_whitespace().last(), Some("Approved,Issued"), "{backend}: {table}");
        let condition = &server.json(&["get", "csr", "alice"])["status"]["conditions"][0];
        assert_eq!((&condition["type"], &condition["reason"]), (&"Approved".into(), &"KubectlApprove".into()));

        let cert = dir.path().join("alice.crt");
        let issued = server.ok(&["get", "csr", "alice", "-o", "jsonpath={.status.certificate}"]);
        let decoded = nest_core::base64::decode(&issued).expect("status.certificate is base64");
        std::fs::write(&cert, &decoded).unwrap();
        // openssl reads what was issued: the subject asked for, signed by the cluster CA, for client auth only.
        let text = Command::new("openssl")
            .args(["x509", "-noout", "-subject", "-ext", "extendedKeyUsage", "-in"])
            .arg(&cert)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&text.stdout).to_string();
        assert!(text.contains("CN = alice") && text.contains("O = devs"), "{text}");
        assert!(text.contains("TLS Web Client Authentication") && !text.contains("Server"), "{text}");

        let whoami = with_certificate(&server, &cert, &key, &["auth", "whoami"]);
        let said = String::from_utf8_lossy(&whoami.stdout).to_string();
        assert!(whoami.status.success(), "{backend}: {}", stderr(&whoami));
        assert!(said.contains("alice") && said.contains("[devs system:authenticated]"), "{backend}: {said}");
    }
}

#[test]
fn requests_the_signers_refuse_get_no_certificate() {
    let (_, storage) = backends().remove(0);
    let (server, _controllers, _tokens) = signing_cluster(&storage);
    let dir = tempfile::tempdir().unwrap();

    // Nobody may ask the client signer for system:masters (CertificateSubjectRestriction), not even an admin.
    let (_, masters) = openssl_request(dir.path(), "root", "/CN=mallory/O=system:masters");
    let refused =
        server.create_refused(&manifest("root", &masters, "kubernetes.io/kube-apiserver-client", "client auth"));
    assert!(
        refused.contains(
            r#"certificatesigningrequests.certificates.k8s.io "root" is forbidden: use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed"#
        ),
        "{refused}"
    );

    // A serving certificate for something that is not a node: approved, then failed by the signer.
    let (_, web) = openssl_request(dir.path(), "web", "/CN=web/O=devs");
    server.apply_manifest(&manifest(
        "web",
        &web,
        "kubernetes.io/kubelet-serving",
        "digital signature, key encipherment, server auth",
    ));
    server.ok(&["certificate", "approve", "web"]);
    eventually(30, "the request failed", || {
        let conditions = server.json(&["get", "csr", "web"])["status"]["conditions"].clone();
        conditions.as_array().is_some_and(|c| c.iter().any(|c| c["type"] == "Failed"))
    });
    let csr = server.json(&["get", "csr", "web"]);
    let failed =
        csr["status"]["conditions"].as_array().unwrap().iter().find(|c| c["type"] == "Failed").unwrap().clone();
    assert_eq!(failed["reason"], "SignerValidationFailure", "{csr}");
    assert_eq!(failed["message"], "subject organization is not system:nodes", "{csr}");
    assert!(csr["status"]["certificate"].is_null(), "{csr}");
    let table = server.ok(&["get", "csr", "web", "--no-headers"]);
    assert_eq!(table.split_whitespace().last(), Some("Approved,Failed"), "{table}");

    // A denied request stays denied: approving it after is refused, and nothing is signed.
    let (_, carol) = openssl_request(dir.path(), "carol", "/CN=carol");
    server.apply_manifest(&manifest("carol", &carol, "kubernetes.io/kube-apiserver-client", "client auth"));
    let denied = server.ok(&["certificate", "deny", "carol"]);
    assert!(denied.contains("certificatesigningrequest.certificates.k8s.io/carol denied"), "{denied}");
    let again = server.kubectl(&["certificate", "approve", "carol"]);
    assert!(!again.status.success(), "{}", String::from_utf8_lossy(&again.stdout));
    std::thread::sleep(std::time::Duration::from_secs(2));
    let csr: Value = server.json(&["get", "csr", "carol"]);
    assert!(csr["status"]["certificate"].is_null(), "{csr}");
    assert_eq!(server.ok(&["get", "csr", "carol", "--no-headers"]).split_whitespace().last(), Some("Denied"));

    // The request itself never changes: an update of the spec is ignored, as kube-apiserver's strategy keeps the old
    // one.
    let patched =
        server.ok(&["patch", "csr", "carol", "--type=merge", "-p", r#"{"spec":{"signerName":"example.com/x"}}"#]);
    assert!(patched.contains("patched (no change)"), "{patched}");
    assert_eq!(server.json(&["get", "csr", "carol"])["spec"]["signerName"], "kubernetes.io/kube-apiserver-client");
}
