//! The entry index: which block files make up an entry, and which logs are its open block
//! and its late block. Replacing this file atomically is the commit point of every change
//! to an entry.
//!
//! Format 1 (read only) required sealed blocks to cover disjoint time ranges and had no late
//! log. Format 2 (written now) lets blocks overlap in time — a belated write appends to the
//! late log, which seals into a block whose range may overlap others — and names the late
//! log. A format-1 index is a valid format-2 index without a late log. Format 3 adds
//! `sealing_logs`, the full logs waiting for the background seal; it is written only while
//! there are some (so a version that reads 2 refuses, instead of removing them as files
//! it does not know), and format 2 otherwise. Format 4 adds blocks that are logs sealed in
//! place (`BlockEntry::in_log`); it is written only while there are some, for the same
//! reason.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::storage::format::block_meta::BlockSummary;
use crate::storage::format::codec::Codec;
use crate::storage::sync::fsutil::{strip_crc_trailer, with_crc_trailer, write_atomic};

/// File name of the index inside an entry directory.
pub const INDEX_FILE: &str = ".index";
/// The newest format this version writes (only while a block is a log sealed in place).
pub const INDEX_FORMAT: u32 = 4;
/// The format written while logs wait for their seal and no block is a sealed log.
const SEALING_FORMAT: u32 = 3;
/// The format written when no log waits for its seal, which older versions still read.
const PLAIN_FORMAT: u32 = 2;
/// The oldest format this version still reads.
const OLDEST_READABLE_FORMAT: u32 = 1;

/// One sealed block as the index knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockEntry {
    /// File sequence number: the block lives in `<seq>.blk`. A rewrite gets a new number,
    /// so the number also serves as the block's version.
    pub seq: u64,
    /// Timestamp of the first record (the block id).
    pub first_ts: u64,
    /// Timestamp of the last record.
    pub last_ts: u64,
    /// Number of records.
    pub record_count: u64,
    /// File size in bytes.
    pub size: u64,
    /// Sum of the payload sizes.
    pub payload_bytes: u64,
    /// Codec tier of the block.
    pub codec: Codec,
    /// CRC of the block's record table, checked when the block is mapped.
    pub meta_crc: u32,
    /// Whether the block has an edit log (`<seq>.edt`): committed when the log is created,
    /// so an edit log that goes missing is noticed at open instead of its changes
    /// silently coming undone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub edited: bool,
    /// The block is a log sealed in place (`block/in_log.rs`): raw frames of the log's own
    /// bytes, operation headers and dead operations among the payloads. Recompression
    /// keeps only the payloads instead of encoding its frames one for one, and an index naming one is written in format 4, which an older
    /// version refuses rather than taking the file for a damaged block.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_log: bool,
    /// Where the block's file lives when the tier action moved it to a remote object
    /// store: its record table stays here in `<seq>.tier`, its frames are fetched by range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<RemoteLocation>,
    /// The block's edit log as the entry has replayed it: in memory only (the edit log
    /// itself is the persistent form, so a crash between an edit and the next commit
    /// cannot leave the index disagreeing with it).
    #[serde(skip)]
    pub edits: EditState,
}

/// A tiered block's object on a remote store: the whole block file, byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoteLocation {
    /// The remote's name (as the server's configuration names it).
    pub remote: String,
    /// The object's key.
    pub key: String,
    /// The ETag the store confirmed (MD5 of the bytes, or of the parts' MD5s).
    pub etag: String,
    /// Where the block's metadata starts: the local stub holds the bytes from here on.
    pub meta_offset: u64,
}

/// What a block's edit log (`<seq>.edt`) changes about it, kept beside its index entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EditState {
    /// Changes in the log: with `seq`, the version of the block readers see.
    pub ops: u64,
    /// Records removed by tombstones.
    pub removed: u64,
    /// Their payload bytes.
    pub removed_bytes: u64,
}

impl BlockEntry {
    /// Index entry for a freshly written block file.
    pub fn from_summary(seq: u64, s: &BlockSummary) -> Self {
        BlockEntry {
            seq,
            first_ts: s.first_ts,
            last_ts: s.last_ts,
            record_count: s.record_count,
            size: s.size,
            payload_bytes: s.payload_bytes,
            codec: s.codec,
            meta_crc: s.meta_crc,
            edited: false,
            in_log: false,
            remote: None,
            edits: EditState::default(),
        }
    }

    /// Index entry for a log sealed in place under its own sequence number.
    pub fn sealed_in_log(seq: u64, s: &BlockSummary) -> Self {
        BlockEntry {
            in_log: true,
            ..Self::from_summary(seq, s)
        }
    }

    /// Bytes of the block on the local disk: the file, or for a tiered block its stub
    /// (the record table and footer).
    pub fn local_size(&self) -> u64 {
        match &self.remote {
            None => self.size,
            Some(r) => self.size.saturating_sub(r.meta_offset) + STUB_HEADER_ESTIMATE,
        }
    }

