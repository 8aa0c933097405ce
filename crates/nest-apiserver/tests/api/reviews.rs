//! The review kinds (issue 20): answered, never stored, as kube-apiserver 1.33 answers them. Upstream's answers and
//! errors were recorded from its source (`pkg/registry/authorization/*/rest.go`, `pkg/apis/authorization/validation`,
//! `plugin/pkg/auth/authorizer/rbac` and its describers, `pkg/registry/authentication/*`, the union authorizer with
//! the privileged group first) and are written here next to each request. Requests go over HTTPS with curl and the
//! admin's client certificate, so what is compared is what is on the wire.
//!
//! Kept apart on purpose: upstream's create handler also records `managedFields` on the access reviews it echoes,
//! and a self review of a certificate user carries the certificate's `credential-id` in `extra`; nest's do not.

use std::process::Command;

use crate::{KUBECTL, Server, Storage};
use serde_json::{Value, json};

fn post(server: &Server, path: &str, body: &Value) -> (u16, String) {
    server.post_raw(path, body)
}

const AUTHORIZATION: &str = "/apis/authorization.k8s.io/v1";

fn access(kind: &str, spec: Value) -> Value {
    json!({"apiVersion": "authorization.k8s.io/v1", "kind": kind, "spec": spec})
}

fn pods_in(namespace: &str) -> Value {
    json!({"verb": "get", "resource": "pods", "namespace": namespace})
}

/// The review's answer, which must be a 201, with what upstream's create handler adds that nest leaves out removed.
fn created(server: &Server, path: &str, body: &Value) -> Value {
    let (code, answer) = post(server, path, body);
    assert_eq!(code, 201, "{path} {body}: {answer}");
    let mut answer: Value = serde_json::from_str(&answer).unwrap();
    if let Some(metadata) = answer["metadata"].as_object_mut() {
        metadata.remove("managedFields");
    }
    answer
}

/// A refused review: the code, and the Status on the wire (Go's key order) compared whole.
fn refused(server: &Server, path: &str, body: &Value, code: u16, status: &str) {
    let (got, answer) = post(server, path, body);
    assert_eq!((got, answer.trim_end()), (code, status), "{path} {body}");
}

