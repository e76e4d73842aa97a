//! The caches of a store, shared by every entry of every bucket, each bounded by a
//! setting rather than by the data (their shares of `--memory-budget` unless set on their
//! own, `storage::config::CacheBudgets`):
//! - mapped blocks with their record tables parsed (a count, `--block-cache`, and their
//!   parsed tables' memory, `--block-cache-size`), what queries stream from and edits
//!   change;
//! - the compact lookups of many more blocks (a byte budget: `--lookup-cache`), which
//!   answer reads by timestamp and the duplicate checks of writes without a parsed table
//!   (`format/lookup.rs`): out-of-order writes and random reads touch blocks anywhere in
//!   an entry's history, and a lookup costs a tenth of a parsed table or less; once
//!   they fill their budget, most misses read just the row asked for
//!   (`format/table_row.rs`, `format/block/row.rs`) rather than build a lookup;
//! - the last decoded frame of a few compressed blocks (a byte budget), so a reader
//!   walking a compressed block record by record decodes each frame once;
//! - which frames of a block file passed their checksum (`format/frames.rs`), for many
//!   more blocks than the rest (a fixed budget of [`FRAME_CHECK_BYTES`], about 140 bytes
//!   a block), so a block opened again does not check its frame again.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::Result;
use crate::storage::format::block::row::RowBlock;
use crate::storage::format::block::{SealedBlock, record_heap_bytes};
use crate::storage::format::codec::Codec;
use crate::storage::format::edits::{BlockChange, apply_change};
use crate::storage::format::frames::{DecodedFrame, FrameChecks};
use crate::storage::format::lookup::BlockLookup;
use crate::storage::format::table_row::TableRow;
use crate::storage::record::{Payload, RecordMeta};

/// Identifies a block file: the entry instance's unique id and the file's sequence number.
/// Sequence numbers are never reused within an entry instance, and entry ids never within
/// a process, so a key never names two different files.
pub type BlockKey = (u64, u64);

mod lru;
use lru::Lru;

/// What reads a block by timestamp: its compact lookup, its parsed view, or the one row
/// asked for.
pub enum BlockReader {
    /// The block's lookup.
    Lookup(Arc<BlockLookup>),
    /// The block's parsed view (lookups have no budget, or the block is too large).
    Parsed(Arc<SealedBlock>),
    /// The row with the timestamp asked for, if the block has one, found in its table
    /// without a lookup (the lookups' budget is full: see [`BlockCache::reader`]).
    Row(Arc<RowBlock>, Option<TableRow>),
}

impl BlockReader {
    /// Index of the record with this exact timestamp.
    pub fn find(&self, ts: u64) -> Option<usize> {
        match self {
            BlockReader::Lookup(lookup) => lookup.find(ts),
            BlockReader::Parsed(block) => block.find(ts),
            BlockReader::Row(_, row) => row.as_ref().filter(|r| r.meta.timestamp == ts).map(|_| 0),
        }
    }

    /// The metadata of record `index`.
    pub fn meta(&self, index: usize) -> RecordMeta {
        match self {
            BlockReader::Lookup(lookup) => lookup.meta(index),
            BlockReader::Parsed(block) => block.records()[index].meta.clone(),
            BlockReader::Row(_, row) => Self::row(row).meta.clone(),
        }
    }

    /// Whether record `index` lies in a compressed frame (a read decodes it).
    fn is_encoded(&self, index: usize) -> bool {
        let (frames, frame) = match self {
            BlockReader::Lookup(lookup) => (lookup.frames(), lookup.frame_of(index)),
            BlockReader::Parsed(block) => (block.frames(), block.records()[index].frame),
            BlockReader::Row(body, row) => (body.frames(), Self::row(row).frame),
        };
        frames[frame as usize].codec != Codec::None
    }

    /// The payload of record `index`, decoding its frame unless `decoded` holds it.
    fn payload(&self, index: usize, decoded: &mut DecodedFrame) -> Result<Payload> {
        match self {
            BlockReader::Lookup(lookup) => lookup.payload(index, decoded),
            BlockReader::Parsed(block) => block.payload_with(index, decoded),
            BlockReader::Row(body, row) => {
                let row = Self::row(row);
                body.payload(row.frame, row.offset, row.meta.size, decoded)
            }
        }
    }

    /// The row of a [`BlockReader::Row`], which callers index only after `find` found it.
    fn row(row: &Option<TableRow>) -> &TableRow {
        row.as_ref()
            .expect("a row reader is indexed only after find found its row")
    }
}

