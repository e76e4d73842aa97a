//! The read side of an entry: records by timestamp, the latest one, and the
//! chunks queries stream (`chunk.rs`). Nothing here changes the entry's state.
//!
//! Blocks may overlap in time, so a query walks the entry in stretches: where one block
//! (or log) alone covers a stretch, its records stream straight from it; where several
//! overlap, their records in the stretch are merged into timestamp order (a k-way merge
//! over the few sources that overlap, done by sorting that stretch's records).

use std::collections::HashSet;
use std::sync::Arc;

use super::chunk::{Chunk, MergedRecord};
use super::{Entry, EntryState, LogKind, Look, Place};
use crate::error::{Error, Result};
use crate::storage::cache::OpenedRow;
use crate::storage::format::block::SealedBlock;
use crate::storage::format::block::row::RowBlock;
use crate::storage::format::columns::TableColumns;
use crate::storage::format::frames::{BlockFrames, FrameChecks};
use crate::storage::format::index::{BlockEntry, block_path};
use crate::storage::format::log::{LogRecord, OpenLog};
use crate::storage::format::lookup::BlockLookup;
use crate::storage::record::{Payload, Record, RecordMeta};

/// Reads a replica tries while its writer commits under them (`replica.rs`).
const REREADS: usize = 16;

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
            let seq = st.log_seq(kind);
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
