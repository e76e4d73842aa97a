//! An entry: one time series of records, stored as sealed blocks plus an open block.
//!
//! Invariant: sealed blocks are sorted by first timestamp and cover disjoint time ranges;
//! the open block (a log) holds only timestamps after the last sealed one. A record with
//! timestamp `ts` therefore belongs to exactly one block: the open block when `ts` is past
//! every sealed block, otherwise the sealed block with the greatest first timestamp ≤ `ts`
//! (or the first block, for a `ts` older than everything).

mod read;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Error, Result};
use crate::storage::bulk::{BlockPlan, RecordFilter, RemoveStats, plan_removal};
use crate::storage::cache::BlockCache;
use crate::storage::format::block::SealedBlock;
use crate::storage::format::fsutil::remove_file_if_exists;
use crate::storage::format::index::{BlockEntry, EntryIndex, block_path, log_path};
use crate::storage::format::log::OpenLog;
use crate::storage::format::rewrite::{BlockEdit, write_edited, write_log_block};
use crate::storage::record::{Labels, RecordMeta};

pub use read::Chunk;
pub(crate) use read::{chunk_len, chunk_meta, chunk_record};

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

/// Blocks written without the entry lock, to be swapped in for the blocks they replace
/// (see [`Entry::replace_blocks`]).
pub(crate) struct Replacement {
    /// Sequence numbers of the blocks replaced.
    pub old: Vec<u64>,
    /// Their replacements (none when every record is gone).
    pub new: Vec<BlockEntry>,
    /// The new files, removed if the replacement does not take effect.
    pub files: Vec<PathBuf>,
}

impl Replacement {
    /// Removes the new files of a replacement that will not be committed.
    pub(crate) fn discard(&self) {
        for path in &self.files {
            let _ = remove_file_if_exists(path);
        }
    }
}

/// Where a timestamp belongs.
pub(super) enum Slot {
    Open,
    Sealed(usize),
    /// Past every sealed block with no open block: a new open block must start.
    NewOpen,
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

    pub(super) fn slot_for(st: &EntryState, ts: u64) -> Slot {
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
                let edit = BlockEdit {
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
                let edit = BlockEdit {
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
                let doomed = HashSet::from([ts]);
                let edit = BlockEdit {
                    remove: Some(&doomed),
                    ..Default::default()
                };
                self.rewrite_one(&mut st, pos, &block, &edit)
            }
        }
    }

    /// Replaces sealed block `pos` by an edited copy (or drops it when nothing remains).
    fn rewrite_one(
        &self,
        st: &mut EntryState,
        pos: usize,
        block: &SealedBlock,
        edit: &BlockEdit,
    ) -> Result<()> {
        let mut next = st.index.clone();
        let old_seq = next.blocks[pos].seq;
        let seq = next.take_seq();
        let path = block_path(&self.dir, seq);
        let mut created = Vec::new();
        match write_edited(block, edit, &path, self.frame_size)? {
            Some(summary) => {
                next.blocks[pos] = BlockEntry::from_summary(seq, &summary);
                created.push(path);
            }
            None => {
                next.blocks.remove(pos);
            }
        }
        self.commit(st, next, &created, &[old_seq])
    }

    /// Turns the open block into a sealed block file and commits it; the entry then has no
    /// open block until the next write starts one.
    fn seal(&self, st: &mut EntryState) -> Result<()> {
        let open = st
            .open
            .as_ref()
            .expect("seal is only called with an open block");
        let mut next = st.index.clone();
        let old_log = next.open_log.take();
        let mut created = Vec::new();
        if !open.records().is_empty() {
            let seq = next.take_seq();
            let path = block_path(&self.dir, seq);
            let summary = write_log_block(open, &path, self.frame_size)?;
            next.blocks.push(BlockEntry::from_summary(seq, &summary));
            created.push(path);
        }
        self.commit(st, next, &created, &[])?;
        st.open = None;
        if let Some(seq) = old_log {
            let _ = remove_file_if_exists(&log_path(&self.dir, seq));
        }
        Ok(())
    }

