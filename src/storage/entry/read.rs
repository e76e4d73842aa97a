//! The read side of an entry: records by timestamp, the latest one, and the
//! chunks queries stream. Nothing here changes the entry's state.
//!
//! Blocks may overlap in time, so a query walks the entry in stretches: where one block
//! (or log) alone covers a stretch, its records stream straight from it; where several
//! overlap, their records in the stretch are merged into timestamp order (a k-way merge
//! over the few sources that overlap, done by sorting that stretch's records).

use std::collections::HashSet;
use std::fs::File;
use std::ops::Range;
use std::sync::Arc;

use super::{Entry, EntryState, LogKind, Look, Place};

/// Reads a replica tries while its writer commits under them (`replica.rs`).
const REREADS: usize = 16;
use crate::error::{Error, Result};
use crate::storage::cache::OpenedRow;
use crate::storage::format::block::SealedBlock;
use crate::storage::format::block::row::RowBlock;
use crate::storage::format::columns::TableColumns;
use crate::storage::format::frames::{BlockFrames, DecodedFrame, FrameChecks};
use crate::storage::format::index::{BlockEntry, block_path};
use crate::storage::format::log::{LogRecord, OpenLog};
use crate::storage::format::lookup::BlockLookup;
use crate::storage::record::{Payload, Record, RecordMeta};

/// A run of records, in timestamp order, that a reader takes without holding the entry lock.
pub enum Chunk {
    /// Records `range` of a mapped sealed block.
    Sealed(Arc<SealedBlock>, Range<usize>),
    /// Records of a log, with the log file they live in.
    Open(Arc<File>, Vec<LogRecord>),
    /// Records of overlapping blocks and logs, merged into timestamp order.
    Merged(Vec<MergedRecord>),
}

/// One record of a [`Chunk::Merged`] and the source it comes from.
pub enum MergedRecord {
    /// Record `.1` of a sealed block.
    Sealed(Arc<SealedBlock>, usize),
    /// A record of a log.
    Log(Arc<File>, LogRecord),
}

impl MergedRecord {
    /// The record's metadata.
    pub(crate) fn meta(&self) -> &RecordMeta {
        match self {
            MergedRecord::Sealed(block, i) => &block.records()[*i].meta,
            MergedRecord::Log(_, rec) => &rec.meta,
        }
    }
}

/// A source of records that overlaps the stretch being read.
#[derive(Clone, Copy)]
enum Source {
    /// Sealed block at this position of the index.
    Sealed(usize),
    Log(LogKind),
}

impl Entry {
    /// The mapped block behind an index entry as readers see it (its edit log applied),
    /// for callers that do not hold the entry lock (merges).
    pub(crate) fn block(&self, b: &BlockEntry) -> Result<Arc<SealedBlock>> {
        let st = self.lock()?;
        self.block_in(&st, b)
    }

    /// [`Entry::block`] for callers holding the lock. Views are opened and changed only
    /// under the lock, so a cached view always carries every edit of its block.
    pub(crate) fn block_in(&self, st: &EntryState, b: &BlockEntry) -> Result<Arc<SealedBlock>> {
        self.ctx
            .cache
            .get_or_open((self.uid, b.seq), |known| self.open_block(st, b, known))
    }

    /// The block behind an index entry, mapped for copying its frames only (not cached, its
    /// record table not parsed): what recompression reads.
    pub(crate) fn block_frames(&self, b: &BlockEntry) -> Result<Arc<SealedBlock>> {
        SealedBlock::open_frames(
            &block_path(&self.dir, b.seq),
            self.describe(b),
            Some(b.meta_crc),
        )
        .map(Arc::new)
    }

    /// The block behind an index entry, mapped with its table parsed to be joined with
    /// others by recompression (not cached: a run would evict what readers use).
    pub(crate) fn block_for_joining(
        &self,
        b: &BlockEntry,
    ) -> Result<(Arc<BlockFrames>, TableColumns)> {
        SealedBlock::open_for_joining(
            &block_path(&self.dir, b.seq),
            self.describe(b),
            Some(b.meta_crc),
        )
    }

    /// Maps a sealed block to sample a few of its frames (no table parsed, nothing read
    /// ahead).
    pub(crate) fn block_for_sampling(&self, b: &BlockEntry) -> Result<SealedBlock> {
        SealedBlock::open_for_sampling(
            &block_path(&self.dir, b.seq),
            self.describe(b),
            Some(b.meta_crc),
        )
    }

