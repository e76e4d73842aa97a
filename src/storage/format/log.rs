//! The open block: an append-only log of record writes, label changes and removals.
//!
//! New records are appended here rather than rewriting a block, so a write costs one
//! `pwrite`. Each operation is `[body_len u32][crc32 u32][body]`; a write whose call returned
//! is in the file (the page cache survives a killed process), and on stable storage once
//! the log's [`FileSync`] says so (what the sync mode makes a writer wait for). A torn tail
//! left by a crash or power cut mid-append fails its length or CRC and is cut off at the
//! next open. When the block fills up it is sealed into a block file through the normal
//! commit protocol.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::storage::format::binary::{BinaryReader, BinaryWriter};
use crate::storage::format::oplog::{self, OP_HEADER};
use crate::storage::record::{Labels, Payload, RecordMeta};
use crate::storage::sync::{FileSync, LazyFile};

/// The first bytes of every log, and of every block sealed in place from a log.
pub(crate) const LOG_MAGIC: &[u8; 8] = b"HLLOG001";
const OP_RECORD: u8 = 1;
const OP_LABELS: u8 = 2;
const OP_REMOVE: u8 = 3;
/// The seal trailer: the record table and footer that make the log a sealed block
/// (`block/in_log.rs`). Replaying it changes no record: the table it holds is what the
/// operations before it already say.
const OP_SEAL: u8 = 4;
/// Payloads up to this size are written with their header in one `pwrite`.
const SMALL_PAYLOAD: usize = 64 * 1024;

/// A live record of the open block and where its payload sits in the log.
#[derive(Debug, Clone)]
pub struct LogRecord {
    /// Timestamp, labels, content type and size.
    pub meta: RecordMeta,
    /// Byte offset of the payload in the log file.
    pub offset: u64,
    /// Byte offset of the operation that wrote it (its `[len][crc]` header): the checksum
    /// covering the payload, checked on every read.
    pub op: u64,
}

impl LogRecord {
    /// Checks `op_bytes` — the record's operation from its header to the end of its
    /// payload — against the operation's checksum, and returns the payload.
    fn verified<'b>(&self, op_bytes: &'b [u8], path: &dyn std::fmt::Display) -> Result<&'b [u8]> {
        let header = OP_HEADER as usize;
        let stored = op_bytes
            .get(4..header)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
        let body = op_bytes.get(header..).unwrap_or_default();
        if stored != Some(crc32fast::hash(body)) {
            return Err(Error::internal(format!(
                "record {} in {path} fails its checksum: its bytes are damaged",
                self.meta.timestamp
            )));
        }
        Ok(&op_bytes[op_bytes.len() - self.meta.size as usize..])
    }
}

/// The open block of an entry.
pub struct OpenLog {
    path: PathBuf,
    file: Arc<LazyFile>,
    sync: Arc<FileSync>,
    len: u64,
    live: LiveRecords,
}

/// The records a log's operations leave alive, and their payload bytes.
#[derive(Default)]
struct LiveRecords {
    by_ts: BTreeMap<u64, LogRecord>,
    payload_bytes: u64,
}

impl LiveRecords {
    fn replay(&mut self, body: &[u8], body_offset: u64, what: &str) -> Result<()> {
        let mut r = BinaryReader::new(body, what);
        match r.u8()? {
            OP_RECORD => {
                let timestamp = r.u64()?;
                let content_type = r.str()?;
                let labels = r.labels()?;
                let size = r.u64()?;
                let offset = body_offset + (body.len() - r.remaining()) as u64;
                if offset + size != body_offset + body.len() as u64 {
                    return Err(Error::internal(format!(
                        "log {what}: record {timestamp} declares {size} bytes but its operation holds {}",
                        r.remaining()
                    )));
                }
                self.insert(LogRecord {
                    op: body_offset - OP_HEADER,
                    meta: RecordMeta {
                        timestamp,
                        labels,
                        content_type,
                        size,
                    },
                    offset,
                });
            }
            OP_LABELS => {
                let ts = r.u64()?;
                let labels = r.labels()?;
                if let Some(rec) = self.by_ts.get_mut(&ts) {
                    rec.meta.labels = labels;
                }
            }
            OP_REMOVE => {
                let ts = r.u64()?;
                self.forget(ts);
            }
            OP_SEAL => {}
            other => {
                return Err(Error::internal(format!(
                    "log {what} holds unknown operation {other}"
                )));
            }
        }
        Ok(())
    }

    fn insert(&mut self, rec: LogRecord) {
        self.payload_bytes += rec.meta.size;
        if let Some(old) = self.by_ts.insert(rec.meta.timestamp, rec) {
            self.payload_bytes -= old.meta.size;
        }
    }

