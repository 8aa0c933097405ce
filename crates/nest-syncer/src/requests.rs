//! The requests an object's reconcile ([`crate::object`]) makes, as one small trait: every change it makes to the
//! super cluster or to a tenant goes through [`Requests`], so that the decisions can be unit-tested against an
//! in-memory fake (`fake::Recorder`, built for tests only) while the syncer itself uses [`Live`], which sends them.
//!
//! Besides the verbs on one object (`get`, `create`, `patch`, `patch_status`, `patch_subresource`, `delete`) it names the few things a
//! kind asks to exist before or after its own object (a namespace, a pod's token Secret, a virtual node): those are
//! whole procedures of their own ([`crate::namespaces`], [`crate::tokens`], [`crate::nodes`]) and are faked whole.

use std::time::Duration;

use futures_util::future::BoxFuture;
use kube::Resource as _;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};

use crate::Syncer;
use crate::tenants::Tenant;

/// Which cluster a request goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The management cluster, where the syncer's copies live.
    Super,
    /// The tenant's own API server.
    Tenant,
}

/// Where a request goes: a cluster, a kind and a namespace.
#[derive(Clone, Copy, Debug)]
pub struct At<'a> {
    pub side: Side,
    pub resource: &'a ApiResource,
    pub namespace: &'a str,
}

/// A change to an object's main endpoint.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// A JSON merge patch (RFC 7386).
    Merge(Value),
    /// A JSON Patch (RFC 6902): a list of operations, for what a merge patch cannot say (one item of a list).
    Json(Value),
}

/// The requests a reconcile makes. Errors are the API's (`kube::Error::Api` with the server's `Status`), so a fake
/// can answer as a server would.
pub trait Requests: Send + Sync {
    /// The object `name` whole, as the API serves it; `None` when it does not exist.
    fn get<'a>(&'a self, at: At<'a>, name: &'a str) -> BoxFuture<'a, kube::Result<Option<Value>>>;
    /// Creates `object` (a 409 when it exists).
    fn create<'a>(&'a self, at: At<'a>, object: Value) -> BoxFuture<'a, kube::Result<()>>;
    /// Changes object `name`'s main endpoint.
    fn patch<'a>(&'a self, at: At<'a>, name: &'a str, change: Change) -> BoxFuture<'a, kube::Result<()>>;
    /// Merges `patch` into object `name` through its status subresource.
    fn patch_status<'a>(&'a self, at: At<'a>, name: &'a str, patch: Value) -> BoxFuture<'a, kube::Result<()>>;
    /// Merges strategic merge patch `patch` into object `name` through its subresource `subresource` (a pod's
    /// `ephemeralcontainers`, which its main endpoint does not change).
    fn patch_subresource<'a>(
        &'a self,
        at: At<'a>,
        name: &'a str,
        subresource: &'a str,
        patch: Value,
    ) -> BoxFuture<'a, kube::Result<()>>;
    /// Deletes object `name`, with a grace period when `grace` says one.
    fn delete<'a>(&'a self, at: At<'a>, name: &'a str, grace: Option<u32>) -> BoxFuture<'a, kube::Result<()>>;
    /// Binds tenant pod `namespace/pod` to node `node` through `pods/binding`, as a scheduler does (a 409 when it
    /// is bound already).
    fn bind<'a>(&'a self, namespace: &'a str, pod: &'a str, node: &'a str) -> BoxFuture<'a, kube::Result<()>>;
    /// Makes sure tenant namespace `namespace` has its super namespace ([`crate::namespaces::ensure`]).
    fn ensure_namespace<'a>(&'a self, namespace: &'a str) -> BoxFuture<'a, kube::Result<()>>;
    /// Makes sure the tenant's virtual node `node` exists ([`crate::nodes::ensure_virtual_node`]).
    fn ensure_virtual_node<'a>(&'a self, node: &'a str) -> BoxFuture<'a, kube::Result<()>>;
    /// Makes sure tenant pod `pod`'s token Secret holds fresh tokens ([`crate::tokens::ensure`]); when to look again.
    fn ensure_tokens<'a>(
        &'a self,
        namespace: &'a str,
        super_namespace: &'a str,
        pod: &'a Value,
    ) -> BoxFuture<'a, kube::Result<Option<Duration>>>;
    /// Deletes tenant pod `pod`'s token Secret ([`crate::tokens::remove`]).
    fn remove_tokens<'a>(&'a self, super_namespace: &'a str, pod: &'a str) -> BoxFuture<'a, kube::Result<()>>;
}

/// The requests sent: to the super cluster with the syncer's client, to the tenant with the tenant's.
pub struct Live<'a> {
    pub syncer: &'a Syncer,
    pub tenant: &'a Tenant,
}

