//! The write-ahead log that makes a group commit durable with one sequential append and one `fdatasync`.
//!
//! Why a log in front of redb: a durable redb commit writes every dirty B-tree page in place and syncs, which on
//! these disks costs several milliseconds for a batch of 64 writes, while appending the same batch to one file and
//! syncing it costs a fraction of a millisecond (measured in `docs/BENCHMARKS.md`). So each batch is first appended
//! here and synced — that is the acknowledgement point — and then committed to redb *without* a sync. Every so often
//! the sequencer makes redb durable with one synced commit (a checkpoint) and empties this log.
//!
//! On open, the records with revisions above redb's durable revision are applied again. A record is
//! `[length u32][crc32 u32][payload]`; a record cut short or failing its checksum can only be the tail of a write
//! that was never acknowledged, so reading stops there and the file is truncated to the last whole record.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;

use bytes::Bytes;

use crate::{Event, EventKind, Revision};

/// The log's file name inside the data directory.
pub(crate) const WAL_FILE: &str = "nest.wal";

const HEADER: usize = 8;
const KIND_PUT: u8 = 1;
const KIND_DELETE: u8 = 2;

/// An open log, positioned at its end.
pub(crate) struct Wal {
    file: File,
    /// Bytes in the log since the last checkpoint.
    len: u64,
    /// Reused encoding buffer.
    buffer: Vec<u8>,
}

impl Wal {
    /// Opens the log in `dir`, returning it and the events of every whole record in it, in order.
    pub(crate) fn open(dir: &Path) -> io::Result<(Wal, Vec<Event>)> {
        let mut file =
            OpenOptions::new().read(true).write(true).create(true).truncate(false).open(dir.join(WAL_FILE))?;
        let mut contents = Vec::new();
        file.read_to_end(&mut contents)?;
        let mut events = Vec::new();
        let mut valid = 0;
        while let Some((record, rest)) = next_record(&contents[valid..]) {
            let Some(batch) = decode(record) else { break };
            events.extend(batch);
            valid = contents.len() - rest.len();
        }
        if valid < contents.len() {
            tracing::warn!(dropped = contents.len() - valid, "embedded store: discarding an unacknowledged torn write");
            file.set_len(valid as u64)?;
            file.sync_data()?;
        }
        file.seek(SeekFrom::Start(valid as u64))?;
        Ok((Wal { file, len: valid as u64, buffer: Vec::new() }, events))
    }

    /// Appends one batch and waits until it is on disk.
    pub(crate) fn append(&mut self, events: &[Event]) -> io::Result<()> {
        self.buffer.clear();
        self.buffer.extend_from_slice(&[0; HEADER]);
        encode(events, &mut self.buffer);
        let payload_len = u32::try_from(self.buffer.len() - HEADER)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "write batch over 4 GiB"))?;
        let crc = crc32fast::hash(&self.buffer[HEADER..]);
        self.buffer[0..4].copy_from_slice(&payload_len.to_le_bytes());
        self.buffer[4..8].copy_from_slice(&crc.to_le_bytes());
        if let Err(error) = self.file.write_all(&self.buffer).and_then(|()| self.file.sync_data()) {
            // Cut off whatever part was written, so a later append does not follow a torn record.
            let _ = self.file.set_len(self.len);
            let _ = self.file.seek(SeekFrom::Start(self.len));
            return Err(error);
        }
        self.len += self.buffer.len() as u64;
        Ok(())
    }

    /// Bytes written since the last [`Wal::reset`].
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Empties the log; call only once everything in it is durable elsewhere.
    pub(crate) fn reset(&mut self) -> io::Result<()> {
        self.file.set_len(0)?;
        self.file.seek(SeekFrom::Start(0))?;
        self.file.sync_data()?;
        self.len = 0;
        Ok(())
    }
}

/// Splits off the first whole, checksummed record.
fn next_record(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_le_bytes(bytes.get(0..4)?.try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?);
    let payload = bytes.get(HEADER..HEADER + len)?;
    (crc32fast::hash(payload) == crc).then(|| (payload, &bytes[HEADER + len..]))
}