#[test]
fn access_reviews_answer_and_refuse_as_kube_apiserver_does() {
    let server = Server::start(&Storage::Embedded);
    server.ok(&["create", "role", "pod-reader", "--verb=get", "--resource=pods"]);
    server.ok(&["create", "rolebinding", "read-pods", "--role=pod-reader", "--user=alice"]);
    server.ok(&["create", "clusterrolebinding", "devs-view", "--clusterrole=view", "--group=devs"]);
    server.ok(&["create", "namespace", "ci"]);
    server.ok(&["create", "rolebinding", "ci", "-n", "ci", "--clusterrole=edit", "--serviceaccount=ci:builder"]);
    let sar = format!("{AUTHORIZATION}/subjectaccessreviews");

    // The admin is in system:masters, which the privileged-group authorizer allows with no reason.
    let review = access("SelfSubjectAccessReview", json!({"resourceAttributes": pods_in("default")}));
    assert_eq!(
        created(&server, &format!("{AUTHORIZATION}/selfsubjectaccessreviews"), &review),
        json!({"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
               "metadata": {"creationTimestamp": null},
               "spec": {"resourceAttributes": {"namespace": "default", "verb": "get", "resource": "pods"}},
               "status": {"allowed": true}})
    );
    // RBAC names the binding that allowed, the role, and the subject; nothing allowing is a bare false.
    let reason = |spec: Value| created(&server, &sar, &access("SubjectAccessReview", spec))["status"].clone();
    assert_eq!(
        reason(json!({"user": "alice", "resourceAttributes": pods_in("default")})),
        json!({"allowed": true, "reason": "RBAC: allowed by RoleBinding \"read-pods/default\" of Role \"pod-reader\" to User \"alice\""})
    );
    assert_eq!(
        reason(json!({"groups": ["devs"], "resourceAttributes": pods_in("default")})),
        json!({"allowed": true, "reason": "RBAC: allowed by ClusterRoleBinding \"devs-view\" of ClusterRole \"view\" to Group \"devs\""})
    );
    assert_eq!(
        reason(json!({"user": "system:serviceaccount:ci:builder", "groups": ["system:serviceaccounts"],
                      "resourceAttributes": {"verb": "create", "group": "apps", "resource": "deployments", "namespace": "ci"}})),
        json!({"allowed": true, "reason": "RBAC: allowed by RoleBinding \"ci/ci\" of ClusterRole \"edit\" to ServiceAccount \"builder/ci\""})
    );
    assert_eq!(
        reason(
            json!({"user": "alice", "resourceAttributes": {"verb": "get", "resource": "secrets", "namespace": "default"}})
        ),
        json!({"allowed": false})
    );
    let answer = created(
        &server,
        &format!("{AUTHORIZATION}/namespaces/default/localsubjectaccessreviews"),
        &access("LocalSubjectAccessReview", json!({"user": "alice", "resourceAttributes": pods_in("default")})),
    );
    assert_eq!(answer["metadata"], json!({"namespace": "default", "creationTimestamp": null}));
    assert_eq!(answer["status"]["allowed"], true);

    // What validation refuses, in upstream's words: the review's kind is empty in its errors.
    let invalid = |field: &str, message: &str| {
        format!(
            r#"{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure","message":".authorization.k8s.io \"\" is invalid: {field}: {}","reason":"Invalid","details":{{"group":"authorization.k8s.io","causes":[{{"reason":"FieldValueInvalid","message":"{}","field":"{field}"}}]}},"code":422}}"#,
            message.replace('"', "\\\""),
            message.replace('"', "\\\"")
        )
    };
    let neither =
        r#"Invalid value: "null": exactly one of nonResourceAttributes or resourceAttributes must be specified"#;
    refused(
        &server,
        &format!("{AUTHORIZATION}/selfsubjectaccessreviews"),
        &access("SelfSubjectAccessReview", json!({})),
        422,
        &invalid("spec.resourceAttributes", neither),
    );
    refused(
        &server,
        &format!("{AUTHORIZATION}/selfsubjectaccessreviews"),
        &access(
            "SelfSubjectAccessReview",
            json!({"resourceAttributes": pods_in("default"), "nonResourceAttributes": {"path": "/healthz", "verb": "get"}}),
        ),
        422,
        &invalid(
            "spec.nonResourceAttributes",
            r#"Invalid value: authorization.NonResourceAttributes{Path:"/healthz", Verb:"get"}: cannot be specified in combination with resourceAttributes"#,
        ),
    );
    let nobody = r#"Invalid value: "": at least one of user or group must be specified"#;
    refused(
        &server,
        &sar,
        &access("SubjectAccessReview", json!({"resourceAttributes": pods_in("default")})),
        422,
        &invalid("spec.user", nobody),
    );
    // Two errors are bracketed in the message, each a cause.
    let (code, answer) = post(&server, &sar, &access("SubjectAccessReview", json!({})));
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(code, 422);
    assert_eq!(
        answer["message"],
        format!(".authorization.k8s.io \"\" is invalid: [spec.resourceAttributes: {neither}, spec.user: {nobody}]")
    );
    assert_eq!(answer["details"]["causes"].as_array().unwrap().len(), 2);
    let local = format!("{AUTHORIZATION}/namespaces/default/localsubjectaccessreviews");
    refused(
        &server,
        &local,
        &access("LocalSubjectAccessReview", json!({"user": "alice", "resourceAttributes": pods_in("other")})),
        422,
        &invalid("spec.resourceAttributes.namespace", r#"Invalid value: "other": must match metadata.namespace"#),
    );
    refused(
        &server,
        &local,
        &access(
            "LocalSubjectAccessReview",
            json!({"user": "alice", "nonResourceAttributes": {"path": "/healthz", "verb": "get"}}),
        ),
        422,
        &invalid(
            "spec.nonResourceAttributes",
            r#"Invalid value: authorization.NonResourceAttributes{Path:"/healthz", Verb:"get"}: disallowed on this kind of request"#,
        ),
    );
    let mut elsewhere =
        access("LocalSubjectAccessReview", json!({"user": "alice", "resourceAttributes": pods_in("default")}));
    elsewhere["metadata"] = json!({"namespace": "ci"});
    refused(
        &server,
        &local,
        &elsewhere,
        400,
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"the namespace of the provided object does not match the namespace sent on the request","reason":"BadRequest","code":400}"#,
    );
}