/// A block opened to read one row ([`BlockReader::Row`]), and the row at the timestamp
/// asked for, if it has one.
pub type OpenedRow = (RowBlock, Option<TableRow>);

/// When the lookups' budget is full, one miss in this many builds and keeps the block's
/// lookup (evicting others); the rest read just the row asked for. Building a lookup
/// decodes the block's whole table, which reads spread over more blocks than the budget
/// holds would throw away again before using it; admitting some keeps the cache following
/// the blocks read most.
const ADMIT_ONE_IN: u64 = 32;

/// Memory for remembering which frames of which block files passed their checksum: about
/// 60,000 blocks (60 GB of 1 MiB blocks), the oldest forgotten first. Not a setting: it
/// is a few MiB.
pub const FRAME_CHECK_BYTES: usize = 8 << 20;

/// What remembering one block's checks costs besides the checks: the map's slot (key,
/// pointer, tick, cost) and its share of the table's spare room.
const CHECK_OVERHEAD: usize = 64;

/// What the caches may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheLimits {
    /// Parsed blocks (at least one is kept).
    pub blocks: usize,
    /// Bytes of parsed blocks (their tables; a block larger than this is not kept).
    pub block_bytes: usize,
    /// Bytes of block lookups.
    pub lookup_bytes: usize,
    /// Bytes of decoded frames kept for the next read of their block.
    pub decoded_bytes: usize,
}

/// Use and hit counts of the caches, for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Parsed blocks held, and how many may be.
    pub blocks: (u64, u64),
    /// Bytes of the parsed blocks held, and the budget.
    pub block_bytes: (u64, u64),
    /// Look-ups of a parsed block that found it, and that had to map and parse it.
    pub block_hits: u64,
    /// See `block_hits`.
    pub block_misses: u64,
    /// Lookups held, their bytes and the budget.
    pub lookups: (u64, u64, u64),
    /// Reads and duplicate checks answered by a cached lookup, and by one built first.
    pub lookup_hits: u64,
    /// See `lookup_hits`.
    pub lookup_misses: u64,
    /// Bytes of decoded frames held, and the budget.
    pub decoded_bytes: (u64, u64),
    /// Block files whose frame checks are remembered, their bytes and the budget.
    pub frame_checks: (u64, u64, u64),
}

/// The caches of one store.
pub struct BlockCache {
    inner: Mutex<CacheInner>,
    block_hits: AtomicU64,
    block_misses: AtomicU64,
    lookup_hits: AtomicU64,
    lookup_misses: AtomicU64,
    /// Lookup misses while the lookups' budget was full (see [`ADMIT_ONE_IN`]).
    full_misses: AtomicU64,
}

struct CacheInner {
    blocks: Lru<BlockKey, Arc<SealedBlock>>,
    lookups: Lru<BlockKey, Arc<BlockLookup>>,
    decoded: Lru<BlockKey, (u32, Arc<Vec<u8>>)>,
    checks: Lru<BlockKey, Arc<FrameChecks>>,
}