fn encode(events: &[Event], out: &mut Vec<u8>) {
    out.extend_from_slice(&(events.len() as u32).to_le_bytes());
    for event in events {
        out.push(match event.kind {
            EventKind::Put => KIND_PUT,
            EventKind::Delete => KIND_DELETE,
        });
        out.extend_from_slice(&event.revision.0.to_le_bytes());
        out.extend_from_slice(&event.create_revision.0.to_le_bytes());
        out.extend_from_slice(&(event.key.len() as u32).to_le_bytes());
        out.extend_from_slice(&event.key);
        // A delete needs no value to be replayed.
        let value: &[u8] = if event.kind == EventKind::Put { &event.value } else { &[] };
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
        out.extend_from_slice(value);
    }
}

fn decode(mut payload: &[u8]) -> Option<Vec<Event>> {
    fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        let (head, rest) = bytes.split_at_checked(n)?;
        *bytes = rest;
        Some(head)
    }
    fn u32_of(bytes: &mut &[u8]) -> Option<usize> {
        Some(u32::from_le_bytes(take(bytes, 4)?.try_into().ok()?) as usize)
    }
    fn u64_of(bytes: &mut &[u8]) -> Option<u64> {
        Some(u64::from_le_bytes(take(bytes, 8)?.try_into().ok()?))
    }
    let count = u32_of(&mut payload)?;
    let mut events = Vec::with_capacity(count.min(4096));
    for _ in 0..count {
        let kind = match take(&mut payload, 1)?[0] {
            KIND_PUT => EventKind::Put,
            KIND_DELETE => EventKind::Delete,
            _ => return None,
        };
        let revision = Revision(u64_of(&mut payload)?);
        let create_revision = Revision(u64_of(&mut payload)?);
        let key_len = u32_of(&mut payload)?;
        let key = Bytes::copy_from_slice(take(&mut payload, key_len)?);
        let value_len = u32_of(&mut payload)?;
        let value = Bytes::copy_from_slice(take(&mut payload, value_len)?);
        events.push(Event { kind, key, value, create_revision, revision });
    }
    payload.is_empty().then_some(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_put as put;

    #[test]
    fn appended_batches_come_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, events) = Wal::open(dir.path()).unwrap();
        assert!(events.is_empty());
        wal.append(&[put("/a", 1), put("/b", 2)]).unwrap();
        let delete = Event { kind: EventKind::Delete, value: Bytes::new(), ..put("/a", 3) };
        wal.append(std::slice::from_ref(&delete)).unwrap();
        drop(wal);
        let (_, events) = Wal::open(dir.path()).unwrap();
        assert_eq!(events, vec![put("/a", 1), put("/b", 2), delete]);
    }

    #[test]
    fn a_torn_tail_is_dropped_and_the_log_continues_after_the_last_whole_record() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path()).unwrap();
        wal.append(&[put("/a", 1)]).unwrap();
        wal.append(&[put("/b", 2)]).unwrap();
        drop(wal);
        let path = dir.path().join(WAL_FILE);
        let whole = std::fs::metadata(&path).unwrap().len();
        // Cut the second record short, as a crash in the middle of its write would.
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(whole - 3).unwrap();
        let (mut wal, events) = Wal::open(dir.path()).unwrap();
        assert_eq!(events, vec![put("/a", 1)]);
        wal.append(&[put("/c", 2)]).unwrap();
        drop(wal);
        let (_, events) = Wal::open(dir.path()).unwrap();
        assert_eq!(events, vec![put("/a", 1), put("/c", 2)]);
    }

    #[test]
    fn a_flipped_bit_fails_the_checksum() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path()).unwrap();
        wal.append(&[put("/a", 1)]).unwrap();
        drop(wal);
        let path = dir.path().join(WAL_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        let (wal, events) = Wal::open(dir.path()).unwrap();
        assert!(events.is_empty());
        assert_eq!(wal.len(), 0);
    }

    #[test]
    fn reset_empties_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let (mut wal, _) = Wal::open(dir.path()).unwrap();
        wal.append(&[put("/a", 1)]).unwrap();
        wal.reset().unwrap();
        wal.append(&[put("/b", 2)]).unwrap();
        drop(wal);
        assert_eq!(Wal::open(dir.path()).unwrap().1, vec![put("/b", 2)]);
    }
}