    /// Removes every record with `start <= ts < stop` that passes `filter`; with `dry_run`
    /// only counts them. Sealed-block changes commit in one index update.
    pub fn remove_range(
        &self,
        start: u64,
        stop: u64,
        filter: Option<&RecordFilter>,
        dry_run: bool,
    ) -> Result<RemoveStats> {
        let mut st = self.lock()?;
        // Plan first, so a failing filter aborts before anything is written.
        let plan = plan_removal(self, &st, start, stop, filter)?;
        if dry_run {
            return Ok(plan.stats);
        }
        let mut next = st.index.clone();
        let mut kept = Vec::with_capacity(next.blocks.len());
        let mut created = Vec::new();
        let mut obsolete = Vec::new();
        for (b, action) in std::mem::take(&mut next.blocks)
            .into_iter()
            .zip(plan.blocks)
        {
            match action {
                BlockPlan::Keep => kept.push(b),
                BlockPlan::Drop => obsolete.push(b.seq),
                BlockPlan::Trim(block, doomed) => {
                    let seq = next.take_seq();
                    let path = block_path(&self.dir, seq);
                    let edit = BlockEdit {
                        remove: Some(&doomed),
                        ..Default::default()
                    };
                    match write_edited(&block, &edit, &path, self.frame_size) {
                        Ok(Some(summary)) => {
                            kept.push(BlockEntry::from_summary(seq, &summary));
                            created.push(path);
                        }
                        Ok(None) => {}
                        Err(e) => {
                            for path in &created {
                                let _ = remove_file_if_exists(path);
                            }
                            return Err(e);
                        }
                    }
                    obsolete.push(b.seq);
                }
            }
        }
        next.blocks = kept;

        let open_doomed = plan.open;
        let drop_open = st
            .open
            .as_ref()
            .is_some_and(|o| !open_doomed.is_empty() && open_doomed.len() == o.records().len());
        let dropped_log = if drop_open {
            next.open_log.take()
        } else {
            None
        };
        if next != st.index {
            self.commit(&mut st, next, &created, &obsolete)?;
        }
        if let Some(seq) = dropped_log {
            st.open = None;
            let _ = remove_file_if_exists(&log_path(&self.dir, seq));
        } else if let Some(open) = st.open.as_mut() {
            for ts in open_doomed {
                open.append_remove(ts)?;
            }
        }
        Ok(plan.stats)
    }

    /// Reserves a fresh sequence number for the new file of each of `blocks`, so that
    /// work done without the lock can be committed later. Reserving only bumps the
    /// in-memory counter; it is persisted with the next commit, and a file written under a
    /// number that never got committed is removed at open.
    pub(crate) fn select_blocks(
        &self,
        keep: impl Fn(&BlockEntry) -> bool,
    ) -> Result<Vec<(BlockEntry, u64)>> {
        let mut st = self.lock()?;
        let chosen: Vec<BlockEntry> = st
            .index
            .blocks
            .iter()
            .filter(|b| keep(b))
            .cloned()
            .collect();
        Ok(chosen
            .into_iter()
            .map(|b| {
                let seq = st.index.take_seq();
                (b, seq)
            })
            .collect())
    }

    /// Commits blocks written without the lock: each replacement swaps its `old` blocks
    /// for its `new` ones, but only if every old block is still in the index (a writer or
    /// another run that changed one meanwhile wins, and the replacement's files are
    /// removed). One index commit for all; returns which replacements took effect.
    pub(crate) fn replace_blocks(&self, replacements: Vec<Replacement>) -> Result<Vec<bool>> {
        let mut st = match self.lock() {
            Ok(st) => st,
            Err(e) => {
                // The entry was removed meanwhile: nothing to commit.
                log::info!(
                    "entry {}: {e}; dropping {} rewritten block set(s)",
                    self.name,
                    replacements.len()
                );
                for r in &replacements {
                    r.discard();
                }
                return Ok(vec![false; replacements.len()]);
            }
        };
        let mut next = st.index.clone();
        let mut created = Vec::new();
        let mut obsolete = Vec::new();
        let mut applied = Vec::with_capacity(replacements.len());
        for r in replacements {
            let present = r
                .old
                .iter()
                .all(|seq| next.blocks.iter().any(|b| b.seq == *seq));
            if !present {
                r.discard();
                applied.push(false);
                continue;
            }
            next.blocks.retain(|b| !r.old.contains(&b.seq));
            for seq in &r.old {
                // A block that keeps its file (a tier-only change) is not obsolete.
                if !r.new.iter().any(|b| b.seq == *seq) {
                    obsolete.push(*seq);
                }
            }
            next.blocks.extend(r.new);
            created.extend(r.files);
            applied.push(true);
        }
        if applied.iter().any(|a| *a) {
            next.blocks.sort_by_key(|b| b.first_ts);
            self.commit(&mut st, next, &created, &obsolete)?;
        }
        Ok(applied)
    }

    /// Commit helper shared by rewrites and bulk removal: saves `next` as the new index,
    /// then unlinks the files it replaced.
    fn commit(
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
