//! What every nest component does with a Kubernetes client, written once: [`connect`] from a kubeconfig, keep a
//! [`cache`] of what a watch reports, and read a request's outcome by what it means for a controller
//! ([`done_unless_gone_or_changed`], [`done_unless_refused`]); record [`events`] as client-go's recorder does; match
//! [`taints`] and tolerations as the API's helpers do; and keep a long-running part going past a panic
//! ([`supervise`]).
//! No component links another for these.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod events;
pub mod runtime_classes;
pub mod supervise;
pub mod taints;

use std::path::Path;

use anyhow::Context;
use futures_util::StreamExt;
use kube::runtime::{WatchStreamExt, reflector, watcher};

/// A cache of `api`'s objects (those `config` selects), kept by one watch as client-go's informers keep theirs: the
/// store, and the future that feeds it until it is dropped. A failing watch is retried with client-go's backoff,
/// never in a tight loop. Read the store after [`kube::runtime::reflector::Store::wait_until_ready`].
pub fn cache<K>(
    api: kube::Api<K>,
    config: watcher::Config,
) -> (reflector::Store<K>, impl std::future::Future<Output = ()> + Send + 'static)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    cache_then(api, config, watcher::DefaultBackoff::default(), |_| {})
}

/// What a watch saw happen to an object, once the cache holds it.
pub enum Seen<'a, K> {
    /// Created or changed (or listed when the watch began).
    Applied(&'a K),
    /// Deleted.
    Deleted(&'a K),
}

/// Like [`cache`], calling `then` with each object the watch reports, after the store has taken it in, and
/// retrying a failing watch with `backoff`.
pub fn cache_then<K, B, F>(
    api: kube::Api<K>,
    config: watcher::Config,
    backoff: B,
    mut then: F,
) -> (reflector::Store<K>, impl std::future::Future<Output = ()> + Send + 'static)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
    B: kube::runtime::utils::Backoff + Send + 'static,
    F: FnMut(Seen<'_, K>) + Send + 'static,
{
    let (store, writer) = reflector::store();
    let feed = reflector::reflector(writer, watcher(api, config).backoff(backoff)).for_each(move |event| {
        match event {
            Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => then(Seen::Applied(&object)),
            Ok(watcher::Event::Delete(object)) => then(Seen::Deleted(&object)),
            Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
            Err(error) => tracing::debug!(%error, "watch"),
        }
        async {}
    });
    (store, feed)
}

/// A client for a cluster, and what else its kubeconfig says that components use.
pub struct Connection {
    /// The client.
    pub client: kube::Client,
    /// The cluster's CA certificate (PEM; empty when the kubeconfig gives none), which controllers publish.
    pub ca_pem: String,
}

/// A client for the cluster `kubeconfig` names.
pub async fn connect(kubeconfig: &Path) -> anyhow::Result<Connection> {
    let file = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading the kubeconfig {}", kubeconfig.display()))?;
    let ca_pem = file
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.certificate_authority_data.as_deref())
        .map(|text| {
            nest_core::base64::decode_text(text)
                .context("the kubeconfig's certificate-authority-data is not base64 of a PEM certificate")
        })
        .transpose()?
        .unwrap_or_default();
    let config = kube::Config::from_custom_kubeconfig(file, &Default::default()).await?;
    Ok(Connection { client: kube::Client::try_from(config)?, ca_pem })
}

/// A client for the cluster `kubeconfig` names or, without one, for the cluster this process runs in as a pod (its
/// service account's token and CA, as client-go's `rest.InClusterConfig`): how the commands that run either beside
/// `nest up` or as a Deployment (`nest manager`, `nest syncer`) reach their cluster.
pub async fn connect_or_in_cluster(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    match kubeconfig {
        Some(kubeconfig) => Ok(connect(kubeconfig).await?.client),
        None => {
            let config = kube::Config::incluster().context("no --kubeconfig, and not running in a pod")?;
            Ok(kube::Client::try_from(config)?)
        }
    }
}

/// `Ok(true)` when the request was done; `Ok(false)` when its object was gone (404) or had changed (409)
/// meanwhile, which a level-based controller leaves to its next reconcile; every other outcome is an error.
pub fn done_unless_gone_or_changed<T>(result: kube::Result<T>) -> kube::Result<bool> {
    match result {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(false),
        Err(error) => Err(error),
    }
}

/// `Ok(true)` when the request was done; `Ok(false)` when the API server refused it, for any reason it answers
/// with a `Status` (gone, changed, invalid, forbidden…: the watch brings the news and the next reconcile acts on
/// it); an error only when the server could not be reached, which the caller retries.
pub fn done_unless_refused<T>(result: kube::Result<T>) -> kube::Result<bool> {
    match result {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(_)) => Ok(false),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(code: u16) -> kube::Result<()> {
        Err(kube::Error::Api(kube::core::Status::failure("no", "Reason").with_code(code).boxed()))
    }

    #[test]
    fn outcomes_are_read_by_what_they_mean() {
        assert!(done_unless_gone_or_changed(Ok::<_, kube::Error>(())).unwrap());
        assert!(!done_unless_gone_or_changed(refusal(404)).unwrap());
        assert!(!done_unless_gone_or_changed(refusal(409)).unwrap());
        assert!(done_unless_gone_or_changed(refusal(403)).is_err(), "a refusal is not a race");
        assert!(done_unless_gone_or_changed(refusal(422)).is_err());
        assert!(!done_unless_refused(refusal(403)).unwrap());
        assert!(!done_unless_refused(refusal(422)).unwrap());
        let unreachable: kube::Result<()> = Err(kube::Error::LinesCodecMaxLineLengthExceeded);
        assert!(done_unless_refused(unreachable).is_err());
    }
}
