//! ServiceAccount tokens (issue 19), as users of a cluster use them with kubectl 1.33: `kubectl create token` (a
//! TokenRequest) gives a token that authenticates as the ServiceAccount — refused by RBAC until a binding allows it,
//! named by `kubectl auth whoami` — for the API server's audience only, until the pod it is bound to goes; another
//! cluster refuses it; a TokenReview answers for it; OIDC discovery publishes the key that verifies its signature.

use std::process::Output;

use crate::common::{Server, backends};
use serde_json::Value;

/// kubectl against `server` with `token` as its only credential.
fn with_token(server: &Server, token: &str, args: &[&str]) -> Output {
    server.with_token(token, args)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

const UNAUTHORIZED: &str = "error: You must be logged in to the server (Unauthorized)";

#[test]
fn a_service_account_token_authenticates_as_its_account_for_as_long_as_what_it_is_bound_to() {
    for (backend, storage) in backends() {
        let server = Server::start(&storage);
        server.ok(&["create", "namespace", "team"]);
        server.ok(&["-n", "team", "create", "serviceaccount", "robot"]);
        server.ok(&["-n", "team", "create", "configmap", "settings", "--from-literal=k=v"]);
        let token = server.ok(&["-n", "team", "create", "token", "robot"]).trim().to_string();
        assert_eq!(token.split('.').count(), 3, "{backend}: not a JWT: {token}");

        // The ServiceAccount, refused until RBAC allows it.
        let out = with_token(&server, &token, &["-n", "team", "get", "configmaps"]);
        assert!(
            stderr(&out).contains(
                r#"configmaps is forbidden: User "system:serviceaccount:team:robot" cannot list resource "configmaps" in API group "" in the namespace "team""#
            ),
            "{backend}: {}",
            stderr(&out)
        );
        server.ok(&[
            "-n",
            "team",
            "create",
            "rolebinding",
            "robot-view",
            "--clusterrole=view",
            "--serviceaccount=team:robot",
        ]);
        let out = with_token(&server, &token, &["-n", "team", "get", "configmaps", "-o", "name"]);
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "configmap/settings", "{backend}: {}", stderr(&out));
        let out = with_token(&server, &token, &["auth", "whoami", "-o", "json"]);
        let whoami: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let info = &whoami["status"]["userInfo"];
        assert_eq!(info["username"], "system:serviceaccount:team:robot", "{backend}: {whoami} {}", stderr(&out));
        let groups: Vec<&str> = info["groups"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert_eq!(groups, ["system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated"]);

        // Bound to a pod: valid while the pod is, refused once it is gone.
        server.ok(&[
            "-n",
            "team",
            "run",
            "worker",
            "--image=nest",
            "--overrides",
            r#"{"spec":{"serviceAccountName":"robot"}}"#,
        ]);
        let bound = ["-n", "team", "create", "token", "robot", "--bound-object-kind=Pod", "--bound-object-name=worker"];
        let bound = server.ok(&bound).trim().to_string();
        assert!(with_token(&server, &bound, &["-n", "team", "get", "configmaps"]).status.success());
        server.ok(&["-n", "team", "delete", "pod", "worker", "--grace-period=0", "--force"]);
        let out = with_token(&server, &bound, &["-n", "team", "get", "configmaps"]);
        assert!(stderr(&out).contains(UNAUTHORIZED), "{backend}: a token of a deleted pod: {}", stderr(&out));
        // Deleting the ServiceAccount ends its tokens too.
        server.ok(&["-n", "team", "create", "serviceaccount", "brief"]);
        let brief = server.ok(&["-n", "team", "create", "token", "brief"]).trim().to_string();
        assert!(with_token(&server, &brief, &["auth", "whoami"]).status.success());
        server.ok(&["-n", "team", "delete", "serviceaccount", "brief"]);
        assert!(stderr(&with_token(&server, &brief, &["auth", "whoami"])).contains(UNAUTHORIZED));

        // For another audience: not for this server.
        let elsewhere = server.ok(&["-n", "team", "create", "token", "robot", "--audience=vault"]).trim().to_string();
        assert!(stderr(&with_token(&server, &elsewhere, &["auth", "whoami"])).contains(UNAUTHORIZED));
        // Bad requests get upstream's answers.
        let out = server.kubectl(&["-n", "team", "create", "token", "robot", "--duration=5m"]);
        assert!(stderr(&out).contains("may not specify a duration less than 10 minutes"), "{}", stderr(&out));
        let out = server.kubectl(&["-n", "team", "create", "token", "ghost"]);
        assert!(stderr(&out).contains(r#"serviceaccounts "ghost" not found"#), "{}", stderr(&out));

        // A TokenReview answers for a token, and against one it does not know.
        for (asked, authenticated) in [(&token, true), (&"not.a.token".to_string(), false)] {
            let review = format!(
                r#"{{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {{"token": "{asked}"}}}}"#
            );
            // kubectl validates a kind with no PATCH in /openapi/v3 against /openapi/v2, which nest does not serve.
            let create = ["create", "--validate=false", "-f", "-", "-o", "json"];
            let out = server.kubectl_with_input(&create, Some(&review));
            let answer: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
            let said = stderr(&out);
            assert_eq!(answer["status"]["authenticated"].as_bool().unwrap_or(false), authenticated, "{answer} {said}");
            if authenticated {
                assert_eq!(answer["status"]["user"]["username"], "system:serviceaccount:team:robot", "{answer}");
            }
        }

        // OIDC discovery: the issuer and its keys, readable by ServiceAccounts; the key verifies the token.
        let out = with_token(&server, &token, &["get", "--raw", "/.well-known/openid-configuration"]);
        let discovery: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        assert_eq!(discovery["issuer"], "https://kubernetes.default.svc.cluster.local", "{discovery} {}", stderr(&out));
        assert!(discovery["jwks_uri"].as_str().is_some_and(|u| u.ends_with("/openid/v1/jwks")), "{discovery}");
        let jwks: jsonwebtoken::jwk::JwkSet =
            serde_json::from_str(&server.ok(&["get", "--raw", "/openid/v1/jwks"])).unwrap();
        let header = jsonwebtoken::decode_header(&token).unwrap();
        let jwk = jwks.find(header.kid.as_deref().unwrap()).expect("the token's key is published");
        let mut validation = jsonwebtoken::Validation::new(header.alg);
        validation.set_audience(&["https://kubernetes.default.svc.cluster.local"]);
        let claims =
            jsonwebtoken::decode::<Value>(&token, &jsonwebtoken::DecodingKey::from_jwk(jwk).unwrap(), &validation);
        let claims =
            claims.unwrap_or_else(|e| panic!("{backend}: the published key does not verify the token: {e}")).claims;
        assert_eq!(claims["sub"], "system:serviceaccount:team:robot");
        assert_eq!(claims["kubernetes.io"]["namespace"], "team");

        // Another cluster, with its own key, takes none of this one's tokens.
        let other = Server::start(&storage);
        other.ok(&["create", "namespace", "team"]);
        other.ok(&["-n", "team", "create", "serviceaccount", "robot"]);
        assert!(stderr(&with_token(&other, &token, &["auth", "whoami"])).contains(UNAUTHORIZED), "{backend}");
    }
}
