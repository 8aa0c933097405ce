//! A store that keeps all of its keys under a prefix of another store, so several control planes can share one
//! backend (for example one etcd) without seeing each other's keys — kube-apiserver's `--etcd-prefix`.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::StreamExt;

use crate::{Deleted, Event, KeyValue, ListOptions, ListResult, Result, Revision, Store, WatchStream};

/// `inner`, seen through `prefix`: every key given is stored as `prefix + key`, and comes back without it.
pub struct Prefixed {
    inner: Arc<dyn Store>,
    prefix: Bytes,
}

impl Prefixed {
    pub fn new(inner: Arc<dyn Store>, prefix: impl Into<Bytes>) -> Prefixed {
        Prefixed { inner, prefix: prefix.into() }
    }

    fn outer(&self, key: &[u8]) -> Vec<u8> {
        [&self.prefix[..], key].concat()
    }

    fn strip(&self, key: Bytes) -> Bytes {
        key.slice(self.prefix.len().min(key.len())..)
    }

    fn item(&self, mut item: KeyValue) -> KeyValue {
        item.key = self.strip(item.key);
        item
    }
}

#[async_trait]
impl Store for Prefixed {
    async fn get(&self, key: &[u8]) -> Result<Option<KeyValue>> {
        crate::check_key(key)?;
        Ok(self.inner.get(&self.outer(key)).await?.map(|item| self.item(item)))
    }

    async fn list(&self, prefix: &[u8], mut options: ListOptions) -> Result<ListResult> {
        options.start_after = options.start_after.map(|k| Bytes::from(self.outer(&k)));
        let mut result = self.inner.list(&self.outer(prefix), options).await?;
        result.items = result.items.into_iter().map(|item| self.item(item)).collect();
        Ok(result)
    }

    async fn create(&self, key: &[u8], value: Bytes) -> Result<KeyValue> {
        crate::check_key(key)?;
        Ok(self.item(self.inner.create(&self.outer(key), value).await?))
    }

    async fn update(&self, key: &[u8], value: Bytes, expected: Revision) -> Result<KeyValue> {
        crate::check_key(key)?;
        match self.inner.update(&self.outer(key), value, expected).await {
            Ok(item) => Ok(self.item(item)),
            Err(crate::Error::Conflict { expected, current }) => {
                Err(crate::Error::Conflict { expected, current: Box::new(self.item(*current)) })
            }
            Err(e) => Err(e),
        }
    }

    async fn delete(&self, key: &[u8], expected: Option<Revision>) -> Result<Deleted> {
        crate::check_key(key)?;
        match self.inner.delete(&self.outer(key), expected).await {
            Ok(deleted) => Ok(Deleted { revision: deleted.revision, prev: self.item(deleted.prev) }),
            Err(crate::Error::Conflict { expected, current }) => {
                Err(crate::Error::Conflict { expected, current: Box::new(self.item(*current)) })
            }
            Err(e) => Err(e),
        }
    }

    async fn watch(&self, prefix: &[u8], from: Revision) -> Result<WatchStream> {
        let strip = self.prefix.len();
        let stream = self.inner.watch(&self.outer(prefix), from).await?;
        Ok(stream
            .map(move |item| {
                item.map(|mut event: Event| {
                    event.key = event.key.slice(strip.min(event.key.len())..);
                    event
                })
            })
            .boxed())
    }

    async fn current_revision(&self) -> Result<Revision> {
        self.inner.current_revision().await
    }

    async fn count(&self, prefix: &[u8]) -> Result<u64> {
        self.inner.count(&self.outer(prefix)).await
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.inner.compact(revision).await
    }

    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    async fn check(&self) -> Result<()> {
        self.inner.check().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embedded::EmbeddedStore;

    #[tokio::test]
    async fn two_prefixes_share_a_store_without_seeing_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let shared: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path(), Default::default()).unwrap());
        let a = Prefixed::new(shared.clone(), "/tenant-a");
        let b = Prefixed::new(shared.clone(), "/tenant-b");
        let start = shared.current_revision().await.unwrap().next();
        let mut watch_a = a.watch(b"/registry/", start).await.unwrap();
        let created = a.create(b"/registry/x", "1".into()).await.unwrap();
        assert_eq!(&created.key[..], b"/registry/x");
        b.create(b"/registry/x", "2".into()).await.unwrap();
        assert_eq!(a.get(b"/registry/x").await.unwrap().unwrap().value, Bytes::from("1"));
        assert_eq!(a.list(b"/registry/", ListOptions::default()).await.unwrap().items.len(), 1);
        assert_eq!(shared.count(b"/tenant-").await.unwrap(), 2);
        let event = watch_a.next().await.unwrap().unwrap();
        assert_eq!((&event.key[..], &event.value[..]), (&b"/registry/x"[..], &b"1"[..]));
        match a.update(b"/registry/x", "3".into(), Revision(999)).await {
            Err(crate::Error::Conflict { current, .. }) => assert_eq!(&current.key[..], b"/registry/x"),
            other => panic!("expected a conflict, got {other:?}"),
        }
    }
}
