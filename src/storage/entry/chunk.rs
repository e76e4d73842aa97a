//! The runs of records a reader takes from an entry without holding its lock
//! ([`Chunk`], made by `read.rs`), and reading their records: metadata, payloads (with
//! the last decoded frames kept for the next record), and locators that keep a record
//! to read later.

use std::fs::File;
use std::ops::Range;
use std::sync::Arc;

use crate::error::Result;
use crate::storage::format::block::SealedBlock;
use crate::storage::format::frames::DecodedFrame;
use crate::storage::format::log::{LogRecord, OpenLog};
use crate::storage::record::{Payload, RecordMeta};

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
