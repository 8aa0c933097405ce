//! Resources that stored objects define (CustomResourceDefinitions): what is served is the built-ins plus what the
//! stored objects of every kind that [`Strategy::defines_resources`](crate::strategy::Strategy::defines_resources)
//! define, made again whenever one of them changes, whoever changed it.

use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures_util::StreamExt;
use nest_storage::{Revision, Store};
use serde_json::Value;

use crate::error::{Result, StorageResult};
use crate::serving::{Kinds, Serving};

use super::Registry;

/// Reads the stored definitions and installs what they make; returns the earliest revision read at, from which a
/// watch misses no change to any of them.
pub(super) async fn load(store: &dyn Store, kinds: &Kinds, serving: &RwLock<Arc<Serving>>) -> Result<Revision> {
    let mut defined = Vec::new();
    let mut earliest: Option<Revision> = None;
    for definer in kinds.definers() {
        let prefix = Registry::prefix(&definer.info, None);
        let listed = store.list(prefix.as_bytes(), nest_storage::ListOptions::default()).await.storage()?;
        earliest = Some(earliest.map_or(listed.revision, |e| e.min(listed.revision)));
        let objects = listed.items.iter().filter_map(|item| serde_json::from_slice::<Value>(&item.value).ok());
        defined.extend(objects.flat_map(|object| definer.strategy.defined_resources(&object)));
    }
    let made = kinds.serving_with(defined);
    *serving.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(made);
    Ok(earliest.unwrap_or_default())
}

/// Loads again whenever a definition changes in storage; each kind that defines resources is watched from `from`.
pub(super) async fn follow(
    store: Arc<dyn Store>,
    kinds: Arc<Kinds>,
    serving: Arc<RwLock<Arc<Serving>>>,
    from: Revision,
) {
    let prefixes: Vec<String> = kinds.definers().map(|definer| Registry::prefix(&definer.info, None)).collect();
    let watches = prefixes.into_iter().map(|prefix| follow_one(&store, &kinds, &serving, prefix, from));
    futures_util::future::join_all(watches).await;
}

async fn follow_one(
    store: &Arc<dyn Store>,
    kinds: &Kinds,
    serving: &RwLock<Arc<Serving>>,
    prefix: String,
    mut from: Revision,
) {
    loop {
        let mut changes = match store.watch(prefix.as_bytes(), from).await {
            Ok(changes) => changes,
            Err(_) => return,
        };
        while let Some(change) = changes.next().await {
            match change {
                Ok(event) => {
                    from = event.revision.next();
                    if let Err(error) = load(store.as_ref(), kinds, serving).await {
                        tracing::warn!(%error, "reloading resource definitions");
                    }
                }
                Err(nest_storage::Error::Closed) => return,
                Err(error) => {
                    // Fell behind or history was compacted: reload everything and watch again from there.
                    tracing::debug!(%error, "definitions watch ended; reloading");
                    break;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        match load(store.as_ref(), kinds, serving).await {
            Ok(revision) => from = revision.next(),
            Err(error) => tracing::warn!(%error, "reloading resource definitions"),
        }
    }
}