    fn forget(&mut self, ts: u64) {
        if let Some(old) = self.by_ts.remove(&ts) {
            self.payload_bytes -= old.meta.size;
        }
    }
}

impl OpenLog {
    /// Creates an empty log; it only counts once the index names it. The file must not
    /// exist (an existing file is never truncated).
    pub fn create(path: &Path) -> Result<Self> {
        // Not synced here: the write that starts a log (the one that froze the full one)
        // would wait for one more fsync. Its directory entry is synced by the index commit
        // that names it, before any append; its header by the first append's sync. A
        // power cut before that leaves a header cut short or zeros, which opens as an
        // empty log (`oplog::Header`), and nothing in it was acknowledged.
        let file = LazyFile::new(path, oplog::create(path, LOG_MAGIC, false)?);
        let len = LOG_MAGIC.len() as u64;
        let sync = FileSync::named_by_commit(file.clone(), path, len);
        Ok(OpenLog {
            path: path.to_path_buf(),
            file,
            sync,
            len,
            live: LiveRecords::default(),
        })
    }

    /// What [`OpenLog::open`] would find in a log, without changing it (`halflife check`).
    pub fn scan(path: &Path) -> Result<oplog::Scan> {
        let bytes =
            std::fs::read(path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        Ok(oplog::scan(&bytes, LOG_MAGIC))
    }

    /// Opens a log, replays its operations and cuts off a torn tail.
    pub fn open(path: &Path) -> Result<Self> {
        Self::replay(path, false)
    }

    /// Replays a log another process may be appending to, without writing in it (a
    /// replica): the records up to the last complete operation; the log is never
    /// appended to through this handle.
    pub fn open_read_only(path: &Path) -> Result<Self> {
        Self::replay(path, true)
    }

    fn replay(path: &Path, read_only: bool) -> Result<Self> {
        let what = path.display().to_string();
        let mut live = LiveRecords::default();
        let (file, sync, len) =
            oplog::open_replayed(path, LOG_MAGIC, read_only, |body, offset| {
                live.replay(body, offset, &what)
            })?;
        Ok(OpenLog {
            path: path.to_path_buf(),
            file,
            sync,
            len,
            live,
        })
    }

    /// Appends one operation (`op` from [`oplog::start_op`], then `payload`). Returns the
    /// payload's offset.
    fn append(&mut self, mut op: BinaryWriter, payload: &[u8]) -> Result<u64> {
        oplog::finish_op(&mut op, payload)?;
        let start = self.len;
        let payload_offset = start + op.buf.len() as u64;
        let file = self.handle()?;
        // Small payloads ride along in the same pwrite: a copy is cheaper than a syscall.
        if payload.len() <= SMALL_PAYLOAD {
            op.buf.extend_from_slice(payload);
            oplog::append_at(&file, &self.path, start, &op.buf, &[])?;
        } else {
            oplog::append_at(&file, &self.path, start, &op.buf, payload)?;
        }
        self.len = payload_offset + payload.len() as u64;
        self.sync.appended(self.len);
        Ok(payload_offset)
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The group-commit state of the file: what a writer waits on to make its append
    /// durable.
    pub fn sync_handle(&self) -> &Arc<FileSync> {
        &self.sync
    }

    /// The file's contents no longer matter (the log was sealed into a synced block, or
    /// dropped): writers waiting for its sync are released.
    pub fn retire(&self) {
        self.sync.retire();
    }

    /// Appends a new record.
    pub fn append_record(&mut self, mut meta: RecordMeta, payload: &[u8]) -> Result<()> {
        let w = record_op(&meta, payload.len() as u64);
        let op = self.len;
        let offset = self.append(w, payload)?;
        meta.size = payload.len() as u64;
        self.live.insert(LogRecord { meta, offset, op });
        Ok(())
    }

    /// Replaces the labels of a record in this block.
    pub fn append_labels(&mut self, ts: u64, labels: &Labels) -> Result<()> {
        let mut w = oplog::start_op(OP_LABELS);
        w.u64(ts);
        w.labels(labels);
        self.append(w, &[])?;
        if let Some(rec) = self.live.by_ts.get_mut(&ts) {
            rec.meta.labels = labels.clone();
        }
        Ok(())
    }

    /// Appends the seal trailer that `trailer` builds from the offset where its body's
    /// bytes will start (what its footer points at): the record table and footer of the
    /// block the log becomes. Returns the log's new length, what the seal syncs up to.
    pub fn append_seal(&mut self, trailer: impl FnOnce(u64) -> Vec<u8>) -> Result<u64> {
        let w = oplog::start_op(OP_SEAL);
        let bytes = trailer(self.len + w.buf.len() as u64);
        self.append(w, &bytes)?;
        Ok(self.len)
    }

    /// Removes a record from this block.
    pub fn append_remove(&mut self, ts: u64) -> Result<()> {
        let mut w = oplog::start_op(OP_REMOVE);
        w.u64(ts);
        self.append(w, &[])?;
        self.live.forget(ts);
        Ok(())
    }

    /// The live records by timestamp.
    pub fn records(&self) -> &BTreeMap<u64, LogRecord> {
        &self.live.by_ts
    }

    /// Sum of the live payload sizes.
    pub fn payload_bytes(&self) -> u64 {
        self.live.payload_bytes
    }

    /// Bytes the log occupies on disk.
    pub fn file_len(&self) -> u64 {
        self.len
    }

    /// A handle readers keep so the file outlives sealing and unlinking (the descriptor,
    /// opened again if the open-file bound had closed it).
    pub fn file(&self) -> Result<Arc<File>> {
        self.handle()
    }

    fn handle(&self) -> Result<Arc<File>> {
        self.file
            .get()
            .map_err(|e| oplog::reopen_error(&self.path, e))
    }

    /// Reads the payload of a record, checked against its operation's checksum (one
    /// read of the operation from its header on).
    pub fn read_payload(file: &File, rec: &LogRecord) -> Result<Payload> {
        let end = rec.offset + rec.meta.size;
        let mut buf = vec![0u8; (end - rec.op) as usize];
        file.read_exact_at(&mut buf, rec.op)
            .map_err(|e| Error::io(format!("reading record {}", rec.meta.timestamp), e))?;
        rec.verified(&buf, &"the log")?;
        let start = (rec.offset - rec.op) as usize;
        let len = buf.len();
        Ok(Payload::Owned(Arc::new(buf), start..len))
    }
}

/// Reads the payload of `rec` from log `file` (at `path`) into `buf`, reused from record
/// to record, checked against its operation's checksum: what a seal copies. Read rather
/// than mapped, so that a 64 MB log does not count in the server's resident memory while
/// it is copied.
pub fn read_payload_into<'b>(
    file: &File,
    rec: &LogRecord,
    path: &Path,
    buf: &'b mut Vec<u8>,
) -> Result<&'b [u8]> {
    let end = rec.offset + rec.meta.size;
    buf.clear();
    buf.resize((end - rec.op) as usize, 0);
    file.read_exact_at(buf, rec.op).map_err(|e| {
        Error::io(
            format!(
                "reading record {} of {}",
                rec.meta.timestamp,
                path.display()
            ),
            e,
        )
    })?;
    rec.verified(buf, &path.display())
}

