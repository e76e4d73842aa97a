//! An entry: one time series of records, stored as sealed blocks plus an open block.
//!
//! Invariant: sealed blocks are sorted by first timestamp and cover disjoint time ranges;
//! the open block (a log) holds only timestamps after the last sealed one. A record with
//! timestamp `ts` therefore belongs to exactly one block: the open block when `ts` is past
//! every sealed block, otherwise the sealed block with the greatest first timestamp ≤ `ts`
//! (or the first block, for a `ts` older than everything).

use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::storage::block::SealedBlock;
use crate::storage::cache::BlockCache;
use crate::storage::fsutil::remove_file_if_exists;
use crate::storage::index::{BlockEntry, EntryIndex, block_path, log_path};
use crate::storage::log::{LogRecord, OpenLog};
use crate::storage::record::{Labels, Payload, Record, RecordMeta};

/// Gives every entry instance a unique id so cached blocks of a removed and re-created
/// entry can never be confused with the new one's.
static NEXT_ENTRY_UID: AtomicU64 = AtomicU64::new(1);

/// When the open block is sealed and a new one starts (from the bucket settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockLimits {
    /// Seal before a record would take the block's payload past this many bytes.
    pub max_block_size: u64,
    /// Seal once the block holds this many records.
    pub max_block_records: u64,
}

/// Statistics of an entry, as `GET /b/{bucket}` reports them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EntryInfo {
    /// Entry name.
    pub name: String,
    /// Bytes on disk: block files plus the open log.
    pub size: u64,
    /// Number of records.
    pub record_count: u64,
    /// Number of blocks holding records (the open block counts once it has one).
    pub block_count: u64,
    /// Oldest timestamp, 0 when empty.
    pub oldest_record: u64,
    /// Latest timestamp, 0 when empty.
    pub latest_record: u64,
}

/// Where a timestamp belongs.
enum Slot {
    Open,
    Sealed(usize),
    /// Past every sealed block with no open block: a new open block must start.
    NewOpen,
}

/// A run of records a reader takes from one block without holding the entry lock.
pub enum Chunk {
    /// Records `range` of a mapped sealed block.
    Sealed(Arc<SealedBlock>, Range<usize>),
    /// Records of the open block, with the log file they live in.
    Open(Arc<File>, Vec<LogRecord>),
}

pub(crate) struct EntryState {
    pub(crate) index: EntryIndex,
    pub(crate) open: Option<OpenLog>,
    removed: bool,
}

/// One entry of a bucket.
pub struct Entry {
    name: String,
    bucket: String,
    dir: PathBuf,
    uid: u64,
    pub(crate) cache: Arc<BlockCache>,
    pub(crate) frame_size: usize,
    state: Mutex<EntryState>,
}