    /// Maps a sealed block with its record table parsed (edit logs not applied), to
    /// sample what merging it with the blocks it overlaps would write.
    pub(crate) fn block_for_merge_sampling(&self, b: &BlockEntry) -> Result<SealedBlock> {
        SealedBlock::open(
            &block_path(&self.dir, b.seq),
            self.describe(b),
            Some(b.meta_crc),
        )
    }

    /// Maps and parses a block, its edits applied; `known`: the frame checks the cache
    /// remembers for it.
    fn open_block(
        &self,
        st: &EntryState,
        b: &BlockEntry,
        known: Option<Arc<FrameChecks>>,
    ) -> Result<SealedBlock> {
        let (path, fetch) = self.block_source(b, true)?;
        if fetch.is_some() {
            self.prefetch_after(st, b);
        }
        let mut block =
            SealedBlock::open_known(&path, self.describe(b), Some(b.meta_crc), known, fetch)?;
        if let Some(edits) = st.edits.get(&b.seq) {
            edits.apply(block.records_mut());
        }
        Ok(block)
    }

    /// The block's lookup made straight from its table's columns, without parsing its
    /// records; `None` when its edits must be applied to records first, or its table is
    /// older than format 3 (the caller parses it).
    fn open_lookup(
        &self,
        st: &EntryState,
        b: &BlockEntry,
        known: Option<Arc<FrameChecks>>,
    ) -> Result<Option<BlockLookup>> {
        if Self::has_edits(st, b) {
            return Ok(None);
        }
        let (path, fetch) = self.block_source(b, false)?;
        let (body, columns) =
            SealedBlock::open_columns(&path, self.describe(b), Some(b.meta_crc), known, fetch)?;
        Ok(columns.and_then(|c| BlockLookup::of_columns(body, c)))
    }

    /// The block's row at `ts` read from its table without decoding the others; `None`
    /// when its edits must be applied to records first, or its table is older than format
    /// 3 (the caller builds a lookup or parses it).
    fn open_row(
        &self,
        st: &EntryState,
        b: &BlockEntry,
        known: Option<Arc<FrameChecks>>,
        ts: u64,
    ) -> Result<Option<OpenedRow>> {
        // A tiered block is read through its frame cache, which positioned reads of the
        // stub would bypass: the caller builds a lookup instead.
        if Self::has_edits(st, b) || b.remote.is_some() {
            return Ok(None);
        }
        RowBlock::open(
            &block_path(&self.dir, b.seq),
            self.describe(b),
            Some(b.meta_crc),
            known,
            ts,
        )
    }

    /// Whether the block's records have edits (label changes, removals) to apply: then it
    /// is read parsed, not from its table's columns.
    fn has_edits(st: &EntryState, b: &BlockEntry) -> bool {
        st.edits.contains_key(&b.seq) || b.edited
    }

    fn describe(&self, b: &BlockEntry) -> String {
        format!(
            "block {} ({:016x}.blk) of entry {}/{}",
            b.first_ts, b.seq, self.bucket, self.name
        )
    }

    /// Where the record with timestamp `ts` lives, if it exists: the logs are asked first,
    /// then the few sealed blocks whose range contains `ts`.
    pub(crate) fn place(&self, st: &EntryState, ts: u64) -> Result<Option<Place>> {
        for (kind, log) in st.logs() {
            if log.records().contains_key(&ts) {
                return Ok(Some(Place::Log(kind)));
            }
        }
        for pos in st.covering(ts) {
            let block = self.block_in(st, &st.index.blocks[pos])?;
            if let Some(record) = block.find(ts) {
                return Ok(Some(Place::Sealed { pos, block, record }));
            }
        }
        Ok(None)
    }

