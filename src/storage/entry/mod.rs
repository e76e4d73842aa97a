//! An entry: one time series of records, stored as sealed blocks plus two logs.
//!
//! Data arrives out of order, so sealed blocks may overlap in time. A write at or after the
//! open block's first record (or past every sealed block when there is no open block)
//! appends to the **open log**; an older, belated write appends to the **late log**. Both
//! are the same append-only format (one `pwrite` per write) and both seal into a block file
//! when they reach the bucket's block limits — so no write ever copies a block's payload.
//! The blocks are kept sorted by first timestamp together with `reach`, the running maximum
//! of their last timestamps: the blocks that can hold `ts` are found by a binary search on
//! first timestamps and a walk back that stops as soon as `reach` falls below `ts`, without
//! scanning the blocks before it (see [`EntryState::covering`]).
//!
//! This file and its `commit.rs`, `edits.rs`, `removal.rs`, `seal.rs` and `fold.rs` are
//! the only places that change an entry's state; `read.rs` reads it, and the rewrites it
//! commits are written by functions of `storage::format` and `storage::merge`.
//!
//! Files: `state.rs` (the state behind the lock and its lookups); `commit.rs` (committing
//! sealed blocks); `seal.rs` (full logs frozen by a write, sealed in place into blocks
//! off the lock); `seal_names.rs` (the names a cut seal leaves, restored at open);
//! `edits.rs` (relabels and removals of sealed records through edit logs);
//! `fold.rs` (tombstones folded into rewrites off the lock); `bulk.rs`, `removal.rs`
//! (planning a bulk removal, carrying it out); `read.rs`, `chunk.rs` and
//! `tiered_source.rs` (reads, local and tiered); `stale.rs` (sealing logs nobody writes to); `background.rs`
//! (coordinating with merges and removals outside the lock); `obsolete.rs` (files removed
//! after a commit); `rebuild.rs` (rebuilding a lost index); `summary.rs` (what an entry
//! holds, from its index); `histogram.rs` (records per stretch of time); `tier.rs`
//! (handing blocks to a remote); `replica.rs` (a replica's entry: loaded without writing,
//! and again as its writer changes it).

mod background;
pub(crate) mod bulk;
mod chunk;
mod commit;
mod edits;
mod fold;
mod histogram;
mod obsolete;
mod read;
mod rebuild;
mod removal;
mod replica;
mod seal;
mod seal_names;
mod stale;
mod state;
mod summary;
mod tier;
mod tiered_source;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, Weak};

use crate::error::{Error, Result};
use crate::storage::cache::BlockCache;
use crate::storage::format::edits::BlockChange;
use crate::storage::format::index::max_overlap;
use crate::storage::format::index::{BlockEntry, EntryIndex, IndexLoad, edits_path, log_path};
use crate::storage::format::log::OpenLog;
use crate::storage::names::validate_label_set;
use crate::storage::record::{Labels, RecordMeta};
use crate::storage::sync::fsutil::{create_dirs_durably, fsync_dir, remove_file_if_exists};
use crate::storage::sync::{Durability, Pending};

pub use crate::storage::settings::BlockLimits;
pub use chunk::Chunk;
pub(crate) use chunk::{
    LastFrame, MergedRecord, chunk_len, chunk_locator, chunk_meta, chunk_record, locator_record,
};
use edits::load_edits;
pub use histogram::Histogram;
pub(crate) use obsolete::{ObsoleteFiles, remove_in};
use rebuild::rebuild_index;
pub(crate) use rebuild::{EntryFiles, holds_entry, unnamed_files};
pub(crate) use replica::Look;
use seal::MAX_SEALING_LOGS;
pub(crate) use seal_names::seal_renames;
pub(crate) use stale::StaleLog;
use state::take_index_log;
pub(crate) use state::{EntryState, LogKind, Place};
pub use summary::{EntryInfo, RecordSpan, TierInfo};
pub use tier::{Outgoing, TierStep, Uploaded};

