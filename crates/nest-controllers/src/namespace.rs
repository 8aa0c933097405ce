//! Namespace lifecycle, after kube-controller-manager's namespace controller (`pkg/controller/namespace`, 1.33): a
//! namespace being deleted is emptied — every namespaced resource the server serves, custom ones included — and once
//! nothing is left, the `kubernetes` finalizer is removed through the `finalize` subresource, which lets the API
//! server delete it.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::discovery::{Discovery, Scope, verbs};
use kube::runtime::controller::Action;
use kube::{Client, ResourceExt};

use crate::informers::Informers;
use crate::reconciling::Reconciling;

/// The finalizer this controller owns.
const FINALIZER: &str = "kubernetes";

struct Context {
    client: Client,
}

/// Runs the controller until the process stops.
pub(crate) async fn run(client: Client, caches: Informers) {
    let context = Arc::new(Context { client });
    let results = Reconciling::new(&caches.namespaces).run(reconcile, error_policy, context);
    crate::drive(results, "namespace").await;
}

#[derive(Debug)]
struct Error(anyhow::Error);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#}", self.0)
    }
}

impl std::error::Error for Error {}

impl From<kube::Error> for Error {
    fn from(error: kube::Error) -> Error {
        Error(error.into())
    }
}

fn error_policy(_: Arc<Namespace>, error: &Error, _: Arc<Context>) -> Action {
    tracing::warn!(%error, "emptying a namespace");
    Action::requeue(Duration::from_secs(2))
}

async fn reconcile(namespace: Arc<Namespace>, context: Arc<Context>) -> Result<Action, Error> {
    let finalizers = namespace.spec.as_ref().and_then(|s| s.finalizers.clone()).unwrap_or_default();
    if namespace.metadata.deletion_timestamp.is_none() || !finalizers.iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let name = namespace.name_any();
    let remaining = empty(&context.client, &name).await?;
    if remaining > 0 {
        // Objects with finalizers of their own: their controllers remove those; look again shortly.
        tracing::debug!(namespace = %name, remaining, "waiting for the namespace's objects to go");
        return Ok(Action::requeue(Duration::from_secs(1)));
    }
    let mut finalized = (*namespace).clone();
    finalized.spec.get_or_insert_with(Default::default).finalizers =
        Some(finalizers.into_iter().filter(|f| f != FINALIZER).collect());
    let namespaces: Api<Namespace> = Api::all(context.client.clone());
    match namespaces.replace_subresource("finalize", &name, &PostParams::default(), &finalized).await {
        Ok(_) => tracing::info!(namespace = %name, "namespace emptied and finalized"),
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(error) => return Err(error.into()),
    }
    Ok(Action::await_change())
}

/// Deletes everything in namespace `name`; returns how many objects are still there.
///
/// Unlike the other controllers this lists over HTTP, as upstream's namespaced-resources deleter does: it needs
/// every namespaced kind the server serves (custom ones included, found by discovery at that moment), and only
/// while a namespace is being deleted; a cache of every kind, kept all the time for that, would cost far more.
async fn empty(client: &Client, name: &str) -> Result<usize, Error> {
    let discovery = Discovery::new(client.clone()).run().await?;
    let mut remaining = 0;
    for group in discovery.groups() {
        for (resource, capabilities) in group.recommended_resources() {
            if capabilities.scope != Scope::Namespaced
                || !capabilities.supports_operation(verbs::LIST)
                || !capabilities.supports_operation(verbs::DELETE)
                || resource.plural == "events" && resource.group == "events.k8s.io"
            {
                continue;
            }
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), name, &resource);
            let objects = match api.list(&ListParams::default()).await {
                Ok(objects) => objects,
                Err(kube::Error::Api(status)) if status.code == 404 => continue,
                Err(error) => return Err(error.into()),
            };
            for object in objects.items.iter().filter(|o| o.metadata.deletion_timestamp.is_none()) {
                match api.delete(&object.name_any(), &DeleteParams::background()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 404 => {}
                    Err(error) => return Err(error.into()),
                }
            }
            // What is still there is held by finalizers of its own.
            remaining += api.list(&ListParams::default()).await.map(|l| l.items.len()).unwrap_or(0);
        }
    }
    Ok(remaining)
}