#[test]
fn rules_self_and_token_reviews_answer_as_kube_apiserver_does() {
    let server = Server::start(&Storage::Embedded);
    // A rules review is a new object: the namespace asked about is not echoed, and one must be asked about.
    let rules = format!("{AUTHORIZATION}/selfsubjectrulesreviews");
    let answer = created(&server, &rules, &access("SelfSubjectRulesReview", json!({"namespace": "default"})));
    assert_eq!((&answer["metadata"], &answer["spec"]), (&json!({"creationTimestamp": null}), &json!({})));
    assert!(
        answer["status"]["resourceRules"]
            .as_array()
            .unwrap()
            .contains(&json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}))
    );
    assert_eq!(answer["status"]["incomplete"], false);
    refused(
        &server,
        &rules,
        &access("SelfSubjectRulesReview", json!({})),
        400,
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"no namespace on request","reason":"BadRequest","code":400}"#,
    );

    // A self review is a new object made now.
    let answer = created(
        &server,
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}),
    );
    assert!(answer["metadata"]["creationTimestamp"].as_str().is_some_and(|t| t.ends_with('Z')), "{answer}");
    assert_eq!(
        answer["status"],
        json!({"userInfo": {"username": "admin", "groups": ["system:masters", "system:authenticated"]}})
    );
    assert!(answer.get("spec").is_none(), "a self review has no spec: {answer}");

    // A token nobody issued is reviewed (201), not refused; no token at all is a bad request.
    let tokens = "/apis/authentication.k8s.io/v1/tokenreviews";
    let review = |token: &str| json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}});
    assert_eq!(
        created(&server, tokens, &review("garbage")),
        json!({"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1", "metadata": {"creationTimestamp": null},
               "spec": {"token": "garbage"}, "status": {"user": {}, "error": "invalid bearer token"}})
    );
    refused(
        &server,
        tokens,
        &review(""),
        400,
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"token is required for TokenReview in authentication","reason":"BadRequest","code":400}"#,
    );
    // `kubectl create -f` of a review: kubectl finds no PATCH for the kind in /openapi/v3, so it reads /openapi/v2
    // (protobuf) and validates on the client, as against kube-apiserver — a field the kind lacks is refused there.
    let review = r#"{"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                     "spec": {"resourceAttributes": {"verb": "get", "resource": "pods", "namespace": "default"}}}"#;
    let answer: Value =
        serde_json::from_str(&server.ok_with_input(&["create", "-f", "-", "-o", "json"], review)).unwrap();
    assert_eq!(answer["status"], json!({"allowed": true}));
    let bogus = review.replace(r#""verb": "get""#, r#""verb": "get", "bogus": 1"#);
    let out = server.kubectl_with_input(&["create", "-f", "-"], Some(&bogus));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains(r#"unknown field "bogus" in io.k8s.api.authorization.v1.ResourceAttributes"#), "{said}");
    // kubectl's own way in keeps working.
    let who = Command::new(KUBECTL)
        .args(["auth", "whoami", "-o", "jsonpath={.status.userInfo.username}"])
        .env("KUBECONFIG", &server.kubeconfig)
        .env("KUBECACHEDIR", server.cache.path())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&who.stdout), "admin");
}
