//! The edit log of a sealed block (`<seq>.edt` beside `<seq>.blk`): label changes and
//! removals of the block's records, appended instead of rewriting the block.
//!
//! A block file is never modified; a change to a record in it — new labels, or a removal
//! (a tombstone) — is one operation appended here (the framing of `oplog`), so it costs one
//! `pwrite` of a few dozen bytes whatever the block's size and codec. Readers see the
//! block with its edits applied ([`BlockEdits::apply`]); the edits are folded into the
//! records the next time the block is rewritten (compress, merge, or enough tombstones),
//! and the edit log goes with the old block file.
//!
//! The file belongs to the block with the same sequence number: the index does not name
//! it, so an edit costs no index commit; the entry keeps it while its block is in the
//! index and removes it with the block. Operations:
//! - labels `[2][ts u64][labels]`: the record's whole label set from now on;
//! - remove `[3][n varint][(ts u64, size u64) × n]`: tombstones, with the payload sizes
//!   so sizes and quotas are right without reading the block.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::storage::format::binary::BinaryReader;
use crate::storage::format::block_record::BlockRecord;
use crate::storage::format::oplog;
use crate::storage::record::Labels;
use crate::storage::sync::{FileSync, LazyFile};

const EDITS_MAGIC: &[u8; 8] = b"HLEDT001";
const OP_LABELS: u8 = 2;
const OP_REMOVE: u8 = 3;

/// One change to records of a sealed block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockChange {
    /// The record with this timestamp now has exactly these labels.
    Relabel(u64, Labels),
    /// These records (timestamp, payload size) are removed.
    Remove(Vec<(u64, u64)>),
}

/// The edit log of one sealed block, replayed into memory.
pub struct BlockEdits {
    path: PathBuf,
    file: Arc<LazyFile>,
    sync: Arc<FileSync>,
    len: u64,
    labels: HashMap<u64, Labels>,
    removed: HashSet<u64>,
    removed_bytes: u64,
    ops: u64,
}

impl BlockEdits {
    /// Creates an empty edit log, its header fsynced: any other file's sync may make the
    /// directory entry durable before this log's own sync does, and a name that survives a
    /// power loss must not hold a torn header. Its directory entry is synced with its first
    /// sync (the sync mode's, or the entry's next commit; [`FileSync`] knows it is pending).
    pub fn create(path: &Path) -> Result<Self> {
        let file = LazyFile::new(path, oplog::create(path, EDITS_MAGIC, true)?);
        let sync = FileSync::new(file.clone(), path, EDITS_MAGIC.len() as u64, false);
        Ok(BlockEdits {
            path: path.to_path_buf(),
            file,
            sync,
            len: EDITS_MAGIC.len() as u64,
            labels: HashMap::new(),
            removed: HashSet::new(),
            removed_bytes: 0,
            ops: 0,
        })
    }