    /// Whether a record with timestamp `ts` exists: the duplicate check of a write, which
    /// needs only the covering blocks' timestamps (see `storage::cache`).
    pub(super) fn has_record(&self, st: &EntryState, ts: u64) -> Result<bool> {
        if st.logs().any(|(_, log)| log.records().contains_key(&ts)) {
            return Ok(true);
        }
        for pos in st.covering(ts) {
            let b = &st.index.blocks[pos];
            let found = self.ctx.cache.contains(
                (self.uid, b.seq),
                ts,
                |known| self.open_lookup(st, b, known),
                |known| self.open_row(st, b, known, ts),
                |known| self.open_block(st, b, known),
            )?;
            if found {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The record with timestamp `ts`, or the latest one when `ts` is `None`. A sealed
    /// record is found through its block's compact lookup (`storage::cache`), so a read
    /// parses no record table once the lookup is cached, and decodes at most one frame.
    ///
    /// On a replica, a read that fails because its writer committed meanwhile (a file it
    /// needed was removed by a merge, a compress, a delete policy) is read again from the
    /// new state, a few times at most.
    pub fn read(&self, ts: Option<u64>) -> Result<Record> {
        let mut attempts = 1;
        loop {
            match self.read_once(ts) {
                Err(e) if self.ctx.read_only && attempts < REREADS => {
                    if self.follow_writer(false)? != Look::Committed {
                        return Err(e);
                    }
                    attempts += 1;
                }
                found => return found,
            }
        }
    }

    fn read_once(&self, ts: Option<u64>) -> Result<Record> {
        let st = self.lock()?;
        let ts = match ts {
            Some(ts) => ts,
            None => Self::latest_of(&st).unwrap_or(0),
        };
        let in_log = st.logs().find_map(|(_, log)| {
            let rec = log.records().get(&ts)?.clone();
            Some(log.file().map(|file| (rec, file)))
        });
        if let Some(found) = in_log {
            let (rec, file) = found?;
            drop(st);
            let payload = OpenLog::read_payload(&file, &rec)?;
            return Ok(self.record(rec.meta, payload));
        }
        let mut found = None;
        for pos in st.covering(ts) {
            let b = &st.index.blocks[pos];
            let key = (self.uid, b.seq);
            let reader = self.ctx.cache.reader(
                key,
                |known| self.open_lookup(&st, b, known),
                |known| self.open_row(&st, b, known, ts),
                |known| self.open_block(&st, b, known),
            )?;
            if let Some(index) = reader.find(ts) {
                found = Some((key, reader, index));
                break;
            }
        }
        if let Some((key, reader, index)) = found {
            drop(st);
            let payload = self.ctx.cache.payload(key, &reader, index)?;
            return Ok(self.record(reader.meta(index), payload));
        }
        Err(self.read_miss(&st, ts))
    }

    fn record(&self, meta: RecordMeta, payload: Payload) -> Record {
        Record {
            entry: self.name.clone(),
            meta,
            payload: Some(payload),
        }
    }

    /// The 404 of a read that found nothing, worded as ReductStore words it: naming the
    /// block (by its first timestamp) that would hold `ts`, or the entry when `ts` lies
    /// before every block.
    fn read_miss(&self, st: &EntryState, ts: u64) -> Error {
        let sealed = st.index.blocks.iter().map(|b| b.first_ts);
        let logs = st
            .logs()
            .filter_map(|(_, log)| log.records().keys().next().copied());
        match sealed.chain(logs).filter(|first| *first <= ts).max() {
            Some(block) => Error::not_found(format!(
                "Record {ts} not found in block {}/{}/{block}",
                self.bucket, self.name
            )),
            None => self.not_found(ts),
        }
    }

    /// The next run of records with `from <= ts < stop`, in timestamp order, and where the
    /// run after it starts. Readers call this repeatedly; each call takes the lock only
    /// briefly, so writers and compaction keep going while a long query streams. A block
    /// that cannot be opened comes back as an inner error (with `from` unchanged) and its
    /// sequence number in `broken`, so the next call goes on without it.
    pub fn next_chunk(
        &self,
        mut from: u64,
        stop: u64,
        broken: &mut HashSet<u64>,
    ) -> Result<Option<(Result<Chunk>, u64)>> {
        let mut st = self.lock()?;
        let mut rereads = 1;
        loop {
            if from >= stop {
                return Ok(None);
            }
            let Some((lo, end, active)) = Self::stretch(&st, from, stop, broken) else {
                return Ok(None);
            };
            match self.read_stretch(&st, lo, end, &active) {
                Ok(Some(chunk)) => return Ok(Some((Ok(chunk), end))),
                Ok(None) => from = end,
                Err(_) if self.ctx.read_only && rereads < REREADS => {
                    // A replica's writer committed under the read: on from the new state.
                    drop(st);
                    rereads += 1;
                    let look = self.follow_writer(false)?;
                    st = self.lock()?;
                    if look != Look::Committed {
                        rereads = REREADS;
                    }
                }
                Err((seq, e)) => {
                    broken.insert(seq);
                    return Ok(Some((Err(e), from)));
                }
            }
        }
    }

    /// The next stretch `[lo, end)` at or after `from` and the sources active in it: those
    /// that start at `lo`. The stretch ends where one of them ends or another starts, so no
    /// other source has records in it.
    fn stretch(
        st: &EntryState,
        from: u64,
        stop: u64,
        broken: &HashSet<u64>,
    ) -> Option<(u64, u64, Vec<Source>)> {
        // Each candidate as (start at or after `from`, last timestamp, source).
        let mut candidates: Vec<(u64, u64, Source)> = Vec::new();
        for (kind, log) in st.logs() {
            let mut range = log.records().range(from..stop);
            if let Some((&first, _)) = range.next() {
                let last = range.next_back().map_or(first, |(&l, _)| l);
                candidates.push((first, last, Source::Log(kind)));
            }
        }
        let mut lo = candidates.iter().map(|c| c.0).min().unwrap_or(u64::MAX);
        let mut end = stop;
        // Blocks are sorted by first timestamp, so the first one that starts after `lo`
        // bounds the stretch and no block after it can start earlier.
        for pos in st.first_reaching(from)..st.index.blocks.len() {
            let b = &st.index.blocks[pos];
            if b.first_ts >= stop {
                break;
            }
            if b.last_ts < from || broken.contains(&b.seq) {
                continue;
            }
            let start = b.first_ts.max(from);
            if start > lo {
                end = end.min(start);
                break;
            }
            lo = start;
            candidates.push((start, b.last_ts, Source::Sealed(pos)));
        }
        if lo >= stop {
            return None;
        }
        let mut active = Vec::new();
        for &(start, last, source) in &candidates {
            if start == lo {
                end = end.min(last.saturating_add(1));
                active.push(source);
            } else {
                end = end.min(start);
            }
        }
        Some((lo, end.max(lo.saturating_add(1)), active))
    }

    /// The records of `active` in `[lo, end)`, as one chunk; `None` when there are none. A
    /// block that cannot be opened is reported with its sequence number.
    fn read_stretch(
        &self,
        st: &EntryState,
        lo: u64,
        end: u64,
        active: &[Source],
    ) -> std::result::Result<Option<Chunk>, (u64, crate::error::Error)> {
        let open_block = |pos: usize| {
            let b = &st.index.blocks[pos];
            self.block_in(st, b).map_err(|e| (b.seq, e))
        };
        let log_records = |kind: LogKind| {
            let log = st.log(kind).expect("an active log exists");
            let records: Vec<LogRecord> = log
                .records()
                .range(lo..end)
                .map(|(_, r)| r.clone())
                .collect();
            // A log's number stands in for a block's in the report of a failure to open it.
            let seq = match kind {
                LogKind::Open => st.index.open_log,
                LogKind::Late => st.index.late_log,
            };
            let file = log.file().map_err(|e| (seq.unwrap_or(u64::MAX), e))?;
            Ok((file, records))
        };
        if let [only] = active {
            let chunk = match *only {
                Source::Sealed(pos) => {
                    let block = open_block(pos)?;
                    let range = block.range(lo, end);
                    (!range.is_empty()).then(|| Chunk::Sealed(block, range))
                }
                Source::Log(kind) => {
                    let (file, records) = log_records(kind)?;
                    (!records.is_empty()).then(|| Chunk::Open(file, records))
                }
            };
            return Ok(chunk);
        }
        let mut merged = Vec::new();
        for source in active {
            match *source {
                Source::Sealed(pos) => {
                    let block = open_block(pos)?;
                    for i in block.range(lo, end) {
                        merged.push(MergedRecord::Sealed(block.clone(), i));
                    }
                }
                Source::Log(kind) => {
                    let (file, records) = log_records(kind)?;
                    merged.extend(
                        records
                            .into_iter()
                            .map(|r| MergedRecord::Log(file.clone(), r)),
                    );
                }
            }
        }
        // Each source is sorted already; a sort of the concatenation is the k-way merge
        // (runs are detected, so this costs about n log k).
        merged.sort_by_key(|r| r.meta().timestamp);
        Ok((!merged.is_empty()).then_some(Chunk::Merged(merged)))
    }
}

/// The frames a query decoded last, each with the block it belongs to: a query walking a
/// compressed block decodes each frame once, and holds a few decoded frames at most — one
/// per block whose records it is interleaving (overlapping blocks merge record by
/// record), not one per block it ever read, left in blocks the cache keeps (hundreds of
/// megabytes once a few hundred compressed blocks had been queried).
#[derive(Default)]
pub(crate) struct LastFrame {
    /// Most recently used first.
    slots: Vec<(Arc<SealedBlock>, DecodedFrame)>,
}

/// Blocks whose last frame a query keeps at once: more than the overlapping blocks a
/// merged stretch interleaves before a background merge makes them disjoint (the
/// `max_block_overlap` default is 4).
const LAST_FRAME_SLOTS: usize = 8;

impl LastFrame {
    /// The payload of record `idx` of `block`, decoding its frame unless it is one held.
    fn payload(&mut self, block: &Arc<SealedBlock>, idx: usize) -> Result<Payload> {
        match self.slots.iter().position(|(b, _)| Arc::ptr_eq(b, block)) {
            Some(0) => {}
            Some(i) => {
                let slot = self.slots.remove(i);
                self.slots.insert(0, slot);
            }
            None => {
                self.slots.truncate(LAST_FRAME_SLOTS - 1);
                self.slots.insert(0, (block.clone(), None));
            }
        }
        let (block, frame) = &mut self.slots[0];
        block.payload_with(idx, frame)
    }
}

/// Reads the payload a chunk holds at position `i` (for query iterators; `last` keeps
/// the frame decoded for the next record).
pub(crate) fn chunk_record(
    chunk: &Chunk,
    i: usize,
    with_payload: bool,
    last: &mut LastFrame,
) -> Result<(RecordMeta, Option<Payload>)> {
    match chunk {
        Chunk::Sealed(block, range) => {
            let idx = range.start + i;
            let meta = block.records()[idx].meta.clone();
            let payload = if with_payload {
                Some(last.payload(block, idx)?)
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
        Chunk::Merged(records) => {
            let payload = match &records[i] {
                _ if !with_payload => None,
                MergedRecord::Sealed(block, idx) => Some(last.payload(block, *idx)?),
                MergedRecord::Log(file, rec) => Some(OpenLog::read_payload(file, rec)?),
            };
            Ok((records[i].meta().clone(), payload))
        }
    }
}

/// Where the record at position `i` of a chunk lives, to read it later (a query holding
/// context records): shares the block or copies the log record's metadata.
pub(crate) fn chunk_locator(chunk: &Chunk, i: usize) -> MergedRecord {
    match chunk {
        Chunk::Sealed(block, range) => MergedRecord::Sealed(block.clone(), range.start + i),
        Chunk::Open(file, records) => MergedRecord::Log(file.clone(), records[i].clone()),
        Chunk::Merged(records) => match &records[i] {
            MergedRecord::Sealed(block, idx) => MergedRecord::Sealed(block.clone(), *idx),
            MergedRecord::Log(file, rec) => MergedRecord::Log(file.clone(), rec.clone()),
        },
    }
}

/// The metadata and (with `with_payload`) payload of a located record.
pub(crate) fn locator_record(
    at: &MergedRecord,
    with_payload: bool,
    last: &mut LastFrame,
) -> Result<(RecordMeta, Option<Payload>)> {
    let payload = match at {
        _ if !with_payload => None,
        MergedRecord::Sealed(block, idx) => Some(last.payload(block, *idx)?),
        MergedRecord::Log(file, rec) => Some(OpenLog::read_payload(file, rec)?),
    };
    Ok((at.meta().clone(), payload))
}

/// Metadata of the record at position `i` of a chunk, without copying it.
pub(crate) fn chunk_meta(chunk: &Chunk, i: usize) -> &RecordMeta {
    match chunk {
        Chunk::Sealed(block, range) => &block.records()[range.start + i].meta,
        Chunk::Open(_, records) => &records[i].meta,
        Chunk::Merged(records) => records[i].meta(),
    }
}

/// Number of records in a chunk.
pub(crate) fn chunk_len(chunk: &Chunk) -> usize {
    match chunk {
        Chunk::Sealed(_, range) => range.len(),
        Chunk::Open(_, records) => records.len(),
        Chunk::Merged(records) => records.len(),
    }
}