impl BlockCache {
    /// Caches within `limits`.
    pub fn new(limits: CacheLimits) -> Self {
        BlockCache {
            inner: Mutex::new(CacheInner {
                blocks: Lru::with_max_items(limits.block_bytes, limits.blocks),
                lookups: Lru::new(limits.lookup_bytes),
                decoded: Lru::new(limits.decoded_bytes),
                checks: Lru::new(FRAME_CHECK_BYTES),
            }),
            block_hits: AtomicU64::new(0),
            block_misses: AtomicU64::new(0),
            lookup_hits: AtomicU64::new(0),
            lookup_misses: AtomicU64::new(0),
            full_misses: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheInner> {
        // The cache holds no invariant a panic could break; keep serving after one.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers the frame checks of a block just mapped.
    fn remember_checks(inner: &mut CacheInner, key: BlockKey, checks: &Arc<FrameChecks>) {
        inner
            .checks
            .insert(key, checks.clone(), checks.heap_bytes() + CHECK_OVERHEAD);
    }

    /// The cached block, or `open` it (given the frame checks remembered for it) and
    /// remember it.
    pub fn get_or_open(
        &self,
        key: BlockKey,
        open: impl FnOnce(Option<Arc<FrameChecks>>) -> Result<SealedBlock>,
    ) -> Result<Arc<SealedBlock>> {
        let known = {
            let mut inner = self.lock();
            if let Some(block) = inner.blocks.get(&key) {
                self.block_hits.fetch_add(1, Ordering::Relaxed);
                return Ok(block);
            }
            inner.checks.get(&key)
        };
        self.block_misses.fetch_add(1, Ordering::Relaxed);
        // Map and parse without holding the lock; a racing opener just wins or loses.
        let block = Arc::new(open(known)?);
        let cost = block.heap_bytes();
        let mut inner = self.lock();
        Self::remember_checks(&mut inner, key, block.body().checks());
        inner.blocks.insert(key, block.clone(), cost);
        Ok(block)
    }

    /// What reads the block by timestamp: its lookup — cached, or built from its cached
    /// parsed view, or from its table's columns (`open_lookup`, which answers `None` when
    /// the block cannot be read that way: edits to apply, an older table format), or else
    /// from the block parsed with `open` (its parsed view then dropped, not cached: a
    /// random reader would otherwise churn the parsed blocks queries stream from). The
    /// parsed view instead when lookups have no budget or the block is too large for one.
    /// When the lookups' budget is full, most misses read only the row asked for instead
    /// (`open_row`, `None` when the block cannot be read that way): see [`ADMIT_ONE_IN`].
    ///
    /// The openers are given the frame checks remembered for the block.
    pub fn reader(
        &self,
        key: BlockKey,
        open_lookup: impl FnOnce(Option<Arc<FrameChecks>>) -> Result<Option<BlockLookup>>,
        open_row: impl FnOnce(Option<Arc<FrameChecks>>) -> Result<Option<OpenedRow>>,
        open: impl FnOnce(Option<Arc<FrameChecks>>) -> Result<SealedBlock>,
    ) -> Result<BlockReader> {
        let (parsed, admit, known) = {
            let mut inner = self.lock();
            if let Some(lookup) = inner.lookups.get(&key) {
                self.lookup_hits.fetch_add(1, Ordering::Relaxed);
                return Ok(BlockReader::Lookup(lookup));
            }
            if inner.lookups.budget == 0 {
                drop(inner);
                return self.get_or_open(key, open).map(BlockReader::Parsed);
            }
            let admit = !inner.lookups.is_full()
                || self
                    .full_misses
                    .fetch_add(1, Ordering::Relaxed)
                    .is_multiple_of(ADMIT_ONE_IN);
            // The frame checks remembered for the block, for whichever opener runs.
            (inner.blocks.get(&key), admit, inner.checks.get(&key))
        };
        self.lookup_misses.fetch_add(1, Ordering::Relaxed);
        if parsed.is_none()
            && !admit
            && let Some((body, row)) = open_row(known.clone())?
        {
            Self::remember_checks(&mut self.lock(), key, body.checks());
            return Ok(BlockReader::Row(Arc::new(body), row));
        }
        let built = match parsed {
            Some(view) => BlockLookup::of(&view).ok_or(view),
            None => match open_lookup(known.clone())? {
                Some(lookup) => Ok(lookup),
                None => {
                    let view = Arc::new(open(known)?);
                    BlockLookup::of(&view).ok_or(view)
                }
            },
        };
        let lookup = match built {
            Ok(lookup) => Arc::new(lookup),
            Err(view) => {
                let cost = view.heap_bytes();
                let mut inner = self.lock();
                Self::remember_checks(&mut inner, key, view.body().checks());
                inner.blocks.insert(key, view.clone(), cost);
                return Ok(BlockReader::Parsed(view));
            }
        };
        let cost = lookup.heap_bytes();
        let mut inner = self.lock();
        Self::remember_checks(&mut inner, key, lookup.checks());
        inner.lookups.insert(key, lookup.clone(), cost);
        Ok(BlockReader::Lookup(lookup))
    }

    /// Whether the block holds a record at `ts` (the duplicate check of a write).
    pub fn contains(
        &self,
        key: BlockKey,
        ts: u64,
        open_lookup: impl FnOnce(Option<Arc<FrameChecks>>) -> Result<Option<BlockLookup>>,
        open_row: impl FnOnce(Option<Arc<FrameChecks>>) -> Result<Option<OpenedRow>>,
        open: impl FnOnce(Option<Arc<FrameChecks>>) -> Result<SealedBlock>,
    ) -> Result<bool> {
        Ok(self
            .reader(key, open_lookup, open_row, open)?
            .find(ts)
            .is_some())
    }

    /// The payload of record `index` of the block `key` that `reader` reads: a slice of
    /// the mapping for a stored frame; for a compressed one, of the frame decoded, or of
    /// the one kept from the block's last read (taken while this read uses it, then kept
    /// again with whatever it decoded).
    pub fn payload(&self, key: BlockKey, reader: &BlockReader, index: usize) -> Result<Payload> {
        if !reader.is_encoded(index) {
            return reader.payload(index, &mut None);
        }
        let mut decoded = self.lock().decoded.remove(&key);
        let payload = reader.payload(index, &mut decoded);
        if let Some((frame, bytes)) = decoded {
            let cost = bytes.len();
            self.lock().decoded.insert(key, (frame, bytes), cost);
        }
        payload
    }

    /// Applies an edit of block `key`'s records to its cached view and lookup, in place:
    /// what it costs is the change of the records it names, not a parse or a rebuild of
    /// the block (a lookup that cannot take it in place is rebuilt from the edited view,
    /// or dropped). A view or lookup a reader still holds is copied first, so a reader
    /// never sees a record change under it.
    pub fn edit(&self, key: BlockKey, change: &BlockChange) {
        let mut inner = self.lock();
        let mut edited: Option<Arc<SealedBlock>> = None;
        inner.blocks.update(&key, |view, cost| {
            if Arc::get_mut(view).is_none() {
                *view = Arc::new(view.fork());
            }
            let block = Arc::get_mut(view).expect("a view just forked has no other holder");
            let weigh = |block: &SealedBlock, ts: &u64| {
                block
                    .find(*ts)
                    .map_or(0, |i| record_heap_bytes(&block.records()[i].meta))
            };
            let before: usize = match change {
                BlockChange::Relabel(ts, _) => weigh(block, ts),
                BlockChange::Remove(gone) => gone.iter().map(|(ts, _)| weigh(block, ts)).sum(),
            };
            apply_change(block.records_mut(), change);
            let after = match change {
                BlockChange::Relabel(ts, _) => weigh(block, ts),
                BlockChange::Remove(_) => 0,
            };
            edited = Some(view.clone());
            Some((cost + after).saturating_sub(before))
        });
        inner.lookups.update(&key, |lookup, _| {
            let fitted = match Arc::get_mut(lookup) {
                Some(own) => edit_lookup(own, change),
                None => {
                    let mut copy = BlockLookup::clone(lookup);
                    let fitted = edit_lookup(&mut copy, change);
                    *lookup = Arc::new(copy);
                    fitted
                }
            };
            if !fitted {
                *lookup = Arc::new(BlockLookup::of(edited.as_deref()?)?);
            }
            Some(lookup.heap_bytes())
        });
    }

    /// Forgets a block whose file was replaced or removed.
    pub fn evict(&self, key: BlockKey) {
        let mut inner = self.lock();
        inner.blocks.remove(&key);
        inner.lookups.remove(&key);
        inner.decoded.remove(&key);
        inner.checks.remove(&key);
    }

    /// What the caches hold and how often they answered.
    pub fn stats(&self) -> CacheStats {
        let inner = self.lock();
        let n = |v: usize| v as u64;
        CacheStats {
            blocks: (n(inner.blocks.items.len()), n(inner.blocks.max_items)),
            block_bytes: (n(inner.blocks.used), n(inner.blocks.budget)),
            block_hits: self.block_hits.load(Ordering::Relaxed),
            block_misses: self.block_misses.load(Ordering::Relaxed),
            lookups: (
                n(inner.lookups.items.len()),
                n(inner.lookups.used),
                n(inner.lookups.budget),
            ),
            lookup_hits: self.lookup_hits.load(Ordering::Relaxed),
            lookup_misses: self.lookup_misses.load(Ordering::Relaxed),
            decoded_bytes: (n(inner.decoded.used), n(inner.decoded.budget)),
            frame_checks: (
                n(inner.checks.items.len()),
                n(inner.checks.used),
                n(inner.checks.budget),
            ),
        }
    }
}

/// Applies `change` to `lookup`; false when it must be rebuilt instead.
fn edit_lookup(lookup: &mut BlockLookup, change: &BlockChange) -> bool {
    match change {
        BlockChange::Relabel(ts, labels) => lookup.relabel(*ts, labels),
        // A timestamp it does not hold is already gone from it.
        BlockChange::Remove(gone) => {
            for (ts, _) in gone {
                lookup.remove(*ts);
            }
            true
        }
    }
}