/// The operation that adds a record of `payload_len` bytes, without its payload.
fn record_op(meta: &RecordMeta, payload_len: u64) -> BinaryWriter {
    let mut w = oplog::start_op(OP_RECORD);
    w.u64(meta.timestamp);
    w.str(&meta.content_type);
    w.labels(&meta.labels);
    w.u64(payload_len);
    w
}

/// The most a record of `meta` (its `size` the payload's) adds to the disk when it is
/// written: its operation and payload, and the header of a log it may start.
pub fn record_disk_size(meta: &RecordMeta) -> u64 {
    record_op(meta, meta.size).buf.len() as u64 + meta.size + LOG_MAGIC.len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(ts: u64) -> RecordMeta {
        let mut labels = Labels::new();
        labels.insert("k".into(), format!("v{ts}"));
        RecordMeta {
            timestamp: ts,
            labels,
            content_type: "text/plain".into(),
            size: 0,
        }
    }

    /// A log is created without a sync, so a power cut can tear its header's write: a
    /// prefix of the magic, then zeros. That is a creation cut short, not damage: the
    /// header is restored, nothing is set aside, and what follows is replayed.
    #[test]
    fn a_torn_header_is_restored_without_setting_anything_aside() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.log");
        let mut log = OpenLog::create(&path).unwrap();
        log.append_record(meta(10), b"kept").unwrap();
        drop(log);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[3..LOG_MAGIC.len()].fill(0);
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(OpenLog::scan(&path).unwrap().header, oplog::Header::Zeros);
        let log = OpenLog::open(&path).unwrap();
        assert_eq!(log.records().keys().copied().collect::<Vec<_>>(), vec![10]);
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["1.log".to_string()], "nothing set aside");
        std::fs::write(&path, b"HLL\0").unwrap();
        assert_eq!(
            OpenLog::scan(&path).unwrap().header,
            oplog::Header::Interrupted
        );
    }

    #[test]
    fn replay_restores_records_labels_and_removals() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.log");
        let mut log = OpenLog::create(&path).unwrap();
        for ts in [30, 10, 20] {
            log.append_record(meta(ts), format!("payload {ts}").as_bytes())
                .unwrap();
        }
        let mut relabeled = Labels::new();
        relabeled.insert("x".into(), "y".into());
        log.append_labels(20, &relabeled).unwrap();
        log.append_remove(30).unwrap();
        drop(log);

        let log = OpenLog::open(&path).unwrap();
        let ts: Vec<u64> = log.records().keys().copied().collect();
        assert_eq!(ts, vec![10, 20]);
        assert_eq!(log.records()[&20].meta.labels, relabeled);
        let payload = OpenLog::read_payload(&log.file().unwrap(), &log.records()[&10]).unwrap();
        assert_eq!(payload.as_slice(), b"payload 10");
        assert_eq!(log.payload_bytes(), 20);
    }

    #[test]
    fn torn_tail_is_cut_off_and_appends_continue() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.log");
        let mut log = OpenLog::create(&path).unwrap();
        log.append_record(meta(1), b"first").unwrap();
        let first_end = log.file_len() as usize;
        log.append_record(meta(2), b"second").unwrap();
        let full = log.file_len();
        drop(log);
        // Every cut inside the second op loses only that op; the first survives.
        let bytes = std::fs::read(&path).unwrap();
        for cut in first_end..full as usize {
            std::fs::write(&path, &bytes[..cut]).unwrap();
            let log = OpenLog::open(&path).unwrap();
            assert!(log.records().contains_key(&1), "cut {cut}");
            assert!(!log.records().contains_key(&2), "cut {cut}");
            assert_eq!(std::fs::metadata(&path).unwrap().len() as usize, first_end);
        }
        std::fs::write(&path, &bytes[..full as usize - 2]).unwrap();
        let mut log = OpenLog::open(&path).unwrap();
        log.append_record(meta(3), b"third").unwrap();
        drop(log);
        let log = OpenLog::open(&path).unwrap();
        assert_eq!(
            log.records().keys().copied().collect::<Vec<_>>(),
            vec![1, 3]
        );
    }

    #[test]
    fn a_zero_filled_tail_is_cut_and_damage_inside_keeps_the_operations_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.log");
        let mut log = OpenLog::create(&path).unwrap();
        let mut ends = Vec::new();
        for ts in 1..=5 {
            log.append_record(meta(ts), format!("payload {ts}").as_bytes())
                .unwrap();
            ends.push(log.file_len() as usize);
        }
        drop(log);
        let bytes = std::fs::read(&path).unwrap();

        // The size reached the disk, the data did not: zeros after record 5.
        let mut zeros = bytes.clone();
        zeros.extend_from_slice(&[0u8; 300]);
        std::fs::write(&path, &zeros).unwrap();
        let log = OpenLog::open(&path).unwrap();
        assert_eq!(log.records().len(), 5);
        assert_eq!(log.file_len() as usize, bytes.len());
        drop(log);

        // One flipped byte in record 2's payload, one in record 4's header: records 1, 3
        // and 5 are kept, and the file is not cut.
        let mut damaged = bytes.clone();
        damaged[ends[1] - 2] ^= 0x55;
        damaged[ends[2] + 1] ^= 0x10;
        std::fs::write(&path, &damaged).unwrap();
        let mut log = OpenLog::open(&path).unwrap();
        let kept: Vec<u64> = log.records().keys().copied().collect();
        assert_eq!(kept, vec![1, 3, 5]);
        assert_eq!(log.file_len() as usize, damaged.len());
        log.append_record(meta(6), b"after").unwrap();
        drop(log);
        let log = OpenLog::open(&path).unwrap();
        let kept: Vec<u64> = log.records().keys().copied().collect();
        assert_eq!(kept, vec![1, 3, 5, 6]);

        // A header of zeros: a creation cut short; it opens empty.
        std::fs::write(&path, [0u8; 64]).unwrap();
        let log = OpenLog::open(&path).unwrap();
        assert!(log.records().is_empty());
        assert_eq!(std::fs::read(&path).unwrap(), LOG_MAGIC);
    }

    #[test]
    fn a_payload_changed_on_disk_is_refused_on_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.log");
        let mut log = OpenLog::create(&path).unwrap();
        log.append_record(meta(1), b"exact bytes").unwrap();
        let rec = log.records()[&1].clone();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[rec.offset as usize + 3] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let err = OpenLog::read_payload(&log.file().unwrap(), &rec).unwrap_err();
        assert!(err.message().contains("checksum"), "{}", err.message());
        let mut buf = Vec::new();
        let err = read_payload_into(&log.file().unwrap(), &rec, &path, &mut buf).unwrap_err();
        assert!(err.message().contains("checksum"), "{}", err.message());
    }
}