impl Live<'_> {
    fn client(&self, side: Side) -> kube::Client {
        match side {
            Side::Super => self.syncer.super_client.clone(),
            Side::Tenant => self.tenant.client.clone(),
        }
    }

    fn api(&self, at: At<'_>) -> Api<DynamicObject> {
        Api::namespaced_with(self.client(at.side), at.namespace, at.resource)
    }
}

impl Requests for Live<'_> {
    fn get<'a>(&'a self, at: At<'a>, name: &'a str) -> BoxFuture<'a, kube::Result<Option<Value>>> {
        Box::pin(async move {
            match self.api(at).get_opt(name).await? {
                Some(object) => Ok(Some(serde_json::to_value(object).map_err(kube::Error::SerdeError)?)),
                None => Ok(None),
            }
        })
    }

    fn create<'a>(&'a self, at: At<'a>, object: Value) -> BoxFuture<'a, kube::Result<()>> {
        Box::pin(async move {
            let object: DynamicObject = serde_json::from_value(object).map_err(kube::Error::SerdeError)?;
            self.api(at).create(&PostParams::default(), &object).await.map(|_| ())
        })
    }

    fn patch<'a>(&'a self, at: At<'a>, name: &'a str, change: Change) -> BoxFuture<'a, kube::Result<()>> {
        Box::pin(async move {
            match change {
                Change::Merge(patch) => {
                    self.api(at).patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(|_| ())
                }
                Change::Json(operations) => {
                    // kube's typed JSON Patch needs the json-patch crate; the body is sent as it is instead.
                    let path = format!("{}/{name}", DynamicObject::url_path(at.resource, Some(at.namespace)));
                    let request = http::Request::patch(path)
                        .header("content-type", "application/json-patch+json")
                        .body(serde_json::to_vec(&operations).map_err(kube::Error::SerdeError)?)
                        .map_err(kube::Error::HttpError)?;
                    self.client(at.side).request::<Value>(request).await.map(|_| ())
                }
            }
        })
    }

    fn patch_status<'a>(&'a self, at: At<'a>, name: &'a str, patch: Value) -> BoxFuture<'a, kube::Result<()>> {
        Box::pin(async move {
            self.api(at).patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await.map(|_| ())
        })
    }

    fn patch_subresource<'a>(
        &'a self,
        at: At<'a>,
        name: &'a str,
        subresource: &'a str,
        patch: Value,
    ) -> BoxFuture<'a, kube::Result<()>> {
        Box::pin(async move {
            let params = PatchParams::default();
            self.api(at).patch_subresource(subresource, name, &params, &Patch::Strategic(&patch)).await.map(|_| ())
        })
    }

    fn delete<'a>(&'a self, at: At<'a>, name: &'a str, grace: Option<u32>) -> BoxFuture<'a, kube::Result<()>> {
        Box::pin(async move {
            let params = DeleteParams { grace_period_seconds: grace, ..Default::default() };
            self.api(at).delete(name, &params).await.map(|_| ())
        })
    }

    fn bind<'a>(&'a self, namespace: &'a str, pod: &'a str, node: &'a str) -> BoxFuture<'a, kube::Result<()>> {
        Box::pin(async move {
            let binding = json!({
                "apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": pod, "namespace": namespace},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node},
            });
            let request = http::Request::post(format!("/api/v1/namespaces/{namespace}/pods/{pod}/binding"))
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&binding).map_err(kube::Error::SerdeError)?)
                .map_err(kube::Error::HttpError)?;
            self.tenant.client.request::<Value>(request).await.map(|_| ())
        })
    }

    fn ensure_namespace<'a>(&'a self, namespace: &'a str) -> BoxFuture<'a, kube::Result<()>> {
        Box::pin(crate::namespaces::ensure(self.syncer, self.tenant, namespace))
    }

    fn ensure_virtual_node<'a>(&'a self, node: &'a str) -> BoxFuture<'a, kube::Result<()>> {
        Box::pin(crate::nodes::ensure_virtual_node(self.syncer, self.tenant, node))
    }

    fn ensure_tokens<'a>(
        &'a self,
        namespace: &'a str,
        super_namespace: &'a str,
        pod: &'a Value,
    ) -> BoxFuture<'a, kube::Result<Option<Duration>>> {
        Box::pin(crate::tokens::ensure(self.syncer, self.tenant, namespace, super_namespace, pod))
    }

    fn remove_tokens<'a>(&'a self, super_namespace: &'a str, pod: &'a str) -> BoxFuture<'a, kube::Result<()>> {
        Box::pin(crate::tokens::remove(self.syncer, super_namespace, pod))
    }
}

/// An in-memory [`Requests`] for unit tests: it records every request, answers `get` from what it was given, and
/// refuses what it was told to refuse.
#[cfg(test)]
pub mod fake {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use super::*;

