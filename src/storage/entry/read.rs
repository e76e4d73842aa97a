//! The read side of an entry: records by timestamp, the latest one, entry info, and the
//! chunks queries stream. Nothing here changes the entry's state.

use std::fs::File;
use std::ops::Range;
use std::sync::Arc;

use super::{Entry, EntryInfo, EntryState, Slot};
use crate::error::Result;
use crate::storage::format::block::SealedBlock;
use crate::storage::format::log::{LogRecord, OpenLog};
use crate::storage::record::{Payload, Record, RecordMeta};

/// A run of records a reader takes from one block without holding the entry lock.
pub enum Chunk {
    /// Records `range` of a mapped sealed block.
    Sealed(Arc<SealedBlock>, Range<usize>),
    /// Records of the open block, with the log file they live in.
    Open(Arc<File>, Vec<LogRecord>),
}

impl Entry {
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

    pub(super) fn oldest_of(st: &EntryState) -> Option<u64> {
        st.index
            .blocks
            .first()
            .map(|b| b.first_ts)
            .or_else(|| st.open.as_ref()?.records().keys().next().copied())
    }

    pub(super) fn latest_of(st: &EntryState) -> Option<u64> {
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