impl Entry {
    /// Creates a new, empty entry directory.
    pub(crate) fn create(
        bucket: &str,
        name: &str,
        dir: &Path,
        cache: Arc<BlockCache>,
        frame_size: usize,
    ) -> Result<Entry> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("creating entry {}", dir.display()), e))?;
        let index = EntryIndex::new();
        index.save(dir)?;
        Ok(Self::with_state(
            bucket, name, dir, cache, frame_size, index, None,
        ))
    }

    /// Opens an entry directory: loads the index, removes files of interrupted changes
    /// (anything the index does not name), and replays the open log.
    pub(crate) fn open(
        bucket: &str,
        name: &str,
        dir: &Path,
        cache: Arc<BlockCache>,
        frame_size: usize,
    ) -> Result<Entry> {
        let index = EntryIndex::load(dir)?;
        let named = index.file_names();
        let listing = std::fs::read_dir(dir)
            .map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
        for item in listing {
            let item = item.map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
            let is_file = item.file_type().map(|t| t.is_file()).unwrap_or(false);
            let file_name = item.file_name().to_string_lossy().into_owned();
            if is_file && !named.contains(&file_name) {
                log::info!("entry {bucket}/{name}: removing leftover {file_name}");
                remove_file_if_exists(&item.path())?;
            }
        }
        let open = match index.open_log {
            Some(seq) => Some(OpenLog::open(&log_path(dir, seq))?),
            None => None,
        };
        Ok(Self::with_state(
            bucket, name, dir, cache, frame_size, index, open,
        ))
    }

    fn with_state(
        bucket: &str,
        name: &str,
        dir: &Path,
        cache: Arc<BlockCache>,
        frame_size: usize,
        index: EntryIndex,
        open: Option<OpenLog>,
    ) -> Entry {
        Entry {
            name: name.to_string(),
            bucket: bucket.to_string(),
            dir: dir.to_path_buf(),
            uid: NEXT_ENTRY_UID.fetch_add(1, Ordering::Relaxed),
            cache,
            frame_size,
            state: Mutex::new(EntryState {
                index,
                open,
                removed: false,
            }),
        }
    }

    /// The entry name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The entry directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    pub(crate) fn lock(&self) -> Result<MutexGuard<'_, EntryState>> {
        // A panic while holding the lock happens only between a commit and the in-memory
        // update; the on-disk state stays consistent, so keep serving.
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.removed {
            return Err(Error::not_found(format!(
                "Entry '{}' not found in bucket '{}'",
                self.name, self.bucket
            )));
        }
        Ok(st)
    }

    /// Marks the entry removed so that later calls fail instead of touching moved files.
    pub(crate) fn mark_removed(&self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.removed = true;
        for b in &st.index.blocks {
            self.cache.evict((self.uid, b.seq));
        }
    }

    pub(crate) fn not_found(&self, ts: u64) -> Error {
        Error::not_found(format!(
            "Record {ts} not found in entry {}/{}",
            self.bucket, self.name
        ))
    }

    /// The mapped block behind an index entry.
    pub(crate) fn block(&self, b: &BlockEntry) -> Result<Arc<SealedBlock>> {
        self.cache.get_or_open((self.uid, b.seq), || {
            let what = format!(
                "block {} ({:016x}.blk) of entry {}/{}",
                b.first_ts, b.seq, self.bucket, self.name
            );
            SealedBlock::open(&block_path(&self.dir, b.seq), what, Some(b.meta_crc))
        })
    }

    /// The block behind an index entry, mapped for copying its frames only (not cached, its
    /// record table not parsed): what recompression reads.
    pub(crate) fn block_frames(&self, b: &BlockEntry) -> Result<Arc<SealedBlock>> {
        let what = format!(
            "block {} ({:016x}.blk) of entry {}/{}",
            b.first_ts, b.seq, self.bucket, self.name
        );
        SealedBlock::open_frames(&block_path(&self.dir, b.seq), what, Some(b.meta_crc))
            .map(Arc::new)
    }

    /// Drops a replaced block from the cache and unlinks its file (step 4 of the protocol).
    pub(crate) fn discard_block_file(&self, seq: u64) {
        self.cache.evict((self.uid, seq));
        if let Err(e) = remove_file_if_exists(&block_path(&self.dir, seq)) {
            // The index no longer names it: the next open removes it.
            log::warn!("{e}");
        }
    }

    fn slot_for(st: &EntryState, ts: u64) -> Slot {
        let past_sealed = st.index.blocks.last().is_none_or(|b| ts > b.last_ts);
        if past_sealed {
            return if st.open.is_some() {
                Slot::Open
            } else {
                Slot::NewOpen
            };
        }
        let after = st.index.blocks.partition_point(|b| b.first_ts <= ts);
        Slot::Sealed(after.saturating_sub(1))
    }

    /// Writes a record. Any timestamp order works; an existing timestamp is a conflict.
    pub fn write(&self, meta: RecordMeta, payload: &[u8], limits: BlockLimits) -> Result<()> {
        let ts = meta.timestamp;
        let conflict = || Error::conflict(format!("A record with timestamp {ts} already exists"));
        let mut st = self.lock()?;
        match Self::slot_for(&st, ts) {
            Slot::Open => {
                let open = st.open.as_ref().expect("Slot::Open implies an open block");
                if open.records().contains_key(&ts) {
                    return Err(conflict());
                }
                let at_tail = open.records().keys().next_back().is_none_or(|&l| ts > l);
                let full = open.records().len() as u64 >= limits.max_block_records
                    || open.payload_bytes() + payload.len() as u64 > limits.max_block_size;
                if at_tail && full && !open.records().is_empty() {
                    self.seal(&mut st)?;
                    self.start_open(&mut st)?;
                }
            }
            Slot::NewOpen => self.start_open(&mut st)?,
            Slot::Sealed(pos) => {
                let entry = st.index.blocks[pos].clone();
                let block = self.block(&entry)?;
                if block.find(ts).is_some() {
                    return Err(conflict());
                }
                let edit = super::rewrite::BlockEdit {
                    insert: Some((&meta, payload)),
                    ..Default::default()
                };
                return self.rewrite_one(&mut st, pos, &block, &edit);
            }
        }
        st.open
            .as_mut()
            .expect("an open block exists after start_open")
            .append_record(meta, payload)
    }

    /// Starts a new open block and commits the index naming it.
    fn start_open(&self, st: &mut EntryState) -> Result<()> {
        let mut next = st.index.clone();
        let seq = next.take_seq();
        next.open_log = Some(seq);
        let path = log_path(&self.dir, seq);
        let log = OpenLog::create(&path)?;
        if let Err(e) = next.save(&self.dir) {
            let _ = remove_file_if_exists(&path);
            return Err(e);
        }
        st.index = next;
        st.open = Some(log);
        Ok(())
    }

    /// The record with timestamp `ts`, or the latest one when `ts` is `None`.
    pub fn read(&self, ts: Option<u64>) -> Result<Record> {
        let chunk = {
            let st = self.lock()?;
            let ts = match ts {
                Some(ts) => ts,
                None => Self::latest_of(&st).unwrap_or(0),
            };
            self.locate(&st, ts)?.ok_or_else(|| self.not_found(ts))?
        };
        let (meta, payload) = match chunk {
            Chunk::Sealed(block, range) => (
                block.records()[range.start].meta.clone(),
                block.payload(range.start)?,
            ),
            Chunk::Open(file, records) => {
                let rec = &records[0];
                (rec.meta.clone(), OpenLog::read_payload(&file, rec)?)
            }
        };
        Ok(Record {
            entry: self.name.clone(),
            meta,
            payload: Some(payload),
        })
    }

    /// The one-record chunk holding `ts`, if the record exists.
    fn locate(&self, st: &EntryState, ts: u64) -> Result<Option<Chunk>> {
        Ok(match Self::slot_for(st, ts) {
            Slot::Open => {
                let open = st.open.as_ref().expect("Slot::Open implies an open block");
                open.records()
                    .get(&ts)
                    .map(|rec| Chunk::Open(open.file(), vec![rec.clone()]))
            }
            Slot::NewOpen => None,
            Slot::Sealed(pos) => {
                let block = self.block(&st.index.blocks[pos])?;
                block.find(ts).map(|i| Chunk::Sealed(block, i..i + 1))
            }
        })
    }

    /// Changes labels: a non-empty value sets the label, an empty value removes it.
    pub fn update_labels(&self, ts: u64, changes: &Labels) -> Result<()> {
        let mut st = self.lock()?;
        let apply = |labels: &Labels| {
            let mut out = labels.clone();
            for (k, v) in changes {
                if v.is_empty() {
                    out.remove(k);
                } else {
                    out.insert(k.clone(), v.clone());
                }
            }
            out
        };
        match Self::slot_for(&st, ts) {
            Slot::Open => {
                let open = st.open.as_mut().expect("Slot::Open implies an open block");
                let rec = open.records().get(&ts).ok_or_else(|| self.not_found(ts))?;
                let labels = apply(&rec.meta.labels);
                if labels != rec.meta.labels {
                    open.append_labels(ts, &labels)?;
                }
                Ok(())
            }
            Slot::NewOpen => Err(self.not_found(ts)),
            Slot::Sealed(pos) => {
                let block = self.block(&st.index.blocks[pos])?;
                let i = block.find(ts).ok_or_else(|| self.not_found(ts))?;
                let labels = apply(&block.records()[i].meta.labels);
                if labels == block.records()[i].meta.labels {
                    return Ok(());
                }
                let edit = super::rewrite::BlockEdit {
                    relabel: Some((ts, labels)),
                    ..Default::default()
                };
                self.rewrite_one(&mut st, pos, &block, &edit)
            }
        }
    }

    /// Removes one record.
    pub fn remove_record(&self, ts: u64) -> Result<()> {
        let mut st = self.lock()?;
        match Self::slot_for(&st, ts) {
            Slot::Open => {
                let open = st.open.as_mut().expect("Slot::Open implies an open block");
                if !open.records().contains_key(&ts) {
                    return Err(self.not_found(ts));
                }
                open.append_remove(ts)
            }
            Slot::NewOpen => Err(self.not_found(ts)),
            Slot::Sealed(pos) => {
                let block = self.block(&st.index.blocks[pos])?;
                block.find(ts).ok_or_else(|| self.not_found(ts))?;
                let doomed = std::collections::HashSet::from([ts]);
                let edit = super::rewrite::BlockEdit {
                    remove: Some(&doomed),
                    ..Default::default()
                };
                self.rewrite_one(&mut st, pos, &block, &edit)
            }
        }
    }

    fn oldest_of(st: &EntryState) -> Option<u64> {
        st.index
            .blocks
            .first()
            .map(|b| b.first_ts)
            .or_else(|| st.open.as_ref()?.records().keys().next().copied())
    }

    fn latest_of(st: &EntryState) -> Option<u64> {
        st.open
            .as_ref()
            .and_then(|o| o.records().keys().next_back().copied())
            .or_else(|| st.index.blocks.last().map(|b| b.last_ts))
    }

    /// Size, counts and time range of the entry.
    pub fn info(&self) -> Result<EntryInfo> {
        let st = self.lock()?;
        let open_records = st.open.as_ref().map_or(0, |o| o.records().len() as u64);
        Ok(EntryInfo {
            name: self.name.clone(),
            size: st.index.blocks.iter().map(|b| b.size).sum::<u64>()
                + st.open.as_ref().map_or(0, |o| o.file_len()),
            record_count: st.index.blocks.iter().map(|b| b.record_count).sum::<u64>()
                + open_records,
            block_count: st.index.blocks.len() as u64 + u64::from(open_records > 0),
            oldest_record: Self::oldest_of(&st).unwrap_or(0),
            latest_record: Self::latest_of(&st).unwrap_or(0),
        })
    }

    /// The next run of records with `from <= ts < stop`, and where the run after it starts.
    /// Readers call this repeatedly; each call takes the lock only briefly, so writers and
    /// compaction keep going while a long query streams. A block that cannot be opened
    /// comes back as an inner error with the position after it, so readers can skip it.
    pub fn next_chunk(&self, from: u64, stop: u64) -> Result<Option<(Result<Chunk>, u64)>> {
        let st = self.lock()?;
        let first = st.index.blocks.partition_point(|b| b.last_ts < from);
        for b in &st.index.blocks[first..] {
            if b.first_ts >= stop {
                return Ok(None);
            }
            let after = b.last_ts.saturating_add(1);
            let block = match self.block(b) {
                Ok(block) => block,
                Err(e) => return Ok(Some((Err(e), after))),
            };
            let range = block.range(from, stop);
            if !range.is_empty() {
                return Ok(Some((Ok(Chunk::Sealed(block, range)), after)));
            }
        }
        let Some(open) = st.open.as_ref() else {
            return Ok(None);
        };
        let records: Vec<LogRecord> = open
            .records()
            .range(from..stop.max(from))
            .map(|(_, r)| r.clone())
            .collect();
        Ok((!records.is_empty()).then(|| (Ok(Chunk::Open(open.file(), records)), stop)))
    }

    /// Commit helper shared by rewrites and bulk removal: saves `next` as the new index,
    /// then unlinks the files it replaced.
    pub(crate) fn commit(
        &self,
        st: &mut EntryState,
        next: EntryIndex,
        created: &[PathBuf],
        obsolete_blocks: &[u64],
    ) -> Result<()> {
        if let Err(e) = next.save(&self.dir) {
            for path in created {
                let _ = remove_file_if_exists(path);
            }
            return Err(e);
        }
        st.index = next;
        for &seq in obsolete_blocks {
            self.discard_block_file(seq);
        }
        Ok(())
    }
}

