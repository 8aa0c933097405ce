//! The tables of the embedded store and how their values are laid out.
//!
//! - `history`: (key, revision) → that version of the key (a put with its value, or a tombstone). The newest version
//!   of a key is its current state, so this one table serves `get`, `list` at any retained revision, `count` and the
//!   values of replayed watch events; each value is stored once. Compaction prunes old versions.
//! - `log`: revision → (put or delete, key). One row per revision, so a watch resumes by scanning a revision range.
//! - `meta`: the current revision and the compaction point.
//!
//! Integers are little-endian; lengths are implied by the row's size.

use bytes::Bytes;
use redb::{ReadableTable, TableDefinition};

use crate::{EventKind, KeyValue, Revision};

pub(crate) const HISTORY: TableDefinition<(&[u8], u64), &[u8]> = TableDefinition::new("history");
pub(crate) const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
pub(crate) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

pub(crate) const META_REVISION: &str = "revision";
pub(crate) const META_COMPACTED: &str = "compacted";

const TAG_TOMBSTONE: u8 = 0;
const TAG_PUT: u8 = 1;

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

/// The newest version of `key` at or before `at`, if the key existed then.
pub(crate) fn item_at(
    history: &impl ReadableTable<(&'static [u8], u64), &'static [u8]>,
    key: &[u8],
    at: Revision,
) -> Result<Option<KeyValue>, redb::Error> {
    let Some(row) = history.range((key, 0)..=(key, at.0))?.next_back() else { return Ok(None) };
    let (id, row) = row?;
    match decode_version(row.value()).ok_or_else(|| malformed("history"))? {
        Version::Put { create_revision, value } => Ok(Some(KeyValue {
            key: Bytes::copy_from_slice(key),
            value,
            create_revision,
            mod_revision: Revision(id.value().1),
        })),
        Version::Tombstone { .. } => Ok(None),
    }
}

/// Visits, in key order, every key in `[start, end)` that exists at revision `at`, with its newest version then.
/// Stops early when `visit` returns `false`.
pub(crate) fn scan_at(
    history: &impl ReadableTable<(&'static [u8], u64), &'static [u8]>,
    start: &[u8],
    end: Option<&[u8]>,
    at: Revision,
    mut visit: impl FnMut(&[u8], Revision, &[u8]) -> bool,
) -> Result<(), redb::Error> {
    let range = match end {
        Some(end) => history.range((start, 0)..(end, 0))?,
        None => history.range((start, 0)..)?,
    };
    // Rows come sorted by key, then revision. A row is the key's state at `at` unless the next row is a newer
    // version of the same key that is still at or before `at`.
    let mut rows = range.peekable();
    while let Some(entry) = rows.next() {
        let (id, row) = entry?;
        let (key, revision) = id.value();
        if revision > at.0 {
            continue;
        }
        let superseded = match rows.peek() {
            Some(Ok((next, _))) => {
                let (next_key, next_revision) = next.value();
                next_key == key && next_revision <= at.0
            }
            _ => false,
        };
        if superseded {
            continue;
        }
        let row = row.value();
        if row.first() == Some(&TAG_PUT) && !visit(key, Revision(revision), row) {
            break;
        }
    }
    Ok(())
}

pub(crate) fn malformed(table: &str) -> redb::Error {
    redb::Error::Corrupted(format!("malformed row in table {table}"))
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
        assert!(decode_version(&[7; 9]).is_none());
        assert!(decode_version(&[1; 3]).is_none());
        assert!(decode_log(&[]).is_none());
    }
}