    /// The name of the block's file in its entry directory: `<seq>.blk`, or for a tiered
    /// block its stub `<seq>.tier`.
    pub fn file_name(&self) -> String {
        if self.remote.is_some() {
            format!("{:016x}.tier", self.seq)
        } else {
            format!("{:016x}.blk", self.seq)
        }
    }

    /// The version of the block readers see: its file and the changes of its edit log.
    /// A rewrite commits only if the version it read is still the current one.
    pub fn version(&self) -> (u64, u64) {
        (self.seq, self.edits.ops)
    }

    /// Records readers see: the file's minus the tombstoned ones.
    pub fn live_records(&self) -> u64 {
        self.record_count - self.edits.removed
    }

    /// Bytes the block stands for once its tombstones are folded in: the file's size less
    /// the removed records' share of it (payload bytes scaled to the stored size).
    pub fn live_size(&self) -> u64 {
        if self.edits.removed_bytes == 0 || self.payload_bytes == 0 {
            return self.size;
        }
        let share = self.edits.removed_bytes as f64 / self.payload_bytes as f64;
        self.size - (self.size as f64 * share.min(1.0)) as u64
    }

    /// What the block file holds, as its writer reported it.
    pub fn summary(&self) -> BlockSummary {
        BlockSummary {
            first_ts: self.first_ts,
            last_ts: self.last_ts,
            record_count: self.record_count,
            size: self.size,
            payload_bytes: self.payload_bytes,
            codec: self.codec,
            meta_crc: self.meta_crc,
        }
    }
}

/// The persisted state of an entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryIndex {
    /// On-disk format version.
    pub format: u32,
    /// Next file sequence number to hand out.
    pub next_seq: u64,
    /// Sealed blocks, sorted by `first_ts`; their time ranges may overlap.
    pub blocks: Vec<BlockEntry>,
    /// Sequence number of the open block's log, if there is one.
    pub open_log: Option<u64>,
    /// Sequence number of the late log (writes older than the open block), if there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_log: Option<u64>,
    /// Full logs taken off the write path, oldest first: their records are read from
    /// them until the background seal commits each as a block (`entry/seal.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sealing_logs: Vec<u64>,
}

/// What reading an entry's index found.
#[derive(Debug)]
pub enum IndexLoad {
    /// The index, checksum-valid and in a format this version reads.
    Loaded(EntryIndex),
    /// No index file.
    Missing,
    /// An index file whose checksum or JSON is broken.
    Damaged(Error),
}

/// What kind of file of an entry directory a name is, and its sequence number:
/// `<seq:016x>.blk`, `.log` or `.edt`.
pub fn parse_file_name(name: &str) -> Option<(EntryFileKind, u64)> {
    let (stem, ext) = name.split_once('.')?;
    let kind = match ext {
        "blk" => EntryFileKind::Block,
        "log" => EntryFileKind::Log,
        "edt" => EntryFileKind::Edits,
        "tier" => EntryFileKind::Stub,
        _ => return None,
    };
    if stem.len() != 16 || !stem.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(stem, 16).ok().map(|seq| (kind, seq))
}

/// The kinds of data file an entry directory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryFileKind {
    /// A sealed block, `<seq>.blk`.
    Block,
    /// An open or late log, `<seq>.log`.
    Log,
    /// A block's edit log, `<seq>.edt`.
    Edits,
    /// The stub of a tiered block, `<seq>.tier`.
    Stub,
}

/// About the bytes a tiered block's stub adds before the metadata it copies (magic and
/// the location as JSON), for size reports.
const STUB_HEADER_ESTIMATE: u64 = 200;

/// Path of the stub of tiered block `seq` in an entry directory: what stays local.
pub fn stub_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:016x}.tier"))
}

/// Path of block file `seq` in an entry directory.
pub fn block_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:016x}.blk"))
}

/// Path of the edit log of block `seq` in an entry directory.
pub fn edits_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:016x}.edt"))
}

/// Path of log file `seq` in an entry directory.
pub fn log_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:016x}.log"))
}

impl EntryIndex {
    /// An empty index.
    pub fn new() -> Self {
        EntryIndex {
            format: PLAIN_FORMAT,
            ..Default::default()
        }
    }