/// Reads the payload a chunk holds at position `i` (for query iterators).
pub(crate) fn chunk_record(
    chunk: &Chunk,
    i: usize,
    with_payload: bool,
) -> Result<(RecordMeta, Option<Payload>)> {
    match chunk {
        Chunk::Sealed(block, range) => {
            let idx = range.start + i;
            let meta = block.records()[idx].meta.clone();
            let payload = if with_payload {
                Some(block.payload(idx)?)
            } else {
                None
            };
            Ok((meta, payload))
        }
        Chunk::Open(file, records) => {
            let rec = &records[i];
            let payload = if with_payload {
                Some(OpenLog::read_payload(file, rec)?)
            } else {
                None
            };
            Ok((rec.meta.clone(), payload))
        }
    }
}

/// Metadata of the record at position `i` of a chunk, without copying it.
pub(crate) fn chunk_meta(chunk: &Chunk, i: usize) -> &RecordMeta {
    match chunk {
        Chunk::Sealed(block, range) => &block.records()[range.start + i].meta,
        Chunk::Open(_, records) => &records[i].meta,
    }
}

/// Number of records in a chunk.
pub(crate) fn chunk_len(chunk: &Chunk) -> usize {
    match chunk {
        Chunk::Sealed(_, range) => range.len(),
        Chunk::Open(_, records) => records.len(),
    }
}