    /// What a [`Recorder`] was asked, one line per request: `"<side> <verb> <plural> <namespace>/<name> <body>"`.
    #[derive(Default)]
    pub struct Recorder {
        pub requests: Mutex<Vec<String>>,
        /// What `get` answers, by `(side, namespace, name)`.
        pub objects: Mutex<BTreeMap<(String, String, String), Value>>,
        /// Requests whose line starts with one of these are answered with this status code instead.
        pub refuse: Mutex<Vec<(String, u16)>>,
    }

    impl Recorder {
        /// The requests made so far, one line each.
        pub fn made(&self) -> Vec<String> {
            self.requests.lock().expect("the fake's lock").clone()
        }

        fn record(&self, line: String) -> kube::Result<()> {
            let refused =
                self.refuse.lock().expect("the fake's lock").iter().find(|(p, _)| line.starts_with(p)).cloned();
            self.requests.lock().expect("the fake's lock").push(line);
            match refused {
                Some((_, code)) => {
                    Err(kube::Error::Api(kube::core::Status::failure("refused", "Refused").with_code(code).boxed()))
                }
                None => Ok(()),
            }
        }
    }

    fn side(side: Side) -> &'static str {
        match side {
            Side::Super => "super",
            Side::Tenant => "tenant",
        }
    }

    fn line(at: At<'_>, verb: &str, name: &str, body: &Value) -> String {
        format!("{} {verb} {} {}/{name} {body}", side(at.side), at.resource.plural, at.namespace)
    }

    impl Requests for Recorder {
        fn get<'a>(&'a self, at: At<'a>, name: &'a str) -> BoxFuture<'a, kube::Result<Option<Value>>> {
            Box::pin(async move {
                self.record(line(at, "get", name, &Value::Null))?;
                let key = (side(at.side).to_string(), at.namespace.to_string(), name.to_string());
                Ok(self.objects.lock().expect("the fake's lock").get(&key).cloned())
            })
        }

        fn create<'a>(&'a self, at: At<'a>, object: Value) -> BoxFuture<'a, kube::Result<()>> {
            let name = object["metadata"]["name"].as_str().unwrap_or_default().to_string();
            Box::pin(async move { self.record(line(at, "create", &name, &object)) })
        }

        fn patch<'a>(&'a self, at: At<'a>, name: &'a str, change: Change) -> BoxFuture<'a, kube::Result<()>> {
            let (verb, body) = match change {
                Change::Merge(patch) => ("patch", patch),
                Change::Json(operations) => ("json-patch", operations),
            };
            Box::pin(async move { self.record(line(at, verb, name, &body)) })
        }

        fn patch_status<'a>(&'a self, at: At<'a>, name: &'a str, patch: Value) -> BoxFuture<'a, kube::Result<()>> {
            Box::pin(async move { self.record(line(at, "patch-status", name, &patch)) })
        }

        fn patch_subresource<'a>(
            &'a self,
            at: At<'a>,
            name: &'a str,
            subresource: &'a str,
            patch: Value,
        ) -> BoxFuture<'a, kube::Result<()>> {
            Box::pin(async move { self.record(line(at, &format!("patch-{subresource}"), name, &patch)) })
        }

        fn delete<'a>(&'a self, at: At<'a>, name: &'a str, grace: Option<u32>) -> BoxFuture<'a, kube::Result<()>> {
            Box::pin(async move { self.record(line(at, "delete", name, &json!(grace))) })
        }

        fn bind<'a>(&'a self, namespace: &'a str, pod: &'a str, node: &'a str) -> BoxFuture<'a, kube::Result<()>> {
            Box::pin(async move { self.record(format!("tenant bind pods {namespace}/{pod} {node}")) })
        }

        fn ensure_namespace<'a>(&'a self, namespace: &'a str) -> BoxFuture<'a, kube::Result<()>> {
            Box::pin(async move { self.record(format!("super ensure-namespace {namespace}")) })
        }

        fn ensure_virtual_node<'a>(&'a self, node: &'a str) -> BoxFuture<'a, kube::Result<()>> {
            Box::pin(async move { self.record(format!("tenant ensure-virtual-node {node}")) })
        }

        fn ensure_tokens<'a>(
            &'a self,
            _namespace: &'a str,
            super_namespace: &'a str,
            pod: &'a Value,
        ) -> BoxFuture<'a, kube::Result<Option<Duration>>> {
            let name = pod["metadata"]["name"].as_str().unwrap_or_default().to_string();
            Box::pin(async move {
                self.record(format!("super ensure-tokens {super_namespace}/{name}"))?;
                Ok(None)
            })
        }

        fn remove_tokens<'a>(&'a self, super_namespace: &'a str, pod: &'a str) -> BoxFuture<'a, kube::Result<()>> {
            Box::pin(async move { self.record(format!("super remove-tokens {super_namespace}/{pod}")) })
        }
    }
}