/// What every entry of a bucket shares: the block cache, the frame size, and the overlap
/// bound past which a background merge is asked for.
#[derive(Clone)]
pub(crate) struct EntryContext {
    /// Mapped, parsed blocks of the bucket.
    pub cache: Arc<BlockCache>,
    /// Target raw size of a payload frame.
    pub frame_size: usize,
    /// More sealed blocks than this overlapping one instant asks for a merge.
    pub max_overlap: usize,
    /// A block whose tombstoned share of records reaches this is rewritten without them.
    pub fold_share: f64,
    /// Whether an entry whose edit log is missing opens anyway (`Config`).
    pub accept_lost_edits: bool,
    /// The entries are a replica's (`Config::read_only`): loaded without writing,
    /// loaded again as their writer changes them, and never written.
    pub read_only: bool,
    /// The sync mode: what a writer waits for after appending to a log.
    pub durability: Arc<Durability>,
    /// Told of every write and label update (replication), once the server installs it.
    pub observer: Arc<crate::storage::observer::Observers>,
    /// The remote object stores tiered blocks live on.
    pub remotes: Arc<crate::storage::remote::Remotes>,
    /// The store's background thread: seals of full logs, folds, unlinks of evicted
    /// files — the large I/O no write waits for.
    pub seals: crate::storage::sealer::SealQueue,
}

/// Gives every entry instance a unique id so cached blocks of a removed and re-created
/// entry can never be confused with the new one's.
static NEXT_ENTRY_UID: AtomicU64 = AtomicU64::new(1);

/// Blocks written without the entry lock, to be swapped in for the blocks they replace
/// (see [`Entry::replace_blocks`]).
pub(crate) struct Replacement {
    /// The blocks replaced, as versions ([`BlockEntry::version`]) of what was read.
    pub old: Vec<(u64, u64)>,
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

/// One entry of a bucket.
pub struct Entry {
    name: String,
    bucket: String,
    dir: PathBuf,
    uid: u64,
    pub(crate) ctx: EntryContext,
    /// Set while a background merge of this entry is queued, so it is queued once.
    merge_queued: AtomicBool,
    /// Set while a look at the overlap after the background seals is queued.
    merge_recheck_queued: AtomicBool,
    /// The most sealed blocks covering one instant, as of the last commit; atomic so every
    /// write can ask whether a merge is due without taking the state lock again.
    depth: AtomicUsize,
    /// Set when a background merge failed (a damaged block, a full disk); cleared by the
    /// next commit, so a failing merge is retried once the blocks change, not per write.
    merge_failed: AtomicBool,
    /// Held by whoever writes or removes this entry's files apart from the state lock
    /// (the background merge, compaction, the recompression stream), over the I/O: two
    /// merges of the same blocks would only make one of them wasted work, and the entry's
    /// removal takes it so that no such writer touches the directory's path once it may
    /// name a re-created entry.
    merging: Mutex<()>,
    /// Held shared by a tier run's uploads and commits while they read and write the
    /// entry's files by path (they exclude neither each other nor the recompression
    /// stream, whose blocks they upload); the entry's removal takes it exclusively, as
    /// `merging`.
    uploading: RwLock<()>,
    /// Set when the entry's removal begins: writers holding `merging` stop at their next
    /// step and let the removal go on.
    removing: AtomicBool,
    /// Held by whoever seals a log waiting for its seal (`seal.rs`) or folds a block
    /// (`fold.rs`): the background thread, a writer the backlog stopped, or a catch-up;
    /// the entry's removal takes it, as `merging`.
    sealing: Mutex<()>,
    /// Set while the background sealer is asked for this entry and has not started on
    /// it, so it is asked once.
    background_queued: AtomicBool,
    /// This entry as the bucket shares it ([`Entry::into_shared`]): what is sent to the
    /// background thread.
    this: Weak<Entry>,
    /// Held by a replica's load of the state again (`replica.rs`), so two at once do not
    /// both read the files.
    reloading: Mutex<()>,
    state: Mutex<EntryState>,
}

impl Entry {
    /// Creates a new, empty entry directory.
    pub(crate) fn create(bucket: &str, name: &str, dir: &Path, ctx: EntryContext) -> Result<Entry> {
        create_dirs_durably(dir)?;
        let index = EntryIndex::new();
        index.save(dir)?;
        Ok(Self::with_state(
            bucket,
            name,
            dir,
            ctx,
            EntryState::new(index, None, None, HashMap::new()),
        ))
    }

