//! Behaviour of the embedded backend that the shared conformance suite cannot express: its data directory.

use std::time::Duration;

use futures_util::StreamExt;
use nest_storage::embedded::{Config, DATABASE_FILE, EmbeddedStore};
use nest_storage::{Error, ListOptions, Revision, Store};

#[tokio::test]
async fn reopening_keeps_items_and_revisions_keep_growing() {
    let dir = tempfile::tempdir().unwrap();
    let written = {
        let store = EmbeddedStore::open(dir.path(), Config::default()).unwrap();
        store.create(b"/registry/a", "1".into()).await.unwrap();
        store.create(b"/registry/b", "2".into()).await.unwrap()
    };
    let store = EmbeddedStore::open(dir.path(), Config::default()).unwrap();
    assert_eq!(store.current_revision().await.unwrap(), written.mod_revision);
    assert_eq!(store.list(b"/registry/", ListOptions::default()).await.unwrap().items.len(), 2);
    let next = store.create(b"/registry/c", "3".into()).await.unwrap();
    assert!(next.mod_revision > written.mod_revision);
}

#[tokio::test]
async fn a_directory_in_use_gives_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let _first = EmbeddedStore::open(dir.path(), Config::default()).unwrap();
    let error = EmbeddedStore::open(dir.path(), Config::default()).err().expect("a second open must fail");
    assert!(matches!(error, Error::Locked { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("locked by another process") && !message.contains('\n'), "{message}");
}

#[tokio::test]
async fn a_file_that_is_not_a_database_gives_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(DATABASE_FILE), b"this is not a database, just some text\n".repeat(200)).unwrap();
    let error = EmbeddedStore::open(dir.path(), Config::default()).err().expect("opening garbage must fail");
    assert!(matches!(error, Error::Corrupt { .. }), "{error:?}");
    assert!(!error.to_string().contains('\n'), "{error}");
}

#[tokio::test]
async fn a_damaged_database_gives_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = EmbeddedStore::open(dir.path(), Config::default()).unwrap();
        for i in 0..200 {
            store.create(format!("/registry/k{i}").as_bytes(), vec![b'x'; 500].into()).await.unwrap();
        }
    }
    // Overwrite a stretch past the header, where the tables' pages are.
    let path = dir.path().join(DATABASE_FILE);
    let mut bytes = std::fs::read(&path).unwrap();
    let len = bytes.len();
    for b in &mut bytes[len / 3..len / 3 + 8192] {
        *b = 0xA5;
    }
    std::fs::write(&path, bytes).unwrap();
    let error = EmbeddedStore::open(dir.path(), Config::default()).err().expect("a damaged file must not open");
    assert!(matches!(error, Error::Corrupt { .. }), "{error:?}");
    assert!(!error.to_string().contains('\n'), "{error}");
}

#[tokio::test]
async fn background_compaction_keeps_the_configured_history() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::default().retain_revisions(20).compaction_interval(Duration::from_millis(20));
    let store = EmbeddedStore::open(dir.path(), config).unwrap();
    let mut kv = store.create(b"/registry/counter", "0".into()).await.unwrap();
    for i in 1..100 {
        kv = store.update(b"/registry/counter", i.to_string().into(), kv.mod_revision).await.unwrap();
    }
    let current = kv.mod_revision;
    // Compaction runs when the writer is idle; wait until the oldest revisions are gone.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut watch = store.watch(b"/registry/", Revision(1)).await.unwrap();
        if let Some(Err(Error::Compacted { .. })) = watch.next().await {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "history was never compacted");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The last 20 revisions are still there to resume from.
    let from = Revision(current.0 - 19);
    let mut watch = store.watch(b"/registry/", from).await.unwrap();
    let first = watch.next().await.unwrap().unwrap();
    assert_eq!(first.revision, from);
}