    /// What [`BlockEdits::open`] would find in an edit log, without changing it.
    pub fn scan(path: &Path) -> Result<oplog::Scan> {
        let bytes =
            std::fs::read(path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        Ok(oplog::scan(&bytes, EDITS_MAGIC))
    }

    /// Opens an edit log and replays it; a torn tail is cut off.
    pub fn open(path: &Path) -> Result<Self> {
        Self::replay(path, false)
    }

    /// Replays an edit log another process may be appending to, without writing in it
    /// (a replica): the changes up to the last complete operation.
    pub fn open_read_only(path: &Path) -> Result<Self> {
        Self::replay(path, true)
    }

    fn replay(path: &Path, read_only: bool) -> Result<Self> {
        let what = path.display().to_string();
        let mut labels = HashMap::new();
        let mut removed = HashSet::new();
        let mut removed_bytes = 0;
        let mut ops = 0;
        let replay = |body: &[u8], _: u64| -> Result<()> {
            ops += 1;
            match decode(body, &what)? {
                BlockChange::Relabel(ts, l) => {
                    labels.insert(ts, l);
                }
                BlockChange::Remove(gone) => {
                    for (ts, size) in gone {
                        labels.remove(&ts);
                        if removed.insert(ts) {
                            removed_bytes += size;
                        }
                    }
                }
            }
            Ok(())
        };
        let (file, sync, len) = oplog::open_replayed(path, EDITS_MAGIC, read_only, replay)?;
        Ok(BlockEdits {
            path: path.to_path_buf(),
            file,
            sync,
            len,
            labels,
            removed,
            removed_bytes,
            ops,
        })
    }

    /// Appends a change (one `pwrite`) and applies it to the in-memory view. Removing a
    /// record already removed counts nothing twice.
    pub fn append(&mut self, change: &BlockChange) -> Result<()> {
        let op = match change {
            BlockChange::Relabel(ts, labels) => {
                let mut op = oplog::start_op(OP_LABELS);
                op.u64(*ts);
                op.labels(labels);
                op
            }
            BlockChange::Remove(gone) => {
                let mut op = oplog::start_op(OP_REMOVE);
                op.varint(gone.len() as u64);
                for (ts, size) in gone {
                    op.u64(*ts);
                    op.u64(*size);
                }
                op
            }
        };
        oplog::append_op(&self.file, &self.path, &mut self.len, &self.sync, op)?;
        self.ops += 1;
        match change {
            BlockChange::Relabel(ts, labels) => {
                self.labels.insert(*ts, labels.clone());
            }
            BlockChange::Remove(gone) => {
                for (ts, size) in gone {
                    self.labels.remove(ts);
                    if self.removed.insert(*ts) {
                        self.removed_bytes += size;
                    }
                }
            }
        }
        Ok(())
    }

    /// Makes the appended changes durable (called before the entry's next commit, which
    /// may rely on them); a no-op when a writer's sync already covered them.
    pub fn sync(&mut self) -> Result<()> {
        if self.sync.is_clean() {
            return Ok(());
        }
        self.sync.sync_written()
    }

    /// The group-commit state of the file, what a writer waits on.
    pub fn sync_handle(&self) -> &Arc<FileSync> {
        &self.sync
    }

    /// Applies every change to a block's records (sorted by timestamp, as the block holds
    /// them): removed records go, relabelled ones get their labels.
    pub fn apply(&self, records: &mut Vec<BlockRecord>) {
        if !self.removed.is_empty() {
            records.retain(|r| !self.removed.contains(&r.meta.timestamp));
        }
        for (ts, labels) in &self.labels {
            if let Ok(i) = records.binary_search_by_key(ts, |r| r.meta.timestamp) {
                records[i].meta.labels = labels.clone();
            }
        }
    }

    /// How many changes the log holds: with the block's sequence number, the version of
    /// what readers see (a rewrite started before a change must not commit over it).
    pub fn ops(&self) -> u64 {
        self.ops
    }

    /// Records removed (tombstoned) and not yet folded into a rewrite.
    pub fn removed_count(&self) -> u64 {
        self.removed.len() as u64
    }

    /// Payload bytes of the removed records.
    pub fn removed_bytes(&self) -> u64 {
        self.removed_bytes
    }

    /// Whether the record with this timestamp is removed.
    pub fn is_removed(&self, ts: u64) -> bool {
        self.removed.contains(&ts)
    }

    /// Bytes the log occupies on disk.
    pub fn file_len(&self) -> u64 {
        self.len
    }
}

/// Applies one change to records already carrying the earlier ones (the cached view of a
/// block), without replaying the whole log.
pub fn apply_change(records: &mut Vec<BlockRecord>, change: &BlockChange) {
    match change {
        BlockChange::Relabel(ts, labels) => {
            if let Ok(i) = records.binary_search_by_key(ts, |r| r.meta.timestamp) {
                records[i].meta.labels = labels.clone();
            }
        }
        BlockChange::Remove(gone) => {
            let gone: HashSet<u64> = gone.iter().map(|(ts, _)| *ts).collect();
            records.retain(|r| !gone.contains(&r.meta.timestamp));
        }
    }
}

fn decode(body: &[u8], what: &str) -> Result<BlockChange> {
    let mut r = BinaryReader::new(body, what);
    match r.u8()? {
        OP_LABELS => {
            let ts = r.u64()?;
            Ok(BlockChange::Relabel(ts, r.labels()?))
        }
        OP_REMOVE => {
            let n = r.varint()?;
            // Each pair takes 16 bytes: a count the body cannot hold is corruption, not a
            // reason to reserve memory for it.
            if n > (r.remaining() / 16) as u64 {
                return Err(Error::internal(format!(
                    "edit log {what} names {n} removals in {} bytes",
                    r.remaining()
                )));
            }
            let gone = (0..n)
                .map(|_| Ok((r.u64()?, r.u64()?)))
                .collect::<Result<Vec<_>>>()?;
            Ok(BlockChange::Remove(gone))
        }
        other => Err(Error::internal(format!(
            "edit log {what} holds unknown operation {other}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::record::RecordMeta;

    fn record(ts: u64) -> BlockRecord {
        BlockRecord {
            meta: RecordMeta {
                timestamp: ts,
                labels: Labels::new(),
                content_type: "a/b".into(),
                size: 10,
            },
            frame: 0,
            offset: ts * 10,
        }
    }

    fn labels(k: &str, v: &str) -> Labels {
        let mut l = Labels::new();
        l.insert(k.into(), v.into());
        l
    }

    #[test]
    fn changes_replay_and_apply_like_they_were_made() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.edt");
        let mut edits = BlockEdits::create(&path).unwrap();
        edits
            .append(&BlockChange::Relabel(2, labels("a", "1")))
            .unwrap();
        edits
            .append(&BlockChange::Relabel(3, labels("b", "2")))
            .unwrap();
        edits
            .append(&BlockChange::Remove(vec![(3, 10), (4, 10)]))
            .unwrap();
        // Removing again counts nothing twice.
        edits.append(&BlockChange::Remove(vec![(4, 10)])).unwrap();
        let mut live: Vec<BlockRecord> = (1..=5).map(record).collect();
        edits.apply(&mut live);
        drop(edits);

        let reopened = BlockEdits::open(&path).unwrap();
        assert_eq!(reopened.ops(), 4);
        assert_eq!(reopened.removed_count(), 2);
        assert_eq!(reopened.removed_bytes(), 20);
        let mut replayed: Vec<BlockRecord> = (1..=5).map(record).collect();
        reopened.apply(&mut replayed);
        assert_eq!(replayed, live);
        let ts: Vec<u64> = live.iter().map(|r| r.meta.timestamp).collect();
        assert_eq!(ts, vec![1, 2, 5]);
        assert_eq!(live[1].meta.labels, labels("a", "1"));

        // One change at a time gives the same view.
        let mut stepwise: Vec<BlockRecord> = (1..=5).map(record).collect();
        for change in [
            BlockChange::Relabel(2, labels("a", "1")),
            BlockChange::Relabel(3, labels("b", "2")),
            BlockChange::Remove(vec![(3, 10), (4, 10)]),
        ] {
            apply_change(&mut stepwise, &change);
        }
        assert_eq!(stepwise, live);
    }

    #[test]
    fn a_torn_change_is_cut_off_and_an_interrupted_creation_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("1.edt");
        let mut edits = BlockEdits::create(&path).unwrap();
        edits.append(&BlockChange::Remove(vec![(1, 5)])).unwrap();
        let first = edits.file_len();
        edits
            .append(&BlockChange::Relabel(2, labels("x", "y")))
            .unwrap();
        let full = edits.file_len();
        drop(edits);
        let bytes = std::fs::read(&path).unwrap();
        for cut in first..full {
            std::fs::write(&path, &bytes[..cut as usize]).unwrap();
            let edits = BlockEdits::open(&path).unwrap();
            assert!(edits.is_removed(1), "cut {cut}");
            assert_eq!(edits.ops(), 1, "cut {cut}");
        }
        for cut in 0..8 {
            std::fs::write(&path, &EDITS_MAGIC[..cut]).unwrap();
            let edits = BlockEdits::open(&path).unwrap();
            assert_eq!(edits.ops(), 0, "cut {cut}");
        }
        // A damaged header costs nothing after it: restored, the changes replayed.
        std::fs::write(&path, &bytes).unwrap();
        let mut damaged = bytes.clone();
        damaged[..8].copy_from_slice(b"HLBLK001");
        std::fs::write(&path, &damaged).unwrap();
        let edits = BlockEdits::open(&path).unwrap();
        assert_eq!(edits.ops(), 2);
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
    }
}