    /// Opens an entry directory: loads the index, removes files of interrupted changes
    /// (anything the index does not name), and replays the logs.
    /// A missing or damaged index is rebuilt from the entry's files (`rebuild.rs`).
    /// A replica's entry (`EntryContext::read_only`) is loaded without writing
    /// (`replica.rs`).
    pub(crate) fn open(bucket: &str, name: &str, dir: &Path, ctx: EntryContext) -> Result<Entry> {
        if ctx.read_only {
            return Self::open_replica(bucket, name, dir, ctx);
        }
        let state = Self::recover(bucket, name, dir, &ctx)?;
        let entry = Self::with_state(bucket, name, dir, ctx, state);
        {
            let mut st = entry.lock()?;
            entry.narrow_ranges(&mut st)?;
        }
        // Logs a crash left waiting for their seal are sealed now, before anyone writes;
        // one that fails stays readable where it is and is tried again with the next seal.
        if let Err(e) = entry.seal_all() {
            log::error!(
                "entry {bucket}/{name}: sealing the logs left full by a crash failed ({e}); their records are read from the logs meanwhile, and the seal is tried again with the next log that fills"
            );
        }
        Ok(entry)
    }

    /// The writer's open: the state as a crash left it, its leftovers removed.
    fn recover(bucket: &str, name: &str, dir: &Path, ctx: &EntryContext) -> Result<EntryState> {
        let index = match EntryIndex::try_load(dir)? {
            IndexLoad::Loaded(index) => index,
            IndexLoad::Missing => {
                rebuild_index(bucket, name, dir, ctx.frame_size, "the index is missing")?
            }
            IndexLoad::Damaged(e) => rebuild_index(
                bucket,
                name,
                dir,
                ctx.frame_size,
                &format!("the index is damaged ({e})"),
            )?,
        };
        seal_names::restore_seal_names(&format!("{bucket}/{name}"), dir, &index)?;
        for file_name in unnamed_files(dir, &index)?.leftovers {
            log::info!("entry {bucket}/{name}: removing leftover {file_name}");
            remove_file_if_exists(&dir.join(file_name))?;
        }
        let replay = |seq: Option<u64>| -> Result<Option<OpenLog>> {
            let Some(seq) = seq else {
                return Ok(None);
            };
            let path = log_path(dir, seq);
            if path.exists() {
                return OpenLog::open(&path).map(Some);
            }
            // The index commit that named the log is durable but the log's creation is
            // not (it cannot happen when both were synced in order, but a file system
            // that reorders is not impossible): nothing was acknowledged into it.
            log::warn!(
                "entry {bucket}/{name}: the index names {} but it is missing (its creation did not survive); starting it empty",
                path.display()
            );
            let log = OpenLog::create(&path)?;
            fsync_dir(dir)?;
            Ok(Some(log))
        };
        let open = replay(index.open_log)?;
        let late = replay(index.late_log)?;
        let mut index = index;
        let mut sealing = Vec::new();
        let mut lost_logs = false;
        for seq in std::mem::take(&mut index.sealing_logs) {
            let path = log_path(dir, seq);
            if path.exists() {
                sealing.push((seq, OpenLog::open(&path)?));
                index.sealing_logs.push(seq);
            } else {
                // It was the entry's open or late log before it filled, so its creation
                // was durable: only damage from outside takes it.
                log::error!(
                    "entry {bucket}/{name}: the index names the full log {} but it is missing; its records are lost",
                    path.display()
                );
                lost_logs = true;
            }
        }
        let (edits, lost_edits) =
            load_edits(bucket, name, dir, &mut index, ctx.accept_lost_edits, false)?;
        if lost_edits || lost_logs {
            // The index stops expecting the lost logs.
            index.save(dir)?;
        }
        let mut state = EntryState::new(index, open, late, edits);
        state.sealing = sealing;
        Ok(state)
    }

    /// A tombstone on a block's first or last record narrows its range; the index on
    /// disk may predate it.
    fn narrow_ranges(&self, st: &mut EntryState) -> Result<()> {
        let seqs: Vec<u64> = st.edits.keys().copied().collect();
        for seq in seqs {
            self.narrow_range(st, seq)?;
        }
        Ok(())
    }

