//! The tables of the embedded store and how their values are laid out.
//!
//! - `kv`: key → the latest item (`create_revision`, `mod_revision`, value). Serves `get`, `count` and lists at the
//!   latest revision.
//! - `history`: (key, revision) → that version of the key (a put with its value, or a tombstone). Serves lists at an
//!   older revision and the values of replayed watch events. Compaction prunes it.
//! - `log`: revision → (put or delete, key). One row per revision, so a watch resumes by scanning a revision range.
//! - `meta`: the current revision and the compaction point.
//!
//! Integers are little-endian; lengths are implied by the row's size.

use bytes::Bytes;
use redb::TableDefinition;

use crate::{EventKind, KeyValue, Revision};

pub(crate) const KV: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");
pub(crate) const HISTORY: TableDefinition<(&[u8], u64), &[u8]> = TableDefinition::new("history");
pub(crate) const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

pub(crate) const META_REVISION: &str = "revision";
pub(crate) const META_COMPACTED: &str = "compacted";

const TAG_TOMBSTONE: u8 = 0;
const TAG_PUT: u8 = 1;

/// A `kv` row: create revision, mod revision, value.
pub(crate) fn encode_item(create: Revision, modified: Revision, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + value.len());
    out.extend_from_slice(&create.0.to_le_bytes());
    out.extend_from_slice(&modified.0.to_le_bytes());
    out.extend_from_slice(value);
    out
}

/// Reads a `kv` row back into an item.
pub(crate) fn decode_item(key: &[u8], row: &[u8]) -> Option<KeyValue> {
    if row.len() < 16 {
        return None;
    }
    Some(KeyValue {
        key: Bytes::copy_from_slice(key),
        create_revision: Revision(u64::from_le_bytes(row[0..8].try_into().ok()?)),
        mod_revision: Revision(u64::from_le_bytes(row[8..16].try_into().ok()?)),
        value: Bytes::copy_from_slice(&row[16..]),
    })
}

/// One version of a key in `history`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Version {
    Put {
        create_revision: Revision,
        value: Bytes,
    },
    /// The key was deleted; `create_revision` is that of the item deleted.
    Tombstone {
        create_revision: Revision,
    },
}

pub(crate) fn encode_put_version(create: Revision, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + value.len());
    out.push(TAG_PUT);
    out.extend_from_slice(&create.0.to_le_bytes());
    out.extend_from_slice(value);
    out
}

pub(crate) fn encode_tombstone(create: Revision) -> [u8; 9] {
    let mut out = [0u8; 9];
    out[0] = TAG_TOMBSTONE;
    out[1..].copy_from_slice(&create.0.to_le_bytes());
    out
}

pub(crate) fn decode_version(row: &[u8]) -> Option<Version> {
    let create_revision = Revision(u64::from_le_bytes(row.get(1..9)?.try_into().ok()?));
    match row[0] {
        TAG_PUT => Some(Version::Put { create_revision, value: Bytes::copy_from_slice(&row[9..]) }),
        TAG_TOMBSTONE => Some(Version::Tombstone { create_revision }),
        _ => None,
    }
}

/// A `log` row: the kind of change, then the key.
pub(crate) fn encode_log(kind: EventKind, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + key.len());
    out.push(match kind {
        EventKind::Delete => TAG_TOMBSTONE,
        EventKind::Put => TAG_PUT,
    });
    out.extend_from_slice(key);
    out
}

pub(crate) fn decode_log(row: &[u8]) -> Option<(EventKind, &[u8])> {
    let (&tag, key) = row.split_first()?;
    match tag {
        TAG_PUT => Some((EventKind::Put, key)),
        TAG_TOMBSTONE => Some((EventKind::Delete, key)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_round_trip() {
        let item = decode_item(b"/k", &encode_item(Revision(3), Revision(9), b"value")).unwrap();
        assert_eq!(
            (item.create_revision, item.mod_revision, &item.value[..]),
            (Revision(3), Revision(9), &b"value"[..])
        );
        assert_eq!(
            decode_version(&encode_put_version(Revision(4), b"v")),
            Some(Version::Put { create_revision: Revision(4), value: Bytes::from_static(b"v") })
        );
        assert_eq!(
            decode_version(&encode_tombstone(Revision(4))),
            Some(Version::Tombstone { create_revision: Revision(4) })
        );
        assert_eq!(decode_log(&encode_log(EventKind::Delete, b"/k")), Some((EventKind::Delete, &b"/k"[..])));
    }

    #[test]
    fn short_or_unknown_rows_are_rejected_not_misread() {
        assert!(decode_item(b"/k", &[0; 15]).is_none());
        assert!(decode_version(&[7; 9]).is_none());
        assert!(decode_version(&[1; 3]).is_none());
        assert!(decode_log(&[]).is_none());
    }
}