    /// Hands out a fresh file sequence number.
    pub fn take_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    /// Names of every file this index refers to.
    pub fn file_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.blocks.iter().map(BlockEntry::file_name).collect();
        for seq in self.log_seqs() {
            names.push(format!("{seq:016x}.log"));
        }
        names.push(INDEX_FILE.to_string());
        names
    }

    /// The sequence numbers of every log the index names: the open log, the late log, and
    /// the logs waiting for their seal.
    pub fn log_seqs(&self) -> impl Iterator<Item = u64> + '_ {
        self.open_log
            .iter()
            .chain(&self.late_log)
            .chain(&self.sealing_logs)
            .copied()
    }

    /// Every file of the entry directory this index keeps: the files it names and the
    /// edit logs of its blocks (which belong to their block, unnamed).
    pub fn kept_files(&self) -> HashSet<String> {
        let mut names: HashSet<String> = self.file_names().into_iter().collect();
        names.extend(self.blocks.iter().map(|b| format!("{:016x}.edt", b.seq)));
        names
    }

    /// Loads the index of an entry directory; a missing or damaged index is an error.
    pub fn load(dir: &Path) -> Result<Self> {
        match Self::try_load(dir)? {
            IndexLoad::Loaded(index) => Ok(index),
            IndexLoad::Missing => Err(Error::not_found(format!(
                "{} is missing",
                dir.join(INDEX_FILE).display()
            ))),
            IndexLoad::Damaged(e) => Err(e),
        }
    }

    /// Loads the index of an entry directory, telling a missing or damaged index (which the
    /// entry's files can replace) from a failure to read it or a format this version does
    /// not read (errors: nothing may be rebuilt over those).
    pub fn try_load(dir: &Path) -> Result<IndexLoad> {
        let path = dir.join(INDEX_FILE);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(IndexLoad::Missing),
            Err(e) => return Err(Error::io(format!("reading {}", path.display()), e)),
        };
        Self::from_bytes(&bytes, &path)
    }

    /// [`EntryIndex::try_load`] of the bytes read from `path`.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<IndexLoad> {
        let body = match strip_crc_trailer(bytes, path) {
            Ok(body) => body,
            Err(e) => return Ok(IndexLoad::Damaged(e)),
        };
        let index: EntryIndex = match serde_json::from_slice(body) {
            Ok(index) => index,
            Err(e) => {
                return Ok(IndexLoad::Damaged(Error::internal(format!(
                    "{} does not parse: {e}",
                    path.display()
                ))));
            }
        };
        if !(OLDEST_READABLE_FORMAT..=INDEX_FORMAT).contains(&index.format) {
            return Err(Error::internal(format!(
                "{} has format {}, this version reads {OLDEST_READABLE_FORMAT} to {INDEX_FORMAT}",
                path.display(),
                index.format
            )));
        }
        Ok(IndexLoad::Loaded(index))
    }

    /// Commits the index: atomic replace, the moment a change happens.
    pub fn save(&self, dir: &Path) -> Result<()> {
        let mut current = std::borrow::Cow::Borrowed(self);
        let format = if self.blocks.iter().any(|b| b.in_log) {
            INDEX_FORMAT
        } else if !self.sealing_logs.is_empty() {
            SEALING_FORMAT
        } else {
            PLAIN_FORMAT
        };
        if self.format != format {
            // An index loaded in an older format is written in the current one.
            current.to_mut().format = format;
        }
        let body = serde_json::to_vec(&*current)
            .map_err(|e| Error::internal(format!("encoding index: {e}")))?;
        write_atomic(&dir.join(INDEX_FILE), &with_crc_trailer(body))
    }
}

/// The largest number of blocks whose time ranges contain one instant, and the first
/// instant where that many do (0 and 0 for no blocks).
pub fn max_overlap(blocks: &[BlockEntry]) -> (usize, u64) {
    // Sweep over range starts and (exclusive) ends; at equal instants ends come first.
    let mut events: Vec<(u64, i8)> = Vec::with_capacity(blocks.len() * 2);
    for b in blocks {
        events.push((b.first_ts, 1));
        if let Some(after) = b.last_ts.checked_add(1) {
            events.push((after, -1));
        }
    }
    events.sort_unstable();
    let (mut depth, mut best, mut at) = (0i64, 0i64, 0u64);
    for (ts, delta) in events {
        depth += i64::from(delta);
        if depth > best {
            best = depth;
            at = ts;
        }
    }
    (best as usize, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_load_round_trip_and_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let mut index = EntryIndex::new();
        let seq = index.take_seq();
        index.blocks.push(BlockEntry {
            seq,
            first_ts: 1,
            last_ts: 9,
            record_count: 3,
            size: 100,
            payload_bytes: 50,
            codec: Codec::Zstd(3),
            meta_crc: 7,
            edited: true,
            in_log: false,
            remote: None,
            edits: EditState::default(),
        });
        index.open_log = Some(index.take_seq());
        index.late_log = Some(index.take_seq());
        index.save(dir.path()).unwrap();
        index.format = PLAIN_FORMAT;
        assert_eq!(EntryIndex::load(dir.path()).unwrap(), index);
        assert_eq!(
            index.file_names(),
            vec![
                "0000000000000000.blk",
                "0000000000000001.log",
                "0000000000000002.log",
                ".index"
            ]
        );

        let path = dir.path().join(INDEX_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[3] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        assert!(EntryIndex::load(dir.path()).is_err());
    }
}