    fn with_state(
        bucket: &str,
        name: &str,
        dir: &Path,
        ctx: EntryContext,
        state: EntryState,
    ) -> Entry {
        Entry {
            name: name.to_string(),
            bucket: bucket.to_string(),
            dir: dir.to_path_buf(),
            uid: NEXT_ENTRY_UID.fetch_add(1, Ordering::Relaxed),
            ctx,
            merge_queued: AtomicBool::new(false),
            merge_recheck_queued: AtomicBool::new(false),
            depth: AtomicUsize::new(max_overlap(&state.index.blocks).0),
            merge_failed: AtomicBool::new(false),
            merging: Mutex::new(()),
            uploading: RwLock::new(()),
            removing: AtomicBool::new(false),
            sealing: Mutex::new(()),
            background_queued: AtomicBool::new(false),
            this: Weak::new(),
            reloading: Mutex::new(()),
            state: Mutex::new(state),
        }
    }

    /// The entry as its bucket shares it, able to ask the background thread for work
    /// (seals, folds) on its own behalf.
    pub(crate) fn into_shared(mut self) -> Arc<Entry> {
        Arc::new_cyclic(|this| {
            self.this = this.clone();
            self
        })
    }

    /// The entry name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The entry directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// The configured frame size of new block files.
    pub(crate) fn frame_size(&self) -> usize {
        self.ctx.frame_size
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
            self.ctx.cache.evict((self.uid, b.seq));
        }
    }

    pub(crate) fn not_found(&self, ts: u64) -> Error {
        Error::not_found(format!(
            "Record {ts} not found in entry {}/{}",
            self.bucket, self.name
        ))
    }

    /// Writes a record. Any timestamp order works and costs one append: a belated record
    /// goes to the late log. An existing timestamp is a conflict. The write is acknowledged
    /// once the returned [`Pending`] has been waited on (after the entry lock is released,
    /// so concurrent writers share a sync).
    pub fn write(&self, meta: RecordMeta, payload: &[u8], limits: BlockLimits) -> Result<Pending> {
        let ts = meta.timestamp;
        if ts == u64::MAX {
            // Query stops are exclusive: a record here could be written but never queried.
            return Err(Error::unprocessable(format!(
                "Timestamp {ts} is out of range: the largest accepted is {}",
                u64::MAX - 1
            )));
        }
        loop {
            let mut st = self.lock()?;
            if self.has_record(&st, ts)? {
                return Err(Error::conflict(format!(
                    "A record with timestamp {ts} already exists"
                )));
            }
            let full = |log: &OpenLog| {
                log.records().len() as u64 >= limits.max_block_records
                    || log.payload_bytes() + payload.len() as u64 > limits.max_block_size
            };
            let mut kind = if st.is_belated(ts) {
                LogKind::Late
            } else {
                LogKind::Open
            };
            if kind == LogKind::Open
                && let Some(open) = st.open.as_ref()
                && full(open)
                && open.records().keys().next_back().is_some_and(|&l| ts < l)
            {
                // A full open block seals only when a write extends it (so its records stay
                // newer than every sealed block); a write inside its range goes to the late
                // log instead of growing it past the limits.
                kind = LogKind::Late;
            }
            match st.log(kind) {
                None => self.start_log(&mut st, kind)?,
                Some(log) if full(log) && !log.records().is_empty() => {
                    if st.sealing.len() >= MAX_SEALING_LOGS {
                        // Back pressure: the background seal is this many logs behind, so
                        // this writer seals the oldest itself (off the lock) before going on.
                        drop(st);
                        if !self.seal_next()? && self.is_removing() {
                            return Err(self.entry_gone());
                        }
                        continue;
                    }
                    // The full log waits for the background seal; this write starts the
                    // next one and is acknowledged as any other (`seal.rs`).
                    self.freeze(&mut st, kind, true)?;
                }
                Some(_) => {}
            }
            let log = st.log_mut(kind).expect("a log exists after start_log");
            log.append_record(meta, payload)?;
            return Ok(self.after_append(log));
        }
    }

