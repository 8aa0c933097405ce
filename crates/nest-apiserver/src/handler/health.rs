//! `/livez`, `/readyz` and `/healthz`, and their single checks (`/readyz/etcd`).

use hyper::header::HeaderValue;
use hyper::{Response, StatusCode};
use nest_registry::ApiError;

use super::response::{error_response, full};
use super::{Body, State};

/// Answers a health endpoint as kube-apiserver does: `ok`, or with `?verbose` a line per check; a failing check
/// makes a 500 naming it (the reason withheld, as upstream does for anonymous askers). `livez` does not check
/// storage: a server whose etcd is away is alive, and restarting it would not bring etcd back.
pub(super) async fn health(state: &State, path: &str, query: &str) -> Response<Body> {
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let endpoint = parts.next().unwrap_or_default();
    let only = parts.next().filter(|c| !c.is_empty());
    let mut checks = vec![("ping", true)];
    if endpoint != "livez" {
        let storage = state.registry.check_storage().await;
        if let Err(error) = &storage {
            tracing::warn!(%error, "the etcd health check failed");
        }
        checks.push(("etcd", storage.is_ok()));
    }
    let checks: Vec<(&str, bool)> = match only {
        Some(name) => match checks.iter().find(|(check, _)| *check == name) {
            Some(found) => vec![*found],
            None => return error_response(&ApiError::no_route()),
        },
        None => checks,
    };
    let passed = checks.iter().all(|(_, ok)| *ok);
    let verbose = query.split('&').any(|pair| pair == "verbose" || pair.starts_with("verbose="));
    let mut text = String::new();
    if verbose || !passed {
        for (name, ok) in &checks {
            text.push_str(&if *ok {
                format!("[+]{name} ok\n")
            } else {
                format!("[-]{name} failed: reason withheld\n")
            });
        }
        text.push_str(&format!("{endpoint} check {}\n", if passed { "passed" } else { "failed" }));
    } else {
        text.push_str("ok");
    }
    let mut response = Response::new(full(text));
    if !passed {
        *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    }
    response.headers_mut().insert("content-type", HeaderValue::from_static("text/plain; charset=utf-8"));
    response.headers_mut().insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    response
}
