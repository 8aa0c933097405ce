//! Logs through the tenant: each tenant's virtual nodes point (InternalIP and kubelet port) at an endpoint of the
//! syncer, one per tenant. It serves the kubelet API's `/containerLogs` with a certificate from *that tenant's* CA,
//! answers only that tenant's API server (its kubelet client certificate, verified against the tenant's CA), and
//! streams the mapped super pod's `pods/log` from the super cluster. So `kubectl logs` in a tenant works for synced
//! pods, and no other tenant (nor anyone else) can read them through it.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::AsyncBufReadExt;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::{Request, Response, StatusCode};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use nest_node::kubelet::{Body, Tls, text};

use crate::names::{self, TENANT_LABEL};
use crate::{Syncer, tenants};

/// The query parameters the kubelet's `/containerLogs` and the API's `pods/log` share.
const PASSED_ON: &[&str] = &["follow", "tailLines", "sinceSeconds", "timestamps", "previous", "limitBytes"];

/// Starts tenant `key`'s endpoint on the syncer's kubelet address; returns its port and the task serving it.
pub async fn start(
    syncer: &Arc<Syncer>,
    namespace: &str,
    cluster: &str,
    key: &str,
) -> tenants::Result<(u16, tokio::task::JoinHandle<()>)> {
    let secrets: Api<Secret> = Api::namespaced(syncer.super_client.clone(), namespace);
    let secret = secrets.get(&format!("{cluster}-ca")).await?;
    let field = |name: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(name))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .unwrap_or_default()
    };
    let ca = nest_pki::Ca(nest_pki::Pair { cert: field("tls.crt"), key: field("tls.key") });
    let address = syncer.options.kubelet_address;
    let leaf = nest_pki::Leaf {
        common_name: "nest-syncer",
        organization: None,
        names: vec![address.to_string()],
        usage: nest_pki::Usage::Server,
        validity: nest_pki::LEAF_VALIDITY,
    };
    let pair = ca.issue(&leaf).map_err(|e| tenants::Error::Certificate(e.to_string()))?;
    let tls = Tls { cert: pair.cert, key: pair.key, client_ca: ca.0.cert.clone() };
    let listener =
        tokio::net::TcpListener::bind((address, 0)).await.map_err(|e| tenants::Error::Certificate(e.to_string()))?;
    let port = listener.local_addr().map_err(|e| tenants::Error::Certificate(e.to_string()))?.port();
    let (syncer, key) = (syncer.clone(), key.to_string());
    let task = tokio::spawn(async move {
        let served = nest_node::kubelet::serve_with(listener, tls, move |request| {
            let (syncer, key) = (syncer.clone(), key.clone());
            async move { handle(&syncer, &key, request).await }
        });
        if let Err(error) = served.await {
            tracing::warn!(%error, "a tenant's kubelet endpoint stopped");
        }
    });
    Ok((port, task))
}

async fn handle(syncer: &Syncer, key: &str, request: Request<hyper::body::Incoming>) -> Response<Body> {
    let path = request.uri().path().to_string();
    if path == "/healthz" {
        return text(StatusCode::OK, "ok\n");
    }
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let ["containerLogs", namespace, pod, container] = parts[..] else {
        return text(StatusCode::NOT_FOUND, format!("{path} is not served here\n"));
    };
    // Only a pod this tenant owns.
    let super_namespace = names::super_namespace(key, namespace);
    let Some(pods) = syncer.kinds.iter().position(|k| k.name == "pods") else {
        return text(StatusCode::NOT_FOUND, "no pods\n");
    };
    let reference = ObjectRef::new_with(pod, syncer.kinds[pods].resource.clone()).within(&super_namespace);
    let owned = syncer.super_objects[pods]
        .get(&reference)
        .is_some_and(|p| p.metadata.labels.as_ref().and_then(|l| l.get(TENANT_LABEL)).map(String::as_str) == Some(key));
    if !owned {
        return text(StatusCode::NOT_FOUND, format!("pod {namespace}/{pod} is not running in the super cluster\n"));
    }
    let query: Vec<String> = request
        .uri()
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|pair| PASSED_ON.iter().any(|name| pair.split('=').next() == Some(name)))
        .map(str::to_string)
        .chain(std::iter::once(format!("container={container}")))
        .collect();
    let url = format!("/api/v1/namespaces/{super_namespace}/pods/{pod}/log?{}", query.join("&"));
    let Ok(request) = http::Request::get(url).body(Vec::new()) else {
        return text(StatusCode::BAD_REQUEST, "a bad request\n");
    };
    match syncer.super_client.request_stream(request).await {
        Ok(reader) => {
            let body = futures_util::stream::unfold(Box::pin(reader), |mut reader| async move {
                let chunk = match reader.as_mut().fill_buf().await {
                    Ok([]) | Err(_) => return None,
                    Ok(data) => Bytes::copy_from_slice(data),
                };
                reader.as_mut().consume_unpin(chunk.len());
                Some((Ok(Frame::data(chunk)), reader))
            });
            let mut response = Response::new(BodyExt::boxed_unsync(StreamBody::new(body)));
            response.headers_mut().insert("content-type", "text/plain".parse().expect("a header value"));
            response
        }
        Err(kube::Error::Api(status)) => {
            let code = StatusCode::from_u16(status.code).unwrap_or(StatusCode::BAD_GATEWAY);
            text(code, format!("{}\n", status.message))
        }
        Err(error) => text(StatusCode::BAD_GATEWAY, format!("the super cluster: {error}\n")),
    }
}