    /// What the writer of an append to `log` waits for, as the sync mode has it.
    fn after_append(&self, log: &OpenLog) -> Pending {
        self.ctx
            .durability
            .after_append(log.sync_handle(), log.file_len())
    }

    /// Starts a new, empty log of `kind` and commits the index naming it.
    fn start_log(&self, st: &mut EntryState, kind: LogKind) -> Result<()> {
        let mut next = st.index.clone();
        let log = self.create_log(&mut next, kind)?;
        if let Err(e) = self.save_index(st, &next) {
            let _ = remove_file_if_exists(log.path());
            return Err(e);
        }
        st.index = next;
        st.put_log(kind, log);
        Ok(())
    }

    /// Creates the file of a new log of `kind` (open or late) and names it in `next`, the
    /// index the caller commits.
    fn create_log(&self, next: &mut EntryIndex, kind: LogKind) -> Result<OpenLog> {
        let seq = next.take_seq();
        match kind {
            LogKind::Open => next.open_log = Some(seq),
            LogKind::Late => next.late_log = Some(seq),
            LogKind::Sealing(_) => {
                return Err(Error::internal(
                    "a log waiting for its seal is never started".to_string(),
                ));
            }
        }
        OpenLog::create(&log_path(&self.dir, seq))
    }

    /// The error of a change to an entry whose removal has begun.
    fn entry_gone(&self) -> Error {
        Error::not_found(format!(
            "Entry '{}' not found in bucket '{}'",
            self.name, self.bucket
        ))
    }

    /// Changes labels: a non-empty value sets the label, an empty value removes it.
    /// Acknowledged once the returned [`Pending`] has been waited on.
    pub fn update_labels(&self, ts: u64, changes: &Labels) -> Result<Pending> {
        Ok(self.relabel(ts, changes)?.unwrap_or_default())
    }

    /// [`Entry::update_labels`], saying whether anything changed: `None` when the record
    /// already had these labels (nothing is written, and nothing is replicated).
    pub fn relabel(&self, ts: u64, changes: &Labels) -> Result<Option<Pending>> {
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
        match self.place(&st, ts)?.ok_or_else(|| self.not_found(ts))? {
            Place::Log(kind) => {
                let log = st.log_mut(kind).expect("a record was found in this log");
                let current = &log.records()[&ts].meta;
                let labels = apply(&current.labels);
                if labels == current.labels {
                    return Ok(None);
                }
                validate_label_set(&labels, &current.content_type)?;
                log.append_labels(ts, &labels)?;
                Ok(Some(self.after_append(log)))
            }
            Place::Sealed { pos, block, record } => {
                let current = &block.records()[record].meta;
                let labels = apply(&current.labels);
                if labels == current.labels {
                    return Ok(None);
                }
                validate_label_set(&labels, &current.content_type)?;
                drop(block);
                self.change_block(&mut st, pos, BlockChange::Relabel(ts, labels))
                    .map(Some)
            }
        }
    }

    /// Removes one record. Acknowledged once the returned [`Pending`] has been waited on.
    pub fn remove_record(&self, ts: u64) -> Result<Pending> {
        let mut st = self.lock()?;
        match self.place(&st, ts)?.ok_or_else(|| self.not_found(ts))? {
            Place::Log(kind) => {
                let log = st.log_mut(kind).expect("a record was found in this log");
                log.append_remove(ts)?;
                Ok(self.after_append(log))
            }
            Place::Sealed { pos, block, record } => {
                let size = block.records()[record].meta.size;
                drop(block);
                self.change_block(&mut st, pos, BlockChange::Remove(vec![(ts, size)]))
            }
        }
    }

    /// A snapshot of the sealed blocks, sorted by first timestamp.
    pub(crate) fn sealed_blocks(&self) -> Result<Vec<BlockEntry>> {
        Ok(self.lock()?.index.blocks.clone())
    }

    /// Reserves `n` fresh sequence numbers for files written without the lock. Reserving
    /// only bumps the in-memory counter; it is persisted with the next commit, and a file
    /// written under a number that never got committed is removed at open.
    pub(crate) fn reserve_seqs(&self, n: usize) -> Result<Vec<u64>> {
        let mut st = self.lock()?;
        Ok((0..n).map(|_| st.index.take_seq()).collect())
    }
}
